// What a collective is to the simulator: its kind, how its time combines hop latency with bytes,
// the algorithm options, and the replica groups and shift pairs of the book's notation
// (AllGather_X, AllGather_XY, a halo shift along Y) over the axes of a logical mesh.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/sharding/mesh.h"

namespace shardscope::sim {

enum class CollectiveKind : uint8_t { kAllGather, kReduceScatter, kAllReduce, kAllToAll, kCollectivePermute };
std::string_view CollectiveKindName(CollectiveKind k);  // "all-gather", ...
// Accepts "all-gather", "allgather", "AllGather", "all_gather", "ag" (and likewise for the others).
Result<CollectiveKind> CollectiveKindFromName(std::string_view name);

enum class LatencyModel : uint8_t {
  kOverlapped,  // step = max(hop latency, bytes / bandwidth)   (the book's T_hop; default)
  kAdditive,    // step = hop latency + bytes / bandwidth       (alpha-beta; ASTRA-sim)
};
enum class CostRegime : uint8_t { kBandwidthBound, kLatencyBound };
std::string_view CostRegimeName(CostRegime r);  // "bandwidth-bound" | "latency-bound"

struct CollectiveOptions {
  LatencyModel latency_model = LatencyModel::kOverlapped;
  // false: ring algorithms use one direction only (ASTRA-sim's default ring); lines and switches
  // are unaffected.
  bool bidirectional = true;
  // All-to-all over a group that is exactly a sub-grid of chips: count the schedule's link loads
  // per axis (the same loads as routing every piece, much faster for large groups). false lists
  // every piece's hops (what the teaching walkthrough shows; kept for cross-checks).
  bool per_axis_all_to_all = true;
};

// Replica groups of a collective over `axes` of the mesh: one group per combination of the other
// axes' coordinates, members ordered row-major over `axes` as listed.
Result<std::vector<std::vector<int64_t>>> ReplicaGroupsForAxes(const DeviceMesh& mesh,
                                                               const std::vector<std::string>& axes);
// (source, target) pairs of a shift by `offset` along one mesh axis; cyclic wraps the ends round,
// otherwise devices shifted off the end send nothing (a halo exchange).
Result<std::vector<std::pair<int64_t, int64_t>>> ShiftPairsAlongAxis(const DeviceMesh& mesh, std::string_view axis,
                                                                     int64_t offset, bool cyclic);

}  // namespace shardscope::sim
