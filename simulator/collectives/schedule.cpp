#include "simulator/collectives/schedule.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "simulator/collectives/schedule_emit.h"

namespace shardscope::sim {

namespace {

using schedule_emit::PhaseSteps;


// The phases of a group's gather pass (what EmitGatherPass expands into hops) and its steps.
void PlanGatherPass(ScheduledGroup& sg, bool bidirectional) {
  const GroupLayout& L = sg.layout;
  switch (L.kind) {
    case GroupLayout::Kind::kTrivial: return;
    case GroupLayout::Kind::kSequence: {
      SchedulePhase p;
      p.steps = PhaseSteps(L.num_stops(), L.closed && L.num_stops() >= 3, bidirectional);
      p.physical_axis = L.axes.empty() ? -1 : L.axes[0];
      p.line_size = L.num_stops();
      p.ring = L.closed && bidirectional;
      p.closed = L.closed;
      p.block = L.per_chip;
      sg.phases.push_back(p);
      sg.pass_steps = p.steps;
      return;
    }
    case GroupLayout::Kind::kSwitch: {
      SchedulePhase p;
      p.steps = 1;
      p.line_size = L.num_stops();
      sg.phases.push_back(p);
      sg.pass_steps = 1;
      return;
    }
    case GroupLayout::Kind::kGrid: {
      const size_t m = L.axes.size();
      sg.part_fractions = GridAllGatherFractions(L.size, L.ring, bidirectional);
      for (size_t j = 0; j < m; ++j) {
        int64_t offset = 0;
        int64_t block = L.per_chip;
        for (size_t q = 0; q < m; ++q) {
          const size_t a = (j + q) % m;
          const int64_t steps = PhaseSteps(L.size[a], L.ring[a], bidirectional);
          if (sg.part_fractions[j] > 0) {
            SchedulePhase p;
            p.part = static_cast<int32_t>(j);
            p.phase = static_cast<int32_t>(q);
            p.first_step = offset;
            p.steps = steps;
            p.axis = static_cast<int64_t>(a);
            p.physical_axis = L.axes[a];
            p.line_size = L.size[a];
            p.ring = L.ring[a] && bidirectional;
            p.closed = L.ring[a];
            p.block = block;
            sg.phases.push_back(p);
          }
          offset += steps;
          block *= L.size[a];
        }
        sg.pass_steps = std::max(sg.pass_steps, offset);
      }
      return;
    }
  }
}

// All-to-all over a group that is exactly a sub-grid of chips, counted per axis. With dimension-
// order routing a piece from s to t crosses an axis-a link at coordinates c exactly when t agrees
// with c on the axes before a, s agrees with c on the axes after a, and the 1-D route from s_a to
// t_a crosses it; so every link's load is piece x (product of the other group extents) x (number
// of 1-D pairs crossing it). The same loads as listing every piece, in O(sum n_a^3 + links).
void CountProductAllToAll(const Topology& topo, const GroupLayout& plan, double buffer, bool bidirectional,
                          std::vector<double>* loads, ScheduledGroup* sg) {
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
          const double bytes = chunk * multiplicity * crossings;
          if (bytes > 0) (*loads)[static_cast<size_t>(link)] += bytes;
          hop_latency = std::max(hop_latency, topo.link(link).latency);
        }
      }
      if (!schedule_emit::NextOffsets(idx, plan.size, i)) break;
    }
  }
  sg->counted = true;
  sg->counted_steps = steps;
  sg->counted_step_latency = hop_latency;
}

// The steps of an all-to-all listed piece by piece: the longest route (1 through a switch).
int64_t AllToAllSteps(const Topology& topo, const std::vector<int64_t>& group, bool bidirectional) {
  int64_t steps = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    for (size_t j = 0; j < group.size(); ++j) {
      if (i == j) continue;
      const int64_t a = topo.ChipOfDevice(group[i]), b = topo.ChipOfDevice(group[j]);
      if (a == b) continue;
      if (topo.is_switch()) steps = std::max<int64_t>(steps, 1);
      else if (bidirectional) steps = std::max(steps, topo.HopDistance(a, b));
      else steps = std::max(steps, static_cast<int64_t>(topo.Route(a, b, RoutePolicy::kPositiveOnly).size()));
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

// Collects the hops of a schedule.
class ListingSink : public ScheduleSink {
 public:
  explicit ListingSink(CollectiveSchedule* out) : out_(out) {}
  void Hop(const ScheduleHop& hop, std::span<const int64_t> links) override {
    out_->hops.push_back(hop);
    out_->links.emplace_back(links.begin(), links.end());
  }

 private:
  CollectiveSchedule* out_;
};

}  // namespace

Result<CollectivePlan> PlanCollective(const Topology& topo, CollectiveKind kind,
                                      const std::vector<std::vector<int64_t>>& groups_in, double bytes,
                                      const CollectiveOptions& options, int64_t max_hops) {
  if (kind == CollectiveKind::kCollectivePermute) {
    return Error("collective-permute takes source/target pairs: use PlanPermute");
  }
  if (!(bytes >= 0) || !std::isfinite(bytes)) return Error("operand bytes must be a finite number >= 0");
  CollectivePlan s;
  s.kind = kind;
  s.operand_bytes = bytes;
  s.bidirectional = options.bidirectional;
  s.groups = groups_in;
  if (s.groups.empty()) {
    s.groups.emplace_back();
    for (int64_t d = 0; d < topo.num_devices(); ++d) s.groups.back().push_back(d);
  }
  if (Status valid = ValidateGroups(topo, s.groups); !valid.ok()) return valid.error();
  for (const auto& g : s.groups) s.group_size = std::max(s.group_size, static_cast<int64_t>(g.size()));
  const bool bidir = options.bidirectional;
  std::set<std::string> descriptions;
  s.plans.resize(s.groups.size());
  // The walkthrough's limit, checked group by group: about stops^2 hops per pass (a ring or a
  // line; a grid's parts move along every axis), an all-to-all at least one hop per piece.
  int64_t expected = 0;
  auto within_limit = [&](int64_t stops, int64_t factor) -> Status {
    if (max_hops <= 0) return Status::Ok();
    expected += factor * stops * std::max<int64_t>(0, stops - 1);
    if (expected > max_hops) {
      return Error("this collective has more than " + std::to_string(max_hops) +
                   " transfers to show; pick a collective over fewer devices");
    }
    return Status::Ok();
  };

  if (kind == CollectiveKind::kAllToAll) {
    std::vector<double> counted;
    for (size_t g = 0; g < s.groups.size(); ++g) {
      const auto& group = s.groups[g];
      ScheduledGroup& sg = s.plans[g];
      const std::string description = topo.is_switch() ? "direct sends through the switch"
                                                       : "shortest-route store-and-forward (ties round a ring split half/half)";
      descriptions.insert(description);
      if (group.size() <= 1) continue;
      if (options.per_axis_all_to_all && !topo.is_switch()) {
        sg.layout = LayOutReplicaGroup(topo, group);
        if (sg.layout.product && sg.layout.per_chip == 1) {
          if (counted.empty()) counted.assign(static_cast<size_t>(topo.num_links()), 0.0);
          CountProductAllToAll(topo, sg.layout, bytes, bidir, &counted, &sg);
          s.steps = std::max(s.steps, sg.counted_steps);
          continue;
        }
      }
      if (Status limit = within_limit(static_cast<int64_t>(group.size()), 1); !limit.ok()) return limit.error();
      sg.pass_steps = AllToAllSteps(topo, group, bidir);
      s.steps = std::max(s.steps, sg.pass_steps);
    }
    for (size_t l = 0; l < counted.size(); ++l) {
      if (counted[l] > 0) s.counted_loads.emplace_back(static_cast<int64_t>(l), counted[l]);
    }
    s.pass_steps = s.steps;
  } else {
    for (size_t g = 0; g < s.groups.size(); ++g) {
      ScheduledGroup& sg = s.plans[g];
      sg.layout = LayOutReplicaGroup(topo, s.groups[g]);
      const int64_t factor = (kind == CollectiveKind::kAllReduce ? 2 : 1) *
                             std::max<int64_t>(1, static_cast<int64_t>(sg.layout.axes.size()));
      if (Status limit = within_limit(sg.layout.num_stops(), factor); !limit.ok()) return limit.error();
      PlanGatherPass(sg, bidir);
      s.pass_steps = std::max(s.pass_steps, sg.pass_steps);
      s.parts = std::max(s.parts, static_cast<int64_t>(sg.part_fractions.size()));
      switch (kind) {
        case CollectiveKind::kAllGather: descriptions.insert(sg.layout.description); break;
        case CollectiveKind::kReduceScatter:
          descriptions.insert(sg.layout.description + " (the all-gather schedule reversed)");
          break;
        default: descriptions.insert("reduce-scatter + all-gather, " + sg.layout.description); break;
      }
    }
    s.steps = kind == CollectiveKind::kAllReduce ? 2 * s.pass_steps : s.pass_steps;
  }

  // Named the same whatever the order of the groups: the distinct layouts, sorted.
  if (descriptions.size() == 1) {
    s.algorithm = *descriptions.begin();
  } else {
    s.algorithm = std::to_string(descriptions.size()) + " layouts over the " + std::to_string(s.groups.size()) + " groups: ";
    int listed = 0;
    for (const std::string& d : descriptions) {
      if (listed == 3) {
        s.algorithm += "; ...";
        break;
      }
      s.algorithm += (listed++ ? "; " : "") + d;
    }
  }
  if (!bidir && kind != CollectiveKind::kAllToAll) s.algorithm += "; rings one-directional";
  const double n = static_cast<double>(s.group_size);
  switch (kind) {
    case CollectiveKind::kAllGather: s.bytes_per_device = (n - 1) * bytes; break;
    case CollectiveKind::kReduceScatter: s.bytes_per_device = (n - 1) / n * bytes; break;
    case CollectiveKind::kAllReduce: s.bytes_per_device = 2 * (n - 1) / n * bytes; break;
    case CollectiveKind::kAllToAll: s.bytes_per_device = (n - 1) / n * bytes; break;
    case CollectiveKind::kCollectivePermute: break;
  }
  return s;
}

Result<CollectivePlan> PlanPermute(const Topology& topo, const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes) {
  if (!(bytes >= 0) || !std::isfinite(bytes)) return Error("bytes must be a finite number >= 0");
  CollectivePlan s;
  s.kind = CollectiveKind::kCollectivePermute;
  s.pairs = pairs;
  s.operand_bytes = bytes;
  s.group_size = 2;
  std::vector<double> received(static_cast<size_t>(topo.num_devices()), 0.0);
  for (const auto& [src, dst] : pairs) {
    if (src < 0 || src >= topo.num_devices() || dst < 0 || dst >= topo.num_devices()) {
      return Error("source/target pair {" + std::to_string(src) + "," + std::to_string(dst) +
                   "} names a device outside 0.." + std::to_string(topo.num_devices() - 1));
    }
    if (src != dst) received[static_cast<size_t>(dst)] += bytes;
    if (bytes > 0 && topo.ChipOfDevice(src) != topo.ChipOfDevice(dst)) s.steps = 1;
  }
  s.pass_steps = s.steps;
  for (double r : received) s.bytes_per_device = std::max(s.bytes_per_device, r);
  s.algorithm = "point-to-point sends routed hop by hop (dimension order), links shared fairly";
  return s;
}

void EmitSchedule(const Topology& topo, const CollectivePlan& plan, ScheduleSink& sink) {
  schedule_emit::Emit(topo, plan, sink);
}

namespace {

Result<CollectiveSchedule> Listed(const Topology& topo, Result<CollectivePlan> plan) {
  if (!plan.ok()) return plan.error();
  CollectiveSchedule s;
  s.plan = std::move(plan).value();
  ListingSink sink(&s);
  EmitSchedule(topo, s.plan, sink);
  return s;
}

}  // namespace

Result<CollectiveSchedule> BuildCollectiveSchedule(const Topology& topo, CollectiveKind kind,
                                                   const std::vector<std::vector<int64_t>>& groups, double bytes,
                                                   const CollectiveOptions& options, int64_t max_hops) {
  return Listed(topo, PlanCollective(topo, kind, groups, bytes, options, max_hops));
}

Result<CollectiveSchedule> BuildPermuteSchedule(const Topology& topo, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                                double bytes) {
  return Listed(topo, PlanPermute(topo, pairs, bytes));
}

std::vector<int64_t> CarriedChunks(const CollectivePlan& s, const ScheduleHop& hop) {
  if (s.kind == CollectiveKind::kAllToAll || s.kind == CollectiveKind::kCollectivePermute) return {hop.origin};
  const GroupLayout& L = s.plans[static_cast<size_t>(hop.group)].layout;
  if (L.kind != GroupLayout::Kind::kGrid || hop.phase == 0) return L.stop_members[static_cast<size_t>(hop.origin)];
  // A multi-axis gather: the block of the origin's sub-grid over the axes this part has gathered.
  const size_t m = L.axes.size();
  std::vector<char> gathered(m, 0);
  for (int32_t q = 0; q < hop.phase; ++q) gathered[(static_cast<size_t>(hop.part) + static_cast<size_t>(q)) % m] = 1;
  const std::vector<int64_t> origin = L.StopOffsets(hop.origin);
  std::vector<int64_t> chunks;
  for (int64_t t = 0; t < L.num_stops(); ++t) {
    const std::vector<int64_t> o = L.StopOffsets(t);
    bool same = true;
    for (size_t a = 0; a < m && same; ++a) same = gathered[a] || o[a] == origin[a];
    if (same) chunks.insert(chunks.end(), L.stop_members[static_cast<size_t>(t)].begin(), L.stop_members[static_cast<size_t>(t)].end());
  }
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

int64_t CarriedChunkCount(const CollectivePlan& s, const ScheduleHop& h) {
  if (s.kind == CollectiveKind::kAllToAll || s.kind == CollectiveKind::kCollectivePermute) return 1;
  const GroupLayout& L = s.plans[static_cast<size_t>(h.group)].layout;
  if (L.kind != GroupLayout::Kind::kGrid) return static_cast<int64_t>(L.stop_members[static_cast<size_t>(h.origin)].size());
  int64_t count = L.per_chip;
  for (int32_t q = 0; q < h.phase; ++q) count *= L.size[(static_cast<size_t>(h.part) + static_cast<size_t>(q)) % L.axes.size()];
  return count;
}

}  // namespace shardscope::sim
