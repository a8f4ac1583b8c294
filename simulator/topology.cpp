#include "simulator/topology.h"

#include "simulator/mesh_placement.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <sstream>

namespace shardscope::sim {

namespace {

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += "x";
    s += std::to_string(dims[i]);
  }
  return s;
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

}  // namespace

// Which axes of a slice of `shape` wrap: the options' override, else the generation's rule; never on
// a switch or an axis of fewer than 3 chips when forced.
static Result<std::vector<bool>> SliceWraparound(const ChipSpec& chip, const std::vector<int64_t>& shape,
                                          const TopologyOptions& options) {
  std::vector<bool> wraps;
  if (options.wraparound_per_axis) {
    if (options.wraparound_per_axis->size() != shape.size()) {
      return Error("wraparound override has " + std::to_string(options.wraparound_per_axis->size()) +
                   " flag(s) but the slice " + DimsText(shape) + " has " + std::to_string(shape.size()) + " axes");
    }
    wraps = *options.wraparound_per_axis;
    for (size_t i = 0; i < shape.size(); ++i) wraps[i] = wraps[i] && shape[i] >= 3;
  } else if (options.wraparound == TopologyOptions::Wraparound::kAll) {
    wraps.assign(shape.size(), false);
    for (size_t i = 0; i < shape.size(); ++i) wraps[i] = shape[i] >= 3;
  } else if (options.wraparound == TopologyOptions::Wraparound::kNone) {
    wraps.assign(shape.size(), false);
  } else {
    wraps = Topology::GenerationWraparound(chip, shape);
  }
  if (chip.interconnect == InterconnectKind::kSwitch) wraps.assign(shape.size(), false);
  return wraps;
}

std::vector<bool> Topology::GenerationWraparound(const ChipSpec& chip, const std::vector<int64_t>& shape) {
  std::vector<bool> w(shape.size(), false);
  if (chip.interconnect == InterconnectKind::kSwitch) return w;
  switch (chip.wraparound) {
    case WraparoundRule::kNever:
      break;
    case WraparoundRule::kAlways:
      for (size_t i = 0; i < shape.size(); ++i) w[i] = shape[i] >= 3;
      break;
    case WraparoundRule::kAxisOf16:
      for (size_t i = 0; i < shape.size(); ++i) w[i] = shape[i] == 16;
      break;
    case WraparoundRule::kFullCubes: {
      bool cubes = !shape.empty();
      for (int64_t d : shape) cubes = cubes && d % 4 == 0;
      for (size_t i = 0; i < shape.size(); ++i) w[i] = cubes && shape[i] >= 3;
      break;
    }
    case WraparoundRule::kFullPodOnly: {
      std::vector<int64_t> a = shape, b = chip.pod_shape;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      const bool full = !b.empty() && a == b;
      for (size_t i = 0; i < shape.size(); ++i) w[i] = full && shape[i] >= 3;
      break;
    }
  }
  return w;
}

Result<Topology> Topology::Create(const ChipSpec& chip, std::vector<int64_t> shape, const TopologyOptions& options) {
  Status valid = ValidateChipSpec(chip);
  if (!valid.ok()) return valid.error();
  if (shape.empty()) return Error("the slice shape is empty (give the number of chips along each axis, e.g. 4x4)");
  for (int64_t d : shape) {
    if (d < 1) return Error("slice shape " + DimsText(shape) + " has an axis of size < 1");
  }
  Topology t;
  t.chip_ = chip;
  if (chip.interconnect == InterconnectKind::kSwitch) {
    const int64_t n = Product(shape);
    shape = {n};
  } else {
    // Drop extra trailing 1s, then pad to the chip's dimensionality.
    while (static_cast<int64_t>(shape.size()) > chip.physical_dims && shape.back() == 1) shape.pop_back();
    if (static_cast<int64_t>(shape.size()) > chip.physical_dims) {
      return Error("slice shape " + DimsText(shape) + " has " + std::to_string(shape.size()) + " axes but " +
                   chip.name + " chips form a " + std::to_string(chip.physical_dims) + "-D network");
    }
    while (static_cast<int64_t>(shape.size()) < chip.physical_dims) shape.push_back(1);
  }
  t.shape_ = shape;
  t.num_chips_ = Product(shape);
  if (t.num_chips_ > (int64_t{1} << 24)) return Error("slice of " + std::to_string(t.num_chips_) + " chips is too large");
  const int64_t pod_chips = chip.pod_shape.empty() ? 0 : Product(chip.pod_shape);
  if (pod_chips > 0 && t.num_chips_ > pod_chips && !options.allow_larger_than_pod) {
    return Error("slice " + DimsText(shape) + " has " + std::to_string(t.num_chips_) + " chips but a " + chip.name +
                 (chip.interconnect == InterconnectKind::kSwitch ? " node" : " pod") + " has " +
                 std::to_string(pod_chips) + " (" + DimsText(chip.pod_shape) +
                 "); use a custom chip JSON with a larger pod_shape for what-if studies");
  }

  // Wraparound.
  auto wraps = SliceWraparound(chip, shape, options);
  if (!wraps.ok()) return wraps.error();
  t.wraps_ = std::move(wraps).value();

  // Links.
  const int64_t axes = t.num_axes();
  t.out_links_.assign(static_cast<size_t>(t.num_nodes()), {});
  auto add_link = [&](int64_t src, int64_t dst, int64_t axis, int dir, bool wrap, double latency) {
    TopologyLink l;
    l.id = static_cast<int64_t>(t.links_.size());
    l.src = src;
    l.dst = dst;
    l.axis = axis;
    l.direction = dir;
    l.wraparound = wrap;
    l.bandwidth = chip.ici_link_bandwidth;
    l.latency = latency;
    t.out_links_[static_cast<size_t>(src)].push_back(l.id);
    t.links_.push_back(l);
    return l.id;
  };
  if (t.is_switch()) {
    // Up-link of chip c is link 2c, its down-link 2c+1.
    for (int64_t c = 0; c < t.num_chips_; ++c) {
      add_link(c, t.num_chips_, -1, +1, false, chip.hop_latency / 2);
      add_link(t.num_chips_, c, -1, -1, false, chip.hop_latency / 2);
    }
  } else {
    t.neighbor_.assign(static_cast<size_t>(t.num_chips_ * 2 * axes), -1);
    for (int64_t c = 0; c < t.num_chips_; ++c) {
      const std::vector<int64_t> coords = t.ChipCoords(c);
      for (int64_t a = 0; a < axes; ++a) {
        const int64_t n = shape[static_cast<size_t>(a)];
        const int64_t x = coords[static_cast<size_t>(a)];
        int64_t nx = -1;
        bool wrap = false;
        if (x + 1 < n) {
          nx = x + 1;
        } else if (t.wraps_[static_cast<size_t>(a)]) {
          nx = 0;
          wrap = true;
        }
        if (nx < 0) continue;
        std::vector<int64_t> nc = coords;
        nc[static_cast<size_t>(a)] = nx;
        const int64_t other = t.ChipAt(nc);
        const int64_t fwd = add_link(c, other, a, +1, wrap, chip.hop_latency);
        const int64_t back = add_link(other, c, a, -1, wrap, chip.hop_latency);
        t.neighbor_[static_cast<size_t>(c * 2 * axes + a * 2 + 0)] = fwd;
        t.neighbor_[static_cast<size_t>(other * 2 * axes + a * 2 + 1)] = back;
      }
    }
  }

  // Placement.
  std::vector<int64_t> placement = options.device_to_chip;
  if (placement.empty()) {
    placement.resize(static_cast<size_t>(t.num_devices()));
    for (int64_t d = 0; d < t.num_devices(); ++d) placement[static_cast<size_t>(d)] = d / chip.cores_per_chip;
  }
  Status s = t.SetDeviceToChip(std::move(placement));
  if (!s.ok()) return s.error();
  return t;
}

std::string_view MeshPlacementName(MeshPlacement p) { return p == MeshPlacement::kRowMajor ? "row-major" : "snake"; }

Result<MeshPlacement> MeshPlacementFromName(std::string_view name) {
  if (name == "snake") return MeshPlacement::kSnake;
  if (name == "row-major") return MeshPlacement::kRowMajor;
  return Error("unknown placement '" + std::string(name) + "' (expected snake or row-major)");
}

Result<std::vector<int64_t>> ParseSliceShape(std::string_view text) {
  const std::string bad = "'" + std::string(text) + "' is not a slice shape such as 4x4x4 (chips per axis, 1 to 3 axes)";
  std::vector<int64_t> shape;
  std::string cur;
  for (char c : std::string(text) + "x") {
    if (c == 'x' || c == 'X' || c == ',') {
      if (cur.empty() || cur.size() > 9) return Error(bad);
      shape.push_back(std::stoll(cur));
      if (shape.back() < 1) return Error(bad);
      cur.clear();
    } else if (c >= '0' && c <= '9') {
      cur += c;
    } else if (c != ' ') {
      return Error(bad);
    }
  }
  if (shape.size() > 3) return Error(bad);
  return shape;
}

std::string SliceShapeString(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

namespace {

// `shape` with trailing 1s dropped and padded with 1s to `dims` axes.
std::vector<int64_t> ToDims(std::vector<int64_t> shape, int64_t dims) {
  while (static_cast<int64_t>(shape.size()) > dims && !shape.empty() && shape.back() == 1) shape.pop_back();
  while (static_cast<int64_t>(shape.size()) < dims) shape.push_back(1);
  return shape;
}

// True when a slice of `shape` chips fits the pod axis by axis (in some order of the axes).
bool FitsPod(const ChipSpec& chip, std::vector<int64_t> shape) {
  if (chip.pod_shape.empty() || chip.interconnect == InterconnectKind::kSwitch) return true;
  shape = ToDims(shape, chip.physical_dims);
  std::vector<int64_t> pod = chip.pod_shape;
  if (shape.size() != pod.size()) return false;
  std::sort(shape.begin(), shape.end());
  std::sort(pod.begin(), pod.end());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] > pod[i]) return false;
  }
  return true;
}

// One factor of a mesh axis laid on a physical axis: `size` consecutive coordinates `stride` apart.
struct AxisFactor {
  int64_t axis = 0;
  int64_t size = 1;
  int64_t stride = 1;
};

// A mesh laid on a slice: the chip of each mesh position (row-major over the mesh axes) and a line
// saying how, or an error when the mesh's axes do not factor onto the slice's.
struct MeshOnSlice {
  std::vector<int64_t> chip_of_position;
  std::vector<std::vector<AxisFactor>> factors;  // per mesh axis, innermost first
  int64_t core_axis = -1;                        // the mesh axis whose innermost devices share a chip
};

// Lays the mesh with the cores of a chip on mesh axis `core_axis` (-1: one core per chip): the
// factors of every axis, inner physical axes first.
Result<MeshOnSlice> LayAxes(const DeviceMesh& mesh, const std::vector<int64_t>& shape, int64_t cores, int64_t core_axis) {
  MeshOnSlice out;
  out.core_axis = core_axis;
  const size_t m = static_cast<size_t>(mesh.num_axes());
  std::vector<int64_t> chip_sizes;
  for (const auto& a : mesh.axes()) chip_sizes.push_back(a.size);
  if (out.core_axis >= 0) chip_sizes[static_cast<size_t>(out.core_axis)] /= cores;
  // Later mesh axes take the inner factors of the later physical axes.
  std::vector<int64_t> cap = shape, next_stride(shape.size(), 1);
  int64_t p = static_cast<int64_t>(shape.size()) - 1;
  out.factors.assign(m, {});
  for (size_t i = m; i-- > 0;) {
    int64_t s = chip_sizes[i];
    while (s > 1) {
      while (p >= 0 && cap[static_cast<size_t>(p)] == 1) --p;
      if (p < 0) return Error("its axes need more chips than the slice has");
      const size_t pa = static_cast<size_t>(p);
      const int64_t r = cap[pa];
      const int64_t take = r % s == 0 ? s : (s % r == 0 ? r : 0);
      if (take == 0) {
        return Error("axis " + mesh.axes()[i].name + " (" + std::to_string(chip_sizes[i]) + " chips) does not factor onto " +
                     "physical axis " + std::to_string(p) + " (" + std::to_string(shape[pa]) + " chips)");
      }
      out.factors[i].push_back({p, take, next_stride[pa]});
      next_stride[pa] *= take;
      cap[pa] /= take;
      s /= take;
    }
  }
  return out;
}

// Mesh axes of a layout that are closed rings of chips: every factor a whole physical axis that
// wraps (one such axis, a ring; an axis laid over several, a snake that closes when they wrap).
int64_t ClosedRings(const MeshOnSlice& laid, const std::vector<int64_t>& shape, const std::vector<bool>& wraps) {
  int64_t rings = 0;
  for (const auto& f : laid.factors) {
    if (f.empty()) continue;
    bool closed = true;
    for (const AxisFactor& x : f) {
      const size_t a = static_cast<size_t>(x.axis);
      closed = closed && x.size == shape[a] && a < wraps.size() && wraps[a];
    }
    if (closed) ++rings;
  }
  return rings;
}

Result<MeshOnSlice> LayMesh(const DeviceMesh& mesh, const std::vector<int64_t>& shape, int64_t cores,
                            MeshPlacement placement, const std::vector<bool>& wraps) {
  const size_t m = static_cast<size_t>(mesh.num_axes());
  std::vector<int64_t> sizes;
  for (const auto& a : mesh.axes()) sizes.push_back(a.size);
  // The cores of a chip are the minor-most devices by default: the last axis that is not 1
  // (divisible). Another divisible axis takes them when that leaves more mesh axes as closed
  // rings of chips (X=64,Y=32 on the 32x32 v3 pod: the cores on X make both axes whole wrapped
  // physical axes, where cores on Y lay Y on half an axis, an open line).
  Result<MeshOnSlice> best = LayAxes(mesh, shape, cores, -1);
  if (cores > 1) {
    int64_t last = -1;
    for (size_t i = m; i-- > 0;) {
      if (sizes[i] == 1) continue;
      if (sizes[i] % cores == 0) last = static_cast<int64_t>(i);
      break;
    }
    if (last < 0) return Error("its last axis is not divisible by " + std::to_string(cores));
    best = LayAxes(mesh, shape, cores, last);
    int64_t best_rings = best.ok() ? ClosedRings(best.value(), shape, wraps) : -1;
    for (size_t i = m; i-- > 0;) {
      if (static_cast<int64_t>(i) == last || sizes[i] == 1 || sizes[i] % cores != 0) continue;
      auto other = LayAxes(mesh, shape, cores, static_cast<int64_t>(i));
      if (!other.ok()) continue;
      const int64_t rings = ClosedRings(other.value(), shape, wraps);
      if (rings > best_rings) {
        best = std::move(other);
        best_rings = rings;
      }
    }
  }
  if (!best.ok()) return best.error();
  MeshOnSlice out = std::move(best).value();
  // Every mesh position's chip.
  const int64_t n = mesh.num_devices();
  out.chip_of_position.resize(static_cast<size_t>(n));
  std::vector<int64_t> index(m, 0), coords(shape.size());
  for (int64_t pos = 0; pos < n; ++pos) {
    int64_t rest = pos;
    for (size_t i = m; i-- > 0;) {
      index[i] = rest % sizes[i];
      rest /= sizes[i];
    }
    std::fill(coords.begin(), coords.end(), 0);
    for (size_t i = 0; i < m; ++i) {
      int64_t v = index[i];
      if (static_cast<int64_t>(i) == out.core_axis) v /= cores;
      const auto& f = out.factors[i];
      // Digits from the outermost factor in; a snake reflects the inner digits after an odd one.
      int64_t below = 1;
      for (const AxisFactor& x : f) below *= x.size;
      bool reflect = false;
      for (size_t k = f.size(); k-- > 0;) {
        below /= f[k].size;
        const int64_t raw = v / below;
        v %= below;
        const int64_t digit = reflect ? f[k].size - 1 - raw : raw;
        coords[static_cast<size_t>(f[k].axis)] += digit * f[k].stride;
        if (placement == MeshPlacement::kSnake && raw % 2 == 1) reflect = !reflect;
      }
    }
    int64_t chip = 0;
    for (size_t a = 0; a < shape.size(); ++a) chip = chip * shape[a] + coords[a];
    out.chip_of_position[static_cast<size_t>(pos)] = chip;
  }
  return out;
}

}  // namespace

Result<std::vector<int64_t>> Topology::SliceShapeFor(const ChipSpec& chip, int64_t chips) {
  if (chips < 1) return Error("a slice needs at least one chip");
  if (chip.interconnect == InterconnectKind::kSwitch) return std::vector<int64_t>{chips};
  const size_t dims = static_cast<size_t>(std::max<int64_t>(1, chip.physical_dims));
  std::vector<int64_t> shape(dims, 1);
  std::vector<int64_t> pod = chip.pod_shape;
  std::sort(pod.begin(), pod.end());
  // The limit of the axis that is the k-th smallest once the shape is sorted.
  auto fits = [&](const std::vector<int64_t>& candidate) { return pod.empty() || FitsPod(chip, candidate); };
  int64_t rest = chips;
  while (rest % 2 == 0) {
    // Double the smallest axis that may grow (ties: the last), keeping larger axes last.
    bool grown = false;
    std::vector<size_t> order(dims);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return shape[x] != shape[y] ? shape[x] < shape[y] : x > y;
    });
    for (size_t a : order) {
      std::vector<int64_t> candidate = shape;
      candidate[a] *= 2;
      if (!fits(candidate)) continue;
      shape = candidate;
      grown = true;
      break;
    }
    if (!grown) break;
    rest /= 2;
  }
  if (rest > 1) {
    std::vector<int64_t> candidate = shape;
    candidate.back() *= rest;
    if (!fits(candidate)) {
      return Error(std::to_string(chips) + " " + chip.name + " chips do not form a slice of its pod (" + DimsText(chip.pod_shape) + ")");
    }
    shape = candidate;
  }
  std::sort(shape.begin(), shape.end());
  return shape;
}

Result<Topology> Topology::ForMesh(const ChipSpec& chip, const DeviceMesh& mesh, std::vector<int64_t> chip_shape,
                                   const TopologyOptions& options) {
  const int64_t n = mesh.num_devices();
  if (n < 1) return Error("the mesh has no devices");
  const int64_t cores = chip.cores_per_chip;
  if (n < cores && cores % n == 0 && (chip_shape.empty() || Product(chip_shape) == 1)) {
    // Fewer devices than one chip has cores (one core of a two-core v3 chip): that chip with the
    // cores the mesh uses.
    auto part = WithCoresInUse(chip, n);
    if (!part.ok()) return part.error();
    return ForMesh(part.value(), mesh, std::move(chip_shape), options);
  }
  if (n % cores != 0) {
    return Error("mesh " + mesh.ToString() + " has " + std::to_string(n) + " devices, not a multiple of the " +
                 std::to_string(cores) + " devices per chip");
  }
  bool iota = true;
  {
    std::vector<int64_t> ids = mesh.device_order();
    for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) iota = iota && ids[static_cast<size_t>(i)] == i;
    std::sort(ids.begin(), ids.end());
    for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) {
      if (ids[static_cast<size_t>(i)] != i) {
        return Error("mesh " + mesh.ToString() + " must use device ids 0.." + std::to_string(n - 1) + " exactly once");
      }
    }
  }
  bool own_shape = false;  // the slice is the mesh's own shape
  if (chip_shape.empty()) {
    if (chip.interconnect == InterconnectKind::kSwitch) {
      chip_shape = {n / cores};
    } else {
      std::vector<int64_t> sizes;
      for (const auto& a : mesh.axes()) sizes.push_back(a.size);
      if (cores > 1) {
        // The cores of a chip are the minor-most devices: halve the last axis that is divisible.
        bool done = false;
        for (size_t i = sizes.size(); i-- > 0;) {
          if (sizes[i] % cores == 0) {
            sizes[i] /= cores;
            done = true;
            break;
          }
          if (sizes[i] != 1) break;
        }
        if (!done) {
          return Error("cannot place mesh " + mesh.ToString() + " on chips with " + std::to_string(cores) +
                       " devices each: its last axis is not divisible by " + std::to_string(cores) +
                       " (give the slice shape explicitly)");
        }
      }
      sizes.erase(std::remove(sizes.begin(), sizes.end(), int64_t{1}), sizes.end());
      if (sizes.empty()) sizes.push_back(1);
      const size_t d = static_cast<size_t>(chip.physical_dims);
      while (sizes.size() > d) {
        sizes[1] *= sizes[0];
        sizes.erase(sizes.begin());
      }
      chip_shape = sizes;
      own_shape = true;
      if (!FitsPod(chip, chip_shape)) {
        // Not a slice of this generation: the slice a real system gives that many chips.
        auto slice = SliceShapeFor(chip, n / cores);
        if (slice.ok()) {
          chip_shape = slice.value();
          own_shape = false;
        }
      }
    }
  }
  if (Product(chip_shape) * cores != n) {
    return Error("slice " + DimsText(chip_shape) + " has " + std::to_string(Product(chip_shape)) + " chips (" +
                 std::to_string(Product(chip_shape) * cores) + " devices) but mesh " + mesh.ToString() + " has " +
                 std::to_string(n) + " devices");
  }
  TopologyOptions o = options;
  std::optional<MeshOnSlice> laid;
  std::optional<OrderedMeshPlacement> boxed;
  if (!o.mesh_order.empty()) {
    // Laid in the order given (the search's placement of a candidate).
    if (chip.interconnect != InterconnectKind::kGrid)
      return Error("a mesh order places a mesh on a torus slice; " + chip.name + " has no torus");
    if (!o.device_to_chip.empty()) return Error("a mesh order and an explicit device placement contradict each other");
    if (!iota) return Error("a mesh order places devices 0.." + std::to_string(n - 1) + " in mesh order; mesh " +
                            mesh.ToString() + " lists them in another");
    const std::vector<int64_t> shape = ToDims(chip_shape, std::max<int64_t>(chip.physical_dims, 1));
    auto wraps = SliceWraparound(chip, shape, o);
    if (!wraps.ok()) return wraps.error();
    auto placed = PlaceMeshInOrder(chip, shape, mesh, o.mesh_order, /*require_boxes=*/false, &wraps.value());
    if (!placed.ok())
      return Error("cannot lay mesh " + mesh.ToString() + " in order " + o.mesh_order + " on a " + DimsText(chip_shape) + " " +
                   chip.name + " slice: " + placed.error().message);
    o.device_to_chip = placed->device_to_chip;
    auto t = Create(chip, std::move(chip_shape), o);
    if (!t.ok()) return t;
    std::string text = "in order " + placed->order + " (minor first, as given): ";
    for (size_t i = 0; i < placed->axis_text.size(); ++i)
      text += (i ? "; " : "") + mesh.axes()[i].name + "=" + std::to_string(mesh.axes()[i].size) + " on " + placed->axis_text[i];
    t->placement_ = text;
    return t;
  }
  if (o.device_to_chip.empty() && chip.interconnect != InterconnectKind::kSwitch && (iota || !own_shape)) {
    std::vector<int64_t> shape = chip_shape;
    if (chip.interconnect == InterconnectKind::kGrid) shape = ToDims(shape, std::max<int64_t>(chip.physical_dims, 1));
    auto wraps = SliceWraparound(chip, shape, o);
    if (!wraps.ok()) return wraps.error();
    auto l = LayMesh(mesh, shape, cores, o.placement, wraps.value());
    if (!l.ok() && !own_shape) {
      return Error("cannot place mesh " + mesh.ToString() + " on a " + DimsText(chip_shape) + " " + chip.name + " slice: " +
                   l.error().message + " (give the slice shape with the topology option)");
    }
    if (l.ok()) {
      laid = std::move(l).value();
      o.device_to_chip.assign(static_cast<size_t>(n), 0);
      for (int64_t pos = 0; pos < n; ++pos) {
        o.device_to_chip[static_cast<size_t>(mesh.device_order()[static_cast<size_t>(pos)])] = laid->chip_of_position[static_cast<size_t>(pos)];
      }
      // The mesh's own order leaves an axis strided over the chips (its collectives would hop over
      // chips of other groups): the order that puts every axis on a box of chips, as the strategy
      // search places its meshes (simulator/mesh_placement.h).
      if (iota && chip.interconnect == InterconnectKind::kGrid && !EveryAxisOnABox(shape, mesh, o.device_to_chip)) {
        auto boxes = PlaceMeshOnBoxes(chip, shape, mesh, &wraps.value());
        if (boxes.ok() && boxes->boxes) {
          o.device_to_chip = boxes->device_to_chip;
          boxed = std::move(boxes).value();
        }
      }
    }
  }
  auto t = Create(chip, std::move(chip_shape), o);
  if (!t.ok() || !laid) return t;
  if (boxed) {
    std::string text = "in order " + boxed->order + " (minor first), every axis on a box of chips (the mesh's own order strides one): ";
    for (size_t i = 0; i < boxed->axis_text.size(); ++i)
      text += (i ? "; " : "") + mesh.axes()[i].name + "=" + std::to_string(mesh.axes()[i].size) + " on " + boxed->axis_text[i];
    t->placement_ = text;
    return t;
  }
  // Say how the mesh lies on the slice.
  std::string text;
  for (size_t i = 0; i < laid->factors.size(); ++i) {
    const auto& axis = mesh.axes()[i];
    const auto& f = laid->factors[i];
    std::string part = axis.name + "=" + std::to_string(axis.size);
    if (f.empty()) {
      part += " on one chip";
    } else {
      std::vector<int64_t> axes;
      for (size_t k = f.size(); k-- > 0;) axes.push_back(f[k].axis);
      part += axes.size() == 1 ? " along physical axis " + std::to_string(axes[0]) : " over physical axes ";
      if (axes.size() > 1) {
        for (size_t k = 0; k < axes.size(); ++k) part += (k ? "," : "") + std::to_string(axes[k]);
      }
      if (f.size() == 1 && f[0].size < t->shape()[static_cast<size_t>(f[0].axis)]) {
        part += " (" + std::to_string(f[0].size) + " of its " + std::to_string(t->shape()[static_cast<size_t>(f[0].axis)]) + ")";
      }
      if (f.size() > 1) {
        // Does the axis close into a ring: its last device next to its first?
        const int64_t stride_pos = [&] {
          int64_t s = 1;
          for (size_t j = i + 1; j < mesh.axes().size(); ++j) s *= mesh.axes()[j].size;
          return s;
        }();
        const int64_t last = (axis.size / (static_cast<int64_t>(i) == laid->core_axis ? cores : 1) - 1) *
                             (static_cast<int64_t>(i) == laid->core_axis ? cores : 1) * stride_pos;
        const int64_t first_chip = laid->chip_of_position[0];
        const int64_t last_chip = laid->chip_of_position[static_cast<size_t>(last)];
        const bool ring = t->LinkBetween(last_chip, first_chip) >= 0;
        part += std::string(" (") + std::string(MeshPlacementName(o.placement)) +
                (ring ? ", a closed ring" : ", an open line") + ")";
      }
    }
    if (static_cast<int64_t>(i) == laid->core_axis) part += ", " + std::to_string(cores) + " devices per chip";
    text += (text.empty() ? "" : "; ") + part;
  }
  t->placement_ = text;
  return t;
}

Status Topology::SetDeviceToChip(std::vector<int64_t> map) {
  if (static_cast<int64_t>(map.size()) != num_devices()) {
    return Error("device placement lists " + std::to_string(map.size()) + " devices but the slice has " +
                 std::to_string(num_devices()));
  }
  std::vector<std::vector<int64_t>> on_chip(static_cast<size_t>(num_chips_));
  for (int64_t d = 0; d < static_cast<int64_t>(map.size()); ++d) {
    const int64_t c = map[static_cast<size_t>(d)];
    if (c < 0 || c >= num_chips_) {
      return Error("device " + std::to_string(d) + " is placed on chip " + std::to_string(c) + ", outside 0.." +
                   std::to_string(num_chips_ - 1));
    }
    on_chip[static_cast<size_t>(c)].push_back(d);
  }
  for (int64_t c = 0; c < num_chips_; ++c) {
    if (static_cast<int64_t>(on_chip[static_cast<size_t>(c)].size()) != chip_.cores_per_chip) {
      return Error("chip " + std::to_string(c) + " holds " + std::to_string(on_chip[static_cast<size_t>(c)].size()) +
                   " devices; every chip must hold exactly " + std::to_string(chip_.cores_per_chip));
    }
  }
  device_to_chip_ = std::move(map);
  chip_devices_ = std::move(on_chip);
  return Status::Ok();
}

std::vector<int64_t> Topology::ChipCoords(int64_t chip) const {
  std::vector<int64_t> c(shape_.size(), 0);
  for (size_t i = shape_.size(); i-- > 0;) {
    c[i] = chip % shape_[i];
    chip /= shape_[i];
  }
  return c;
}

int64_t Topology::ChipAt(const std::vector<int64_t>& coords) const {
  if (coords.size() != shape_.size()) return -1;
  int64_t id = 0;
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= shape_[i]) return -1;
    id = id * shape_[i] + coords[i];
  }
  return id;
}

int64_t Topology::NeighborLink(int64_t chip, int64_t axis, int direction) const {
  if (is_switch() || chip < 0 || chip >= num_chips_ || axis < 0 || axis >= num_axes()) return -1;
  return neighbor_[static_cast<size_t>(chip * 2 * num_axes() + axis * 2 + (direction > 0 ? 0 : 1))];
}

int64_t Topology::LinkBetween(int64_t a, int64_t b) const {
  if (is_switch() || a < 0 || a >= num_chips_) return -1;
  for (int64_t l : out_links_[static_cast<size_t>(a)]) {
    if (links_[static_cast<size_t>(l)].dst == b) return l;
  }
  return -1;
}

std::vector<int64_t> Topology::Route(int64_t src, int64_t dst, RoutePolicy policy) const {
  std::vector<int64_t> path;
  if (src == dst) return path;
  if (is_switch()) return {2 * src, 2 * dst + 1};
  std::vector<int64_t> cur = ChipCoords(src);
  const std::vector<int64_t> goal = ChipCoords(dst);
  int64_t chip = src;
  for (int64_t a = 0; a < num_axes(); ++a) {
    const size_t ai = static_cast<size_t>(a);
    const int64_t n = shape_[ai];
    if (cur[ai] == goal[ai]) continue;
    int dir;
    int64_t hops;
    if (wraps_[ai]) {
      const int64_t fwd = ((goal[ai] - cur[ai]) % n + n) % n;
      const int64_t back = n - fwd;
      if (policy == RoutePolicy::kPositiveOnly || fwd <= back) {
        dir = +1;
        hops = fwd;
      } else {
        dir = -1;
        hops = back;
      }
    } else {
      dir = goal[ai] > cur[ai] ? +1 : -1;
      hops = std::abs(goal[ai] - cur[ai]);
    }
    for (int64_t h = 0; h < hops; ++h) {
      const int64_t l = NeighborLink(chip, a, dir);
      path.push_back(l);
      chip = links_[static_cast<size_t>(l)].dst;
    }
    cur[ai] = goal[ai];
  }
  return path;
}

std::vector<std::pair<double, std::vector<int64_t>>> Topology::SplitRoutes(int64_t src, int64_t dst) const {
  std::vector<std::pair<double, std::vector<int64_t>>> routes;
  if (src == dst || is_switch()) {
    routes.emplace_back(1.0, Route(src, dst));
    return routes;
  }
  routes.emplace_back(1.0, std::vector<int64_t>{});
  std::vector<int64_t> cur = ChipCoords(src);
  const std::vector<int64_t> goal = ChipCoords(dst);
  // Each variant walks the axes in order; `chips` tracks where each variant currently is.
  std::vector<int64_t> chips = {src};
  for (int64_t a = 0; a < num_axes(); ++a) {
    const size_t ai = static_cast<size_t>(a);
    const int64_t n = shape_[ai];
    if (cur[ai] == goal[ai]) continue;
    std::vector<std::pair<int, int64_t>> options;  // (dir, hops)
    if (wraps_[ai]) {
      const int64_t fwd = ((goal[ai] - cur[ai]) % n + n) % n;
      const int64_t back = n - fwd;
      if (fwd < back) options = {{+1, fwd}};
      else if (back < fwd) options = {{-1, back}};
      else options = {{+1, fwd}, {-1, back}};
    } else {
      options = {{goal[ai] > cur[ai] ? +1 : -1, std::abs(goal[ai] - cur[ai])}};
    }
    std::vector<std::pair<double, std::vector<int64_t>>> next;
    std::vector<int64_t> next_chips;
    for (size_t v = 0; v < routes.size(); ++v) {
      for (const auto& [dir, hops] : options) {
        auto path = routes[v].second;
        int64_t chip = chips[v];
        for (int64_t h = 0; h < hops; ++h) {
          const int64_t l = NeighborLink(chip, a, dir);
          path.push_back(l);
          chip = links_[static_cast<size_t>(l)].dst;
        }
        next.emplace_back(routes[v].first / static_cast<double>(options.size()), std::move(path));
        next_chips.push_back(chip);
      }
    }
    routes = std::move(next);
    chips = std::move(next_chips);
    cur[ai] = goal[ai];
  }
  return routes;
}

int64_t Topology::HopDistance(int64_t a, int64_t b) const {
  if (a == b) return 0;
  if (is_switch()) return 1;
  const auto ca = ChipCoords(a), cb = ChipCoords(b);
  int64_t hops = 0;
  for (size_t i = 0; i < shape_.size(); ++i) {
    const int64_t d = std::abs(ca[i] - cb[i]);
    hops += wraps_[i] ? std::min(d, shape_[i] - d) : d;
  }
  return hops;
}

double Topology::PathLatency(const std::vector<int64_t>& path) const {
  double t = 0;
  for (int64_t l : path) t += links_[static_cast<size_t>(l)].latency;
  return t;
}

BisectionBandwidth Topology::Bisection() const {
  BisectionBandwidth b;
  if (num_chips_ < 2) return b;
  if (is_switch()) {
    b.links_cut = num_chips_ / 2;
    b.one_way = static_cast<double>(b.links_cut) * chip_.ici_link_bandwidth;
    b.both_ways = 2 * b.one_way;
    return b;
  }
  for (int64_t a = 0; a < num_axes(); ++a) {
    const int64_t n = shape_[static_cast<size_t>(a)];
    if (n < 2) continue;
    const int64_t crossing = (num_chips_ / n) * (wraps_[static_cast<size_t>(a)] ? 2 : 1);
    if (b.cut_axis < 0 || crossing < b.links_cut) {
      b.cut_axis = a;
      b.links_cut = crossing;
    }
  }
  b.one_way = static_cast<double>(b.links_cut) * chip_.ici_link_bandwidth;
  b.both_ways = 2 * b.one_way;
  return b;
}

std::string Topology::ShapeString() const { return DimsText(shape_); }

std::string Topology::Describe() const {
  std::ostringstream ss;
  if (is_switch()) {
    ss << num_chips_ << " chips on a switch (all-to-all)";
  } else {
    bool any = false, all = true;
    std::string w;
    for (size_t i = 0; i < wraps_.size(); ++i) {
      if (shape_[i] < 3) continue;
      if (wraps_[i]) {
        any = true;
        if (!w.empty()) w += ',';
        w += std::to_string(i);
      } else {
        all = false;
      }
    }
    ss << DimsText(shape_) << (any && all ? " torus" : any ? " mesh/torus" : " mesh")
       << " (wraparound on axes: " << (any ? w : "none") << "), " << num_chips_ << " chips";
  }
  ss << ", " << chip_.cores_per_chip << " device" << (chip_.cores_per_chip > 1 ? "s" : "") << " per chip, "
     << links_.size() << " one-way links";
  return ss.str();
}

}  // namespace shardscope::sim
