// How a collective plan expands into its hops (EmitSchedule), as templates over the sink so the
// cost model's accumulation (collectives/cost.cpp) inlines into the loops that list the hops.
// Internal to simulator/collectives: schedule.h is the interface.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "simulator/collectives/schedule.h"
#include "simulator/topology.h"

namespace shardscope::sim::schedule_emit {

// Steps of one pass along a sequence of n stops.
inline int64_t PhaseSteps(int64_t n, bool ring, bool bidirectional) { return (ring && bidirectional) ? n / 2 : n - 1; }

// Advances `idx` to the next combination of offsets over every axis but `fixed` (the first axis
// fastest); false after the last one.
inline bool NextOffsets(std::vector<int64_t>& idx, const std::vector<int64_t>& size, size_t fixed) {
  for (size_t b = 0; b < idx.size(); ++b) {
    if (b == fixed) continue;
    if (++idx[b] < size[b]) return true;
    idx[b] = 0;
  }
  return false;
}

// The link crossing `link` backwards: from its end to its start, along the same axis and across
// the same wraparound where there is a choice.
inline int64_t ReverseLink(const Topology& topo, int64_t link) {
  const TopologyLink& l = topo.link(link);
  int64_t back = topo.LinkBetween(l.dst, l.src);
  for (int64_t cand : topo.OutLinks(l.dst)) {
    const TopologyLink& c = topo.link(cand);
    if (c.dst == l.src && c.axis == l.axis && c.wraparound == l.wraparound) back = cand;
  }
  return back;
}

// The links of `path` crossed backwards, in order.
inline void AppendReversed(const Topology& topo, std::span<const int64_t> path, std::vector<int64_t>* out) {
  for (size_t i = path.size(); i-- > 0;) out->push_back(ReverseLink(topo, path[i]));
}

// Routes between stops, kept in one buffer: [offset, offset + length), with their latency.
struct RouteBuffer {
  std::vector<int64_t> links;
  std::vector<std::pair<size_t, size_t>> spans;
  std::vector<double> latency;
  int32_t Add(const Topology& topo, const std::vector<int64_t>& path) {
    spans.emplace_back(links.size(), path.size());
    links.insert(links.end(), path.begin(), path.end());
    latency.push_back(topo.PathLatency(path));
    return static_cast<int32_t>(spans.size() - 1);
  }
  int32_t AddReversed(const Topology& topo, int32_t route) {
    const auto [o, n] = spans[static_cast<size_t>(route)];
    const size_t offset = links.size();
    double total = 0;
    for (size_t i = o + n; i-- > o;) {
      const int64_t back = ReverseLink(topo, links[i]);
      links.push_back(back);
      total += topo.link(back).latency;
    }
    spans.emplace_back(offset, n);
    latency.push_back(total);
    return static_cast<int32_t>(spans.size() - 1);
  }
  std::span<const int64_t> operator[](int32_t route) const {
    const auto [o, n] = spans[static_cast<size_t>(route)];
    return std::span<const int64_t>(links.data() + o, n);
  }
};

// How a pass is emitted: forwards (an all-gather), or backwards (a reduce-scatter: step k is
// forward step S-1-k, every hop reversed).
struct PassMode {
  bool reversed = false;
  int64_t pass_steps = 0;  // S (reversed)
  int64_t step_offset = 0;  // added to every step (an all-reduce's all-gather pass)
};

// A sink that takes a sequence's link loads and step latencies in bulk (the cost model's, whose
// figures are sums and maxima over the hops): it declares `kLoadsOnly` and has Group(group),
// AddLoad(reduce, links, bytes) and StepLatency(step, latency) besides Hop.
template <class Sink>
concept LoadsOnlySink = requires { requires Sink::kLoadsOnly; };

// Blocks flow along a sequence of stops (a ring when `closed`, else a line).
template <class Sink>
void EmitSequence(const Topology& topo, const GroupLayout& L, const std::vector<int32_t>& stops, bool closed,
                  bool bidirectional, double block_bytes, int64_t step0, int32_t group, int32_t part, int32_t phase,
                  const PassMode& mode, Sink& sink) {
  const int64_t n = static_cast<int64_t>(stops.size());
  if (n <= 1) return;
  // Sequence indices used below lie in (-n, 2n).
  auto idx = [n](int64_t i) { return static_cast<size_t>(i < 0 ? i + n : i >= n ? i - n : i); };
  auto at = [&](int64_t i) { return stops[idx(i)]; };
  auto chip = [&](int64_t i) { return L.chips[static_cast<size_t>(at(i))]; };
  RouteBuffer routes;
  routes.spans.reserve(static_cast<size_t>(4 * n));
  routes.latency.reserve(static_cast<size_t>(4 * n));
  routes.links.reserve(static_cast<size_t>(4 * n));
  std::vector<int32_t> right(static_cast<size_t>(n), -1), left(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < n; ++i) {
    if (closed || i + 1 < n) right[static_cast<size_t>(i)] = routes.Add(topo, topo.Route(chip(i), chip(i + 1)));
    if (closed || i > 0) left[static_cast<size_t>(i)] = routes.Add(topo, topo.Route(chip(i), chip(i - 1)));
  }
  const bool one_way_ring = closed && n >= 3 && !bidirectional;
  // The reduce-scatter crosses each route backwards (a one-way ring: forwards, reflected).
  std::vector<int32_t> back_of(routes.spans.size(), -1);
  if (mode.reversed && !one_way_ring) {
    for (size_t r = 0; r < back_of.size(); ++r) back_of[r] = routes.AddReversed(topo, static_cast<int32_t>(r));
  }
  if constexpr (LoadsOnlySink<Sink>) {
    // The n(n-1) hops below, summed per route: the same loads and step latencies without listing
    // them (O(n) instead of O(n^2) for a ring of n stops; 2048-device groups have hundreds).
    sink.Group(group);
    if (block_bytes <= 0) return;
    auto crossed_of = [&](int32_t route) {
      return mode.reversed && !one_way_ring ? back_of[static_cast<size_t>(route)] : route;
    };
    auto latency = [&](int32_t route) { return routes.latency[static_cast<size_t>(crossed_of(route))]; };
    auto load = [&](int32_t route, double bytes) { sink.AddLoad(mode.reversed, routes[crossed_of(route)], bytes); };
    auto step_of = [&](int64_t k) {
      const int64_t step = step0 + k - 1;
      return mode.reversed ? mode.pass_steps - 1 - step + mode.step_offset : step + mode.step_offset;
    };
    if (closed && n >= 3) {
      // Every step crosses every route of the ring once (a one-way ring's reduce-scatter too:
      // its hops are the all-gather's reflected onto the same routes).
      double worst = 0;
      for (int64_t j = 0; j < n; ++j) {
        worst = std::max(worst, latency(right[static_cast<size_t>(j)]));
        if (bidirectional) worst = std::max(worst, latency(left[static_cast<size_t>(j)]));
      }
      int64_t steps = n - 1;
      if (bidirectional) {
        steps = n / 2;
        const bool half = n % 2 == 0;  // the last step sends half blocks each way
        const double per_route = static_cast<double>(half ? steps - 1 : steps) * block_bytes + (half ? block_bytes / 2 : 0.0);
        for (int64_t j = 0; j < n; ++j) {
          load(right[static_cast<size_t>(j)], per_route);
          load(left[static_cast<size_t>(j)], per_route);
        }
      } else {
        for (int64_t j = 0; j < n; ++j) load(right[static_cast<size_t>(j)], static_cast<double>(n - 1) * block_bytes);
      }
      for (int64_t k = 1; k <= steps; ++k) sink.StepLatency(step_of(k), worst);
      return;
    }
    // A line: right[j] carries the blocks of stops 0..j (steps 1..j+1), left[j] those of stops
    // j..n-1 (steps 1..n-j); step k crosses right[k-1..n-2] and left[1..n-k].
    std::vector<double> right_from(static_cast<size_t>(n), 0.0), left_upto(static_cast<size_t>(n), 0.0);
    for (int64_t j = n - 2; j >= 0; --j) {
      load(right[static_cast<size_t>(j)], static_cast<double>(j + 1) * block_bytes);
      right_from[static_cast<size_t>(j)] = std::max(right_from[static_cast<size_t>(j + 1)], latency(right[static_cast<size_t>(j)]));
    }
    for (int64_t j = 1; j < n; ++j) {
      load(left[static_cast<size_t>(j)], static_cast<double>(n - j) * block_bytes);
      left_upto[static_cast<size_t>(j)] = std::max(left_upto[static_cast<size_t>(j - 1)], latency(left[static_cast<size_t>(j)]));
    }
    for (int64_t k = 1; k < n; ++k) {
      sink.StepLatency(step_of(k), std::max(right_from[static_cast<size_t>(k - 1)], left_upto[static_cast<size_t>(n - k)]));
    }
    return;
  }
  ScheduleHop h;
  h.group = group;
  h.part = part;
  h.phase = phase;
  h.reduce = mode.reversed;
  // Hop from sequence index `from` to `to` in forward step `step`, carrying the block of `origin`.
  auto emit = [&](int64_t step, int64_t from, int64_t to, int64_t origin, bool half, int32_t route) {
    h.origin = at(origin);
    h.fraction = half ? 0.5 : 1.0;
    h.bytes = half ? block_bytes / 2 : block_bytes;
    int32_t crossed = route;
    if (!mode.reversed) {
      h.step = static_cast<int32_t>(step + mode.step_offset);
      h.from = at(from);
      h.to = at(to);
    } else {
      h.step = static_cast<int32_t>(mode.pass_steps - 1 - step + mode.step_offset);
      if (one_way_ring) {
        // Hop k of a one-way ring carries origin o from o+k-1 to o+k; its reduce-scatter twin
        // carries the partial sum of o's chunk from o-k to o-k+1 (it reaches o after N-1 steps).
        const int64_t k = to - origin;
        h.from = at(origin - k);
        h.to = at(origin - k + 1);
        crossed = right[idx(origin - k)];
      } else {
        h.from = at(to);
        h.to = at(from);
        crossed = back_of[static_cast<size_t>(route)];
      }
    }
    const std::span<const int64_t> links = routes[crossed];
    h.latency = routes.latency[static_cast<size_t>(crossed)];
    h.first_link = 0;
    h.route_links = static_cast<int32_t>(links.size());
    sink.Hop(h, links);
  };
  if (closed && n >= 3) {
    if (bidirectional) {
      const int64_t k_max = n / 2;
      for (int64_t src = 0; src < n; ++src) {
        for (int64_t k = 1; k <= k_max; ++k) {
          const bool half = n % 2 == 0 && k == k_max;
          emit(step0 + k - 1, src + k - 1, src + k, src, half, right[idx(src + k - 1)]);
          emit(step0 + k - 1, src - k + 1, src - k, src, half, left[idx(src - k + 1)]);
        }
      }
      return;
    }
    for (int64_t src = 0; src < n; ++src) {
      for (int64_t k = 1; k < n; ++k) emit(step0 + k - 1, src + k - 1, src + k, src, false, right[idx(src + k - 1)]);
    }
    return;
  }
  // A line: each block flows to both ends.
  for (int64_t src = 0; src < n; ++src) {
    for (int64_t k = 1; src + k < n; ++k) emit(step0 + k - 1, src + k - 1, src + k, src, false, right[idx(src + k - 1)]);
    for (int64_t k = 1; src - k >= 0; ++k) emit(step0 + k - 1, src - k + 1, src - k, src, false, left[idx(src - k + 1)]);
  }
}

// One gather pass of a group whose stops each hold a block of `unit` x per_chip bytes.
template <class Sink>
void EmitGatherPass(const Topology& topo, const ScheduledGroup& sg, double unit, bool bidirectional, int32_t group,
                    const PassMode& mode, Sink& sink) {
  const GroupLayout& L = sg.layout;
  const double shard = unit * static_cast<double>(L.per_chip);
  switch (L.kind) {
    case GroupLayout::Kind::kTrivial: return;
    case GroupLayout::Kind::kSequence: {
      std::vector<int32_t> order(static_cast<size_t>(L.num_stops()));
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
      EmitSequence(topo, L, order, L.closed, bidirectional, shard, 0, group, 0, 0, mode, sink);
      return;
    }
    case GroupLayout::Kind::kSwitch: {
      ScheduleHop h;
      h.group = group;
      h.reduce = mode.reversed;
      h.step = static_cast<int32_t>(mode.step_offset);
      h.bytes = unit;
      std::vector<int64_t> back;
      for (int64_t i = 0; i < L.num_stops(); ++i) {
        for (int64_t j = 0; j < L.num_stops(); ++j) {
          if (i == j) continue;
          const std::vector<int64_t> path = topo.Route(L.chips[static_cast<size_t>(i)], L.chips[static_cast<size_t>(j)]);
          h.origin = static_cast<int32_t>(i);
          h.from = static_cast<int32_t>(mode.reversed ? j : i);
          h.to = static_cast<int32_t>(mode.reversed ? i : j);
          std::span<const int64_t> links = path;
          if (mode.reversed) {
            back.clear();
            AppendReversed(topo, path, &back);
            links = back;
          }
          h.route_links = static_cast<int32_t>(links.size());
          h.latency = topo.PathLatency(path);
          sink.Hop(h, links);
        }
      }
      return;
    }
    case GroupLayout::Kind::kGrid: {
      const size_t m = L.axes.size();
      // The phases in order: part j's phases follow each other, its block growing by each axis.
      double block = 0;
      for (const SchedulePhase& p : sg.phases) {
        const size_t j = static_cast<size_t>(p.part);
        const size_t a = static_cast<size_t>(p.axis);
        if (p.phase == 0) block = sg.part_fractions[j] * shard;
        // Every line along axis a inside the group's sub-grid.
        std::vector<int64_t> idx(m, 0);
        while (true) {
          std::vector<int64_t> offsets = idx;
          std::vector<int32_t> line;
          for (int64_t x = 0; x < L.size[a]; ++x) {
            offsets[a] = x;
            line.push_back(static_cast<int32_t>(L.StopAtOffsets(offsets)));
          }
          EmitSequence(topo, L, line, L.ring[a], bidirectional, block, p.first_step, group, p.part, p.phase, mode, sink);
          if (!NextOffsets(idx, L.size, a)) break;
        }
        block *= static_cast<double>(L.size[a]);
      }
      return;
    }
  }
}

// The routes of every piece of an all-to-all: (fraction, path) per route variant.
inline std::vector<std::pair<double, std::vector<int64_t>>> PieceRoutes(const Topology& topo, int64_t a, int64_t b,
                                                                 bool bidirectional) {
  if (topo.is_switch()) return {{1.0, topo.Route(a, b)}};
  if (bidirectional) return topo.SplitRoutes(a, b);
  return {{1.0, topo.Route(a, b, RoutePolicy::kPositiveOnly)}};
}

// Every piece of an all-to-all along its route, one link per step (a switch: the whole route in
// step 0; devices of one chip: step 0, no link).
template <class Sink>
void EmitAllToAll(const Topology& topo, const std::vector<int64_t>& group, double buffer, bool bidirectional,
                  int32_t gi, Sink& sink) {
  const int64_t n = static_cast<int64_t>(group.size());
  if (n <= 1) return;
  const double chunk = buffer / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const int64_t a = topo.ChipOfDevice(group[static_cast<size_t>(i)]), b = topo.ChipOfDevice(group[static_cast<size_t>(j)]);
      for (const auto& [fraction, path] : PieceRoutes(topo, a, b, bidirectional)) {
        ScheduleHop h;
        h.group = gi;
        h.origin = static_cast<int32_t>(i);
        h.target = static_cast<int32_t>(j);
        h.fraction = fraction;
        h.bytes = chunk * fraction;
        h.route_links = static_cast<int32_t>(path.size());
        if (path.empty() || topo.is_switch()) {
          h.from = static_cast<int32_t>(a);
          h.to = static_cast<int32_t>(b);
          h.latency = topo.PathLatency(path);
          sink.Hop(h, path);
          continue;
        }
        for (size_t k = 0; k < path.size(); ++k) {
          const TopologyLink& link = topo.link(path[k]);
          h.step = static_cast<int32_t>(k);
          h.from = static_cast<int32_t>(link.src);
          h.to = static_cast<int32_t>(link.dst);
          h.first_link = static_cast<int32_t>(k);
          h.latency = link.latency;
          sink.Hop(h, std::span<const int64_t>(path.data() + k, 1));
        }
      }
    }
  }
}

// EmitSchedule's body, for any sink (the cost model instantiates it with its own, inlined).
template <class Sink>
void Emit(const Topology& topo, const CollectivePlan& plan, Sink& sink) {
  if (plan.kind == CollectiveKind::kCollectivePermute) {
    ScheduleHop h;
    h.bytes = plan.operand_bytes;
    for (size_t i = 0; i < plan.pairs.size(); ++i) {
      const auto [src, dst] = plan.pairs[i];
      h.origin = static_cast<int32_t>(i);
      h.from = static_cast<int32_t>(topo.ChipOfDevice(src));
      h.to = static_cast<int32_t>(topo.ChipOfDevice(dst));
      const std::vector<int64_t> path = topo.Route(h.from, h.to);
      h.route_links = static_cast<int32_t>(path.size());
      h.latency = topo.PathLatency(path);
      sink.Hop(h, path);
    }
    return;
  }
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const ScheduledGroup& sg = plan.plans[g];
    const int32_t gi = static_cast<int32_t>(g);
    if (plan.kind == CollectiveKind::kAllToAll) {
      if (!sg.counted) EmitAllToAll(topo, plan.groups[g], plan.operand_bytes, plan.bidirectional, gi, sink);
      continue;
    }
    const double gn = static_cast<double>(plan.groups[g].size());
    const double unit = plan.kind == CollectiveKind::kAllGather ? plan.operand_bytes : plan.operand_bytes / gn;
    const int64_t S = plan.pass_steps;
    if (plan.kind != CollectiveKind::kAllGather) {
      EmitGatherPass(topo, sg, unit, plan.bidirectional, gi, PassMode{true, S, 0}, sink);
    }
    if (plan.kind != CollectiveKind::kReduceScatter) {
      EmitGatherPass(topo, sg, unit, plan.bidirectional, gi,
                     PassMode{false, S, plan.kind == CollectiveKind::kAllReduce ? S : 0}, sink);
    }
  }
}

}  // namespace shardscope::sim::schedule_emit
