// Combining collectives (XLA's AllReduceCombiner, AllGatherCombiner, ReduceScatterCombiner): small
// collectives of one kind that no one of them depends on another, with the same reduction,
// participant groups, element type and dimensions, are merged into one tuple-shaped collective
// while their operands stay within a byte threshold. A collective is latency-bound below a size
// (a ring's steps cost a hop's latency each however little they carry), so one combined op moving
// them all pays that latency once.
//
// The one mechanism behind two stages:
//   - the all-reduce combiner (all_reduce_combiner.h), a post-partitioning stage on every
//     program the pipeline partitions: every array all-reduce is a candidate;
//   - weight-update sharding's batching (paper section 5.2, weight_update_sharding/emit.cpp): the
//     reduce-scatters, all-gathers and all-reduces the pass inserted.
//
// The rule, one pass per computation in program order: each key (kind, groups, type, dimensions,
// reduction, channel / global ids) has one open bucket; a candidate joins its key's bucket unless
// the bucket's bytes would exceed the threshold or the candidate's operand depends on a member of
// the bucket (the combined op would feed its own operand) — then the bucket closes and a new one
// opens with it. A bucket of two or more becomes one collective over the members' operands, placed
// right after the last of them is defined (where the last input is ready); each member's users read
// a get-tuple-element of it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ir/ir.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope {

struct CollectiveCombinerOptions {
  // A bucket's operands stay within this many bytes (per device); a collective larger alone is
  // left as it is. 0 or less: nothing is combined.
  int64_t threshold_bytes = 30 * 1024 * 1024;
  // The kinds combined (each with its own kind only): all-reduce, all-gather, reduce-scatter.
  std::vector<Opcode> kinds = {Opcode::kAllReduce};
  // Which collectives of those kinds may be combined (null: all). Only single-operand collectives
  // of an array shape are ever candidates.
  std::function<bool(const Instruction&)> candidate;
};

// One combined collective.
struct CombinedCollective {
  std::string computation;
  std::string instruction;           // the combined, tuple-shaped collective
  Opcode kind = Opcode::kAllReduce;
  std::vector<std::string> members;  // the collectives it replaced, in program order
  int64_t bytes_per_device = 0;      // operand bytes, summed over the members
  std::string replica_groups;        // text form
};

// Rewrites `module` in place; returns what was combined (empty: unchanged).
std::vector<CombinedCollective> CombineCollectives(Module& module, const CollectiveCombinerOptions& options);

// Keeps a record of collectives consistent with a combination: the members' records leave, one
// record per combined collective joins (the members' bytes summed, their origins listed) with the
// reason `reason(combined, records of its members)`. Members without a record are named in the
// combined record all the same.
void RecordCombinedCollectives(
    const std::vector<CombinedCollective>& combined,
    const std::function<std::string(const CombinedCollective&, const std::vector<const InsertedCollective*>&)>& reason,
    std::vector<InsertedCollective>* records);

}  // namespace shardscope
