#include "partitioner/spmd/reshard.h"

#include "core/sharding/unreduced.h"
#include "partitioner/hlo_sharding_util.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

namespace shardscope::spmd {

namespace {
// Bytes a device receives in an all-to-all moving k tiles of a sharded dim to dim b (whole):
// its shard, with b padded to a multiple of k (GSPMD §4.1: uneven dims travel padded), less the
// 1/k it keeps.
int64_t AllToAllBytes(const TileMap& m, const Shape& base, int64_t b, int64_t k) {
  std::vector<int64_t> shard = m.ShardShape(base.dims);
  shard[static_cast<size_t>(b)] = (base.dim(b) + k - 1) / k * k;
  return ElementsOf(shard) * PrimitiveTypeBytes(base.type) * (k - 1) / k;
}

// Plan 2c (XLA's all-to-all over several source and target dims at once): every dim d keeps the
// major part c of its tile index, common to F and T (c_d = gcd of the two tile counts), and either
// gives away a minor factor s_d = F_d / c_d or takes one t_d = T_d / c_d. The devices sharing
// every c index (and one copy of each tile when partially replicated) form a group of
// k = prod s = prod t devices; one all-to-all within each group moves every factor at once: a
// device splits its shard by the t factors and sends piece q to the group's q-th device, and puts
// what it receives together by the s factors. That needs, for some order of the s dims, each
// device's position among the t factors (major first, dims in order) to equal its position among
// the s factors; the slots of a group are then its devices by that position.
struct DimsAllToAll {
  std::vector<int64_t> s, t;                 // per dim
  std::vector<int64_t> out_dims, in_dims;    // dims with t > 1 (ascending), s > 1 (position order)
  std::vector<std::vector<int64_t>> groups;  // slot q: the device at position q
  int64_t k = 1;
};

std::optional<DimsAllToAll> PlanDimsAllToAll(const TileMap& F, const TileMap& T, const std::vector<int64_t>& full) {
  const int64_t n = F.num_devices(), rank = F.rank();
  if (T.num_devices() != n || T.rank() != rank || F.replication() != T.replication()) return std::nullopt;
  DimsAllToAll a;
  a.s.assign(static_cast<size_t>(rank), 1);
  a.t.assign(static_cast<size_t>(rank), 1);
  int64_t ks = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t fd = F.tiles(d), td = T.tiles(d), c = std::gcd(fd, td), len = full[static_cast<size_t>(d)];
    const int64_t sd = fd / c, tdf = td / c;
    if (sd > 1 && tdf > 1) return std::nullopt;
    // The factor's pieces must line up with the common part's blocks (padding only at the end).
    if (tdf > 1 && c > 1 && (len + c - 1) / c != tdf * T.ShardSize(d, len)) return std::nullopt;
    if (sd > 1 && c > 1 && (len + c - 1) / c != sd * F.ShardSize(d, len)) return std::nullopt;
    if (tdf > 1 && tdf * T.ShardSize(d, len) < F.ShardSize(d, len)) return std::nullopt;
    a.s[static_cast<size_t>(d)] = sd;
    a.t[static_cast<size_t>(d)] = tdf;
    if (sd > 1) a.in_dims.push_back(d);
    if (tdf > 1) a.out_dims.push_back(d);
    a.k *= tdf;
    ks *= sd;
  }
  if (a.k < 2 || a.k != ks || a.in_dims.size() > 4) return std::nullopt;
  // A single dim each way is plans 2 and 2b.
  if (a.in_dims.size() == 1 && a.out_dims.size() == 1) return std::nullopt;
  for (int64_t dev = 0; dev < n; ++dev) {
    const TileIndexView fi = F.device(dev).index;
    const TileIndexView ti = T.device(dev).index;
    for (int64_t d = 0; d < rank; ++d)
      if (fi[static_cast<size_t>(d)] / a.s[static_cast<size_t>(d)] != ti[static_cast<size_t>(d)] / a.t[static_cast<size_t>(d)])
        return std::nullopt;
  }
  auto position = [&](TileIndexView idx, const std::vector<int64_t>& dims, const std::vector<int64_t>& factor) {
    int64_t p = 0;
    for (int64_t d : dims) p = p * factor[static_cast<size_t>(d)] + idx[static_cast<size_t>(d)] % factor[static_cast<size_t>(d)];
    return p;
  };
  std::vector<int64_t> order = a.in_dims;
  std::sort(order.begin(), order.end());
  bool found = false;
  do {
    found = true;
    for (int64_t dev = 0; dev < n && found; ++dev)
      found = position(T.device(dev).index, a.out_dims, a.t) == position(F.device(dev).index, order, a.s);
  } while (!found && std::next_permutation(order.begin(), order.end()));
  if (!found) return std::nullopt;
  a.in_dims = order;
  // Groups: the devices sharing the common parts, one per position (the copies of a tile spread
  // over as many groups).
  std::map<std::vector<int64_t>, std::vector<std::vector<int64_t>>> classes;
  for (int64_t dev = 0; dev < n; ++dev) {
    const TileIndexView ti = T.device(dev).index;
    std::vector<int64_t> key(static_cast<size_t>(rank));
    for (int64_t d = 0; d < rank; ++d) key[static_cast<size_t>(d)] = ti[static_cast<size_t>(d)] / a.t[static_cast<size_t>(d)];
    auto& by_position = classes[key];
    if (by_position.empty()) by_position.resize(static_cast<size_t>(a.k));
    by_position[static_cast<size_t>(position(ti, a.out_dims, a.t))].push_back(dev);
  }
  for (auto& [key, by_position] : classes) {
    const size_t copies = by_position[0].size();
    for (const auto& devs : by_position)
      if (devs.size() != copies) return std::nullopt;
    for (size_t i = 0; i < copies; ++i) {
      std::vector<int64_t> group;
      for (const auto& devs : by_position) group.push_back(devs[i]);
      a.groups.push_back(std::move(group));
    }
  }
  return a;
}

// Plan 2d (XLA's resharding by halo exchange): the tile count of one dim d changes (other dims as
// they are), and every device's target rows lie within its source shard widened by L rows of the
// source tile before it and R rows of the one after (L, R at most a shard). The L rows come as the
// last L rows of a holder of the previous tile, the R rows as the first R of one of the next, by
// one collective-permute each (a holder serves one device); each device then takes its window of
// the concatenation. Rows past the end need nothing.
struct HaloReshard {
  int64_t dim = 0, left = 0, right = 0, tail = 0;  // tail: rows padded after the right halo
  int64_t most_received = 0;                        // rows, over devices
  std::vector<std::pair<int64_t, int64_t>> left_pairs, right_pairs;
  std::vector<int64_t> offset;  // per device: its window's start in the widened shard
};

// The exchange of plan 2d for arbitrary windows along d: device dev wants the rows [lo, hi) (empty
// when hi <= lo) in a buffer of `size` rows starting at lo. Needs every wanted row within the
// device's source shard widened by at most a shard on each side; nullopt otherwise, or when no
// device needs a row it does not hold.
std::optional<HaloReshard> PlanHaloWindows(const TileMap& F, int64_t d, int64_t len, const std::vector<int64_t>& lo,
                                           const std::vector<int64_t>& hi, int64_t size) {
  const int64_t n = F.num_devices();
  const int64_t fs = F.ShardSize(d, len);
  HaloReshard h;
  h.dim = d;
  h.offset.assign(static_cast<size_t>(n), 0);
  std::vector<int64_t> need_left(static_cast<size_t>(n), 0), need_right(static_cast<size_t>(n), 0);
  for (int64_t dev = 0; dev < n; ++dev) {
    const int64_t fo = F.Offset(dev, d, len), to = lo[static_cast<size_t>(dev)];
    const int64_t end = hi[static_cast<size_t>(dev)];
    if (end <= to) continue;  // all padding
    need_left[static_cast<size_t>(dev)] = std::max<int64_t>(0, fo - to);
    need_right[static_cast<size_t>(dev)] = std::max<int64_t>(0, end - (fo + fs));
    h.left = std::max(h.left, need_left[static_cast<size_t>(dev)]);
    h.right = std::max(h.right, need_right[static_cast<size_t>(dev)]);
  }
  if ((h.left == 0 && h.right == 0) || h.left > fs || h.right > fs) return std::nullopt;
  // The holders of each source tile, and who serves whom.
  std::map<TileIndex, std::vector<int64_t>> holders;
  for (int64_t dev = 0; dev < n; ++dev) holders[F.device(dev).index].push_back(dev);
  std::map<TileIndex, size_t> used_left, used_right;
  for (int64_t dev = 0; dev < n; ++dev) {
    for (const int64_t step : {int64_t{-1}, int64_t{1}}) {
      if ((step < 0 ? need_left : need_right)[static_cast<size_t>(dev)] == 0) continue;
      TileIndex from = F.device(dev).index;
      from[static_cast<size_t>(d)] += step;
      auto it = holders.find(from);
      auto& used = step < 0 ? used_left : used_right;
      if (it == holders.end() || used[from] >= it->second.size()) return std::nullopt;
      (step < 0 ? h.left_pairs : h.right_pairs).emplace_back(it->second[used[from]++], dev);
    }
  }
  for (int64_t dev = 0; dev < n; ++dev) {
    h.most_received = std::max(h.most_received, (need_left[static_cast<size_t>(dev)] > 0 ? h.left : 0) +
                                                    (need_right[static_cast<size_t>(dev)] > 0 ? h.right : 0));
    const int64_t fo = F.Offset(dev, d, len), to = lo[static_cast<size_t>(dev)];
    const int64_t off = std::max<int64_t>(0, to - fo + h.left);
    h.offset[static_cast<size_t>(dev)] = off;
    h.tail = std::max(h.tail, off + size - (h.left + fs + h.right));
  }
  std::sort(h.left_pairs.begin(), h.left_pairs.end());
  std::sort(h.right_pairs.begin(), h.right_pairs.end());
  return h;
}

// The one dim whose tile count differs between F and T (-1 when none or more than one does, or
// the maps do not fit together).
int64_t OnlyDimWithOtherTiles(const TileMap& F, const TileMap& T) {
  if (T.num_devices() != F.num_devices() || T.rank() != F.rank()) return -1;
  int64_t d = -1;
  for (int64_t i = 0; i < F.rank(); ++i) {
    if (F.tiles(i) == T.tiles(i)) continue;
    if (d >= 0) return -1;
    d = i;
  }
  return d;
}

std::optional<HaloReshard> PlanHaloReshard(const TileMap& F, const TileMap& T, const std::vector<int64_t>& full) {
  const int64_t n = F.num_devices(), rank = F.rank();
  const int64_t d = OnlyDimWithOtherTiles(F, T);
  // Both sharded along d (to or from a whole dim is an all-gather or a slice).
  if (d < 0 || F.tiles(d) < 2 || T.tiles(d) < 2) return std::nullopt;
  const int64_t len = full[static_cast<size_t>(d)], ts = T.ShardSize(d, len);
  std::vector<int64_t> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) {
    const TileIndexView fi = F.device(dev).index;
    const TileIndexView ti = T.device(dev).index;
    for (int64_t i = 0; i < rank; ++i)
      if (i != d && fi[static_cast<size_t>(i)] != ti[static_cast<size_t>(i)]) return std::nullopt;
    lo[static_cast<size_t>(dev)] = T.Offset(dev, d, len);
    hi[static_cast<size_t>(dev)] = std::min(lo[static_cast<size_t>(dev)] + ts, len);
  }
  return PlanHaloWindows(F, d, len, lo, hi, ts);
}

// Plan 2f (XLA's halo exchange before a partial all-gather, TileToPartialReplicateHaloExchange):
// the tile count of one dim d drops by a factor k (F.tiles(d) = k * T.tiles(d)) but k source
// shards are not one target shard (uneven extents: [6] over 4 tiles of 2 -> 2 tiles of 3). Cut
// every target tile into k pieces of ceil(ts / k) rows; the device holding source tile s along d
// fetches piece s mod k of target tile s / k by the halo exchange of plan 2d (when every piece
// lies within its source shard widened by a shard), and a partial all-gather by k within the
// groups of F.GatheredBy(d, k) puts the k pieces of each target tile together (their first ts rows
// are the target shard). `mid` is that gathered map; a slice or permute may finish the plan.
struct HaloPieces {
  HaloReshard halo;
  int64_t k = 0, piece = 0;  // piece: rows per piece
};
std::optional<HaloPieces> PlanHaloPieces(const TileMap& F, const TileMap& T, const std::vector<int64_t>& full) {
  const int64_t n = F.num_devices();
  const int64_t d = OnlyDimWithOtherTiles(F, T);
  if (d < 0 || T.tiles(d) < 1 || F.tiles(d) <= T.tiles(d) || F.tiles(d) % T.tiles(d) != 0) return std::nullopt;
  const int64_t len = full[static_cast<size_t>(d)], k = F.tiles(d) / T.tiles(d);
  const int64_t fs = F.ShardSize(d, len), ts = T.ShardSize(d, len);
  if (fs * k == ts) return std::nullopt;  // the shards line up: a partial all-gather alone (plan 4a)
  HaloPieces p;
  p.k = k;
  p.piece = (ts + k - 1) / k;
  std::vector<int64_t> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) {
    const int64_t s = F.index(dev, d);
    const int64_t tile_start = s / k * ts, tile_end = std::min(tile_start + ts, len);
    const int64_t start = tile_start + s % k * p.piece, end = std::min(start + p.piece, tile_end);
    // An empty piece (past the tile or the array) takes the device's own rows: they are sliced off.
    lo[static_cast<size_t>(dev)] = end > start ? start : F.Offset(dev, d, len);
    hi[static_cast<size_t>(dev)] = end > start ? end : lo[static_cast<size_t>(dev)];
  }
  auto halo = PlanHaloWindows(F, d, len, lo, hi, p.piece);
  if (!halo) return std::nullopt;
  p.halo = std::move(*halo);
  return p;
}

// Plan 3b's intermediate map: T's tiles, each device holding one that lies within its shard under
// F — its own target tile when it holds it, else a tile some device wants and no one else is
// serving. nullopt when no device needs to move (a local refinement) or some target tile cannot be
// served that way.
std::optional<TileMap> SliceThenPermuteMap(const TileMap& F, const TileMap& T, const std::vector<int64_t>& full) {
  const int64_t n = F.num_devices(), rank = F.rank();
  if (T.num_devices() != n || T.rank() != rank) return std::nullopt;
  // Every target tile lies within one source tile only when T's tiles nest in F's along every dim
  // (checked per dim first: the per-device search below is O(devices x tiles)).
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t ft = F.tiles(d), tt = T.tiles(d), len = full[static_cast<size_t>(d)];
    if (ft == 1) continue;
    if (tt % ft != 0 || F.ShardSize(d, len) != (tt / ft) * T.ShardSize(d, len)) return std::nullopt;
  }
  // Target tiles by their row-major flat id (at most one per device: T's tiles times its
  // replication is the device count), so the bookkeeping is flat vectors, not maps of indices.
  std::vector<int64_t> ts(static_cast<size_t>(rank)), fs(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    ts[static_cast<size_t>(d)] = T.ShardSize(d, full[static_cast<size_t>(d)]);
    fs[static_cast<size_t>(d)] = F.ShardSize(d, full[static_cast<size_t>(d)]);
  }
  int64_t num_tiles = 1;
  for (int64_t d = 0; d < rank; ++d) num_tiles *= T.tiles(d);
  auto flat = [&](const auto* t) {
    int64_t f = 0;
    for (int64_t d = 0; d < rank; ++d) f = f * T.tiles(d) + t[d];
    return f;
  };
  auto within = [&](int64_t dev, const auto* t) {
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t len = full[static_cast<size_t>(d)], s = ts[static_cast<size_t>(d)];
      const int64_t f = fs[static_cast<size_t>(d)];
      if (!hlo_sharding_util::ShardWithin(len, t[d] * s, s, F.index(dev, d) * f, f)) return false;
    }
    return true;
  };
  std::vector<int64_t> need(static_cast<size_t>(num_tiles), 0);  // devices wanting the tile that do not hold it
  std::vector<int64_t> held(static_cast<size_t>(n), -1);          // flat id of the tile each device ends with
  std::vector<int64_t> open;
  for (int64_t dev = 0; dev < n; ++dev) {
    const TileIndexView t = T.device(dev).index;
    if (within(dev, t.data())) {
      held[static_cast<size_t>(dev)] = flat(t.data());
    } else {
      ++need[static_cast<size_t>(flat(t.data()))];
      open.push_back(dev);
    }
  }
  if (open.empty()) return std::nullopt;
  std::vector<int64_t> lo(static_cast<size_t>(rank)), hi(static_cast<size_t>(rank)), t(static_cast<size_t>(rank));
  // The devices of one source tile see the same box and the same within-test, and `need` only
  // falls: the tiles one of them passed over stay unusable, so the next resumes the scan at the
  // tile the previous one took (by source tile's row-major number; O(devices + tiles) in all where
  // scanning each box from its start was O(devices x tiles) with few source tiles).
  std::vector<int64_t> resume(static_cast<size_t>(ElementsOf(F.tiles()) * rank), -1);
  for (int64_t dev : open) {
    // The target tiles inside this device's shard: a box of tile indices, one range per dim.
    // (T's tiles nest in F's, checked above: source tile i holds target tiles [i*m, i*m + m).)
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t ft = F.tiles(d), tt = T.tiles(d);
      if (ft == 1) {
        lo[static_cast<size_t>(d)] = 0;
        hi[static_cast<size_t>(d)] = tt - 1;
        continue;
      }
      const int64_t m = tt / ft;
      lo[static_cast<size_t>(d)] = F.device(dev).index[static_cast<size_t>(d)] * m;
      hi[static_cast<size_t>(d)] = lo[static_cast<size_t>(d)] + m - 1;
    }
    int64_t source = 0;
    for (int64_t d = 0; d < rank; ++d) source = source * F.tiles(d) + F.index(dev, d);
    int64_t* at = resume.data() + static_cast<size_t>(source * rank);
    bool served = false;
    if (rank == 0 || at[0] < 0) t = lo;
    else t.assign(at, at + rank);
    while (!served) {
      // (A tile entirely in the padding lies within anything, so the box may hold tiles that are
      // not within the shard: check each.)
      const int64_t f = flat(t.data());
      if (need[static_cast<size_t>(f)] > 0 && within(dev, t.data())) {
        --need[static_cast<size_t>(f)];
        held[static_cast<size_t>(dev)] = f;
        served = true;
        std::copy(t.begin(), t.end(), at);
        break;
      }
      int64_t d = rank - 1;  // next index of the box, row-major
      while (d >= 0 && t[static_cast<size_t>(d)] == hi[static_cast<size_t>(d)]) {
        t[static_cast<size_t>(d)] = lo[static_cast<size_t>(d)];
        --d;
      }
      if (d < 0) break;
      ++t[static_cast<size_t>(d)];
    }
    if (!served) return std::nullopt;
  }
  std::vector<int64_t> copies(static_cast<size_t>(num_tiles), 0);
  std::vector<int32_t> index(static_cast<size_t>(n * rank)), replica(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) {
    int64_t f = held[static_cast<size_t>(dev)];
    replica[static_cast<size_t>(dev)] = static_cast<int32_t>(copies[static_cast<size_t>(f)]++);
    for (int64_t d = rank; d-- > 0;) {
      index[static_cast<size_t>(dev * rank + d)] = static_cast<int32_t>(f % T.tiles(d));
      f /= T.tiles(d);
    }
  }
  return TileMap(T.tiles(), std::move(index), std::move(replica));
}
}  // namespace

Resharder::Resharder(SpmdBuilder& builder, const TileMapCache& maps)
    : b_(builder), maps_(maps), n_(maps.num_devices()), plans_(own_plans_) {}

Resharder::Resharder(SpmdBuilder& builder, const TileMapCache& maps,
                     std::unordered_map<std::string, Result<ReshardPlan>>* plans)
    : b_(builder), maps_(maps), n_(maps.num_devices()), plans_(plans ? *plans : own_plans_) {}

Result<ReshardPlan> Resharder::Plan(const HloSharding& from, const HloSharding& to, const Shape& base) const {
  {
    std::string& k = key_buf_;
    k.clear();
    AppendShardingKey(k, from);
    k += '>';
    AppendShardingKey(k, to);
    k += '@';
    k += static_cast<char>(base.type);
    k.append(reinterpret_cast<const char*>(base.dims.data()), base.dims.size() * sizeof(int64_t));
    auto it = plans_.find(k);
    if (it != plans_.end()) return it->second;
  }
  std::string key = key_buf_;  // the buffer is reused by the recursive planning below
  auto plan = PlanUncached(from, to, base);
  plans_.emplace(std::move(key), plan);
  return plan;
}

Result<ReshardPlan> Resharder::PlanUncached(const HloSharding& from, const HloSharding& to,
                                            const Shape& base) const {
  ReshardPlan plan;
  if (!base.IsArray()) return Error("reshard: not an array: " + base.ToString());
  if (from == to) {
    plan.identity = true;
    return plan;
  }
  // Unreduced values hold partial sums: summing them (all-reduce over every device) gives the
  // replicated value; a value becomes unreduced by keeping it on device 0 and zeros elsewhere.
  const bool from_unreduced = from.kind() == HloSharding::Kind::kUnreduced;
  const bool to_unreduced = to.kind() == HloSharding::Kind::kUnreduced;
  if (from_unreduced != to_unreduced) {
    auto rep = TileMap::FromSharding(HloSharding::Replicate(), base.rank(), n_);
    if (!rep.ok()) return rep.error();
    ReshardPlan p;
    if (from_unreduced) {
      const int64_t bytes = base.ByteSize() * 2 * (n_ - 1) / std::max<int64_t>(n_, 1);
      p.steps.push_back({ReshardStep::Kind::kReduceUnreduced, {}, *rep, *rep, bytes, {}});
      auto rest = Plan(HloSharding::Replicate(), to, base);
      if (!rest.ok()) return rest;
      p.bytes = bytes + rest->bytes;
      for (auto& st : rest->steps) p.steps.push_back(st);
    } else {
      auto first = Plan(from, HloSharding::Replicate(), base);
      if (!first.ok()) return first;
      p = *first;
      p.identity = false;
      p.steps.push_back({ReshardStep::Kind::kMakeUnreduced, {}, *rep, *rep, 0, {}});
    }
    return p;
  }
  // Unreduced subgroups (XLA's last_tile_dims={unreduced}): the partial sums of each tile are summed
  // over their group first (an all-reduce); a value becomes unreduced over subgroups by keeping it
  // on the first device of each group and zeros on the others.
  if (HasUnreducedSubgroup(from) || HasUnreducedSubgroup(to)) {
    if (HasUnreducedSubgroup(from)) {
      const HloSharding summed = WithUnreducedReplicated(from);
      auto m = TileMap::FromSharding(summed, base.rank(), n_);
      if (!m.ok()) return m.error();
      std::vector<std::vector<int64_t>> groups = UnreducedGroups(from);
      const int64_t g = groups.empty() ? 1 : static_cast<int64_t>(groups[0].size());
      const int64_t shard = ElementsOf(m->ShardShape(base.dims)) * PrimitiveTypeBytes(base.type);
      const int64_t bytes = shard * 2 * (g - 1) / std::max<int64_t>(g, 1) + kCollectiveOverheadBytes;
      ReshardPlan p;
      ReshardStep st{ReshardStep::Kind::kReduceUnreduced, {}, *m, *m, bytes, {}};
      st.groups = std::move(groups);
      p.steps.push_back(std::move(st));
      auto rest = Plan(summed, to, base);
      if (!rest.ok()) return rest;
      p.bytes = bytes + rest->bytes;
      for (auto& s : rest->steps) p.steps.push_back(s);
      return p;
    }
    const HloSharding kept = WithUnreducedReplicated(to);
    auto first = Plan(from, kept, base);
    if (!first.ok()) return first;
    auto m = TileMap::FromSharding(kept, base.rank(), n_);
    if (!m.ok()) return m.error();
    ReshardPlan p = *first;
    p.identity = false;
    ReshardStep st{ReshardStep::Kind::kMakeUnreduced, {}, *m, *m, 0, {}};
    std::vector<int64_t> keepers;
    for (int64_t d = 0; d < n_; ++d)
      if (IsFirstUnreducedCopy(to, d)) keepers.push_back(d);
    st.groups = {keepers};
    p.steps.push_back(std::move(st));
    return p;
  }
  // A maximal (single-device) value reaches the others the way XLA does it: the owner keeps its
  // value, everyone else contributes zeros, and an all-reduce sums (GSPMD's broadcast by
  // all-reduce). A maximal target needs the value on its device; every device computing the same
  // replicated value satisfies that.
  if (from.IsMaximal() && !to.IsMaximal()) {
    auto rest = Plan(HloSharding::Replicate(), to, base);
    if (!rest.ok()) return rest;
    auto rep = TileMap::FromSharding(HloSharding::Replicate(), base.rank(), n_);
    if (!rep.ok()) return rep.error();
    const int64_t bytes = base.ByteSize() * 2 * (n_ - 1) / std::max<int64_t>(n_, 1);
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kBroadcastFromDevice, {from.maximal_device()}, *rep, *rep, bytes, {}});
    p.bytes = bytes + rest->bytes;
    for (auto& st : rest->steps) p.steps.push_back(st);
    return p;
  }
  const HloSharding& to_eff = to.IsMaximal() ? HloSharding::Replicate() : to;
  if (to.IsMaximal() && from.IsMaximal()) {
    if (from.maximal_device() == to.maximal_device()) {
      plan.identity = true;
      return plan;
    }
    auto rep = TileMap::FromSharding(HloSharding::Replicate(), base.rank(), n_);
    if (!rep.ok()) return rep.error();
    const int64_t bytes = base.ByteSize() * 2 * (n_ - 1) / std::max<int64_t>(n_, 1);
    plan.steps.push_back({ReshardStep::Kind::kBroadcastFromDevice, {from.maximal_device()}, *rep, *rep, bytes, {}});
    plan.bytes = bytes;
    return plan;
  }
  auto fm = maps_.Get(from, base.rank());
  if (!fm.ok()) return fm.error();
  auto tm = maps_.Get(to_eff, base.rank());
  if (!tm.ok()) return tm.error();
  const TileMap& F = *fm;
  const TileMap& T = *tm;
  if (F.SameAs(T)) {
    plan.identity = true;
    return plan;
  }
  const std::vector<int64_t>& full = base.dims;
  std::vector<ReshardPlan> candidates;
  // The dims (a, b) when moving all of `from`'s tiles along a to b, over the same devices, gives T:
  // one all-to-all (plan 2).
  auto whole_all_to_all = [&](const TileMap& from) -> std::optional<std::pair<int64_t, int64_t>> {
    for (int64_t a = 0; a < base.rank(); ++a) {
      for (int64_t b = 0; b < base.rank(); ++b) {
        if (a == b) continue;
        const int64_t k = from.tiles(a);
        if (k <= 1 || from.tiles(b) != 1 || T.tiles(a) != 1 || T.tiles(b) != k) continue;
        bool ok = true;
        for (int64_t d = 0; d < base.rank() && ok; ++d)
          if (d != a && d != b && from.tiles(d) != T.tiles(d)) ok = false;
        for (int64_t dev = 0; dev < n_ && ok; ++dev) {
          if (T.index(dev, b) != from.index(dev, a)) ok = false;
          for (int64_t d = 0; d < base.rank() && ok; ++d)
            if (d != a && d != b && from.index(dev, d) != T.index(dev, d)) ok = false;
        }
        if (ok) return std::make_pair(a, b);
      }
    }
    return std::nullopt;
  };
  // A plan that has reached `mid` is a candidate when mid is the target (unless `same_covered`: an
  // earlier candidate is that plan), or when a local slice or a collective-permute finishes it, or
  // (after plan 4's gathers, `slice_and_permute`) one all-to-all or a slice and a permute.
  auto finish = [&](ReshardPlan p, const TileMap& mid, bool same_covered, bool slice_and_permute = false) {
    if (mid.SameAs(T)) {
      if (!same_covered) candidates.push_back(std::move(p));
    } else if (IsLocalRefinement(mid, T, full)) {
      p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, mid, T, 0, {}});
      candidates.push_back(std::move(p));
    } else if (mid.tiles() == T.tiles()) {
      p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, mid, T, ShardBytes(mid, base), {}});
      p.bytes += ShardBytes(mid, base);
      candidates.push_back(std::move(p));
    } else if (auto ab = slice_and_permute ? whole_all_to_all(mid) : std::nullopt) {
      // After the gathers of plan 4 only (XLA's TileToPartialReplicateReshardUnevenPartition:
      // gather the dim whose tile count does not divide, then move the other's tiles): one
      // all-to-all finishes it.
      const int64_t bytes = AllToAllBytes(mid, base, ab->second, mid.tiles(ab->first));
      p.steps.push_back({ReshardStep::Kind::kAllToAll, {ab->first, ab->second}, mid, T, bytes, {}});
      p.bytes += bytes;
      candidates.push_back(std::move(p));
    } else if (slice_and_permute && mid.replication() > 1) {
      // As plan 3b from the intermediate: slice to T's tiles in another device order, then permute
      // (after the gathers of plan 4 only: tried after every all-to-all of plans 2b and 5 it
      // doubled the partitioning time at 2048 devices).
      if (auto sliced = SliceThenPermuteMap(mid, T, full)) {
        p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, mid, *sliced, 0, {}});
        p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, *sliced, T, ShardBytes(*sliced, base), {}});
        p.bytes += ShardBytes(*sliced, base);
        candidates.push_back(std::move(p));
      }
    }
  };

  // 1. Local refinement: dynamic-slice only (replicated -> sharded, partial -> finer).
  const bool local_refinement = IsLocalRefinement(F, T, full);
  if (local_refinement) {
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, F, T, 0, {}});
    candidates.push_back(p);
  }
  // 2. All-to-all: sharding moves from dim a to dim b over the same devices.
  if (auto ab = whole_all_to_all(F)) {
    const auto [a, b] = *ab;
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kAllToAll, {a, b}, F, T, AllToAllBytes(F, base, b, F.tiles(a)), {}});
    p.bytes = p.steps.back().bytes;
    candidates.push_back(p);
  }
  // 2b. Partial all-to-all (XLA's resharding by all-to-all over subgroups): a factor k of dim a's
  //     tiles moves to dim b — the minor part of a's tile index becomes the minor part of b's — by
  //     an all-to-all within the groups of k devices that differ only in that part. Covers moving a
  //     whole dim into one that is already split ([1,4,1,2] -> [1,8,1,1]) and splitting part of a
  //     dim off to another ([1,8] -> [2,4]). The tiles must line up: k source tiles of a make one
  //     target tile, one source tile of b makes k target tiles (padding included). Then, as in 5,
  //     a local refinement or a collective-permute may finish it.
  for (int64_t a = 0; a < base.rank(); ++a) {
    const int64_t ta = F.tiles(a);
    if (ta <= 1) continue;
    const int64_t A = full[static_cast<size_t>(a)];
    for (int64_t b = 0; b < base.rank(); ++b) {
      if (a == b) continue;
      const int64_t tb = F.tiles(b);
      const int64_t B = full[static_cast<size_t>(b)];
      for (int64_t k = 2; k <= ta; ++k) {
        if (ta % k != 0) continue;
        if (k == ta && tb == 1) continue;  // the whole move into a whole dim: candidates 2 and 5
        if (k * ((A + ta - 1) / ta) != (A + ta / k - 1) / (ta / k)) continue;
        // (A whole b is padded to k chunks of the target's shard size, as in 2.)
        if (tb > 1 && (B + tb - 1) / tb != k * ((B + tb * k - 1) / (tb * k))) continue;
        std::vector<int64_t> tiles = F.tiles();
        tiles[static_cast<size_t>(a)] = ta / k;
        tiles[static_cast<size_t>(b)] = tb * k;
        // Only a tiling the target refines (or equals) can be finished: skip the others before
        // building the per-device map (2048 devices on the large pods).
        bool refinable = true;
        for (int64_t d = 0; d < base.rank() && refinable; ++d)
          refinable = T.tiles(d) % tiles[static_cast<size_t>(d)] == 0;
        if (!refinable) continue;
        std::vector<int32_t> index = F.flat_index();
        const auto r = static_cast<size_t>(base.rank());
        for (size_t dev = 0; dev < static_cast<size_t>(n_); ++dev) {
          int32_t* idx = index.data() + dev * r;
          const int32_t ia = idx[a];
          idx[b] = static_cast<int32_t>(idx[b] * k + ia % k);
          idx[a] = static_cast<int32_t>(ia / k);
        }
        TileMap mid(tiles, std::move(index), F.flat_replica());
        std::vector<int64_t> shard = F.ShardShape(full);
        shard[static_cast<size_t>(b)] = (shard[static_cast<size_t>(b)] + k - 1) / k * k;
        const int64_t a2a = ElementsOf(shard) * PrimitiveTypeBytes(base.type) * (k - 1) / k;
        ReshardPlan p;
        p.steps.push_back({ReshardStep::Kind::kAllToAll, {a, b, k}, F, mid, a2a, {}});
        p.bytes = a2a;
        finish(std::move(p), mid, false);
      }
    }
  }
  // 2e. Slice, then a partial all-to-all (XLA's resharding from partial replication to another
  //     dim's tiling: [1,1,1,2] with 4 copies -> [1,8,1,1]): the copies first take the major part
  //     of the target's split of dim b locally (a dynamic-slice, no communication), then a factor
  //     k of dim a moves into b as in 2b. Every device's target tile must be the one the all-to-all
  //     gives it: b's index k * (index after the slice) + a's index mod k, a's index divided by k.
  //     Where 4 gathers the dims first and slices after, this moves one shard's (k-1)/k.
  if (F.replication() > 1) {
    const auto r = static_cast<size_t>(base.rank());
    const std::vector<int32_t>& tidx = T.flat_index();
    for (int64_t a = 0; a < base.rank(); ++a) {
      const int64_t ta = F.tiles(a);
      if (ta <= 1 || T.tiles(a) >= ta || ta % T.tiles(a) != 0) continue;
      const int64_t k = ta / T.tiles(a);
      const int64_t A = full[static_cast<size_t>(a)];
      if (k * ((A + ta - 1) / ta) != (A + ta / k - 1) / (ta / k)) continue;
      for (int64_t b = 0; b < base.rank(); ++b) {
        const int64_t tb = T.tiles(b);
        if (a == b || tb % k != 0 || tb / k < F.tiles(b)) continue;
        const int64_t mb = tb / k, B = full[static_cast<size_t>(b)];
        if ((B + mb - 1) / mb != k * ((B + tb - 1) / tb)) continue;
        bool others = true;
        for (int64_t d = 0; d < base.rank() && others; ++d)
          others = d == a || d == b || T.tiles(d) >= F.tiles(d);
        if (!others) continue;
        std::vector<int64_t> tiles = T.tiles();
        tiles[static_cast<size_t>(a)] = ta;
        tiles[static_cast<size_t>(b)] = mb;
        std::vector<int32_t> index(tidx);
        bool ok = true;
        for (size_t dev = 0; dev < static_cast<size_t>(n_) && ok; ++dev) {
          int32_t* idx = index.data() + dev * r;
          const int32_t fa = static_cast<int32_t>(F.index(static_cast<int64_t>(dev), a));
          ok = idx[a] == fa / k && idx[b] % k == fa % k;
          idx[a] = fa;
          idx[b] = static_cast<int32_t>(idx[b] / k);
        }
        if (!ok) continue;
        // Copies of one tile numbered in device order; every tile held must have as many. Tiles by
        // their row-major number (every index is below its dim's count in `tiles`), counted in a
        // flat table: a hash map keyed by each device's index was most of this plan's time.
        std::vector<int32_t> copies(static_cast<size_t>(ElementsOf(tiles)), 0);
        std::vector<int32_t> replica(static_cast<size_t>(n_));
        for (size_t dev = 0; dev < static_cast<size_t>(n_); ++dev) {
          const int32_t* idx = index.data() + dev * r;
          int64_t lin = 0;
          for (size_t d = 0; d < r; ++d) lin = lin * tiles[d] + idx[d];
          replica[dev] = copies[static_cast<size_t>(lin)]++;
        }
        int32_t per_tile = 0;
        bool even = true;
        for (int32_t c : copies) {
          if (c == 0) continue;
          if (per_tile == 0) per_tile = c;
          even &= c == per_tile;
        }
        if (!even) continue;
        TileMap sliced(tiles, index, replica);
        if (!IsLocalRefinement(F, sliced, full)) continue;
        std::vector<int32_t> moved(index);
        for (size_t dev = 0; dev < static_cast<size_t>(n_); ++dev) {
          int32_t* idx = moved.data() + dev * r;
          idx[b] = static_cast<int32_t>(idx[b] * k + idx[a] % k);
          idx[a] = static_cast<int32_t>(idx[a] / k);
        }
        std::vector<int64_t> moved_tiles = tiles;
        moved_tiles[static_cast<size_t>(a)] = ta / k;
        moved_tiles[static_cast<size_t>(b)] = tb;
        TileMap mid(moved_tiles, std::move(moved), std::move(replica));
        std::vector<int64_t> shard = sliced.ShardShape(full);
        shard[static_cast<size_t>(b)] = (shard[static_cast<size_t>(b)] + k - 1) / k * k;
        const int64_t a2a = ElementsOf(shard) * PrimitiveTypeBytes(base.type) * (k - 1) / k;
        ReshardPlan p;
        p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, F, sliced, 0, {}});
        p.steps.push_back({ReshardStep::Kind::kAllToAll, {a, b, k}, sliced, mid, a2a, {}});
        p.bytes = a2a;
        finish(std::move(p), mid, false);
      }
    }
  }
  // 2c. One all-to-all moving factors of several dims at once (PlanDimsAllToAll).
  if (auto many = PlanDimsAllToAll(F, T, full)) {
    std::vector<int64_t> shard = F.ShardShape(full);
    for (int64_t d : many->out_dims)
      shard[static_cast<size_t>(d)] = many->t[static_cast<size_t>(d)] * T.ShardSize(d, full[static_cast<size_t>(d)]);
    const int64_t a2a = ElementsOf(shard) * PrimitiveTypeBytes(base.type) * (many->k - 1) / many->k;
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kAllToAllDims, many->in_dims, F, T, a2a, {}});
    p.bytes = a2a;
    candidates.push_back(p);
  }
  // 2d. Halo exchange along the one dim whose tile count changes (PlanHaloReshard).
  if (auto halo = PlanHaloReshard(F, T, full)) {
    std::vector<int64_t> rows = F.ShardShape(full);
    rows[static_cast<size_t>(halo->dim)] = 1;
    const int64_t row_bytes = ElementsOf(rows) * PrimitiveTypeBytes(base.type);
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kHalo, {halo->dim}, F, T, halo->most_received * row_bytes, {}});
    // Two collective-permutes when rows come from both sides (the step's overhead counts one).
    p.bytes = p.steps.back().bytes + (halo->left > 0 && halo->right > 0 ? kCollectiveOverheadBytes : 0);
    candidates.push_back(p);
  }
  // 2f. Halo exchange into pieces of the target's tiles, then a partial all-gather (PlanHaloPieces).
  if (auto pieces = PlanHaloPieces(F, T, full)) {
    const int64_t d = pieces->halo.dim, k = pieces->k;
    std::vector<int64_t> rows = F.ShardShape(full);
    rows[static_cast<size_t>(d)] = 1;
    const int64_t row_bytes = ElementsOf(rows) * PrimitiveTypeBytes(base.type);
    const TileMap mid = F.GatheredBy(d, k);
    ReshardPlan p;
    const int64_t bytes = (pieces->halo.most_received + (k - 1) * pieces->piece) * row_bytes;
    p.steps.push_back({ReshardStep::Kind::kHaloPieces, {d, k}, F, mid, bytes, {}});
    // One collective counted per step below; here the all-gather, and the second permute when
    // rows come from both sides.
    p.bytes = bytes + kCollectiveOverheadBytes +
              (pieces->halo.left > 0 && pieces->halo.right > 0 ? kCollectiveOverheadBytes : 0);
    finish(std::move(p), mid, false);
  }
  // 3. Collective-permute: same tiling, different devices.
  if (F.tiles() == T.tiles()) {
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, F, T, ShardBytes(F, base), {}});
    p.bytes = p.steps.back().bytes;
    candidates.push_back(p);
  }
  // 3b. Slice, then one collective-permute: every target shard lies within some device's source
  //     shard, but not always the device that wants it (partial replication over another device
  //     order: [1,2,4] with 4 copies -> [2,2,2] with 2). Each device keeps its target shard when it
  //     holds it; the others are served by devices holding theirs that slice it out and send it.
  //     One target shard per device moves, where an all-to-all or all-gather moves more.
  //     (Nothing to move when plan 1 applies: SliceThenPermuteMap would find every device holding
  //     its target shard after a per-device search.)
  if (F.replication() > 1 && !local_refinement) {
    if (auto mid = SliceThenPermuteMap(F, T, full)) {
      ReshardPlan p;
      p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, F, *mid, 0, {}});
      p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, *mid, T, ShardBytes(*mid, base), {}});
      p.bytes = p.steps.back().bytes;
      candidates.push_back(p);
    }
  }
  // 4. All-gather the dims that must be gathered, then refine locally. Try the minimal set and
  //    gathering everything (always valid).
  //    (A dim is needed when some device's target shard is not within its source shard: none is
  //    when plan 1 applies.)
  std::vector<int64_t> needed, all_tiled;
  for (int64_t d = 0; d < base.rank(); ++d) {
    if (F.tiles(d) > 1) all_tiled.push_back(d);
    if (F.tiles(d) == 1 || local_refinement) continue;
    const int64_t fs = F.ShardSize(d, full[static_cast<size_t>(d)]);
    const int64_t ts = T.ShardSize(d, full[static_cast<size_t>(d)]);
    for (int64_t dev = 0; dev < n_; ++dev) {
      const int64_t fo = F.index(dev, d) * fs;
      const int64_t to = T.index(dev, d) * ts;
      const int64_t tend = std::min(to + ts, full[static_cast<size_t>(d)]);
      if (tend > to && (to < fo || tend > std::min(fo + fs, full[static_cast<size_t>(d)]))) {
        needed.push_back(d);
        break;
      }
    }
  }
  // 4a. Gather only down to the granularity the target needs (gcd of the tile counts): an
  //     all-gather within subgroups (XLA's partial replication resharding).
  {
    ReshardPlan p;
    TileMap cur = F;
    bool ok = true;
    for (int64_t d : needed) {
      const int64_t g = std::gcd(F.tiles(d), T.tiles(d));
      const int64_t k = F.tiles(d) / g;
      if (g > 1 && k == 1) continue;  // only the device order differs: the permute that finishes fixes it
      if (g <= 1 || k <= 1) { ok = false; break; }
      // The partial gather must land on the target's shard boundaries (even split).
      const int64_t s = cur.ShardSize(d, full[static_cast<size_t>(d)]);
      if (s * k != (full[static_cast<size_t>(d)] + g - 1) / g) { ok = false; break; }
      TileMap next = cur.GatheredBy(d, k);
      int64_t bytes = ShardBytes(cur, base) * (k - 1);
      p.steps.push_back({ReshardStep::Kind::kAllGather, {d, k}, cur, next, bytes, {}});
      p.bytes += bytes;
      cur = next;
    }
    if (ok && !needed.empty()) finish(std::move(p), cur, false, true);
  }
  // Also gathering only the dims whose tile count changes: the others differ in device order,
  // which the finishing slice and collective-permute fix.
  std::vector<int64_t> needed_counts;
  for (int64_t d : needed)
    if (F.tiles(d) != T.tiles(d)) needed_counts.push_back(d);
  const std::vector<int64_t>* gathers[] = {&needed, &all_tiled, &needed_counts};
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<int64_t>& gather = *gathers[i];
    // (A set tried already would give the same plan again, which loses the tie to the first.)
    if (gather.empty() || std::any_of(gathers, gathers + i, [&](const auto* g) { return *g == gather; })) continue;
    ReshardPlan p;
    TileMap cur = F;
    for (int64_t d : gather) {
      TileMap next = cur.Gathered({d});
      const int64_t t = cur.tiles(d);
      int64_t bytes = ShardBytes(cur, base) * (t - 1);
      p.steps.push_back({ReshardStep::Kind::kAllGather, {d}, cur, next, bytes, {}});
      p.bytes += bytes;
      cur = next;
    }
    finish(std::move(p), cur, false, true);
  }
  // 4b. Reorder devices first, then all-gather (XLA's resharding between permuted meshes): when T
  //     is F with some dims gathered but over another device order, a collective-permute puts
  //     every device on the F tile whose gather group yields its T tile, then one all-gather.
  {
    std::vector<int64_t> gathered;
    bool ok = T.replication() > F.replication();
    for (int64_t d = 0; d < base.rank() && ok; ++d) {
      if (F.tiles(d) == T.tiles(d)) continue;
      if (T.tiles(d) != 1) ok = false;
      else gathered.push_back(d);
    }
    int64_t g = 1;
    for (int64_t d : gathered) g *= F.tiles(d);
    // (Not when gathering in place already gives T: plan 4 has that.)
    if (ok && !gathered.empty() && T.replication() == F.replication() * g && !F.Gathered(gathered).SameAs(T)) {
      // Per T tile, its devices take the F tiles along the gathered dims, each F.replication()
      // times; a device keeps its own F tile where it may (fewer move). T tiles and gathered-dims
      // indices by their row-major numbers (ascending is the order the slots are offered in), the
      // slots in a flat table: maps keyed by tile indices were most of this plan's time.
      const size_t r = static_cast<size_t>(base.rank());
      std::vector<int64_t> left(static_cast<size_t>(ElementsOf(T.tiles()) * g), F.replication());
      std::vector<int64_t> t_lin(static_cast<size_t>(n_)), placed_on(static_cast<size_t>(n_), -1);
      for (int64_t dev = 0; dev < n_; ++dev) {
        int64_t lin = 0;
        for (size_t d = 0; d < r; ++d) lin = lin * T.tiles(static_cast<int64_t>(d)) + T.index(dev, static_cast<int64_t>(d));
        t_lin[static_cast<size_t>(dev)] = lin;
      }
      auto place = [&](int64_t dev, int64_t s) {
        placed_on[static_cast<size_t>(dev)] = s;
        --left[static_cast<size_t>(t_lin[static_cast<size_t>(dev)] * g + s)];
      };
      for (int64_t dev = 0; dev < n_; ++dev) {
        // Its own F tile, when that lies in its T tile (T is whole along the gathered dims).
        bool own = true;
        for (int64_t d = 0; d < base.rank() && own; ++d)
          own = std::find(gathered.begin(), gathered.end(), d) != gathered.end() ? T.index(dev, d) == 0
                                                                                  : F.index(dev, d) == T.index(dev, d);
        int64_t s = 0;
        for (int64_t d : gathered) s = s * F.tiles(d) + F.index(dev, d);
        if (own && left[static_cast<size_t>(t_lin[static_cast<size_t>(dev)] * g + s)] > 0) place(dev, s);
      }
      for (int64_t dev = 0; dev < n_; ++dev) {
        if (placed_on[static_cast<size_t>(dev)] >= 0) continue;
        for (int64_t s = 0; s < g; ++s)
          if (left[static_cast<size_t>(t_lin[static_cast<size_t>(dev)] * g + s)] > 0) {
            place(dev, s);
            break;
          }
      }
      // Each tile's copies numbered in device order (a gather group takes one copy of each tile);
      // a device left without a slot holds index 0 as a tile of its own.
      std::vector<int32_t> index(static_cast<size_t>(n_) * r, 0), replica(static_cast<size_t>(n_));
      std::vector<int32_t> copies(static_cast<size_t>(ElementsOf(F.tiles())), 0);
      int32_t unplaced = 0;
      for (int64_t dev = 0; dev < n_; ++dev) {
        int64_t s = placed_on[static_cast<size_t>(dev)];
        if (s < 0) {
          replica[static_cast<size_t>(dev)] = unplaced++;
          continue;
        }
        int32_t* idx = index.data() + static_cast<size_t>(dev) * r;
        for (size_t d = 0; d < r; ++d) idx[d] = static_cast<int32_t>(T.index(dev, static_cast<int64_t>(d)));
        for (size_t i = gathered.size(); i-- > 0;) {
          idx[gathered[i]] = static_cast<int32_t>(s % F.tiles(gathered[i]));
          s /= F.tiles(gathered[i]);
        }
        int64_t lin = 0;
        for (size_t d = 0; d < r; ++d) lin = lin * F.tiles(static_cast<int64_t>(d)) + idx[d];
        replica[static_cast<size_t>(dev)] = copies[static_cast<size_t>(lin)]++;
      }
      TileMap mid(F.tiles(), std::move(index), std::move(replica));
      TileMap after = mid.Gathered(gathered);
      if (!mid.SameAs(F) && after.SameAs(T)) {
        ReshardPlan p;
        p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, F, mid, ShardBytes(F, base), {}});
        p.bytes = ShardBytes(F, base);
        TileMap cur = mid;
        for (int64_t d : gathered) {
          TileMap next = cur.Gathered({d});
          const int64_t bytes = ShardBytes(cur, base) * (cur.tiles(d) - 1);
          p.steps.push_back({ReshardStep::Kind::kAllGather, {d}, cur, next, bytes, {}});
          p.bytes += bytes;
          cur = next;
        }
        candidates.push_back(std::move(p));
      }
    }
  }
  // 5. All-to-all first, then a local refinement or a collective-permute (sharding moves to
  //    another dim and is then refined / reordered: XLA's multi-step resharding).
  for (int64_t a = 0; a < base.rank(); ++a) {
    for (int64_t b = 0; b < base.rank(); ++b) {
      const int64_t k = F.tiles(a);
      if (a == b || k <= 1 || F.tiles(b) != 1) continue;
      if (T.tiles(b) % k != 0 && T.tiles(b) != k) continue;
      std::vector<int64_t> tiles = F.tiles();
      tiles[static_cast<size_t>(b)] = k;
      tiles[static_cast<size_t>(a)] = 1;
      std::vector<int32_t> index = F.flat_index();
      const auto r = static_cast<size_t>(base.rank());
      for (size_t dev = 0; dev < static_cast<size_t>(n_); ++dev) {
        int32_t* idx = index.data() + dev * r;
        idx[b] = idx[a];
        idx[a] = 0;
      }
      TileMap mid(tiles, std::move(index), F.flat_replica());
      const int64_t a2a = AllToAllBytes(F, base, b, k);
      ReshardPlan p;
      p.steps.push_back({ReshardStep::Kind::kAllToAll, {a, b}, F, mid, a2a, {}});
      p.bytes = a2a;
      finish(std::move(p), mid, true);  // mid == T: candidate 2
    }
  }
  // 6. Reorder devices first (collective-permute into a layout from which the target is a local
  //    refinement): a partially replicated value whose groups are permuted.
  if (F.tiles() != T.tiles()) {
    // Map T onto F's tile grid: a device's F-tile is the T-tile it needs, coarsened.
    bool ok = true;
    const int64_t rank = base.rank();
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t ft = F.tiles(d), tt = T.tiles(d);
      if (ft > tt || tt % ft != 0) ok = false;
    }
    // T must refine that map locally (IsLocalRefinement(mid, T)). A device's mid index along d is
    // its T index divided by T's tiles per F tile, so the test is one per T tile index along each
    // dim, not one per device (T is a sharding's map: every index along d is some device's),
    // and the map is built only when it will serve.
    for (int64_t d = 0; d < rank && ok; ++d) {
      const int64_t ft = F.tiles(d), tt = T.tiles(d), len = full[static_cast<size_t>(d)];
      if (ft == 1) continue;
      const int64_t fs = F.ShardSize(d, len), ts = T.ShardSize(d, len), per = tt / ft;
      for (int64_t i = 0; i < tt && ok; ++i) ok = hlo_sharding_util::ShardWithin(len, i * ts, ts, i / per * fs, fs);
    }
    // (With F whole, every device's coarsened index is F's: nothing to reorder.)
    if (ok && ElementsOf(F.tiles()) > 1) {
      // Devices per tile of F's grid (row-major tile number): a full grid holds each
      // F.replication() times. The replicas are numbered 0 (only the indices are compared, and
      // the map is built only when they differ from F's).
      std::vector<int32_t> index(static_cast<size_t>(n_ * rank));
      std::vector<int64_t> count(static_cast<size_t>(ElementsOf(F.tiles())), 0);
      std::vector<int32_t> per(static_cast<size_t>(rank));
      for (int64_t d = 0; d < rank; ++d) per[static_cast<size_t>(d)] = static_cast<int32_t>(T.tiles(d) / F.tiles(d));
      const std::vector<int32_t>& tidx = T.flat_index();
      const std::vector<int32_t>& fidx = F.flat_index();
      bool same = true;
      for (size_t dev = 0; dev < static_cast<size_t>(n_); ++dev) {
        int64_t lin = 0;
        for (size_t d = 0; d < static_cast<size_t>(rank); ++d) {
          const size_t at = dev * static_cast<size_t>(rank) + d;
          const int32_t i = per[d] == 1 ? tidx[at] : tidx[at] / per[d];
          index[at] = i;
          same &= i == fidx[at];
          lin = lin * F.tiles(static_cast<int64_t>(d)) + i;
        }
        ++count[static_cast<size_t>(lin)];
      }
      bool grid = true;
      for (int64_t c : count) grid &= c == F.replication();
      if (grid && !same) {
        const TileMap mid(F.tiles(), std::move(index), std::vector<int32_t>(static_cast<size_t>(n_), 0));
        ReshardPlan p;
        p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, F, mid, ShardBytes(F, base), {}});
        p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, mid, T, 0, {}});
        p.bytes = ShardBytes(F, base);
        candidates.push_back(p);
      }
    }
  }
  // 8. Replicate by a masked all-reduce: each device writes its shard (padding masked to zero) at
  //    its offset in a zero array of the whole extent and an all-reduce over the tiles sums them
  //    (XLA's replication of an array with more tiles than elements). About twice the array's
  //    bytes, so it is offered only for a replicated target where a dim has more tiles than
  //    elements ([1,1] over a 2x2 mesh: most shards are padding).
  const bool mostly_padding = std::any_of(all_tiled.begin(), all_tiled.end(),
                                          [&](int64_t d) { return F.tiles(d) > full[static_cast<size_t>(d)]; });
  if (mostly_padding) {
    auto rep = TileMap::FromSharding(HloSharding::Replicate(), base.rank(), n_);
    if (rep.ok() && rep->SameAs(T)) {
      int64_t g = 1;
      for (int64_t d : all_tiled) g *= F.tiles(d);
      const int64_t bytes = base.ByteSize() * 2 * (g - 1) / g;
      ReshardPlan p;
      p.steps.push_back({ReshardStep::Kind::kMaskedAllReduce, all_tiled, F, *rep, bytes, {}});
      p.bytes = bytes;
      // First, so that it wins a tie (XLA's choice for such arrays: BroadcastAsReplicate3).
      candidates.insert(candidates.begin(), p);
    }
  }
  // 4c. When several dims must change, gathering each alone: the others' tiles may then move by
  //     one all-to-all instead of a gather (XLA's TileToPartialReplicateReshardUnevenPartition:
  //     the dim whose 3 tiles do not divide into 2 is gathered, dim 0's 2 tiles move onto it).
  //     Last, so that a plan above of the same bytes keeps winning the tie.
  if (needed.size() > 1) {
    for (int64_t d : needed) {
      ReshardPlan p;
      TileMap next = F.Gathered({d});
      const int64_t bytes = ShardBytes(F, base) * (F.tiles(d) - 1);
      p.steps.push_back({ReshardStep::Kind::kAllGather, {d}, F, next, bytes, {}});
      p.bytes = bytes;
      if (!whole_all_to_all(next)) continue;  // the other finishes are plan 4's
      finish(std::move(p), next, false, true);
    }
  }
  if (candidates.empty()) return Error("no resharding plan from " + from.ToString() + " to " + to.ToString());
  // A plan's cost (what handlers add to theirs) charges one latency per collective, as the
  // handlers' own costs do. Choosing among the ways to reshard, an all-gather over g devices is
  // charged its ring's g - 1 steps: a gather within pairs and a permute (two steps) is quicker
  // than a gather over 4 (three). Only the choice: handlers compare plans in their currency.
  std::vector<int64_t> ranked(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    ReshardPlan& c = candidates[i];
    int64_t ring = 0;
    for (const auto& st : c.steps) {
      if (st.kind != ReshardStep::Kind::kDynamicSlice) c.bytes += kCollectiveOverheadBytes;
      if (st.kind == ReshardStep::Kind::kAllGather || st.kind == ReshardStep::Kind::kHaloPieces) {
        const int64_t d = st.dims[0];
        ring += std::max<int64_t>(0, st.before.tiles(d) / std::max<int64_t>(1, st.after.tiles(d)) - 2);
      }
    }
    ranked[i] = c.bytes + ring * kCollectiveOverheadBytes;
  }
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    const ReshardPlan& x = candidates[i];
    const ReshardPlan& y = candidates[best];
    if (ranked[i] != ranked[best] ? ranked[i] < ranked[best]
                                  : (x.bytes != y.bytes ? x.bytes < y.bytes : x.steps.size() < y.steps.size()))
      best = i;
  }
  return candidates[best];
}

Result<Instruction*> Resharder::EmitPlan(const PartitionedHlo& v, const ReshardPlan& plan, const HloSharding& target) {
  Instruction* x = v.hlo;
  const std::vector<int64_t>& full = v.base_shape.dims;
  const std::string reason = "reshard " + v.sharding.ToString() + " -> " + target.ToString();
  // x on device `owner`, zeros on every other device.
  auto keep_on = [&](Instruction* x, int64_t owner) {
    std::vector<int64_t> is_owner(static_cast<size_t>(n_), 0);
    if (owner >= 0 && owner < n_) is_owner[static_cast<size_t>(owner)] = 1;
    Instruction* flag = b_.TableLookup(is_owner);
    Instruction* one = b_.ConstantScalar(PrimitiveType::kS32, 1);
    Instruction* eq = b_.Emit(Opcode::kCompare, Shape::Scalar(PrimitiveType::kPred), {flag, one});
    eq->comparison = ComparisonDirection::kEq;
    const Shape& ls = x->shape();
    Instruction* mask = b_.Emit(Opcode::kBroadcast, Shape(PrimitiveType::kPred, ls.dims), {eq});
    mask->has_dimensions_attr = true;
    Instruction* zero = b_.Broadcast(b_.ConstantScalar(ls.type, 0.0), ls);
    return b_.Emit(Opcode::kSelect, ls, {mask, x, zero});
  };
  // The sum (or, for pred, the or) of x over every device.
  auto sum_over_all = [&](Instruction* x, const std::string& why) {
    std::vector<int64_t> all(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) all[static_cast<size_t>(i)] = i;
    const PrimitiveType t = x->shape().type;
    return b_.AllReduce(x, b_.ScalarReducer(t == PrimitiveType::kPred ? Opcode::kOr : Opcode::kAdd, t), {all}, why);
  };
  // Plan 2d's exchange: each device's `size` rows from its shard widened by the rows of its
  // neighbours (`halo`).
  auto exchange = [&](Instruction* x, const HaloReshard& halo, int64_t size, const std::string& why) {
    const int64_t d = halo.dim, fs = x->shape().dim(d);
    const PrimitiveType type = x->shape().type;
    auto rows = [&](Instruction* v, int64_t from, int64_t to) { return b_.SliceDim(v, d, from, to); };
    std::vector<Instruction*> parts;
    if (halo.left > 0) parts.push_back(b_.CollectivePermute(rows(x, fs - halo.left, fs), halo.left_pairs, why));
    parts.push_back(x);
    if (halo.right > 0) parts.push_back(b_.CollectivePermute(rows(x, 0, halo.right), halo.right_pairs, why));
    std::vector<int64_t> dims = x->shape().dims;
    dims[static_cast<size_t>(d)] = halo.left + fs + halo.right;
    Instruction* wide = b_.Emit(Opcode::kConcatenate, Shape(type, dims), parts);
    wide->dimensions = {d};
    if (halo.tail > 0) {
      std::vector<int64_t> high(dims.size(), 0);
      high[static_cast<size_t>(d)] = halo.tail;
      wide = b_.PadHigh(wide, high, 0.0);
    }
    std::vector<Instruction*> offsets;
    for (size_t i = 0; i < dims.size(); ++i)
      offsets.push_back(static_cast<int64_t>(i) == d ? b_.TableLookup(halo.offset) : b_.ConstantScalar(PrimitiveType::kS32, 0));
    std::vector<int64_t> sizes = x->shape().dims;
    sizes[static_cast<size_t>(d)] = size;
    return b_.DynamicSlice(wide, offsets, sizes);
  };
  for (const ReshardStep& st : plan.steps) {
    switch (st.kind) {
      case ReshardStep::Kind::kDynamicSlice: {
        std::vector<int64_t> sizes = st.after.ShardShape(full);
        std::vector<Instruction*> offsets;
        std::vector<int64_t> high(full.size(), 0);
        bool any = false;
        for (size_t d = 0; d < full.size(); ++d) {
          std::vector<int64_t> table(static_cast<size_t>(n_));
          for (int64_t dev = 0; dev < n_; ++dev) {
            table[static_cast<size_t>(dev)] = st.after.Offset(dev, static_cast<int64_t>(d), full[d]) -
                                              st.before.Offset(dev, static_cast<int64_t>(d), full[d]);
            high[d] = std::max(high[d], table[static_cast<size_t>(dev)] + sizes[d] - x->shape().dims[d]);
          }
          any |= sizes[d] != x->shape().dims[d] || std::any_of(table.begin(), table.end(), [](int64_t t) { return t; });
          offsets.push_back(b_.TableLookup(table));
        }
        if (!any) break;
        x = b_.PadHigh(x, high, 0.0);
        x = b_.DynamicSlice(x, offsets, sizes);
        break;
      }
      case ReshardStep::Kind::kAllGather: {
        const int64_t d = st.dims[0];
        if (st.dims.size() == 2) {  // partial gather by a factor
          x = b_.AllGather(x, d, st.before.GroupsGatheringBy(d, st.dims[1]), reason);
          break;
        }
        x = b_.AllGather(x, d, st.before.GroupsAlong({d}), reason);
        // Drop the padding of uneven shards once the dim is whole.
        std::vector<int64_t> limits = x->shape().dims;
        limits[static_cast<size_t>(d)] = std::min(limits[static_cast<size_t>(d)], full[static_cast<size_t>(d)]);
        x = b_.Slice(x, limits);
        break;
      }
      case ReshardStep::Kind::kAllToAll: {
        // Dim a (k tiles of ceil(A/k), padded) moves to dim b (whole, B): b is padded to k
        // chunks of ceil(B/k) (the target's shard, padding included), chunk j goes to tile j,
        // the received pieces are concatenated along a in source order and a's padding (all at
        // its end: tile i held [i*ceil(A/k), ...)) is sliced off. The padding of b stays as the
        // target's uneven-shard padding (which consumers mask where it could leak into a result).
        // dims {a, b, k}: only a factor k of a's tiles moves (the minor part of its index), within
        // the groups of k devices differing in it (plan 2b); {a, b}: all of them.
        const int64_t a = st.dims[0], b = st.dims[1];
        const bool partial = st.dims.size() > 2;
        const int64_t k = partial ? st.dims[2] : st.before.tiles(a);
        {
          std::vector<int64_t> high(x->shape().dims.size(), 0);
          const int64_t bd = x->shape().dim(b);
          high[static_cast<size_t>(b)] = (bd + k - 1) / k * k - bd;
          x = b_.PadHigh(x, high, 0.0);
        }
        std::vector<int64_t> dims = x->shape().dims;  // dim a: ceil(A/k), dim b: k * ceil(B/k)
        std::vector<int64_t> split;
        for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
          if (d == b) {
            split.push_back(k);
            split.push_back(dims[static_cast<size_t>(d)] / k);
          } else {
            split.push_back(dims[static_cast<size_t>(d)]);
          }
        }
        x = b_.Reshape(x, split);
        x = b_.AllToAll(x, b, partial ? st.before.GroupsGatheringBy(a, k) : st.before.GroupsAlong({a}), reason);
        // Move the source-index dim (at b) to just before a, then merge it into a.
        const int64_t a_pos = a < b ? a : a + 1;
        std::vector<int64_t> perm;
        for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d) {
          if (d == b) continue;
          if (d == a_pos) perm.push_back(b);
          perm.push_back(d);
        }
        x = b_.Transpose(x, perm);
        const std::vector<int64_t>& td = x->shape().dims;
        // After the transpose the source-index dim sits at index a, directly before a's data:
        // merge indices a and a+1.
        std::vector<int64_t> out;
        for (size_t d = 0; d < td.size(); ++d) {
          if (static_cast<int64_t>(d) == a) {
            out.push_back(td[d] * td[d + 1]);
            ++d;
          } else {
            out.push_back(td[d]);
          }
        }
        x = b_.Reshape(x, out);
        std::vector<int64_t> limits = x->shape().dims;
        limits[static_cast<size_t>(a)] = std::min(limits[static_cast<size_t>(a)], full[static_cast<size_t>(a)]);
        x = b_.Slice(x, limits);
        break;
      }
      case ReshardStep::Kind::kAllToAllDims: {
        auto many = PlanDimsAllToAll(st.before, st.after, full);
        if (!many) return Error("internal: the all-to-all of several dims no longer applies (" + reason + ")");
        const int64_t rank = static_cast<int64_t>(full.size());
        // Each t dim padded to t pieces of the target's shard and split as (t, piece).
        std::vector<int64_t> high(static_cast<size_t>(rank), 0), split, rest_pos(static_cast<size_t>(rank));
        std::vector<int64_t> factor_pos;
        for (int64_t d = 0; d < rank; ++d) {
          const int64_t td = many->t[static_cast<size_t>(d)];
          if (td > 1) {
            const int64_t piece = st.after.ShardSize(d, full[static_cast<size_t>(d)]);
            high[static_cast<size_t>(d)] = td * piece - x->shape().dim(d);
            factor_pos.push_back(static_cast<int64_t>(split.size()));
            split.push_back(td);
            rest_pos[static_cast<size_t>(d)] = static_cast<int64_t>(split.size());
            split.push_back(piece);
          } else {
            rest_pos[static_cast<size_t>(d)] = static_cast<int64_t>(split.size());
            split.push_back(x->shape().dim(d));
          }
        }
        x = b_.PadHigh(x, high, 0.0);
        x = b_.Reshape(x, split);
        // The t factors first (dims in order, major first), merged into one dim of k pieces.
        std::vector<int64_t> perm = factor_pos, rest_dims;
        for (int64_t d = 0; d < rank; ++d) perm.push_back(rest_pos[static_cast<size_t>(d)]);
        x = b_.Transpose(x, perm);
        for (int64_t d = 0; d < rank; ++d) rest_dims.push_back(split[static_cast<size_t>(rest_pos[static_cast<size_t>(d)])]);
        std::vector<int64_t> merged = {many->k};
        merged.insert(merged.end(), rest_dims.begin(), rest_dims.end());
        x = b_.Reshape(x, merged);
        x = b_.AllToAll(x, 0, many->groups, reason);
        // The received pieces by source position: one dim per s factor (in position order), each
        // moved before its dim and merged into it.
        std::vector<int64_t> unmerged;
        for (int64_t d : many->in_dims) unmerged.push_back(many->s[static_cast<size_t>(d)]);
        const int64_t nf = static_cast<int64_t>(unmerged.size());
        unmerged.insert(unmerged.end(), rest_dims.begin(), rest_dims.end());
        x = b_.Reshape(x, unmerged);
        std::vector<int64_t> perm2, out;
        for (int64_t d = 0; d < rank; ++d) {
          const auto it = std::find(many->in_dims.begin(), many->in_dims.end(), d);
          if (it != many->in_dims.end()) {
            perm2.push_back(static_cast<int64_t>(it - many->in_dims.begin()));
            out.push_back(many->s[static_cast<size_t>(d)] * rest_dims[static_cast<size_t>(d)]);
          } else {
            out.push_back(rest_dims[static_cast<size_t>(d)]);
          }
          perm2.push_back(nf + d);
        }
        x = b_.Transpose(x, perm2);
        x = b_.Reshape(x, out);
        std::vector<int64_t> limits = x->shape().dims;
        for (int64_t d : many->in_dims)
          limits[static_cast<size_t>(d)] = std::min(limits[static_cast<size_t>(d)], st.after.ShardSize(d, full[static_cast<size_t>(d)]));
        if (limits != x->shape().dims) x = b_.Slice(x, limits);
        break;
      }
      case ReshardStep::Kind::kHaloPieces: {
        auto pieces = PlanHaloPieces(st.before, st.after, full);
        if (!pieces) return Error("internal: the halo exchange into pieces no longer applies (" + reason + ")");
        const int64_t d = pieces->halo.dim;
        x = exchange(x, pieces->halo, pieces->piece, reason + ": halo exchange into pieces");
        x = b_.AllGather(x, d, st.before.GroupsGatheringBy(d, pieces->k), reason);
        std::vector<int64_t> limits = x->shape().dims;
        limits[static_cast<size_t>(d)] = st.after.ShardSize(d, full[static_cast<size_t>(d)]);
        if (limits != x->shape().dims) x = b_.Slice(x, limits);
        break;
      }
      case ReshardStep::Kind::kHalo: {
        auto halo = PlanHaloReshard(st.before, st.after, full);
        if (!halo) return Error("internal: the halo exchange no longer applies (" + reason + ")");
        x = exchange(x, *halo, st.after.ShardSize(halo->dim, full[static_cast<size_t>(halo->dim)]), reason + ": halo exchange");
        break;
      }
      case ReshardStep::Kind::kMaskedAllReduce: {
        // Shards with their padding zeroed, each at its offset in a zero array of the padded
        // whole (so no offset is clamped), summed over the tiles, then cut to the whole. When no
        // shard straddles the end of a dim (each is whole data or whole padding), the array is
        // the unpadded whole there, as XLA's: an all-padding shard's offset is clamped, and it
        // writes its zeros over zeros.
        x = b_.MaskPadding(x, st.before, v.base_shape, st.dims, 0.0);
        std::vector<int64_t> padded = x->shape().dims;
        std::vector<Instruction*> at;
        for (size_t d = 0; d < full.size(); ++d) {
          const bool tiled = std::find(st.dims.begin(), st.dims.end(), static_cast<int64_t>(d)) != st.dims.end();
          if (!tiled) {
            at.push_back(b_.ConstantScalar(PrimitiveType::kS32, 0));
            continue;
          }
          const std::vector<int64_t> offsets = st.before.OffsetTable(static_cast<int64_t>(d), full[d]);
          const int64_t shard = padded[d];
          bool straddles = false;
          for (int64_t o : offsets) straddles |= o < full[d] && o + shard > full[d];
          padded[d] = straddles ? shard * st.before.tiles(static_cast<int64_t>(d)) : full[d];
          at.push_back(b_.TableLookup(offsets));
        }
        const Shape whole(x->shape().type, padded);
        std::vector<Instruction*> ops = {b_.Broadcast(b_.ConstantScalar(whole.type, 0.0), whole), x};
        ops.insert(ops.end(), at.begin(), at.end());
        x = b_.Emit(Opcode::kDynamicUpdateSlice, whole, std::move(ops));
        const PrimitiveType t = whole.type;
        x = b_.AllReduce(x, b_.ScalarReducer(t == PrimitiveType::kPred ? Opcode::kOr : Opcode::kAdd, t),
                         st.before.GroupsAlong(st.dims), reason);
        std::vector<int64_t> limits = x->shape().dims;
        for (int64_t d : st.dims) limits[static_cast<size_t>(d)] = full[static_cast<size_t>(d)];
        x = b_.Slice(x, limits);
        break;
      }
      case ReshardStep::Kind::kReduceUnreduced: {
        if (st.groups.empty()) {
          x = sum_over_all(x, "sum the unreduced partial values");
        } else {
          const PrimitiveType t = x->shape().type;
          x = b_.AllReduce(x, b_.ScalarReducer(t == PrimitiveType::kPred ? Opcode::kOr : Opcode::kAdd, t), st.groups,
                           "sum the partial values of each tile's unreduced group");
        }
        break;
      }
      case ReshardStep::Kind::kMakeUnreduced: {
        if (st.groups.empty()) {
          x = keep_on(x, 0);
        } else {
          std::vector<int64_t> keep(static_cast<size_t>(n_), 0);
          for (int64_t d : st.groups[0]) keep[static_cast<size_t>(d)] = 1;
          Instruction* flag = b_.TableLookup(keep);
          Instruction* eq = b_.Emit(Opcode::kCompare, Shape::Scalar(PrimitiveType::kPred),
                                    {flag, b_.ConstantScalar(PrimitiveType::kS32, 1)});
          eq->comparison = ComparisonDirection::kEq;
          const Shape& ls = x->shape();
          Instruction* mask = b_.Broadcast(eq, Shape(PrimitiveType::kPred, ls.dims));
          x = b_.Emit(Opcode::kSelect, ls, {mask, x, b_.Broadcast(b_.ConstantScalar(ls.type, 0.0), ls)});
        }
        break;
      }
      case ReshardStep::Kind::kBroadcastFromDevice: {
        const int64_t owner = st.dims[0];
        x = sum_over_all(keep_on(x, owner), "broadcast from device " + std::to_string(owner));
        break;
      }
      case ReshardStep::Kind::kCollectivePermute: {
        // Match the k-th holder of each tile under `before` to the k-th wanter under `after`.
        std::map<TileIndex, std::vector<int64_t>> holders, wanters;
        for (int64_t dev = 0; dev < n_; ++dev) {
          holders[st.before.device(dev).index].push_back(dev);
          wanters[st.after.device(dev).index].push_back(dev);
        }
        std::vector<std::pair<int64_t, int64_t>> pairs;
        for (auto& [tile, ws] : wanters) {
          auto& hs = holders[tile];
          // Keep devices that already hold the tile in place.
          std::vector<int64_t> free_h, free_w;
          for (int64_t w : ws)
            if (std::find(hs.begin(), hs.end(), w) != hs.end()) pairs.emplace_back(w, w);
            else free_w.push_back(w);
          for (int64_t h : hs)
            if (std::find(ws.begin(), ws.end(), h) == ws.end()) free_h.push_back(h);
          for (size_t i = 0; i < free_w.size() && i < free_h.size(); ++i) pairs.emplace_back(free_h[i], free_w[i]);
        }
        std::sort(pairs.begin(), pairs.end());
        x = b_.CollectivePermute(x, pairs, reason);
        break;
      }
    }
  }
  return x;
}

Result<Instruction*> Resharder::Reshard(const PartitionedHlo& v, const HloSharding& target) {
  if (!v.hlo) return Error("internal: resharding a value that was not partitioned");
  if (v.base_shape.IsTuple()) return ReshardAny(v, target);
  if (!v.base_shape.IsArray()) return v.hlo;
  if (v.sharding == target) return v.hlo;
  auto plan = Plan(v.sharding, target, v.base_shape);
  if (!plan.ok()) return plan.error();
  if (plan->identity) return v.hlo;
  return EmitPlan(v, *plan, target);
}

Result<Instruction*> Resharder::ReshardAny(const PartitionedHlo& v, const HloSharding& target) {
  if (!v.base_shape.IsTuple()) return Reshard(v, target);
  if (!v.hlo || !v.hlo->shape().IsTuple() || v.hlo->shape().tuple.size() != v.base_shape.tuple.size()) {
    return Error("internal: a partitioned tuple does not match its shape " + v.base_shape.ToString(false));
  }
  std::vector<Instruction*> leaves;
  bool changed = false;
  for (size_t i = 0; i < v.base_shape.tuple.size(); ++i) {
    const Shape& leaf_base = v.base_shape.tuple[i];
    HloSharding from = hlo_sharding_util::TupleElementSharding(v.sharding, v.base_shape, static_cast<int64_t>(i));
    HloSharding to = hlo_sharding_util::TupleElementSharding(target, v.base_shape, static_cast<int64_t>(i));
    Instruction* gte = b_.Emit(Opcode::kGetTupleElement, v.hlo->shape().tuple[i], {v.hlo});
    gte->tuple_index = static_cast<int64_t>(i);
    auto r = ReshardAny(PartitionedHlo{gte, from, leaf_base}, to);
    if (!r.ok()) return r;
    changed |= *r != gte;
    leaves.push_back(*r);
  }
  if (!changed) return v.hlo;
  std::vector<Shape> shapes;
  for (Instruction* l : leaves) shapes.push_back(l->shape());
  return b_.Emit(Opcode::kTuple, Shape::Tuple(shapes), leaves);
}

}  // namespace shardscope::spmd
