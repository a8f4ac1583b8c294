// shardscope-cli: the headless tool. Links core, partitioner and simulator; no widgets.
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "shardscope_version.h"

namespace {

void PrintHelp() {
  std::cout << "shardscope-cli " << SHARDSCOPE_VERSION
            << " — explore how an ML computation graph is sharded across a device mesh\n\n"
               "Usage: shardscope-cli COMMAND [ARGS...]\n\nCommands:\n";
  for (const auto& c : shardscope::cli::Commands()) {
    std::string head = "  " + c.name + " " + c.usage;
    std::cout << head;
    if (head.size() < 44) std::cout << std::string(44 - head.size(), ' ');
    else std::cout << "\n" << std::string(44, ' ');
    std::cout << c.summary << "\n";
  }
  std::cout << "\n  --help                                    this text\n"
               "  --version                                 print the version\n"
               "\nExit status: 0 success, 1 a check failed, 2 bad input or usage.\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintHelp();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "shardscope-cli " << SHARDSCOPE_VERSION << "\n";
    return 0;
  }
  for (const auto& c : shardscope::cli::Commands()) {
    if (c.name == args[0]) {
      std::vector<std::string> rest(args.begin() + 1, args.end());
      if (!rest.empty() && (rest[0] == "--help" || rest[0] == "-h")) {
        std::cout << "Usage: shardscope-cli " << c.name << " " << c.usage << "\n" << c.summary << "\n";
        return 0;
      }
      return c.run(rest);
    }
  }
  std::cerr << "shardscope-cli: unknown command '" << args[0] << "' (see --help)\n";
  return 2;
}
