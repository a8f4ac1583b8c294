#include "simulator/collectives/collective.h"

#include <algorithm>
#include <cctype>

namespace shardscope::sim {

std::string_view CollectiveKindName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllGather: return "all-gather";
    case CollectiveKind::kReduceScatter: return "reduce-scatter";
    case CollectiveKind::kAllReduce: return "all-reduce";
    case CollectiveKind::kAllToAll: return "all-to-all";
    case CollectiveKind::kCollectivePermute: return "collective-permute";
  }
  return "all-gather";
}

Result<CollectiveKind> CollectiveKindFromName(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c == '-' || c == '_' || c == ' ') continue;
    s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (s == "allgather" || s == "ag") return CollectiveKind::kAllGather;
  if (s == "reducescatter" || s == "rs") return CollectiveKind::kReduceScatter;
  if (s == "allreduce" || s == "ar") return CollectiveKind::kAllReduce;
  if (s == "alltoall" || s == "a2a") return CollectiveKind::kAllToAll;
  if (s == "collectivepermute" || s == "permute" || s == "cp") return CollectiveKind::kCollectivePermute;
  return Error("unknown collective '" + std::string(name) +
               "' (expected all-gather, reduce-scatter, all-reduce, all-to-all or collective-permute)");
}

std::string_view CostRegimeName(CostRegime r) {
  return r == CostRegime::kLatencyBound ? "latency-bound" : "bandwidth-bound";
}

// ---- The book's notation over a mesh ------------------------------------------------------------------

Result<std::vector<std::vector<int64_t>>> ReplicaGroupsForAxes(const DeviceMesh& mesh,
                                                               const std::vector<std::string>& axes) {
  const int64_t rank = mesh.num_axes();
  std::vector<int64_t> chosen;
  for (const auto& name : axes) {
    const int64_t i = mesh.AxisIndex(name);
    if (i < 0) return Error("mesh " + mesh.ToString() + " has no axis '" + name + "'");
    if (std::find(chosen.begin(), chosen.end(), i) != chosen.end()) return Error("axis '" + name + "' is listed twice");
    chosen.push_back(i);
  }
  std::vector<int64_t> others;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::find(chosen.begin(), chosen.end(), i) == chosen.end()) others.push_back(i);
  }
  std::vector<int64_t> strides(static_cast<size_t>(rank), 1);
  for (int64_t i = rank - 2; i >= 0; --i) strides[static_cast<size_t>(i)] = strides[static_cast<size_t>(i + 1)] * mesh.axis_size(i + 1);
  const auto& order = mesh.device_order();
  // Iterate row-major over a list of axes.
  auto for_each = [&](const std::vector<int64_t>& list, auto&& fn) {
    std::vector<int64_t> idx(list.size(), 0);
    while (true) {
      fn(idx);
      size_t k = list.size();
      while (k > 0) {
        --k;
        if (++idx[k] < mesh.axis_size(list[k])) break;
        idx[k] = 0;
        if (k == 0) return;
      }
      if (list.empty()) return;
    }
  };
  std::vector<std::vector<int64_t>> groups;
  for_each(others, [&](const std::vector<int64_t>& oi) {
    std::vector<int64_t> group;
    for_each(chosen, [&](const std::vector<int64_t>& ci) {
      int64_t pos = 0;
      for (size_t k = 0; k < others.size(); ++k) pos += oi[k] * strides[static_cast<size_t>(others[k])];
      for (size_t k = 0; k < chosen.size(); ++k) pos += ci[k] * strides[static_cast<size_t>(chosen[k])];
      group.push_back(order[static_cast<size_t>(pos)]);
    });
    groups.push_back(std::move(group));
  });
  return groups;
}

Result<std::vector<std::pair<int64_t, int64_t>>> ShiftPairsAlongAxis(const DeviceMesh& mesh, std::string_view axis,
                                                                     int64_t offset, bool cyclic) {
  const int64_t a = mesh.AxisIndex(axis);
  if (a < 0) return Error("mesh " + mesh.ToString() + " has no axis '" + std::string(axis) + "'");
  const int64_t rank = mesh.num_axes();
  std::vector<int64_t> strides(static_cast<size_t>(rank), 1);
  for (int64_t i = rank - 2; i >= 0; --i) strides[static_cast<size_t>(i)] = strides[static_cast<size_t>(i + 1)] * mesh.axis_size(i + 1);
  const int64_t n = mesh.axis_size(a);
  const auto& order = mesh.device_order();
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t pos = 0; pos < static_cast<int64_t>(order.size()); ++pos) {
    const int64_t x = (pos / strides[static_cast<size_t>(a)]) % n;
    int64_t y = x + offset;
    if (y < 0 || y >= n) {
      if (!cyclic) continue;
      y = ((y % n) + n) % n;
    }
    const int64_t target = pos + (y - x) * strides[static_cast<size_t>(a)];
    if (target == pos) continue;
    pairs.emplace_back(order[static_cast<size_t>(pos)], order[static_cast<size_t>(target)]);
  }
  return pairs;
}

}  // namespace shardscope::sim
