// TileMap: a sharding seen per device — which tile (per data dim) each device holds and which
// replica of that tile it is. Every resharding decision and every collective's replica groups are
// computed on this one representation, whatever the HloSharding form (explicit, iota, partial
// replication, named mesh), so handlers never reason about tile-assignment layouts directly.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/sharding.h"
#include "core/status.h"

namespace shardscope::spmd {

struct DeviceTile {
  std::vector<int64_t> index;  // tile index per data dim (size == rank)
  int64_t replica = 0;         // which copy of that tile (0 .. replication-1)
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

  int64_t rank() const { return static_cast<int64_t>(tiles_.size()); }
  int64_t num_devices() const { return static_cast<int64_t>(devices_.size()); }
  const std::vector<int64_t>& tiles() const { return tiles_; }
  int64_t tiles(int64_t d) const { return tiles_[static_cast<size_t>(d)]; }
  int64_t replication() const;  // devices per tile
  const DeviceTile& device(int64_t d) const { return devices_[static_cast<size_t>(d)]; }

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

  // Constructs from explicit data (used by the dot planner's joint tilings).
  TileMap(std::vector<int64_t> tiles, std::vector<DeviceTile> devices)
      : tiles_(std::move(tiles)), devices_(std::move(devices)) {}
  TileMap() = default;

 private:
  std::vector<int64_t> tiles_;
  std::vector<DeviceTile> devices_;  // indexed by device id
};

// Does every device's shard under `to` lie within its shard under `from` (for these full dims)?
// Then resharding is a local dynamic-slice.
bool IsLocalRefinement(const TileMap& from, const TileMap& to, const std::vector<int64_t>& full_dims);

}  // namespace shardscope::spmd
