// Ops that move, add or remove dimensions without computing: broadcast, reshape (dimension splits and
// merges), transpose, reverse, slice, pad, concatenate, dynamic-slice, dynamic-update-slice.
#include <algorithm>

#include "partitioner/propagation/rules/rules_common.h"

namespace shardscope::prop {
namespace rules {
namespace {

using namespace hlo_sharding_util;

bool Contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Broadcast forward has the lowest priority (aggressiveness 3): a broadcast adds data, so the
// paper prefers taking its sharding from users (backward).
bool BroadcastForward(Instruction& inst, RuleContext& ctx) {
  if (ctx.aggressiveness < 3) return false;
  const Instruction* op = inst.operand(0);
  if (!ctx.IsSpatiallyPartitioned(op)) return false;
  const HloSharding& s = *ctx.ShardingOf(op);
  if (s.IsReplicated() || !s.IsTiled()) return false;
  std::vector<int64_t> tiles;
  for (int64_t i = 0; i < inst.shape().rank(); ++i) {
    auto it = std::find(inst.dimensions.begin(), inst.dimensions.end(), i);
    if (it == inst.dimensions.end()) {
      tiles.push_back(1);
    } else {
      tiles.push_back(s.tile_assignment().dim(it - inst.dimensions.begin()));
    }
  }
  for (int64_t i = s.TiledDataRank(); i < s.tile_assignment().num_dimensions(); ++i) {
    tiles.push_back(s.tile_assignment().dim(i));
  }
  HloSharding out = MakeSubgroup(s.tile_assignment().Reshape(tiles), s.subgroup_types());
  return ctx.Improve(&inst, std::move(out), NonRootUsers(inst) == 1, op, "broadcast");
}

std::optional<HloSharding> BroadcastBackward(const Instruction&, const Instruction& user,
                                             const HloSharding& us, RuleContext& ctx) {
  if (us.IsReplicated() || us.IsManual()) return us;
  if (!us.IsTiled()) return std::nullopt;
  std::vector<int64_t> dims_to_replicate;
  bool needs_replication = false;
  for (int64_t i = 0; i < user.shape().rank(); ++i) {
    if (!Contains(user.dimensions, i)) {
      dims_to_replicate.push_back(i);
      if (us.tile_assignment().dim(i) > 1) needs_replication = true;
    }
  }
  if (!ctx.is_spmd && needs_replication) return std::nullopt;
  return RemoveShapeDimensions(PartiallyReplicateTiledShardingOnDims(us, dims_to_replicate), dims_to_replicate);
}

bool ReshapeForward(Instruction& inst, RuleContext& ctx) {
  const Instruction* op = inst.operand(0);
  if (!ctx.IsSpatiallyPartitioned(op)) return false;
  return ctx.Improve(&inst, PropagateShardingThroughReshape(op->shape(), inst.shape(), *ctx.ShardingOf(op)),
                     NonRootUsers(inst) == 1, op, "reshape");
}

std::optional<HloSharding> ReshapeBackward(const Instruction& operand, const Instruction& user,
                                           const HloSharding& us, RuleContext&) {
  return PropagateShardingThroughReshape(user.shape(), operand.shape(), us);
}

bool TransposeForward(Instruction& inst, RuleContext& ctx) {
  const Instruction* op = inst.operand(0);
  if (!ctx.IsSpatiallyPartitioned(op)) return false;
  return ctx.Improve(&inst, TransposeSharding(*ctx.ShardingOf(op), inst.dimensions), NonRootUsers(inst) == 1, op,
                     "transpose");
}

std::optional<HloSharding> TransposeBackward(const Instruction&, const Instruction& user, const HloSharding& us,
                                             RuleContext&) {
  std::vector<int64_t> inverse(user.dimensions.size());
  for (size_t i = 0; i < user.dimensions.size(); ++i) {
    const int64_t d = user.dimensions[i];
    if (d < 0 || d >= static_cast<int64_t>(inverse.size())) return std::nullopt;
    inverse[static_cast<size_t>(d)] = static_cast<int64_t>(i);
  }
  return TransposeSharding(us, inverse);
}

bool ReverseForward(Instruction& inst, RuleContext& ctx) {
  const Instruction* op = inst.operand(0);
  if (!ctx.IsSpatiallyPartitioned(op)) return false;
  return ctx.Improve(&inst, ReverseSharding(*ctx.ShardingOf(op), inst.dimensions), NonRootUsers(inst) == 1, op,
                     "reverse");
}

std::optional<HloSharding> ReverseBackward(const Instruction&, const Instruction& user, const HloSharding& us,
                                           RuleContext&) {
  return ReverseSharding(us, user.dimensions);
}

std::optional<HloSharding> SliceBackward(const Instruction&, const Instruction&, const HloSharding& us,
                                         RuleContext&) {
  return us;
}

std::optional<HloSharding> PadBackward(const Instruction& operand, const Instruction& user, const HloSharding& us,
                                       RuleContext&) {
  if (&operand != user.operand(0)) return std::nullopt;
  return us;
}

// Concatenate passes through at aggressiveness 0 only for the repeated-layer parameter pattern
// (param/gte -> reshape -> concat) sharded off the concat dim.
bool ConcatOperandCanPassThroughEarly(const Instruction* op, const RuleContext& ctx) {
  const HloSharding* s = ctx.ShardingOf(op);
  return s != nullptr && IsSpatiallyPartitioned(*s) && s->NumTiles() > 1 && op->opcode() == Opcode::kReshape &&
         (op->operand(0)->opcode() == Opcode::kParameter || op->operand(0)->opcode() == Opcode::kGetTupleElement);
}

bool ConcatenateForward(Instruction& inst, RuleContext& ctx) {
  const Instruction* op = PickRepresentativeOperand(inst, ctx);
  if (op == nullptr || !ctx.IsSpatiallyPartitioned(op)) return false;
  if (ctx.aggressiveness == 0) {
    for (const Instruction* o : inst.operands()) {
      if (!ConcatOperandCanPassThroughEarly(o, ctx)) return false;
      const HloSharding& s = *ctx.ShardingOf(o);
      for (int64_t i = 0; i < inst.shape().rank(); ++i) {
        if (Contains(inst.dimensions, i) && s.DimensionTiles(i) > 1) return false;
      }
    }
  }
  return ctx.Improve(&inst, *ctx.ShardingOf(op), NonRootUsers(inst) == 1, op, "concatenate");
}

std::optional<HloSharding> ConcatenateBackward(const Instruction& operand, const Instruction& user,
                                               const HloSharding& us, RuleContext& ctx) {
  if (ctx.aggressiveness == 0) return std::nullopt;
  if (us.IsReplicated()) return us;
  if (!us.IsTiled() || user.dimensions.empty()) return us;
  const int64_t cdim = user.dimensions[0];
  if (us.tile_assignment().dim(cdim) == 1) return us;
  if (ctx.is_spmd) return us;
  // Non-SPMD: the operand lives on the devices holding its slice of the result.
  int64_t start = 0;
  for (const Instruction* op : user.operands()) {
    if (op == &operand) break;
    start += op->shape().dim(cdim);
  }
  const auto& dims = us.tile_assignment().dims();
  const int64_t tile = (user.shape().dim(cdim) + dims[static_cast<size_t>(cdim)] - 1) / dims[static_cast<size_t>(cdim)];
  const int64_t first = start / tile;
  const int64_t last = std::min<int64_t>((start + operand.shape().dim(cdim) + tile - 1) / tile,
                                         dims[static_cast<size_t>(cdim)]);
  std::vector<int64_t> new_dims = dims;
  new_dims[static_cast<size_t>(cdim)] = std::max<int64_t>(1, last - first);
  std::vector<int64_t> devices;
  const auto& src = us.tile_assignment().devices();
  std::vector<int64_t> idx(dims.size());
  for (size_t f = 0; f < src.size(); ++f) {
    int64_t rem = static_cast<int64_t>(f);
    for (size_t i = dims.size(); i-- > 0;) {
      idx[i] = rem % dims[i];
      rem /= dims[i];
    }
    if (idx[static_cast<size_t>(cdim)] >= first && idx[static_cast<size_t>(cdim)] < last) devices.push_back(src[f]);
  }
  if (devices.size() == 1) return HloSharding::AssignDevice(devices[0]);
  return HloSharding::Tile(TileAssignment::Explicit(new_dims, devices));
}

std::vector<int64_t> SliceDims(const Shape& a, const Shape& b) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < a.rank() && i < b.rank(); ++i) {
    if (a.dim(i) != b.dim(i)) dims.push_back(i);
  }
  return dims;
}

// Dynamic-slice / dynamic-update-slice: the sliced dims are replicated, the others keep their tiles.
bool ImproveFromSliceOperand(Instruction& inst, RuleContext& ctx) {
  const Instruction* op = inst.opcode() == Opcode::kDynamicSlice ? inst.operand(0) : inst.operand(1);
  if (!ctx.IsSpatiallyPartitioned(op)) return false;
  const HloSharding& s = *ctx.ShardingOf(op);
  if (s.IsManual()) return false;
  return ctx.Improve(&inst, PartiallyReplicateTiledShardingOnDims(s, SliceDims(inst.shape(), op->shape())),
                     NonRootUsers(inst) == 1, op,
                     inst.opcode() == Opcode::kDynamicSlice ? "dynamic-slice" : "dynamic-update-slice (update)");
}

bool DynamicSliceForward(Instruction& inst, RuleContext& ctx) { return ImproveFromSliceOperand(inst, ctx); }

bool DynamicUpdateSliceForward(Instruction& inst, RuleContext& ctx) {
  bool changed = ImproveFromSliceOperand(inst, ctx);
  const Instruction* base = inst.operand(0);
  if (ctx.IsSpatiallyPartitioned(base)) {
    changed |= ctx.Improve(&inst, *ctx.ShardingOf(base), false, base, "dynamic-update-slice (base)");
  }
  return changed;
}

std::optional<HloSharding> DynamicSliceBackward(const Instruction& operand, const Instruction& user,
                                                const HloSharding& us, RuleContext& ctx) {
  if (ctx.aggressiveness == 0) return std::nullopt;
  if (us.IsReplicated()) return us;
  if (user.opcode() == Opcode::kDynamicUpdateSlice && &operand == user.operand(0)) return us;
  const Instruction* sliced = user.opcode() == Opcode::kDynamicSlice ? user.operand(0) : user.operand(1);
  if (&operand != sliced) return std::nullopt;
  return PartiallyReplicateTiledShardingOnDims(us, SliceDims(user.shape(), sliced->shape()));
}

}  // namespace
}  // namespace rules

void RegisterShapeRules(RuleTable& t) {
  using namespace rules;
  t.Add(Opcode::kBroadcast, OpRule{"broadcast", &BroadcastForward, &BroadcastBackward, BackwardInputs::kUser});
  t.Add(Opcode::kReshape, OpRule{"reshape", &ReshapeForward, &ReshapeBackward, BackwardInputs::kUser});
  t.Add(Opcode::kTranspose, OpRule{"transpose", &TransposeForward, &TransposeBackward, BackwardInputs::kUser});
  t.Add(Opcode::kReverse, OpRule{"reverse", &ReverseForward, &ReverseBackward, BackwardInputs::kUser});
  t.Add(Opcode::kSlice, OpRule{"slice", &DefaultForward, &SliceBackward, BackwardInputs::kUser});
  t.Add(Opcode::kPad, OpRule{"pad", &DefaultForward, &PadBackward, BackwardInputs::kUser});
  t.Add(Opcode::kConcatenate, OpRule{"concatenate", &ConcatenateForward, &ConcatenateBackward, BackwardInputs::kUser});
  t.Add(Opcode::kDynamicSlice, OpRule{"dynamic-slice", &DynamicSliceForward, &DynamicSliceBackward, BackwardInputs::kUser});
  t.Add(Opcode::kDynamicUpdateSlice,
        OpRule{"dynamic-update-slice", &DynamicUpdateSliceForward, &DynamicSliceBackward, BackwardInputs::kUser});
  t.Add(Opcode::kIota, OpRule{"iota", nullptr, &DefaultBackward});
  t.Add(Opcode::kConstant, OpRule{"constant", nullptr, &DefaultBackward});
}

}  // namespace shardscope::prop
