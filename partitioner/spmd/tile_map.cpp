#include "partitioner/spmd/tile_map.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include "core/sharding/tile_assignment.h"
#include "partitioner/hlo_sharding_util.h"

namespace shardscope::spmd {

// Memo tables of one Rep. Keys start with a tag naming the operation, then its arguments.
struct TileMap::Memo {
  std::mutex mu;  // maps are normally used by one thread, but copies may be handed to another
  std::map<std::vector<int64_t>, TileMap> maps;
  std::map<std::vector<int64_t>, std::vector<std::vector<int64_t>>> groups;
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> offsets;
  std::optional<Result<HloSharding>> sharding;
  std::map<std::vector<int64_t>, Result<HloSharding>> projected_shardings;  // by label_of_dim
};

namespace {
enum MemoTag : int64_t { kGathered, kGatheredBy, kPermuted, kProjected, kGroupsAlong, kGroupsGatheringBy };
std::vector<int64_t> MemoKey(int64_t tag, const std::vector<int64_t>& args) {
  std::vector<int64_t> k;
  k.reserve(args.size() + 1);
  k.push_back(tag);
  k.insert(k.end(), args.begin(), args.end());
  return k;
}
}  // namespace

std::shared_ptr<const TileMap::Rep> TileMap::MakeRep(std::vector<int64_t> tiles, std::vector<int32_t> index,
                                                    std::vector<int32_t> replica) {
  return std::make_shared<const Rep>(Rep{std::move(tiles), std::move(index), std::move(replica), std::make_shared<Memo>()});
}

TileMap::TileMap(std::vector<int64_t> tiles, const std::vector<DeviceTile>& devices) {
  const size_t rank = tiles.size(), n = devices.size();
  std::vector<int32_t> index(n * rank, 0), replica(n);
  for (size_t dev = 0; dev < n; ++dev) {
    const DeviceTile& dt = devices[dev];
    for (size_t k = 0; k < rank && k < dt.index.size(); ++k) index[dev * rank + k] = static_cast<int32_t>(dt.index[k]);
    replica[dev] = static_cast<int32_t>(dt.replica);
  }
  rep_ = MakeRep(std::move(tiles), std::move(index), std::move(replica));
}

TileMap::TileMap(std::vector<int64_t> tiles, std::vector<int32_t> index, std::vector<int32_t> replica)
    : rep_(MakeRep(std::move(tiles), std::move(index), std::move(replica))) {}

TileMap::TileMap() {
  static const std::shared_ptr<const Rep> kEmpty = MakeRep({}, {}, {});
  rep_ = kEmpty;
}

// ---- memoised entry points: each computes once per (map, arguments) ----

// The answer `table` of this map's memo holds for `key`, or `compute()`'s, stored. Computed outside
// the lock: two threads may both compute it, the first one stored is kept (they are the same).
template <class Table, class Key, class Compute>
typename Table::mapped_type FindOrCompute(std::mutex& mu, Table& table, const Key& key, Compute&& compute) {
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = table.find(key);
    if (it != table.end()) return it->second;
  }
  auto value = compute();
  std::lock_guard<std::mutex> lock(mu);
  return table.emplace(key, std::move(value)).first->second;
}

TileMap TileMap::Gathered(const std::vector<int64_t>& dims) const {
  if (dims.empty()) return *this;
  Memo& memo = *rep_->memo;
  return FindOrCompute(memo.mu, memo.maps, MemoKey(kGathered, dims), [&] { return GatheredUncached(dims); });
}

TileMap TileMap::GatheredBy(int64_t d, int64_t k) const {
  Memo& memo = *rep_->memo;
  return FindOrCompute(memo.mu, memo.maps, MemoKey(kGatheredBy, {d, k}), [&] { return GatheredByUncached(d, k); });
}

TileMap TileMap::Permuted(const std::vector<int64_t>& perm) const {
  Memo& memo = *rep_->memo;
  return FindOrCompute(memo.mu, memo.maps, MemoKey(kPermuted, perm), [&] { return PermutedUncached(perm); });
}

TileMap TileMap::Projected(const std::vector<int64_t>& label_of_dim) const {
  Memo& memo = *rep_->memo;
  return FindOrCompute(memo.mu, memo.maps, MemoKey(kProjected, label_of_dim), [&] { return ProjectedUncached(label_of_dim); });
}

std::vector<std::vector<int64_t>> TileMap::GroupsAlong(const std::vector<int64_t>& dims) const {
  Memo& memo = *rep_->memo;
  return FindOrCompute(memo.mu, memo.groups, MemoKey(kGroupsAlong, dims), [&] { return GroupsAlongUncached(dims); });
}

std::vector<std::vector<int64_t>> TileMap::GroupsGatheringBy(int64_t d, int64_t k) const {
  Memo& memo = *rep_->memo;
  return FindOrCompute(memo.mu, memo.groups, MemoKey(kGroupsGatheringBy, {d, k}),
                       [&] { return GroupsGatheringByUncached(d, k); });
}

std::vector<int64_t> TileMap::OffsetTable(int64_t d, int64_t full) const {
  Memo& memo = *rep_->memo;
  return FindOrCompute(memo.mu, memo.offsets, std::make_pair(d, full), [&] { return OffsetTableUncached(d, full); });
}

Result<HloSharding> TileMap::ProjectedSharding(const std::vector<int64_t>& label_of_dim) const {
  Memo& memo = *rep_->memo;
  return FindOrCompute(memo.mu, memo.projected_shardings, label_of_dim,
                       [&] { return ProjectedShardingUncached(label_of_dim); });
}

Result<HloSharding> TileMap::ToSharding() const {
  Memo& memo = *rep_->memo;
  {
    std::lock_guard<std::mutex> lock(memo.mu);
    if (memo.sharding) return *memo.sharding;
  }
  auto s = ToShardingUncached();
  std::lock_guard<std::mutex> lock(memo.mu);
  if (!memo.sharding) memo.sharding.emplace(std::move(s));
  return *memo.sharding;
}

// ---- the computations ----

Result<TileMap> TileMap::FromSharding(const HloSharding& s, int64_t rank, int64_t n) {
  auto rep = std::make_shared<Rep>();
  rep->memo = std::make_shared<Memo>();
  Rep& m = *rep;
  m.tiles.assign(static_cast<size_t>(rank), 1);
  m.index.assign(static_cast<size_t>(n * rank), 0);
  m.replica.resize(static_cast<size_t>(n));
  for (int64_t d = 0; d < n; ++d) m.replica[static_cast<size_t>(d)] = static_cast<int32_t>(d);
  if (s.IsTuple()) return Error("TileMap: tuple sharding given for an array");
  if (!s.IsTiled()) return TileMap(std::move(rep));  // replicated / maximal / unknown / manual (whole array per device)
  // Manual subgroups behave like replicas here: devices of different manual groups hold the same
  // tile index but never exchange data (every collective group is keyed by the replica index).
  // Unreduced subgroups too: their devices hold partial sums of one tile, which the resharder sums
  // (core/sharding/unreduced.h) before it moves the tile.
  for (auto t : s.subgroup_types())
    if (t == HloSharding::SubgroupType::kMaximal)
      return Error("maximal subgroups are not supported by the partitioner yet: " + s.ToString());
  const TileAssignment& ta = s.tile_assignment();
  const int64_t data_rank = s.TiledDataRank();
  if (data_rank != rank)
    return Error("sharding " + s.ToString() + " tiles " + std::to_string(data_rank) + " dims, array has rank " +
                 std::to_string(rank));
  if (ta.num_elements() != n)
    return Error("sharding " + s.ToString() + " spans " + std::to_string(ta.num_elements()) +
                 " devices, the program has " + std::to_string(n));
  for (int64_t d = 0; d < rank; ++d) m.tiles[static_cast<size_t>(d)] = ta.dim(d);
  // One pass over the row-major device list, the tile index counted along (a device listed twice
  // keeps its first position, as TileAssignment::IndexOfDevice answers): asking IndexOfDevice per
  // device built a vector for each of the 2048 devices of every map.
  const std::vector<int64_t>& devices = ta.devices();
  const size_t full_rank = static_cast<size_t>(ta.num_dimensions());
  if (n > 0 && std::any_of(ta.dims().begin(), ta.dims().end(), [](int64_t t) { return t <= 0; }))
    return Error("device 0 missing from sharding " + s.ToString());  // IndexOfDevice finds no device
  std::vector<char> placed(static_cast<size_t>(n), 0);
  std::vector<int64_t> idx(full_rank, 0);
  for (size_t pos = 0; pos < devices.size(); ++pos) {
    const int64_t dev = devices[pos];
    if (dev >= 0 && dev < n && !placed[static_cast<size_t>(dev)]) {
      placed[static_cast<size_t>(dev)] = 1;
      std::copy(idx.begin(), idx.begin() + rank, m.index.begin() + dev * rank);
      int64_t r = 0;
      for (size_t k = static_cast<size_t>(rank); k < full_rank; ++k) r = r * ta.dim(static_cast<int64_t>(k)) + idx[k];
      m.replica[static_cast<size_t>(dev)] = static_cast<int32_t>(r);
    }
    for (size_t k = full_rank; k-- > 0;) {
      if (++idx[k] < ta.dim(static_cast<int64_t>(k))) break;
      idx[k] = 0;
    }
  }
  for (int64_t dev = 0; dev < n; ++dev)
    if (!placed[static_cast<size_t>(dev)]) return Error("device " + std::to_string(dev) + " missing from sharding " + s.ToString());
  return TileMap(std::move(rep));
}

int64_t TileMap::replication() const {
  const auto& tiles_ = rep_->tiles;
  int64_t t = 1;
  for (int64_t x : tiles_) t *= x;
  return t == 0 ? 0 : num_devices() / t;
}

namespace {
// The canonical HloSharding of a map with these tiles whose device d holds tile lin_of[d]
// (row-major): devices by tile, ascending within a tile (XLA's canonical order), whatever the
// replica numbering. Error when the map is not a full grid.
Result<HloSharding> CanonicalSharding(const std::vector<int64_t>& tiles, int64_t total_tiles,
                                      const std::vector<int64_t>& lin_of) {
  const int64_t n = static_cast<int64_t>(lin_of.size()), rep = n / total_tiles;
  // A counting sort over the devices in id order.
  std::vector<int64_t> count(static_cast<size_t>(total_tiles), 0);
  for (int64_t lin : lin_of) ++count[static_cast<size_t>(lin)];
  for (int64_t c : count)
    if (c != rep) return Error("tile map is not a full grid");
  std::vector<int64_t> flat(static_cast<size_t>(n));
  std::fill(count.begin(), count.end(), 0);
  for (int64_t dev = 0; dev < n; ++dev) {
    const int64_t lin = lin_of[static_cast<size_t>(dev)];
    flat[static_cast<size_t>(lin * rep + count[static_cast<size_t>(lin)]++)] = dev;
  }
  std::vector<int64_t> dims = tiles;
  if (rep > 1) dims.push_back(rep);
  // In iota form when the devices are one ("[32,64]<=[64,32]T(1,0)"): the resharder's and the
  // handlers' memo keys then hold a few numbers instead of every device id, and the tile
  // assignment shares its device list with every other of that form.
  std::optional<IotaForm> form = DetectIota(flat);
  TileAssignment ta = form ? TileAssignment::Iota(std::move(dims), form->reshape_dims, form->perm)
                           : TileAssignment::Explicit(std::move(dims), std::move(flat));
  return rep == 1 ? HloSharding::Tile(std::move(ta)) : HloSharding::PartialTile(std::move(ta));
}
}  // namespace

Result<HloSharding> TileMap::ToShardingUncached() const {
  const auto& tiles_ = rep_->tiles;
  const size_t rank = tiles_.size();
  int64_t total_tiles = 1;
  for (int64_t t : tiles_) total_tiles *= t;
  if (total_tiles == 1) return HloSharding::Replicate();
  const int64_t n = num_devices();
  if (total_tiles <= 0 || n % total_tiles != 0) return Error("tile map is not a full grid");
  std::vector<int64_t> lin_of(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) {
    const int32_t* idx = rep_->index.data() + static_cast<size_t>(dev) * rank;
    int64_t lin = 0;
    for (size_t k = 0; k < rank; ++k) {
      if (idx[k] < 0 || idx[k] >= tiles_[k]) return Error("tile index out of range");
      lin = lin * tiles_[k] + idx[k];
    }
    lin_of[static_cast<size_t>(dev)] = lin;
  }
  return CanonicalSharding(tiles_, total_tiles, lin_of);
}

Result<HloSharding> TileMap::ProjectedShardingUncached(const std::vector<int64_t>& label_of_dim) const {
  // The projected map's tiles and each device's tile in it (ProjectedUncached): its replicas, the
  // rest of that map, do not change the canonical sharding.
  const auto& tiles_ = rep_->tiles;
  const size_t rank = tiles_.size(), out_rank = label_of_dim.size();
  std::vector<int64_t> tiles(out_rank, 1);
  for (size_t d = 0; d < out_rank; ++d)
    if (label_of_dim[d] >= 0) tiles[d] = tiles_[static_cast<size_t>(label_of_dim[d])];
  int64_t total_tiles = 1;
  for (int64_t t : tiles) total_tiles *= t;
  if (total_tiles == 1) return HloSharding::Replicate();
  const int64_t n = num_devices();
  if (total_tiles <= 0 || n % total_tiles != 0) return Error("tile map is not a full grid");
  std::vector<int64_t> lin_of(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) {
    const int32_t* from = rep_->index.data() + static_cast<size_t>(dev) * rank;
    int64_t lin = 0;
    for (size_t d = 0; d < out_rank; ++d) {
      const int64_t i = label_of_dim[d] >= 0 ? from[label_of_dim[d]] : 0;
      if (i < 0 || i >= tiles[d]) return Error("tile index out of range");
      lin = lin * tiles[d] + i;
    }
    lin_of[static_cast<size_t>(dev)] = lin;
  }
  return CanonicalSharding(tiles, total_tiles, lin_of);
}

int64_t TileMap::ShardSize(int64_t d, int64_t full) const {
  const int64_t t = rep_->tiles[static_cast<size_t>(d)];
  return (full + t - 1) / t;
}

std::vector<int64_t> TileMap::ShardShape(const std::vector<int64_t>& full) const {
  std::vector<int64_t> s(full.size());
  for (size_t d = 0; d < full.size(); ++d) s[d] = ShardSize(static_cast<int64_t>(d), full[d]);
  return s;
}

int64_t TileMap::Offset(int64_t dev, int64_t d, int64_t full) const { return index(dev, d) * ShardSize(d, full); }

std::vector<int64_t> TileMap::OffsetTableUncached(int64_t d, int64_t full) const {
  const int64_t n = num_devices(), size = ShardSize(d, full);
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) t[static_cast<size_t>(dev)] = index(dev, d) * size;
  return t;
}

bool TileMap::HasPadding(int64_t d, int64_t full) const {
  return ShardSize(d, full) * rep_->tiles[static_cast<size_t>(d)] != full;
}

// Groups of devices that agree on a key, each ordered by its members' `order` (then device id),
// the groups in ascending order of their members: the shape GroupsAlong and GroupsGatheringBy
// return. Keys are dense (0 .. num_keys-1), so the devices are bucketed, not looked up in a map of
// vectors (at 2048 devices the map's allocations were most of the time).
namespace {
// One more than the largest replica index (the replication of a full grid).
int64_t ReplicaCount(const std::vector<int32_t>& replica) {
  int32_t r = 0;
  for (int32_t x : replica) r = std::max(r, x);
  return int64_t{r} + 1;
}

std::vector<std::vector<int64_t>> GroupsByKey(const std::vector<int64_t>& key, const std::vector<int64_t>& order,
                                              int64_t num_keys) {
  for (int64_t k : key) num_keys = std::max(num_keys, k + 1);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> buckets(static_cast<size_t>(num_keys));
  for (size_t dev = 0; dev < key.size(); ++dev)
    buckets[static_cast<size_t>(key[dev])].emplace_back(order[dev], static_cast<int64_t>(dev));
  std::vector<std::vector<int64_t>> out;
  out.reserve(buckets.size());
  for (auto& members : buckets) {
    if (members.empty()) continue;
    std::sort(members.begin(), members.end());
    std::vector<int64_t> g;
    g.reserve(members.size());
    for (const auto& [o, dev] : members) g.push_back(dev);
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::vector<std::vector<int64_t>> TileMap::GroupsAlongUncached(const std::vector<int64_t>& dims) const {
  const auto& tiles_ = rep_->tiles;
  const size_t rank = tiles_.size();
  // Key: (indices on other dims, replica), row-major. Within a group, order by tile index over `dims`.
  const int64_t n = num_devices(), replicas = ReplicaCount(rep_->replica);
  std::vector<char> along(tiles_.size(), 0);
  for (int64_t k : dims) along[static_cast<size_t>(k)] = 1;
  int64_t num_keys = replicas;
  for (size_t k = 0; k < tiles_.size(); ++k)
    if (!along[k]) num_keys *= tiles_[k];
  std::vector<int64_t> key(static_cast<size_t>(n)), order(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) {
    const int32_t* idx = rep_->index.data() + static_cast<size_t>(dev) * rank;
    int64_t k_lin = 0, o = 0;
    for (size_t k = 0; k < rank; ++k)
      if (!along[k]) k_lin = k_lin * tiles_[k] + idx[k];
    for (int64_t k : dims) o = o * tiles_[static_cast<size_t>(k)] + idx[k];
    key[static_cast<size_t>(dev)] = k_lin * replicas + rep_->replica[static_cast<size_t>(dev)];
    order[static_cast<size_t>(dev)] = o;
  }
  return GroupsByKey(key, order, num_keys);
}

std::vector<std::vector<int64_t>> TileMap::GroupsGatheringByUncached(int64_t d, int64_t k) const {
  const auto& tiles_ = rep_->tiles;
  const size_t rank = tiles_.size();
  // Key: (indices with dim d's divided by k, replica), row-major; order: dim d's index mod k.
  const int64_t n = num_devices(), replicas = ReplicaCount(rep_->replica);
  int64_t num_keys = replicas;
  for (size_t i = 0; i < tiles_.size(); ++i)
    num_keys *= static_cast<int64_t>(i) == d ? (tiles_[i] + k - 1) / k : tiles_[i];
  std::vector<int64_t> key(static_cast<size_t>(n)), order(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) {
    const int32_t* idx = rep_->index.data() + static_cast<size_t>(dev) * rank;
    int64_t k_lin = 0;
    for (size_t i = 0; i < rank; ++i)
      k_lin = static_cast<int64_t>(i) == d ? k_lin * ((tiles_[i] + k - 1) / k) + idx[i] / k : k_lin * tiles_[i] + idx[i];
    key[static_cast<size_t>(dev)] = k_lin * replicas + rep_->replica[static_cast<size_t>(dev)];
    order[static_cast<size_t>(dev)] = idx[d] % k;
  }
  return GroupsByKey(key, order, num_keys);
}

TileMap TileMap::GatheredByUncached(int64_t d, int64_t k) const {
  auto rep = std::make_shared<Rep>(Rep{rep_->tiles, rep_->index, rep_->replica, std::make_shared<Memo>()});
  Rep& m = *rep;
  const size_t rank = m.tiles.size();
  for (size_t dev = 0; dev < m.replica.size(); ++dev) {
    int32_t& i = m.index[dev * rank + static_cast<size_t>(d)];
    m.replica[dev] = static_cast<int32_t>(m.replica[dev] * k + i % k);
    i = static_cast<int32_t>(i / k);
  }
  m.tiles[static_cast<size_t>(d)] /= k;
  return TileMap(std::move(rep));
}

TileMap TileMap::GatheredUncached(const std::vector<int64_t>& dims) const {
  const auto& tiles_ = rep_->tiles;
  auto rep = std::make_shared<Rep>(Rep{rep_->tiles, rep_->index, rep_->replica, std::make_shared<Memo>()});
  Rep& m = *rep;
  const size_t rank = tiles_.size();
  int64_t gathered_tiles = 1;
  for (int64_t k : dims) gathered_tiles *= tiles_[static_cast<size_t>(k)];
  for (size_t dev = 0; dev < m.replica.size(); ++dev) {
    int32_t* idx = m.index.data() + dev * rank;
    int64_t g = 0;
    for (int64_t k : dims) {
      g = g * tiles_[static_cast<size_t>(k)] + idx[k];
      idx[k] = 0;
    }
    m.replica[dev] = static_cast<int32_t>(m.replica[dev] * gathered_tiles + g);
  }
  for (int64_t k : dims) m.tiles[static_cast<size_t>(k)] = 1;
  return TileMap(std::move(rep));
}

TileMap TileMap::PermutedUncached(const std::vector<int64_t>& perm) const {
  const auto& tiles_ = rep_->tiles;
  const size_t rank = tiles_.size(), out_rank = perm.size(), n = rep_->replica.size();
  std::vector<int64_t> tiles(out_rank);
  for (size_t i = 0; i < out_rank; ++i) tiles[i] = tiles_[static_cast<size_t>(perm[i])];
  std::vector<int32_t> index(n * out_rank);
  for (size_t dev = 0; dev < n; ++dev)
    for (size_t i = 0; i < out_rank; ++i) index[dev * out_rank + i] = rep_->index[dev * rank + static_cast<size_t>(perm[i])];
  return TileMap(std::move(tiles), std::move(index), rep_->replica);
}

TileMap TileMap::ProjectedUncached(const std::vector<int64_t>& label_of_dim) const {
  // The map gathered over the labels the operand does not carry (Gathered(dropped): their tile
  // indices, row-major in label order, become the minor part of the replica index), read through
  // label_of_dim — computed in one pass, without building the gathered map.
  const auto& tiles_ = rep_->tiles;
  const size_t rank = tiles_.size(), out_rank = label_of_dim.size(), n = rep_->replica.size();
  std::vector<int64_t> dropped;
  for (int64_t l = 0; l < static_cast<int64_t>(rank); ++l)
    if (std::find(label_of_dim.begin(), label_of_dim.end(), l) == label_of_dim.end()) dropped.push_back(l);
  int64_t gathered_tiles = 1;
  for (int64_t k : dropped) gathered_tiles *= tiles_[static_cast<size_t>(k)];
  std::vector<int64_t> tiles(out_rank, 1);
  for (size_t d = 0; d < out_rank; ++d)
    if (label_of_dim[d] >= 0) tiles[d] = tiles_[static_cast<size_t>(label_of_dim[d])];
  std::vector<int32_t> index(n * out_rank, 0), replica(n);
  for (size_t dev = 0; dev < n; ++dev) {
    const int32_t* from = rep_->index.data() + dev * rank;
    int32_t* to = index.data() + dev * out_rank;
    for (size_t d = 0; d < out_rank; ++d)
      if (label_of_dim[d] >= 0) to[d] = from[label_of_dim[d]];
    int64_t g = 0;
    for (int64_t k : dropped) g = g * tiles_[static_cast<size_t>(k)] + from[k];
    replica[dev] = static_cast<int32_t>(rep_->replica[dev] * gathered_tiles + g);
  }
  return TileMap(std::move(tiles), std::move(index), std::move(replica));
}

bool TileMap::SameAs(const TileMap& o) const {
  if (rep_ == o.rep_) return true;
  return rep_->tiles == o.rep_->tiles && rep_->replica.size() == o.rep_->replica.size() && rep_->index == o.rep_->index;
}

bool IsLocalRefinement(const TileMap& from, const TileMap& to, const std::vector<int64_t>& full) {
  if (from.rank() != to.rank() || from.num_devices() != to.num_devices()) return false;
  const int64_t devices = from.num_devices();
  for (int64_t d = 0; d < from.rank(); ++d) {
    if (from.tiles(d) == 1) continue;  // the whole dim holds any shard of it
    const int64_t n = full[static_cast<size_t>(d)];
    const int64_t fs = from.ShardSize(d, n), ts = to.ShardSize(d, n);
    for (int64_t dev = 0; dev < devices; ++dev)
      if (!hlo_sharding_util::ShardWithin(n, to.index(dev, d) * ts, ts, from.index(dev, d) * fs, fs)) return false;
  }
  return true;
}

// ---- memo keys and the per-run cache ----

TileMapCache::TileMapCache(int64_t num_devices) : n_(num_devices) {}

Result<TileMap> TileMapCache::Get(const HloSharding& sharding, int64_t rank) const {
  std::string& key = key_buf_;
  key.clear();
  AppendShardingKey(key, sharding);
  key += '#';
  key += std::to_string(rank);
  auto it = maps_.find(key);
  if (it != maps_.end()) return it->second;
  auto m = TileMap::FromSharding(sharding, rank, n_);
  maps_.emplace(key, m);
  return m;
}

Result<Shape> TileMapCache::ShardShape(const Shape& base, const HloSharding& sharding) const {
  if (base.IsTuple()) {
    std::vector<Shape> leaves;
    for (size_t i = 0; i < base.tuple.size(); ++i) {
      HloSharding sub = hlo_sharding_util::TupleElementSharding(sharding, base, static_cast<int64_t>(i));
      auto s = ShardShape(base.tuple[i], sub);
      if (!s.ok()) return s;
      leaves.push_back(std::move(s).value());
    }
    return Shape::Tuple(std::move(leaves));
  }
  if (!base.IsArray()) return base;
  auto m = Get(sharding, base.rank());
  if (!m.ok()) return m.error();
  return Shape(base.type, m->ShardShape(base.dims));
}

int64_t ElementsOf(const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t x : dims) p *= x;
  return p;
}

int64_t ShardBytes(const TileMap& m, const Shape& base) {
  return ElementsOf(m.ShardShape(base.dims)) * PrimitiveTypeBytes(base.type);
}

}  // namespace shardscope::spmd
