// Data-formatting ops (concatenate, dynamic-slice, dynamic-update-slice, sort) and batched linear
// algebra (cholesky, triangular-solve: the two minor dims are one matrix): every dimension the
// op leaves untouched keeps its sharding and runs locally; only the dimensions the op changes are
// gathered first. Reverse keeps its reversed dimensions sharded (GSPMD §4.3: a halo exchange moves
// the padding of uneven shards to the other end, a local reverse, and the tiles swap places).
// Windowed ops (convolution, reduce-window, pad, slice) keep their windowed dimensions sharded with
// halo exchange too: windowed.cpp.
#include <algorithm>

#include "partitioner/spmd/context.h"
#include "partitioner/spmd/halo.h"
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
    case Opcode::kGeneric:
      // Batched linear algebra (cholesky, triangular-solve): each matrix, the two minor dims, is
      // one problem.
      if (rank >= 2 && (op.opcode_text() == "cholesky" || op.opcode_text() == "triangular-solve")) {
        add(rank - 2);
        add(rank - 1);
        break;
      }
      for (int64_t d = 0; d < rank; ++d) add(d);
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

// The result's map with the sharded touched dims' tiles moved onto an untouched dim (as the minor
// part of its tile index, the touched dims' indices in row-major order): the op then runs with
// every dim it touches whole and the work still split over every device. The untouched dim: one
// whose size the combined tiles divide, else the largest; none when no touched dim is sharded.
std::optional<TileMap> MovedTouchedTiles(const TileMap& m, const std::vector<int64_t>& touched, const std::vector<int64_t>& dims) {
  std::vector<int64_t> moving;
  int64_t k = 1;
  for (int64_t t : touched) {
    if (m.tiles(t) == 1) continue;
    moving.push_back(t);
    k *= m.tiles(t);
  }
  if (moving.empty()) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t e = -1;
  bool e_divides = false;
  for (int64_t c = 0; c < rank; ++c) {
    if (std::find(touched.begin(), touched.end(), c) != touched.end()) continue;
    const int64_t size = dims[static_cast<size_t>(c)], tiles = m.tiles(c) * k;
    if (size < tiles) continue;
    const bool divides = size % tiles == 0;
    if (e < 0 || (divides && !e_divides) ||
        (divides == e_divides && size > dims[static_cast<size_t>(e)])) {
      e = c;
      e_divides = divides;
    }
  }
  if (e < 0) return std::nullopt;
  std::vector<int64_t> tiles = m.tiles();
  tiles[static_cast<size_t>(e)] *= k;
  for (int64_t d : moving) tiles[static_cast<size_t>(d)] = 1;
  std::vector<DeviceTile> devs;
  devs.reserve(static_cast<size_t>(m.num_devices()));
  for (int64_t dev = 0; dev < m.num_devices(); ++dev) {
    DeviceTile dt = m.device(dev);
    int64_t index = dt.index[static_cast<size_t>(e)];
    for (int64_t d : moving) {
      index = index * m.tiles(d) + dt.index[static_cast<size_t>(d)];
      dt.index[static_cast<size_t>(d)] = 0;
    }
    dt.index[static_cast<size_t>(e)] = index;
    devs.push_back(std::move(dt));
  }
  return TileMap(std::move(tiles), std::move(devs));
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
  TileMap work = m->Gathered(touched);
  auto ws = work.ToSharding();
  if (!ws.ok()) return PartitionWithFallback(ctx, op);
  // Or, for concatenate, sort and batched linear algebra, the touched dims' tiles moved onto an
  // untouched dim (XLA's concatenate and sort handlers: all-to-alls there and back instead of
  // making the dim whole on every device; cholesky's matrices spread over every device), when that
  // moves no more bytes (the per-collective overhead aside: the work and the memory stay split
  // over every device). Dynamic-(update-)slice gather, as XLA's do.
  const bool may_move = op.opcode() == Opcode::kConcatenate || op.opcode() == Opcode::kSort || op.opcode() == Opcode::kGeneric;
  if (auto moved = may_move ? MovedTouchedTiles(*m, touched, out.dims) : std::nullopt) {
    auto msh = moved->ToSharding();
    if (msh.ok()) {
      auto payload = [&](const HloSharding& w) -> std::optional<int64_t> {
        int64_t total = 0;
        auto add = [&](const HloSharding& from, const HloSharding& to, const Shape& shape) {
          auto plan = ctx.resharder().Plan(from, to, shape);
          if (!plan.ok()) return false;
          total += plan->bytes;
          for (const ReshardStep& st : plan->steps)
            if (st.kind != ReshardStep::Kind::kDynamicSlice) total -= kCollectiveOverheadBytes;
          return true;
        };
        for (int64_t i = 0; i < op.operand_count(); ++i) {
          const Instruction* o = op.operand(i);
          if (!o->shape().IsArray() || o->shape().rank() != out.rank() || o->shape().rank() == 0) continue;
          if (!add(ctx.Get(o).sharding, w, o->shape())) return std::nullopt;
        }
        if (!add(w, leaf, out)) return std::nullopt;
        return total;
      };
      const auto gather_bytes = payload(*ws), move_bytes = payload(*msh);
      if (move_bytes && (!gather_bytes || *move_bytes <= *gather_bytes)) {
        work = *moved;
        ws = *msh;
      }
    }
  }
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
  Instruction* x = op.opcode() == Opcode::kGeneric ? ctx.builder().comp()->AddGeneric(op.opcode_text(), *local, ops, op.name())
                                                   : ctx.builder().Emit(op.opcode(), *local, ops);
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

// dynamic-update-slice along sharded dims without gathering the operand (XLA's select form, what a
// sequence-sharded KV cache's update needs): every device keeps its shard; the update — small
// beside the operand — is made whole along the sharded updated dims, moved into each shard's
// coordinates (padded by a shard on both sides and cut at S + shard start - start), and selected
// where the shard's positions lie inside the updated range. The start indices are clamped first, as
// the op clamps them; updated dims that are not sharded keep a local dynamic-update-slice.
Status HandleDynamicUpdateSlice(SpmdContext& ctx, const Instruction& op) {
  const HloSharding target = SpmdContext::ShardingOf(op);
  const Shape& shape = op.shape();
  const int64_t rank = shape.rank();
  if (!shape.IsArray() || op.operand_count() != 2 + rank || !target.IsTiled() || rank == 0)
    return HandleKeepUntouched(ctx, op);
  auto m = ctx.maps().Get(target, rank);
  if (!m.ok()) return HandleKeepUntouched(ctx, op);
  const Shape& us = op.operand(1)->shape();
  std::vector<int64_t> sharded, local_touched;  // updated dims split / whole in the target
  for (int64_t d = 0; d < rank; ++d) {
    if (us.dim(d) == shape.dim(d)) continue;
    (m->tiles(d) > 1 ? sharded : local_touched).push_back(d);
  }
  if (sharded.empty()) return HandleKeepUntouched(ctx, op);
  auto ush = m->Gathered(sharded).ToSharding();
  if (!ush.ok()) return HandleKeepUntouched(ctx, op);
  auto x = ctx.resharder().Reshard(ctx.Get(op.operand(0)), target);
  if (!x.ok()) return Error(op.name() + ": " + x.error().message);
  auto u = ctx.resharder().Reshard(ctx.Get(op.operand(1)), *ush);
  if (!u.ok()) return Error(op.name() + ": " + u.error().message);
  SpmdBuilder& b = ctx.builder();
  const Shape s32 = Shape::Scalar(PrimitiveType::kS32);
  auto c32 = [&](int64_t v) { return b.ConstantScalar(PrimitiveType::kS32, static_cast<double>(v)); };
  // Clamped starts, as s32 scalars every device holds.
  std::vector<Instruction*> start(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    auto st = ctx.resharder().Reshard(ctx.Get(op.operand(2 + d)), HloSharding::Replicate());
    if (!st.ok()) return Error(op.name() + ": " + st.error().message);
    Instruction* v = *st;
    if (v->shape().type != PrimitiveType::kS32) v = b.Emit(Opcode::kConvert, s32, {v});
    start[static_cast<size_t>(d)] = b.Emit(Opcode::kClamp, s32, {c32(0), v, c32(shape.dim(d) - us.dim(d))});
  }
  const std::vector<int64_t> shard = m->ShardShape(shape.dims);
  // The update in each shard's coordinates along the sharded dims.
  Instruction* padded = *u;
  {
    std::vector<int64_t> dims = padded->shape().dims;
    std::vector<PaddingDim> pad(static_cast<size_t>(rank));
    for (int64_t d : sharded) {
      const int64_t S = shard[static_cast<size_t>(d)];
      pad[static_cast<size_t>(d)].low = S;
      pad[static_cast<size_t>(d)].high = S;
      dims[static_cast<size_t>(d)] += 2 * S;
    }
    Instruction* p = b.Emit(Opcode::kPad, Shape(padded->shape().type, dims), {padded, b.ConstantScalar(padded->shape().type, 0)});
    p->padding = pad;
    padded = p;
  }
  std::vector<Instruction*> at(static_cast<size_t>(rank));
  std::vector<int64_t> sizes = (*u)->shape().dims;
  std::vector<Instruction*> shard_start(static_cast<size_t>(rank), nullptr);
  for (int64_t d = 0; d < rank; ++d) {
    at[static_cast<size_t>(d)] = c32(0);
    if (std::find(sharded.begin(), sharded.end(), d) == sharded.end()) continue;
    const int64_t S = shard[static_cast<size_t>(d)];
    shard_start[static_cast<size_t>(d)] = b.TableLookup(m->OffsetTable(d, shape.dim(d)));
    Instruction* rel = b.Emit(Opcode::kSubtract, s32, {shard_start[static_cast<size_t>(d)], start[static_cast<size_t>(d)]});
    at[static_cast<size_t>(d)] = b.Emit(Opcode::kAdd, s32, {rel, c32(S)});
    sizes[static_cast<size_t>(d)] = S;
  }
  Instruction* aligned = b.DynamicSlice(padded, at, sizes);
  const Shape region(shape.type, sizes);
  const Shape pred(PrimitiveType::kPred, sizes);
  const Shape idx(PrimitiveType::kS32, sizes);
  // Positions of the shard inside the updated range, along every sharded updated dim.
  Instruction* mask = nullptr;
  for (int64_t d : sharded) {
    Instruction* io = b.Emit(Opcode::kIota, idx, {});
    io->iota_dimension = d;
    Instruction* pos = b.Emit(Opcode::kAdd, idx, {io, b.Broadcast(shard_start[static_cast<size_t>(d)], idx)});
    Instruction* lo = b.Broadcast(start[static_cast<size_t>(d)], idx);
    Instruction* hi = b.Broadcast(b.Emit(Opcode::kAdd, s32, {start[static_cast<size_t>(d)], c32(us.dim(d))}), idx);
    Instruction* ge = b.Emit(Opcode::kCompare, pred, {pos, lo});
    ge->comparison = ComparisonDirection::kGe;
    Instruction* lt = b.Emit(Opcode::kCompare, pred, {pos, hi});
    lt->comparison = ComparisonDirection::kLt;
    Instruction* in = b.Emit(Opcode::kAnd, pred, {ge, lt});
    mask = mask ? b.Emit(Opcode::kAnd, pred, {mask, in}) : in;
  }
  std::vector<Instruction*> local_at(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    local_at[static_cast<size_t>(d)] =
        std::find(local_touched.begin(), local_touched.end(), d) != local_touched.end() ? start[static_cast<size_t>(d)] : c32(0);
  Instruction* base = local_touched.empty() ? *x : b.DynamicSlice(*x, local_at, sizes);
  Instruction* merged = b.Emit(Opcode::kSelect, region, {mask, aligned, base});
  Instruction* out = merged;
  if (!local_touched.empty()) {
    std::vector<Instruction*> ops = {*x, merged};
    ops.insert(ops.end(), local_at.begin(), local_at.end());
    out = b.Emit(Opcode::kDynamicUpdateSlice, (*x)->shape(), std::move(ops));
  }
  ctx.Set(&op, {out, target, shape});
  return Status::Ok();
}

// Reverse along sharded dims without gathering them. With the operand tiled like the result,
// along each reversed dim d of t tiles of S rows (P = t*S - full rows of padding in the last
// tile): (1) a halo exchange shifts the data P rows up, so the padding sits at the start of tile 0
// (tile i holds rows [i*S - P, (i+1)*S - P)); (2) a local reverse; now tile i holds, in order,
// the result's tile t-1-i (its padding at the end); (3) the result's tiling with the tile indices
// along d flipped is resharded to the target: the tiles swap places (a collective-permute).
Status HandleReverse(SpmdContext& ctx, const Instruction& op) {
  const HloSharding target = SpmdContext::ShardingOf(op);
  const Shape& shape = op.shape();
  auto m = ctx.maps().Get(target, shape.rank());
  if (!m.ok() || !shape.IsArray()) return PartitionWithFallback(ctx, op);
  std::vector<int64_t> sharded;
  for (int64_t d : op.dimensions)
    if (m->tiles(d) > 1) sharded.push_back(d);
  if (sharded.empty()) return HandleKeepUntouched(ctx, op);
  auto r = ctx.resharder().Reshard(ctx.Get(op.operand(0)), target);
  if (!r.ok()) return Error(op.name() + ": " + r.error().message);
  Instruction* x = *r;
  for (int64_t d : sharded) {
    const int64_t t = m->tiles(d), full = shape.dim(d), S = m->ShardSize(d, full), pad = t * S - full;
    if (pad == 0) continue;
    std::vector<int64_t> start(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) start[static_cast<size_t>(i)] = i * S - pad;
    auto h = ExchangeHalo(ctx.builder(), x, *m, d, full, start, S, 0.0, /*x_sharded=*/true, "reverse");
    if (!h.ok()) return Error(op.name() + ": " + h.error().message);
    x = *h;
  }
  Instruction* rev = ctx.builder().Emit(Opcode::kReverse, x->shape(), {x});
  rev->dimensions = op.dimensions;
  rev->has_dimensions_attr = true;
  std::vector<DeviceTile> devs;
  for (int64_t dev = 0; dev < ctx.num_devices(); ++dev) {
    DeviceTile dt = m->device(dev);
    for (int64_t d : sharded) dt.index[static_cast<size_t>(d)] = m->tiles(d) - 1 - dt.index[static_cast<size_t>(d)];
    devs.push_back(std::move(dt));
  }
  auto flipped = TileMap(m->tiles(), std::move(devs)).ToSharding();
  if (!flipped.ok()) return PartitionWithFallback(ctx, op);
  auto fin = ctx.resharder().Reshard(PartitionedHlo{rev, *flipped, shape}, target);
  if (!fin.ok()) return Error(op.name() + ": " + fin.error().message);
  ctx.Set(&op, {*fin, target, shape});
  return Status::Ok();
}

}  // namespace

void RegisterFormattingHandlers(HandlerTable& table) {
  table.Add({Opcode::kConcatenate, Opcode::kDynamicSlice, Opcode::kSort}, HandleKeepUntouched);
  table.Add({Opcode::kDynamicUpdateSlice}, HandleDynamicUpdateSlice);
  table.AddGeneric({"cholesky", "triangular-solve"}, HandleKeepUntouched);
  table.Add({Opcode::kReverse}, HandleReverse);
}

}  // namespace shardscope::spmd
