// Handlers for ops that move dimensions around: broadcast (the operand takes the result's tiling
// of the dims it keeps), transpose (the permuted tiling), reshape (sharded dims must be the major
// part of a split/merge group, uneven ones by halo exchange; otherwise the replicated fallback).
#include <algorithm>
#include <optional>

#include "partitioner/spmd/context.h"
#include "partitioner/spmd/halo.h"
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
// operand dim group (1:1, split, or merge); the operand is then sharded on the group's major
// operand dim. When both major dims split evenly the reshape runs locally. Otherwise (uneven:
// the shards' element ranges differ on the two sides) each such group is flattened locally and a
// halo exchange gives every device the elements of its result shard (GSPMD §4.3), which a local
// reshape puts in shape. Other layouts take the replicated fallback.
// A reshape's dim groups: operand dims [i0, i1) hold the same elements as result dims [o0, o1).
struct ReshapeGroup {
  int64_t i0, i1, o0, o1;
};

// When the result is sharded on a minor dim of its group (324 -> 2 x 162, split on the 162), no
// operand sharding gives it by a local reshape. As XLA does, reshape in the operand's own sharding
// when that splits only major dims of groups, evenly — each shard is then a contiguous block of its
// group — and reshard the result (an all-to-all where the fallback gathered the whole operand).
// nullopt when the operand's sharding does not allow it.
std::optional<Status> ReshapeInOperandSharding(SpmdContext& ctx, const Instruction& orig, const HloSharding& target,
                                               const std::vector<ReshapeGroup>& groups) {
  const Shape& out = orig.shape();
  const Shape& in = orig.operand(0)->shape();
  const PartitionedHlo& v = ctx.Get(orig.operand(0));
  if (!v.hlo) return std::nullopt;
  auto fm = ctx.maps().Get(v.sharding, in.rank());
  if (!fm.ok()) return std::nullopt;
  std::vector<int64_t> out_tiles(static_cast<size_t>(out.rank()), 1);
  std::vector<std::pair<int64_t, int64_t>> moved;  // (operand dim, result dim)
  for (int64_t d = 0; d < in.rank(); ++d) {
    const int64_t t = fm->tiles(d);
    if (t == 1) continue;
    const ReshapeGroup* g = nullptr;
    for (const ReshapeGroup& c : groups)
      if (c.i0 == d) g = &c;
    if (!g || in.dim(d) % t != 0 || out.dim(g->o0) % t != 0) return std::nullopt;
    out_tiles[static_cast<size_t>(g->o0)] = t;
    moved.emplace_back(d, g->o0);
  }
  if (moved.empty()) return std::nullopt;
  std::vector<DeviceTile> devs;
  for (int64_t dev = 0; dev < ctx.num_devices(); ++dev) {
    DeviceTile dt;
    dt.replica = fm->device(dev).replica;
    dt.index.assign(static_cast<size_t>(out.rank()), 0);
    for (const auto& [d, o] : moved) dt.index[static_cast<size_t>(o)] = fm->device(dev).index[static_cast<size_t>(d)];
    devs.push_back(std::move(dt));
  }
  const TileMap omap(out_tiles, std::move(devs));
  auto os = omap.ToSharding();
  if (!os.ok()) return std::nullopt;
  Instruction* y = ctx.builder().Reshape(v.hlo, omap.ShardShape(out.dims));
  auto r = ctx.resharder().Reshard(PartitionedHlo{y, *os, out}, target);
  if (!r.ok()) return std::nullopt;
  ctx.Set(&orig, {*r, target, out});
  return Status::Ok();
}

Status HandleReshape(SpmdContext& ctx, const Instruction& orig) {
  const HloSharding s = SpmdContext::ShardingOf(orig);
  const Shape& out = orig.shape();
  const Shape& in = orig.operand(0)->shape();
  auto m = ctx.maps().Get(s, out.rank());
  if (!m.ok()) return PartitionWithFallback(ctx, orig);
  // Group dims: walk both dim lists accumulating products until they match.
  using Group = ReshapeGroup;
  std::vector<Group> groups;
  std::vector<int64_t> group_of_out(static_cast<size_t>(out.rank()), -1);
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
    group_of_out[o0] = static_cast<int64_t>(groups.size());
    groups.push_back({static_cast<int64_t>(i0), static_cast<int64_t>(i), static_cast<int64_t>(o0), static_cast<int64_t>(o)});
  }
  std::vector<int64_t> in_tiles(static_cast<size_t>(in.rank()), 1);
  std::vector<int64_t> uneven;  // groups whose shards do not line up
  for (int64_t d = 0; d < out.rank(); ++d) {
    const int64_t t = m->tiles(d);
    if (t == 1) continue;
    const int64_t g = group_of_out[static_cast<size_t>(d)];
    if (g < 0) {  // a minor dim of a group is sharded
      if (auto done = ReshapeInOperandSharding(ctx, orig, s, groups)) return *done;
      return PartitionWithFallback(ctx, orig);
    }
    const int64_t src = groups[static_cast<size_t>(g)].i0;
    if (out.dim(d) % t != 0 || in.dim(src) % t != 0) uneven.push_back(g);
    in_tiles[static_cast<size_t>(src)] = t;
  }
  // Uneven groups: reshaping in the operand's own sharding, when its shards are blocks of their
  // groups, and resharding the result (an all-to-all) beats re-cutting the operand into the
  // result's uneven ranges (a gather, then halos from up to every other shard).
  if (!uneven.empty())
    if (auto done = ReshapeInOperandSharding(ctx, orig, s, groups)) return *done;
  // The operand's sharding: each sharded result dim's tiles on the major dim of its group.
  auto operand_map = [&] {
    const size_t in_rank = static_cast<size_t>(in.rank()), out_rank = static_cast<size_t>(out.rank());
    const size_t n = static_cast<size_t>(ctx.num_devices());
    std::vector<int32_t> index(n * in_rank, 0);
    const std::vector<int32_t>& from = m->flat_index();
    for (size_t d = 0; d < out_rank; ++d) {
      if (m->tiles(static_cast<int64_t>(d)) == 1) continue;
      const size_t to = static_cast<size_t>(groups[static_cast<size_t>(group_of_out[d])].i0);
      for (size_t dev = 0; dev < n; ++dev) index[dev * in_rank + to] = from[dev * out_rank + d];
    }
    return TileMap(in_tiles, std::move(index), m->flat_replica());
  };
  // Even groups need only that sharding, the same for every layer's reshape of one configuration:
  // decided once per run.
  struct OperandSharding {
    std::optional<HloSharding> sharding;  // nullopt: not a full grid
  };
  std::optional<TileMap> in_map;
  std::optional<HloSharding> in_sharding;
  if (uneven.empty()) {
    const std::string key = ShardingKey(s) + "|" + in.ToString(false) + "|" + out.ToString(false);
    auto& cache = ctx.Decisions<OperandSharding>();
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto sh = operand_map().ToSharding();
      it = cache.emplace(key, OperandSharding{sh.ok() ? std::optional<HloSharding>(*sh) : std::nullopt}).first;
    }
    in_sharding = it->second.sharding;
  } else {
    in_map = operand_map();
    auto sh = in_map->ToSharding();
    if (sh.ok()) in_sharding = *sh;
  }
  if (!in_sharding) return PartitionWithFallback(ctx, orig);
  auto r = ctx.resharder().Reshard(ctx.Get(orig.operand(0)), *in_sharding);
  if (!r.ok()) return Error(orig.name() + ": " + r.error().message);
  Instruction* x = *r;
  const std::vector<int64_t> out_shard = m->ShardShape(out.dims);
  if (!uneven.empty()) {
    // Flatten every uneven group into one dim (its other operand dims are whole), exchange the
    // halos along it, then reshape to the result's shard.
    std::vector<int64_t> flat_local, flat_tiles, flat_dim_of_group(groups.size(), -1);
    std::vector<int64_t> flat_of_in(static_cast<size_t>(in.rank()));
    const std::vector<int64_t> in_shard = in_map->ShardShape(in.dims);
    for (int64_t d = 0; d < in.rank(); ++d) {
      int64_t g = -1;
      for (int64_t u : uneven)
        if (d >= groups[static_cast<size_t>(u)].i0 && d < groups[static_cast<size_t>(u)].i1) g = u;
      if (g >= 0 && d > groups[static_cast<size_t>(g)].i0) {
        flat_local.back() *= in_shard[static_cast<size_t>(d)];
        flat_of_in[static_cast<size_t>(d)] = static_cast<int64_t>(flat_local.size()) - 1;
        continue;
      }
      if (g >= 0) flat_dim_of_group[static_cast<size_t>(g)] = static_cast<int64_t>(flat_local.size());
      flat_of_in[static_cast<size_t>(d)] = static_cast<int64_t>(flat_local.size());
      flat_local.push_back(in_shard[static_cast<size_t>(d)]);
      flat_tiles.push_back(in_tiles[static_cast<size_t>(d)]);
    }
    std::vector<DeviceTile> fdevs;
    for (int64_t dev = 0; dev < ctx.num_devices(); ++dev) {
      DeviceTile dt;
      dt.replica = in_map->device(dev).replica;
      dt.index.assign(flat_local.size(), 0);
      for (int64_t d = 0; d < in.rank(); ++d)
        if (in_tiles[static_cast<size_t>(d)] > 1)
          dt.index[static_cast<size_t>(flat_of_in[static_cast<size_t>(d)])] = in_map->device(dev).index[static_cast<size_t>(d)];
      fdevs.push_back(std::move(dt));
    }
    const TileMap fmap(flat_tiles, std::move(fdevs));
    x = ctx.builder().Reshape(x, flat_local);
    for (int64_t u : uneven) {
      const Group& g = groups[static_cast<size_t>(u)];
      const int64_t fd = flat_dim_of_group[static_cast<size_t>(u)], t = in_tiles[static_cast<size_t>(g.i0)];
      int64_t r_out = 1;
      for (int64_t d = g.o0 + 1; d < g.o1; ++d) r_out *= out.dim(d);
      const int64_t rows = out_shard[static_cast<size_t>(g.o0)], size = rows * r_out;
      // The operand's flattened extent with its padding (its last tile's padding rows sit at the
      // end), so tile j holds [j*S, (j+1)*S).
      const int64_t full = t * flat_local[static_cast<size_t>(fd)];
      std::vector<int64_t> start(static_cast<size_t>(t));
      for (int64_t j = 0; j < t; ++j) start[static_cast<size_t>(j)] = j * size;
      auto h = ExchangeHalo(ctx.builder(), x, fmap, fd, full, start, size, 0.0, /*x_sharded=*/true, "reshape");
      if (!h.ok()) return Error(orig.name() + ": " + h.error().message);
      x = *h;
    }
  }
  Instruction* y = ctx.builder().Reshape(x, out_shard);
  if (y == x && y->shape().dims != out_shard) return PartitionWithFallback(ctx, orig);
  ctx.Set(&orig, {y, s, orig.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterShapeHandlers(HandlerTable& table) {
  table.Add({Opcode::kBroadcast}, HandleBroadcast);
  table.Add({Opcode::kTranspose}, HandleTranspose);
  table.Add({Opcode::kReshape, Opcode::kBitcast}, HandleReshape);
}

}  // namespace shardscope::spmd
