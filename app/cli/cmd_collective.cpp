// shardscope-cli collective: the modelled time of one collective on a simulated slice.
//   shardscope-cli collective all-gather --chip tpu-v5e --mesh X=8,Y=4 --shape bf16[2048,8192]
//       --sharding "[E_Y, F]" --axes Y
// Prints the algorithm, bytes moved, per-link figures and the regime; the LAST line is exactly
// "time_us: T". Exit 0 on success, 2 on bad input.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "app/cli/slice_options.h"
#include "core/sharding/mesh.h"
#include "core/base/shape.h"
#include "core/sharding/sharding.h"
#include "simulator/collectives/cost.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

namespace shardscope::cli {

using namespace shardscope::sim;
namespace {

constexpr const char* kName = "collective";

std::string Fixed(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// "X,Y", "X Y" or "XY" (when every mesh axis name is one letter) -> axis names.
Result<std::vector<std::string>> ParseAxes(const std::string& text, const DeviceMesh& mesh) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text + ",") {
    if (c == ',' || c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  std::vector<std::string> expanded;
  for (const auto& a : out) {
    if (mesh.AxisIndex(a) >= 0) {
      expanded.push_back(a);
      continue;
    }
    bool all_single = true;
    for (char c : a) all_single = all_single && mesh.AxisIndex(std::string(1, c)) >= 0;
    if (!all_single || a.size() < 2) {
      return Error("mesh " + mesh.ToString() + " has no axis '" + a + "'");
    }
    for (char c : a) expanded.emplace_back(1, c);
  }
  if (expanded.empty()) return Error("--axes names no mesh axis");
  return expanded;
}

int Run(const std::vector<std::string>& in) {
  std::vector<std::string> args = in;
  std::string shape_text, sharding_text, axes_text, shift_text;
  const SliceOptionTexts slice_texts = TakeSliceOptions(args);
  const bool have_shape = TakeOption(args, "shape", &shape_text);
  const bool have_sharding = TakeOption(args, "sharding", &sharding_text);
  const bool have_axes = TakeOption(args, "axes", &axes_text);
  const bool have_shift = TakeOption(args, "shift", &shift_text);
  const bool no_cyclic = TakeFlag(args, "no-cyclic");

  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.empty()) {
    return UsageError(kName, "missing KIND (all-gather, reduce-scatter, all-reduce, all-to-all or collective-permute)");
  }
  if (args.size() > 1) return UsageError(kName, "expected one KIND, got: " + Join(args, " "));
  auto kind = CollectiveKindFromName(args[0]);
  if (!kind.ok()) return UsageError(kName, kind.error().message);
  if (!slice_texts.chip) return UsageError(kName, "missing --chip (a preset such as tpu-v5e, or a chip .json file)");
  if (!slice_texts.mesh) return UsageError(kName, "missing --mesh (e.g. X=8,Y=4)");
  if (!have_shape) return UsageError(kName, "missing --shape (e.g. bf16[2048,8192])");
  if (!have_sharding) return UsageError(kName, "missing --sharding (named axes, e.g. \"[E_Y, F]\" or \"[B_X, D_Y]{U_Z}\")");
  if (!have_axes) return UsageError(kName, "missing --axes (the mesh axes the collective runs over, e.g. Y or X,Y)");
  auto resolved = ResolveSlice(slice_texts);
  if (!resolved.ok()) return UsageError(kName, resolved.error().message);
  const ChipSpec& spec = resolved->chip;
  const DeviceMesh& mesh = resolved->mesh;
  const Topology& topo = resolved->topology;

  size_t consumed = 0;
  auto shape = ParseShape(shape_text, &consumed);
  if (!shape.ok()) return UsageError(kName, "--shape '" + shape_text + "': " + shape.error().message);
  if (consumed != shape_text.size()) return UsageError(kName, "--shape '" + shape_text + "': unexpected text after the shape");
  if (!shape->IsArray()) return UsageError(kName, "--shape must be an array shape such as bf16[2048,8192]");
  auto sharding = ParseNamedAxes(sharding_text, shape->rank(), mesh);
  if (!sharding.ok()) {
    std::string where;
    if (sharding.error().offset >= 0) where = " (at column " + std::to_string(sharding.error().offset + 1) + ")";
    return UsageError(kName, "--sharding '" + sharding_text + "': " + sharding.error().message + where);
  }
  auto assignment = AxesOf(sharding.value(), shape->rank(), mesh);
  if (!assignment.ok()) return UsageError(kName, "--sharding: " + assignment.error().message);
  auto axes = ParseAxes(axes_text, mesh);
  if (!axes.ok()) return UsageError(kName, "--axes: " + axes.error().message);

  const CollectiveOptions& options = resolved->collectives;

  // What the array looks like on each device, and what the collective needs of it.
  const double whole = static_cast<double>(shape->ByteSize());
  const double per_device = static_cast<double>(sharding->BytesPerDevice(shape.value()));
  auto shards_array = [&](int64_t axis) {
    for (const auto& d : assignment->dim_axes) {
      if (std::find(d.begin(), d.end(), axis) != d.end()) return true;
    }
    return false;
  };
  auto unreduced = [&](int64_t axis) {
    const auto& u = assignment->unreduced_axes;
    return std::find(u.begin(), u.end(), axis) != u.end();
  };
  int64_t group_devices = 1;
  for (const auto& a : axes.value()) group_devices *= mesh.axis_size(mesh.AxisIndex(a));
  std::vector<std::string> notes;
  double operand = per_device, result = per_device;
  switch (kind.value()) {
    case CollectiveKind::kAllGather:
      for (const auto& a : axes.value()) {
        if (!shards_array(mesh.AxisIndex(a))) {
          return UsageError(kName, "axis " + a + " does not shard the array " + sharding_text +
                                       ", so an all-gather over it has nothing to gather" +
                                       (unreduced(mesh.AxisIndex(a)) ? " (for {U_" + a + "} use all-reduce or reduce-scatter)" : ""));
        }
      }
      result = per_device * static_cast<double>(group_devices);
      break;
    case CollectiveKind::kReduceScatter:
      for (const auto& a : axes.value()) {
        if (!unreduced(mesh.AxisIndex(a))) {
          return UsageError(kName, "a reduce-scatter over " + a + " needs an array unreduced over it, as in [I, J]{U_" + a + "}");
        }
      }
      result = per_device / static_cast<double>(group_devices);
      break;
    case CollectiveKind::kAllReduce:
      for (const auto& a : axes.value()) {
        if (!unreduced(mesh.AxisIndex(a))) notes.push_back("note: the array is not marked unreduced over " + a + " ({U_" + a + "})");
      }
      break;
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kCollectivePermute:
      break;
  }

  CollectiveCost cost;
  std::string groups_text;
  if (kind.value() == CollectiveKind::kCollectivePermute) {
    if (axes->size() != 1) return UsageError(kName, "collective-permute shifts along exactly one mesh axis (--axes X)");
    int64_t shift = 1;
    if (have_shift) {
      try {
        size_t used = 0;
        shift = std::stoll(shift_text, &used);
        if (used != shift_text.size()) throw 0;
      } catch (...) {
        return UsageError(kName, "--shift must be an integer, not '" + shift_text + "'");
      }
    }
    auto pairs = ShiftPairsAlongAxis(mesh, axes->front(), shift, !no_cyclic);
    if (!pairs.ok()) return UsageError(kName, pairs.error().message);
    auto c = EstimateCollectivePermute(topo, pairs.value(), per_device, options);
    if (!c.ok()) return UsageError(kName, c.error().message);
    cost = c.value();
    groups_text = std::to_string(pairs->size()) + " sends, shift " + std::to_string(shift) + " along " + axes->front() +
                  (no_cyclic ? " (not cyclic)" : " (cyclic)");
  } else {
    auto groups = ReplicaGroupsForAxes(mesh, axes.value());
    if (!groups.ok()) return UsageError(kName, groups.error().message);
    auto c = EstimateCollective(topo, kind.value(), groups.value(), operand, options);
    if (!c.ok()) return UsageError(kName, c.error().message);
    cost = c.value();
    groups_text = std::to_string(cost.num_groups) + " group" + (cost.num_groups == 1 ? "" : "s") + " of " +
                  std::to_string(cost.group_size) + " devices";
  }

  std::ostringstream out;
  out << "collective: " << CollectiveKindName(kind.value()) << " over " << Join(axes.value(), ",") << " (" << groups_text << ")\n";
  out << "chip: " << spec.name << " (ICI " << Sci(spec.ici_link_bandwidth) << " B/s per link one way, hop latency "
      << Fixed(spec.hop_latency * 1e6, 2) << " us)\n";
  out << "topology: " << topo.Describe() << "\n";
  out << "placement: " << topo.DescribePlacement() << "\n";
  out << "array: " << shape->ToString(false) << " " << sharding_text << ": " << Fixed(whole, 0) << " bytes whole, "
      << Fixed(per_device, 0) << " bytes per device\n";
  if (kind.value() != CollectiveKind::kCollectivePermute) {
    out << "operand per device: " << Fixed(operand, 0) << " bytes; result per device: " << Fixed(result, 0) << " bytes\n";
  }
  for (const auto& n : notes) out << n << "\n";
  out << "algorithm: " << cost.algorithm << "\n";
  out << "steps: " << cost.steps << "\n";
  out << "bytes moved per device: " << Fixed(cost.bytes_per_device, 0) << "\n";
  out << "link traffic: " << cost.link_traffic.size() << " one-way links carry data, " << Fixed(cost.total_link_bytes, 0)
      << " bytes x links in total\n";
  if (cost.busiest_link >= 0) {
    const TopologyLink& l = topo.link(cost.busiest_link);
    out << "busiest link: #" << l.id << " chip " << l.src << " -> " << (topo.is_switch() && l.dst == topo.switch_node() ? "switch" : "chip " + std::to_string(l.dst));
    if (l.axis >= 0) out << " (axis " << l.axis << (l.direction > 0 ? "+" : "-") << (l.wraparound ? ", wraparound" : "") << ")";
    out << ": " << Fixed(cost.max_link_bytes, 0) << " bytes = " << Fixed(cost.max_link_bytes / l.bandwidth * 1e6) << " us at "
        << Sci(l.bandwidth) << " B/s\n";
    // Per physical axis and direction: links used and their largest load.
    std::map<std::pair<int64_t, int>, std::pair<int64_t, double>> per_axis;
    for (const auto& t : cost.link_traffic) {
      const TopologyLink& k = topo.link(t.link);
      auto& e = per_axis[{k.axis, k.direction}];
      ++e.first;
      e.second = std::max(e.second, t.bytes);
    }
    for (const auto& [key, v] : per_axis) {
      out << "  " << (key.first < 0 ? std::string(key.second > 0 ? "up-links" : "down-links")
                                    : "axis " + std::to_string(key.first) + (key.second > 0 ? "+" : "-"))
          << ": " << v.first << " links, max " << Fixed(v.second, 0) << " bytes\n";
    }
  }
  out << "latency term: " << Fixed(cost.latency_time_s * 1e6) << " us; bandwidth term: " << Fixed(cost.bandwidth_time_s * 1e6)
      << " us (latency model: " << (options.latency_model == LatencyModel::kAdditive ? "additive" : "overlapped") << ")\n";
  out << "regime: " << CostRegimeName(cost.regime) << "\n";
  out << "time_us: " << Fixed(cost.time_s * 1e6) << "\n";
  std::cout << out.str();
  return 0;
}

const bool registered = Register(
    {kName,
     "KIND --chip CHIP --mesh X=8,Y=4 --shape bf16[2048,8192] --sharding \"[E_Y, F]\" --axes Y "
     "[--no-wraparound|--wraparound] [--topology 8x4] [--placement snake|row-major] [--mesh-order Y,X] [--cores-per-chip 2] [--one-direction] "
     "[--latency-model overlapped|additive] [--shift N] [--no-cyclic]",
     "Modelled time of one collective (all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute)", &Run});

}  // namespace
}  // namespace shardscope::cli
