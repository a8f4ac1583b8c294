// The all-reduce combiner (XLA's AllReduceCombiner): a post-partitioning stage that merges small,
// independent all-reduces of the same reduction, replica groups and element type into one
// tuple-shaped all-reduce while their operands stay within a byte threshold (the mechanism and its
// rule: collective_combiner.h). The simulator costs the combined all-reduce as one collective: one
// ring's latency for all of them.
//
// Why it is on every program the pipeline partitions: a data-parallel training step all-reduces
// one gradient per weight; ResNet-50 has 373 of them, most a few KiB, each latency-bound on a ring
// over thousands of replicas. XLA's compilers run this pass on every program (the threshold is a
// flag: xla_gpu_all_reduce_combine_threshold_bytes, 30 MiB by default in xla/debug_options_flags.cc;
// the TPU compiler's value is not public), so a simulated step without it overstates what
// the paper's baselines paid (docs/weight-update-sharding.md, "The all-reduce combiner").
//
// It runs after weight-update sharding (app/pipeline), whose clusters start at single gradient
// all-reduces: on the program the pass wrote and on the data-parallel program before it, so both
// sides of the comparison have XLA's batching.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "partitioner/collective_combiner.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope {

struct AllReduceCombinerOptions {
  // XLA's GPU default (xla_gpu_all_reduce_combine_threshold_bytes = 30 MiB). 0: nothing combined.
  int64_t threshold_bytes = 30 * 1024 * 1024;
};

struct AllReduceCombinerResult {
  std::vector<CombinedCollective> combined;
  int64_t all_reduces_before = 0;  // array all-reduces in the program before the stage
  bool changed() const { return !combined.empty(); }
  // "combined 373 all-reduces into 6 (threshold 30 MiB); 0 left alone"
  std::string Summary() const;
};

// XLA's pass name.
inline constexpr const char* kAllReduceCombinerName = "all-reduce-combiner";

// Rewrites `module` (an SPMD program) in place.
Result<AllReduceCombinerResult> CombineAllReduces(Module& module, const AllReduceCombinerOptions& options = {});

// On a partitioner result, keeping its record consistent: the combined all-reduces' records leave
// partition.collectives, one record per combined all-reduce joins (origin: theirs; reason: which it
// combined and why), and origin_map names the combined all-reduce where it named a member.
Result<AllReduceCombinerResult> CombineAllReducesOf(PartitionResult& partition, const AllReduceCombinerOptions& options = {});

// The reason recorded for one combined all-reduce: "all-reduce combiner: 12 all-reduces ... combined
// into one: all-reduce.3, all-reduce.7, ...".
std::string CombinedAllReduceReason(const CombinedCollective& combined, int64_t threshold_bytes);

}  // namespace shardscope
