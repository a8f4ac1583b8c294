// shardscope-cli check FILE.hlo: parse and verify an HLO module, print a one-screen summary.
#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "core/ir/hlo_text.h"

namespace {

int Run(const std::vector<std::string>& args_in) {
  std::vector<std::string> args = args_in;
  const bool no_verify = shardscope::cli::TakeFlag(args, "no-verify");
  if (args.size() != 1) return shardscope::cli::UsageError("check", "expected one FILE.hlo (see --help)");
  const std::string& path = args[0];
  std::string text;
  if (!shardscope::cli::ReadFile(path, &text)) return 2;
  shardscope::ParseOptions options;
  options.verify = !no_verify;
  auto parsed = shardscope::ParseHloModule(text, path, options);
  if (!parsed.ok()) {
    std::cerr << parsed.error().message << "\n";
    return 2;
  }
  const shardscope::Module& m = **parsed;

  std::map<std::string, int64_t> by_opcode;
  int64_t annotated = 0, total = 0;
  for (const auto& c : m.computations()) {
    for (const auto& inst : c->instructions()) {
      ++total;
      ++by_opcode[inst->opcode() == shardscope::Opcode::kGeneric ? inst->opcode_text()
                                                                 : std::string(shardscope::OpcodeName(inst->opcode()))];
      if (inst->has_sharding()) ++annotated;
    }
  }
  std::vector<std::pair<std::string, int64_t>> ops(by_opcode.begin(), by_opcode.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });

  std::cout << path << ": module '" << m.name() << "' " << (no_verify ? "parsed (not verified)" : "parsed and verified")
            << "\n";
  std::cout << "  num_partitions: " << m.num_partitions << "   replica_count: " << m.num_replicas << "\n";
  std::cout << "  computations:   " << m.computations().size() << " (entry: "
            << (m.entry() ? m.entry()->name() : std::string("none")) << ")\n";
  std::cout << "  instructions:   " << total << " (entry: " << (m.entry() ? m.entry()->instruction_count() : 0)
            << ")\n";
  std::cout << "  annotated:      " << annotated << " instruction" << (annotated == 1 ? "" : "s")
            << " with a sharding\n";
  std::cout << "  by opcode:\n";
  const size_t shown = std::min<size_t>(ops.size(), 24);
  std::string line = "   ";
  for (size_t i = 0; i < shown; ++i) {
    std::string item = " " + ops[i].first + " " + std::to_string(ops[i].second);
    if (i + 1 < shown) item += ",";
    if (line.size() + item.size() > 96) {
      std::cout << line << "\n";
      line = "   ";
    }
    line += item;
  }
  if (shown < ops.size()) line += ", ... (" + std::to_string(ops.size() - shown) + " more opcodes)";
  std::cout << line << "\n";
  return 0;
}

const bool registered = shardscope::cli::Register(
    {"check", "FILE.hlo [--no-verify]", "Parse and verify an HLO module; print a summary", &Run});

}  // namespace
