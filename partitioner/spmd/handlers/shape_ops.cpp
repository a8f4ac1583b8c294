// Handlers for ops that move dimensions around: broadcast (the operand takes the result's tiling
// of the dims it keeps), transpose (the permuted tiling), reshape (sharded dims must be the major
// part of a split/merge group; otherwise the replicated fallback).
#include <algorithm>

#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {

namespace {

Status HandleBroadcast(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  const int64_t rank = orig.shape().rank();
  auto m = ctx.maps().Get(s, rank);
  if (!m.ok()) return PartitionWithFallback(ctx, orig);
  // Operand dims are orig.dimensions (result positions); the other result dims are new.
  std::vector<int64_t> new_dims;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(orig.dimensions.begin(), orig.dimensions.end(), d) == orig.dimensions.end()) new_dims.push_back(d);
  TileMap om = m->Gathered(new_dims).Permuted(orig.dimensions);
  auto os = om.ToSharding();
  if (!os.ok()) return PartitionWithFallback(ctx, orig);
  const Instruction* operand = orig.operand(0);
  auto r = ctx.resharder().Reshard(ctx.Get(operand), operand->shape().rank() == 0 ? HloSharding::Replicate() : *os);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  Shape local(orig.shape().type, m->ShardShape(orig.shape().dims));
  Instruction* b = ctx.builder().Emit(Opcode::kBroadcast, local, {*r});
  b->dimensions = orig.dimensions;
  b->has_dimensions_attr = true;
  ctx.Set(&orig, {b, s, orig.shape()});
  return Status::Ok();
}

Status HandleTranspose(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  auto m = ctx.maps().Get(s, orig.shape().rank());
  if (!m.ok()) return PartitionWithFallback(ctx, orig);
  // Result dim i is operand dim perm[i]; so operand dim perm[i] gets result dim i's tiling.
  std::vector<int64_t> inv(orig.dimensions.size());
  for (size_t i = 0; i < orig.dimensions.size(); ++i) inv[static_cast<size_t>(orig.dimensions[i])] = static_cast<int64_t>(i);
  auto os = m->Permuted(inv).ToSharding();
  if (!os.ok()) return PartitionWithFallback(ctx, orig);
  auto r = ctx.resharder().Reshard(ctx.Get(orig.operand(0)), *os);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  Instruction* t = ctx.builder().Transpose(*r, orig.dimensions);
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
  auto m = ctx.maps().Get(s, out.rank());
  if (!m.ok()) return PartitionWithFallback(ctx, orig);
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
    if (!out_is_major[static_cast<size_t>(d)] || src < 0) return PartitionWithFallback(ctx, orig);
    // The major dims on both sides must split evenly.
    if (out.dim(d) % t != 0 || in.dim(src) % t != 0) return PartitionWithFallback(ctx, orig);
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
  if (!in_sharding.ok()) return PartitionWithFallback(ctx, orig);
  auto r = ctx.resharder().Reshard(ctx.Get(orig.operand(0)), *in_sharding);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  Instruction* x = ctx.builder().Reshape(*r, m->ShardShape(out.dims));
  if (x == *r && x->shape().dims != m->ShardShape(out.dims)) return PartitionWithFallback(ctx, orig);
  ctx.Set(&orig, {x, s, orig.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterShapeHandlers(HandlerTable& table) {
  table.Add({Opcode::kBroadcast}, HandleBroadcast);
  table.Add({Opcode::kTranspose}, HandleTranspose);
  table.Add({Opcode::kReshape, Opcode::kBitcast}, HandleReshape);
}

}  // namespace shardscope::spmd
