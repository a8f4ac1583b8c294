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

// Whether a variadic reducer picks one of its two candidate tuples whole (select between
// parameters i and k+i, every output on the same predicate and the same side: argmax and argmin),
// or reduces each output on its own (max/min of parameters i and k+i): folding the initial values
// in more than once, or the partial results in any grouping, then changes nothing. A reducer that
// picks the value of one candidate and the index of the other (a select whose predicate or side
// differs between outputs, or a select of one parameter with itself) is not one: partial results
// in another grouping give another answer.
bool IsSelectionReducer(const Computation* c, int64_t k) {
  if (!c || !c->root() || c->root()->opcode() != Opcode::kTuple || c->root()->operand_count() != k) return false;
  auto param = [](const Instruction* x) { return x->opcode() == Opcode::kParameter ? x->parameter_number : int64_t{-1}; };
  const Instruction* predicate = nullptr;
  int selects = 0, lhs_first = 0, extrema = 0;
  for (int64_t i = 0; i < k; ++i) {
    const Instruction* out = c->root()->operand(i);
    if (out->opcode() == Opcode::kSelect) {
      const int64_t a = param(out->operand(1)), b = param(out->operand(2));
      if (!((a == i && b == k + i) || (a == k + i && b == i))) return false;
      if (predicate && out->operand(0) != predicate) return false;
      predicate = out->operand(0);
      ++selects;
      lhs_first += a == i;
    } else if (out->opcode() == Opcode::kMaximum || out->opcode() == Opcode::kMinimum) {
      const int64_t a = param(out->operand(0)), b = param(out->operand(1));
      if (!((a == i && b == k + i) || (a == k + i && b == i))) return false;
      ++extrema;
    } else {
      return false;
    }
  }
  if (selects > 0 && extrema > 0) return false;
  return lhs_first == 0 || lhs_first == selects;
}

// A variadic reduce (argmax and friends: k inputs, k initial values, a tuple result) over
// sharded dims (XLA's tuple reduce): each device reduces its part, the k partial results get a
// dim of size 1, are all-gathered along it over the reduced dims' groups and reduced again. Only
// for a selection reducer (IsSelectionReducer) and reduced dims without padding; else the
// replicated fallback.
Status HandleVariadicReduce(SpmdContext& ctx, const Instruction& orig) {
  const int64_t k = orig.operand_count() / 2;
  const Instruction* first = orig.operand(0);
  const PartitionedHlo& in = ctx.Get(first);
  auto m = ctx.maps().Get(in.sharding, first->shape().rank());
  if (!m.ok() || k < 2 || orig.operand_count() != 2 * k || static_cast<int64_t>(orig.shape().tuple.size()) != k)
    return PartitionWithFallback(ctx, orig);
  std::vector<int64_t> sharded_reduced;
  for (int64_t d : orig.dimensions) {
    if (m->tiles(d) == 1) continue;
    if (m->HasPadding(d, first->shape().dim(d))) return PartitionWithFallback(ctx, orig);
    sharded_reduced.push_back(d);
  }
  if (sharded_reduced.empty() || !IsSelectionReducer(orig.to_apply(), k)) return PartitionWithFallback(ctx, orig);
  std::vector<Instruction*> ops;
  for (int64_t i = 0; i < k; ++i) {
    if (orig.operand(i)->shape().dims != first->shape().dims) return PartitionWithFallback(ctx, orig);
    auto r = ctx.resharder().Reshard(ctx.Get(orig.operand(i)), in.sharding);
    if (!r.ok()) return r.error();
    ops.push_back(*r);
  }
  std::vector<Instruction*> inits;
  for (int64_t i = k; i < 2 * k; ++i) {
    auto r = ctx.resharder().Reshard(ctx.Get(orig.operand(i)), HloSharding::Replicate());
    if (!r.ok()) return r.error();
    inits.push_back(*r);
  }
  TileMap gathered = m->Gathered(sharded_reduced);
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < first->shape().rank(); ++d)
    if (std::find(orig.dimensions.begin(), orig.dimensions.end(), d) == orig.dimensions.end()) kept.push_back(d);
  TileMap rm = gathered.Permuted(kept);
  std::vector<Shape> local_parts;
  for (const Shape& t : orig.shape().tuple) local_parts.push_back(Shape(t.type, rm.ShardShape(t.dims)));
  SpmdBuilder& b = ctx.builder();
  Computation* reducer = b.CloneScalarComputation(orig.to_apply());
  auto reduce = [&](const std::vector<Instruction*>& xs, const std::vector<int64_t>& dims) {
    std::vector<Instruction*> operands = xs;
    operands.insert(operands.end(), inits.begin(), inits.end());
    Instruction* r = b.Emit(Opcode::kReduce, Shape::Tuple(local_parts), operands);
    r->dimensions = dims;
    r->has_dimensions_attr = true;
    r->mutable_called_computations() = {reducer};
    return r;
  };
  Instruction* partial = reduce(ops, orig.dimensions);
  // Each partial result as [kept..., 1], gathered to [kept..., g] over the reduced dims' groups.
  const auto groups = m->GroupsAlong(sharded_reduced);
  const int64_t rank = static_cast<int64_t>(kept.size());
  std::vector<Instruction*> gathered_parts;
  for (int64_t i = 0; i < k; ++i) {
    Instruction* e = b.Emit(Opcode::kGetTupleElement, local_parts[static_cast<size_t>(i)], {partial});
    e->tuple_index = i;
    std::vector<int64_t> with_one = local_parts[static_cast<size_t>(i)].dims;
    with_one.push_back(1);
    gathered_parts.push_back(b.AllGather(b.Reshape(e, with_one), rank, groups, "reduce over a sharded dimension (tuple)"));
  }
  Instruction* r = reduce(gathered_parts, {rank});
  auto rs = rm.ToSharding();
  if (!rs.ok()) return rs.error();
  const HloSharding leaf_target = SpmdContext::ShardingOf(orig);
  PartitionedHlo v{r, HloSharding::Tuple(std::vector<HloSharding>(static_cast<size_t>(k), *rs)), orig.shape()};
  auto fin = ctx.resharder().ReshardAny(v, leaf_target);
  if (!fin.ok()) return fin.error();
  ctx.Set(&orig, {*fin, leaf_target, orig.shape()});
  return Status::Ok();
}

Status HandleReduce(SpmdContext& ctx, const Instruction& orig) {
  if (orig.shape().IsTuple() && orig.operand_count() >= 4) return HandleVariadicReduce(ctx, orig);
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
