// shardscope-cli print FILE.hlo [-o OUT]: parse an HLO module and write it back as canonical text.
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "core/ir/hlo_text.h"

namespace {

int Run(const std::vector<std::string>& args_in) {
  std::vector<std::string> args = args_in;
  std::string out = "-";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o") {
      if (i + 1 >= args.size()) return shardscope::cli::UsageError("print", "-o needs a file name");
      out = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      break;
    }
  }
  shardscope::cli::TakeOption(args, "output", &out);
  shardscope::PrintOptions print_options;
  shardscope::ParseOptions parse_options;
  parse_options.verify = !shardscope::cli::TakeFlag(args, "no-verify");
  print_options.print_layouts = !shardscope::cli::TakeFlag(args, "no-layouts");
  print_options.print_metadata = !shardscope::cli::TakeFlag(args, "no-metadata");
  print_options.print_backend_config = !shardscope::cli::TakeFlag(args, "no-backend-config");
  if (int rc = shardscope::cli::RejectUnknownOptions("print", args)) return rc;
  if (args.size() != 1) return shardscope::cli::UsageError("print", "expected one FILE.hlo (see --help)");
  std::string text;
  if (!shardscope::cli::ReadFile(args[0], &text)) return 2;
  auto parsed = shardscope::ParseHloModule(text, args[0], parse_options);
  if (!parsed.ok()) {
    std::cerr << parsed.error().message << "\n";
    return 2;
  }
  return shardscope::cli::WriteFile(out, shardscope::PrintHloModule(**parsed, print_options)) ? 0 : 2;
}

const bool registered = shardscope::cli::Register(
    {"print", "FILE.hlo [-o OUT] [--no-verify] [--no-layouts] [--no-metadata] [--no-backend-config]",
     "Parse an HLO module and print it as canonical HLO text", &Run});

}  // namespace
