// Sharding algebra for propagation. See sharding_util.h. The semantics mirror XLA's
// hlo_sharding_util (so imported HLO behaves as in XLA); the code is our own.
#include "partitioner/hlo_sharding_util.h"

#include "core/sharding/tile_assignment.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>

namespace shardscope::hlo_sharding_util {
namespace {

int64_t Product(const std::vector<int64_t>& v, size_t begin = 0, size_t end = SIZE_MAX) {
  int64_t p = 1;
  end = std::min(end, v.size());
  for (size_t i = begin; i < end; ++i) p *= v[i];
  return p;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

int64_t CeilDiv(int64_t a, int64_t b) { return b <= 0 ? a : (a + b - 1) / b; }

// XLA keeps last_tile_dim_replicate apart from subgroup types; several algorithms count "subgroup
// types" that way. This returns the types as XLA would report them.
std::vector<SubgroupType> XlaSubgroupTypes(const HloSharding& s) {
  if (ReplicateOnLastTileDim(s)) return {};
  return s.subgroup_types();
}

std::vector<int64_t> ArgSort(const std::vector<int64_t>& v) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[static_cast<size_t>(a)] < v[static_cast<size_t>(b)]; });
  return idx;
}

// Row-major multi-index of a flat position.
void Unflatten(int64_t flat, const std::vector<int64_t>& dims, std::vector<int64_t>* index) {
  index->assign(dims.size(), 0);
  for (size_t i = dims.size(); i-- > 0;) {
    if (dims[i] <= 0) return;
    (*index)[i] = flat % dims[i];
    flat /= dims[i];
  }
}

// The row-major successor of `index` within `dims` (an odometer): what Unflatten(flat + 1) gives
// after Unflatten(flat), without the divisions, for loops over every element in order.
void NextIndex(const std::vector<int64_t>& dims, std::vector<int64_t>* index) {
  for (size_t i = dims.size(); i-- > 0;) {
    if (++(*index)[i] < dims[i]) return;
    (*index)[i] = 0;
  }
}


// Per-thread memo tables for pure functions of shardings, keyed by their memo keys
// (AppendShardingKey): the same questions come back for every layer of a model and at every pass
// of propagation, and at thousands of devices each answer is O(devices). One table per answer type
// and use; bounded: emptied when an answer is added to a full one.
template <typename V, int kUse>
class ThreadMemo {
 public:
  static const V* Find(const std::string& key) {
    auto it = table().find(key);
    return it == table().end() ? nullptr : &it->second;
  }
  static V& Add(const std::string& key) {
    if (table().size() >= 4096) table().clear();
    return table()[key];
  }

 private:
  static std::unordered_map<std::string, V>& table() {
    thread_local std::unordered_map<std::string, V> t;
    return t;
  }
};
enum MemoUse { kMergeMemo, kSubTilingMemo };

}  // namespace

bool CompatibleIgnoringElementType(const Shape& a, const Shape& b) {
  if (a.IsTuple() != b.IsTuple()) return false;
  if (a.IsTuple()) {
    if (a.tuple.size() != b.tuple.size()) return false;
    for (size_t i = 0; i < a.tuple.size(); ++i) {
      if (!CompatibleIgnoringElementType(a.tuple[i], b.tuple[i])) return false;
    }
    return true;
  }
  if (a.IsToken() != b.IsToken()) return false;
  return a.dims == b.dims;
}

// ---- Queries ------------------------------------------------------------------------------------

bool IsTileMaximal(const HloSharding& s) {
  if (s.IsTuple()) {
    return std::all_of(s.tuple_elements().begin(), s.tuple_elements().end(),
                       [](const HloSharding& e) { return IsTileMaximal(e); });
  }
  return s.kind() == HloSharding::Kind::kReplicated || s.kind() == HloSharding::Kind::kMaximal;
}

bool IsSpatiallyPartitioned(const HloSharding& s) {
  if (s.IsTuple()) {
    return std::any_of(s.tuple_elements().begin(), s.tuple_elements().end(),
                       [](const HloSharding& e) { return IsSpatiallyPartitioned(e); });
  }
  return s.kind() != HloSharding::Kind::kMaximal;
}

bool IsSpatiallyPartitioned(const Instruction* inst) {
  return inst->has_sharding() && IsSpatiallyPartitioned(*inst->sharding());
}

bool IsManualLeaf(const HloSharding& s) { return s.kind() == HloSharding::Kind::kManual; }
bool IsTileMaximalLeaf(const HloSharding& s) {
  return s.kind() == HloSharding::Kind::kReplicated || s.kind() == HloSharding::Kind::kMaximal;
}
bool IsReplicatedLeaf(const HloSharding& s) { return s.kind() == HloSharding::Kind::kReplicated; }

bool ReplicateOnLastTileDim(const HloSharding& s) {
  return s.IsTiled() && s.subgroup_types().size() == 1 && s.subgroup_types()[0] == SubgroupType::kReplicated;
}

int64_t SubgroupReplicationDim(const HloSharding& s) {
  if (!s.IsTiled()) return -1;
  const auto& types = s.subgroup_types();
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == SubgroupType::kReplicated) return s.TiledDataRank() + static_cast<int64_t>(i);
  }
  return -1;
}

int64_t SubgroupManualDim(const HloSharding& s) {
  if (!s.IsTiled()) return -1;
  const auto& types = s.subgroup_types();
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == SubgroupType::kManual) return s.TiledDataRank() + static_cast<int64_t>(i);
  }
  return -1;
}

bool IsManualSubgroup(const HloSharding& s) { return SubgroupManualDim(s) >= 0; }

std::optional<int64_t> UniqueDevice(const HloSharding& s) {
  if (s.IsTuple()) {
    std::optional<int64_t> device;
    for (const auto& e : s.tuple_elements()) {
      auto d = UniqueDevice(e);
      if (!d || (device && *device != *d)) return std::nullopt;
      device = d;
    }
    return device;
  }
  if (s.IsMaximal()) return s.maximal_device();
  return std::nullopt;
}

namespace {
bool IsLeafShardingMoreSpecific(const HloSharding& lhs, const HloSharding& rhs) {
  if (IsManualLeaf(lhs) && IsTileMaximalLeaf(rhs)) return true;
  if (IsManualLeaf(lhs) || IsManualLeaf(rhs)) return false;
  if (!IsTileMaximalLeaf(rhs)) return lhs.NumTiles() > rhs.NumTiles();
  return !(IsReplicatedLeaf(rhs) ? IsReplicatedLeaf(lhs) : IsTileMaximalLeaf(lhs));
}

// 1: lhs strictly better somewhere, 2: rhs strictly better somewhere, 3: both.
int MaskStrictlyBetter(const HloSharding& lhs, const HloSharding& rhs) {
  const auto& l = lhs.tuple_elements();
  const auto& r = rhs.tuple_elements();
  int mask = 0;
  for (size_t i = 0; i < l.size() && i < r.size(); ++i) {
    if (IsManualLeaf(l[i]) && IsTileMaximalLeaf(r[i])) mask |= 1;
    if (IsManualLeaf(r[i]) && IsTileMaximalLeaf(l[i])) mask |= 2;
    if (mask == 3) break;
  }
  return mask;
}
}  // namespace

bool IsShardingMoreSpecific(const HloSharding& lhs, const HloSharding& rhs) {
  if (lhs.IsTuple() != rhs.IsTuple()) return false;
  if (lhs.IsTuple()) {
    const auto& l = lhs.tuple_elements();
    const auto& r = rhs.tuple_elements();
    if (l.size() != r.size()) return false;
    bool better = false;
    for (size_t i = 0; i < l.size(); ++i) {
      if (IsShardingMoreSpecific(r[i], l[i])) return false;
      if (IsShardingMoreSpecific(l[i], r[i])) better = true;
    }
    return better;
  }
  return IsLeafShardingMoreSpecific(lhs, rhs);
}

bool IsShardingStrictlyBetter(const HloSharding& lhs, const HloSharding& rhs) {
  if (lhs.IsTuple() != rhs.IsTuple()) return false;
  if (lhs.IsTuple()) return MaskStrictlyBetter(lhs, rhs) == 1;
  return IsManualLeaf(lhs) && IsTileMaximalLeaf(rhs);
}

bool ShardWithin(int64_t full, int64_t sub_offset, int64_t sub_size, int64_t offset, int64_t size) {
  const int64_t sub_end = std::min(sub_offset + sub_size, full);
  if (sub_end <= sub_offset) return true;  // entirely padding
  return sub_offset >= offset && sub_end <= std::min(offset + size, full);
}

namespace {
// IsSubTilingOrEqualSharding's test itself, device by device (the shardings are tiled over the
// shape's rank).
bool IsSubTilingPerDevice(const Shape& shape, const HloSharding& sub, const HloSharding& sharding) {
  const int64_t rank = sub.TiledDataRank();
  std::vector<int64_t> sub_base(static_cast<size_t>(rank)), base(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t p = sub.tile_assignment().dim(i);
    const int64_t q = sharding.tile_assignment().dim(i);
    if (p < q) return false;
    sub_base[static_cast<size_t>(i)] = CeilDiv(shape.dim(i), p);
    base[static_cast<size_t>(i)] = CeilDiv(shape.dim(i), q);
  }
  // Offsets of every device's tile under `sharding`.
  const auto& sdims = sharding.tile_assignment().dims();
  const auto& sdev = sharding.tile_assignment().devices();
  const auto& pdims = sub.tile_assignment().dims();
  const auto& pdev = sub.tile_assignment().devices();
  int64_t max_id = -1;
  bool dense = true;
  for (int64_t d : sdev) {
    if (d < 0) dense = false;
    max_id = std::max(max_id, d);
  }
  if (dense && max_id < 4 * static_cast<int64_t>(sdev.size()) + 1024) {
    // Device ids index flat tables (thousands of devices: no map of small vectors), and the tile
    // indices advance as odometers.
    const size_t r = static_cast<size_t>(rank);
    std::vector<int64_t> offset(static_cast<size_t>(max_id + 1) * r, 0);
    std::vector<char> has(static_cast<size_t>(max_id + 1), 0);
    std::vector<int64_t> at(sdims.size(), 0);
    for (size_t f = 0; f < sdev.size(); ++f, NextIndex(sdims, &at)) {
      const size_t d = static_cast<size_t>(sdev[f]);
      has[d] = 1;
      for (size_t j = 0; j < r; ++j) offset[d * r + j] = base[j] * at[j];
    }
    at.assign(pdims.size(), 0);
    for (size_t f = 0; f < pdev.size(); ++f, NextIndex(pdims, &at)) {
      const int64_t d = pdev[f];
      if (d < 0 || d > max_id || !has[static_cast<size_t>(d)]) return false;
      const int64_t* o = &offset[static_cast<size_t>(d) * r];
      for (size_t j = 0; j < r; ++j)
        if (!ShardWithin(shape.dim(static_cast<int64_t>(j)), sub_base[j] * at[j], sub_base[j], o[j], base[j])) return false;
    }
    return true;
  }
  std::unordered_map<int64_t, std::vector<int64_t>> offsets;
  offsets.reserve(sdev.size());
  std::vector<int64_t> idx;
  for (size_t f = 0; f < sdev.size(); ++f) {
    Unflatten(static_cast<int64_t>(f), sdims, &idx);
    auto& o = offsets[sdev[f]];
    o.resize(static_cast<size_t>(rank));
    for (int64_t j = 0; j < rank; ++j) o[static_cast<size_t>(j)] = base[static_cast<size_t>(j)] * idx[static_cast<size_t>(j)];
  }
  for (size_t f = 0; f < pdev.size(); ++f) {
    auto it = offsets.find(pdev[f]);
    if (it == offsets.end()) return false;
    Unflatten(static_cast<int64_t>(f), pdims, &idx);
    for (int64_t j = 0; j < rank; ++j) {
      const size_t uj = static_cast<size_t>(j);
      if (!ShardWithin(shape.dim(j), sub_base[uj] * idx[uj], sub_base[uj], it->second[uj], base[uj])) return false;
    }
  }
  return true;
}

}  // namespace

bool IsSubTilingOrEqualSharding(const Shape& shape, const HloSharding& sub, const HloSharding& sharding) {
  if (sub.IsManual() || sharding.IsManual()) return false;
  if (IsTileMaximal(sharding)) return true;
  if (IsTileMaximal(sub)) return false;
  const int64_t rank = sub.TiledDataRank();
  if (rank != sharding.TiledDataRank() || rank != shape.rank()) return false;
  // A pure function of the shardings and the dims: memoised (ThreadMemo) when both tile
  // assignments are iota forms, whose keys are a few numbers (an explicit one's holds every device).
  std::string key;
  if (sub.tile_assignment().is_iota() && sharding.tile_assignment().is_iota()) {
    AppendShardingKey(key, sub);
    key += '|';
    AppendShardingKey(key, sharding);
    key.append(reinterpret_cast<const char*>(shape.dims.data()), shape.dims.size() * sizeof(int64_t));
    if (const bool* known = ThreadMemo<bool, kSubTilingMemo>::Find(key)) return *known;
    const bool answer = IsSubTilingPerDevice(shape, sub, sharding);
    ThreadMemo<bool, kSubTilingMemo>::Add(key) = answer;
    return answer;
  }
  return IsSubTilingPerDevice(shape, sub, sharding);
}

// ---- Construction -------------------------------------------------------------------------------

TileAssignment Plain(const TileAssignment& t) {
  return t.is_iota() ? TileAssignment::Explicit(t.dims(), t.devices()) : t;
}

HloSharding WithIotaForm(const HloSharding& s, IotaCache* cache) {
  if (s.IsTuple()) {
    std::vector<HloSharding> elements;
    elements.reserve(s.tuple_elements().size());
    bool changed = false;
    for (const auto& e : s.tuple_elements()) {
      elements.push_back(WithIotaForm(e, cache));
      changed |= elements.back().tile_assignment().is_iota() != e.tile_assignment().is_iota();
    }
    if (!changed) return s;
    HloSharding out = HloSharding::Tuple(std::move(elements));
    out.set_metadata(s.metadata());
    return out;
  }
  if (!s.IsTiled() || s.tile_assignment().is_iota()) return s;
  const auto& devices = s.tile_assignment().devices();
  std::optional<IotaForm> form;
  if (cache != nullptr) {
    auto it = cache->find(devices);
    if (it == cache->end()) it = cache->emplace(devices, DetectIota(devices)).first;
    form = it->second;
  } else {
    form = DetectIota(devices);
  }
  if (!form) return s;
  HloSharding out = MakeSubgroup(TileAssignment::Iota(s.tile_assignment().dims(), form->reshape_dims, form->perm),
                                 s.subgroup_types());
  out.set_metadata(s.metadata());
  return out;
}

HloSharding MakeSubgroup(const TileAssignment& tiles, const std::vector<SubgroupType>& types) {
  if (types.empty()) return HloSharding::Tile(tiles);
  return HloSharding::Subgroup(tiles, types);
}

HloSharding MakePartialTile(const TileAssignment& tiles) {
  return HloSharding::Subgroup(tiles, {SubgroupType::kReplicated});
}

HloSharding WithTiles(const HloSharding& s, const TileAssignment& tiles) {
  return MakeSubgroup(tiles, s.subgroup_types());
}

HloSharding StripDecorations(HloSharding s) {
  if (s.IsTuple()) {
    std::vector<HloSharding> elements;
    elements.reserve(s.tuple_elements().size());
    for (const auto& e : s.tuple_elements()) elements.push_back(StripDecorations(e));
    return HloSharding::Tuple(std::move(elements));
  }
  if (s.shard_group_id()) s.set_shard_group(std::nullopt, false);
  if (!s.open_dims().empty()) s.set_open_dims({});
  return s;
}

// ---- Merging ------------------------------------------------------------------------------------

namespace {
// For each device of a tiled sharding: the key of its "replication group" — its data tile index
// (and manual subgroup index), linearised.
struct GroupKeys {
  std::vector<int64_t> key_of_device;  // dense by device id, -1 when absent
  std::vector<std::vector<int64_t>> members;  // key -> devices (in assignment order)
};

GroupKeys ComputeGroupKeys(const HloSharding& s, int64_t manual_dim, int64_t max_device) {
  GroupKeys g;
  const auto& dims = s.tile_assignment().dims();
  const auto& devices = s.tile_assignment().devices();
  const int64_t data_rank = s.TiledDataRank();
  int64_t num_groups = Product(dims, 0, static_cast<size_t>(data_rank));
  if (manual_dim >= 0) num_groups *= dims[static_cast<size_t>(manual_dim)];
  g.members.resize(static_cast<size_t>(num_groups));
  g.key_of_device.assign(static_cast<size_t>(max_device + 1), -1);
  std::vector<int64_t> idx(dims.size(), 0);
  for (size_t f = 0; f < devices.size(); ++f, NextIndex(dims, &idx)) {
    int64_t key = 0;
    for (int64_t i = 0; i < data_rank; ++i) key = key * dims[static_cast<size_t>(i)] + idx[static_cast<size_t>(i)];
    if (manual_dim >= 0) key = key * dims[static_cast<size_t>(manual_dim)] + idx[static_cast<size_t>(manual_dim)];
    g.members[static_cast<size_t>(key)].push_back(devices[f]);
    if (devices[f] >= 0 && devices[f] <= max_device) g.key_of_device[static_cast<size_t>(devices[f])] = key;
  }
  return g;
}
}  // namespace

void AppendShardingKey(std::string& k, const HloSharding& s) {
  k += static_cast<char>('A' + static_cast<int>(s.kind()));
  if (s.IsTuple()) {
    k += '(';
    for (const auto& e : s.tuple_elements()) AppendShardingKey(k, e);
    k += ')';
    return;
  }
  if (s.IsMaximal()) k += std::to_string(s.maximal_device());
  if (!s.IsTiled()) return;
  for (auto t : s.subgroup_types()) k += static_cast<char>('a' + static_cast<int>(t));
  const TileAssignment& ta = s.tile_assignment();
  auto append_ints = [&k](const std::vector<int64_t>& v) {
    k += static_cast<char>(v.size());
    k.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  };
  if (ta.is_iota()) {
    // "[dims]<=[reshape]T(perm)" determines every device: a few bytes instead of all the ids (as
    // raw integers, each list after its length, like the explicit form below).
    k += 'I';
    append_ints(ta.dims());
    append_ints(ta.iota_reshape_dims());
    append_ints(ta.iota_perm());
    return;
  }
  k += 'E';
  const auto& dims = ta.dims();
  append_ints(dims);
  const auto& devs = ta.devices();
  k.append(reinterpret_cast<const char*>(devs.data()), devs.size() * sizeof(int64_t));
}

std::string ShardingKey(const HloSharding& s) {
  std::string k;
  AppendShardingKey(k, s);
  return k;
}

bool MergeShardingIfCompatible(const HloSharding& to_merge, int64_t minimum_tiles, HloSharding* dst) {
  if (to_merge.IsTuple() || dst->IsTuple() || to_merge.IsManual() || dst->IsManual()) return false;
  if (IsTileMaximal(to_merge)) return false;
  if (IsTileMaximal(*dst)) {
    *dst = to_merge;
    return true;
  }
  if (!dst->HasPartialReplication()) return false;
  const int64_t data_rank = to_merge.TiledDataRank();
  if (dst->TiledDataRank() != data_rank) return false;
  const int64_t merge_man = SubgroupManualDim(to_merge);
  const int64_t dst_man = SubgroupManualDim(*dst);
  if ((merge_man >= 0) != (dst_man >= 0)) return false;
  const auto& mt = to_merge.tile_assignment();
  const auto& dt = dst->tile_assignment();
  if (mt.num_elements() != dt.num_elements()) return false;
  std::vector<int64_t> merged_dims;
  merged_dims.reserve(static_cast<size_t>(data_rank) + 2);
  for (int64_t i = 0; i < data_rank; ++i) {
    const int64_t m = mt.dim(i), d = dt.dim(i);
    if (m == d || d == 1) {
      merged_dims.push_back(m);
    } else if (m == 1) {
      merged_dims.push_back(d);
    } else {
      return false;
    }
  }
  const int64_t num_devices = mt.num_elements();
  const int64_t new_tiles = Product(merged_dims);
  if (new_tiles <= 0 || num_devices % new_tiles != 0 || new_tiles < minimum_tiles) return false;
  int64_t manual_size = 1;
  if (merge_man >= 0) {
    manual_size = mt.dim(merge_man);
    if (manual_size != dt.dim(dst_man)) return false;
    if (num_devices % (new_tiles * manual_size) != 0) return false;
  }
  const int64_t replication = num_devices / (new_tiles * manual_size);

  auto metadata = dst->metadata();
  for (const auto& m : to_merge.metadata()) {
    if (std::none_of(metadata.begin(), metadata.end(), [&](const ShardingMetadata& x) { return x.text == m.text; })) {
      metadata.push_back(m);
    }
  }
  // The merge is a pure function of the two shardings (metadata aside): memoised (ThreadMemo).
  using Memo = ThreadMemo<std::optional<HloSharding>, kMergeMemo>;
  std::string key;
  AppendShardingKey(key, to_merge);
  key += '|';
  AppendShardingKey(key, *dst);
  if (const std::optional<HloSharding>* known = Memo::Find(key)) {
    if (!*known) return false;
    *dst = **known;
    dst->set_metadata(std::move(metadata));
    return true;
  }
  std::optional<HloSharding>& answer = Memo::Add(key);

  int64_t max_device = 0;
  for (int64_t d : mt.devices()) max_device = std::max(max_device, d);
  for (int64_t d : dt.devices()) max_device = std::max(max_device, d);
  if (max_device > (int64_t{1} << 24)) return false;
  GroupKeys mg = ComputeGroupKeys(to_merge, merge_man, max_device);
  GroupKeys dg = ComputeGroupKeys(*dst, dst_man, max_device);

  // Each merged tile (data index + manual index) holds exactly the devices that are in the matching
  // replication group of both shardings; compatibility means every such intersection has exactly
  // `replication` devices.
  std::vector<int64_t> cell_dims = merged_dims;
  if (merge_man >= 0) cell_dims.push_back(manual_size);
  const int64_t num_cells = Product(cell_dims);
  std::vector<int64_t> devices;
  devices.reserve(static_cast<size_t>(num_devices));
  std::vector<int64_t> idx(cell_dims.size(), 0), bucket;
  for (int64_t c = 0; c < num_cells; ++c, NextIndex(cell_dims, &idx)) {
    int64_t mkey = 0, dkey = 0;
    for (int64_t i = 0; i < data_rank; ++i) {
      const size_t ui = static_cast<size_t>(i);
      const int64_t mdim = mt.dim(i), ddim = dt.dim(i);
      mkey = mkey * mdim + (mdim == 1 ? 0 : idx[ui]);
      dkey = dkey * ddim + (ddim == 1 ? 0 : idx[ui]);
    }
    if (merge_man >= 0) {
      mkey = mkey * manual_size + idx.back();
      dkey = dkey * manual_size + idx.back();
    }
    bucket.clear();
    for (int64_t d : dg.members[static_cast<size_t>(dkey)]) {
      if (mg.key_of_device[static_cast<size_t>(d)] == mkey) bucket.push_back(d);
    }
    if (static_cast<int64_t>(bucket.size()) != replication) return false;
    std::sort(bucket.begin(), bucket.end());
    devices.insert(devices.end(), bucket.begin(), bucket.end());
  }
  std::vector<int64_t> tile_dims = cell_dims;
  std::vector<SubgroupType> types;
  if (merge_man >= 0) types.push_back(SubgroupType::kManual);
  if (replication > 1) {
    tile_dims.push_back(replication);
    types.push_back(SubgroupType::kReplicated);
  }
  TileAssignment ta = TileAssignment::Explicit(tile_dims, std::move(devices));
  // In iota form when it is one (then transposing or sorting it later never lists its devices).
  *dst = WithIotaForm(MakeSubgroup(ta, types));
  answer = *dst;
  dst->set_metadata(std::move(metadata));
  return true;
}

bool MergeShardingIfCompatible(const HloSharding& to_merge, HloSharding* dst) {
  return MergeShardingIfCompatible(to_merge, dst->NumTiles() + 1, dst);
}

bool MergeSharding(const HloSharding& to_merge, HloSharding* dst, bool may_combine_partial_sharding) {
  if (to_merge.IsTuple()) {
    if (!dst->IsTuple()) return false;
    auto& d = dst->mutable_tuple_elements();
    const auto& m = to_merge.tuple_elements();
    bool changed = false;
    for (size_t i = 0; i < m.size() && i < d.size(); ++i) changed |= MergeSharding(m[i], &d[i], may_combine_partial_sharding);
    return changed;
  }
  if (dst->IsTuple()) return false;
  if (may_combine_partial_sharding && to_merge.HasPartialReplication() && dst->HasPartialReplication() &&
      to_merge.tile_assignment().num_elements() == dst->tile_assignment().num_elements()) {
    if (MergeShardingIfCompatible(to_merge, std::max(to_merge.NumTiles(), dst->NumTiles()) + 1, dst)) {
      return true;
    }
  }
  return IsLeafShardingMoreSpecific(*dst, to_merge);
}

HloSharding FindCommonSharding(const std::vector<HloSharding>& shardings,
                               std::optional<HloSharding> default_sharding) {
  if (shardings.empty()) return default_sharding.value_or(HloSharding::Replicate());
  HloSharding common = shardings[0];
  for (size_t i = 1; i < shardings.size(); ++i) {
    if (common == shardings[i]) continue;
    if (!MergeShardingIfCompatible(shardings[i], common.NumTiles(), &common)) {
      return default_sharding ? *default_sharding : shardings[0];
    }
  }
  return common;
}

std::optional<HloSharding> ReturnImprovedSharding(HloSharding from, const HloSharding* current,
                                                  const Shape& shape, bool may_combine_partial_sharding,
                                                  bool allow_aggressive_resharding) {
  if (current != nullptr && IsShardingStrictlyBetter(from, *current)) return from;
  if (!IsSpatiallyPartitioned(from)) return std::nullopt;
  if (current == nullptr) return from;
  if (from.IsManual()) return std::nullopt;
  if (from.IsTuple() != current->IsTuple()) {
    // A whole-tuple sharding offered for (or held by) a tuple value: compare leaf by leaf.
    if (shape.IsTuple()) {
      HloSharding f = ToTupleForm(from, shape);
      HloSharding c = ToTupleForm(*current, shape);
      return ReturnImprovedSharding(std::move(f), &c, shape, may_combine_partial_sharding,
                                    allow_aggressive_resharding);
    }
    return std::nullopt;
  }
  if (from.IsTuple() && from.tuple_elements().size() != current->tuple_elements().size()) return std::nullopt;
  const int64_t tiles_before = from.NumTiles();
  if (MergeSharding(*current, &from, may_combine_partial_sharding)) {
    if (!allow_aggressive_resharding && shape.IsArray() && !IsTileMaximal(*current) &&
        from.NumTiles() == tiles_before) {
      if (!IsSubTilingOrEqualSharding(shape, from, *current)) return std::nullopt;
    }
    return from;
  }
  return std::nullopt;
}

// ---- Dimension transforms -----------------------------------------------------------------------

HloSharding TransposeSharding(const HloSharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return s;
  std::vector<int64_t> perm = dims;
  const int64_t data_rank = s.TiledDataRank();
  const int64_t ndims = s.tile_assignment().num_dimensions();
  if (static_cast<int64_t>(perm.size()) == data_rank) {
    for (int64_t i = data_rank; i < ndims; ++i) perm.push_back(i);
  } else if (static_cast<int64_t>(perm.size()) != ndims) {
    return s;
  }
  TileAssignment ta = s.tile_assignment().Transpose(perm);
  if (ReplicateOnLastTileDim(s)) {
    HloSharding out = MakePartialTile(ta);
    out.set_metadata(s.metadata());
    return out;
  }
  std::vector<SubgroupType> types;
  for (int64_t i = data_rank; i < ndims; ++i) {
    const int64_t src = perm[static_cast<size_t>(i)] - data_rank;
    if (src < 0 || src >= static_cast<int64_t>(s.subgroup_types().size())) return s;
    types.push_back(s.subgroup_types()[static_cast<size_t>(src)]);
  }
  HloSharding out = MakeSubgroup(ta, types);
  out.set_metadata(s.metadata());
  return out;
}

std::optional<HloSharding> ReshapeSharding(const Shape& source, const Shape& target, const HloSharding& s) {
  if (!s.IsTiled()) return s;
  if (s.IsTuple() || s.TiledDataRank() != source.rank()) return std::nullopt;
  const int64_t source_rank = source.rank();
  std::vector<int64_t> target_tiles;
  std::vector<int64_t> src_stack(source.dims.rbegin(), source.dims.rend());
  std::vector<int64_t> tgt_stack(target.dims.rbegin(), target.dims.rend());
  std::vector<int64_t> tile_stack(s.tile_assignment().dims().begin(),
                                  s.tile_assignment().dims().begin() + source_rank);
  std::reverse(tile_stack.begin(), tile_stack.end());
  int64_t source_index = -1;
  std::vector<int64_t> dims_to_replicate;
  auto push_source = [&](int64_t size, int64_t parts) {
    src_stack.push_back(size);
    tile_stack.push_back(parts);
    --source_index;
  };
  auto pop_source = [&]() {
    src_stack.pop_back();
    tile_stack.pop_back();
    ++source_index;
  };
  bool in_place = false;
  auto append = [&](int64_t size) {
    if (in_place && !target_tiles.empty()) {
      target_tiles.back() *= size;
    } else {
      target_tiles.push_back(size);
    }
    in_place = false;
  };
  while (!src_stack.empty() && !tgt_stack.empty() && Product(tile_stack) != 1) {
    int64_t product = 1;
    while (!tile_stack.empty() && tile_stack.back() == 1) {
      product *= src_stack.back();
      pop_source();
    }
    while (!tgt_stack.empty() && tgt_stack.back() > 1 && product % tgt_stack.back() == 0) {
      product /= tgt_stack.back();
      tgt_stack.pop_back();
      append(1);
    }
    if (product != 1) push_source(product, 1);
    if (src_stack.empty() || tgt_stack.empty()) break;
    const int64_t s_size = src_stack.back();
    const int64_t s_parts = tile_stack.back();
    pop_source();
    const int64_t t_size = tgt_stack.back();
    tgt_stack.pop_back();
    if (s_size == t_size) {
      append(s_parts);
    } else if (t_size == 1) {
      append(1);
      push_source(s_size, s_parts);
    } else if (s_size == 1) {
      tgt_stack.push_back(t_size);
      if (s_parts > 1) dims_to_replicate.push_back(source_index);
    } else if (s_parts == 1) {
      if (!src_stack.empty() && tile_stack.back() == 1) {
        src_stack.back() *= s_size;
      } else {
        break;
      }
    } else if (s_size % s_parts != 0) {
      return std::nullopt;
    } else {
      const int64_t g = std::gcd(s_parts, t_size);
      if (g == 1) break;
      push_source(s_size / g, s_parts / g);
      tgt_stack.push_back(t_size / g);
      append(g);
      in_place = true;
    }
  }
  if (Product(target_tiles) == 1) return std::nullopt;
  while (static_cast<int64_t>(target_tiles.size()) < target.rank()) target_tiles.push_back(1);
  if (static_cast<int64_t>(target_tiles.size()) > target.rank()) return std::nullopt;
  const HloSharding sharding =
      dims_to_replicate.empty() ? s : PartiallyReplicateTiledShardingOnDims(s, dims_to_replicate);
  if (IsTileMaximal(sharding)) return std::nullopt;
  const int64_t rep_dim = SubgroupReplicationDim(sharding);
  for (int64_t i = sharding.TiledDataRank(); i < sharding.tile_assignment().num_dimensions(); ++i) {
    target_tiles.push_back(i == rep_dim ? 1 : sharding.tile_assignment().dim(i));
  }
  std::vector<SubgroupType> types = sharding.subgroup_types();
  const int64_t total = sharding.tile_assignment().num_elements();
  const int64_t product = Product(target_tiles);
  if (product <= 0 || total % product != 0) return std::nullopt;
  const int64_t quot = total / product;
  if (quot > 1) {
    if (rep_dim >= 0) {
      target_tiles[static_cast<size_t>(rep_dim - sharding.TiledDataRank() + target.rank())] = quot;
    } else {
      target_tiles.push_back(quot);
      types.push_back(SubgroupType::kReplicated);
    }
  }
  HloSharding out = MakeSubgroup(sharding.tile_assignment().Reshape(target_tiles), types);
  out.set_metadata(s.metadata());
  return out;
}

namespace {
// Applies a sharding over "local ids" (0..G-1, one per member of a device group) to every group of
// devices, inserting a manual subgroup dim of size groups.size() at tile dim `manual_pos`.
HloSharding UngroupManual(const HloSharding& local, int64_t data_rank, int64_t manual_subgroup_index,
                          const std::vector<std::vector<int64_t>>& groups) {
  const int64_t group_size = groups.empty() ? 0 : static_cast<int64_t>(groups[0].size());
  std::vector<int64_t> local_dims;
  std::vector<int64_t> local_devices;
  std::vector<SubgroupType> local_types;
  if (local.IsTiled()) {
    local_dims = local.tile_assignment().dims();
    local_devices = local.tile_assignment().devices();
    local_types = local.subgroup_types();
  } else {
    local_dims.assign(static_cast<size_t>(data_rank), 1);
    local_dims.push_back(group_size);
    local_devices.resize(static_cast<size_t>(group_size));
    std::iota(local_devices.begin(), local_devices.end(), 0);
    local_types = {SubgroupType::kReplicated};
  }
  const int64_t local_data_rank = static_cast<int64_t>(local_dims.size() - local_types.size());
  const int64_t pos = local_data_rank + std::min<int64_t>(manual_subgroup_index, static_cast<int64_t>(local_types.size()));
  std::vector<int64_t> dims = local_dims;
  dims.insert(dims.begin() + pos, static_cast<int64_t>(groups.size()));
  std::vector<SubgroupType> types = local_types;
  types.insert(types.begin() + (pos - local_data_rank), SubgroupType::kManual);
  const int64_t total = Product(dims);
  std::vector<int64_t> devices(static_cast<size_t>(total));
  std::vector<int64_t> idx, lidx;
  for (int64_t f = 0; f < total; ++f) {
    Unflatten(f, dims, &idx);
    const int64_t g = idx[static_cast<size_t>(pos)];
    lidx = idx;
    lidx.erase(lidx.begin() + pos);
    int64_t flat = 0;
    for (size_t i = 0; i < lidx.size(); ++i) flat = flat * local_dims[i] + lidx[i];
    const int64_t local_id = local_devices[static_cast<size_t>(flat)];
    devices[static_cast<size_t>(f)] = groups[static_cast<size_t>(g)][static_cast<size_t>(local_id)];
  }
  return MakeSubgroup(TileAssignment::Explicit(dims, std::move(devices)), types);
}
}  // namespace

HloSharding PropagateShardingThroughReshape(const Shape& source, const Shape& target, const HloSharding& s) {
  if (!s.IsTiled()) return s;
  if (s.IsTuple()) return HloSharding::Replicate();
  const int64_t source_rank = source.rank();
  if (s.TiledDataRank() != source_rank) return HloSharding::Replicate();
  const int64_t manual_dim = SubgroupManualDim(s);
  if (manual_dim >= 0) {
    // Group the devices by manual index; reshape the per-group sharding (over local ids) and put the
    // manual subgroup back.
    const auto& dims = s.tile_assignment().dims();
    std::vector<int64_t> perm = {manual_dim};
    for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
      if (i != manual_dim) perm.push_back(i);
    }
    TileAssignment moved = Plain(s.tile_assignment()).Transpose(perm);
    const int64_t m = dims[static_cast<size_t>(manual_dim)];
    const int64_t group_size = moved.num_elements() / m;
    std::vector<std::vector<int64_t>> groups(static_cast<size_t>(m));
    for (int64_t g = 0; g < m; ++g) {
      groups[static_cast<size_t>(g)].assign(moved.devices().begin() + g * group_size,
                                            moved.devices().begin() + (g + 1) * group_size);
    }
    std::vector<int64_t> local_dims;
    std::vector<SubgroupType> local_types;
    for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
      if (i == manual_dim) continue;
      local_dims.push_back(dims[static_cast<size_t>(i)]);
      if (i >= source_rank) local_types.push_back(s.subgroup_types()[static_cast<size_t>(i - source_rank)]);
    }
    HloSharding local = MakeSubgroup(TileAssignment::Iota(local_dims), local_types);
    HloSharding reshaped = PropagateShardingThroughReshape(source, target, local);
    HloSharding out = UngroupManual(reshaped, target.rank(), manual_dim - source_rank, groups);
    out.set_metadata(s.metadata());
    return out;
  }
  HloSharding result = HloSharding::Replicate();
  int64_t start = 0;
  while (start < source_rank) {
    bool found = false;
    for (int64_t end = source_rank; end > start; --end) {
      std::vector<int64_t> grouped(static_cast<size_t>(source_rank), 1);
      for (int64_t i = start; i < end; ++i) grouped[static_cast<size_t>(i)] = s.tile_assignment().dim(i);
      if (Product(grouped) == 1) continue;
      HloSharding grouped_sharding = HloSharding::Tile(TileAssignment::Iota(grouped));
      auto reshaped = ReshapeSharding(source, target, grouped_sharding);
      if (!reshaped || !reshaped->IsTiled()) continue;
      std::vector<int64_t> perm;
      for (int64_t i = start; i < end; ++i) perm.push_back(i);
      for (int64_t i = 0; i < start; ++i) perm.push_back(i);
      for (int64_t i = end; i < s.tile_assignment().num_dimensions(); ++i) perm.push_back(i);
      std::vector<int64_t> reshape_dims = reshaped->tile_assignment().dims();
      const int64_t prod = Product(reshape_dims);
      if (prod <= 0 || s.tile_assignment().num_elements() % prod != 0) continue;
      const int64_t replicated = s.tile_assignment().num_elements() / prod;
      const int64_t diff = static_cast<int64_t>(reshape_dims.size()) - target.rank();
      if (diff == 0) {
        reshape_dims.push_back(replicated);
      } else if (diff == 1) {
        reshape_dims.back() *= replicated;
      } else {
        continue;
      }
      HloSharding ungrouped = MakePartialTile(s.tile_assignment().Transpose(perm).Reshape(reshape_dims));
      if (MergeShardingIfCompatible(ungrouped, &result)) {
        start = end;
        found = true;
        break;
      }
    }
    if (!found) ++start;
  }
  result.set_metadata(s.metadata());
  return result;
}

HloSharding ReverseSharding(const HloSharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled() || dims.empty()) return s;
  const auto& tdims = s.tile_assignment().dims();
  const auto& src = s.tile_assignment().devices();
  std::vector<int64_t> devices(src.size());
  std::vector<int64_t> idx;
  for (size_t f = 0; f < src.size(); ++f) {
    Unflatten(static_cast<int64_t>(f), tdims, &idx);
    for (int64_t d : dims) {
      if (d >= 0 && d < static_cast<int64_t>(idx.size())) {
        idx[static_cast<size_t>(d)] = tdims[static_cast<size_t>(d)] - 1 - idx[static_cast<size_t>(d)];
      }
    }
    int64_t flat = 0;
    for (size_t i = 0; i < idx.size(); ++i) flat = flat * tdims[i] + idx[i];
    devices[f] = src[static_cast<size_t>(flat)];
  }
  HloSharding out = MakeSubgroup(TileAssignment::Explicit(tdims, std::move(devices)), s.subgroup_types());
  out.set_metadata(s.metadata());
  return out;
}

HloSharding PartiallyReplicateTiledShardingOnDims(const HloSharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return s;
  const int64_t data_rank = s.TiledDataRank();
  int64_t group_count = 1;
  std::vector<int64_t> valid;
  for (int64_t d : dims) {
    if (d < 0 || d >= data_rank || Contains(valid, d)) continue;
    valid.push_back(d);
    group_count *= s.tile_assignment().dim(d);
  }
  if (group_count == 1) return s;
  if (group_count == s.NumTiles() && XlaSubgroupTypes(s).empty()) {
    HloSharding r = HloSharding::Replicate();
    r.set_metadata(s.metadata());
    return r;
  }
  std::vector<int64_t> perm(static_cast<size_t>(data_rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return Contains(valid, a) < Contains(valid, b); });
  TileAssignment moved = TransposeSharding(s, perm).tile_assignment();
  std::vector<int64_t> shape = s.tile_assignment().dims();
  for (int64_t d : valid) shape[static_cast<size_t>(d)] = 1;
  HloSharding out;
  if (ReplicateOnLastTileDim(s)) {
    shape.back() *= group_count;
    out = MakePartialTile(moved.Reshape(shape));
  } else {
    shape.insert(shape.begin() + data_rank, group_count);
    std::vector<SubgroupType> types = {SubgroupType::kReplicated};
    for (SubgroupType t : s.subgroup_types()) types.push_back(t);
    out = MakeSubgroup(moved.Reshape(shape), types);
  }
  out.set_metadata(s.metadata());
  return out;
}

HloSharding PartiallyReplicateTiledShardingOnAllDimsExcept(const HloSharding& s,
                                                           const std::vector<int64_t>& dims_to_keep) {
  if (!s.IsTiled()) return s;
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < s.TiledDataRank(); ++i) {
    if (!Contains(dims_to_keep, i)) dims.push_back(i);
  }
  return PartiallyReplicateTiledShardingOnDims(s, dims);
}

HloSharding ReplicateAllDataDims(const HloSharding& s, int64_t data_rank) {
  if (s.IsManual()) return s;
  if (s.IsTuple()) {
    std::vector<HloSharding> e;
    for (const auto& x : s.tuple_elements()) e.push_back(ReplicateAllDataDims(x, -1));
    return HloSharding::Tuple(std::move(e));
  }
  if (XlaSubgroupTypes(s).empty()) {
    HloSharding r = HloSharding::Replicate();
    r.set_metadata(s.metadata());
    return r;
  }
  HloSharding result = PartiallyReplicateTiledShardingOnAllDimsExcept(s, {});
  if (data_rank >= 0 && data_rank != result.TiledDataRank() && !IsTileMaximal(result)) {
    std::vector<int64_t> shape(static_cast<size_t>(data_rank), 1);
    for (int64_t i = result.TiledDataRank(); i < result.tile_assignment().num_dimensions(); ++i) {
      shape.push_back(result.tile_assignment().dim(i));
    }
    result = MakeSubgroup(result.tile_assignment().Reshape(shape), result.subgroup_types());
  }
  return result;
}

HloSharding RemoveShapeDimensions(const HloSharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled() || dims.empty()) return s;
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < s.tile_assignment().num_dimensions(); ++i) {
    if (Contains(dims, i)) {
      if (s.tile_assignment().dim(i) != 1) return s;
    } else {
      shape.push_back(s.tile_assignment().dim(i));
    }
  }
  HloSharding out = MakeSubgroup(s.tile_assignment().Reshape(shape), s.subgroup_types());
  out.set_metadata(s.metadata());
  return out;
}

HloSharding InsertShapeDimensions(const HloSharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled() || dims.empty()) return s;
  const int64_t data_rank = s.TiledDataRank();
  const int64_t new_rank = data_rank + static_cast<int64_t>(dims.size());
  std::vector<int64_t> shape;
  int64_t next = 0;
  for (int64_t i = 0; i < new_rank; ++i) {
    if (Contains(dims, i)) {
      shape.push_back(1);
    } else {
      shape.push_back(s.tile_assignment().dim(next++));
    }
  }
  for (int64_t i = data_rank; i < s.tile_assignment().num_dimensions(); ++i) shape.push_back(s.tile_assignment().dim(i));
  HloSharding out = MakeSubgroup(s.tile_assignment().Reshape(shape), s.subgroup_types());
  out.set_metadata(s.metadata());
  return out;
}

std::optional<HloSharding> TransposeShardingWithCollapsedDims(const HloSharding& source,
                                                              std::vector<int64_t> src_to_tgt,
                                                              std::vector<int64_t> tgt_to_src) {
  if (!source.IsTiled()) return source;
  const int64_t ndims = source.tile_assignment().num_dimensions();
  if (static_cast<int64_t>(src_to_tgt.size()) < ndims) {
    const int64_t src_size = static_cast<int64_t>(src_to_tgt.size());
    const int64_t tgt_size = static_cast<int64_t>(tgt_to_src.size());
    for (int64_t i = 0; i < ndims - src_size; ++i) {
      src_to_tgt.push_back(tgt_size + i);
      tgt_to_src.push_back(src_size + i);
    }
  }
  if (static_cast<int64_t>(src_to_tgt.size()) != ndims) return std::nullopt;
  const int64_t num_sub = static_cast<int64_t>(XlaSubgroupTypes(source).size());
  const int64_t src_non_sub = static_cast<int64_t>(src_to_tgt.size()) - num_sub;
  const int64_t tgt_non_sub = static_cast<int64_t>(tgt_to_src.size()) - num_sub;
  std::vector<int64_t> tgt_skipping(tgt_to_src.size(), -1);
  int64_t skipped_tgt = 0;
  for (size_t i = 0; i < tgt_to_src.size(); ++i) {
    if (tgt_to_src[i] < 0) {
      if (static_cast<int64_t>(i) >= tgt_non_sub) return std::nullopt;
      ++skipped_tgt;
    } else {
      tgt_skipping[i] = static_cast<int64_t>(i) - skipped_tgt;
    }
  }
  int64_t skipped_src = std::count(src_to_tgt.begin(), src_to_tgt.end(), -1);
  std::vector<int64_t> perm(src_to_tgt.size(), -1);
  auto set_perm = [&](int64_t pos, int64_t value) {
    if (pos < 0 || pos >= static_cast<int64_t>(perm.size())) return false;
    perm[static_cast<size_t>(pos)] = value;
    return true;
  };
  for (int64_t i = 0; i < src_non_sub; ++i) {
    const int64_t t = src_to_tgt[static_cast<size_t>(i)];
    if (t < 0) {
      if (source.tile_assignment().dim(i) > 1) return std::nullopt;
      if (!set_perm(src_non_sub - skipped_src, i)) return std::nullopt;
      --skipped_src;
    } else {
      if (t >= static_cast<int64_t>(tgt_skipping.size()) || !set_perm(tgt_skipping[static_cast<size_t>(t)], i)) {
        return std::nullopt;
      }
    }
  }
  skipped_src = std::count(src_to_tgt.begin(), src_to_tgt.end(), -1);
  for (int64_t i = src_non_sub; i < static_cast<int64_t>(src_to_tgt.size()); ++i) {
    const int64_t t = src_to_tgt[static_cast<size_t>(i)];
    if (t < tgt_non_sub) return std::nullopt;
    if (!set_perm(t - skipped_tgt + skipped_src, i)) return std::nullopt;
  }
  if (std::find(perm.begin(), perm.end(), -1) != perm.end()) return std::nullopt;
  HloSharding tgt = TransposeSharding(source, perm);
  if (!tgt.IsTiled()) return tgt;
  std::vector<int64_t> tgt_tiles(tgt_to_src.size(), 1);
  for (size_t i = 0; i < tgt_tiles.size(); ++i) {
    if (tgt_to_src[i] >= 0) {
      int64_t dim = tgt_skipping[i];
      if (static_cast<int64_t>(i) >= tgt_non_sub) dim += skipped_src;
      if (dim < 0 || dim >= tgt.tile_assignment().num_dimensions()) return std::nullopt;
      tgt_tiles[i] = tgt.tile_assignment().dim(dim);
    }
  }
  if (Product(tgt_tiles) != tgt.tile_assignment().num_elements()) return std::nullopt;
  HloSharding out = MakeSubgroup(tgt.tile_assignment().Reshape(tgt_tiles), source.subgroup_types());
  out.set_metadata(source.metadata());
  return out;
}

HloSharding PropagateShardingAlongDimsAndReplicateOthers(const HloSharding& source,
                                                         const std::vector<int64_t>& source_dims,
                                                         const std::vector<int64_t>& target_dims,
                                                         int64_t target_rank) {
  if (!source.IsTiled()) return source;
  if (source_dims.size() != target_dims.size()) return HloSharding::Replicate();
  HloSharding rep = PartiallyReplicateTiledShardingOnAllDimsExcept(source, source_dims);
  if (IsTileMaximal(rep)) return rep;
  const auto argsort_source = ArgSort(source_dims);
  const auto argsort_target = ArgSort(target_dims);
  if (argsort_source != argsort_target) {
    std::vector<int64_t> perm;
    for (size_t i = 0; i < source_dims.size(); ++i) {
      perm.push_back(source_dims[static_cast<size_t>(argsort_target[i])]);
    }
    int64_t non_source = 0;
    for (int64_t i = static_cast<int64_t>(source_dims.size()); i < rep.tile_assignment().num_dimensions(); ++i) {
      while (Contains(source_dims, non_source)) ++non_source;
      perm.push_back(non_source++);
    }
    rep = TransposeSharding(rep, perm);
  }
  std::vector<int64_t> tiles(static_cast<size_t>(target_rank), 1);
  for (size_t i = 0; i < source_dims.size(); ++i) {
    const int64_t t = target_dims[i];
    if (t < 0 || t >= target_rank) return HloSharding::Replicate();
    tiles[static_cast<size_t>(t)] = source.tile_assignment().dim(source_dims[i]);
  }
  for (int64_t i = rep.TiledDataRank(); i < rep.tile_assignment().num_dimensions(); ++i) {
    tiles.push_back(rep.tile_assignment().dim(i));
  }
  if (Product(tiles) != rep.tile_assignment().num_elements()) return HloSharding::Replicate();
  HloSharding out = MakeSubgroup(rep.tile_assignment().Reshape(tiles), rep.subgroup_types());
  out.set_metadata(source.metadata());
  return out;
}

// ---- Tuples -------------------------------------------------------------------------------------

int64_t LeafCount(const Shape& shape) { return shape.IsTuple() ? shape.LeafCount() : 1; }

HloSharding ToTupleForm(const HloSharding& s, const Shape& shape) {
  if (!shape.IsTuple() || s.IsTuple()) return s;
  return HloSharding::Tuple(std::vector<HloSharding>(static_cast<size_t>(LeafCount(shape)), s));
}

HloSharding TupleElementSharding(const HloSharding& s, const Shape& shape, int64_t index) {
  if (!s.IsTuple()) return s;
  return s.GetSubSharding(shape, {index});
}

HloSharding SetTupleElementSharding(const HloSharding& s, const Shape& shape, int64_t index,
                                    const HloSharding& element) {
  if (!shape.IsTuple() || index < 0 || index >= static_cast<int64_t>(shape.tuple.size())) return s;
  HloSharding full = ToTupleForm(s, shape);
  auto& leaves = full.mutable_tuple_elements();
  int64_t start = 0;
  for (int64_t i = 0; i < index; ++i) start += LeafCount(shape.tuple[static_cast<size_t>(i)]);
  const Shape& sub = shape.tuple[static_cast<size_t>(index)];
  const int64_t n = LeafCount(sub);
  HloSharding e = ToTupleForm(element, sub);
  for (int64_t j = 0; j < n; ++j) {
    const size_t dst = static_cast<size_t>(start + j);
    if (dst >= leaves.size()) break;
    leaves[dst] = sub.IsTuple() ? e.tuple_elements()[static_cast<size_t>(j)] : e;
  }
  return full;
}

bool EvenlyPartitions(const Shape& shape, const HloSharding& s) {
  if (shape.IsTuple()) {
    for (size_t i = 0; i < shape.tuple.size(); ++i) {
      if (!EvenlyPartitions(shape.tuple[i], TupleElementSharding(s, shape, static_cast<int64_t>(i)))) return false;
    }
    return true;
  }
  if (s.IsTuple()) return true;
  if (!s.IsTiled()) return true;
  for (int64_t i = 0; i < shape.rank() && i < s.TiledDataRank(); ++i) {
    if (shape.dim(i) % s.tile_assignment().dim(i) != 0) return false;
  }
  return true;
}

// ---- Dot / convolution ----------------------------------------------------------------------------

DotDims ParseDotDims(const Instruction& dot) {
  DotDims d;
  const auto& dn = dot.dot_dims;
  d.lhs_rank = dot.operand(0)->shape().rank();
  d.rhs_rank = dot.operand(1)->shape().rank();
  d.output_rank = dot.shape().rank();
  for (size_t i = 0; i < dn.lhs_batch.size() && i < dn.rhs_batch.size(); ++i) {
    d.batch.push_back({dn.lhs_batch[i], dn.rhs_batch[i], static_cast<int64_t>(i), -1});
  }
  for (size_t i = 0; i < dn.lhs_contracting.size() && i < dn.rhs_contracting.size(); ++i) {
    d.contracting.push_back({dn.lhs_contracting[i], dn.rhs_contracting[i], -1, -1});
  }
  const int64_t nb = static_cast<int64_t>(dn.lhs_batch.size());
  for (int64_t i = 0; i < d.lhs_rank; ++i) {
    if (Contains(dn.lhs_batch, i) || Contains(dn.lhs_contracting, i)) continue;
    d.lhs_non_contracting.push_back({i, -1, nb + static_cast<int64_t>(d.lhs_non_contracting.size()), -1});
  }
  for (int64_t i = 0; i < d.rhs_rank; ++i) {
    if (Contains(dn.rhs_batch, i) || Contains(dn.rhs_contracting, i)) continue;
    d.rhs_non_contracting.push_back(
        {-1, i, nb + static_cast<int64_t>(d.lhs_non_contracting.size() + d.rhs_non_contracting.size()), -1});
  }
  return d;
}

DotDims ParseConvolutionDims(const Instruction& conv) {
  DotDims d;
  const auto& cd = conv.conv_dims;
  d.lhs_rank = conv.operand(0)->shape().rank();
  d.rhs_rank = conv.operand(1)->shape().rank();
  d.output_rank = conv.shape().rank();
  d.lhs_non_contracting.push_back({cd.input_batch, -1, cd.output_batch, -1});
  d.rhs_non_contracting.push_back({-1, cd.kernel_output_feature, cd.output_feature, -1});
  d.contracting.push_back({cd.input_feature, cd.kernel_input_feature, -1, -1});
  const size_t n = std::min({cd.input_spatial.size(), cd.kernel_spatial.size(), cd.output_spatial.size()});
  for (size_t i = 0; i < n; ++i) {
    const int64_t lhs = cd.input_spatial[i];
    const int64_t rhs = cd.kernel_spatial[i];
    const int64_t out = cd.output_spatial[i];
    const int64_t lhs_size = conv.operand(0)->shape().dim(lhs);
    const int64_t rhs_size = conv.operand(1)->shape().dim(rhs);
    WindowDimension wd;
    if (i < conv.window.dims.size()) wd = conv.window.dims[i];
    const DotDim dim{lhs, rhs, out, static_cast<int64_t>(i)};
    const bool batch_unpadded =
        lhs_size == wd.size && lhs_size == wd.base_dilation &&
        ((std::max<int64_t>(1, lhs_size - 1) == wd.stride && wd.window_dilation == 1) ||
         (std::max<int64_t>(1, lhs_size - 1) == wd.window_dilation && wd.stride == 1)) &&
        wd.padding_high == 0 && wd.padding_low == 0 && !wd.window_reversal;
    const bool batch_padded = lhs_size == wd.size && wd.padding_high == lhs_size - 1 &&
                              wd.padding_low == lhs_size - 1 && wd.window_reversal && wd.window_dilation == 1 &&
                              wd.stride == lhs_size && wd.base_dilation == lhs_size - 1;
    if (batch_unpadded || batch_padded) {
      d.batch.push_back(dim);
    } else if (lhs_size == wd.size && wd.base_dilation == 1 && wd.window_dilation == 1 && wd.padding_high == 0 &&
               wd.padding_low == 0 && !wd.window_reversal) {
      d.contracting.push_back(dim);
    } else if (wd.stride == 1 && wd.window_dilation == 1 && wd.base_dilation == 1) {
      if (rhs_size == 1 && wd.size == 1 && wd.padding_high == 0 && wd.padding_low == 0 && !wd.window_reversal) {
        d.lhs_non_contracting.push_back(dim);
      } else if (lhs_size == 1 && wd.size == rhs_size && wd.padding_high == rhs_size - 1 &&
                 wd.padding_low == rhs_size - 1 && wd.window_reversal) {
        d.rhs_non_contracting.push_back(dim);
      } else {
        d.conv_spatial.push_back(dim);
      }
    } else {
      d.conv_spatial.push_back(dim);
    }
  }
  return d;
}

HloSharding DotShardingFromOperand(const HloSharding& operand_sharding, const DotDims& dims, int operand_index) {
  if (!operand_sharding.IsTiled()) return operand_sharding;
  const bool lhs = operand_index == 0;
  std::vector<int64_t> contracting;
  for (const auto& c : dims.contracting) contracting.push_back(lhs ? c.lhs : c.rhs);
  for (const auto& d : lhs ? dims.rhs_non_contracting : dims.lhs_non_contracting) {
    const int64_t x = lhs ? d.lhs : d.rhs;
    if (x >= 0) contracting.push_back(x);
  }
  HloSharding rep = PartiallyReplicateTiledShardingOnDims(operand_sharding, contracting);
  const int64_t op_rank = lhs ? dims.lhs_rank : dims.rhs_rank;
  std::vector<int64_t> out_to_op(static_cast<size_t>(dims.output_rank), -1);
  std::vector<int64_t> op_to_out(static_cast<size_t>(op_rank), -1);
  auto map = [&](const DotDim& d) {
    const int64_t x = lhs ? d.lhs : d.rhs;
    if (x < 0 || d.output < 0 || x >= op_rank || d.output >= dims.output_rank) return;
    out_to_op[static_cast<size_t>(d.output)] = x;
    op_to_out[static_cast<size_t>(x)] = d.output;
  };
  for (const auto& b : dims.batch) map(b);
  for (const auto& d : lhs ? dims.lhs_non_contracting : dims.rhs_non_contracting) map(d);
  auto out = TransposeShardingWithCollapsedDims(rep, op_to_out, out_to_op);
  return out ? *out : ReplicateAllDataDims(rep, dims.output_rank);
}

HloSharding InferDotOperandSharding(const HloSharding* dot_sharding, const HloSharding* other_sharding,
                                    int operand_index, const DotDims& dims, bool may_combine_partial) {
  const bool lhs = operand_index == 0;
  std::vector<int64_t> output_dims_to_replicate;
  std::vector<int64_t> other_dims_to_replicate;
  for (const auto& d : lhs ? dims.rhs_non_contracting : dims.lhs_non_contracting) {
    output_dims_to_replicate.push_back(d.output);
    other_dims_to_replicate.push_back(lhs ? d.rhs : d.lhs);
  }
  for (const auto& c : dims.contracting) {
    if (c.output >= 0) output_dims_to_replicate.push_back(c.output);
  }
  for (const auto& d : lhs ? dims.lhs_non_contracting : dims.rhs_non_contracting) {
    const int64_t other = lhs ? d.rhs : d.lhs;
    if (other >= 0) other_dims_to_replicate.push_back(other);
  }
  const int64_t op_rank = lhs ? dims.lhs_rank : dims.rhs_rank;
  const int64_t other_rank = lhs ? dims.rhs_rank : dims.lhs_rank;
  HloSharding sharding = HloSharding::Replicate();
  if (dot_sharding != nullptr) {
    HloSharding rep = PartiallyReplicateTiledShardingOnDims(*dot_sharding, output_dims_to_replicate);
    std::vector<int64_t> out_to_op(static_cast<size_t>(dims.output_rank), -1);
    std::vector<int64_t> op_to_out(static_cast<size_t>(op_rank), -1);
    auto map = [&](const DotDim& d) {
      const int64_t x = lhs ? d.lhs : d.rhs;
      if (x < 0 || d.output < 0 || x >= op_rank || d.output >= dims.output_rank) return;
      out_to_op[static_cast<size_t>(d.output)] = x;
      op_to_out[static_cast<size_t>(x)] = d.output;
    };
    for (const auto& b : dims.batch) map(b);
    for (const auto& d : lhs ? dims.lhs_non_contracting : dims.rhs_non_contracting) map(d);
    auto t = TransposeShardingWithCollapsedDims(rep, out_to_op, op_to_out);
    sharding = t ? *t : ReplicateAllDataDims(rep, op_rank);
  }
  if (other_sharding != nullptr && IsSpatiallyPartitioned(*other_sharding)) {
    HloSharding other_rep = PartiallyReplicateTiledShardingOnDims(*other_sharding, other_dims_to_replicate);
    std::vector<int64_t> other_to_op(static_cast<size_t>(other_rank), -1);
    std::vector<int64_t> op_to_other(static_cast<size_t>(op_rank), -1);
    auto map = [&](const DotDim& d) {
      const int64_t x = lhs ? d.lhs : d.rhs;
      const int64_t o = lhs ? d.rhs : d.lhs;
      if (x < 0 || o < 0 || x >= op_rank || o >= other_rank) return;
      other_to_op[static_cast<size_t>(o)] = x;
      op_to_other[static_cast<size_t>(x)] = o;
    };
    for (const auto& b : dims.batch) map(b);
    for (const auto& c : dims.contracting) map(c);
    auto from_other = TransposeShardingWithCollapsedDims(other_rep, other_to_op, op_to_other);
    if (from_other) {
      HloSharding candidate = *from_other;
      if (MergeSharding(sharding, &candidate, may_combine_partial)) sharding = std::move(candidate);
    }
  }
  return sharding;
}

namespace {
void AppendDotDimsKey(std::string& k, const DotDims& d) {
  auto append = [&k](const std::vector<DotDim>& v) {
    k += static_cast<char>(v.size());
    for (const DotDim& x : v) {
      const int64_t f[4] = {x.lhs, x.rhs, x.output, x.spatial};
      k.append(reinterpret_cast<const char*>(f), sizeof f);
    }
  };
  const int64_t ranks[3] = {d.lhs_rank, d.rhs_rank, d.output_rank};
  k.append(reinterpret_cast<const char*>(ranks), sizeof ranks);
  append(d.batch);
  append(d.contracting);
  append(d.lhs_non_contracting);
  append(d.rhs_non_contracting);
  append(d.conv_spatial);
}
}  // namespace

const HloSharding& DotShardingMemo::Find(const std::function<HloSharding()>& compute) {
  auto it = table_.find(key_);
  if (it != table_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  if (key_bytes_ + key_.size() > max_key_bytes_) {
    table_.clear();
    key_bytes_ = 0;
  }
  key_bytes_ += key_.size();
  return table_.emplace(key_, compute()).first->second;
}

HloSharding DotShardingMemo::FromOperand(const HloSharding& operand_sharding, const DotDims& dims, int operand_index) {
  if (!operand_sharding.metadata().empty()) return DotShardingFromOperand(operand_sharding, dims, operand_index);
  key_.clear();
  key_ += 'F';
  key_ += static_cast<char>(operand_index);
  AppendDotDimsKey(key_, dims);
  AppendShardingKey(key_, operand_sharding);
  return Find([&] { return DotShardingFromOperand(operand_sharding, dims, operand_index); });
}

HloSharding DotShardingMemo::InferOperand(const HloSharding* dot_sharding, const HloSharding* other_sharding,
                                          int operand_index, const DotDims& dims, bool may_combine_partial) {
  if ((dot_sharding && !dot_sharding->metadata().empty()) || (other_sharding && !other_sharding->metadata().empty()))
    return InferDotOperandSharding(dot_sharding, other_sharding, operand_index, dims, may_combine_partial);
  key_.clear();
  key_ += 'I';
  key_ += static_cast<char>(operand_index);
  key_ += may_combine_partial ? '1' : '0';
  AppendDotDimsKey(key_, dims);
  key_ += dot_sharding ? 'd' : '-';
  if (dot_sharding) AppendShardingKey(key_, *dot_sharding);
  key_ += other_sharding ? 'o' : '-';
  if (other_sharding) AppendShardingKey(key_, *other_sharding);
  return Find([&] { return InferDotOperandSharding(dot_sharding, other_sharding, operand_index, dims, may_combine_partial); });
}

// ---- Gather / scatter -----------------------------------------------------------------------------

namespace {

void FillOutputDimsWithIndicesDims(GatherScatterDims* d, int64_t index_vector_dim,
                                   const std::vector<int64_t>& offset_or_window_dims) {
  d->output_dims.clear();
  if (d->indices_dims.empty()) return;
  const int64_t max_indices_dim = *std::max_element(d->indices_dims.begin(), d->indices_dims.end());
  std::unordered_map<int64_t, int64_t> to_output;
  for (int64_t indices_dim = 0, output_dim = 0; indices_dim <= max_indices_dim; ++indices_dim, ++output_dim) {
    if (indices_dim == index_vector_dim) ++indices_dim;
    while (Contains(offset_or_window_dims, output_dim)) ++output_dim;
    to_output[indices_dim] = output_dim;
  }
  for (int64_t i : d->indices_dims) d->output_dims.push_back(to_output[i]);
}

GatherScatterDims ConnectedIndicesOutputDims(int64_t indices_rank, int64_t index_vector_dim, int64_t output_rank,
                                             const std::vector<int64_t>& offset_dims,
                                             const std::vector<int64_t>& excluded = {}) {
  GatherScatterDims r;
  for (int64_t output_dim = 0, indices_dim = 0; output_dim < output_rank; ++output_dim) {
    if (Contains(offset_dims, output_dim)) continue;
    if (indices_dim == index_vector_dim) ++indices_dim;
    if (indices_dim >= indices_rank) break;
    if (!Contains(excluded, indices_dim)) {
      r.indices_dims.push_back(indices_dim);
      r.output_dims.push_back(output_dim);
    }
    ++indices_dim;
  }
  return r;
}

const Instruction* CallerOf(const Computation* c) {
  // Finds the single instruction calling `c` (while/conditional/call) by scanning the module's
  // computations; only used on the rare iota-through-loop path.
  Module* m = c->parent();
  if (m == nullptr) return nullptr;
  for (const auto& comp : m->computations()) {
    for (const auto& inst : comp->instructions()) {
      for (const Computation* called : inst->called_computations()) {
        if (called == c) return inst.get();
      }
    }
  }
  return nullptr;
}

std::optional<int64_t> DimensionForIota(const Instruction* maybe_iota, int depth = 0) {
  if (depth > 16) return std::nullopt;
  if (maybe_iota->opcode() == Opcode::kIota) return maybe_iota->iota_dimension;
  if (maybe_iota->shape().type != PrimitiveType::kS32) return std::nullopt;
  if (maybe_iota->opcode() == Opcode::kConstant) {
    const auto& shape = maybe_iota->shape();
    const auto& values = maybe_iota->literal.values;
    if (values.empty() || static_cast<int64_t>(values.size()) != shape.ElementCount()) return std::nullopt;
    std::vector<bool> is_iota(static_cast<size_t>(shape.rank()), true);
    std::vector<int64_t> idx;
    for (size_t f = 0; f < values.size(); ++f) {
      Unflatten(static_cast<int64_t>(f), shape.dims, &idx);
      for (size_t i = 0; i < idx.size(); ++i) {
        if (values[f] != static_cast<double>(idx[i])) is_iota[i] = false;
      }
    }
    for (int64_t i = 0; i < shape.rank(); ++i) {
      if (is_iota[static_cast<size_t>(i)] && shape.dim(i) > 1) return i;
    }
    return std::nullopt;
  }
  if (maybe_iota->opcode() == Opcode::kBroadcast) {
    auto d = DimensionForIota(maybe_iota->operand(0), depth + 1);
    if (d && *d < static_cast<int64_t>(maybe_iota->dimensions.size())) {
      return maybe_iota->dimensions[static_cast<size_t>(*d)];
    }
    return std::nullopt;
  }
  if (maybe_iota->opcode() == Opcode::kGetTupleElement && maybe_iota->operand(0)->opcode() == Opcode::kParameter) {
    const Computation* comp = maybe_iota->parent();
    if (comp == nullptr || comp->parent() == nullptr || comp == comp->parent()->entry()) return std::nullopt;
    const Instruction* caller = CallerOf(comp);
    if (caller == nullptr) return std::nullopt;
    const int64_t index = maybe_iota->tuple_index;
    if (caller->opcode() == Opcode::kWhile && caller->operand(0)->opcode() == Opcode::kTuple) {
      const Instruction* root = comp->root();
      if (root && root->opcode() == Opcode::kTuple && index < root->operand_count() &&
          root->operand(index) == maybe_iota && index < caller->operand(0)->operand_count()) {
        return DimensionForIota(caller->operand(0)->operand(index), depth + 1);
      }
    }
    if (caller->opcode() == Opcode::kConditional) {
      const auto& branches = caller->called_computations();
      for (size_t b = 0; b < branches.size(); ++b) {
        if (branches[b] != comp) continue;
        const Instruction* arg = caller->operand(static_cast<int64_t>(b) + 1);
        if (arg->opcode() == Opcode::kTuple && index < arg->operand_count()) {
          return DimensionForIota(arg->operand(index), depth + 1);
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<GatherScatterDims> BatchParallelDims(const Instruction* operand, const Instruction* indices,
                                                   const std::vector<int64_t>& slice_sizes,
                                                   int64_t index_vector_dim, const std::vector<int64_t>& index_map,
                                                   const std::vector<int64_t>& indices_batching_dims,
                                                   const std::vector<int64_t>& offset_or_window_dims) {
  std::vector<int64_t> parallel_in_dim(index_map.size(), -1);
  const Instruction* orig = indices;
  while (indices->opcode() == Opcode::kCopy) indices = indices->operand(0);
  if (indices->opcode() != Opcode::kConcatenate) indices = orig;
  const bool concat_on_vector = indices->opcode() == Opcode::kConcatenate && indices->dimensions.size() == 1 &&
                                indices->dimensions[0] == index_vector_dim;
  if (concat_on_vector) {
    int64_t concatenated = 0;
    for (const Instruction* op : indices->operands()) {
      const int64_t n = op->shape().rank() > index_vector_dim ? op->shape().dim(index_vector_dim) : 1;
      if (auto d = DimensionForIota(op)) {
        if (*d != index_vector_dim) {
          for (int64_t j = 0; j < n && concatenated + j < static_cast<int64_t>(parallel_in_dim.size()); ++j) {
            parallel_in_dim[static_cast<size_t>(concatenated + j)] = *d;
          }
        }
      }
      concatenated += n;
    }
  } else if (auto d = DimensionForIota(indices)) {
    if (*d != index_vector_dim) {
      const int64_t n = indices->shape().rank() > index_vector_dim ? indices->shape().dim(index_vector_dim) : 1;
      parallel_in_dim.assign(static_cast<size_t>(n), *d);
    }
  }
  GatherScatterDims r;
  for (size_t i = 0; i < parallel_in_dim.size() && i < index_map.size(); ++i) {
    const int64_t ipd = parallel_in_dim[i];
    const int64_t opd = index_map[i];
    if (ipd == -1) continue;
    if (Contains(r.indices_dims, ipd)) return std::nullopt;
    if (opd < 0 || opd >= static_cast<int64_t>(slice_sizes.size())) continue;
    if (slice_sizes[static_cast<size_t>(opd)] == 1 && !Contains(indices_batching_dims, ipd)) {
      if (ipd >= indices->shape().rank() || operand->shape().dim(opd) != indices->shape().dim(ipd)) {
        return std::nullopt;
      }
      r.indices_dims.push_back(ipd);
      r.operand_dims.push_back(opd);
    }
  }
  if (r.indices_dims.empty()) return std::nullopt;
  FillOutputDimsWithIndicesDims(&r, index_vector_dim, offset_or_window_dims);
  return r;
}

GatherScatterDims OperandPassthroughDims(const Shape& operand_shape, const std::vector<int64_t>& collapsed,
                                         const std::vector<int64_t>& batching,
                                         const std::vector<int64_t>& offset_dims,
                                         const std::vector<int64_t>& slice_sizes) {
  GatherScatterDims r;
  int64_t skipped = 0;
  for (int64_t i = 0; i < operand_shape.rank(); ++i) {
    if (Contains(collapsed, i) || Contains(batching, i)) {
      ++skipped;
      continue;
    }
    if (i >= static_cast<int64_t>(slice_sizes.size()) || slice_sizes[static_cast<size_t>(i)] != operand_shape.dim(i)) {
      continue;
    }
    const int64_t k = i - skipped;
    if (k < 0 || k >= static_cast<int64_t>(offset_dims.size())) continue;
    r.operand_dims.push_back(i);
    r.output_dims.push_back(offset_dims[static_cast<size_t>(k)]);
  }
  return r;
}

std::optional<HloSharding> PassthroughOperandToOutput(const Shape& operand_shape, const HloSharding& operand_sharding,
                                                      int64_t output_rank, const std::vector<int64_t>& collapsed,
                                                      const std::vector<int64_t>& batching,
                                                      const std::vector<int64_t>& offset_dims,
                                                      const std::vector<int64_t>& slice_sizes) {
  if (!operand_sharding.IsTiled()) return std::nullopt;
  auto d = OperandPassthroughDims(operand_shape, collapsed, batching, offset_dims, slice_sizes);
  HloSharding r = PropagateShardingAlongDimsAndReplicateOthers(operand_sharding, d.operand_dims, d.output_dims,
                                                               output_rank);
  if (IsTileMaximal(r)) return std::nullopt;
  return r;
}

std::optional<HloSharding> PassthroughOutputToOperand(const Shape& operand_shape, const HloSharding& output_sharding,
                                                      const std::vector<int64_t>& collapsed,
                                                      const std::vector<int64_t>& batching,
                                                      const std::vector<int64_t>& offset_dims,
                                                      const std::vector<int64_t>& slice_sizes) {
  if (!output_sharding.IsTiled()) return output_sharding;
  auto d = OperandPassthroughDims(operand_shape, collapsed, batching, offset_dims, slice_sizes);
  HloSharding r = PropagateShardingAlongDimsAndReplicateOthers(output_sharding, d.output_dims, d.operand_dims,
                                                               operand_shape.rank());
  if (IsTileMaximal(r)) return std::nullopt;
  return r;
}

std::vector<int64_t> ScatterSliceSizes(const Instruction& scatter) {
  const int64_t n = ScatterOperandCount(scatter);
  const Shape& operand_shape = scatter.operand(0)->shape();
  const Shape& update_shape = scatter.operand(n + 1)->shape();
  const auto& dn = scatter.scatter_dims;
  std::vector<int64_t> slice(static_cast<size_t>(operand_shape.rank()), 1);
  size_t next = 0;
  for (int64_t i = 0; i < operand_shape.rank(); ++i) {
    if (Contains(dn.inserted_window_dims, i) || Contains(dn.input_batching_dims, i)) continue;
    if (next < dn.update_window_dims.size()) {
      const int64_t ud = dn.update_window_dims[next++];
      if (ud >= 0 && ud < update_shape.rank()) slice[static_cast<size_t>(i)] = update_shape.dim(ud);
    }
  }
  return slice;
}

std::optional<HloSharding> MergeParallelAndPassthrough(std::optional<HloSharding> parallel,
                                                       std::optional<HloSharding> passthrough) {
  if (!passthrough) return parallel;
  if (!parallel) return passthrough;
  HloSharding a = *passthrough;
  if (MergeSharding(*parallel, &a, true)) return a;
  HloSharding b = *parallel;
  if (MergeSharding(*passthrough, &b, true)) return b;
  return parallel;
}

}  // namespace

int64_t ScatterOperandCount(const Instruction& scatter) {
  return std::max<int64_t>(1, (scatter.operand_count() - 1) / 2);
}

GatherScatterDims ExplicitGatherBatchDims(const Instruction& gather) {
  GatherScatterDims d;
  const auto& dn = gather.gather_dims;
  d.operand_dims = dn.operand_batching_dims;
  d.indices_dims = dn.start_indices_batching_dims;
  FillOutputDimsWithIndicesDims(&d, dn.index_vector_dim, dn.offset_dims);
  return d;
}

GatherScatterDims ExplicitScatterBatchDims(const Instruction& scatter) {
  GatherScatterDims d;
  const auto& dn = scatter.scatter_dims;
  d.operand_dims = dn.input_batching_dims;
  d.indices_dims = dn.scatter_indices_batching_dims;
  FillOutputDimsWithIndicesDims(&d, dn.index_vector_dim, dn.update_window_dims);
  return d;
}

std::optional<GatherScatterDims> GatherParallelDims(const Instruction& gather) {
  const auto& dn = gather.gather_dims;
  return BatchParallelDims(gather.operand(0), gather.operand(1), gather.gather_slice_sizes, dn.index_vector_dim,
                           dn.start_index_map, dn.start_indices_batching_dims, dn.offset_dims);
}

std::optional<GatherScatterDims> ScatterParallelDims(const Instruction& scatter) {
  const auto& dn = scatter.scatter_dims;
  const int64_t n = ScatterOperandCount(scatter);
  return BatchParallelDims(scatter.operand(0), scatter.operand(n), ScatterSliceSizes(scatter), dn.index_vector_dim,
                           dn.scatter_dims_to_operand_dims, dn.scatter_indices_batching_dims, dn.update_window_dims);
}

HloSharding GatherOutputShardingFromIndex(const HloSharding& index_sharding, const Instruction& gather) {
  if (!index_sharding.IsTiled()) return index_sharding;
  const auto& dn = gather.gather_dims;
  auto d = ConnectedIndicesOutputDims(gather.operand(1)->shape().rank(), dn.index_vector_dim, gather.shape().rank(),
                                      dn.offset_dims);
  return PropagateShardingAlongDimsAndReplicateOthers(index_sharding, d.indices_dims, d.output_dims,
                                                      gather.shape().rank());
}

HloSharding GatherIndexShardingFromOutput(const HloSharding& output_sharding, const Instruction& gather) {
  if (!output_sharding.IsTiled()) return output_sharding;
  const auto& dn = gather.gather_dims;
  auto d = ConnectedIndicesOutputDims(gather.operand(1)->shape().rank(), dn.index_vector_dim, gather.shape().rank(),
                                      dn.offset_dims);
  return PropagateShardingAlongDimsAndReplicateOthers(output_sharding, d.output_dims, d.indices_dims,
                                                      gather.operand(1)->shape().rank());
}

std::optional<HloSharding> GatherOutputShardingFromOperandPassthrough(const HloSharding& operand_sharding,
                                                                      const Instruction& gather) {
  const auto& dn = gather.gather_dims;
  return PassthroughOperandToOutput(gather.operand(0)->shape(), operand_sharding, gather.shape().rank(),
                                    dn.collapsed_slice_dims, dn.operand_batching_dims, dn.offset_dims,
                                    gather.gather_slice_sizes);
}

namespace {
// Explicit batch dims followed by the implicit (iota-indexed) parallel dims, when there are any.
void AppendDims(GatherScatterDims& to, const std::optional<GatherScatterDims>& more) {
  if (!more) return;
  to.operand_dims.insert(to.operand_dims.end(), more->operand_dims.begin(), more->operand_dims.end());
  to.indices_dims.insert(to.indices_dims.end(), more->indices_dims.begin(), more->indices_dims.end());
  to.output_dims.insert(to.output_dims.end(), more->output_dims.begin(), more->output_dims.end());
}
}  // namespace

std::optional<HloSharding> GatherOperandShardingFromOutput(const HloSharding& output_sharding,
                                                           const Instruction& gather) {
  const auto& dn = gather.gather_dims;
  std::optional<HloSharding> parallel;
  if (!output_sharding.IsTiled()) {
    parallel = output_sharding;
  } else {
    GatherScatterDims pd;
    if (!dn.operand_batching_dims.empty()) pd = ExplicitGatherBatchDims(gather);
    AppendDims(pd, GatherParallelDims(gather));
    if (!pd.operand_dims.empty()) {
      parallel = PropagateShardingAlongDimsAndReplicateOthers(output_sharding, pd.output_dims, pd.operand_dims,
                                                              gather.operand(0)->shape().rank());
    }
  }
  auto passthrough = PassthroughOutputToOperand(gather.operand(0)->shape(), output_sharding,
                                                dn.collapsed_slice_dims, dn.operand_batching_dims, dn.offset_dims,
                                                gather.gather_slice_sizes);
  return MergeParallelAndPassthrough(std::move(parallel), std::move(passthrough));
}

HloSharding ScatterIndexShardingFromUpdate(const HloSharding& update_sharding, const Instruction& scatter) {
  if (!update_sharding.IsTiled()) return update_sharding;
  const auto& dn = scatter.scatter_dims;
  const int64_t n = ScatterOperandCount(scatter);
  const int64_t indices_rank = scatter.operand(n)->shape().rank();
  const int64_t update_rank = scatter.operand(n + 1)->shape().rank();
  auto d = ConnectedIndicesOutputDims(indices_rank, dn.index_vector_dim, update_rank, dn.update_window_dims);
  return PropagateShardingAlongDimsAndReplicateOthers(update_sharding, d.output_dims, d.indices_dims, indices_rank);
}

HloSharding ScatterUpdateShardingFromIndex(const HloSharding& index_sharding, const Instruction& scatter) {
  if (!index_sharding.IsTiled()) return index_sharding;
  const auto& dn = scatter.scatter_dims;
  const int64_t n = ScatterOperandCount(scatter);
  const int64_t indices_rank = scatter.operand(n)->shape().rank();
  const int64_t update_rank = scatter.operand(n + 1)->shape().rank();
  auto d = ConnectedIndicesOutputDims(indices_rank, dn.index_vector_dim, update_rank, dn.update_window_dims);
  return PropagateShardingAlongDimsAndReplicateOthers(index_sharding, d.indices_dims, d.output_dims, update_rank);
}

std::optional<HloSharding> ScatterOutputShardingFromUpdate(const HloSharding& update_sharding,
                                                           const Instruction& scatter) {
  const auto& dn = scatter.scatter_dims;
  return PassthroughOutputToOperand(scatter.operand(0)->shape(), update_sharding, dn.inserted_window_dims,
                                    dn.input_batching_dims, dn.update_window_dims, ScatterSliceSizes(scatter));
}

std::optional<HloSharding> ScatterUpdateShardingFromOutput(const HloSharding& output_sharding,
                                                           const Instruction& scatter) {
  const auto& dn = scatter.scatter_dims;
  const int64_t n = ScatterOperandCount(scatter);
  const int64_t update_rank = scatter.operand(n + 1)->shape().rank();
  std::optional<HloSharding> parallel;
  if (!output_sharding.IsTiled()) {
    parallel = output_sharding;
  } else {
    GatherScatterDims pd;
    if (!dn.input_batching_dims.empty()) pd = ExplicitScatterBatchDims(scatter);
    AppendDims(pd, ScatterParallelDims(scatter));
    if (!pd.operand_dims.empty()) {
      parallel = PropagateShardingAlongDimsAndReplicateOthers(output_sharding, pd.operand_dims, pd.output_dims,
                                                              update_rank);
    }
  }
  auto passthrough = PassthroughOperandToOutput(scatter.operand(0)->shape(), output_sharding, update_rank,
                                                dn.inserted_window_dims, dn.input_batching_dims,
                                                dn.update_window_dims, ScatterSliceSizes(scatter));
  return MergeParallelAndPassthrough(std::move(parallel), std::move(passthrough));
}

}  // namespace shardscope::hlo_sharding_util
