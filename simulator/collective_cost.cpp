#include "simulator/collective_cost.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace shardscope {

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

namespace {

// A collective's schedule: the bytes every link carries over the whole collective, and the hop
// latency of each synchronous step (the longest route traversed in that step). Steps are
// synchronous within a replica group only: groups run independently, so the collective's latency
// is the largest of its groups' (NextGroup() closes one group's steps); the links they share add
// up their bytes.
class StepSchedule {
 public:
  explicit StepSchedule(const Topology* t) : topo_(t), totals_(static_cast<size_t>(t->num_links()), 0.0) {}

  // The whole path is traversed within `step` (cut-through; a logical hop of a ring).
  void AddPath(int64_t step, const std::vector<int64_t>& path, double bytes) {
    if (bytes <= 0) return;
    Touch(step);
    for (int64_t l : path) totals_[static_cast<size_t>(l)] += bytes;
    latency_[static_cast<size_t>(step)] = std::max(latency_[static_cast<size_t>(step)], topo_->PathLatency(path));
  }
  // One link traversed in `step` (store-and-forward).
  void AddLink(int64_t step, int64_t link, double bytes) {
    if (bytes <= 0) return;
    Touch(step);
    totals_[static_cast<size_t>(link)] += bytes;
    latency_[static_cast<size_t>(step)] = std::max(latency_[static_cast<size_t>(step)], topo_->link(link).latency);
  }
  // Bytes on a link without step detail, and a step's latency, for schedules computed in bulk.
  void AddLoad(int64_t link, double bytes) {
    if (bytes > 0) totals_[static_cast<size_t>(link)] += bytes;
  }
  void RaiseStepLatency(int64_t step, double latency) {
    Touch(step);
    latency_[static_cast<size_t>(step)] = std::max(latency_[static_cast<size_t>(step)], latency);
  }
  // Makes sure a step exists (keeps step counts honest when a step carries nothing).
  void Touch(int64_t step) {
    if (step >= num_steps()) latency_.resize(static_cast<size_t>(step + 1), 0.0);
  }

  // Later steps belong to the next replica group (its step 0 is not synchronised with this one's).
  void NextGroup() {
    done_steps_ = num_steps();
    done_latency_ = total_latency();
    latency_.clear();
  }

  int64_t num_steps() const { return std::max(done_steps_, static_cast<int64_t>(latency_.size())); }
  double total_latency() const {
    double t = 0;
    for (double l : latency_) t += l;
    return std::max(t, done_latency_);
  }
  const std::vector<double>& totals() const { return totals_; }
  // The busiest link's bytes / bandwidth: the time the collective needs when its steps pipeline.
  double bandwidth_time() const {
    double t = 0;
    for (size_t l = 0; l < totals_.size(); ++l) {
      if (totals_[l] > 0) t = std::max(t, totals_[l] / topo_->link(static_cast<int64_t>(l)).bandwidth);
    }
    return t;
  }

 private:
  const Topology* topo_;
  std::vector<double> totals_;
  std::vector<double> latency_;  // per step of the current group
  int64_t done_steps_ = 0;       // the most steps of any earlier group
  double done_latency_ = 0;      // the largest latency of any earlier group
};

double CombineLatency(double latency, double bandwidth_time, LatencyModel model) {
  return model == LatencyModel::kAdditive ? latency + bandwidth_time : std::max(latency, bandwidth_time);
}

// A job for the fluid model: bytes it must move over each link (sparse), when it starts, and the
// latency of its critical path.
struct FluidJob {
  std::vector<std::pair<int64_t, double>> link_bytes;
  double start_s = 0;
};

// Max-min fair progress of concurrent jobs. A job's rate is measured on its busiest link (bytes/s
// there); on every other link it uses rate x (bytes there / bytes on its busiest link). Rates are
// set by progressive filling and re-solved whenever a job starts or finishes. Returns each job's
// data-done time (its start when it moves nothing).
std::vector<double> RunFluid(const Topology& topo, const std::vector<FluidJob>& jobs) {
  const size_t n = jobs.size();
  std::vector<double> done_at(n, 0.0), remaining(n, 1.0), peak(n, 0.0);
  std::vector<std::vector<std::pair<int64_t, double>>> weights(n);  // link, bytes / peak bytes
  std::vector<char> done(n, 0);
  for (size_t j = 0; j < n; ++j) {
    // The busiest link in time (bytes / bandwidth) defines the job's unit of work.
    double peak_time = 0;
    for (const auto& [l, b] : jobs[j].link_bytes) peak_time = std::max(peak_time, b / topo.link(l).bandwidth);
    peak[j] = peak_time;  // seconds alone on an empty network
    if (peak_time <= 0) {
      done[j] = 1;
      done_at[j] = jobs[j].start_s;
      continue;
    }
    for (const auto& [l, b] : jobs[j].link_bytes) {
      if (b > 0) weights[j].emplace_back(l, b / peak_time);  // bytes/s this link needs at full speed
    }
  }
  const size_t num_links = static_cast<size_t>(topo.num_links());
  std::vector<double> cap(num_links), demand(num_links);
  std::vector<double> speed(n, 0.0);  // fraction of full speed (1 = alone on the network)
  double now = std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < n; ++j) {
    if (!done[j]) now = std::min(now, jobs[j].start_s);
  }
  while (now < std::numeric_limits<double>::infinity()) {
    double next_start = std::numeric_limits<double>::infinity();
    std::vector<size_t> active;
    for (size_t j = 0; j < n; ++j) {
      if (done[j]) continue;
      if (jobs[j].start_s <= now) active.push_back(j);
      else next_start = std::min(next_start, jobs[j].start_s);
    }
    if (active.empty()) {
      now = next_start;
      continue;
    }
    // Progressive filling on the common speed level of the unfrozen jobs.
    std::vector<int64_t> used;
    for (size_t j : active) {
      for (const auto& [l, w] : weights[j]) {
        const size_t li = static_cast<size_t>(l);
        used.push_back(l);
        cap[li] = topo.link(l).bandwidth;
        demand[li] += w;
      }
    }
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    std::vector<char> frozen(n, 0);
    size_t unfrozen = active.size();
    double level = 0;
    while (unfrozen > 0) {
      double inc = std::numeric_limits<double>::infinity();
      for (int64_t l : used) {
        const size_t li = static_cast<size_t>(l);
        if (demand[li] > 1e-300) inc = std::min(inc, cap[li] / demand[li]);
      }
      if (!(inc < std::numeric_limits<double>::infinity())) break;
      level += inc;
      for (int64_t l : used) {
        const size_t li = static_cast<size_t>(l);
        if (demand[li] > 1e-300) cap[li] -= inc * demand[li];
      }
      for (size_t j : active) {
        if (frozen[j]) continue;
        bool saturated = false;
        for (const auto& [l, w] : weights[j]) {
          if (cap[static_cast<size_t>(l)] <= 1e-9 * topo.link(l).bandwidth) saturated = true;
        }
        if (!saturated) continue;
        frozen[j] = 1;
        speed[j] = level;
        --unfrozen;
        for (const auto& [l, w] : weights[j]) demand[static_cast<size_t>(l)] -= w;
      }
    }
    for (int64_t l : used) {
      cap[static_cast<size_t>(l)] = 0;
      demand[static_cast<size_t>(l)] = 0;
    }
    // Advance to the next finish or start. A job at speed s finishes its remaining fraction r of
    // `peak` seconds of work in r * peak / s.
    double dt = next_start - now;
    for (size_t j : active) dt = std::min(dt, remaining[j] * peak[j] / speed[j]);
    const double next = now + dt;
    for (size_t j : active) {
      remaining[j] -= dt * speed[j] / peak[j];
      if (remaining[j] <= 1e-9) {
        remaining[j] = 0;
        done[j] = 1;
        done_at[j] = next;
      }
    }
    now = next;
  }
  return done_at;
}

using GroupPlan = GroupLayout;

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

}  // namespace

int64_t GroupLayout::ChipAtOffsets(const Topology& topo, const std::vector<int64_t>& offsets) const {
  std::vector<int64_t> coords = base;
  for (size_t i = 0; i < axes.size() && i < offsets.size(); ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    coords[a] = (lo[i] + offsets[i]) % topo.shape()[a];
  }
  return topo.ChipAt(coords);
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
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = i;
  if (topo.is_switch()) {
    plan.kind = GroupLayout::Kind::kSwitch;
    plan.chips = chips;
    plan.members = positions;
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
      const std::string per_chip_note =
          k > 1 ? " (" + std::to_string(k) + " devices per chip, exchanged on-chip)" : std::string();
      if (varying.size() == 1) {
        // The chips in order along the axis, from the segment's first coordinate.
        plan.kind = GroupLayout::Kind::kSequence;
        for (int64_t x = 0; x < size[0]; ++x) plan.chips.push_back(plan.ChipAtOffsets(topo, {x}));
        plan.closed = plan.ring[0];
        const bool across_wrap = !plan.closed && lo[0] + size[0] > topo.shape()[static_cast<size_t>(varying[0])];
        plan.description = std::string(plan.closed ? "ring with wraparound"
                                       : across_wrap ? "line (a segment of the ring, across its wraparound link)"
                                                     : "line (no wraparound)") +
                           " along physical axis " + std::to_string(varying[0]) + per_chip_note;
        return plan;
      }
      plan.kind = GroupLayout::Kind::kGrid;
      plan.chips = cand;
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
  plan.members = positions;
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
    std::rotate(plan.members.begin(), plan.members.begin() + (far[0] + 1) % n, plan.members.end());
    plan.description = "line over the group's devices in their given order (cut where it is not a ring)";
  } else {
    plan.closed = true;
    plan.routed = true;
    plan.description = "logical ring over the group in its given order, hops routed over the network";
  }
  for (int64_t p : plan.members) plan.chips.push_back(chips[static_cast<size_t>(p)]);
  return plan;
}

namespace {

GroupPlan PlanGroup(const Topology& topo, const std::vector<int64_t>& group) { return LayOutReplicaGroup(topo, group); }

// AllGather of `shard` bytes per position over a sequence of chips. Returns the number of steps.
int64_t AddSequenceAllGather(const Topology& topo, StepSchedule& s, const std::vector<int64_t>& chips, bool closed,
                             double shard, int64_t step0, bool bidirectional) {
  const int64_t n = static_cast<int64_t>(chips.size());
  if (n <= 1) return 0;
  auto at = [&](int64_t i) { return chips[static_cast<size_t>(((i % n) + n) % n)]; };
  std::vector<std::vector<int64_t>> right(static_cast<size_t>(n)), left(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (closed || i + 1 < n) right[static_cast<size_t>(i)] = topo.Route(at(i), at(i + 1));
    if (closed || i > 0) left[static_cast<size_t>(i)] = topo.Route(at(i), at(i - 1));
  }
  int64_t steps = 0;
  if (closed && n >= 3) {
    if (bidirectional) {
      const int64_t k_max = n / 2;
      for (int64_t src = 0; src < n; ++src) {
        for (int64_t k = 1; k <= k_max; ++k) {
          const double bytes = (n % 2 == 0 && k == k_max) ? shard / 2 : shard;
          s.AddPath(step0 + k - 1, right[static_cast<size_t>((src + k - 1) % n)], bytes);
          s.AddPath(step0 + k - 1, left[static_cast<size_t>(((src - k + 1) % n + n) % n)], bytes);
        }
      }
      steps = k_max;
    } else {
      for (int64_t src = 0; src < n; ++src) {
        for (int64_t k = 1; k < n; ++k) s.AddPath(step0 + k - 1, right[static_cast<size_t>((src + k - 1) % n)], shard);
      }
      steps = n - 1;
    }
  } else {
    // A line: each shard flows to both ends.
    for (int64_t src = 0; src < n; ++src) {
      for (int64_t k = 1; src + k < n; ++k) s.AddPath(step0 + k - 1, right[static_cast<size_t>(src + k - 1)], shard);
      for (int64_t k = 1; src - k >= 0; ++k) s.AddPath(step0 + k - 1, left[static_cast<size_t>(src - k + 1)], shard);
    }
    steps = n - 1;
  }
  for (int64_t k = 0; k < steps; ++k) s.Touch(step0 + k);
  return steps;
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

std::vector<double> BalancedGridFractions(const std::vector<int64_t>& sizes, const std::vector<bool>& ring,
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

int64_t AddGridAllGather(const Topology& topo, StepSchedule& s, const GroupPlan& plan, double shard, int64_t step0,
                         bool bidirectional) {
  const size_t m = plan.axes.size();
  const std::vector<double> frac = GridAllGatherFractions(plan.size, plan.ring, bidirectional);

  int64_t total_steps = 0;
  for (size_t j = 0; j < m; ++j) {
    int64_t offset = step0;
    double block = frac[j] * shard;
    for (size_t q = 0; q < m; ++q) {
      const size_t a = (j + q) % m;
      int64_t phase_steps = 0;
      // Every 1-D line along axis a inside the group's sub-grid.
      std::vector<int64_t> idx(m, 0);
      while (true) {
        std::vector<int64_t> offsets = idx;
        std::vector<int64_t> line;
        for (int64_t x = 0; x < plan.size[a]; ++x) {
          offsets[a] = x;
          line.push_back(plan.ChipAtOffsets(topo, offsets));
        }
        if (block > 0) {
          phase_steps = AddSequenceAllGather(topo, s, line, plan.ring[a], block, offset, bidirectional);
        } else {
          phase_steps = (plan.ring[a] && bidirectional) ? plan.size[a] / 2 : plan.size[a] - 1;
        }
        // Next combination of the other axes.
        size_t b = 0;
        for (; b < m; ++b) {
          if (b == a) continue;
          if (++idx[b] < plan.size[b]) break;
          idx[b] = 0;
        }
        if (b == m) break;
      }
      offset += phase_steps;
      block *= static_cast<double>(plan.size[a]);
    }
    total_steps = std::max(total_steps, offset - step0);
  }
  return total_steps;
}

int64_t AddGroupAllGather(const Topology& topo, StepSchedule& s, const GroupPlan& plan, double shard, int64_t step0,
                          bool bidirectional) {
  switch (plan.kind) {
    case GroupPlan::Kind::kTrivial: return 0;
    case GroupPlan::Kind::kSequence:
      return AddSequenceAllGather(topo, s, plan.chips, plan.closed, shard * static_cast<double>(plan.per_chip), step0,
                                  bidirectional);
    case GroupPlan::Kind::kGrid:
      return AddGridAllGather(topo, s, plan, shard * static_cast<double>(plan.per_chip), step0, bidirectional);
    case GroupPlan::Kind::kSwitch: {
      for (size_t i = 0; i < plan.chips.size(); ++i) {
        for (size_t j = 0; j < plan.chips.size(); ++j) {
          if (i != j) s.AddPath(step0, topo.Route(plan.chips[i], plan.chips[j]), shard);
        }
      }
      s.Touch(step0);
      return 1;
    }
  }
  return 0;
}

// All-to-all over a group that is exactly a sub-grid of chips, computed per axis. With dimension-
// order routing a chunk from s to t crosses an axis-a link at coordinates c exactly when t agrees
// with c on the axes before a, s agrees with c on the axes after a, and the 1-D route from s_a to
// t_a crosses it; so every link's load is chunk x (product of the other group extents) x (number of
// 1-D pairs crossing it). Same loads as routing every pair, in O(sum n_a^3 + links).
int64_t AddProductAllToAll(const Topology& topo, StepSchedule& s, const GroupPlan& plan, double buffer, int64_t step0,
                           bool bidirectional) {
  const size_t m = plan.axes.size();
  double n_total = 1;
  for (int64_t sz : plan.size) n_total *= static_cast<double>(sz);
  const double chunk = buffer / n_total;
  int64_t steps = 0;
  double hop_latency = 0;
  for (size_t i = 0; i < m; ++i) {
    const int64_t a = plan.axes[i];
    const int64_t n_phys = topo.shape()[static_cast<size_t>(a)];
    const bool wrap = topo.wraps(a);
    std::vector<double> plus(static_cast<size_t>(n_phys), 0.0), minus(static_cast<size_t>(n_phys), 0.0);
    int64_t max_hops = 0;
    for (int64_t u = 0; u < plan.size[i]; ++u) {
      for (int64_t v = 0; v < plan.size[i]; ++v) {
        if (u == v) continue;
        const int64_t from = (plan.lo[i] + u) % n_phys, to = (plan.lo[i] + v) % n_phys;
        std::vector<std::tuple<double, int, int64_t>> variants;  // fraction, direction, hops
        if (wrap) {
          const int64_t fwd = ((to - from) % n_phys + n_phys) % n_phys, back = n_phys - fwd;
          if (!bidirectional || fwd < back) variants.emplace_back(1.0, +1, fwd);
          else if (back < fwd) variants.emplace_back(1.0, -1, back);
          else variants = {{0.5, +1, fwd}, {0.5, -1, back}};
        } else {
          variants.emplace_back(1.0, to > from ? +1 : -1, std::abs(to - from));
        }
        for (const auto& [fraction, dir, hops] : variants) {
          int64_t x = from;
          for (int64_t h = 0; h < hops; ++h) {
            (dir > 0 ? plus : minus)[static_cast<size_t>(x)] += fraction;
            x = ((x + dir) % n_phys + n_phys) % n_phys;
          }
          max_hops = std::max(max_hops, hops);
        }
      }
    }
    steps += max_hops;
    const double multiplicity = n_total / static_cast<double>(plan.size[i]);
    // Every line along axis a through the group's sub-grid.
    std::vector<int64_t> idx(m, 0);
    while (true) {
      std::vector<int64_t> coords = plan.base;
      for (size_t b = 0; b < m; ++b) {
        const size_t ab = static_cast<size_t>(plan.axes[b]);
        if (b != i) coords[ab] = (plan.lo[b] + idx[b]) % topo.shape()[ab];
      }
      for (int64_t x = 0; x < n_phys; ++x) {
        coords[static_cast<size_t>(a)] = x;
        const int64_t chip = topo.ChipAt(coords);
        for (int dir : {+1, -1}) {
          const double crossings = (dir > 0 ? plus : minus)[static_cast<size_t>(x)];
          if (crossings <= 0) continue;
          const int64_t link = topo.NeighborLink(chip, a, dir);
          if (link < 0) continue;  // cannot happen for a route that exists
          s.AddLoad(link, chunk * multiplicity * crossings);
          hop_latency = std::max(hop_latency, topo.link(link).latency);
        }
      }
      size_t b = 0;
      for (; b < m; ++b) {
        if (b == i) continue;
        if (++idx[b] < plan.size[b]) break;
        idx[b] = 0;
      }
      if (b == m) break;
    }
  }
  for (int64_t k = 0; k < steps; ++k) s.RaiseStepLatency(step0 + k, hop_latency);
  return steps;
}

int64_t AddGroupAllToAll(const Topology& topo, StepSchedule& s, const std::vector<int64_t>& group, double buffer,
                         int64_t step0, bool bidirectional, bool per_axis) {
  const int64_t n = static_cast<int64_t>(group.size());
  if (n <= 1) return 0;
  if (per_axis && !topo.is_switch()) {
    const GroupPlan plan = PlanGroup(topo, group);
    if (plan.product && plan.per_chip == 1) return AddProductAllToAll(topo, s, plan, buffer, step0, bidirectional);
  }
  const double chunk = buffer / static_cast<double>(n);
  std::vector<int64_t> chips;
  for (int64_t d : group) chips.push_back(topo.ChipOfDevice(d));
  int64_t steps = 0;
  if (topo.is_switch()) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        if (i != j) s.AddPath(step0, topo.Route(chips[static_cast<size_t>(i)], chips[static_cast<size_t>(j)]), chunk);
      }
    }
    s.Touch(step0);
    return 1;
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const int64_t a = chips[static_cast<size_t>(i)], b = chips[static_cast<size_t>(j)];
      std::vector<std::pair<double, std::vector<int64_t>>> routes;
      if (bidirectional) routes = topo.SplitRoutes(a, b);
      else routes.emplace_back(1.0, topo.Route(a, b, RoutePolicy::kPositiveOnly));
      for (const auto& [fraction, path] : routes) {
        for (size_t k = 0; k < path.size(); ++k) s.AddLink(step0 + static_cast<int64_t>(k), path[k], chunk * fraction);
        steps = std::max(steps, static_cast<int64_t>(path.size()));
      }
    }
  }
  return steps;
}

Status ValidateGroups(const Topology& topo, const std::vector<std::vector<int64_t>>& groups) {
  std::vector<char> seen(static_cast<size_t>(topo.num_devices()), 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) return Error("replica group " + std::to_string(g) + " is empty");
    for (int64_t d : groups[g]) {
      if (d < 0 || d >= topo.num_devices()) {
        return Error("replica group " + std::to_string(g) + " names device " + std::to_string(d) +
                     " but the slice has devices 0.." + std::to_string(topo.num_devices() - 1));
      }
      if (seen[static_cast<size_t>(d)]) {
        return Error("device " + std::to_string(d) + " appears in more than one replica group (or twice in one)");
      }
      seen[static_cast<size_t>(d)] = 1;
    }
  }
  return Status::Ok();
}

struct BuiltSchedule {
  StepSchedule schedule;
  std::string algorithm;
  int64_t num_groups = 0;
  int64_t group_size = 0;
  double bytes_per_device = 0;
};

Result<BuiltSchedule> BuildCollective(const Topology& topo, CollectiveKind kind,
                                      const std::vector<std::vector<int64_t>>& groups_in, double bytes,
                                      const CollectiveOptions& options) {
  if (kind == CollectiveKind::kCollectivePermute) {
    return Error("collective-permute takes source/target pairs: use EstimateCollectivePermute");
  }
  if (!(bytes >= 0) || !std::isfinite(bytes)) return Error("operand bytes must be a finite number >= 0");
  std::vector<std::vector<int64_t>> groups = groups_in;
  if (groups.empty()) {
    groups.emplace_back();
    for (int64_t d = 0; d < topo.num_devices(); ++d) groups.back().push_back(d);
  }
  Status valid = ValidateGroups(topo, groups);
  if (!valid.ok()) return valid.error();

  BuiltSchedule b{StepSchedule(&topo), "", static_cast<int64_t>(groups.size()), 0, 0};
  for (const auto& g : groups) b.group_size = std::max(b.group_size, static_cast<int64_t>(g.size()));
  const double n = static_cast<double>(b.group_size);
  std::set<std::string> descriptions;
  for (const auto& g : groups) {
    const double gn = static_cast<double>(g.size());
    std::string description;
    switch (kind) {
      case CollectiveKind::kAllGather: {
        GroupPlan plan = PlanGroup(topo, g);
        AddGroupAllGather(topo, b.schedule, plan, bytes, 0, options.bidirectional);
        description = plan.description;
        break;
      }
      case CollectiveKind::kReduceScatter: {
        GroupPlan plan = PlanGroup(topo, g);
        AddGroupAllGather(topo, b.schedule, plan, bytes / gn, 0, options.bidirectional);
        description = plan.description + " (the all-gather schedule reversed)";
        break;
      }
      case CollectiveKind::kAllReduce: {
        GroupPlan plan = PlanGroup(topo, g);
        // Reduce-scatter then all-gather. The all-gather starts after the reduce-scatter's steps.
        const int64_t rs_steps = AddGroupAllGather(topo, b.schedule, plan, bytes / gn, 0, options.bidirectional);
        AddGroupAllGather(topo, b.schedule, plan, bytes / gn, rs_steps, options.bidirectional);
        description = "reduce-scatter + all-gather, " + plan.description;
        break;
      }
      case CollectiveKind::kAllToAll: {
        AddGroupAllToAll(topo, b.schedule, g, bytes, 0, options.bidirectional, options.per_axis_all_to_all);
        description = topo.is_switch() ? "direct sends through the switch"
                                        : "shortest-route store-and-forward (ties round a ring split half/half)";
        break;
      }
      case CollectiveKind::kCollectivePermute: break;
    }
    b.schedule.NextGroup();
    descriptions.insert(description);
  }
  // Named the same whatever the order of the groups: the distinct layouts, sorted.
  if (descriptions.size() == 1) {
    b.algorithm = *descriptions.begin();
  } else {
    b.algorithm = std::to_string(descriptions.size()) + " layouts over the " + std::to_string(groups.size()) + " groups: ";
    int listed = 0;
    for (const std::string& d : descriptions) {
      if (listed == 3) {
        b.algorithm += "; ...";
        break;
      }
      b.algorithm += (listed++ ? "; " : "") + d;
    }
  }
  if (!options.bidirectional && kind != CollectiveKind::kAllToAll) b.algorithm += "; rings one-directional";
  switch (kind) {
    case CollectiveKind::kAllGather: b.bytes_per_device = (n - 1) * bytes; break;
    case CollectiveKind::kReduceScatter: b.bytes_per_device = (n - 1) / n * bytes; break;
    case CollectiveKind::kAllReduce: b.bytes_per_device = 2 * (n - 1) / n * bytes; break;
    case CollectiveKind::kAllToAll: b.bytes_per_device = (n - 1) / n * bytes; break;
    case CollectiveKind::kCollectivePermute: break;
  }
  return b;
}

void FillTraffic(const Topology& topo, const std::vector<double>& totals, CollectiveCost* cost) {
  cost->link_traffic.clear();
  cost->total_link_bytes = 0;
  cost->max_link_bytes = 0;
  cost->busiest_link = -1;
  for (size_t l = 0; l < totals.size(); ++l) {
    if (totals[l] <= 0) continue;
    cost->link_traffic.push_back({static_cast<int64_t>(l), totals[l]});
    cost->total_link_bytes += totals[l];
    if (totals[l] > cost->max_link_bytes) {
      cost->max_link_bytes = totals[l];
      cost->busiest_link = static_cast<int64_t>(l);
    }
  }
}

CollectiveCost Evaluate(const Topology& topo, const StepSchedule& s, const CollectiveOptions& options) {
  CollectiveCost cost;
  cost.latency_time_s = s.total_latency();
  cost.bandwidth_time_s = s.bandwidth_time();
  cost.time_s = CombineLatency(cost.latency_time_s, cost.bandwidth_time_s, options.latency_model);
  cost.steps = s.num_steps();
  cost.regime = cost.latency_time_s > cost.bandwidth_time_s ? CostRegime::kLatencyBound : CostRegime::kBandwidthBound;
  FillTraffic(topo, s.totals(), &cost);
  return cost;
}

FluidJob JobOf(const StepSchedule& s, double start) {
  FluidJob job;
  job.start_s = start;
  for (size_t l = 0; l < s.totals().size(); ++l) {
    if (s.totals()[l] > 0) job.link_bytes.emplace_back(static_cast<int64_t>(l), s.totals()[l]);
  }
  return job;
}

}  // namespace

Result<CollectiveCost> EstimateCollective(const Topology& topology, CollectiveKind kind,
                                          const std::vector<std::vector<int64_t>>& groups, double operand_bytes,
                                          const CollectiveOptions& options) {
  auto built = BuildCollective(topology, kind, groups, operand_bytes, options);
  if (!built.ok()) return built.error();
  CollectiveCost cost = Evaluate(topology, built->schedule, options);
  cost.kind = kind;
  cost.num_groups = built->num_groups;
  cost.group_size = built->group_size;
  cost.bytes_per_device = built->bytes_per_device;
  cost.algorithm = built->algorithm;
  return cost;
}

Result<CollectiveCost> EstimateCollectivePermute(const Topology& topology,
                                                 const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes,
                                                 const CollectiveOptions& options) {
  if (!(bytes >= 0) || !std::isfinite(bytes)) return Error("bytes must be a finite number >= 0");
  std::vector<Transfer> transfers;
  std::vector<double> received(static_cast<size_t>(topology.num_devices()), 0.0);
  for (const auto& [src, dst] : pairs) {
    if (src < 0 || src >= topology.num_devices() || dst < 0 || dst >= topology.num_devices()) {
      return Error("source/target pair {" + std::to_string(src) + "," + std::to_string(dst) +
                   "} names a device outside 0.." + std::to_string(topology.num_devices() - 1));
    }
    transfers.push_back({src, dst, bytes, 0.0});
    if (src != dst) received[static_cast<size_t>(dst)] += bytes;
  }
  auto timings = SimulateTransfers(topology, transfers, options);
  if (!timings.ok()) return timings.error();
  CollectiveCost cost;
  cost.kind = CollectiveKind::kCollectivePermute;
  cost.num_groups = static_cast<int64_t>(pairs.size());
  cost.group_size = 2;
  std::vector<double> totals(static_cast<size_t>(topology.num_links()), 0.0);
  for (const auto& t : timings.value()) {
    cost.time_s = std::max(cost.time_s, t.finish_s);
    cost.bandwidth_time_s = std::max(cost.bandwidth_time_s, t.data_done_s - t.start_s);
    cost.latency_time_s = std::max(cost.latency_time_s, t.latency_s);
    cost.steps = std::max(cost.steps, t.hops);
  }
  for (size_t i = 0; i < transfers.size(); ++i) {
    for (int64_t l : timings.value()[i].path) totals[static_cast<size_t>(l)] += transfers[i].bytes;
  }
  for (double r : received) cost.bytes_per_device = std::max(cost.bytes_per_device, r);
  cost.regime = cost.latency_time_s > cost.bandwidth_time_s ? CostRegime::kLatencyBound : CostRegime::kBandwidthBound;
  FillTraffic(topology, totals, &cost);
  cost.algorithm = "point-to-point sends routed hop by hop (dimension order), links shared fairly";
  return cost;
}

Result<std::vector<double>> EstimateConcurrentCollectives(const Topology& topology,
                                                          const std::vector<CollectiveRequest>& requests,
                                                          const CollectiveOptions& options) {
  std::vector<StepSchedule> schedules;
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto& req = requests[r];
    if (req.kind == CollectiveKind::kCollectivePermute) {
      StepSchedule s(&topology);
      for (const auto& [src, dst] : req.source_target_pairs) {
        if (src < 0 || src >= topology.num_devices() || dst < 0 || dst >= topology.num_devices()) {
          return Error("request " + std::to_string(r) + ": pair {" + std::to_string(src) + "," + std::to_string(dst) +
                       "} names a device outside the slice");
        }
        s.AddPath(0, topology.Route(topology.ChipOfDevice(src), topology.ChipOfDevice(dst)), req.operand_bytes);
      }
      schedules.push_back(std::move(s));
      continue;
    }
    auto built = BuildCollective(topology, req.kind, req.groups, req.operand_bytes, options);
    if (!built.ok()) return Error("request " + std::to_string(r) + ": " + built.error().message);
    schedules.push_back(std::move(built->schedule));
  }
  std::vector<FluidJob> jobs;
  for (const auto& s : schedules) jobs.push_back(JobOf(s, 0.0));
  const std::vector<double> data_done = RunFluid(topology, jobs);
  std::vector<double> finish(requests.size(), 0.0);
  for (size_t r = 0; r < schedules.size(); ++r) {
    finish[r] = CombineLatency(schedules[r].total_latency(), data_done[r], options.latency_model);
  }
  return finish;
}

// ---- Mesh helpers --------------------------------------------------------------------------------------

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

// ---- Contention ----------------------------------------------------------------------------------------

Result<std::vector<TransferTiming>> SimulateFlows(const Topology& topo, const std::vector<LinkFlow>& flows,
                                                  const CollectiveOptions& options) {
  std::vector<TransferTiming> out(flows.size());
  std::vector<FluidJob> jobs(flows.size());
  for (size_t i = 0; i < flows.size(); ++i) {
    const auto& f = flows[i];
    if (!(f.bytes >= 0) || !std::isfinite(f.bytes)) return Error("flow " + std::to_string(i) + " has invalid bytes");
    if (!(f.start_s >= 0) || !std::isfinite(f.start_s)) return Error("flow " + std::to_string(i) + " has an invalid start time");
    std::map<int64_t, double> per_link;
    for (int64_t l : f.path) {
      if (l < 0 || l >= topo.num_links()) return Error("flow " + std::to_string(i) + " uses unknown link " + std::to_string(l));
      per_link[l] = f.bytes;  // a link listed twice is still crossed by the same bytes at once
    }
    jobs[i].start_s = f.start_s;
    jobs[i].link_bytes.assign(per_link.begin(), per_link.end());
    out[i].start_s = f.start_s;
    out[i].path = f.path;
    out[i].hops = static_cast<int64_t>(f.path.size());
    out[i].latency_s = topo.PathLatency(f.path);
  }
  const std::vector<double> data_done = RunFluid(topo, jobs);
  for (size_t i = 0; i < flows.size(); ++i) {
    auto& t = out[i];
    t.data_done_s = data_done[i];
    t.finish_s = options.latency_model == LatencyModel::kAdditive ? t.data_done_s + t.latency_s
                                                                   : std::max(t.start_s + t.latency_s, t.data_done_s);
  }
  return out;
}

Result<std::vector<TransferTiming>> SimulateTransfers(const Topology& topo, const std::vector<Transfer>& transfers,
                                                      const CollectiveOptions& options) {
  std::vector<LinkFlow> flows;
  flows.reserve(transfers.size());
  for (size_t i = 0; i < transfers.size(); ++i) {
    const auto& t = transfers[i];
    if (t.src_device < 0 || t.src_device >= topo.num_devices() || t.dst_device < 0 || t.dst_device >= topo.num_devices()) {
      return Error("transfer " + std::to_string(i) + " names a device outside 0.." + std::to_string(topo.num_devices() - 1));
    }
    flows.push_back({topo.Route(topo.ChipOfDevice(t.src_device), topo.ChipOfDevice(t.dst_device)), t.bytes, t.start_s});
  }
  return SimulateFlows(topo, flows, options);
}

// ---- The book's closed forms ---------------------------------------------------------------------------

double BookCollectiveTime(CollectiveKind kind, double V, double w, double t_min, const std::vector<int64_t>& sizes,
                          bool wraparound) {
  if (sizes.empty() || w <= 0) return 0;
  const double n_axes = static_cast<double>(sizes.size());
  double n = 1, sum = 0, sum_minus_one = 0;
  for (int64_t s : sizes) {
    n *= static_cast<double>(s);
    sum += static_cast<double>(s);
    sum_minus_one += static_cast<double>(s - 1);
  }
  const double W = 2 * w;  // the book's bidirectional W_ICI
  double latency, bandwidth;
  if (wraparound) {
    latency = t_min * sum / 2;
    bandwidth = V / (W * n_axes);
  } else {
    latency = t_min * sum_minus_one;
    bandwidth = (n - 1) * (V / n) / (w * n_axes);
  }
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: return std::max(latency, bandwidth);
    case CollectiveKind::kAllReduce: return 2 * std::max(latency, bandwidth);
    case CollectiveKind::kAllToAll: return std::max(latency, bandwidth / 4);
    case CollectiveKind::kCollectivePermute: return std::max(t_min, V / w);
  }
  return 0;
}

std::vector<double> GridAllGatherFractions(const std::vector<int64_t>& sizes, const std::vector<bool>& ring,
                                           bool bidirectional) {
  return BalancedGridFractions(sizes, ring, bidirectional);
}

}  // namespace shardscope
