// shardscope-cli propagate FILE.hlo [-o OUT.hlo] [--explain NAME]...: completes every sharding of a
// module from its annotations (GSPMD sharding propagation) and writes the module back out. By
// default the entry's parameters and outputs may be sharded too (as `partition` does);
// --keep-io-shardings uses XLA's pass defaults (they keep what they have, unannotated ones stay
// without a sharding); --to-output / --to-parameters give the flags per output / parameter.
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "app/pipeline/propagate.h"
#include "core/ir/hlo_text.h"

namespace {

std::vector<bool> ParseBoolList(const std::string& text) {
  std::vector<bool> out;
  std::string item;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',') {
      if (!item.empty()) out.push_back(item == "1" || item == "true" || item == "yes");
      item.clear();
    } else if (text[i] != ' ' && text[i] != '{' && text[i] != '}') {
      item += text[i];
    }
  }
  return out;
}

int Run(const std::vector<std::string>& args_in) {
  using namespace shardscope;
  std::vector<std::string> args = args_in;
  std::string out_path, to_output, to_params;
  std::vector<std::string> explain;
  cli::TakeOption(args, "o", &out_path) || cli::TakeOption(args, "output", &out_path);
  for (size_t i = 0; i < args.size();) {
    if (args[i] == "-o" && i + 1 < args.size()) {
      out_path = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
    } else {
      ++i;
    }
  }
  std::string name;
  while (cli::TakeOption(args, "explain", &name)) explain.push_back(name);
  const bool not_spmd = cli::TakeFlag(args, "not-spmd");
  const bool cse_only = cli::TakeFlag(args, "cse-prevention-only");
  const bool quiet = cli::TakeFlag(args, "quiet");
  const bool no_verify = cli::TakeFlag(args, "no-verify");
  const bool keep_io = cli::TakeFlag(args, "keep-io-shardings");
  cli::TakeOption(args, "to-output", &to_output);
  cli::TakeOption(args, "to-parameters", &to_params);
  if (int rc = cli::RejectUnknownOptions("propagate", args)) return rc;
  if (args.size() != 1) {
    return cli::UsageError("propagate", "expected one FILE.hlo (see --help)");
  }
  std::string text;
  if (!cli::ReadFile(args[0], &text)) return 2;
  ParseOptions po;
  po.verify = false;
  auto parsed = ParseHloModule(text, args[0], po);
  if (!parsed.ok()) {
    std::cerr << parsed.error().message << "\n";
    return 2;
  }
  Module& module = **parsed;
  PropagationOptions options =
      pipeline::StandardPropagationOptions(keep_io ? pipeline::EntryIo::kKeep : pipeline::EntryIo::kShard);
  options.is_spmd = !not_spmd;
  options.cse_prevention_only = cse_only;
  options.verify = !no_verify;
  if (!to_output.empty()) options.propagate_to_output = ParseBoolList(to_output);
  if (!to_params.empty()) options.propagate_to_parameters = ParseBoolList(to_params);
  auto run = pipeline::Propagate(module, options);
  if (!run.ok()) {
    std::cerr << args[0] << ": " << run.error().message << "\n";
    return 2;
  }
  const ShardingPropagation& propagation = *run->engine;
  const PropagationReport* report = &run->report;
  for (const auto& e : explain) {
    const Instruction* inst = module.FindInstruction(e);
    if (inst == nullptr) {
      std::cerr << "propagate: --explain: no instruction named '" << e << "'\n";
      return 2;
    }
    std::cout << propagation.ExplainText(*inst);
    if (auto loc = SourceLocationOf(module, *inst)) std::cout << "  source: " << loc->frames[0].ToString() << "\n";
  }
  if (!out_path.empty()) {
    if (!cli::WriteFile(out_path, PrintHloModule(module))) return 2;
  } else if (explain.empty()) {
    std::cout << PrintHloModule(module);
  }
  if (!quiet) {
    std::cerr << "propagate: " << report->instructions << " instructions, " << report->annotated << " annotated, "
              << report->unsharded << " left without a sharding, " << report->iterations << " sweeps, "
              << report->elapsed_ms << " ms\n";
    for (const auto& op : report->unsupported_ops) std::cerr << "propagate: no propagation rule for op '" << op << "'\n";
  }
  return 0;
}

const bool registered = shardscope::cli::Register(
    {"propagate",
     "FILE.hlo [-o OUT.hlo] [--explain NAME]... [--not-spmd] [--keep-io-shardings] [--to-output 1,0] "
     "[--to-parameters 1] [--cse-prevention-only] [--no-verify] [--quiet]",
     "Complete every sharding from the annotations (GSPMD propagation); --explain prints why", &Run});

}  // namespace
