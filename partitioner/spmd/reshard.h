// Resharding (GSPMD §4.5): the planner that picks the cheapest way to turn one sharding of a value
// into another, and the execution of a plan as instructions of the SPMD program. Every handler
// reshards its operands (and its result) through here.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "partitioner/spmd/spmd_builder.h"
#include "partitioner/spmd/tile_map.h"

namespace shardscope::spmd {

// Every collective costs latency beyond its bytes (about 1 us per hop: ~45 kB on a TPU v5e link).
// Plans are compared in bytes, so each collective step adds this much: among plans moving about
// the same data, the one with fewer collectives wins (as XLA's partitioner prefers). The handlers'
// own searches (dot, convolution, gather/scatter) charge the same per collective.
constexpr int64_t kCollectiveOverheadBytes = 16 * 1024;

// A value of the SPMD program (XLA's PartitionedHlo): the per-device instruction plus the
// sharding and shape of the logical (full) value it holds a shard of.
struct PartitionedHlo {
  Instruction* hlo = nullptr;
  HloSharding sharding;
  Shape base_shape;  // full logical shape
};

// One step of a resharding plan.
struct ReshardStep {
  enum class Kind { kDynamicSlice, kAllGather, kAllToAll, kAllToAllDims, kHalo, kHaloPieces, kCollectivePermute,
                    kBroadcastFromDevice, kReduceUnreduced, kMakeUnreduced, kMaskedAllReduce } kind;
  std::vector<int64_t> dims;        // all-gather: gathered dim; all-to-all: {from_dim, to_dim};
                                    // all-to-all of several dims: the dims whose tiles leave, in
                                    // the order of the source positions (major first);
                                    // halo: {dim}; halo then partial all-gather
                                    // (plan 2f): {dim, k};
                                    // broadcast-from-device: {device}; masked all-reduce: the
                                    // tiled dims made whole
  TileMap before, after;            // maps before/after the step
  int64_t bytes = 0;                // bytes received per device
  // reduce-unreduced: the groups summed (empty: every device); make-unreduced: the devices that
  // keep the value (empty: device 0).
  std::vector<std::vector<int64_t>> groups;
};
struct ReshardPlan {
  std::vector<ReshardStep> steps;
  int64_t bytes = 0;
  bool identity = false;
};

class Resharder {
 public:
  // Plans over the run's tile maps (and so its devices); emits through `builder`.
  Resharder(SpmdBuilder& builder, const TileMapCache& maps);
  // With the plans memoised in `plans` (a PartitionMemo's table, kept across runs) instead of its
  // own table.
  Resharder(SpmdBuilder& builder, const TileMapCache& maps, std::unordered_map<std::string, Result<ReshardPlan>>* plans);

  // Cheapest plan by bytes received per device; an error only for unsupported shardings. Plans
  // are memoised by (from, to, shape): the same pairs recur on every layer of a model (the device
  // count, the other thing a plan depends on, is the run's).
  Result<ReshardPlan> Plan(const HloSharding& from, const HloSharding& to, const Shape& base) const;

  // The instruction holding `v` resharded to `target` (v.hlo itself when nothing changes).
  Result<Instruction*> Reshard(const PartitionedHlo& v, const HloSharding& target);
  // Reshards every leaf of a tuple value.
  Result<Instruction*> ReshardAny(const PartitionedHlo& v, const HloSharding& target);

 private:
  Result<ReshardPlan> PlanUncached(const HloSharding& from, const HloSharding& to, const Shape& base) const;
  Result<Instruction*> EmitPlan(const PartitionedHlo& v, const ReshardPlan& plan, const HloSharding& target);

  SpmdBuilder& b_;
  const TileMapCache& maps_;
  int64_t n_;
  mutable std::unordered_map<std::string, Result<ReshardPlan>> own_plans_;
  std::unordered_map<std::string, Result<ReshardPlan>>& plans_;
  mutable std::string key_buf_;  // scratch for the memo keys
};

}  // namespace shardscope::spmd
