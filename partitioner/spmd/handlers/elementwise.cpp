// Handlers for the ops that run locally on any sharding: parameters, constants, iota (local iota
// plus the shard's offset), elementwise ops (operands resharded to the result's sharding) — and the
// replicated fallback every other handler falls back to.
#include <algorithm>
#include <cstdlib>
#include <map>

#include "core/sharding/unreduced.h"
#include "partitioner/hlo_sharding_util.h"
#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {

namespace {

Result<Shape> LocalShape(SpmdContext& ctx, const Instruction& orig, const HloSharding& s) {
  return ctx.maps().ShardShape(orig.shape(), s);
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
  Instruction* p = ctx.builder().Emit(Opcode::kParameter, *shape, {});
  p->parameter_number = orig.parameter_number;
  p->set_sharding(s);
  ctx.Set(&orig, {p, s, orig.shape()});
  return Status::Ok();
}

Status FinishReplicated(SpmdContext& ctx, const Instruction& orig, Instruction* full) {
  PartitionedHlo v{full, HloSharding::Replicate(), orig.shape()};
  const HloSharding target = SpmdContext::ShardingOf(orig);
  auto r = ctx.resharder().ReshardAny(v, target);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  ctx.Set(&orig, {*r, target, orig.shape()});
  return Status::Ok();
}

Instruction* CloneWith(SpmdContext& ctx, const Instruction& orig, const Shape& shape, std::vector<Instruction*> ops) {
  Instruction* n = orig.opcode() == Opcode::kGeneric
                       ? ctx.builder().comp()->AddGeneric(orig.opcode_text(), shape, ops, orig.name())
                       : ctx.builder().Emit(orig.opcode(), shape, ops);
  CopyAttributes(orig, n);
  std::vector<Computation*> called;
  for (Computation* c : orig.called_computations()) called.push_back(ctx.builder().CloneScalarComputation(c));
  n->mutable_called_computations() = called;
  return n;
}

// Any op without a dedicated handler: replicate the operands, run the op on the full shape, then
// reshard the result to its sharding. Always correct; the cost shows up as all-gathers.
Status HandleFallback(SpmdContext& ctx, const Instruction& orig) {
  std::vector<Instruction*> ops;
  for (Instruction* o : orig.operands()) {
    const PartitionedHlo& v = ctx.Get(o);
    auto r = ctx.resharder().ReshardAny(v, HloSharding::Replicate());
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ops.push_back(*r);
  }
  bool any_sharded = false;
  for (Instruction* o : orig.operands())
    if (o->has_sharding() && !o->sharding()->IsReplicated() && o->shape().ElementCount() > 1) any_sharded = true;
  if (orig.has_sharding() && !orig.sharding()->IsReplicated()) any_sharded = true;
  if (any_sharded) ctx.builder().NoteFallback(orig);
  Instruction* full = CloneWith(ctx, orig, orig.shape(), ops);
  return FinishReplicated(ctx, orig, full);
}

Status HandleConstant(SpmdContext& ctx, const Instruction& orig) {
  Instruction* full = CloneWith(ctx, orig, orig.shape(), {});
  return FinishReplicated(ctx, orig, full);
}

Status HandleIota(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  auto m = ctx.maps().Get(s, orig.shape().rank());
  if (!m.ok()) return HandleFallback(ctx, orig);
  Shape local(orig.shape().type, m->ShardShape(orig.shape().dims));
  const int64_t d = orig.iota_dimension;
  Instruction* x;
  if (m->tiles(d) == 1) {
    x = ctx.builder().Emit(Opcode::kIota, local, {});
    x->iota_dimension = d;
  } else {
    // Local iota plus this device's offset along the iota dimension.
    Shape s32(PrimitiveType::kS32, local.dims);
    Instruction* io = ctx.builder().Emit(Opcode::kIota, s32, {});
    io->iota_dimension = d;
    Instruction* off = ctx.builder().Broadcast(ctx.builder().TableLookup(m->OffsetTable(d, orig.shape().dim(d))), s32);
    x = ctx.builder().Emit(Opcode::kAdd, s32, {io, off});
    if (local.type != PrimitiveType::kS32) x = ctx.builder().Emit(Opcode::kConvert, local, {x});
  }
  ctx.Set(&orig, {x, s, orig.shape()});
  return Status::Ok();
}

// A linear op (copy, negate, add, subtract) of unreduced values is unreduced: each device applies
// it to its partial terms, and the terms still sum to the op of the sums. Wholly unreduced, or
// over subgroups when every operand is unreduced the same way.
bool LinearOfUnreduced(SpmdContext& ctx, const Instruction& orig, const HloSharding& s) {
  const bool whole = s.kind() == HloSharding::Kind::kUnreduced;
  if ((!whole && !HasUnreducedSubgroup(s)) || orig.operand_count() == 0) return false;
  const Opcode op = orig.opcode();
  if (op != Opcode::kCopy && op != Opcode::kNegate && op != Opcode::kAdd && op != Opcode::kSubtract) return false;
  std::vector<Instruction*> ops;
  for (Instruction* o : orig.operands()) {
    const PartitionedHlo& v = ctx.Get(o);
    if (whole ? v.sharding.kind() != HloSharding::Kind::kUnreduced : !(v.sharding == s)) return false;
    ops.push_back(v.hlo);
  }
  Shape local = orig.shape();
  if (!whole) {
    auto l = LocalShape(ctx, orig, s);
    if (!l.ok()) return false;
    local = *l;
  }
  ctx.Set(&orig, {CloneWith(ctx, orig, local, ops), s, orig.shape()});
  return true;
}

Status HandleElementwise(SpmdContext& ctx, const Instruction& orig) {
  if (!orig.shape().IsArray()) return HandleFallback(ctx, orig);
  const HloSharding s = SpmdContext::ShardingOf(orig);
  if (LinearOfUnreduced(ctx, orig, s)) return Status::Ok();
  if (!s.IsTiled() && !s.IsReplicated() && !s.IsMaximal()) return HandleFallback(ctx, orig);
  std::vector<Instruction*> ops;
  for (Instruction* o : orig.operands()) {
    auto r = ctx.resharder().Reshard(ctx.Get(o), ForRank(s, o->shape().rank()));
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ops.push_back(*r);
  }
  auto local = LocalShape(ctx, orig, s);
  if (!local.ok()) return Error(orig.name() + ": " + local.error().message);
  Instruction* x = CloneWith(ctx, orig, *local, ops);
  ctx.Set(&orig, {x, s, orig.shape()});
  return Status::Ok();
}

// A bitcast-convert between types of different widths changes the rank: the operand's last dim
// folds into each result element (in rank = out rank + 1), or each element unfolds into the
// result's new last dim. That dim must be whole on every device: the op runs in the result's
// sharding with it unsplit, and the operand and result are resharded around it.
Status HandleBitcastConvert(SpmdContext& ctx, const Instruction& orig) {
  const Instruction* o = orig.operand_count() == 1 ? orig.operand(0) : nullptr;
  if (!o || !orig.shape().IsArray() || !o->shape().IsArray()) return HandleFallback(ctx, orig);
  const int64_t in_rank = o->shape().rank(), out_rank = orig.shape().rank();
  if (in_rank == out_rank) return HandleElementwise(ctx, orig);
  const HloSharding s = SpmdContext::ShardingOf(orig);
  if (!s.IsTiled() || std::abs(in_rank - out_rank) != 1) return HandleFallback(ctx, orig);
  // The sharding the op runs in (work) and its operand's.
  HloSharding work = s, operand = s;
  if (in_rank == out_rank + 1) {
    operand = hlo_sharding_util::InsertShapeDimensions(s, {in_rank - 1});
  } else {
    work = hlo_sharding_util::PartiallyReplicateTiledShardingOnDims(s, {out_rank - 1});
    operand = hlo_sharding_util::RemoveShapeDimensions(work, {out_rank - 1});
  }
  auto in = ctx.resharder().Reshard(ctx.Get(o), operand);
  if (!in.ok()) return Error(orig.name() + ": " + in.error().message);
  auto local = ctx.maps().ShardShape(orig.shape(), work);
  if (!local.ok()) return HandleFallback(ctx, orig);
  Instruction* x = CloneWith(ctx, orig, *local, {*in});
  auto fin = ctx.resharder().Reshard({x, work, orig.shape()}, s);
  if (!fin.ok()) return Error(orig.name() + ": " + fin.error().message);
  ctx.Set(&orig, {*fin, s, orig.shape()});
  return Status::Ok();
}

// An all-reduce written in the input program (XLA's HandleAllReduce). One across replicas (no
// channel id) combines the same element of every replica's copy, so each partition reduces its own
// shard: elementwise. One across partitions (a channel id) is manually partitioned code: when its
// operand's sharding has a manual subgroup, each of its groups must lie within one manual subgroup
// (the devices that differ only in the manual dimension); otherwise it runs as written on the
// replicated operand.
Status HandleAllReduce(SpmdContext& ctx, const Instruction& orig) {
  if (!orig.channel_id && orig.operand_count() == 1 && orig.shape().IsArray()) return HandleElementwise(ctx, orig);
  const Instruction* operand = orig.operand_count() == 1 ? orig.operand(0) : nullptr;
  if (operand && operand->has_sharding() && operand->sharding()->HasManualSubgroup()) {
    const HloSharding& s = *operand->sharding();
    const TileAssignment& tiles = s.tile_assignment();
    const int64_t data_rank = tiles.num_dimensions() - static_cast<int64_t>(s.subgroup_types().size());
    std::vector<int64_t> manual_dims;
    for (size_t k = 0; k < s.subgroup_types().size(); ++k)
      if (s.subgroup_types()[k] == HloSharding::SubgroupType::kManual) manual_dims.push_back(data_rank + static_cast<int64_t>(k));
    auto subgroup = [&](int64_t device) {
      std::vector<int64_t> index = tiles.IndexOfDevice(device);
      for (int64_t d : manual_dims)
        if (d < static_cast<int64_t>(index.size())) index[static_cast<size_t>(d)] = 0;
      return index;
    };
    for (const auto& group : orig.replica_groups.groups) {
      for (int64_t device : group) {
        if (device < 0 || device >= ctx.num_devices() || tiles.IndexOfDevice(device).empty())
          return Error(orig.name() + ": replica group device " + std::to_string(device) + " is not among the " +
                       std::to_string(ctx.num_devices()) + " partitions");
        if (subgroup(device) != subgroup(group.front()))
          return Error(orig.name() + ": Manual all-reduce across devices that belong to different manual subgroups (" +
                       std::to_string(group.front()) + " and " + std::to_string(device) + " under " + s.ToString() + ")");
      }
    }
  }
  return HandleFallback(ctx, orig);
}

// rng (XLA's HandleRng): the operands replicated, every device draws its own shard. A value that is
// replicated (wholly, or across the copies of each tile) must be the same on every copy: the first
// copy of each tile keeps its draw, the others contribute zeros, and an all-reduce over the copies
// hands the draw to all of them.
Status HandleRng(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  // Manual subgroups draw as their code says (the fallback keeps the op as written).
  if (!orig.shape().IsArray() || !(s.IsTiled() || s.IsReplicated()) || s.HasManualSubgroup()) return HandleFallback(ctx, orig);
  auto m = ctx.maps().Get(s, orig.shape().rank());
  if (!m.ok()) return HandleFallback(ctx, orig);
  std::vector<Instruction*> ops;
  for (Instruction* o : orig.operands()) {
    auto r = ctx.resharder().Reshard(ctx.Get(o), HloSharding::Replicate());
    if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
    ops.push_back(*r);
  }
  const Shape local(orig.shape().type, m->ShardShape(orig.shape().dims));
  Instruction* x = CloneWith(ctx, orig, local, ops);
  if (m->replication() > 1) {
    std::map<std::vector<int64_t>, std::vector<int64_t>> copies;  // tile index -> its devices
    std::vector<int64_t> first(static_cast<size_t>(ctx.num_devices()), 0);
    for (int64_t d = 0; d < ctx.num_devices(); ++d) {
      copies[m->device(d).index.ToVector()].push_back(d);
      first[static_cast<size_t>(d)] = m->device(d).replica == 0 ? 1 : 0;
    }
    std::vector<std::vector<int64_t>> groups;
    for (auto& [index, devices] : copies) groups.push_back(std::move(devices));
    SpmdBuilder& b = ctx.builder();
    Instruction* is_first = b.Emit(Opcode::kCompare, Shape::Scalar(PrimitiveType::kPred),
                                   {b.TableLookup(first), b.ConstantScalar(PrimitiveType::kS32, 1)});
    is_first->comparison = ComparisonDirection::kEq;
    Instruction* zeros = b.Broadcast(b.ConstantScalar(local.type, 0), local);
    Instruction* kept = b.Emit(Opcode::kSelect, local, {b.Broadcast(is_first, Shape(PrimitiveType::kPred, local.dims)), x, zeros});
    x = b.AllReduce(kept, b.ScalarReducer(Opcode::kAdd, local.type), groups,
                    "rng: one draw shared by the copies of each tile");
  }
  ctx.Set(&orig, {x, s, orig.shape()});
  return Status::Ok();
}

}  // namespace

// The handler used when no dedicated one is registered (handler_table.h).
Status PartitionWithFallback(SpmdContext& ctx, const Instruction& orig) { return HandleFallback(ctx, orig); }

void RegisterElementwiseHandlers(HandlerTable& table) {
  table.Add({Opcode::kParameter}, HandleParameter);
  table.Add({Opcode::kConstant}, HandleConstant);
  table.Add({Opcode::kIota}, HandleIota);
  table.Add({Opcode::kAllReduce}, HandleAllReduce);
  table.Add({Opcode::kBitcastConvert}, HandleBitcastConvert);
  table.Add({Opcode::kRng}, HandleRng);
  table.Add(
      {Opcode::kAbs, Opcode::kAdd, Opcode::kAnd, Opcode::kAtan2, Opcode::kCbrt, Opcode::kCeil, Opcode::kClamp,
       Opcode::kClz, Opcode::kCompare, Opcode::kConvert, Opcode::kCopy, Opcode::kCos, Opcode::kDivide, Opcode::kErf,
       Opcode::kExp, Opcode::kExpm1, Opcode::kFloor, Opcode::kIsFinite, Opcode::kLog, Opcode::kLog1p,
       Opcode::kLogistic, Opcode::kMaximum, Opcode::kMinimum, Opcode::kMultiply, Opcode::kNegate, Opcode::kNot,
       Opcode::kOr, Opcode::kPopcnt, Opcode::kPower, Opcode::kRemainder, Opcode::kRoundNearestAfz,
       Opcode::kRoundNearestEven, Opcode::kRsqrt, Opcode::kSelect, Opcode::kShiftLeft,
       Opcode::kShiftRightArithmetic, Opcode::kShiftRightLogical, Opcode::kSign, Opcode::kSin, Opcode::kSqrt,
       Opcode::kSubtract, Opcode::kTan, Opcode::kTanh, Opcode::kXor, Opcode::kReducePrecision},
      HandleElementwise);
}

}  // namespace shardscope::spmd
