// A virtual cluster: runs an SPMD program on N devices in lockstep with real collective semantics.
//
// Every device runs the same program; instructions are evaluated in one topological order for all
// devices at once. Non-collective instructions run per device on that device's buffers (the
// reference evaluator); at a collective the N operand buffers are gathered and each device's result
// is computed: all-reduce (to_apply reducer), all-gather, reduce-scatter, all-to-all (array form with
// split/concat dimension, and tuple form), collective-permute (devices that receive nothing get
// zeros), and their async -start/-done pairs. while / call / conditional whose computations contain
// collectives run in lockstep recursively (all devices must agree on a while condition / branch
// there); other called computations run per device.
//
// Devices: num_devices = num_replicas x num_partitions; global device id = replica * partitions +
// partition (XLA's numbering). partition-id / replica-id return the device's own ids.
//
// Replica groups follow XLA's collective group modes:
//   no channel_id                         -> cross-replica (groups of replica ids, per partition)
//   channel_id, use_global_device_ids=false -> all-reduce/all-gather/reduce-scatter: cross-replica-
//                                            and-partition (groups of replica ids spanning all
//                                            partitions); all-to-all/collective-permute: cross-
//                                            partition (groups/pairs of partition ids, per replica)
//   channel_id, use_global_device_ids=true  -> flattened ids (groups of global device ids)
//   Empty groups mean all participants of the mode (so with one replica, an all-reduce without
//   channel_id and with replica_groups={} leaves every partition's value alone, as in XLA). With a
//   single replica (pure partition mode), replica ids that would be out of range (XLA rejects
//   them) are read as partition ids, so hand-written SPMD programs that omit channel_id but list
//   partition groups ({{0,1},{2,3}}) work as their author meant.
#pragma once

#include <cstdint>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/collectives/participants.h"
#include "core/ir/ir.h"
#include "core/base/status.h"
#include "core/eval/tensor.h"

namespace shardscope {

struct ClusterOptions {
  uint64_t rng_seed = 0x5eedULL;
  int64_t num_replicas = 1;  // num_devices must be a multiple; partitions = num_devices / num_replicas
  int64_t max_while_iterations = 10'000'000;
  bool probe_sums = false;  // EvalOptions::probe_sums on every device (device d's stream: probe_seed + d)
  uint64_t probe_seed = 0;
};

// Runs the entry computation of `spmd` on `num_devices` devices; `args[d]` are device d's entry
// arguments (shapes checked per device). Returns each device's output.
Result<std::vector<Tensor>> RunSpmd(const Module& spmd, int64_t num_devices,
                                    const std::vector<std::vector<Tensor>>& args,
                                    const ClusterOptions& options = {});

// Whether `c` (or anything it calls, transitively) contains a collective.
bool ComputationHasCollectives(const Computation& c);
bool ModuleHasCollectives(const Module& m);

}  // namespace shardscope
