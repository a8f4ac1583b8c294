#include "simulator/collectives/layout.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace shardscope::sim {

namespace {

std::string AxisList(const std::vector<int64_t>& axes) {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + std::to_string(axes[i]);
  return s;
}

// The first coordinate of `values` read as one segment of an axis of `extent` chips (cyclically
// when the axis wraps round), or -1 when they are not one segment.
int64_t SegmentStart(const std::set<int64_t>& values, int64_t extent, bool wraps) {
  const int64_t count = static_cast<int64_t>(values.size());
  if (count == extent) return 0;  // the whole axis
  if (*values.rbegin() - *values.begin() + 1 == count) return *values.begin();
  if (!wraps) return -1;
  // Crossing the wraparound link: exactly one value has no predecessor in the set.
  int64_t start = -1;
  for (int64_t v : values) {
    if (values.count((v - 1 + extent) % extent)) continue;
    if (start >= 0) return -1;
    start = v;
  }
  return start;
}

// Product layouts: the offsets of a chip along the spanned axes.
std::vector<int64_t> OffsetsOfChip(const Topology& topo, const GroupLayout& plan, int64_t chip) {
  const std::vector<int64_t> coords = topo.ChipCoords(chip);
  std::vector<int64_t> offsets(plan.axes.size());
  for (size_t i = 0; i < plan.axes.size(); ++i) {
    const int64_t extent = topo.shape()[static_cast<size_t>(plan.axes[i])];
    offsets[i] = ((coords[static_cast<size_t>(plan.axes[i])] - plan.lo[i]) % extent + extent) % extent;
  }
  return offsets;
}

// Solves the (m+1)x(m+1) system that balances the busiest link of every axis; false if singular.
bool SolveBalanced(const std::vector<std::vector<double>>& c, std::vector<double>* f) {
  const size_t m = c.size();
  if (m == 0) return false;
  // Unknowns f_0..f_{m-1}, L. Rows: sum_j f_j c[j][a] - L = 0 (a = 0..m-1); sum_j f_j = 1.
  std::vector<std::vector<double>> a(m + 1, std::vector<double>(m + 2, 0.0));
  for (size_t ax = 0; ax < m; ++ax) {
    for (size_t j = 0; j < m; ++j) a[ax][j] = c[j][ax];
    a[ax][m] = -1;
  }
  for (size_t j = 0; j < m; ++j) a[m][j] = 1;
  a[m][m + 1] = 1;
  const size_t rows = m + 1;
  for (size_t col = 0; col < rows; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < rows; ++r) {
      if (std::fabs(a[r][col]) > std::fabs(a[piv][col])) piv = r;
    }
    if (std::fabs(a[piv][col]) < 1e-12) return false;
    std::swap(a[piv], a[col]);
    for (size_t r = 0; r < rows; ++r) {
      if (r == col) continue;
      const double factor = a[r][col] / a[col][col];
      for (size_t k = col; k < m + 2; ++k) a[r][k] -= factor * a[col][k];
    }
  }
  f->assign(m, 0.0);
  for (size_t j = 0; j < m; ++j) {
    (*f)[j] = a[j][m + 1] / a[j][j];
    if ((*f)[j] < -1e-12) return false;
    (*f)[j] = std::max(0.0, (*f)[j]);
  }
  return true;
}

}  // namespace

int64_t GroupLayout::ChipAtOffsets(const Topology& topo, const std::vector<int64_t>& offsets) const {
  std::vector<int64_t> coords = base;
  for (size_t i = 0; i < axes.size() && i < offsets.size(); ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    coords[a] = (lo[i] + offsets[i]) % topo.shape()[a];
  }
  return topo.ChipAt(coords);
}

int64_t GroupLayout::StopAtOffsets(const std::vector<int64_t>& offsets) const {
  int64_t stop = 0;
  for (size_t i = 0; i < size.size() && i < offsets.size(); ++i) stop = stop * size[i] + offsets[i];
  return stop;
}

std::vector<int64_t> GroupLayout::StopOffsets(int64_t stop) const {
  std::vector<int64_t> offsets(size.size(), 0);
  for (size_t i = size.size(); i-- > 0;) {
    offsets[i] = stop % size[i];
    stop /= size[i];
  }
  return offsets;
}

GroupLayout LayOutReplicaGroup(const Topology& topo, const std::vector<int64_t>& group) {
  GroupLayout plan;
  const int64_t n = static_cast<int64_t>(group.size());
  if (n <= 1) {
    plan.description = "nothing to do (a group of one device)";
    return plan;
  }
  std::vector<int64_t> chips;
  for (int64_t d : group) chips.push_back(topo.ChipOfDevice(d));
  auto one_stop_per_member = [&](const std::vector<int64_t>& order) {
    for (int64_t p : order) {
      plan.chips.push_back(chips[static_cast<size_t>(p)]);
      plan.stop_members.push_back({p});
    }
  };
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = i;
  if (topo.is_switch()) {
    plan.kind = GroupLayout::Kind::kSwitch;
    one_stop_per_member(positions);
    plan.description = "direct sends through the switch";
    return plan;
  }
  // Several devices of the group on one chip (two cores per chip): when every chip holds the same
  // number k of them, plan over the chips; the chips' devices exchange data on-chip for free and a
  // chip's shard is k device shards.
  std::map<int64_t, int64_t> per_chip;
  for (int64_t c : chips) ++per_chip[c];
  int64_t k = per_chip.begin()->second;
  for (const auto& [c, count] : per_chip) {
    if (count != k) k = -1;
  }
  std::vector<int64_t> cand = chips;  // the chips to lay out (distinct when k >= 1)
  if (k > 1) {
    cand.clear();
    std::set<int64_t> seen;
    for (int64_t c : chips) {
      if (seen.insert(c).second) cand.push_back(c);
    }
    if (cand.size() == 1) {
      plan.per_chip = k;
      plan.description = "all devices on one chip (exchanged on-chip, free)";
      return plan;
    }
  }
  const int64_t nc = static_cast<int64_t>(cand.size());
  if (k >= 1) {
    // Which axes vary, and is the group a full product of segments (a segment may cross the
    // wraparound link)? The members' order plays no part: see the header.
    std::vector<std::vector<int64_t>> coords;
    for (int64_t c : cand) coords.push_back(topo.ChipCoords(c));
    std::vector<int64_t> varying, lo, size;
    int64_t product = 1;
    bool segments = true;
    for (int64_t a = 0; a < topo.num_axes(); ++a) {
      std::set<int64_t> values;
      for (const auto& c : coords) values.insert(c[static_cast<size_t>(a)]);
      if (values.size() < 2) continue;
      const int64_t start = SegmentStart(values, topo.shape()[static_cast<size_t>(a)], topo.wraps(a));
      if (start < 0) segments = false;
      varying.push_back(a);
      lo.push_back(start);
      size.push_back(static_cast<int64_t>(values.size()));
      product *= static_cast<int64_t>(values.size());
    }
    if (segments && product == nc) {
      plan.per_chip = k;
      plan.product = true;
      plan.axes = varying;
      plan.lo = lo;
      plan.size = size;
      plan.base = coords[0];
      for (size_t i = 0; i < varying.size(); ++i) {
        const int64_t a = varying[i];
        plan.ring.push_back(topo.wraps(a) && size[i] == topo.shape()[static_cast<size_t>(a)] && size[i] >= 3);
      }
      // One stop per chip: row-major over the offsets along the spanned axes (for one axis, the
      // chips in order along it from the segment's first coordinate).
      plan.chips.resize(static_cast<size_t>(nc));
      for (int64_t s = 0; s < nc; ++s) plan.chips[static_cast<size_t>(s)] = plan.ChipAtOffsets(topo, plan.StopOffsets(s));
      plan.stop_members.assign(static_cast<size_t>(nc), {});
      for (int64_t i = 0; i < n; ++i) {
        const int64_t stop = plan.StopAtOffsets(OffsetsOfChip(topo, plan, chips[static_cast<size_t>(i)]));
        plan.stop_members[static_cast<size_t>(stop)].push_back(i);
      }
      const std::string per_chip_note =
          k > 1 ? " (" + std::to_string(k) + " devices per chip, exchanged on-chip)" : std::string();
      if (varying.size() == 1) {
        plan.kind = GroupLayout::Kind::kSequence;
        plan.closed = plan.ring[0];
        const bool across_wrap = !plan.closed && lo[0] + size[0] > topo.shape()[static_cast<size_t>(varying[0])];
        plan.description = std::string(plan.closed ? "ring with wraparound"
                                       : across_wrap ? "line (a segment of the ring, across its wraparound link)"
                                                     : "line (no wraparound)") +
                           " along physical axis " + std::to_string(varying[0]) + per_chip_note;
        return plan;
      }
      plan.kind = GroupLayout::Kind::kGrid;
      std::string kinds;
      for (size_t i = 0; i < varying.size(); ++i) {
        kinds += (i ? " x " : "") + std::to_string(size[i]) + (plan.ring[i] ? " ring" : " line");
      }
      plan.description = "multi-axis gather over physical axes " + AxisList(varying) + " (" + kinds + ")" + per_chip_note;
      return plan;
    }
  }
  // Irregular: the members' order, read as a cycle, is the ring. Hops between the same chip or
  // physical neighbours cost no routing; a cycle with exactly one other hop is cut there into a
  // line. The plan is the same for every rotation or reversal of the order.
  auto adjacent = [&](int64_t a, int64_t b) { return a == b || topo.LinkBetween(a, b) >= 0; };
  std::vector<int64_t> far;  // hops i -> i+1 (cyclically) that are not physical neighbours
  for (int64_t i = 0; i < n; ++i) {
    if (!adjacent(chips[static_cast<size_t>(i)], chips[static_cast<size_t>((i + 1) % n)])) far.push_back(i);
  }
  plan.kind = GroupLayout::Kind::kSequence;
  std::vector<int64_t> order = positions;
  if (n == 2) {
    plan.closed = false;
    plan.routed = !far.empty();
    plan.description = plan.routed ? "two devices exchanging shards over a route of several links"
                                   : "line over the group's devices in their given order";
  } else if (far.empty()) {
    plan.closed = true;
    plan.description = "ring over the group's devices in their given order";
  } else if (far.size() == 1) {
    plan.closed = false;
    std::rotate(order.begin(), order.begin() + (far[0] + 1) % n, order.end());
    plan.description = "line over the group's devices in their given order (cut where it is not a ring)";
  } else {
    plan.closed = true;
    plan.routed = true;
    plan.description = "logical ring over the group in its given order, hops routed over the network";
  }
  one_stop_per_member(order);
  return plan;
}

std::vector<double> GridAllGatherFractions(const std::vector<int64_t>& sizes, const std::vector<bool>& ring,
                                           bool bidirectional) {
  const size_t m = sizes.size();
  std::vector<double> load_factor(m);
  for (size_t a = 0; a < m; ++a) {
    const double n = static_cast<double>(sizes[a]);
    load_factor[a] = (a < ring.size() && ring[a] && bidirectional) ? (n - 1) / 2 : (n - 1);
  }
  // Part j crosses axis a after the axes before it in its rotated order have multiplied its block.
  std::vector<std::vector<double>> coeff(m, std::vector<double>(m, 0.0));
  for (size_t j = 0; j < m; ++j) {
    double block = 1;
    for (size_t q = 0; q < m; ++q) {
      const size_t a = (j + q) % m;
      coeff[j][a] = block * load_factor[a];
      block *= static_cast<double>(sizes[a]);
    }
  }
  std::vector<double> frac;
  if (!SolveBalanced(coeff, &frac)) frac.assign(m, m ? 1.0 / static_cast<double>(m) : 0.0);
  return frac;
}

}  // namespace shardscope::sim
