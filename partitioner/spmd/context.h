// Shared machinery of the SPMD partitioner: the emitter (instructions of the SPMD program, with
// partition-id based offset tables and collectives carrying replica groups and channel ids), the
// resharding planner (§4.5), masking of padded regions (§4.1), and the handler registry. Every
// handler calls into this one place.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir.h"
#include "partitioner/spmd/tile_map.h"
#include "partitioner/spmd_partitioner.h"

namespace shardscope::spmd {

// A value of the SPMD program: the per-device instruction plus the sharding of the logical
// (full) value it holds a shard of.
struct PValue {
  Instruction* hlo = nullptr;
  HloSharding sharding;
  Shape base;  // full logical shape
};

// One step of a resharding plan.
struct ReshardStep {
  enum class Kind { kDynamicSlice, kAllGather, kAllToAll, kCollectivePermute, kBroadcastFromDevice, kReduceUnreduced,
                    kMakeUnreduced } kind;
  std::vector<int64_t> dims;        // all-gather: gathered dim; all-to-all: {from_dim, to_dim};
                                    // broadcast-from-device: {device}
  TileMap before, after;            // maps before/after the step
  int64_t bytes = 0;                // bytes received per device
};
struct ReshardPlan {
  std::vector<ReshardStep> steps;
  int64_t bytes = 0;
  bool identity = false;
};

class SpmdContext;
using Handler = std::function<Status(SpmdContext&, const Instruction&)>;
// Handlers register by opcode; one handler per op family, each in its own file.
std::unordered_map<Opcode, Handler>& HandlerRegistry();
struct RegisterHandler {
  RegisterHandler(std::initializer_list<Opcode> ops, Handler h);
};

class SpmdContext {
 public:
  SpmdContext(const Module& original, Module* out, int64_t num_devices, const SpmdOptions& options,
              PartitionResult* result);

  int64_t num_devices() const { return n_; }
  const SpmdOptions& options() const { return options_; }
  Module* out_module() { return out_; }

  // ---- values ----
  const PValue& Get(const Instruction* orig) const;
  void Set(const Instruction* orig, PValue v) { values_[orig] = std::move(v); }
  // The sharding an original instruction should have (replicated when absent).
  static HloSharding ShardingOf(const Instruction& orig);

  // ---- emitting into the current computation ----
  Computation* comp() { return comp_; }
  void set_comp(Computation* c) { comp_ = c; partition_id_ = nullptr; }
  void set_origin(const Instruction* orig);
  Instruction* Emit(Opcode op, Shape shape, std::vector<Instruction*> operands);
  Instruction* ConstantScalar(PrimitiveType t, double v);
  Instruction* PartitionId();
  // s32[] scalar: table[partition-id].
  Instruction* TableLookup(const std::vector<int64_t>& table);
  Instruction* DynamicSlice(Instruction* x, const std::vector<Instruction*>& offsets, std::vector<int64_t> sizes);
  Instruction* Slice(Instruction* x, std::vector<int64_t> limits);  // [0:limit) on every dim
  Instruction* PadHigh(Instruction* x, const std::vector<int64_t>& high, double value);
  Instruction* Reshape(Instruction* x, std::vector<int64_t> dims);
  Instruction* Transpose(Instruction* x, const std::vector<int64_t>& perm);
  Instruction* Broadcast(Instruction* scalar, const Shape& shape);
  Instruction* AllGather(Instruction* x, int64_t dim, const std::vector<std::vector<int64_t>>& groups,
                         const std::string& reason);
  Instruction* AllReduce(Instruction* x, Computation* reducer, const std::vector<std::vector<int64_t>>& groups,
                         const std::string& reason);
  Instruction* ReduceScatter(Instruction* x, Computation* reducer, int64_t dim,
                             const std::vector<std::vector<int64_t>>& groups, const std::string& reason);
  Instruction* AllToAll(Instruction* x, int64_t dim, const std::vector<std::vector<int64_t>>& groups,
                        const std::string& reason);
  Instruction* CollectivePermute(Instruction* x, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                 const std::string& reason);
  // A scalar binary computation (add/max/min/mul/or/and) in the output module, created once.
  Computation* ScalarReducer(Opcode op, PrimitiveType t);
  // Copies a scalar computation of the original module (reducers, comparators) unchanged.
  Computation* CloneScalarComputation(const Computation* c);

  // Replaces the padding of `v` along `dims` (the part of each shard beyond the full extent) with
  // `identity` (GSPMD §4.1: iota + compare + select on partition-id offsets).
  Instruction* MaskPadding(const PValue& v, const std::vector<int64_t>& dims, double identity);

  // ---- resharding (§4.5) ----
  // Cheapest plan by bytes received per device; an error only for unsupported shardings.
  Result<ReshardPlan> PlanReshard(const HloSharding& from, const HloSharding& to, const Shape& base) const;
  // Memoised per-device views (the same shardings recur on every layer of a model).
  Result<TileMap> MapOf(const HloSharding& sharding, int64_t rank) const;
  // A cache for handlers' own decisions (the dot handler's joint tiling), keyed by text.
  template <typename T>
  std::unordered_map<std::string, T>& DecisionCache() const {
    static thread_local std::unordered_map<const SpmdContext*, std::unordered_map<std::string, T>> caches;
    return caches[this];
  }
  Result<Instruction*> Reshard(const PValue& v, const HloSharding& target);
  // Reshards every leaf of a tuple value.
  Result<Instruction*> ReshardAny(const PValue& v, const HloSharding& target);

  // Local (per-device) shape of a value with this sharding.
  Result<Shape> ShardShapeOf(const Shape& base, const HloSharding& sharding) const;

  // Records a replicated fallback for the op.
  void NoteFallback(const Instruction& orig);
  PartitionResult* result() { return result_; }

  // Partitions a called computation (while body/condition, call, conditional branch) with the
  // given parameter shardings; cached per computation.
  Result<Computation*> PartitionCalled(const Computation* callee, const std::vector<HloSharding>& param_shardings,
                                       const HloSharding& root_sharding);
  // Runs the handlers over one computation's instructions.
  Status PartitionComputation(const Computation* orig, Computation* out);

  int64_t NextChannelId() { return next_channel_++; }

 private:
  Result<Instruction*> EmitPlan(const PValue& v, const ReshardPlan& plan, const HloSharding& target);
  Result<ReshardPlan> PlanReshardUncached(const HloSharding& from, const HloSharding& to, const Shape& base) const;
  mutable std::unordered_map<std::string, Result<ReshardPlan>> plan_cache_;
  mutable std::unordered_map<std::string, Result<TileMap>> map_cache_;
  const Module& original_;
  Module* out_;
  int64_t n_;
  SpmdOptions options_;
  PartitionResult* result_;
  Computation* comp_ = nullptr;
  Instruction* partition_id_ = nullptr;
  const Instruction* origin_ = nullptr;
  std::string origin_key_;
  std::unordered_map<const Instruction*, PValue> values_;
  std::map<std::pair<int, int>, Computation*> reducers_;
  std::unordered_map<const Computation*, Computation*> cloned_;
  std::unordered_map<const Computation*, Computation*> partitioned_;
  int64_t next_channel_ = 1;
};

// The handler for ops without a dedicated one: replicate operands, run the op whole, reshard.
Status PartitionWithFallback(SpmdContext& ctx, const Instruction& orig);

// A compact key identifying a sharding exactly (memo tables).
std::string ShardingKey(const HloSharding& s);

std::string GroupsToString(const std::vector<std::vector<int64_t>>& groups);

}  // namespace shardscope::spmd
