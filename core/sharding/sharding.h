// XLA HloSharding semantics: replicated, maximal, manual, unknown (shard_as/shard_like), tiled,
// partially tiled (last_tile_dim_replicate / last_tile_dims={...}), tuple; explicit and iota tile
// assignments; the named mesh form {mesh['x'=2,'y'=2], [{'x'},{'y'}]}.
// GSPMD paper §3.1 (../shared/papers/001_*.txt).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/shape.h"
#include "core/base/status.h"

namespace shardscope {

// A tile assignment: an N-d array of device ids. Stored explicitly (row-major); remembers an iota
// description (<=[reshape]T(perm)) when it was built from one, so it prints back the same way.
class TileAssignment {
 public:
  TileAssignment() = default;
  static TileAssignment Explicit(std::vector<int64_t> dims, std::vector<int64_t> devices);
  // devices=[dims]<=[reshape_dims]T(perm): iota over product(reshape_dims), reshaped, transposed by
  // perm, then reshaped to dims. An empty perm means the identity.
  static TileAssignment Iota(std::vector<int64_t> dims, std::vector<int64_t> reshape_dims = {},
                             std::vector<int64_t> perm = {});

  const std::vector<int64_t>& dims() const { return rep_ ? rep_->dims : Empty(); }
  int64_t num_dimensions() const { return static_cast<int64_t>(dims().size()); }
  int64_t dim(int64_t i) const { return dims()[static_cast<size_t>(i)]; }
  int64_t num_elements() const { return static_cast<int64_t>(devices().size()); }
  const std::vector<int64_t>& devices() const { return rep_ && rep_->devices ? *rep_->devices : Empty(); }  // row-major
  int64_t operator()(const std::vector<int64_t>& index) const;     // device at a tile index
  std::vector<int64_t> IndexOfDevice(int64_t device) const;         // empty if absent
  bool is_iota() const { return rep_ && rep_->iota_reshape.has_value(); }
  // The iota description when is_iota() (canonical; an empty perm is the identity), else empty.
  const std::vector<int64_t>& iota_reshape_dims() const { return is_iota() ? *rep_->iota_reshape : Empty(); }
  const std::vector<int64_t>& iota_perm() const { return rep_ ? rep_->iota_perm : Empty(); }

  TileAssignment Reshape(std::vector<int64_t> new_dims) const;
  TileAssignment Transpose(const std::vector<int64_t>& perm) const;

  bool operator==(const TileAssignment& o) const {
    if (rep_ == o.rep_) return true;
    return dims() == o.dims() && ((rep_ && o.rep_ && rep_->devices == o.rep_->devices) || devices() == o.devices());
  }
  std::string ToString() const;  // "[2,2]0,1,2,3" or "[4,2]<=[2,4]T(1,0)"

 private:
  // Everything a tile assignment holds, shared between copies: a tile assignment never changes
  // once built, and shardings are copied for every value of a program and every candidate
  // propagation weighs (a copy of the members one by one was three allocations).
  struct Rep {
    std::vector<int64_t> dims;
    // Shared with every tile assignment of the same devices (an iota form's are shared across
    // all of them: SharedIotaTables), whatever its dims.
    std::shared_ptr<const std::vector<int64_t>> devices;
    std::shared_ptr<const std::vector<int64_t>> device_index;  // device id -> flat index, -1 if absent
    std::optional<std::vector<int64_t>> iota_reshape;
    std::vector<int64_t> iota_perm;
  };
  static const std::vector<int64_t>& Empty();
  const std::vector<int64_t>& device_index() const { return rep_ && rep_->device_index ? *rep_->device_index : Empty(); }

  std::shared_ptr<const Rep> rep_;  // null: no tiles (default-constructed)
};

// Sharding metadata is kept (and printed) but never compared.
struct ShardingMetadata {
  std::string text;  // the raw contents of metadata={...}
};

class HloSharding {
 public:
  enum class Kind : uint8_t { kReplicated, kMaximal, kManual, kUnknown, kUnreduced, kTiled, kTuple };
  // Types of the trailing subgroup dimensions of a partially tiled sharding.
  enum class SubgroupType : uint8_t { kReplicated, kManual, kUnreduced, kMaximal };

  HloSharding() = default;  // replicated
  static HloSharding Replicate();
  static HloSharding AssignDevice(int64_t device);
  static HloSharding Manual();
  static HloSharding Unknown();
  static HloSharding Unreduced();
  // Fully tiled: tile assignment rank == array rank.
  static HloSharding Tile(TileAssignment tiles);
  // Tiled over the first (rank) dims, the trailing dims are subgroups of the given types
  // (last_tile_dim_replicate == one trailing kReplicated dim). Normalises: subgroup dims of size 1
  // are dropped, a sharding whose data dims are all 1 and whose only subgroup is replicated
  // becomes Replicate(), etc. (as XLA's HloSharding::Subgroup does).
  static HloSharding Subgroup(TileAssignment tiles, std::vector<SubgroupType> subgroup_types);
  static HloSharding PartialTile(TileAssignment tiles) {
    return Subgroup(std::move(tiles), {SubgroupType::kReplicated});
  }
  static HloSharding Tuple(std::vector<HloSharding> elements);

  // Parses the text between (and including) the braces: "{devices=[2,2]0,1,2,3}",
  // "{{replicated}, {maximal device=0}}", "{mesh['x'=2,'y'=2], [{'x'},{'y'}]}". Error offsets are
  // relative to `text`.
  static Result<HloSharding> Parse(std::string_view text);
  std::string ToString(bool include_metadata = false) const;

  Kind kind() const { return kind_; }
  bool IsReplicated() const;   // also true for a tuple whose leaves are all replicated
  bool IsMaximal() const { return kind_ == Kind::kMaximal; }
  bool IsManual() const;       // fully manual (also a tuple of manual leaves)
  bool IsUnknown() const { return kind_ == Kind::kUnknown; }
  bool IsTuple() const { return kind_ == Kind::kTuple; }
  bool IsTiled() const { return kind_ == Kind::kTiled; }
  bool IsTileMaximal() const;  // replicated, maximal, manual, unknown or unreduced: no data dims tiled
  bool HasPartialReplication() const;  // a trailing kReplicated subgroup dim
  bool HasManualSubgroup() const;

  int64_t maximal_device() const { return maximal_device_; }
  const TileAssignment& tile_assignment() const { return tiles_; }
  const std::vector<SubgroupType>& subgroup_types() const { return subgroup_types_; }
  // Number of data dimensions tiled (tile assignment rank minus subgroup dims).
  int64_t TiledDataRank() const;
  int64_t NumTiles() const;  // product of data tile dims (1 when tile-maximal)
  // Number of ways data dim d is split (1 when not tiled / out of range).
  int64_t DimensionTiles(int64_t d) const;
  // Total devices the sharding spans.
  int64_t NumDevices() const;

  const std::vector<HloSharding>& tuple_elements() const { return tuple_; }
  std::vector<HloSharding>& mutable_tuple_elements() { return tuple_; }
  // For a tuple-shaped value: the sharding of leaf `i`; a non-tuple sharding on a tuple applies
  // to every leaf.
  HloSharding GetSubSharding(const Shape& shape, const std::vector<int64_t>& index) const;
  // Expands a non-tuple sharding to a tuple sharding with one element per leaf of `shape`.
  HloSharding ExpandToTuple(const Shape& shape) const;

  // shard_as / shard_like group, when given ({unknown shard_as 0}).
  std::optional<int64_t> shard_group_id() const { return shard_group_id_; }
  bool shard_as() const { return shard_as_; }
  void set_shard_group(std::optional<int64_t> id, bool shard_as) { shard_group_id_ = id; shard_as_ = shard_as; }

  // Dimensions left open for propagation in the named-mesh form ({?}).
  const std::vector<int64_t>& open_dims() const { return open_dims_; }
  void set_open_dims(std::vector<int64_t> dims) { open_dims_ = std::move(dims); }

  const std::vector<ShardingMetadata>& metadata() const { return metadata_; }
  void set_metadata(std::vector<ShardingMetadata> m) { metadata_ = std::move(m); }

  // Semantic equality: metadata ignored, iota equal to the same explicit list.
  bool operator==(const HloSharding& o) const;
  bool operator!=(const HloSharding& o) const { return !(*this == o); }

  // --- Per-device view (GSPMD §3.1, §4.1: uneven dims are padded up to ceil(dim/tiles)). ---
  // The tile index (data dims only) that `device` holds; empty if the device is not in the
  // assignment or the sharding is tile-maximal.
  std::vector<int64_t> TileIndexForDevice(int64_t device) const;
  // Shard shape every device uses (padded): ceil(dim / tiles) per dim.
  std::vector<int64_t> ShardShape(const std::vector<int64_t>& dims) const;
  // Offset of `device`'s shard in each dim (tile_index * shard_dim).
  std::vector<int64_t> ShardOffset(const std::vector<int64_t>& dims, int64_t device) const;
  // The real (unpadded) extent of `device`'s shard in each dim: min(shard, dim - offset), >= 0.
  std::vector<int64_t> ShardValidExtent(const std::vector<int64_t>& dims, int64_t device) const;
  // Bytes a device holds for an array of this shape (padded shard shape).
  int64_t BytesPerDevice(const Shape& shape) const;

 private:
  Kind kind_ = Kind::kReplicated;
  int64_t maximal_device_ = -1;
  TileAssignment tiles_;
  std::vector<SubgroupType> subgroup_types_;
  std::vector<HloSharding> tuple_;
  std::optional<int64_t> shard_group_id_;
  bool shard_as_ = false;
  std::vector<int64_t> open_dims_;
  std::vector<ShardingMetadata> metadata_;
  std::string named_form_;  // original named-mesh text, reprinted when still equal
};

}  // namespace shardscope
