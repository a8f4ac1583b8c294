// Sharding algebra used by sharding propagation (GSPMD paper §3.5): merging compatible shardings
// (the Offset(S,d,i) definition), refinement tests, partial replication of dimensions, and the
// transforms that carry a sharding through reshapes, transposes, broadcasts, reductions, dots,
// gathers and scatters. Semantics follow XLA's hlo_sharding_util so imported HLO propagates the way
// XLA propagates it. Standard library only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/shape.h"
#include "core/sharding/sharding.h"
#include "core/sharding/tile_assignment.h"

namespace shardscope::hlo_sharding_util {

using SubgroupType = HloSharding::SubgroupType;

// ---- Queries ------------------------------------------------------------------------------------

// Dimension sizes of compatible shapes (tuples leaf by leaf), ignoring the element type (XLA's
// ShapeUtil::CompatibleIgnoringElementType).
bool CompatibleIgnoringElementType(const Shape& a, const Shape& b);

// XLA's notion: replicated or a single device (manual and unknown are not tile-maximal).
bool IsTileMaximal(const HloSharding& s);
// Not pinned to one device (or a tuple with at least one such leaf): propagation may carry it.
bool IsSpatiallyPartitioned(const HloSharding& s);
bool IsSpatiallyPartitioned(const Instruction* inst);
// Leaf-level kind tests (a tuple is never a leaf).
bool IsManualLeaf(const HloSharding& s);
bool IsTileMaximalLeaf(const HloSharding& s);
bool IsReplicatedLeaf(const HloSharding& s);
// Tiled with exactly one trailing replicated subgroup dim (XLA's last_tile_dim_replicate).
bool ReplicateOnLastTileDim(const HloSharding& s);
// Tile-assignment dim of the replicated / manual subgroup, -1 when absent.
int64_t SubgroupReplicationDim(const HloSharding& s);
int64_t SubgroupManualDim(const HloSharding& s);
bool IsManualSubgroup(const HloSharding& s);
// The single device of a maximal sharding (or of a tuple whose leaves all use that device).
std::optional<int64_t> UniqueDevice(const HloSharding& s);

// lhs is a finer sharding than rhs (more tiles; tuples: no leaf worse, one leaf better).
bool IsShardingMoreSpecific(const HloSharding& lhs, const HloSharding& rhs);
// lhs is manual where rhs is tile-maximal (leaf-wise for tuples): always an improvement.
bool IsShardingStrictlyBetter(const HloSharding& lhs, const HloSharding& rhs);

// Every device's tile under `sub` lies inside its tile under `sharding` for an array of `shape`
// (then going from `sharding` to `sub` is a local slice). Per dimension the test is ShardWithin.
bool IsSubTilingOrEqualSharding(const Shape& shape, const HloSharding& sub, const HloSharding& sharding);
// One dimension of that test: the valid (unpadded) part of a shard at `sub_offset` of `sub_size`
// elements, in a dimension of extent `full`, lies within the valid part of a shard at `offset` of
// `size` elements. A shard entirely in the padding lies within anything. The SPMD partitioner's
// resharding asks the same question of its tile maps (spmd/tile_map.h, IsLocalRefinement).
bool ShardWithin(int64_t full, int64_t sub_offset, int64_t sub_size, int64_t offset, int64_t size);

// ---- Construction -------------------------------------------------------------------------------

// The same tile assignment without an iota description (transforms on it skip iota detection).
TileAssignment Plain(const TileAssignment& t);
// The same sharding with its tile assignment written in XLA's iota form when it is one
// ("devices=[4,2]<=[2,4]T(1,0)"); `cache` remembers device lists already examined.
using IotaCache = std::map<std::vector<int64_t>, std::optional<IotaForm>>;
HloSharding WithIotaForm(const HloSharding& s, IotaCache* cache = nullptr);

// A tiled sharding from a tile assignment and trailing subgroup types, normalised as XLA does.
HloSharding MakeSubgroup(const TileAssignment& tiles, const std::vector<SubgroupType>& types);
HloSharding MakePartialTile(const TileAssignment& tiles);
// Rebuilds `s` with a new tile assignment but the same subgroup structure.
HloSharding WithTiles(const HloSharding& s, const TileAssignment& tiles);
// Drops shard-group and open-dim decorations (kept by the parser) so equality is about placement.
HloSharding StripDecorations(HloSharding s);

// ---- Merging (GSPMD §3.5 "Merging compatible shardings") ----------------------------------------

// Tries to combine two partially tiled shardings into one that agrees with both on every sharded
// dim (the paper's Offset(S,d,i) condition). On success writes the merged sharding to *dst.
// `minimum_tiles`: the merge must produce at least this many data tiles.
// A compact binary key identifying a sharding exactly, metadata aside (memo tables: an iota
// sharding is keyed by its description, an explicit one by every device id); AppendShardingKey
// appends it.
std::string ShardingKey(const HloSharding& s);
void AppendShardingKey(std::string& key, const HloSharding& s);

bool MergeShardingIfCompatible(const HloSharding& to_merge, int64_t minimum_tiles, HloSharding* dst);
bool MergeShardingIfCompatible(const HloSharding& to_merge, HloSharding* dst);
// XLA's MergeSharding: returns true when *dst (possibly merged with to_merge) should replace
// to_merge.
bool MergeSharding(const HloSharding& to_merge, HloSharding* dst, bool may_combine_partial_sharding);
// The merge of all shardings when compatible, else default_sharding (or the first one).
HloSharding FindCommonSharding(const std::vector<HloSharding>& shardings,
                               std::optional<HloSharding> default_sharding = std::nullopt);
// The sharding an instruction should take when offered `from` (refinement only); nullopt keeps it.
std::optional<HloSharding> ReturnImprovedSharding(HloSharding from, const HloSharding* current,
                                                  const Shape& shape, bool may_combine_partial_sharding,
                                                  bool allow_aggressive_resharding = false);

// ---- Dimension transforms -----------------------------------------------------------------------

HloSharding TransposeSharding(const HloSharding& s, const std::vector<int64_t>& dims);
std::optional<HloSharding> ReshapeSharding(const Shape& source, const Shape& target, const HloSharding& s);
HloSharding PropagateShardingThroughReshape(const Shape& source, const Shape& target, const HloSharding& s);
HloSharding ReverseSharding(const HloSharding& s, const std::vector<int64_t>& dims);
HloSharding PartiallyReplicateTiledShardingOnDims(const HloSharding& s, const std::vector<int64_t>& dims);
HloSharding PartiallyReplicateTiledShardingOnAllDimsExcept(const HloSharding& s,
                                                           const std::vector<int64_t>& dims_to_keep);
HloSharding ReplicateAllDataDims(const HloSharding& s, int64_t data_rank = -1);
HloSharding RemoveShapeDimensions(const HloSharding& s, const std::vector<int64_t>& dims);
// Inserts size-1 tile dims so a sharding of rank r covers a shape of rank r + dims.size() where
// `dims` are the new (unsharded) dims, in ascending order of the result.
HloSharding InsertShapeDimensions(const HloSharding& s, const std::vector<int64_t>& dims);
std::optional<HloSharding> TransposeShardingWithCollapsedDims(const HloSharding& source,
                                                              std::vector<int64_t> src_to_tgt,
                                                              std::vector<int64_t> tgt_to_src);
// Keeps the tiling of source_dims (moved to target_dims of a rank-target_rank sharding) and
// replicates every other data dim.
HloSharding PropagateShardingAlongDimsAndReplicateOthers(const HloSharding& source,
                                                         const std::vector<int64_t>& source_dims,
                                                         const std::vector<int64_t>& target_dims,
                                                         int64_t target_rank);

// ---- Tuples ---------------------------------------------------------------------------------------

// Number of array leaves of a (possibly nested) tuple shape; 1 for arrays.
int64_t LeafCount(const Shape& shape);
// Expands to one element per leaf (identity for non-tuple shapes).
HloSharding ToTupleForm(const HloSharding& s, const Shape& shape);
// The sharding of element `index` of a tuple-shaped value (tuple sharding if it is itself a tuple).
HloSharding TupleElementSharding(const HloSharding& s, const Shape& shape, int64_t index);
// Replaces element `index` of a tuple sharding.
HloSharding SetTupleElementSharding(const HloSharding& s, const Shape& shape, int64_t index,
                                    const HloSharding& element);
// Every array in the shape divides evenly by its tiles.
bool EvenlyPartitions(const Shape& shape, const HloSharding& s);

// ---- Dot / convolution dimension analysis (dots written as convolutions included) -----------------

struct DotDim {
  int64_t lhs = -1, rhs = -1, output = -1, spatial = -1;
};
struct DotDims {
  std::vector<DotDim> batch, contracting, lhs_non_contracting, rhs_non_contracting, conv_spatial;
  int64_t lhs_rank = 0, rhs_rank = 0, output_rank = 0;
};
DotDims ParseDotDims(const Instruction& dot);
DotDims ParseConvolutionDims(const Instruction& conv);
// Output sharding implied by one operand of a dot (contracting dims replicated).
HloSharding DotShardingFromOperand(const HloSharding& operand_sharding, const DotDims& dims, int operand_index);
// Operand sharding implied by the dot's result and (optionally) the other operand.
HloSharding InferDotOperandSharding(const HloSharding* dot_sharding, const HloSharding* other_sharding,
                                    int operand_index, const DotDims& dims, bool may_combine_partial);

// The two functions above memoised by value: the shardings (ShardingKey), the dot's dimension
// analysis, the operand and the flag. Both are pure functions of these, so one memo may serve many
// propagation runs (the strategy search keeps one per thread and mesh, beside the partitioner's
// memo): the same dots meet the same shardings on every layer and in every candidate of a mesh,
// and at thousands of devices each answer takes tens of thousands of instructions. Shardings with
// metadata are not memoised (the answer may carry it). Not thread-safe; the table is dropped when
// its keys take more than `max_key_bytes` (a key holds every device id of an explicit sharding).
class DotShardingMemo {
 public:
  explicit DotShardingMemo(size_t max_key_bytes = size_t{16} << 20) : max_key_bytes_(max_key_bytes) {}
  HloSharding FromOperand(const HloSharding& operand_sharding, const DotDims& dims, int operand_index);
  HloSharding InferOperand(const HloSharding* dot_sharding, const HloSharding* other_sharding, int operand_index,
                           const DotDims& dims, bool may_combine_partial);
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  const HloSharding& Find(const std::function<HloSharding()>& compute);
  size_t max_key_bytes_, key_bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0;
  std::string key_;  // the key being built
  std::unordered_map<std::string, HloSharding> table_;
};

// ---- Gather / scatter ------------------------------------------------------------------------------

struct GatherScatterDims {
  std::vector<int64_t> operand_dims, indices_dims, output_dims;
};
// Parallel (batch) dims of a gather/scatter: explicit batching dims and iota-indexed dims.
std::optional<GatherScatterDims> GatherParallelDims(const Instruction& gather);
std::optional<GatherScatterDims> ScatterParallelDims(const Instruction& scatter);
GatherScatterDims ExplicitGatherBatchDims(const Instruction& gather);
GatherScatterDims ExplicitScatterBatchDims(const Instruction& scatter);
HloSharding GatherOutputShardingFromIndex(const HloSharding& index_sharding, const Instruction& gather);
HloSharding GatherIndexShardingFromOutput(const HloSharding& output_sharding, const Instruction& gather);
std::optional<HloSharding> GatherOutputShardingFromOperandPassthrough(const HloSharding& operand_sharding,
                                                                      const Instruction& gather);
std::optional<HloSharding> GatherOperandShardingFromOutput(const HloSharding& output_sharding,
                                                           const Instruction& gather);
HloSharding ScatterIndexShardingFromUpdate(const HloSharding& update_sharding, const Instruction& scatter);
HloSharding ScatterUpdateShardingFromIndex(const HloSharding& index_sharding, const Instruction& scatter);
std::optional<HloSharding> ScatterOutputShardingFromUpdate(const HloSharding& update_sharding,
                                                           const Instruction& scatter);
std::optional<HloSharding> ScatterUpdateShardingFromOutput(const HloSharding& output_sharding,
                                                           const Instruction& scatter);
// Number of scatter operands (variadic scatter: operands N, indices, N updates).
int64_t ScatterOperandCount(const Instruction& scatter);

}  // namespace shardscope::hlo_sharding_util
