// Is a module already an SPMD program (what every device runs), or a global program whose sharding
// annotations are still to be partitioned? Real dumps come in both kinds: JAX's
// "before_optimizations" dump is global, its "after_optimizations" dump (and anything written after
// XLA's SPMD partitioner) is per device. Partitioning a per-device program again would be wrong.
//
// The rule (docs/real-dumps.md), evidence in this order:
//  (a) the entry computation's name ends in "_spmd" (XLA's SPMD partitioner renames the entry so);
//  (b) the module is scheduled (is_scheduled=true): XLA schedules after partitioning;
//  (c) it contains ops that only XLA's backend passes create, after partitioning: fusion,
//      asynchronous pairs (all-gather-start, async-start, copy-start, ...);
//  (d) it contains a cross-partition collective (one with a channel_id) or partition-id outside
//      every manual region: a global program communicates between devices only inside a manual
//      region (shard_map, SPMDFullToShardShape ... SPMDShardToFullShape);
//  (e) it contains a collective, partition-id or replica-id and no instruction carries a tiled or
//      maximal sharding: a per-device program with nothing to partition (PyTorch/XLA data
//      parallelism, TensorFlow).
// Per-device shapes alone are no evidence: the text does not say which shapes were global.
#pragma once

#include <optional>
#include <string>

#include "core/ir/ir.h"

namespace shardscope {

// Whether XLA's backend has already optimised `module` (it is scheduled, or has fusion
// instructions): its fusions and remaining ops are the kernels it runs, so a cost model must not
// fuse them again.
bool IsBackendOptimized(const Module& module);

// The evidence that `module` is already partitioned ("entry computation 'main_spmd' has XLA's
// _spmd suffix"), or nullopt for a global program.
std::optional<std::string> AlreadyPartitioned(const Module& module);

}  // namespace shardscope
