// shardscope-cli partition / verify: the SPMD partitioner and its numerical check.
#include <iostream>
#include <optional>

#include "app/cli/cli.h"
#include "app/cli/all_reduce_combiner_options.h"
#include "app/cli/windowed_einsum_options.h"
#include "app/cli/slice_options.h"
#include "app/cli/wus_options.h"
#include "app/pipeline/pipeline.h"
#include "core/ir/hlo_text.h"
#include "core/ir/spmd_program.h"

namespace shardscope::cli {
namespace {

// Parses, propagates (unless --no-propagate), partitions and, with `verify`, checks the program
// numerically. A module that is already an SPMD program (core/ir/spmd_program.h) is left as it is:
// *already_partitioned gets the evidence and out->module the module. Returns 0 on success, else the
// exit code to use (2: bad input).
int Prepare(const std::string& cmd, std::vector<std::string>& args, const std::optional<pipeline::VerifyOptions>& verify,
            pipeline::PipelineResult* out, std::string* already_partitioned) {
  const bool no_propagate = TakeFlag(args, "no-propagate");
  const bool keep_io = TakeFlag(args, "keep-io-shardings");
  bool wus = false;
  WeightUpdateShardingOptions wus_options;
  if (std::string e = TakeWeightUpdateShardingOptions(args, &wus, &wus_options); !e.empty()) return UsageError(cmd, e);
  std::optional<AllReduceCombinerOptions> combiner;
  if (std::string e = TakeAllReduceCombinerOptions(args, &combiner); !e.empty()) return UsageError(cmd, e);
  SpmdOptions spmd;
  if (std::string e = TakeWindowedEinsumOptions(args, &spmd); !e.empty()) return UsageError(cmd, e);
  std::string np_text;
  const bool has_np = TakeOption(args, "num-partitions", &np_text);
  if (int rc = RejectUnknownOptions(cmd, args)) return rc;
  if (args.size() != 1) return UsageError(cmd, "expected exactly one FILE.hlo (see --help)");
  std::string text;
  if (!ReadFile(args[0], &text)) return 2;
  auto m = ParseHloModule(text, args[0]);
  if (!m.ok()) {
    std::cerr << m.error().message << "\n";
    return 2;
  }
  if (auto evidence = AlreadyPartitioned(**m)) {
    *already_partitioned = *evidence;
    out->module = std::move(m).value();
    return 0;
  }
  pipeline::PipelineOptions options;
  options.spmd = spmd;
  // By default the pass may also shard the entry's parameters and outputs (what JAX asks for when
  // no in/out shardings are given); --keep-io-shardings uses XLA's pass defaults.
  if (no_propagate) options.propagation.reset();
  else options.propagation = pipeline::StandardPropagationOptions(keep_io ? pipeline::EntryIo::kKeep : pipeline::EntryIo::kShard);
  if (has_np) {
    try {
      options.spmd.num_partitions = std::stoll(np_text);
    } catch (...) {
      return UsageError(cmd, "--num-partitions takes a positive integer");
    }
    if (options.spmd.num_partitions < 1) return UsageError(cmd, "--num-partitions takes a positive integer");
  }
  options.verify = verify;
  options.all_reduce_combiner = combiner;
  if (wus) options.weight_update_sharding = wus_options;
  *out = pipeline::RunPipeline(std::move(m).value(), options);
  if (!out->ok()) {
    const std::string what = out->failed == pipeline::Stage::kPropagate ? "sharding propagation failed"
                             : out->failed == pipeline::Stage::kWeightUpdateSharding ? "weight-update sharding failed"
                             : out->failed == pipeline::Stage::kAllReduceCombiner    ? "all-reduce combiner failed"
                                                                                      : "partitioning failed";
    std::cerr << args[0] << ": error: " << what << ": " << out->status.error().message << "\n";
    return 2;
  }
  return 0;
}

void PrintCollectives(std::ostream& os, const PartitionResult& r) {
  os << "collectives inserted: " << r.collectives.size() << "\n";
  for (const auto& c : r.collectives)
    os << "  " << c.instruction << " = " << OpcodeName(c.kind) << " (" << c.bytes_per_device
       << " bytes/device, groups " << c.replica_groups << ") from " << c.origin << ": " << c.reason << "\n";
  if (!r.replicated_fallbacks.empty()) {
    os << "partitioned by replication (no dedicated handler):";
    for (const auto& op : r.replicated_fallbacks) os << " " << op;
    os << "\n";
  }
}

int RunPartition(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string out_path;
  const bool has_out = TakeOption(args, "o", &out_path) || TakeOption(args, "output", &out_path);
  const bool summary = TakeFlag(args, "summary");
  pipeline::PipelineResult p;
  std::string already;
  if (int rc = Prepare("partition", args, std::nullopt, &p, &already)) return rc;
  if (!already.empty()) {
    const std::string note = args[0] + ": already partitioned (" + already + "); left unchanged\n";
    if (has_out) {
      if (!WriteFile(out_path, PrintHloModule(*p.module))) return 2;
      std::cout << note;
    } else {
      std::cout << PrintHloModule(*p.module);
      std::cerr << note;
    }
    return 0;
  }
  const std::string text = PrintHloModule(*p.partition->module);
  std::ostream& report = has_out ? std::cout : std::cerr;
  const WeightUpdateShardingResult* w = p.weight_update_sharding ? &*p.weight_update_sharding : nullptr;
  if (has_out) {
    if (!WriteFile(out_path, text)) return 2;
    // The step split (weight-update sharding without a loop): the programs around the main one.
    if (w && w->split && (!WriteFile(out_path + ".sharding.hlo", PrintHloModule(*w->sharding_program)) ||
                          !WriteFile(out_path + ".unsharding.hlo", PrintHloModule(*w->unsharding_program))))
      return 2;
  } else {
    std::cout << text;
  }
  if (has_out || summary) {
    if (w) {
      // Collectives before the pass, what it did per weight, the collectives it inserted.
      PartitionResult before;
      before.collectives = p.collectives_before_weight_update_sharding;
      report << "before weight-update sharding: ";
      PrintCollectives(report, before);
      report << DescribeWeightUpdateSharding(*w);
      if (w->split && has_out) report << "sharding / unsharding programs: " << out_path << ".sharding.hlo, " << out_path << ".unsharding.hlo\n";
    } else {
      PrintCollectives(report, *p.partition);
    }
    if (p.all_reduce_combiner && p.all_reduce_combiner->changed())
      report << kAllReduceCombinerName << ": " << p.all_reduce_combiner->Summary() << "\n";
    if (p.code_motion && (!p.code_motion->sunk.empty() || !p.code_motion->kept.empty())) {
      report << kWhileLoopAllReduceCodeMotionName << ": " << p.code_motion->Summary() << "\n";
      if (summary)
        for (const auto& k : p.code_motion->kept)
          report << "  kept in " << k.while_loop << ": " << k.all_reduce << " (" << k.reason << ")\n";
    }
  }
  return 0;
}

int RunVerify(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string seed_text = "1";
  TakeOption(args, "seed", &seed_text);
  uint64_t seed = 1;
  try {
    seed = std::stoull(seed_text);
  } catch (...) {
    return UsageError("verify", "--seed takes a non-negative integer");
  }
  pipeline::PipelineResult p;
  std::string already;
  if (int rc = Prepare("verify", args, pipeline::VerifyOptions::Unlimited(seed), &p, &already)) return rc;
  if (!already.empty()) {
    std::cout << args[0] << ": already partitioned (" << already << "); there is no global program to compare it with\n";
    return 0;
  }
  const int64_t n = p.partition->module->num_partitions;
  if (p.verification.state == VerificationVerdict::State::kError) {
    std::cerr << args[0] << ": error: cannot evaluate: " << p.verification.reason << "\n";
    return 2;
  }
  const VerifyReport* v = &p.verification.report;
  std::cout << "devices: " << n << "\n";
  PrintCollectives(std::cout, *p.partition);
  if (p.verification.state == VerificationVerdict::State::kSkipped) {
    // Nothing to compare (a module reading infeed, ...), or nothing the comparison could decide
    // (ill-conditioned outputs, shown leaf by leaf): not a failed check.
    if (v->inconclusive) {
      std::cout << v->detail;
      if (!v->detail.empty() && v->detail.back() != '\n') std::cout << "\n";
    }
    std::cout << "verdict: not checked: " << p.verification.reason << "\n";
    return 0;
  }
  if (p.weight_update_sharding) std::cout << p.weight_update_sharding->summary << "\n";
  std::cout << v->detail;
  if (!v->detail.empty() && v->detail.back() != '\n') std::cout << "\n";
  std::cout << (v->match ? "verdict: match" : "verdict: MISMATCH") << " (tolerance " << v->tolerance << ")\n";
  std::cout << "max_abs_error: " << v->max_abs_error << "\n";
  return v->match ? 0 : 1;
}

const bool kPartition = Register({"partition",
                                  "FILE.hlo [-o OUT.hlo] [--no-propagate] [--keep-io-shardings] [--num-partitions N] " WINDOWED_EINSUM_OPTION_USAGE " [--summary] "
                                  ALL_REDUCE_COMBINER_OPTION_USAGE " [--weight-update-sharding [" WUS_OPTION_USAGE "]]",
                                  "Propagate shardings, then partition into the SPMD program every device runs",
                                  &RunPartition});
const bool kVerify = Register({"verify",
                               "FILE.hlo [--seed N] [--no-propagate] [--keep-io-shardings] [--num-partitions N] " WINDOWED_EINSUM_OPTION_USAGE " "
                               ALL_REDUCE_COMBINER_OPTION_USAGE " [--weight-update-sharding [" WUS_OPTION_USAGE "]]",
                               "Run the module unpartitioned and partitioned on virtual devices and compare",
                               &RunVerify});

}  // namespace
}  // namespace shardscope::cli
