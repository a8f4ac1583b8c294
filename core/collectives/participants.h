// Who takes part in a collective: XLA's collective group modes (xla/service/collective_ops_utils:
// GetCollectiveOpGroupMode, GetParticipatingDevices), in one place for the evaluator's virtual
// cluster, the partitioner and the simulator.
//
// The mode follows from the instruction: all-to-all and collective-permute are cross-partition
// with a channel_id and cross-replica without; the others are flattened-id with
// use_global_device_ids, cross-replica-and-partition with a channel_id, cross-replica otherwise.
// Empty replica_groups mean "all" of what the mode groups over. Device ids are global:
// replica * num_partitions + partition.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"

namespace shardscope {

enum class CollectiveGroupMode { kCrossReplica, kCrossPartition, kCrossReplicaAndPartition, kFlattenedId };
CollectiveGroupMode CollectiveGroupModeOf(const Instruction& inst);

// The participant groups of a collective as global device ids, each group in participant order.
// Every device appears in at most one group (devices in no group do not take part); Error on ids
// out of range or repeated. With one replica, ids that can only be partition ids are read as such
// (XLA's SPMD programs without channel ids). So `all-reduce(p), replica_groups={}` without a
// channel_id on 4 partitions and 1 replica gives four groups of one device: no data moves.
Result<std::vector<std::vector<int64_t>>> CollectiveParticipantGroups(const Instruction& inst, int64_t num_replicas,
                                                                      int64_t num_partitions);
// collective-permute: (source device, target device) pairs in global device ids.
Result<std::vector<std::pair<int64_t, int64_t>>> CollectivePermutePairs(const Instruction& inst, int64_t num_replicas,
                                                                        int64_t num_partitions);

}  // namespace shardscope
