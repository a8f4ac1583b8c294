// Reduce: the operand keeps its sharding; the padding of sharded reduced dims is masked with the
// reducer's identity (core/collectives/reduction.h), each device reduces its part and an
// all-reduce over the reduced dims' groups combines the partial results; the initial value enters
// once, after the all-reduce.
#include <algorithm>

#include "core/collectives/reduction.h"
#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {

namespace {

Status HandleReduce(SpmdContext& ctx, const Instruction& orig) {
  if (orig.operand_count() != 2 || !orig.shape().IsArray()) return PartitionWithFallback(ctx, orig);
  const Instruction* operand = orig.operand(0);
  const PartitionedHlo& in = ctx.Get(operand);
  auto m = ctx.maps().Get(in.sharding, operand->shape().rank());
  if (!m.ok()) return PartitionWithFallback(ctx, orig);
  const std::optional<ReductionKind> kind = MatchReduction(orig.to_apply());
  const Opcode rop = kind ? ReductionOpcode(*kind) : Opcode::kAdd;
  const std::optional<Literal> identity = kind ? ReductionIdentity(*kind, operand->shape().type) : std::nullopt;
  std::vector<int64_t> sharded_reduced;
  for (int64_t d : orig.dimensions)
    if (m->tiles(d) > 1) sharded_reduced.push_back(d);
  if (!sharded_reduced.empty() && !identity) return PartitionWithFallback(ctx, orig);
  // Keep the operand's sharding; mask padding on reduced dims with the reducer's identity.
  Instruction* x = in.hlo;
  const double idv = identity ? identity->values[0] : 0.0;
  if (!sharded_reduced.empty()) x = MaskPadding(ctx, in, sharded_reduced, idv);
  auto init = ctx.resharder().Reshard(ctx.Get(orig.operand(1)), HloSharding::Replicate());
  if (!init.ok()) return init.error();
  // Every device reduces its part from the identity; the user's initial value is combined once,
  // after the partial results are summed (XLA's semantics: it enters the reduction once, not once
  // per device).
  Instruction* user_init = *init;
  const Instruction* given = orig.operand(1);
  const bool init_is_identity = identity && given->opcode() == Opcode::kConstant && given->literal.values.size() == 1 &&
                                given->literal.values[0] == idv;
  const bool combine_init = !sharded_reduced.empty() && !init_is_identity;
  if (combine_init) *init = ctx.builder().ConstantScalar(given->shape().type, idv);
  // Result map: operand map with reduced dims gathered (they become replicas), then dropped.
  TileMap gathered = m->Gathered(sharded_reduced);
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < operand->shape().rank(); ++d)
    if (std::find(orig.dimensions.begin(), orig.dimensions.end(), d) == orig.dimensions.end()) kept.push_back(d);
  TileMap rm = gathered.Permuted(kept);
  Shape local(orig.shape().type, rm.ShardShape(orig.shape().dims));
  Instruction* r = ctx.builder().Emit(Opcode::kReduce, local, {x, *init});
  r->dimensions = orig.dimensions;
  r->has_dimensions_attr = true;
  Computation* reducer = ctx.builder().CloneScalarComputation(orig.to_apply());
  r->mutable_called_computations() = {reducer};
  if (!sharded_reduced.empty()) {
    r = ctx.builder().AllReduce(r, reducer, m->GroupsAlong(sharded_reduced), "reduce over a sharded dimension");
    if (combine_init) r = ctx.builder().Emit(rop, local, {r, ctx.builder().Broadcast(user_init, local)});
  }
  auto rs = rm.ToSharding();
  if (!rs.ok()) return rs.error();
  PartitionedHlo v{r, *rs, orig.shape()};
  const HloSharding target = SpmdContext::ShardingOf(orig);
  auto fin = ctx.resharder().Reshard(v, target);
  if (!fin.ok()) return fin.error();
  ctx.Set(&orig, {*fin, target, orig.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterReduceHandlers(HandlerTable& table) { table.Add({Opcode::kReduce}, HandleReduce); }

}  // namespace shardscope::spmd
