#include "simulator/mesh_placement.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>

#include "simulator/topology.h"

namespace shardscope::sim {

namespace {

// A physical dimension of the slice, minor first: the cores of a chip (axis -1), then the slice's
// axes from the last to the first.
struct PhysicalDim {
  int64_t axis = -1;  // -1: cores
  int64_t size = 1;
};

std::vector<PhysicalDim> PhysicalDims(const ChipSpec& chip, const std::vector<int64_t>& slice) {
  std::vector<PhysicalDim> dims;
  if (chip.cores_per_chip > 1) dims.push_back({-1, chip.cores_per_chip});
  for (int64_t j = static_cast<int64_t>(slice.size()) - 1; j >= 0; --j) dims.push_back({j, slice[static_cast<size_t>(j)]});
  return dims;
}

// A factor of one physical dimension that one mesh axis took: mesh-axis digit d sits at physical
// coordinate d * stride along that dimension.
struct Piece {
  size_t dim = 0;
  int64_t factor = 1;
  int64_t stride = 1;
};

// The chips of mesh axis `a`'s group through device 0, as physical coordinates (`chip_of`: a
// device's chip).
template <class ChipOf>
std::set<std::vector<int64_t>> GroupChips(const std::vector<int64_t>& slice, const DeviceMesh& mesh, size_t a,
                                          const ChipOf& chip_of) {
  int64_t step = 1;  // device-id stride of axis a (row-major)
  for (size_t b = a + 1; b < static_cast<size_t>(mesh.num_axes()); ++b) step *= mesh.axis_size(static_cast<int64_t>(b));
  std::set<std::vector<int64_t>> chips;
  const size_t m = slice.size();
  for (int64_t i = 0; i < mesh.axis_size(static_cast<int64_t>(a)); ++i) {
    int64_t chip = chip_of(i * step);
    std::vector<int64_t> pc(m);
    for (size_t j = m; j-- > 0;) {
      pc[j] = chip % slice[j];
      chip /= slice[j];
    }
    chips.insert(pc);
  }
  return chips;
}

bool IsBox(const std::set<std::vector<int64_t>>& chips, size_t m) {
  int64_t box = 1;
  for (size_t j = 0; j < m; ++j) {
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    for (const auto& pc : chips) {
      lo = std::min(lo, pc[j]);
      hi = std::max(hi, pc[j]);
    }
    box *= hi - lo + 1;
  }
  return box == static_cast<int64_t>(chips.size());
}

}  // namespace

bool EveryAxisOnABox(const std::vector<int64_t>& slice, const DeviceMesh& mesh, const std::vector<int64_t>& device_to_chip) {
  if (static_cast<int64_t>(device_to_chip.size()) != mesh.num_devices()) return false;
  auto chip_of = [&](int64_t d) { return device_to_chip[static_cast<size_t>(d)]; };
  for (size_t a = 0; a < static_cast<size_t>(mesh.num_axes()); ++a)
    if (!IsBox(GroupChips(slice, mesh, a, chip_of), slice.size())) return false;
  return true;
}

Result<OrderedMeshPlacement> PlaceMeshInOrder(const ChipSpec& chip, const std::vector<int64_t>& slice,
                                              const DeviceMesh& mesh, std::string_view order_text, bool require_boxes,
                                              const std::vector<bool>* given_wraps) {
  int64_t chips = 1;
  for (int64_t s : slice) chips *= s;
  const int64_t n = chips * std::max<int64_t>(chip.cores_per_chip, 1);
  if (mesh.num_devices() != n)
    return Error("mesh " + mesh.ToString() + " has " + std::to_string(mesh.num_devices()) + " devices, the slice " +
                 std::to_string(n));
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
    // Axes of size 1 take no chips: an order may leave them out (a candidate ranked on X=8 opened
    // as the model's X=8,Y=1); they go last.
    for (size_t a = naxes; a-- > 0;)
      if (mesh.axis_size(static_cast<int64_t>(a)) == 1 && std::find(order.begin(), order.end(), a) == order.end())
        order.push_back(a);
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    if (sorted.size() != naxes || order.size() != naxes)
      return Error("placement order '" + t + "' must name every axis of " + mesh.ToString() + " once");
  }
  OrderedMeshPlacement out;
  for (size_t k = 0; k < order.size(); ++k) out.canonical = out.canonical && order[k] == naxes - 1 - k;
  for (size_t k = 0; k < order.size(); ++k) out.order += (k ? "," : "") + mesh.axes()[order[k]].name;

  std::vector<PhysicalDim> dims = PhysicalDims(chip, slice);
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
                     " does not divide the slice's dimensions in placement order " + out.order);
      pieces[a].push_back({cursor, take, stride[cursor]});
      stride[cursor] *= take;
      remaining[cursor] /= take;
      s /= take;
    }
  }

  // The chip of a device.
  const size_t m = slice.size();
  std::vector<int64_t> coords(naxes), phys(m);
  auto chip_of = [&](int64_t d) {
    int64_t rest = d;
    for (size_t a = naxes; a-- > 0;) {
      const int64_t size = mesh.axis_size(static_cast<int64_t>(a));
      coords[a] = rest % size;
      rest /= size;
    }
    std::fill(phys.begin(), phys.end(), 0);
    for (size_t a = 0; a < naxes; ++a) {
      int64_t x = coords[a];
      for (const Piece& p : pieces[a]) {
        const int64_t digit = x % p.factor;
        x /= p.factor;
        if (dims[p.dim].axis >= 0) phys[static_cast<size_t>(dims[p.dim].axis)] += digit * p.stride;
      }
    }
    int64_t c = 0;
    for (size_t j = 0; j < m; ++j) c = c * slice[j] + phys[j];
    return c;
  };
  // Each axis: its group through device 0 must be a box of chips (checked before every device
  // is placed: PlaceMeshOnBoxes tries up to every order of the axes).
  std::vector<char> box(naxes, 0);
  for (size_t a = 0; a < naxes; ++a) {
    box[a] = IsBox(GroupChips(slice, mesh, a, chip_of), m) ? 1 : 0;
    if (!box[a] && require_boxes)
      return Error("mesh axis " + mesh.axes()[a].name + " is strided over the chips in placement order " + out.order);
  }
  out.device_to_chip.resize(static_cast<size_t>(n));
  for (int64_t d = 0; d < n; ++d) out.device_to_chip[static_cast<size_t>(d)] = chip_of(d);

  const std::vector<bool> wraps = given_wraps && given_wraps->size() == m ? *given_wraps
                                   : chip.interconnect == InterconnectKind::kGrid ? Topology::GenerationWraparound(chip, slice)
                                                                                 : std::vector<bool>(m, false);
  for (size_t a = 0; a < naxes; ++a) {
    out.boxes = out.boxes && box[a];
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
    if (!box[a]) text += " (strided)";
    out.axis_text.push_back(text);
  }
  return out;
}

Result<OrderedMeshPlacement> PlaceMeshOnBoxes(const ChipSpec& chip, const std::vector<int64_t>& slice, const DeviceMesh& mesh,
                                              const std::vector<bool>* wraps) {
  auto canonical = PlaceMeshInOrder(chip, slice, mesh, {}, true, wraps);
  if (canonical.ok()) return canonical;
  // Other orders, in lexicographic order of axis indices.
  std::vector<size_t> idx(static_cast<size_t>(mesh.num_axes()));
  std::iota(idx.begin(), idx.end(), 0);
  do {
    std::string order;
    for (size_t k = 0; k < idx.size(); ++k) order += (k ? "," : "") + mesh.axes()[idx[k]].name;
    auto alt = PlaceMeshInOrder(chip, slice, mesh, order, true, wraps);
    if (alt.ok()) return alt;
  } while (std::next_permutation(idx.begin(), idx.end()));
  // No order keeps every axis on a box (16 x 128 on 32x32 chips of 2 cores): the canonical
  // placement with its strided axis, whose collectives the simulator routes hop by hop.
  return PlaceMeshInOrder(chip, slice, mesh, {}, /*require_boxes=*/false, wraps);
}

}  // namespace shardscope::sim
