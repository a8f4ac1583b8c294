// Gather and scatter: index pass-through dims (indices <-> output/updates), operand pass-through
// dims (operand <-> offset/window dims) and parallel dims (explicit batching dims, or dims indexed
// by an iota).
#include "partitioner/propagation/rules/rules_common.h"

namespace shardscope::prop {
namespace rules {
namespace {

using namespace hlo_sharding_util;

bool GatherParallelForward(Instruction& inst, const GatherScatterDims& pd, RuleContext& ctx) {
  bool changed = false;
  const int64_t rank = inst.shape().rank();
  if (ctx.IsSpatiallyPartitioned(inst.operand(0))) {
    changed |= ctx.Improve(&inst,
                           PropagateShardingAlongDimsAndReplicateOthers(*ctx.ShardingOf(inst.operand(0)),
                                                                        pd.operand_dims, pd.output_dims, rank),
                           false, inst.operand(0), "gather (parallel dims)");
  }
  if (ctx.IsSpatiallyPartitioned(inst.operand(1))) {
    changed |= ctx.Improve(&inst,
                           PropagateShardingAlongDimsAndReplicateOthers(*ctx.ShardingOf(inst.operand(1)),
                                                                        pd.indices_dims, pd.output_dims, rank),
                           false, inst.operand(1), "gather (parallel dims)");
  }
  return changed;
}

bool GatherForward(Instruction& inst, RuleContext& ctx) {
  bool changed = false;
  if (!inst.gather_dims.operand_batching_dims.empty()) {
    changed |= GatherParallelForward(inst, ExplicitGatherBatchDims(inst), ctx);
  }
  if (ctx.IsSpatiallyPartitioned(inst.operand(1))) {
    changed |= ctx.Improve(&inst, GatherOutputShardingFromIndex(*ctx.ShardingOf(inst.operand(1)), inst), false,
                           inst.operand(1), "gather (indices)");
  }
  if (ctx.is_spmd) {
    auto pd = GatherParallelDims(inst);
    if (pd) changed |= GatherParallelForward(inst, *pd, ctx);
    if (ctx.IsSpatiallyPartitioned(inst.operand(0))) {
      HloSharding filtered = PartiallyReplicateTiledShardingOnDims(*ctx.ShardingOf(inst.operand(0)),
                                                                   pd ? pd->operand_dims : std::vector<int64_t>{});
      if (auto from_data = GatherOutputShardingFromOperandPassthrough(filtered, inst)) {
        changed |= ctx.Improve(&inst, std::move(*from_data), false, inst.operand(0), "gather (operand)");
      }
    }
  }
  return changed;
}

std::optional<HloSharding> GatherBackward(const Instruction& operand, const Instruction& user,
                                          const HloSharding& us, RuleContext& ctx) {
  if (&operand == user.operand(1)) return GatherIndexShardingFromOutput(us, user);
  if (ctx.is_spmd) return GatherOperandShardingFromOutput(us, user);
  return std::nullopt;
}

Shape ScatterElementShape(const Instruction& inst) {
  return inst.shape().IsTuple() && !inst.shape().tuple.empty() ? inst.shape().tuple[0] : inst.shape();
}

bool ScatterParallelForward(Instruction& inst, const GatherScatterDims& pd, RuleContext& ctx) {
  bool changed = false;
  const int64_t n = ScatterOperandCount(inst);
  const int64_t rank = ScatterElementShape(inst).rank();
  for (int64_t i = 0; i < n; ++i) {
    const Instruction* op = inst.operand(i);
    if (!ctx.IsSpatiallyPartitioned(op)) continue;
    changed |= ctx.ImproveElement(
        &inst, PropagateShardingAlongDimsAndReplicateOthers(*ctx.ShardingOf(op), pd.operand_dims, pd.operand_dims, rank),
        i, false, op, "scatter (parallel dims)");
  }
  const Instruction* indices = inst.operand(n);
  if (ctx.IsSpatiallyPartitioned(indices)) {
    HloSharding from_indices = PropagateShardingAlongDimsAndReplicateOthers(*ctx.ShardingOf(indices), pd.indices_dims,
                                                                           pd.operand_dims, rank);
    for (int64_t i = 0; i < n; ++i) {
      changed |= ctx.ImproveElement(&inst, from_indices, i, false, indices, "scatter (parallel dims)");
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const Instruction* update = inst.operand(n + 1 + i);
    if (!ctx.IsSpatiallyPartitioned(update)) continue;
    changed |= ctx.ImproveElement(&inst,
                                  PropagateShardingAlongDimsAndReplicateOthers(*ctx.ShardingOf(update), pd.output_dims,
                                                                               pd.operand_dims, rank),
                                  i, false, update, "scatter (parallel dims)");
  }
  return changed;
}

bool ScatterForward(Instruction& inst, RuleContext& ctx) {
  bool changed = false;
  const int64_t n = ScatterOperandCount(inst);
  if (!inst.scatter_dims.input_batching_dims.empty()) {
    changed |= ScatterParallelForward(inst, ExplicitScatterBatchDims(inst), ctx);
  }
  if (!ctx.is_spmd) {
    for (int64_t i = 0; i < n; ++i) {
      changed |= ctx.ImproveElement(&inst, HloSharding::Replicate(), i, false, nullptr, "scatter (non-SPMD)");
    }
    return changed;
  }
  for (int64_t i = 0; i < n; ++i) {
    const Instruction* op = inst.operand(i);
    if (ctx.IsSpatiallyPartitioned(op)) {
      changed |= ctx.ImproveElement(&inst, *ctx.ShardingOf(op), i, false, op, "scatter (operand)");
    }
  }
  bool any_update = false;
  for (int64_t i = 0; i < n; ++i) any_update |= ctx.IsSpatiallyPartitioned(inst.operand(n + 1 + i));
  if (!ctx.IsSpatiallyPartitioned(inst.operand(n)) && !any_update) return changed;
  if (auto pd = ScatterParallelDims(inst)) changed |= ScatterParallelForward(inst, *pd, ctx);
  for (int64_t i = 0; i < n; ++i) {
    const Instruction* update = inst.operand(n + 1 + i);
    if (!ctx.IsSpatiallyPartitioned(update)) continue;
    if (auto from_update = ScatterOutputShardingFromUpdate(*ctx.ShardingOf(update), inst)) {
      changed |= ctx.ImproveElement(&inst, std::move(*from_update), i, false, update, "scatter (updates)");
    }
  }
  return changed;
}

std::optional<HloSharding> ScatterBackward(const Instruction& operand, const Instruction& user, const HloSharding& us,
                                           RuleContext& ctx) {
  const int64_t n = ScatterOperandCount(user);
  for (int64_t i = 0; i < n; ++i) {
    if (user.operand(i) == &operand) return us.IsTuple() ? TupleElementSharding(us, user.shape(), i) : us;
  }
  const Instruction* indices = user.operand(n);
  if (&operand == indices) {
    std::vector<HloSharding> shardings;
    for (int64_t i = 0; i < n; ++i) {
      const Instruction* update = user.operand(n + 1 + i);
      if (ctx.IsSpatiallyPartitioned(update)) {
        shardings.push_back(ScatterIndexShardingFromUpdate(*ctx.ShardingOf(update), user));
      }
    }
    if (shardings.empty()) return std::nullopt;
    return FindCommonSharding(shardings);
  }
  int64_t update_index = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (user.operand(n + 1 + i) == &operand) update_index = i;
  }
  if (update_index < 0) return std::nullopt;
  HloSharding from_indices = ctx.IsSpatiallyPartitioned(indices)
                                 ? ScatterUpdateShardingFromIndex(*ctx.ShardingOf(indices), user)
                                 : HloSharding::Replicate();
  if (ctx.is_spmd) {
    HloSharding per_output = us.IsTuple() ? TupleElementSharding(us, user.shape(), update_index) : us;
    auto from_output = ScatterUpdateShardingFromOutput(per_output, user);
    if (from_output) {
      if (!from_indices.IsManual() && !from_indices.IsTuple() && !from_output->IsManual() && !from_output->IsTuple()) {
        MergeShardingIfCompatible(from_indices, &*from_output);
      }
      if (!hlo_sharding_util::IsTileMaximal(*from_output)) return from_output;
    }
  }
  if (!hlo_sharding_util::IsTileMaximal(from_indices)) return from_indices;
  return std::nullopt;
}

}  // namespace
}  // namespace rules

void RegisterGatherScatterRules(RuleTable& t) {
  using namespace rules;
  t.Add(Opcode::kGather, OpRule{"gather", &GatherForward, &GatherBackward});
  t.Add(Opcode::kScatter, OpRule{"scatter", &ScatterForward, &ScatterBackward});
}

}  // namespace shardscope::prop
