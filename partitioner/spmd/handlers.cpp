// Handlers for the op families other than dot: each takes the original instruction, reshards its
// operands as the op needs, and emits the per-device op.
#include <algorithm>
#include <numeric>
#include <cmath>
#include <limits>
#include <optional>

#include "core/collectives/reduction.h"
#include "partitioner/spmd/context.h"

namespace shardscope::spmd {

namespace {

Result<Shape> LocalShape(SpmdContext& ctx, const Instruction& orig, const HloSharding& s) {
  return ctx.ShardShapeOf(orig.shape(), s);
}

// The sharding an operand needs so that a per-dimension op (elementwise) runs locally.
HloSharding ForRank(const HloSharding& s, int64_t rank) {
  if (rank == 0) return HloSharding::Replicate();
  return s;
}

Status HandleParameter(SpmdContext& ctx, const Instruction& orig) {
  if (ctx.Get(&orig).hlo) return Status::Ok();  // set by the caller of a partitioned computation
  const HloSharding s = SpmdContext::ShardingOf(orig);
  auto shape = LocalShape(ctx, orig, s);
  if (!shape.ok()) return Error(orig.name() + ": " + shape.error().message);
  Instruction* p = ctx.Emit(Opcode::kParameter, *shape, {});
  p->parameter_number = orig.parameter_number;
  p->set_sharding(s);
  ctx.Set(&orig, {p, s, orig.shape()});
  return Status::Ok();
}

Status FinishReplicated(SpmdContext& ctx, const Instruction& orig, Instruction* full) {
  PValue v{full, HloSharding::Replicate(), orig.shape()};
  const HloSharding target = SpmdContext::ShardingOf(orig);
  auto r = ctx.ReshardAny(v, target);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  ctx.Set(&orig, {*r, target, orig.shape()});
  return Status::Ok();
}

Instruction* CloneWith(SpmdContext& ctx, const Instruction& orig, const Shape& shape, std::vector<Instruction*> ops) {
  Instruction* n = orig.opcode() == Opcode::kGeneric
                       ? ctx.comp()->AddGeneric(orig.opcode_text(), shape, ops, orig.name())
                       : ctx.Emit(orig.opcode(), shape, ops);
  CopyAttributes(orig, n);
  std::vector<Computation*> called;
  for (Computation* c : orig.called_computations()) called.push_back(ctx.CloneScalarComputation(c));
  n->mutable_called_computations() = called;
  return n;
}

// Any op without a dedicated handler: replicate the operands, run the op on the full shape, then
// reshard the result to its sharding. Always correct; the cost shows up as all-gathers.
Status HandleFallback(SpmdContext& ctx, const Instruction& orig) {
  std::vector<Instruction*> ops;
  for (Instruction* o : orig.operands()) {
    const PValue& v = ctx.Get(o);
    auto r = ctx.ReshardAny(v, HloSharding::Replicate());
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ops.push_back(*r);
  }
  bool any_sharded = false;
  for (Instruction* o : orig.operands())
    if (o->has_sharding() && !o->sharding()->IsReplicated() && o->shape().ElementCount() > 1) any_sharded = true;
  if (orig.has_sharding() && !orig.sharding()->IsReplicated()) any_sharded = true;
  if (any_sharded) ctx.NoteFallback(orig);
  Instruction* full = CloneWith(ctx, orig, orig.shape(), ops);
  return FinishReplicated(ctx, orig, full);
}

Status HandleConstant(SpmdContext& ctx, const Instruction& orig) {
  Instruction* full = CloneWith(ctx, orig, orig.shape(), {});
  return FinishReplicated(ctx, orig, full);
}

Status HandleIota(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  auto m = ctx.MapOf(s, orig.shape().rank());
  if (!m.ok()) return HandleFallback(ctx, orig);
  Shape local(orig.shape().type, m->ShardShape(orig.shape().dims));
  const int64_t d = orig.iota_dimension;
  Instruction* x;
  if (m->tiles(d) == 1) {
    x = ctx.Emit(Opcode::kIota, local, {});
    x->iota_dimension = d;
  } else {
    // Local iota plus this device's offset along the iota dimension.
    Shape s32(PrimitiveType::kS32, local.dims);
    Instruction* io = ctx.Emit(Opcode::kIota, s32, {});
    io->iota_dimension = d;
    Instruction* off = ctx.Broadcast(ctx.TableLookup(m->OffsetTable(d, orig.shape().dim(d))), s32);
    x = ctx.Emit(Opcode::kAdd, s32, {io, off});
    if (local.type != PrimitiveType::kS32) x = ctx.Emit(Opcode::kConvert, local, {x});
  }
  ctx.Set(&orig, {x, s, orig.shape()});
  return Status::Ok();
}

Status HandleElementwise(SpmdContext& ctx, const Instruction& orig) {
  if (!orig.shape().IsArray()) return HandleFallback(ctx, orig);
  const HloSharding s = SpmdContext::ShardingOf(orig);
  if (!s.IsTiled() && !s.IsReplicated() && !s.IsMaximal()) return HandleFallback(ctx, orig);
  std::vector<Instruction*> ops;
  for (Instruction* o : orig.operands()) {
    auto r = ctx.Reshard(ctx.Get(o), ForRank(s, o->shape().rank()));
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ops.push_back(*r);
  }
  auto local = LocalShape(ctx, orig, s);
  if (!local.ok()) return Error(orig.name() + ": " + local.error().message);
  Instruction* x = CloneWith(ctx, orig, *local, ops);
  ctx.Set(&orig, {x, s, orig.shape()});
  return Status::Ok();
}

Status HandleBroadcast(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  const int64_t rank = orig.shape().rank();
  auto m = ctx.MapOf(s, rank);
  if (!m.ok()) return HandleFallback(ctx, orig);
  // Operand dims are orig.dimensions (result positions); the other result dims are new.
  std::vector<int64_t> new_dims;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(orig.dimensions.begin(), orig.dimensions.end(), d) == orig.dimensions.end()) new_dims.push_back(d);
  TileMap om = m->Gathered(new_dims).Permuted(orig.dimensions);
  auto os = om.ToSharding();
  if (!os.ok()) return HandleFallback(ctx, orig);
  const Instruction* operand = orig.operand(0);
  auto r = ctx.Reshard(ctx.Get(operand), operand->shape().rank() == 0 ? HloSharding::Replicate() : *os);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  Shape local(orig.shape().type, m->ShardShape(orig.shape().dims));
  Instruction* b = ctx.Emit(Opcode::kBroadcast, local, {*r});
  b->dimensions = orig.dimensions;
  b->has_dimensions_attr = true;
  ctx.Set(&orig, {b, s, orig.shape()});
  return Status::Ok();
}

Status HandleTranspose(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  auto m = ctx.MapOf(s, orig.shape().rank());
  if (!m.ok()) return HandleFallback(ctx, orig);
  // Result dim i is operand dim perm[i]; so operand dim perm[i] gets result dim i's tiling.
  std::vector<int64_t> inv(orig.dimensions.size());
  for (size_t i = 0; i < orig.dimensions.size(); ++i) inv[static_cast<size_t>(orig.dimensions[i])] = static_cast<int64_t>(i);
  auto os = m->Permuted(inv).ToSharding();
  if (!os.ok()) return HandleFallback(ctx, orig);
  auto r = ctx.Reshard(ctx.Get(orig.operand(0)), *os);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  Instruction* t = ctx.Transpose(*r, orig.dimensions);
  ctx.Set(&orig, {t, s, orig.shape()});
  return Status::Ok();
}

// Reshape: each sharded result dim must be the major part of a dim group that maps onto an
// operand dim group (1:1, split, or merge); the operand is then sharded on the matching major
// dim and the reshape runs locally. Otherwise the replicated fallback.
Status HandleReshape(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  const Shape& out = orig.shape();
  const Shape& in = orig.operand(0)->shape();
  auto m = ctx.MapOf(s, out.rank());
  if (!m.ok()) return HandleFallback(ctx, orig);
  // Group dims: walk both dim lists accumulating products until they match.
  std::vector<int64_t> in_for_out(static_cast<size_t>(out.rank()), -1);
  std::vector<bool> out_is_major(static_cast<size_t>(out.rank()), false);
  size_t i = 0, o = 0;
  while (i < in.dims.size() || o < out.dims.size()) {
    // Skip size-1 dims on either side.
    if (i < in.dims.size() && in.dims[i] == 1 && (o >= out.dims.size() || out.dims[o] != 1)) { ++i; continue; }
    if (o < out.dims.size() && out.dims[o] == 1 && (i >= in.dims.size() || in.dims[i] != 1)) { ++o; continue; }
    if (i >= in.dims.size() || o >= out.dims.size()) break;
    size_t i0 = i, o0 = o;
    int64_t pi = in.dims[i++], po = out.dims[o++];
    while (pi != po) {
      if (pi < po && i < in.dims.size()) pi *= in.dims[i++];
      else if (po < pi && o < out.dims.size()) po *= out.dims[o++];
      else break;
    }
    if (pi != po) break;
    in_for_out[o0] = static_cast<int64_t>(i0);
    out_is_major[o0] = true;
  }
  std::vector<int64_t> in_tiles(static_cast<size_t>(in.rank()), 1);
  for (int64_t d = 0; d < out.rank(); ++d) {
    const int64_t t = m->tiles(d);
    if (t == 1) continue;
    const int64_t src = in_for_out[static_cast<size_t>(d)];
    if (!out_is_major[static_cast<size_t>(d)] || src < 0) return HandleFallback(ctx, orig);
    // The major dims on both sides must split evenly.
    if (out.dim(d) % t != 0 || in.dim(src) % t != 0) return HandleFallback(ctx, orig);
    in_tiles[static_cast<size_t>(src)] = t;
  }
  std::vector<DeviceTile> devs;
  for (int64_t dev = 0; dev < ctx.num_devices(); ++dev) {
    DeviceTile dt;
    dt.index.assign(static_cast<size_t>(in.rank()), 0);
    for (int64_t d = 0; d < out.rank(); ++d)
      if (m->tiles(d) > 1) dt.index[static_cast<size_t>(in_for_out[static_cast<size_t>(d)])] = m->device(dev).index[static_cast<size_t>(d)];
    dt.replica = m->device(dev).replica;
    devs.push_back(dt);
  }
  auto in_sharding = TileMap(in_tiles, devs).ToSharding();
  if (!in_sharding.ok()) return HandleFallback(ctx, orig);
  auto r = ctx.Reshard(ctx.Get(orig.operand(0)), *in_sharding);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  Instruction* x = ctx.Reshape(*r, m->ShardShape(out.dims));
  if (x == *r && x->shape().dims != m->ShardShape(out.dims)) return HandleFallback(ctx, orig);
  ctx.Set(&orig, {x, s, orig.shape()});
  return Status::Ok();
}

Status HandleReduce(SpmdContext& ctx, const Instruction& orig) {
  if (orig.operand_count() != 2 || !orig.shape().IsArray()) return HandleFallback(ctx, orig);
  const Instruction* operand = orig.operand(0);
  const PValue& in = ctx.Get(operand);
  auto m = ctx.MapOf(in.sharding, operand->shape().rank());
  if (!m.ok()) return HandleFallback(ctx, orig);
  const std::optional<ReductionKind> kind = MatchReduction(orig.to_apply());
  const Opcode rop = kind ? ReductionOpcode(*kind) : Opcode::kAdd;
  const std::optional<Literal> identity = kind ? ReductionIdentity(*kind, operand->shape().type) : std::nullopt;
  std::vector<int64_t> sharded_reduced;
  for (int64_t d : orig.dimensions)
    if (m->tiles(d) > 1) sharded_reduced.push_back(d);
  if (!sharded_reduced.empty() && !identity) return HandleFallback(ctx, orig);
  // Keep the operand's sharding; mask padding on reduced dims with the reducer's identity.
  Instruction* x = in.hlo;
  const double idv = identity ? identity->values[0] : 0.0;
  if (!sharded_reduced.empty()) x = ctx.MaskPadding(in, sharded_reduced, idv);
  auto init = ctx.Reshard(ctx.Get(orig.operand(1)), HloSharding::Replicate());
  if (!init.ok()) return init.error();
  // Every device reduces its part from the identity; the user's initial value is combined once,
  // after the partial results are summed (XLA's semantics: it enters the reduction once, not once
  // per device).
  Instruction* user_init = *init;
  const Instruction* given = orig.operand(1);
  const bool init_is_identity = identity && given->opcode() == Opcode::kConstant && given->literal.values.size() == 1 &&
                                given->literal.values[0] == idv;
  const bool combine_init = !sharded_reduced.empty() && !init_is_identity;
  if (combine_init) *init = ctx.ConstantScalar(given->shape().type, idv);
  // Result map: operand map with reduced dims gathered (they become replicas), then dropped.
  TileMap gathered = m->Gathered(sharded_reduced);
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < operand->shape().rank(); ++d)
    if (std::find(orig.dimensions.begin(), orig.dimensions.end(), d) == orig.dimensions.end()) kept.push_back(d);
  TileMap rm = gathered.Permuted(kept);
  Shape local(orig.shape().type, rm.ShardShape(orig.shape().dims));
  Instruction* r = ctx.Emit(Opcode::kReduce, local, {x, *init});
  r->dimensions = orig.dimensions;
  r->has_dimensions_attr = true;
  Computation* reducer = ctx.CloneScalarComputation(orig.to_apply());
  r->mutable_called_computations() = {reducer};
  if (!sharded_reduced.empty()) {
    r = ctx.AllReduce(r, reducer, m->GroupsAlong(sharded_reduced), "reduce over a sharded dimension");
    if (combine_init) r = ctx.Emit(rop, local, {r, ctx.Broadcast(user_init, local)});
  }
  auto rs = rm.ToSharding();
  if (!rs.ok()) return rs.error();
  PValue v{r, *rs, orig.shape()};
  const HloSharding target = SpmdContext::ShardingOf(orig);
  auto fin = ctx.Reshard(v, target);
  if (!fin.ok()) return fin.error();
  ctx.Set(&orig, {*fin, target, orig.shape()});
  return Status::Ok();
}

Status HandleTuple(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  std::vector<Instruction*> ops;
  std::vector<HloSharding> subs;
  std::vector<Shape> shapes;
  for (int64_t i = 0; i < orig.operand_count(); ++i) {
    HloSharding sub = s.IsTuple() && i < static_cast<int64_t>(s.tuple_elements().size()) ? s.tuple_elements()[static_cast<size_t>(i)] : s;
    if (!s.IsTuple() && orig.operand(i)->has_sharding() && !orig.has_sharding()) sub = *orig.operand(i)->sharding();
    auto r = ctx.ReshardAny(ctx.Get(orig.operand(i)), sub);
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ops.push_back(*r);
    subs.push_back(sub);
    shapes.push_back((*r)->shape());
  }
  Instruction* t = ctx.Emit(Opcode::kTuple, Shape::Tuple(shapes), ops);
  ctx.Set(&orig, {t, HloSharding::Tuple(subs), orig.shape()});
  return Status::Ok();
}

Status HandleGetTupleElement(SpmdContext& ctx, const Instruction& orig) {
  const PValue& in = ctx.Get(orig.operand(0));
  const size_t i = static_cast<size_t>(orig.tuple_index);
  if (!in.hlo || !in.hlo->shape().IsTuple() || i >= in.hlo->shape().tuple.size())
    return Error(orig.name() + ": get-tuple-element of a non-tuple partitioned value");
  HloSharding sub = in.sharding.IsTuple() && i < in.sharding.tuple_elements().size() ? in.sharding.tuple_elements()[i] : in.sharding;
  Instruction* g = ctx.Emit(Opcode::kGetTupleElement, in.hlo->shape().tuple[i], {in.hlo});
  g->tuple_index = orig.tuple_index;
  PValue v{g, sub, orig.shape()};
  const HloSharding target = orig.has_sharding() ? *orig.sharding() : sub;
  auto r = ctx.ReshardAny(v, target);
  if (!r.ok()) return r.error();
  ctx.Set(&orig, {*r, target, orig.shape()});
  return Status::Ok();
}

// custom-call "Sharding" is an annotation: the value resharded to it. Other custom-calls fall back.
Status HandleCustomCall(SpmdContext& ctx, const Instruction& orig) {
  if ((orig.custom_call_target == "Sharding" || orig.custom_call_target == "LayoutConstraint") &&
      orig.operand_count() == 1) {
    const HloSharding target = SpmdContext::ShardingOf(orig);
    auto r = ctx.ReshardAny(ctx.Get(orig.operand(0)), target);
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ctx.Set(&orig, {*r, target, orig.shape()});
    return Status::Ok();
  }
  if (orig.custom_call_target == "SPMDFullToShardShape" && orig.operand_count() == 1) {
    // Entering a manual region: the operand's shards become the manual region's local values.
    const PValue& in = ctx.Get(orig.operand(0));
    Instruction* x = ctx.Emit(Opcode::kCopy, in.hlo->shape(), {in.hlo});
    ctx.Set(&orig, {x, HloSharding::Manual(), in.hlo->shape()});
    return Status::Ok();
  }
  if (orig.custom_call_target == "SPMDShardToFullShape" && orig.operand_count() == 1) {
    const PValue& in = ctx.Get(orig.operand(0));
    Instruction* x = ctx.Emit(Opcode::kCopy, in.hlo->shape(), {in.hlo});
    ctx.Set(&orig, {x, SpmdContext::ShardingOf(orig), orig.shape()});
    return Status::Ok();
  }
  return HandleFallback(ctx, orig);
}

Status HandleWhile(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  auto init = ctx.ReshardAny(ctx.Get(orig.operand(0)), s);
  if (!init.ok()) return Error(orig.name() + ": " + init.error().message);
  auto cond = ctx.PartitionCalled(orig.while_condition(), {s}, HloSharding::Replicate());
  if (!cond.ok()) return cond.error();
  auto body = ctx.PartitionCalled(orig.while_body(), {s}, s);
  if (!body.ok()) return body.error();
  Instruction* w = ctx.Emit(Opcode::kWhile, (*init)->shape(), {*init});
  w->mutable_called_computations() = {*cond, *body};
  ctx.Set(&orig, {w, s, orig.shape()});
  return Status::Ok();
}

Status HandleCall(SpmdContext& ctx, const Instruction& orig) {
  const Computation* callee = orig.to_apply();
  if (!callee) return HandleFallback(ctx, orig);
  std::vector<HloSharding> ps;
  std::vector<Instruction*> ops;
  for (int64_t i = 0; i < orig.operand_count(); ++i) {
    const Instruction* p = i < static_cast<int64_t>(callee->parameters().size()) ? callee->parameter(i) : nullptr;
    HloSharding s = p && p->has_sharding() ? *p->sharding() : ctx.Get(orig.operand(i)).sharding;
    auto r = ctx.ReshardAny(ctx.Get(orig.operand(i)), s);
    if (!r.ok()) return r.error();
    ps.push_back(s);
    ops.push_back(*r);
  }
  HloSharding rs = callee->root() && callee->root()->has_sharding() ? *callee->root()->sharding() : SpmdContext::ShardingOf(orig);
  auto c = ctx.PartitionCalled(callee, ps, rs);
  if (!c.ok()) return c.error();
  Instruction* call = ctx.Emit(Opcode::kCall, (*c)->root()->shape(), ops);
  call->mutable_called_computations() = {*c};
  PValue v{call, rs, orig.shape()};
  const HloSharding target = SpmdContext::ShardingOf(orig);
  auto fin = ctx.ReshardAny(v, target);
  if (!fin.ok()) return fin.error();
  ctx.Set(&orig, {*fin, target, orig.shape()});
  return Status::Ok();
}

Status HandleConditional(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding target = SpmdContext::ShardingOf(orig);
  auto pred = ctx.Reshard(ctx.Get(orig.operand(0)), HloSharding::Replicate());
  if (!pred.ok()) return pred.error();
  std::vector<Instruction*> ops = {*pred};
  std::vector<Computation*> branches;
  for (size_t b = 0; b < orig.called_computations().size(); ++b) {
    const Computation* br = orig.called_computations()[b];
    const Instruction* arg = orig.operand(static_cast<int64_t>(b) + 1);
    const Instruction* p = br && !br->parameters().empty() ? br->parameter(0) : nullptr;
    HloSharding s = p && p->has_sharding() ? *p->sharding() : ctx.Get(arg).sharding;
    auto r = ctx.ReshardAny(ctx.Get(arg), s);
    if (!r.ok()) return r.error();
    ops.push_back(*r);
    auto c = ctx.PartitionCalled(br, {s}, target);
    if (!c.ok()) return c.error();
    branches.push_back(*c);
  }
  auto local = ctx.ShardShapeOf(orig.shape(), target);
  if (!local.ok()) return local.error();
  Instruction* x = ctx.Emit(Opcode::kConditional, *local, ops);
  x->mutable_called_computations() = branches;
  ctx.Set(&orig, {x, target, orig.shape()});
  return Status::Ok();
}

const RegisterHandler kParameter({Opcode::kParameter}, HandleParameter);
const RegisterHandler kConstant({Opcode::kConstant}, HandleConstant);
const RegisterHandler kIota({Opcode::kIota}, HandleIota);
const RegisterHandler kElementwise(
    {Opcode::kAbs, Opcode::kAdd, Opcode::kAnd, Opcode::kAtan2, Opcode::kCbrt, Opcode::kCeil, Opcode::kClamp,
     Opcode::kClz, Opcode::kCompare, Opcode::kConvert, Opcode::kCopy, Opcode::kCos, Opcode::kDivide, Opcode::kErf,
     Opcode::kExp, Opcode::kExpm1, Opcode::kFloor, Opcode::kIsFinite, Opcode::kLog, Opcode::kLog1p,
     Opcode::kLogistic, Opcode::kMaximum, Opcode::kMinimum, Opcode::kMultiply, Opcode::kNegate, Opcode::kNot,
     Opcode::kOr, Opcode::kPopcnt, Opcode::kPower, Opcode::kRemainder, Opcode::kRoundNearestAfz,
     Opcode::kRoundNearestEven, Opcode::kRsqrt, Opcode::kSelect, Opcode::kShiftLeft,
     Opcode::kShiftRightArithmetic, Opcode::kShiftRightLogical, Opcode::kSign, Opcode::kSin, Opcode::kSqrt,
     Opcode::kSubtract, Opcode::kTan, Opcode::kTanh, Opcode::kXor, Opcode::kBitcastConvert,
     Opcode::kReducePrecision},
    HandleElementwise);
const RegisterHandler kBroadcast({Opcode::kBroadcast}, HandleBroadcast);
const RegisterHandler kTranspose({Opcode::kTranspose}, HandleTranspose);
const RegisterHandler kReshape({Opcode::kReshape, Opcode::kBitcast}, HandleReshape);
const RegisterHandler kReduce({Opcode::kReduce}, HandleReduce);
const RegisterHandler kTuple({Opcode::kTuple}, HandleTuple);
const RegisterHandler kGte({Opcode::kGetTupleElement}, HandleGetTupleElement);
const RegisterHandler kCustomCall({Opcode::kCustomCall}, HandleCustomCall);
const RegisterHandler kWhile({Opcode::kWhile}, HandleWhile);
const RegisterHandler kCall({Opcode::kCall}, HandleCall);
const RegisterHandler kConditional({Opcode::kConditional}, HandleConditional);

}  // namespace

// Exposed for the driver: the handler used when no dedicated one is registered.
Status PartitionWithFallback(SpmdContext& ctx, const Instruction& orig) { return HandleFallback(ctx, orig); }

}  // namespace shardscope::spmd
