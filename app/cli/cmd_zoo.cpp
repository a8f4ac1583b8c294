// shardscope-cli zoo list | zoo build NAME [--set k=v ...] [-o FILE.hlo]
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/model_zoo.h"

namespace {

using shardscope::cli::UsageError;

int List() {
  for (const auto& m : shardscope::ZooList()) {
    std::cout << m.name << (m.name == shardscope::kZooDefaultExample ? " (default example)" : "") << "\n  "
              << m.description << "\n";
    for (const auto& p : m.parameters) {
      std::string head = "    " + p.name + "=" + p.default_value;
      std::cout << head;
      if (head.size() < 28) std::cout << std::string(28 - head.size(), ' ');
      else std::cout << "  ";
      std::cout << p.description << "\n";
    }
  }
  return 0;
}

int Build(std::vector<std::string> args) {
  shardscope::ZooOverrides overrides;
  std::string kv;
  while (shardscope::cli::TakeOption(args, "set", &kv)) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return UsageError("zoo", "--set expects KEY=VALUE, found '" + kv + "'");
    overrides[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::string out = "-";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o" || args[i] == "--output") {
      if (i + 1 >= args.size()) return UsageError("zoo", args[i] + " needs a file name");
      out = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      break;
    }
    if (args[i].rfind("--output=", 0) == 0) {
      out = args[i].substr(9);
      args.erase(args.begin() + static_cast<long>(i));
      break;
    }
  }
  if (int rc = shardscope::cli::RejectUnknownOptions("zoo", args)) return rc;
  if (args.size() != 1) return UsageError("zoo", "usage: zoo build NAME [--set KEY=VALUE ...] [-o FILE.hlo]");
  auto module = shardscope::ZooBuild(args[0], overrides);
  if (!module.ok()) {
    std::cerr << "shardscope-cli zoo: " << module.error().message << "\n";
    return 2;
  }
  const std::string text = shardscope::PrintHloModule(**module);
  if (!shardscope::cli::WriteFile(out, text)) return 2;
  if (out != "-")
    std::cerr << "wrote " << out << ": module " << (*module)->name() << ", " << (*module)->instruction_count()
              << " instructions\n";
  return 0;
}

int Run(const std::vector<std::string>& args) {
  if (args.empty()) return UsageError("zoo", "expected 'list' or 'build NAME' (see zoo --help)");
  if (args[0] == "list") {
    if (args.size() != 1) return UsageError("zoo", "'zoo list' takes no arguments");
    return List();
  }
  if (args[0] == "build") return Build(std::vector<std::string>(args.begin() + 1, args.end()));
  return UsageError("zoo", "unknown zoo action '" + args[0] + "' (expected list or build)");
}

const bool registered = shardscope::cli::Register(
    {"zoo", "list | build NAME [--set KEY=VALUE ...] [-o FILE.hlo]",
     "List the built-in models, or build one (MLP, Transformer with GSPMD Table 1 annotations) as HLO text", &Run});

}  // namespace
