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

#include "core/ir/ir.h"
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
  static const HloSharding& ShardingOf(const Instruction& orig);

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
  // Scratch buffers for the memo keys (a key holds every device id: 16 KiB at 2048 devices).
  mutable std::string map_key_buf_, plan_key_buf_;
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

 public:
  // ---- halo exchange (GSPMD §4.3 and Appendix A.2): the one primitive every windowed op uses ----
  // Gives every device the window of dimension `dim` it needs: the device holding tile i of `map`
  // along `dim` gets the full positions [start[i], start[i] + size) of a dimension of extent
  // `full` (start may be negative or run past the end); positions outside [0, full) read
  // `pad_value`. When `x_sharded`, x holds map's shard along `dim` (tile i at [i*S, (i+1)*S)) and
  // the window is built by halo exchange: collective-permutes of the rows needed from the shards
  // to the left and right along `dim` (several hops when a window is wider than a shard; only the
  // distant rows when windows lie away from the own shard, as after a slice), concatenated in
  // order with the own rows still needed; a pad + dynamic-slice picks each device's window when
  // the halo sizes differ per device, and a select masks positions outside the array (and the
  // padding of uneven shards). When !x_sharded, x holds the whole dimension and a local pad +
  // dynamic-slice suffices. Other dimensions of x are left as they are, so several dimensions are
  // exchanged one after the other. Every collective-permute carries the reason
  // "halo exchange: <what> dim D left|right halo N row(s) from K tile(s) away".
  // Only the first need[i] positions of tile i's window matter (empty: all; see PlanHalo).
  // `pad_scalar`, when given, is a scalar of the SPMD program holding the pad value (a pad op's
  // operand) and replaces `pad_value`.
  Result<Instruction*> ExchangeHalo(Instruction* x, const TileMap& map, int64_t dim, int64_t full,
                                    const std::vector<int64_t>& start, int64_t size, double pad_value, bool x_sharded,
                                    const std::string& what, const std::vector<int64_t>& need = {},
                                    Instruction* pad_scalar = nullptr);
};

// The handler for ops without a dedicated one: replicate operands, run the op whole, reshard.
Status PartitionWithFallback(SpmdContext& ctx, const Instruction& orig);

// A compact key identifying a sharding exactly (memo tables).
std::string ShardingKey(const HloSharding& s);

std::string GroupsToString(const std::vector<std::vector<int64_t>>& groups);

// ---- halo planning: the arithmetic behind SpmdContext::ExchangeHalo, also the cost model of the
// windowed handlers (convolution, reduce-window, pad, slice) ----
// One piece of the exchanged region: rows [from, to) of the shard `hop` tiles away (hop < 0: to
// the left, 0: the device's own shard).
struct HaloPiece {
  int64_t hop = 0, from = 0, to = 0;
};
struct HaloPlan {
  int64_t shard = 0, tiles = 1, full = 0, size = 0;
  // The pieces every device concatenates, in order along the dimension: for each hop the union of
  // the rows any device needs from the shard that far away (adjacent halos for windowed ops; a
  // distant piece alone when windows lie away from the own shard, as after a slice).
  std::vector<HaloPiece> pieces;
  int64_t pad_low = 0, pad_high = 0;  // pad of the concatenation so every window fits
  std::vector<int64_t> offsets;       // per tile index: window start in the padded concatenation
  bool dynamic = false;               // offsets differ: a dynamic-slice, else a static slice
  bool mask_low = false, mask_high = false;  // needed positions < 0 / >= full must be masked
  int64_t permutes = 0;               // collective-permutes (pieces from other shards)
  int64_t rows_received = 0;          // rows a device receives
  // Rows times hops: a piece from k tiles away crosses k links of the mesh axis, so this is what
  // the busiest link carries (an all-gather's ring carries (tiles - 1) * shard).
  int64_t link_rows = 0;
  // A halo exchange is worth it when its links carry no more than gathering the dimension would.
  bool cheaper_than_gather() const { return link_rows <= (tiles - 1) * shard; }
};
// Plans the windows [start[i], start[i] + size) for shards of `shard` elements over `tiles`
// tiles of a dimension of extent `full`. Only the first need[i] positions of tile i's window
// matter (the rest feed the padding of an uneven output; empty `need`: all of them).
// `x_sharded` false: the input holds the whole dimension. `pad_is_zero`: the pad value is 0 (the
// zeros a collective-permute delivers where no neighbour exists need no masking then).
HaloPlan PlanHalo(int64_t shard, int64_t tiles, int64_t full, const std::vector<int64_t>& start, int64_t size,
                  bool x_sharded, bool pad_is_zero, const std::vector<int64_t>& need = {});

// How a windowed op runs per tile of its output along one dimension (GSPMD Appendix A.2, with
// base dilation as in Figure 10): the output is split into `tiles` tiles of `out_shard` elements;
// tile i reads the input elements [start[i], start[i] + size) (positions outside the input read
// the pad value) and runs the local window `local` (padding folded in, base dilation kept), which
// yields `local_out` outputs of which the tile's own start at out_offset[i] (all 0 unless the
// tiles' windows start at different phases of the base dilation: then, with stride 1, every tile
// uses the largest low padding and a dynamic-slice of the output drops the extra windows).
// nullopt when the tiles need different local windows that no slice can reconcile (stride > 1 and
// out_shard * stride not a multiple of the base dilation).
struct WindowedTiling {
  std::vector<int64_t> start;
  int64_t size = 0;
  std::vector<int64_t> need;  // per tile: input elements its valid (unpadded) outputs read
  WindowDimension local;
  int64_t local_out = 0;
  std::vector<int64_t> out_offset;
  bool sliced() const {
    for (int64_t o : out_offset)
      if (o != 0) return true;
    return false;
  }
};
// `out_full`: the output's extent (outputs past it are the padding of the last tiles).
std::optional<WindowedTiling> TileWindowedDim(const WindowDimension& w, int64_t tiles, int64_t out_shard,
                                              int64_t out_full);

// ---- joint tilings: one tiling over the labelled dimensions of an op (dot, convolution) ----
// An operand or result whose dim d carries label label_of_dim[d] (-1: no label; the dim is whole).
struct JointSource {
  const TileMap* map = nullptr;
  std::vector<int64_t> label_of_dim;
};
// Merges the sources' tilings into one over `num_labels` labels (tile indices of a label must
// agree between sources); nullopt when they conflict or the result is not a full device grid.
std::optional<TileMap> BuildJointTiling(const std::vector<JointSource>& sources, int64_t num_labels,
                                        int64_t num_devices);
// The tiling of an operand whose dim d carries label label_of_dim[d] (-1: whole), projected from
// a joint tiling: labels it does not carry become replication.
TileMap ProjectJointTiling(const TileMap& joint, const std::vector<int64_t>& label_of_dim);

}  // namespace shardscope::spmd
