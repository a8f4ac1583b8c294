// shardscope-cli check FILE.hlo: parse and verify an HLO module, print a one-screen summary (with
// the Shardy mesh and its axis names, whether it is already an SPMD program, its source tables).
// --source NAME prints where instruction NAME came from (file:line and the call stack);
// --sources lists every instruction that has a source location.
#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "core/ir/hlo_text.h"
#include "core/ir/spmd_program.h"

namespace {

int Run(const std::vector<std::string>& args_in) {
  std::vector<std::string> args = args_in;
  const bool no_verify = shardscope::cli::TakeFlag(args, "no-verify");
  const bool list_sources = shardscope::cli::TakeFlag(args, "sources");
  std::string source_of;
  const bool has_source_of = shardscope::cli::TakeOption(args, "source", &source_of);
  if (int rc = shardscope::cli::RejectUnknownOptions("check", args)) return rc;
  if (args.size() != 1) return shardscope::cli::UsageError("check", "expected one FILE.hlo (see --help)");
  const std::string& path = args[0];
  std::string text;
  if (!shardscope::cli::ReadFile(path, &text)) return 2;
  std::vector<std::string> warnings;
  shardscope::ParseOptions options;
  options.verify = !no_verify;
  options.warnings = &warnings;
  auto parsed = shardscope::ParseHloModule(text, path, options);
  if (!parsed.ok()) {
    std::cerr << parsed.error().message << "\n";
    return 2;
  }
  for (const auto& w : warnings) std::cerr << w << "\n";
  const shardscope::Module& m = **parsed;
  if (has_source_of) {
    const shardscope::Instruction* inst = m.FindInstruction(source_of);
    if (!inst) return shardscope::cli::UsageError("check", "no instruction named '" + source_of + "' in " + path);
    auto loc = shardscope::SourceLocationOf(m, *inst);
    if (!loc) {
      std::cout << inst->name() << ": no source location (no stack_frame_id or source_file in its metadata)\n";
      return 0;
    }
    std::cout << inst->name() << ": " << loc->ToString() << "\n";
    for (size_t i = 0; i < loc->frames.size(); ++i)
      std::cout << (i == 0 ? "  at " : "  called from ") << loc->frames[i].ToString() << "\n";
    return 0;
  }
  if (list_sources) {
    for (const auto& c : m.computations())
      for (const auto& inst : c->instructions())
        if (auto loc = shardscope::SourceLocationOf(m, *inst))
          std::cout << c->name() << "/" << inst->name() << ": " << loc->frames[0].ToString() << "\n";
    return 0;
  }

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
  for (const auto& mesh : m.sdy_meshes) {
    std::cout << "  mesh:           " << mesh.name << " = ";
    if (mesh.mesh.num_axes() == 0)
      std::cout << (mesh.mesh.device_order().size() == 1 ? "maximal, device " + std::to_string(mesh.mesh.device_order()[0])
                                                          : std::string("empty"));
    else
      std::cout << mesh.mesh.ToString() << " (" << mesh.mesh.num_devices() << " devices)";
    std::cout << "\n";
  }
  if (m.is_scheduled) std::cout << "  scheduled:      yes (instruction order is the schedule)\n";
  if (auto evidence = shardscope::AlreadyPartitioned(m)) std::cout << "  SPMD program:   yes, " << *evidence << "\n";
  if (!m.stack_frames.empty()) {
    int64_t located = 0;
    for (const auto& c : m.computations())
      for (const auto& inst : c->instructions()) located += shardscope::SourceLocationOf(m, *inst).has_value();
    std::cout << "  source:         " << m.stack_frames.stack_frames.size() << " stack frames in "
              << m.stack_frames.file_names.size() << " files; " << located
              << " instructions located (--sources, --source NAME)\n";
  }
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
    {"check", "FILE.hlo [--no-verify] [--sources | --source NAME]",
     "Parse and verify an HLO module; print a summary (mesh, SPMD or not, source tables), or source lines", &Run});

}  // namespace
