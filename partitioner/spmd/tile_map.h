// TileMap: a sharding seen per device — which tile (per data dim) each device holds and which
// replica of that tile it is. Every resharding decision and every collective's replica groups are
// computed on this one representation, whatever the HloSharding form (explicit, iota, partial
// replication, named mesh), so handlers never reason about tile-assignment layouts directly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/sharding/sharding.h"
#include "partitioner/hlo_sharding_util.h"
#include "core/base/status.h"

namespace shardscope::spmd {

// A device's tile index, one entry per data dim. A map holds one per device (2048 at 2048 devices,
// and the partitioner builds thousands of maps per module), so up to kInline dims are stored in place
// and only higher ranks allocate: with a std::vector here, allocating and freeing these indices was
// most of the partitioner's time at thousands of devices. The interface is the vector's subset the
// partitioner uses.
class TileIndex {
 public:
  static constexpr size_t kInline = 6;
  TileIndex() = default;
  TileIndex(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT: a vector converts
  TileIndex(const TileIndex& o) { assign(o.begin(), o.end()); }
  TileIndex(TileIndex&& o) noexcept : size_(o.size_), heap_capacity_(o.heap_capacity_), heap_(std::move(o.heap_)) {
    if (!heap_) std::copy(o.inline_, o.inline_ + size_, inline_);
    o.size_ = 0;
    o.heap_capacity_ = 0;
  }
  TileIndex& operator=(const TileIndex& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  TileIndex& operator=(TileIndex&& o) noexcept {
    if (this == &o) return *this;
    size_ = o.size_;
    heap_capacity_ = o.heap_capacity_;
    heap_ = std::move(o.heap_);
    if (!heap_) std::copy(o.inline_, o.inline_ + size_, inline_);
    o.size_ = 0;
    o.heap_capacity_ = 0;
    return *this;
  }
  TileIndex& operator=(const std::vector<int64_t>& v) {
    assign(v.begin(), v.end());
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_.get() : inline_; }
  const int64_t* data() const { return heap_ ? heap_.get() : inline_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }

  // Sizes to n; the first min(size, n) entries are kept, new ones are `value`.
  void resize(size_t n, int64_t value = 0) {
    const size_t keep = std::min(n, size_);
    if (n > kInline && !heap_) {
      auto h = std::make_unique<int64_t[]>(n);
      std::copy(inline_, inline_ + keep, h.get());
      heap_ = std::move(h);
    } else if (heap_ && n > heap_capacity_) {
      auto h = std::make_unique<int64_t[]>(n);
      std::copy(heap_.get(), heap_.get() + keep, h.get());
      heap_ = std::move(h);
    }
    if (heap_ && n > heap_capacity_) heap_capacity_ = n;
    std::fill(data() + keep, data() + n, value);
    size_ = n;
  }
  void assign(size_t n, int64_t value) {
    size_ = 0;
    resize(n, value);
  }
  // [first, last) may lie in this index's own storage.
  template <typename It>
  void assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    if (n <= kInline) {
      int64_t buf[kInline];
      std::copy(first, last, buf);
      heap_.reset();
      heap_capacity_ = 0;
      std::copy(buf, buf + n, inline_);
    } else {
      auto h = std::make_unique<int64_t[]>(n);
      std::copy(first, last, h.get());
      heap_ = std::move(h);
      heap_capacity_ = n;
    }
    size_ = n;
  }
  std::vector<int64_t> ToVector() const { return std::vector<int64_t>(begin(), end()); }

  friend bool operator==(const TileIndex& a, const TileIndex& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const TileIndex& a, const TileIndex& b) { return !(a == b); }
  friend bool operator<(const TileIndex& a, const TileIndex& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  size_t size_ = 0;
  size_t heap_capacity_ = 0;
  int64_t inline_[kInline] = {};
  std::unique_ptr<int64_t[]> heap_;  // set when the index has had more than kInline entries
};

struct DeviceTile {
  TileIndex index;      // tile index per data dim (size == rank)
  int64_t replica = 0;  // which copy of that tile (0 .. replication-1)
};

// A device's tile index as its map stores it (valid while the map's data is: a TileMap shares it
// between copies). Converts to a TileIndex where one is kept (a map key, a copy to change).
class TileIndexView {
 public:
  TileIndexView(const int32_t* p, size_t n) : p_(p), n_(n) {}
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](size_t i) const { return p_[i]; }
  const int32_t* data() const { return p_; }
  const int32_t* begin() const { return p_; }
  const int32_t* end() const { return p_ + n_; }
  std::vector<int64_t> ToVector() const { return std::vector<int64_t>(begin(), end()); }
  operator TileIndex() const {  // NOLINT: a view converts to the value it shows
    TileIndex t;
    t.assign(begin(), end());
    return t;
  }
  friend bool operator==(TileIndexView a, TileIndexView b) { return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin()); }
  friend bool operator!=(TileIndexView a, TileIndexView b) { return !(a == b); }

 private:
  const int32_t* p_;
  size_t n_;
};

// What TileMap::device returns: the device's tile index (a view) and replica.
struct DeviceTileView {
  TileIndexView index;
  int64_t replica = 0;
  operator DeviceTile() const { return {TileIndex(index), replica}; }  // NOLINT
};

class TileMap {
 public:
  // Builds the per-device view of `sharding` for an array of `rank` dims over `num_devices`.
  // Replicated/maximal/unknown: every device holds the whole array (maximal is executed
  // replicated in the SPMD program). Manual subgroups are not handled here (error).
  static Result<TileMap> FromSharding(const HloSharding& sharding, int64_t rank, int64_t num_devices);

  // Builds the canonical HloSharding (devices sorted within each replication group). Error when
  // the map is not a full grid (every tile held by the same number of devices).
  Result<HloSharding> ToSharding() const;

  int64_t rank() const { return static_cast<int64_t>(rep_->tiles.size()); }
  int64_t num_devices() const { return static_cast<int64_t>(rep_->replica.size()); }
  const std::vector<int64_t>& tiles() const { return rep_->tiles; }
  int64_t tiles(int64_t d) const { return rep_->tiles[static_cast<size_t>(d)]; }
  int64_t replication() const;  // devices per tile
  DeviceTileView device(int64_t d) const {
    const size_t r = rep_->tiles.size();
    return {TileIndexView(rep_->index.data() + static_cast<size_t>(d) * r, r), rep_->replica[static_cast<size_t>(d)]};
  }
  // Device d's tile index along dim k (device(d).index[k]).
  int64_t index(int64_t d, int64_t k) const {
    return rep_->index[static_cast<size_t>(d) * rep_->tiles.size() + static_cast<size_t>(k)];
  }
  // The per-device data as stored (device d's index at flat_index()[d * rank ...]): to build a
  // changed copy with the flat constructor below.
  const std::vector<int32_t>& flat_index() const { return rep_->index; }
  const std::vector<int32_t>& flat_replica() const { return rep_->replica; }

  // Shard size along dim d for a full extent (ceil division, GSPMD §4.1 padding).
  int64_t ShardSize(int64_t d, int64_t full) const;
  std::vector<int64_t> ShardShape(const std::vector<int64_t>& full) const;
  // Offset of device `dev`'s shard along dim d.
  int64_t Offset(int64_t dev, int64_t d, int64_t full) const;
  // Per-device table of offsets along dim d (indexed by device id).
  std::vector<int64_t> OffsetTable(int64_t d, int64_t full) const;
  // True when some device's shard along d extends past `full` (padding present).
  bool HasPadding(int64_t d, int64_t full) const;

  // Groups of devices that share every tile index except along `dims` and the same replica
  // index: exactly the participants of a collective that gathers/scatters `dims`. Each group is
  // ordered by the row-major tile index over `dims` (the order an all-gather concatenates in).
  std::vector<std::vector<int64_t>> GroupsAlong(const std::vector<int64_t>& dims) const;

  // Partial gather of dim d by factor k (tiles(d) % k == 0): groups of k devices whose tile
  // indices along d agree except for index % k, ordered by index % k; the result tiles d
  // tiles(d)/k ways.
  std::vector<std::vector<int64_t>> GroupsGatheringBy(int64_t d, int64_t k) const;
  TileMap GatheredBy(int64_t d, int64_t k) const;

  // The map after gathering `dims` (their tiles become replicas).
  TileMap Gathered(const std::vector<int64_t>& dims) const;
  // The map with dims permuted: result dim i is input dim perm[i].
  TileMap Permuted(const std::vector<int64_t>& perm) const;

  bool SameAs(const TileMap& o) const;
  // The identity of the per-device data (shared between copies of one map): a memo key while a
  // copy of the map is kept alive beside it.
  const void* identity() const { return rep_.get(); }

  // The map of an operand whose dim d carries label label_of_dim[d] (-1: whole) of this joint
  // tiling (joint_tiling.h): labels it does not carry become replication.
  TileMap Projected(const std::vector<int64_t>& label_of_dim) const;
  // Projected(label_of_dim).ToSharding() without building the projected map: the handlers cost
  // the operand shardings of every joint tiling they try and need the maps of few of them.
  Result<HloSharding> ProjectedSharding(const std::vector<int64_t>& label_of_dim) const;

  // Constructs from explicit data: per device its tile index (size rank = tiles.size()) and
  // replica; or the same flat, device d's index at index[d * rank ...].
  TileMap(std::vector<int64_t> tiles, const std::vector<DeviceTile>& devices);
  TileMap(std::vector<int64_t> tiles, std::vector<int32_t> index, std::vector<int32_t> replica);
  TileMap();

 private:
  // The per-device data is immutable once built and shared between copies: a TileMap is copied
  // into every reshard step, plan and memo table, and at thousands of devices copying the
  // per-device vectors dominated partitioning time. Operations that change a map build a new Rep.
  // Derived data (gathered/permuted/projected maps, replica groups, offset tables, the sharding)
  // is memoised per Rep: the same maps are asked the same questions on every layer of a model.
  // The per-device data is flat (device d's tile index at index[d * rank ...], its replica at
  // replica[d]), 32-bit: with a TileIndex per device a map took 80 bytes a device, and building,
  // copying and freeing those was a third of the 2048-device strategy search.
  struct Memo;
  struct Rep {
    std::vector<int64_t> tiles;
    std::vector<int32_t> index;    // num_devices x rank, device-major
    std::vector<int32_t> replica;  // indexed by device id
    std::shared_ptr<Memo> memo;    // never null; owned by this Rep alone
  };
  static std::shared_ptr<const Rep> MakeRep(std::vector<int64_t> tiles, std::vector<int32_t> index,
                                            std::vector<int32_t> replica);
  explicit TileMap(std::shared_ptr<const Rep> rep) : rep_(std::move(rep)) {}
  TileMap GatheredUncached(const std::vector<int64_t>& dims) const;
  TileMap GatheredByUncached(int64_t d, int64_t k) const;
  TileMap PermutedUncached(const std::vector<int64_t>& perm) const;
  TileMap ProjectedUncached(const std::vector<int64_t>& label_of_dim) const;
  std::vector<std::vector<int64_t>> GroupsAlongUncached(const std::vector<int64_t>& dims) const;
  std::vector<std::vector<int64_t>> GroupsGatheringByUncached(int64_t d, int64_t k) const;
  std::vector<int64_t> OffsetTableUncached(int64_t d, int64_t full) const;
  Result<HloSharding> ToShardingUncached() const;
  Result<HloSharding> ProjectedShardingUncached(const std::vector<int64_t>& label_of_dim) const;
  std::shared_ptr<const Rep> rep_;  // never null
};

// Does every device's shard under `to` lie within its shard under `from` (for these full dims)?
// Then resharding is a local dynamic-slice. The tile-map form of IsSubTilingOrEqualSharding
// (hlo_sharding_util.h): both ask ShardWithin of every device and dimension.
bool IsLocalRefinement(const TileMap& from, const TileMap& to, const std::vector<int64_t>& full_dims);

// Number of elements of a shape given by its dims (a shard shape).
int64_t ElementsOf(const std::vector<int64_t>& dims);
// Bytes of one device's shard of an array of shape `base` under `m`.
int64_t ShardBytes(const TileMap& m, const Shape& base);

// Memo keys of shardings (partitioner/hlo_sharding_util.h).
using hlo_sharding_util::AppendShardingKey;
using hlo_sharding_util::ShardingKey;

// The tile maps of one partitioning run: every sharding's map over the run's devices, built once
// (the same shardings recur on every layer of a model). Keyed by the sharding and the array rank;
// the device count is the run's.
class TileMapCache {
 public:
  explicit TileMapCache(int64_t num_devices);
  int64_t num_devices() const { return n_; }
  int64_t size() const { return static_cast<int64_t>(maps_.size()); }
  Result<TileMap> Get(const HloSharding& sharding, int64_t rank) const;
  // Local (per-device) shape of a value of shape `base` with this sharding (tuples leaf by leaf).
  Result<Shape> ShardShape(const Shape& base, const HloSharding& sharding) const;

 private:
  int64_t n_;
  mutable std::unordered_map<std::string, Result<TileMap>> maps_;
  // Scratch buffer for the keys (a key holds every device id: 16 KiB at 2048 devices).
  mutable std::string key_buf_;
};

}  // namespace shardscope::spmd
