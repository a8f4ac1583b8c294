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
  // Per source, the (dim, label) pairs that carry a split.
  struct Carried {
    const TileMap* map;
    std::vector<std::pair<size_t, size_t>> dim_label;
  };
  std::vector<Carried> carried;
  for (const JointSource& src : sources) {
    Carried c{src.map, {}};
    for (size_t d = 0; d < src.label_of_dim.size(); ++d)
      if (src.label_of_dim[d] >= 0 && src.map->tiles(static_cast<int64_t>(d)) != 1)
        c.dim_label.emplace_back(d, static_cast<size_t>(src.label_of_dim[d]));
    if (!c.dim_label.empty()) carried.push_back(std::move(c));
  }
  const size_t rank = static_cast<size_t>(num_labels);
  std::vector<int32_t> index(static_cast<size_t>(num_devices) * rank, -1);
  for (int64_t dev = 0; dev < num_devices; ++dev) {
    int32_t* idx = index.data() + static_cast<size_t>(dev) * rank;
    for (const Carried& c : carried) {
      for (const auto& [d, l] : c.dim_label) {
        const int32_t v = static_cast<int32_t>(c.map->index(dev, static_cast<int64_t>(d)));
        if (idx[l] >= 0 && idx[l] != v) return std::nullopt;
        idx[l] = v;
      }
    }
    for (size_t l = 0; l < rank; ++l) idx[l] = std::max<int32_t>(idx[l], 0);
  }
  // A full grid: every tile held by the same number of devices (replicas numbered in device order).
  const int64_t total = ElementsOf(tiles);
  if (total <= 0 || num_devices % total != 0) return std::nullopt;
  // Devices per tile, by the tile's row-major number (every index is below its label's tile count:
  // a source's index along a dim is below that dim's tiles, which the label took).
  std::vector<int64_t> count(static_cast<size_t>(total), 0);
  std::vector<int32_t> replica(static_cast<size_t>(num_devices));
  for (int64_t dev = 0; dev < num_devices; ++dev) {
    const int32_t* idx = index.data() + static_cast<size_t>(dev) * rank;
    int64_t lin = 0;
    for (size_t l = 0; l < rank; ++l) lin = lin * tiles[l] + idx[l];
    replica[static_cast<size_t>(dev)] = static_cast<int32_t>(count[static_cast<size_t>(lin)]++);
  }
  for (int64_t c : count)
    if (c != num_devices / total) return std::nullopt;
  return TileMap(std::move(tiles), std::move(index), std::move(replica));
}

}  // namespace shardscope::spmd
