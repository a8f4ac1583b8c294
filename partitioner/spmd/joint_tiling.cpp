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
  // A full grid: every tile held by the same number of devices.
  const int64_t total = ElementsOf(tiles);
  if (total <= 0 || num_devices % total != 0) return std::nullopt;
  // The (source dim, label) pairs that carry a split, over every source, with where each source's
  // per-device data lies (read directly: this loop runs over every device for every subset of a
  // dot's operands). The first pair of a label sets the device's index, the others must agree.
  struct Carried {
    const int32_t* index;  // the source's flat index
    size_t rank;           // the source's rank (its index's stride)
    size_t dim, label;
    bool first;
  };
  std::vector<Carried> carried;
  std::vector<char> labelled(static_cast<size_t>(num_labels), 0);
  for (const JointSource& src : sources)
    for (size_t d = 0; d < src.label_of_dim.size(); ++d)
      if (src.label_of_dim[d] >= 0 && src.map->tiles(static_cast<int64_t>(d)) != 1) {
        const size_t l = static_cast<size_t>(src.label_of_dim[d]);
        carried.push_back({src.map->flat_index().data(), static_cast<size_t>(src.map->rank()), d, l, !labelled[l]});
        labelled[l] = 1;
      }
  // Labels no source splits stay 0. Replicas are numbered in device order, counting the devices
  // per tile by the tile's row-major number (every index is below its label's tile count: a
  // source's index along a dim is below that dim's tiles, which the label took).
  const size_t rank = static_cast<size_t>(num_labels);
  std::vector<int32_t> index(static_cast<size_t>(num_devices) * rank, 0);
  std::vector<int64_t> count(static_cast<size_t>(total), 0);
  std::vector<int32_t> replica(static_cast<size_t>(num_devices));
  for (int64_t dev = 0; dev < num_devices; ++dev) {
    int32_t* idx = index.data() + static_cast<size_t>(dev) * rank;
    for (const Carried& c : carried) {
      const int32_t v = c.index[static_cast<size_t>(dev) * c.rank + c.dim];
      if (c.first) idx[c.label] = v;
      else if (idx[c.label] != v) return std::nullopt;
    }
    int64_t lin = 0;
    for (size_t l = 0; l < rank; ++l) lin = lin * tiles[l] + idx[l];
    replica[static_cast<size_t>(dev)] = static_cast<int32_t>(count[static_cast<size_t>(lin)]++);
  }
  for (int64_t c : count)
    if (c != num_devices / total) return std::nullopt;
  return TileMap(std::move(tiles), std::move(index), std::move(replica));
}

JointExtension ExtendJointTiling(const TileMap& joint, const JointSource& source) {
  std::vector<std::pair<int64_t, int64_t>> carried;  // (source dim, label)
  for (size_t d = 0; d < source.label_of_dim.size(); ++d) {
    const int64_t l = source.label_of_dim[d], t = source.map->tiles(static_cast<int64_t>(d));
    if (l < 0 || t == 1) continue;
    if (joint.tiles(l) == 1) return JointExtension::kNew;
    if (joint.tiles(l) != t) return JointExtension::kConflict;
    carried.emplace_back(static_cast<int64_t>(d), l);
  }
  for (int64_t dev = 0; dev < joint.num_devices(); ++dev)
    for (const auto& [d, l] : carried)
      if (source.map->index(dev, d) != joint.index(dev, l)) return JointExtension::kConflict;
  return JointExtension::kSame;
}

}  // namespace shardscope::spmd
