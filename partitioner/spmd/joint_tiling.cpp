#include "partitioner/spmd/joint_tiling.h"

#include <algorithm>
#include <map>

namespace shardscope::spmd {

std::optional<TileMap> BuildJointTiling(const std::vector<JointSource>& sources, int64_t num_labels,
                                        int64_t num_devices) {
  std::vector<int64_t> tiles(static_cast<size_t>(num_labels), 1);
  for (const JointSource& src : sources) {
    for (size_t d = 0; d < src.label_of_dim.size(); ++d) {
      const int64_t l = src.label_of_dim[d];
      const int64_t t = src.map->tiles(static_cast<int64_t>(d));
      if (l < 0 || t == 1) continue;
      if (tiles[static_cast<size_t>(l)] != 1 && tiles[static_cast<size_t>(l)] != t) return std::nullopt;
      tiles[static_cast<size_t>(l)] = t;
    }
  }
  std::vector<DeviceTile> devs(static_cast<size_t>(num_devices));
  for (int64_t dev = 0; dev < num_devices; ++dev) {
    auto& idx = devs[static_cast<size_t>(dev)].index;
    idx.assign(static_cast<size_t>(num_labels), -1);
    for (const JointSource& src : sources) {
      for (size_t d = 0; d < src.label_of_dim.size(); ++d) {
        const int64_t l = src.label_of_dim[d];
        if (l < 0 || src.map->tiles(static_cast<int64_t>(d)) == 1) continue;
        const int64_t v = src.map->device(dev).index[d];
        if (idx[static_cast<size_t>(l)] >= 0 && idx[static_cast<size_t>(l)] != v) return std::nullopt;
        idx[static_cast<size_t>(l)] = v;
      }
    }
    for (auto& v : idx) v = std::max<int64_t>(v, 0);
  }
  // A full grid: every tile held by the same number of devices (replicas numbered in device order).
  const int64_t total = ElementsOf(tiles);
  if (total <= 0 || num_devices % total != 0) return std::nullopt;
  // Devices per tile, by the tile's row-major number (every index is below its label's tile count:
  // a source's index along a dim is below that dim's tiles, which the label took).
  std::vector<int64_t> count(static_cast<size_t>(total), 0);
  for (auto& dt : devs) {
    int64_t lin = 0;
    for (size_t l = 0; l < tiles.size(); ++l) lin = lin * tiles[l] + dt.index[l];
    dt.replica = count[static_cast<size_t>(lin)]++;
  }
  for (int64_t c : count)
    if (c != num_devices / total) return std::nullopt;
  return TileMap(std::move(tiles), std::move(devs));
}

}  // namespace shardscope::spmd
