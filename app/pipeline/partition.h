// The partition, verify and estimate stages of the analysis pipeline: the SPMD partitioner
// (partitioner/spmd/spmd_partitioner.h) on a module whose shardings are complete, the numerical check of
// its program (core/eval/numeric_verify.h) within size limits, and the simulator's estimate of every
// collective it inserted (simulator/collectives/cost.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "core/eval/numeric_verify.h"
#include "core/ir/ir.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "simulator/collectives/cost.h"
#include "simulator/topology.h"

namespace shardscope::pipeline {

using namespace ::shardscope::sim;  // the simulator's types are the pipeline's

// True when `module` still has to be partitioned: some instruction carries a tiled sharding and the
// module is not already an SPMD program (AlreadyPartitioned, core/ir/spmd_program.h).
bool NeedsPartitioning(const Module& module);

// Partitions `module` (every instruction carries its sharding: run propagation first) into the
// program every device runs. options.num_partitions 0: the module's num_partitions.
Result<PartitionResult> Partition(const Module& module, const SpmdOptions& options = {},
                                  const CancellationToken& cancel = {});

struct VerifyOptions {
  uint64_t seed = 1;  // of the random inputs
  // Size limits (0: none). Above this many floating-point operations of the original module, or
  // this many elements (every instruction's, times the devices), the check is skipped: the
  // evaluator runs the original once and the SPMD program on every device.
  double max_flops = 4e8;
  double max_elements = 4e7;
  // The random inputs' spread of magnitudes (NumericVerifyOptions::float_exponent_spread).
  int float_exponent_spread = NumericVerifyOptions{}.float_exponent_spread;
  static VerifyOptions Unlimited(uint64_t seed = 1) { return VerifyOptions{seed, 0, 0}; }
};

// Runs `original` on one device and `spmd` on `devices` virtual devices with the same random
// inputs and compares (kSkipped beyond the limits, kError when they cannot be run).
VerificationVerdict Verify(const Module& original, const Module& spmd, int64_t devices, const VerifyOptions& options = {},
                           const CancellationToken& cancel = {});

// The simulator's estimate of every collective of `partition` on `topology`, in the order of
// partition.collectives (nullopt where it cannot be estimated). Participants follow XLA's group
// modes (core/collectives/participants.h).
std::vector<std::optional<CollectiveCost>> EstimateCollectives(const PartitionResult& partition, const Topology& topology,
                                                               const CollectiveOptions& options = {});

// The inverse of the partitioner's original -> SPMD map, as timeline events name instructions: SPMD
// names outside the entry are also given qualified with their original's computation ("body/add"
// became "add.1": "body/add.1"). The first original wins when an SPMD instruction is listed twice;
// inserted collectives map to the instruction that caused them.
std::map<std::string, std::string> SpmdOrigins(const PartitionResult& partition);

}  // namespace shardscope::pipeline
