// Reductions and windowed ops: reduce (reduced dims leave the sharding), reduce-window,
// select-and-scatter and sort (the sort dimension must end up unsharded).
#include <algorithm>

#include "partitioner/propagation/rules/rules_common.h"

namespace shardscope::prop {
namespace rules {
namespace {

using namespace hlo_sharding_util;

bool Contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

int64_t NumInputs(const Instruction& inst) { return std::max<int64_t>(1, inst.operand_count() / 2); }

bool ReduceForward(Instruction& inst, RuleContext& ctx) {
  bool changed = false;
  const int64_t n = NumInputs(inst);
  const bool aggressive = NonRootUsers(inst) == 1;
  for (int64_t i = 0; i < n; ++i) {
    const Instruction* op = inst.operand(i);
    if (!ctx.IsSpatiallyPartitioned(op)) continue;
    const HloSharding& s = *ctx.ShardingOf(op);
    if (s.IsManual()) {
      changed |= ctx.ImproveElement(&inst, s, i, aggressive, op, "reduce");
      continue;
    }
    bool reduces_sharded_dim = false;
    for (int64_t d : inst.dimensions) reduces_sharded_dim |= s.DimensionTiles(d) > 1;
    if (s.IsReplicated() || (!ctx.is_spmd && reduces_sharded_dim)) {
      changed |= ctx.Improve(&inst, MaybeTuple(inst, ReplicateAllDataDims(s)), aggressive, op, "reduce");
      continue;
    }
    HloSharding after = PartiallyReplicateTiledShardingOnDims(s, inst.dimensions);
    if (after.IsReplicated()) {
      changed |= ctx.Improve(&inst, MaybeTuple(inst, after), aggressive, op, "reduce");
      continue;
    }
    changed |= ctx.Improve(&inst, MaybeTuple(inst, RemoveShapeDimensions(after, inst.dimensions)), aggressive, op,
                           "reduce");
  }
  return changed;
}

std::optional<HloSharding> ReduceBackward(const Instruction& operand, const Instruction& user, const HloSharding& us,
                                          RuleContext& ctx) {
  if (operand.shape().rank() == 0) return std::nullopt;
  const int64_t idx = OperandIndex(user, operand);
  HloSharding s = user.shape().IsTuple() ? TupleElementSharding(us, user.shape(), idx) : us;
  if (s.IsTuple()) return std::nullopt;
  if (s.IsTiled()) {
    const int64_t total = operand.shape().rank() + static_cast<int64_t>(s.subgroup_types().size());
    std::vector<int64_t> tiles(static_cast<size_t>(total), 1);
    int64_t next = 0;
    for (int64_t i = 0; i < total; ++i) {
      if (!Contains(user.dimensions, i)) {
        if (next >= s.tile_assignment().num_dimensions()) return std::nullopt;
        tiles[static_cast<size_t>(i)] = s.tile_assignment().dim(next++);
      }
    }
    s = MakeSubgroup(s.tile_assignment().Reshape(tiles), s.subgroup_types());
  }
  const int64_t n = NumInputs(user);
  for (int64_t i = 0; i < n; ++i) {
    const Instruction* other = user.operand(i);
    if (other == &operand) continue;
    const HloSharding* os = ctx.ShardingOf(other);
    if (os == nullptr || os->IsTuple() || os->IsManual() || s.IsManual()) continue;
    MergeShardingIfCompatible(*os, &s);
  }
  return s;
}

bool ReduceWindowForward(Instruction& inst, RuleContext& ctx) {
  for (const auto& wd : inst.window.dims) {
    if (wd.base_dilation > 1 || wd.window_dilation > 1) return false;
  }
  bool changed = false;
  const int64_t n = NumInputs(inst);
  for (int64_t i = 0; i < n; ++i) {
    const Instruction* op = inst.operand(i);
    if (!ctx.IsSpatiallyPartitioned(op)) continue;
    changed |= ctx.Improve(&inst, MaybeTuple(inst, *ctx.ShardingOf(op)), NonRootUsers(inst) == 1, op,
                           "reduce-window");
  }
  return changed;
}

std::optional<HloSharding> ReduceWindowBackward(const Instruction& operand, const Instruction& user,
                                                const HloSharding& us, RuleContext&) {
  const int64_t idx = OperandIndex(user, operand);
  if (idx < 0 || idx >= NumInputs(user)) return std::nullopt;
  if (user.shape().IsTuple()) return TupleElementSharding(us, user.shape(), idx);
  return us;
}

bool SelectAndScatterForward(Instruction& inst, RuleContext& ctx) {
  const Instruction* lhs = inst.operand(0);
  if (!ctx.IsSpatiallyPartitioned(lhs)) return false;
  for (const auto& wd : inst.window.dims) {
    if (wd.base_dilation > 1) return false;
  }
  return ctx.Improve(&inst, *ctx.ShardingOf(lhs), NonRootUsers(inst) == 1, lhs, "select-and-scatter");
}

// A sort sharded along its sort dimension can still propagate when some other dim can absorb those
// tiles later.
bool CanMoveShardingOffDim(const Shape& shape, const HloSharding& s, int64_t source_dim) {
  if (shape.rank() < 2 || source_dim < 0 || source_dim >= shape.rank() || shape.dim(source_dim) == 1) return false;
  if (!s.IsTiled() || s.DimensionTiles(source_dim) == 1) return false;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (d == source_dim) continue;
    const int64_t merged = s.DimensionTiles(source_dim) * s.DimensionTiles(d);
    if (shape.dim(d) % merged == 0) return true;
  }
  return false;
}

bool SortForward(Instruction& inst, RuleContext& ctx) {
  const Instruction* op = PickRepresentativeOperand(inst, ctx);
  if (op == nullptr || !ctx.IsSpatiallyPartitioned(op)) return false;
  const HloSharding& s = *ctx.ShardingOf(op);
  const int64_t sort_dim = inst.dimensions.empty() ? 0 : inst.dimensions[0];
  if (s.IsTiled() && s.DimensionTiles(sort_dim) != 1 && !CanMoveShardingOffDim(op->shape(), s, sort_dim)) {
    return false;
  }
  return ctx.Improve(&inst, MaybeTuple(inst, s), NonRootUsers(inst) == 1, op, "sort");
}

std::optional<HloSharding> SortBackward(const Instruction& operand, const Instruction& user, const HloSharding& us,
                                        RuleContext&) {
  if (us.IsTuple()) return TupleElementSharding(us, user.shape(), OperandIndex(user, operand));
  return us;
}

}  // namespace
}  // namespace rules

void RegisterReductionRules(RuleTable& t) {
  using namespace rules;
  t.Add(Opcode::kReduce, OpRule{"reduce", &ReduceForward, &ReduceBackward});
  t.Add(Opcode::kReduceWindow, OpRule{"reduce-window", &ReduceWindowForward, &ReduceWindowBackward, BackwardInputs::kUser});
  t.Add(Opcode::kSelectAndScatter, OpRule{"select-and-scatter", &SelectAndScatterForward, &DefaultBackward});
  t.Add(Opcode::kSort, OpRule{"sort", &SortForward, &SortBackward, BackwardInputs::kUser});
}

}  // namespace shardscope::prop
