// Joint tilings: one tiling over the labelled dimensions of an op (dot, convolution, gather,
// scatter). An op's operand and result dimensions that must be tiled alike carry the same label
// (batch, contracting, a window, ...); a joint tiling gives every device one tile index per label,
// and projecting it on an operand (TileMap::Projected) gives the operand sharding under which the
// per-device op is local. The handlers build candidates from the shardings their operands and
// result already have, cost each, and keep the cheapest.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "partitioner/spmd/tile_map.h"

namespace shardscope::spmd {

// An operand or result whose dim d carries label label_of_dim[d] (-1: no label; the dim is whole).
struct JointSource {
  const TileMap* map = nullptr;
  std::vector<int64_t> label_of_dim;
};
// Merges the sources' tilings into one over `num_labels` labels (tile indices of a label must
// agree between sources); nullopt when they conflict or the result is not a full device grid.
std::optional<TileMap> BuildJointTiling(const std::vector<JointSource>& sources, int64_t num_labels,
                                        int64_t num_devices);

// What adding `source` to sources whose joint tiling is `joint` gives: kSame when every label the
// source splits is split alike in `joint` and every device's indices agree (the joint of the
// larger set is `joint` itself: BuildJointTiling would number the same tiles the same way),
// kConflict when tile counts or indices disagree (no joint), kNew when the source splits a label
// `joint` leaves whole (BuildJointTiling decides). One pass over the devices, no map built.
enum class JointExtension { kSame, kConflict, kNew };
JointExtension ExtendJointTiling(const TileMap& joint, const JointSource& source);

// A handler's plans by distinct joint tiling. A plan is a pure function of its joint's tiles, and
// most source subsets give a joint another subset already gave (62% in the 2048-device search), so
// a joint equal to one planned before reuses that plan, with this joint and source count. Plan has
// members `joint` (TileMap) and `sources` (int64_t).
template <typename Plan>
class JointPlans {
 public:
  // The plan of `joint` (nullopt: none), from plan_of(joint, sources) the first time.
  template <typename PlanOf>
  std::optional<Plan> Get(const TileMap& joint, int64_t sources, PlanOf&& plan_of) {
    for (const auto& [seen, plan] : planned_) {
      if (!seen.SameAs(joint)) continue;
      std::optional<Plan> p = plan;
      if (p) {
        p->joint = joint;
        p->sources = sources;
      }
      return p;
    }
    std::optional<Plan> p = plan_of(joint, sources);
    planned_.emplace_back(joint, p);
    return p;
  }

 private:
  std::vector<std::pair<TileMap, std::optional<Plan>>> planned_;
};

}  // namespace shardscope::spmd
