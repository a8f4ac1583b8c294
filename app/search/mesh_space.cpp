#include "app/search/mesh_space.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <set>
#include <sstream>

#include "core/base/units.h"

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

// A physical dimension of the pod, minor first: the cores of a chip (axis -1), then the slice's
// axes from the last to the first.
struct PhysicalDim {
  int64_t axis = -1;  // -1: cores
  int64_t size = 1;
};

std::vector<PhysicalDim> PhysicalDims(const Pod& pod) {
  std::vector<PhysicalDim> dims;
  if (pod.chip.cores_per_chip > 1) dims.push_back({-1, pod.chip.cores_per_chip});
  for (int64_t j = static_cast<int64_t>(pod.slice.size()) - 1; j >= 0; --j) dims.push_back({j, pod.slice[static_cast<size_t>(j)]});
  return dims;
}

// A factor of one physical dimension that one mesh axis took: mesh-axis digit d sits at physical
// coordinate d * stride along that dimension.
struct Piece {
  size_t dim = 0;
  int64_t factor = 1;
  int64_t stride = 1;
};

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
  const size_t naxes = static_cast<size_t>(mesh.num_axes());
  // The order: mesh axis indices, minor first.
  std::vector<size_t> order;
  if (order_text.empty()) {
    for (size_t a = naxes; a-- > 0;) order.push_back(a);
  } else {
    std::string t(order_text);
    size_t start = 0;
    while (start <= t.size()) {
      size_t end = t.find(',', start);
      if (end == std::string::npos) end = t.size();
      const int64_t a = mesh.AxisIndex(t.substr(start, end - start));
      if (a < 0) return Error("placement order '" + t + "' names an axis the mesh " + mesh.ToString() + " does not have");
      order.push_back(static_cast<size_t>(a));
      start = end + 1;
    }
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    if (sorted.size() != naxes || order.size() != naxes)
      return Error("placement order '" + t + "' must name every axis of " + mesh.ToString() + " once");
  }
  MeshChoice choice;
  choice.mesh = mesh;
  choice.canonical = true;
  for (size_t k = 0; k < order.size(); ++k) choice.canonical = choice.canonical && order[k] == naxes - 1 - k;
  for (size_t k = 0; k < order.size(); ++k)
    choice.order += (k ? "," : "") + mesh.axes()[order[k]].name;

  std::vector<PhysicalDim> dims = PhysicalDims(pod);
  std::vector<int64_t> remaining(dims.size()), stride(dims.size(), 1);
  for (size_t k = 0; k < dims.size(); ++k) remaining[k] = dims[k].size;
  std::vector<std::vector<Piece>> pieces(naxes);
  size_t cursor = 0;
  for (size_t a : order) {
    int64_t s = mesh.axis_size(static_cast<int64_t>(a));
    while (s > 1) {
      while (cursor < dims.size() && remaining[cursor] == 1) ++cursor;
      if (cursor >= dims.size()) return Error("mesh " + mesh.ToString() + " does not fit the slice");
      const int64_t r = remaining[cursor];
      int64_t take = 0;
      if (r % s == 0) take = s;
      else if (s % r == 0) take = r;
      else
        return Error("mesh axis " + mesh.axes()[a].name + " = " + std::to_string(mesh.axis_size(static_cast<int64_t>(a))) +
                     " does not divide the slice's dimensions in placement order " + choice.order);
      pieces[a].push_back({cursor, take, stride[cursor]});
      stride[cursor] *= take;
      remaining[cursor] /= take;
      s /= take;
    }
  }

  // Chip of every device.
  const int64_t n = pod.devices;
  const size_t m = pod.slice.size();
  choice.device_to_chip.assign(static_cast<size_t>(n), 0);
  std::vector<int64_t> coords(naxes), phys(m);
  auto chip_of = [&](const std::vector<int64_t>& c) {
    std::fill(phys.begin(), phys.end(), 0);
    for (size_t a = 0; a < naxes; ++a) {
      int64_t x = c[a];
      for (const Piece& p : pieces[a]) {
        const int64_t digit = x % p.factor;
        x /= p.factor;
        if (dims[p.dim].axis >= 0) phys[static_cast<size_t>(dims[p.dim].axis)] += digit * p.stride;
      }
    }
    int64_t chip = 0;
    for (size_t j = 0; j < m; ++j) chip = chip * pod.slice[j] + phys[j];
    return chip;
  };
  for (int64_t d = 0; d < n; ++d) {
    int64_t rest = d;
    for (size_t a = naxes; a-- > 0;) {
      const int64_t size = mesh.axis_size(static_cast<int64_t>(a));
      coords[a] = rest % size;
      rest /= size;
    }
    choice.device_to_chip[static_cast<size_t>(d)] = chip_of(coords);
  }

  // Each axis: its group through device 0 must be a box of chips.
  const std::vector<bool> wraps = pod.chip.interconnect == InterconnectKind::kGrid
                                      ? Topology::GenerationWraparound(pod.chip, pod.slice)
                                      : std::vector<bool>(m, false);
  for (size_t a = 0; a < naxes; ++a) {
    std::set<std::vector<int64_t>> chips;
    std::vector<int64_t> c(naxes, 0);
    const int64_t size = mesh.axis_size(static_cast<int64_t>(a));
    for (int64_t i = 0; i < size; ++i) {
      c[a] = i;
      int64_t chip = chip_of(c);
      std::vector<int64_t> pc(m);
      for (size_t j = m; j-- > 0;) {
        pc[j] = chip % pod.slice[j];
        chip /= pod.slice[j];
      }
      chips.insert(pc);
    }
    int64_t box = 1;
    for (size_t j = 0; j < m; ++j) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (const auto& pc : chips) {
        lo = std::min(lo, pc[j]);
        hi = std::max(hi, pc[j]);
      }
      box *= hi - lo + 1;
    }
    if (box != static_cast<int64_t>(chips.size()) && require_boxes)
      return Error("mesh axis " + mesh.axes()[a].name + " is strided over the chips in placement order " + choice.order);
    // Text: the pieces, major first.
    std::string text;
    for (size_t k = pieces[a].size(); k-- > 0;) {
      const Piece& p = pieces[a][k];
      const PhysicalDim& d = dims[p.dim];
      if (!text.empty()) text += " x ";
      if (d.axis < 0) {
        text += std::to_string(p.factor) + " cores";
      } else {
        const bool whole = p.factor == d.size;
        text += std::to_string(p.factor) + (whole ? " (all) of" : " of") + " axis " + std::to_string(d.axis);
        if (whole && wraps[static_cast<size_t>(d.axis)] && d.size > 2) text += " (ring)";
      }
    }
    if (text.empty()) text = "1";
    if (box != static_cast<int64_t>(chips.size())) text += " (strided)";
    choice.axis_text.push_back(text);
  }
  return choice;
}

Result<Topology> TopologyFor(const Pod& pod, const MeshChoice& choice) {
  TopologyOptions options;
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
    auto placed = PlaceMesh(pod, mesh);
    if (placed.ok()) {
      out.push_back(std::move(placed).value());
      continue;
    }
    // Other orders, in lexicographic order of axis indices.
    std::vector<size_t> idx(axis_names.size());
    std::iota(idx.begin(), idx.end(), 0);
    bool placed_as_boxes = false;
    do {
      std::string order;
      for (size_t k = 0; k < idx.size(); ++k) order += (k ? "," : "") + axis_names[idx[k]];
      auto alt = PlaceMesh(pod, mesh, order);
      if (alt.ok()) {
        out.push_back(std::move(alt).value());
        placed_as_boxes = true;
        break;
      }
    } while (std::next_permutation(idx.begin(), idx.end()));
    // No order keeps every axis on a box (16 x 128 on 32x32 chips of 2 cores): the canonical
    // placement with its strided axis, whose collectives the simulator routes hop by hop.
    if (!placed_as_boxes) {
      auto strided = PlaceMesh(pod, mesh, {}, /*require_boxes=*/false);
      if (strided.ok()) out.push_back(std::move(strided).value());
    }
  }
  return out;
}

}  // namespace shardscope::search
