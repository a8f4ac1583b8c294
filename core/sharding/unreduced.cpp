#include "core/sharding/unreduced.h"

#include <algorithm>
#include <map>

namespace shardscope {

bool HasUnreducedSubgroup(const HloSharding& s) {
  const auto& types = s.subgroup_types();
  return s.IsTiled() && std::find(types.begin(), types.end(), HloSharding::SubgroupType::kUnreduced) != types.end();
}

HloSharding WithUnreducedReplicated(const HloSharding& s) {
  if (!HasUnreducedSubgroup(s)) return s;
  std::vector<HloSharding::SubgroupType> types = s.subgroup_types();
  for (HloSharding::SubgroupType& t : types)
    if (t == HloSharding::SubgroupType::kUnreduced) t = HloSharding::SubgroupType::kReplicated;
  return HloSharding::Subgroup(s.tile_assignment(), std::move(types));
}

std::vector<std::vector<int64_t>> UnreducedGroups(const HloSharding& s) {
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;
  const TileAssignment& tiles = s.tile_assignment();
  const auto& types = s.subgroup_types();
  const int64_t data_rank = s.TiledDataRank();
  for (int64_t device = 0; device < tiles.num_elements(); ++device) {
    std::vector<int64_t> index = tiles.IndexOfDevice(device);
    if (index.empty()) continue;
    for (size_t k = 0; k < types.size(); ++k)
      if (types[k] == HloSharding::SubgroupType::kUnreduced) index[static_cast<size_t>(data_rank) + k] = 0;
    groups[index].push_back(device);
  }
  std::vector<std::vector<int64_t>> out;
  for (auto& [index, devices] : groups) out.push_back(std::move(devices));
  std::sort(out.begin(), out.end());
  return out;
}

bool IsFirstUnreducedCopy(const HloSharding& s, int64_t device) {
  if (!HasUnreducedSubgroup(s)) return true;
  const std::vector<int64_t> index = s.tile_assignment().IndexOfDevice(device);
  if (index.empty()) return false;
  const auto& types = s.subgroup_types();
  const int64_t data_rank = s.TiledDataRank();
  for (size_t k = 0; k < types.size(); ++k)
    if (types[k] == HloSharding::SubgroupType::kUnreduced && index[static_cast<size_t>(data_rank) + k] != 0) return false;
  return true;
}

}  // namespace shardscope
