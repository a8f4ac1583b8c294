// shardscope-cli partition / verify: the SPMD partitioner and its numerical check.
#include <iostream>
#include <optional>
#include <sstream>

#include "app/cli/cli.h"
#include "core/ir/hlo_text.h"
#include "core/eval/numeric_verify.h"
#include "partitioner/propagation.h"
#include "partitioner/spmd_partitioner.h"
#include "partitioner/weight_update_sharding/weight_update_sharding.h"
#include "app/cli/wus_options.h"

namespace shardscope::cli {
namespace {

struct Prepared {
  std::unique_ptr<Module> annotated;  // after propagation
  PartitionResult partition;
  std::vector<InsertedCollective> before;           // the partitioner's collectives (weight-update sharding on)
  std::optional<WeightUpdateShardingResult> wus;    // --weight-update-sharding
};

// Parses, propagates (unless --no-propagate) and partitions. Returns 0 on success, else the exit
// code to use (2: bad input).
int Prepare(const std::string& cmd, std::vector<std::string>& args, Prepared* out) {
  const bool no_propagate = TakeFlag(args, "no-propagate");
  WeightUpdateShardingOptions wus_options;
  bool wus = false;
  if (std::string e = TakeWeightUpdateShardingOptions(args, &wus, &wus_options); !e.empty()) return UsageError(cmd, e);
  const bool keep_io = TakeFlag(args, "keep-io-shardings");
  std::string np_text;
  const bool has_np = TakeOption(args, "num-partitions", &np_text);
  if (args.size() != 1) return UsageError(cmd, "expected exactly one FILE.hlo (see --help)");
  std::string text;
  if (!ReadFile(args[0], &text)) return 2;
  auto m = ParseHloModule(text, args[0]);
  if (!m.ok()) {
    std::cerr << m.error().message << "\n";
    return 2;
  }
  if (!no_propagate) {
    // By default the pass may also shard the entry's parameters and outputs (what JAX asks for
    // when no in/out shardings are given); --keep-io-shardings uses XLA's pass defaults.
    PropagationOptions po;
    if (!keep_io) {
      po.propagate_to_output = {true};
      po.propagate_to_parameters = {true};
    }
    auto p = PropagateShardings(**m, po);
    if (!p.ok()) {
      std::cerr << args[0] << ": error: sharding propagation failed: " << p.error().message << "\n";
      return 2;
    }
  }
  SpmdOptions so;
  if (has_np) {
    try {
      so.num_partitions = std::stoll(np_text);
    } catch (...) {
      return UsageError(cmd, "--num-partitions takes a positive integer");
    }
    if (so.num_partitions < 1) return UsageError(cmd, "--num-partitions takes a positive integer");
  }
  auto r = PartitionModule(**m, so);
  if (!r.ok()) {
    std::cerr << args[0] << ": error: partitioning failed: " << r.error().message << "\n";
    return 2;
  }
  out->annotated = std::move(m).value();
  out->partition = std::move(r).value();
  if (wus) {
    out->before = out->partition.collectives;
    auto w = ShardWeightUpdatesOf(out->partition, wus_options);
    if (!w.ok()) {
      std::cerr << args[0] << ": error: " << w.error().message << "\n";
      return 2;
    }
    out->wus = std::move(w).value();
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
  Prepared p;
  if (int rc = Prepare("partition", args, &p)) return rc;
  const std::string text = PrintHloModule(*p.partition.module);
  std::ostream& report = has_out ? std::cout : std::cerr;
  if (has_out) {
    if (!WriteFile(out_path, text)) return 2;
    if (p.wus && p.wus->split && (!WriteFile(out_path + ".sharding.hlo", PrintHloModule(*p.wus->sharding_program)) ||
                                  !WriteFile(out_path + ".unsharding.hlo", PrintHloModule(*p.wus->unsharding_program))))
      return 2;
  } else {
    std::cout << text;
  }
  if (has_out || summary) {
    if (p.wus) {
      report << "before weight-update sharding:\n";
      PartitionResult before;
      before.collectives = p.before;
      PrintCollectives(report, before);
      report << DescribeWeightUpdateSharding(*p.wus);
      if (p.wus->split && has_out)
        report << "sharding and unsharding programs: " << out_path << ".sharding.hlo, " << out_path << ".unsharding.hlo\n";
    } else {
      PrintCollectives(report, p.partition);
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
  Prepared p;
  if (int rc = Prepare("verify", args, &p)) return rc;
  const int64_t n = p.partition.module->num_partitions;
  // With a step split, the three programs run in order (sharding, main, unsharding).
  const Module& program = p.wus && p.wus->composed ? *p.wus->composed : *p.partition.module;
  auto v = VerifyPartitioned(*p.annotated, program, n, seed);
  if (!v.ok()) {
    std::cerr << args[0] << ": error: cannot evaluate: " << v.error().message << "\n";
    return 2;
  }
  std::cout << "devices: " << n << "\n";
  PrintCollectives(std::cout, p.partition);
  if (p.wus) std::cout << p.wus->summary << "\n";
  std::cout << v->detail;
  if (!v->detail.empty() && v->detail.back() != '\n') std::cout << "\n";
  std::cout << (v->match ? "verdict: match" : "verdict: MISMATCH") << " (tolerance " << v->tolerance << ")\n";
  std::cout << "max_abs_error: " << v->max_abs_error << "\n";
  return v->match ? 0 : 1;
}

const bool kPartition = Register({"partition", "FILE.hlo [-o OUT.hlo] [--no-propagate] [--keep-io-shardings] [--num-partitions N] [--summary] "
                                  "[--weight-update-sharding [" WUS_OPTION_USAGE "]]",
                                  "Propagate shardings, then partition into the SPMD program every device runs",
                                  &RunPartition});
const bool kVerify = Register({"verify", "FILE.hlo [--seed N] [--no-propagate] [--keep-io-shardings] [--num-partitions N] "
                               "[--weight-update-sharding [" WUS_OPTION_USAGE "]]",
                               "Run the module unpartitioned and partitioned on virtual devices and compare",
                               &RunVerify});

}  // namespace
}  // namespace shardscope::cli
