// Data-formatting ops (concatenate, reverse, dynamic-slice, dynamic-update-slice, sort): every
// dimension the op leaves untouched keeps its sharding and runs locally; only the dimensions the op
// changes are gathered first. Windowed ops (convolution, reduce-window, pad, slice) keep their
// windowed dimensions sharded with halo exchange instead: windowed.cpp.
#include <algorithm>

#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {
namespace {

// The dims of the result that `op` changes (extent, index mapping, or cross-element dependence).
std::vector<int64_t> TouchedDims(const Instruction& op) {
  std::vector<int64_t> t;
  const Shape& out = op.shape().IsTuple() ? op.shape().tuple.at(0) : op.shape();
  const int64_t rank = out.rank();
  auto add = [&](int64_t d) {
    if (d >= 0 && d < rank && std::find(t.begin(), t.end(), d) == t.end()) t.push_back(d);
  };
  switch (op.opcode()) {
    case Opcode::kConcatenate:
    case Opcode::kReverse:
    case Opcode::kSort:
      for (int64_t d : op.dimensions) add(d);
      break;
    case Opcode::kDynamicSlice:
      for (int64_t d = 0; d < rank; ++d)
        if (op.dynamic_slice_sizes[static_cast<size_t>(d)] != op.operand(0)->shape().dim(d)) add(d);
      break;
    case Opcode::kDynamicUpdateSlice:
      for (int64_t d = 0; d < rank; ++d)
        if (op.operand(1)->shape().dim(d) != op.operand(0)->shape().dim(d)) add(d);
      break;
    default:
      for (int64_t d = 0; d < rank; ++d) add(d);
  }
  return t;
}

Status HandleKeepUntouched(SpmdContext& ctx, const Instruction& op) {
  const HloSharding target = SpmdContext::ShardingOf(op);
  const Shape& out = op.shape().IsTuple() ? op.shape().tuple.at(0) : op.shape();
  // Sort with several operands has a tuple result whose leaves share one sharding.
  HloSharding leaf = target.IsTuple() ? (target.tuple_elements().empty() ? HloSharding::Replicate()
                                                                          : target.tuple_elements()[0])
                                      : target;
  auto m = ctx.maps().Get(leaf, out.rank());
  if (!m.ok() || (op.shape().IsTuple() && op.opcode() != Opcode::kSort)) return PartitionWithFallback(ctx, op);
  const std::vector<int64_t> touched = TouchedDims(op);
  const TileMap work = m->Gathered(touched);
  auto ws = work.ToSharding();
  if (!ws.ok()) return PartitionWithFallback(ctx, op);
  // Operands: same-rank arrays take the working sharding; scalars / index operands replicate.
  std::vector<Instruction*> ops;
  for (int64_t i = 0; i < op.operand_count(); ++i) {
    const Instruction* o = op.operand(i);
    const bool data = o->shape().IsArray() && o->shape().rank() == out.rank() && o->shape().rank() > 0;
    auto r = ctx.resharder().Reshard(ctx.Get(o), data ? *ws : HloSharding::Replicate());
    if (!r.ok()) return Error(op.name() + ": " + r.error().message);
    ops.push_back(*r);
  }
  auto local = ctx.maps().ShardShape(op.shape(), op.shape().IsTuple() ? HloSharding::Tuple(std::vector<HloSharding>(op.shape().tuple.size(), *ws)) : *ws);
  if (!local.ok()) return PartitionWithFallback(ctx, op);
  Instruction* x = ctx.builder().Emit(op.opcode(), *local, ops);
  // Attributes: untouched sharded dims cover the whole local shard.
  CopyAttributes(op, x);
  std::vector<Computation*> called;
  for (Computation* c : op.called_computations()) called.push_back(ctx.builder().CloneScalarComputation(c));
  x->mutable_called_computations() = called;
  const Shape& lout = local->IsTuple() ? local->tuple.at(0) : *local;
  if (op.opcode() == Opcode::kDynamicSlice) {
    x->dynamic_slice_sizes = op.dynamic_slice_sizes;
    for (int64_t d = 0; d < out.rank(); ++d)
      if (work.tiles(d) > 1) x->dynamic_slice_sizes[static_cast<size_t>(d)] = lout.dim(d);
  }
  PartitionedHlo v{x, op.shape().IsTuple() ? HloSharding::Tuple(std::vector<HloSharding>(op.shape().tuple.size(), *ws)) : *ws,
           op.shape()};
  auto fin = ctx.resharder().ReshardAny(v, target);
  if (!fin.ok()) return Error(op.name() + ": " + fin.error().message);
  ctx.Set(&op, {*fin, target, op.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterFormattingHandlers(HandlerTable& table) {
  table.Add({Opcode::kConcatenate, Opcode::kReverse, Opcode::kDynamicSlice, Opcode::kDynamicUpdateSlice, Opcode::kSort},
            HandleKeepUntouched);
}

}  // namespace shardscope::spmd
