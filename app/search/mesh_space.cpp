#include "app/search/mesh_space.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <set>
#include <sstream>

#include "core/base/units.h"
#include "simulator/mesh_placement.h"

namespace shardscope::search {

namespace {

std::string Join(const std::vector<int64_t>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i) continue;
    d.push_back(i);
    if (i != n / i) d.push_back(n / i);
  }
  std::sort(d.begin(), d.end());
  return d;
}

// Every ordered tuple of `k` factors (>= 1) whose product is n.
void OrderedFactorisations(int64_t n, size_t k, std::vector<int64_t>& cur, std::vector<std::vector<int64_t>>& out) {
  if (cur.size() + 1 == k) {
    cur.push_back(n);
    out.push_back(cur);
    cur.pop_back();
    return;
  }
  for (int64_t d : Divisors(n)) {
    cur.push_back(d);
    OrderedFactorisations(n / d, k, cur, out);
    cur.pop_back();
  }
}

}  // namespace

int64_t Pod::chips() const {
  int64_t n = 1;
  for (int64_t s : slice) n *= s;
  return n;
}

std::string Pod::SliceText() const { return Join(slice, "x"); }

std::string Pod::Describe() const {
  std::ostringstream os;
  os << chip.name << ": " << devices << " devices";
  if (chip.cores_per_chip > 1) os << " (" << chips() << " chips x " << chip.cores_per_chip << " cores)";
  os << ", slice " << SliceText();
  if (chip.interconnect == InterconnectKind::kGrid) {
    const std::vector<bool> wraps = Topology::GenerationWraparound(chip, slice);
    std::vector<int64_t> wrapped;
    for (size_t j = 0; j < wraps.size(); ++j)
      if (wraps[j]) wrapped.push_back(static_cast<int64_t>(j));
    os << (wrapped.empty() ? " (no wraparound)"
           : wrapped.size() == wraps.size() ? " (torus: wraparound on every axis)"
                                             : " (wraparound on axes " + Join(wrapped, ",") + ")");
  }
  os << ", " << FormatBytes(chip.device_hbm_bytes()) << " HBM per device";
  return os.str();
}

Result<std::vector<int64_t>> ParseSliceShape(std::string_view text) {
  std::vector<int64_t> dims;
  size_t start = 0;
  const std::string t(text);
  while (start <= t.size()) {
    size_t end = t.find_first_of("x,", start);
    if (end == std::string::npos) end = t.size();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data() + start, t.data() + end, v);
    if (ec != std::errc() || p != t.data() + end || v < 1)
      return Error("'" + t + "' is not a slice shape such as 4x8x8 (positive sizes separated by x)");
    dims.push_back(v);
    start = end + 1;
  }
  if (dims.empty()) return Error("empty slice shape");
  return dims;
}

Result<Pod> MakePod(const std::string& chip_name, int64_t devices, const std::string& slice_text, int64_t cores_per_chip) {
  auto resolved = ResolveChip(chip_name);
  if (!resolved.ok()) return resolved.error();
  ChipSpec chip = resolved.value();
  if (cores_per_chip == 0) cores_per_chip = chip.max_cores_per_chip;
  if (cores_per_chip != chip.cores_per_chip) {
    auto c = WithCoresPerChip(chip, cores_per_chip);
    if (!c.ok()) return c.error();
    chip = c.value();
  }
  if (devices < 1) return Error("the device count must be at least 1");
  const int64_t cores = chip.cores_per_chip;
  if (devices % cores != 0)
    return Error(std::to_string(devices) + " devices do not fill whole " + chip.name + " chips of " + std::to_string(cores) +
                 " cores; give an even count or --cores-per-chip 1");
  const int64_t chips = devices / cores;
  Pod pod;
  pod.chip = chip;
  pod.chip_name = chip_name;
  pod.devices = devices;
  int64_t pod_chips = 1;
  for (int64_t s : chip.pod_shape) pod_chips *= s;

  if (!slice_text.empty()) {
    auto shape = ParseSliceShape(slice_text);
    if (!shape.ok()) return shape.error();
    pod.slice = shape.value();
    if (pod.chips() != chips)
      return Error("slice " + pod.SliceText() + " has " + std::to_string(pod.chips()) + " chips, but " + std::to_string(devices) +
                   " devices need " + std::to_string(chips));
    if (chip.interconnect == InterconnectKind::kGrid && static_cast<int64_t>(pod.slice.size()) > chip.physical_dims)
      return Error("slice " + pod.SliceText() + " has more axes than a " + chip.name + " network (" +
                   std::to_string(chip.physical_dims) + "-D)");
    return pod;
  }
  if (!chip.pod_shape.empty() && chips > pod_chips)
    return Error(std::to_string(chips) + " chips are more than a " + chip.name + " pod holds (" + Join(chip.pod_shape, "x") +
                 " = " + std::to_string(pod_chips) + "); use a chip .json with a larger pod_shape for what-if studies");
  if (chip.interconnect == InterconnectKind::kSwitch || chip.physical_dims <= 1) {
    pod.slice = {chips};
    return pod;
  }
  // The most cubic shape within the pod whose axes the generation wraps most.
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> cur;
  OrderedFactorisations(chips, static_cast<size_t>(chip.physical_dims), cur, shapes);
  const std::vector<int64_t>* best = nullptr;
  int64_t best_wraps = -1;
  double best_ratio = 0;
  for (const auto& s : shapes) {
    bool fits = true;
    for (size_t j = 0; j < s.size() && j < chip.pod_shape.size(); ++j) fits = fits && s[j] <= chip.pod_shape[j];
    if (!fits) continue;
    const std::vector<bool> w = Topology::GenerationWraparound(chip, s);
    int64_t wraps = 0;
    for (size_t j = 0; j < w.size(); ++j) wraps += w[j] && s[j] > 2 ? 1 : 0;
    const double ratio = static_cast<double>(*std::max_element(s.begin(), s.end())) /
                         static_cast<double>(*std::min_element(s.begin(), s.end()));
    const bool ascending = std::is_sorted(s.begin(), s.end());
    const bool better = !best || wraps > best_wraps || (wraps == best_wraps && ratio < best_ratio) ||
                        (wraps == best_wraps && ratio == best_ratio && ascending && !std::is_sorted(best->begin(), best->end()));
    if (better) {
      best = &s;
      best_wraps = wraps;
      best_ratio = ratio;
    }
  }
  if (!best) return Error("no " + chip.name + " slice of " + std::to_string(chips) + " chips fits in its pod " + Join(chip.pod_shape, "x"));
  pod.slice = *best;
  return pod;
}

// ---- placement -------------------------------------------------------------------------------------

std::string MeshChoice::Describe() const {
  std::string s = mesh.ToString();
  if (axis_text.empty()) return s;
  s += " (";
  for (size_t a = 0; a < axis_text.size(); ++a) s += (a ? "; " : "") + mesh.axes()[a].name + ": " + axis_text[a];
  return s + ")";
}

Result<MeshChoice> PlaceMesh(const Pod& pod, const DeviceMesh& mesh, std::string_view order_text, bool require_boxes) {
  if (mesh.num_devices() != pod.devices)
    return Error("mesh " + mesh.ToString() + " has " + std::to_string(mesh.num_devices()) + " devices, the pod " +
                 std::to_string(pod.devices));
  auto placed = PlaceMeshInOrder(pod.chip, pod.slice, mesh, order_text, require_boxes);
  if (!placed.ok()) return placed.error();
  return MeshChoice{mesh, std::move(placed->order), std::move(placed->device_to_chip), std::move(placed->axis_text),
                    placed->canonical};
}

Result<Topology> TopologyFor(const Pod& pod, const MeshChoice& choice) {
  TopologyOptions options;
  if (pod.chip.interconnect == InterconnectKind::kGrid && !choice.order.empty()) {
    // The simulator lays the mesh in the choice's order (PlaceMeshInOrder, as the choice was
    // made), so `simulate --mesh-order` and the GUI run a candidate on the placement it was ranked on.
    options.mesh_order = choice.order;
    return Topology::ForMesh(pod.chip, choice.mesh, pod.slice, options);
  }
  options.device_to_chip = choice.device_to_chip;
  return Topology::Create(pod.chip, pod.slice, options);
}

std::vector<MeshChoice> EnumerateMeshes(const Pod& pod, const std::vector<std::string>& axis_names) {
  std::vector<MeshChoice> out;
  if (axis_names.empty()) return out;
  std::vector<std::vector<int64_t>> sizes;
  std::vector<int64_t> cur;
  OrderedFactorisations(pod.devices, axis_names.size(), cur, sizes);
  std::sort(sizes.begin(), sizes.end());
  for (const auto& s : sizes) {
    std::vector<MeshAxis> axes;
    for (size_t a = 0; a < s.size(); ++a) axes.push_back({axis_names[a], s[a]});
    const DeviceMesh mesh(axes);
    // The placement rule ForMesh shares (simulator/mesh_placement.h): boxes, the mesh's own order first.
    auto placed = PlaceMeshOnBoxes(pod.chip, pod.slice, mesh);
    if (placed.ok())
      out.push_back(MeshChoice{mesh, std::move(placed->order), std::move(placed->device_to_chip),
                               std::move(placed->axis_text), placed->canonical});
  }
  return out;
}

}  // namespace shardscope::search
