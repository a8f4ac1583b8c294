// Tuples and control flow: tuple, get-tuple-element, opt-barrier, custom-calls that annotate or enter/leave
// manual regions (Sharding, SPMDFullToShardShape, SPMDShardToFullShape), while (body and condition
// partitioned with the loop's sharding, so loop-carried values stay consistent), call, conditional.
#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {

namespace {

Status HandleTuple(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  std::vector<Instruction*> ops;
  std::vector<HloSharding> subs;
  std::vector<Shape> shapes;
  for (int64_t i = 0; i < orig.operand_count(); ++i) {
    HloSharding sub = hlo_sharding_util::TupleElementSharding(s, orig.shape(), i);
    if (!s.IsTuple() && orig.operand(i)->has_sharding() && !orig.has_sharding()) sub = *orig.operand(i)->sharding();
    auto r = ctx.resharder().ReshardAny(ctx.Get(orig.operand(i)), sub);
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ops.push_back(*r);
    // A tuple sharding lists the leaves of the whole (nested) tuple, as XLA's does.
    if (orig.operand(i)->shape().IsTuple()) {
      const HloSharding leaves = hlo_sharding_util::ToTupleForm(sub, orig.operand(i)->shape());
      for (const HloSharding& leaf : leaves.tuple_elements()) subs.push_back(leaf);
    } else {
      subs.push_back(sub);
    }
    shapes.push_back((*r)->shape());
  }
  Instruction* t = ctx.builder().Emit(Opcode::kTuple, Shape::Tuple(shapes), ops);
  ctx.Set(&orig, {t, HloSharding::Tuple(subs), orig.shape()});
  return Status::Ok();
}

// An optimization barrier keeps its operand's sharding (XLA partitions it as an elementwise op):
// the operand is resharded to the barrier's sharding when they differ, never gathered.
Status HandleOptimizationBarrier(SpmdContext& ctx, const Instruction& orig) {
  if (orig.operand_count() != 1) return Error(orig.name() + ": opt-barrier takes one operand");
  const PartitionedHlo& in = ctx.Get(orig.operand(0));
  if (!in.hlo) return Error(orig.name() + ": opt-barrier of an operand that was not partitioned");
  const HloSharding target = orig.has_sharding() ? *orig.sharding() : in.sharding;
  auto r = ctx.resharder().ReshardAny(in, target);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  Instruction* barrier = ctx.builder().Emit(Opcode::kOptimizationBarrier, (*r)->shape(), {*r});
  ctx.Set(&orig, {barrier, target, orig.shape()});
  return Status::Ok();
}

Status HandleGetTupleElement(SpmdContext& ctx, const Instruction& orig) {
  const PartitionedHlo& in = ctx.Get(orig.operand(0));
  const size_t i = static_cast<size_t>(orig.tuple_index);
  if (!in.hlo || !in.hlo->shape().IsTuple() || i >= in.hlo->shape().tuple.size())
    return Error(orig.name() + ": get-tuple-element of a non-tuple partitioned value");
  HloSharding sub = hlo_sharding_util::TupleElementSharding(in.sharding, in.base_shape, orig.tuple_index);
  Instruction* g = ctx.builder().Emit(Opcode::kGetTupleElement, in.hlo->shape().tuple[i], {in.hlo});
  g->tuple_index = orig.tuple_index;
  PartitionedHlo v{g, sub, orig.shape()};
  const HloSharding target = orig.has_sharding() ? *orig.sharding() : sub;
  auto r = ctx.resharder().ReshardAny(v, target);
  if (!r.ok()) return r.error();
  ctx.Set(&orig, {*r, target, orig.shape()});
  return Status::Ok();
}

// A manual region's boundary passes each device's local value through unchanged, so the module's
// shapes must say so: what the operand holds on each device is the result's part under the
// result's sharding — for SPMDFullToShardShape into a fully manual region the result itself (each
// device's shard), into a manual subgroup (some mesh axes manual, the others still partitioned)
// the result's tile; for SPMDShardToFullShape the shard of the full result. A module that says
// otherwise (XLA rejects it too) is an error, not a program of mismatched shapes.
Status ManualBoundaryShapesAgree(SpmdContext& ctx, const Instruction& orig, const PartitionedHlo& in) {
  if (!in.hlo) return Error(orig.name() + ": " + orig.custom_call_target + " of an operand that was not partitioned");
  const Shape& local = in.hlo->shape();
  const HloSharding sharding = SpmdContext::ShardingOf(orig);
  Shape expected = orig.shape();
  if (!sharding.IsManual()) {
    auto part = ctx.maps().ShardShape(orig.shape(), sharding);
    if (!part.ok()) return Error(orig.name() + ": " + part.error().message);
    expected = *part;
  }
  if (local.IsArray() && expected.IsArray() && local.type == expected.type && local.dims == expected.dims)
    return Status::Ok();
  if (!local.IsArray() && !expected.IsArray() && local == expected) return Status::Ok();
  return Error(orig.name() + ": " + orig.custom_call_target + "'s operand " + orig.operand(0)->name() + " holds " +
               local.ToString(false) + " on each device, but the result " + orig.shape().ToString(false) +
               (sharding.IsManual() ? std::string(" is manual, each device's own") : " under its sharding is " + expected.ToString(false) + " on each device"));
}

// custom-call "Sharding" is an annotation: the value resharded to it. Other custom-calls fall back.
Status HandleCustomCall(SpmdContext& ctx, const Instruction& orig) {
  if ((orig.custom_call_target == "Sharding" || orig.custom_call_target == "LayoutConstraint") &&
      orig.operand_count() == 1) {
    const HloSharding target = SpmdContext::ShardingOf(orig);
    auto r = ctx.resharder().ReshardAny(ctx.Get(orig.operand(0)), target);
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ctx.Set(&orig, {*r, target, orig.shape()});
    return Status::Ok();
  }
  if (orig.custom_call_target == "__op$block_scaled_dot") return PartitionBlockScaledDot(ctx, orig);
  if (orig.custom_call_target == "SPMDFullToShardShape" && orig.operand_count() == 1) {
    // Entering a manual region: the operand's shards become the manual region's local values.
    const PartitionedHlo& in = ctx.Get(orig.operand(0));
    if (Status st = ManualBoundaryShapesAgree(ctx, orig, in); !st.ok()) return st;
    Instruction* x = ctx.builder().Emit(Opcode::kCopy, in.hlo->shape(), {in.hlo});
    // A manual subgroup keeps its sharding over the region's (full) shape; a fully manual value is
    // each device's own.
    const HloSharding region = SpmdContext::ShardingOf(orig);
    if (hlo_sharding_util::IsManualSubgroup(region)) ctx.Set(&orig, {x, region, orig.shape()});
    else ctx.Set(&orig, {x, HloSharding::Manual(), in.hlo->shape()});
    return Status::Ok();
  }
  if (orig.custom_call_target == "SPMDShardToFullShape" && orig.operand_count() == 1) {
    const PartitionedHlo& in = ctx.Get(orig.operand(0));
    if (Status st = ManualBoundaryShapesAgree(ctx, orig, in); !st.ok()) return st;
    Instruction* x = ctx.builder().Emit(Opcode::kCopy, in.hlo->shape(), {in.hlo});
    ctx.Set(&orig, {x, SpmdContext::ShardingOf(orig), orig.shape()});
    return Status::Ok();
  }
  return PartitionWithFallback(ctx, orig);
}

Status HandleWhile(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  auto init = ctx.resharder().ReshardAny(ctx.Get(orig.operand(0)), s);
  if (!init.ok()) return Error(orig.name() + ": " + init.error().message);
  auto cond = ctx.PartitionCalled(orig.while_condition(), {s}, HloSharding::Replicate());
  if (!cond.ok()) return cond.error();
  auto body = ctx.PartitionCalled(orig.while_body(), {s}, s);
  if (!body.ok()) return body.error();
  Instruction* w = ctx.builder().Emit(Opcode::kWhile, (*init)->shape(), {*init});
  w->mutable_called_computations() = {*cond, *body};
  ctx.Set(&orig, {w, s, orig.shape()});
  return Status::Ok();
}

Status HandleCall(SpmdContext& ctx, const Instruction& orig) {
  const Computation* callee = orig.to_apply();
  if (!callee) return PartitionWithFallback(ctx, orig);
  std::vector<HloSharding> ps;
  std::vector<Instruction*> ops;
  for (int64_t i = 0; i < orig.operand_count(); ++i) {
    const Instruction* p = i < static_cast<int64_t>(callee->parameters().size()) ? callee->parameter(i) : nullptr;
    HloSharding s = p && p->has_sharding() ? *p->sharding() : ctx.Get(orig.operand(i)).sharding;
    auto r = ctx.resharder().ReshardAny(ctx.Get(orig.operand(i)), s);
    if (!r.ok()) return r.error();
    ps.push_back(s);
    ops.push_back(*r);
  }
  HloSharding rs = callee->root() && callee->root()->has_sharding() ? *callee->root()->sharding() : SpmdContext::ShardingOf(orig);
  auto c = ctx.PartitionCalled(callee, ps, rs);
  if (!c.ok()) return c.error();
  Instruction* call = ctx.builder().Emit(Opcode::kCall, (*c)->root()->shape(), ops);
  call->mutable_called_computations() = {*c};
  PartitionedHlo v{call, rs, orig.shape()};
  const HloSharding target = SpmdContext::ShardingOf(orig);
  auto fin = ctx.resharder().ReshardAny(v, target);
  if (!fin.ok()) return fin.error();
  ctx.Set(&orig, {*fin, target, orig.shape()});
  return Status::Ok();
}

Status HandleConditional(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding target = SpmdContext::ShardingOf(orig);
  auto pred = ctx.resharder().Reshard(ctx.Get(orig.operand(0)), HloSharding::Replicate());
  if (!pred.ok()) return pred.error();
  std::vector<Instruction*> ops = {*pred};
  std::vector<Computation*> branches;
  for (size_t b = 0; b < orig.called_computations().size(); ++b) {
    const Computation* br = orig.called_computations()[b];
    const Instruction* arg = orig.operand(static_cast<int64_t>(b) + 1);
    const Instruction* p = br && !br->parameters().empty() ? br->parameter(0) : nullptr;
    HloSharding s = p && p->has_sharding() ? *p->sharding() : ctx.Get(arg).sharding;
    auto r = ctx.resharder().ReshardAny(ctx.Get(arg), s);
    if (!r.ok()) return r.error();
    ops.push_back(*r);
    auto c = ctx.PartitionCalled(br, {s}, target);
    if (!c.ok()) return c.error();
    branches.push_back(*c);
  }
  auto local = ctx.maps().ShardShape(orig.shape(), target);
  if (!local.ok()) return local.error();
  Instruction* x = ctx.builder().Emit(Opcode::kConditional, *local, ops);
  x->mutable_called_computations() = branches;
  ctx.Set(&orig, {x, target, orig.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterControlFlowHandlers(HandlerTable& table) {
  table.Add({Opcode::kTuple}, HandleTuple);
  table.Add({Opcode::kGetTupleElement}, HandleGetTupleElement);
  table.Add({Opcode::kOptimizationBarrier}, HandleOptimizationBarrier);
  table.Add({Opcode::kCustomCall}, HandleCustomCall);
  table.Add({Opcode::kWhile}, HandleWhile);
  table.Add({Opcode::kCall}, HandleCall);
  table.Add({Opcode::kConditional}, HandleConditional);
}

}  // namespace shardscope::spmd
