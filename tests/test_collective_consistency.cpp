// A replica group's plan and cost depend on that group alone (collectives/layout.h, "How a group is
// laid out"): the same group costs the same alone and beside other groups whose links it does not
// share, strictly more beside groups that share its links (contention only), and the same whatever
// the order of the groups or a rotation / reversal of its members' ring order. The teaching
// walkthrough, built on the same layout, takes the same number of steps.
//
// Figures are derived by hand in the comments: TPU v5e links carry W = 4.5e10 B/s one way and a hop
// costs 1 us; the shard is S = 2 MiB = 2097152 B, so S / W = 46.603 us.
#include <QtTest/QtTest>

#include <cmath>

#include "simulator/collectives/cost.h"
#include "simulator/collectives/walkthrough.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

using namespace shardscope;
using namespace shardscope::sim;

namespace {

constexpr double us = 1e-6;
constexpr double S = 2097152;  // bytes per shard
constexpr double W = 4.5e10;   // v5e, one way

ChipSpec Preset(const char* name) {
  auto c = ChipPreset(name);
  if (!c.ok()) qFatal("preset %s: %s", name, c.error().message.c_str());
  return c.value();
}

Topology Make(const char* chip, std::vector<int64_t> shape, bool wrap_all = false) {
  TopologyOptions o;
  if (wrap_all) o.wraparound = TopologyOptions::Wraparound::kAll;
  auto t = Topology::Create(Preset(chip), std::move(shape), o);
  if (!t.ok()) qFatal("topology: %s", t.error().message.c_str());
  return std::move(t.value());
}

using Groups = std::vector<std::vector<int64_t>>;

CollectiveCost Cost(const Topology& t, const Groups& groups, CollectiveKind kind = CollectiveKind::kAllGather,
                    CollectiveOptions o = {}) {
  auto c = EstimateCollective(t, kind, groups, S, o);
  if (!c.ok()) qFatal("cost: %s", c.error().message.c_str());
  return c.value();
}

std::vector<double> Concurrent(const Topology& t, const Groups& groups) {
  std::vector<CollectiveRequest> reqs;
  for (const auto& g : groups) {
    CollectiveRequest r;
    r.kind = CollectiveKind::kAllGather;
    r.groups = {g};
    r.operand_bytes = S;
    reqs.push_back(r);
  }
  auto f = EstimateConcurrentCollectives(t, reqs);
  if (!f.ok()) qFatal("concurrent: %s", f.error().message.c_str());
  return f.value();
}

bool Near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)) + 1e-15; }

// Bytes on each link that carries any, as a map for comparisons.
std::map<int64_t, double> Traffic(const CollectiveCost& c) {
  std::map<int64_t, double> m;
  for (const auto& lt : c.link_traffic) m[lt.link] = lt.bytes;
  return m;
}
// The traffic of `all` restricted to the links `part` uses.
std::map<int64_t, double> On(const std::map<int64_t, double>& all, const std::map<int64_t, double>& part) {
  std::map<int64_t, double> m;
  for (const auto& [l, b] : part) m[l] = all.count(l) ? all.at(l) : 0.0;
  return m;
}
bool SameTraffic(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [l, x] : a) {
    if (!b.count(l) || !Near(x, b.at(l))) return false;
  }
  return true;
}

int64_t WalkSteps(const Topology& t, const Groups& groups) {
  auto w = WalkThroughCollective(t, CollectiveKind::kAllGather, groups, S);
  if (!w.ok()) qFatal("walkthrough: %s", w.error().message.c_str());
  return static_cast<int64_t>(w->steps.size());
}

}  // namespace

class TestCollectiveConsistency : public QObject {
  Q_OBJECT

 private slots:
  void sameGroupAloneAndBesideDisjointGroups() {
    // A line of 8 v5e chips (no wraparound). {0,2,1,3} is exactly chips 0..3, a segment of the
    // line: planned as the physical line 0-1-2-3 (the member order only says where each shard ends
    // up). The link 2->3 carries the shards of 0, 1 and 2: 3 S = 6291456 B -> 139.81 us; 3 steps of
    // 1 hop = 3 us. (Read as a routed ring 0->2->1->3->0 the link 1->2 would carry 6 S, 279.6 us.)
    const Topology line = Make("tpu-v5e", {8});
    const double t_line = 3 * S / W;
    QVERIFY(std::fabs(t_line - 139.81 * us) < 0.01 * us);
    const CollectiveCost alone = Cost(line, {{0, 2, 1, 3}});
    QVERIFY(Near(alone.time_s, t_line));
    QCOMPARE(alone.max_link_bytes, 3 * S);
    QCOMPARE(Traffic(alone).at(line.LinkBetween(2, 3)), 3 * S);  // and 1->0 leftwards
    QCOMPARE(Traffic(alone).at(line.LinkBetween(1, 0)), 3 * S);
    QCOMPARE(Traffic(alone).at(line.LinkBetween(1, 2)), 2 * S);
    QCOMPARE(alone.steps, int64_t{3});
    QVERIFY(Near(alone.latency_time_s, 3 * us));
    QVERIFY(alone.algorithm.find("line") != std::string::npos);
    // Beside {4,6,5,7} (chips 4..7: links 4-5, 5-6, 6-7, none shared), in either order of the
    // groups: the same time, and exactly the same bytes on the links of {0,2,1,3}.
    for (const Groups& groups : {Groups{{0, 2, 1, 3}, {4, 6, 5, 7}}, Groups{{4, 6, 5, 7}, {0, 2, 1, 3}}}) {
      const CollectiveCost both = Cost(line, groups);
      QVERIFY(Near(both.time_s, t_line));
      QCOMPARE(both.steps, int64_t{3});
      QVERIFY(Near(both.latency_time_s, 3 * us));
      QVERIFY(SameTraffic(On(Traffic(both), Traffic(alone)), Traffic(alone)));
      QCOMPARE(both.link_traffic.size(), 2 * alone.link_traffic.size());
      QCOMPARE(WalkSteps(line, groups), int64_t{3});
    }
    // Run as two concurrent collectives, each finishes at its time alone.
    const std::vector<double> f = Concurrent(line, {{0, 2, 1, 3}, {4, 6, 5, 7}});
    QVERIFY(Near(f[0], t_line));
    QVERIFY(Near(f[1], t_line));
  }

  void groupsWithDifferentStepsDoNotAddLatency() {
    // A 4x4 v5e mesh, tiny shards (latency-bound). Row 0 {0,1,2,3} is a line: 3 steps of 1 hop =
    // 3 us. {4,6} in row 1 is one step over a 2-link route: 2 us. They share no link. Groups are not
    // synchronised with each other, so together they take max(3, 2) = 3 us, not the per-step
    // maximum summed over steps (2 + 1 + 1 = 4 us, what the model gave before).
    const Topology m = Make("tpu-v5e", {4, 4});
    const double tiny = 1024;
    auto cost = [&](const Groups& g, CollectiveKind kind) {
      auto c = EstimateCollective(m, kind, g, tiny);
      if (!c.ok()) qFatal("cost: %s", c.error().message.c_str());
      return c.value();
    };
    QVERIFY(Near(cost({{0, 1, 2, 3}}, CollectiveKind::kAllGather).time_s, 3 * us));
    QVERIFY(Near(cost({{4, 6}}, CollectiveKind::kAllGather).time_s, 2 * us));
    for (const Groups& g : {Groups{{0, 1, 2, 3}, {4, 6}}, Groups{{4, 6}, {0, 1, 2, 3}}}) {
      const CollectiveCost both = cost(g, CollectiveKind::kAllGather);
      QVERIFY(Near(both.time_s, 3 * us));
      QVERIFY(Near(both.latency_time_s, 3 * us));
      QCOMPARE(both.steps, int64_t{3});
      QCOMPARE(both.regime, CostRegime::kLatencyBound);
      // All-reduce: reduce-scatter + all-gather, 6 us for the line alone and beside {4,6} (4 us).
      QVERIFY(Near(cost(g, CollectiveKind::kAllReduce).latency_time_s, 6 * us));
    }
    QVERIFY(Near(cost({{4, 6}}, CollectiveKind::kAllReduce).latency_time_s, 4 * us));
    // The description names both layouts, the same in either group order.
    const std::string one = cost({{0, 1, 2, 3}, {4, 6}}, CollectiveKind::kAllGather).algorithm;
    const std::string other = cost({{4, 6}, {0, 1, 2, 3}}, CollectiveKind::kAllGather).algorithm;
    QCOMPARE(one, other);
    QVERIFY2(one.rfind("2 layouts over the 2 groups: ", 0) == 0, one.c_str());
    QVERIFY(one.find(cost({{0, 1, 2, 3}}, CollectiveKind::kAllGather).algorithm) != std::string::npos);
    QVERIFY(one.find(cost({{4, 6}}, CollectiveKind::kAllGather).algorithm) != std::string::npos);
  }

  void sharedLinksCostStrictlyMore() {
    // A line of 8: {0,2,4,6} is not a segment, so it runs the bidirectional ring 0->2->4->6->0 in
    // its given order with routed hops. Each logical hop carries S in step 1 and S/2 in step 2:
    // 1.5 S per direction. Every link i->i+1 (i = 0..5) carries one forward hop (0->2, 2->4 or
    // 4->6) and the backward hop 0->6 routed over 0->1->...->6: 3 S; likewise the links i+1->i.
    // Alone: 3 S / W = 139.81 us, 2 steps whose longest route is 6 hops: 12 us of latency.
    const Topology line = Make("tpu-v5e", {8});
    const CollectiveCost a = Cost(line, {{0, 2, 4, 6}});
    QVERIFY(Near(a.time_s, 3 * S / W));
    QCOMPARE(a.max_link_bytes, 3 * S);
    QCOMPARE(a.steps, int64_t{2});
    QVERIFY(Near(a.latency_time_s, 12 * us));
    QVERIFY(a.algorithm.find("logical ring") != std::string::npos);
    // Beside {1,3,5,7} (the same plan shifted by one chip) links 1->2 .. 5->6 carry 3 S from each:
    // 6 S -> 279.62 us, strictly more. The plan of {0,2,4,6} is unchanged: its own bytes per link
    // are the same, only the load from the other group is added.
    const CollectiveCost ab = Cost(line, {{0, 2, 4, 6}, {1, 3, 5, 7}});
    QVERIFY(Near(ab.time_s, 6 * S / W));
    QVERIFY(std::fabs(ab.time_s - 279.62 * us) < 0.01 * us);
    QVERIFY(ab.time_s > a.time_s);
    QCOMPARE(ab.max_link_bytes, 6 * S);
    QCOMPARE(Traffic(ab).at(line.LinkBetween(1, 2)), 6 * S);
    QCOMPARE(Traffic(ab).at(line.LinkBetween(0, 1)), 3 * S);  // only {0,2,4,6} crosses 0->1
    QCOMPARE(ab.steps, int64_t{2});
    QVERIFY(Near(ab.latency_time_s, 12 * us));
    // As concurrent collectives both shares are symmetric: each at half speed, 279.62 us.
    const std::vector<double> f = Concurrent(line, {{0, 2, 4, 6}, {1, 3, 5, 7}});
    QVERIFY(Near(f[0], 6 * S / W));
    QVERIFY(Near(f[1], 6 * S / W));
    // Partly shared: {5,7} (2 devices, one step over the route 5->6->7 and back) puts S on 5->6,
    // which {0,2,4,6} loads with 3 S. Alone {5,7} takes S / W = 46.60 us. Together the link 5->6
    // carries 4 S: the call takes 4 S / W = 186.41 us. Max-min fair sharing: both need the whole
    // link at full speed, so both run at half speed; {5,7} finishes at 2 S / W = 93.21 us, having
    // let {0,2,4,6} do 1/3 of its 3 S / W; its remaining 2 S / W at full speed end at 4 S / W.
    QVERIFY(Near(Cost(line, {{5, 7}}).time_s, S / W));
    const CollectiveCost ac = Cost(line, {{0, 2, 4, 6}, {5, 7}});
    QVERIFY(Near(ac.time_s, 4 * S / W));
    QCOMPARE(ac.max_link_bytes, 4 * S);
    QCOMPARE(ac.busiest_link, line.LinkBetween(5, 6));
    const std::vector<double> g = Concurrent(line, {{0, 2, 4, 6}, {5, 7}});
    QVERIFY(Near(g[0], 4 * S / W));
    QVERIFY(Near(g[1], 2 * S / W));
    QVERIFY(g[0] > a.time_s && g[1] > S / W);
  }

  void memberOrderOnlyPermutesTheRing() {
    // The routed ring takes the member order as a cycle: rotations and the reversal of 0,2,4,6 are
    // the same ring (same bytes on every link); 0,4,2,6 is another ring: four of its routed hops
    // (0->4, 2->6, 0->6 and 2->4, 1.5 S each) cross the links 2->3 and 3->4: 6 S -> 279.62 us.
    const Topology line = Make("tpu-v5e", {8});
    const auto base = Traffic(Cost(line, {{0, 2, 4, 6}}));
    for (const Groups& g : {Groups{{2, 4, 6, 0}}, Groups{{6, 4, 2, 0}}, Groups{{4, 2, 0, 6}}}) {
      const CollectiveCost c = Cost(line, g);
      QVERIFY(SameTraffic(Traffic(c), base));
      QCOMPARE(c.steps, int64_t{2});
      QVERIFY(Near(c.latency_time_s, 12 * us));
    }
    const CollectiveCost other = Cost(line, {{0, 4, 2, 6}});
    QVERIFY(Near(other.time_s, 6 * S / W));
    QCOMPARE(other.max_link_bytes, 6 * S);
  }

  void segmentAcrossTheWraparoundIsALine() {
    // A ring of 8 (wraparound forced). {6,7,0,1} is a segment of the ring through the wraparound
    // link 7->0: a line of 4 whatever the member order. Its busiest links carry 3 S -> 139.81 us,
    // 3 steps of 1 hop. Before, {0,1,6,7} (a rotation of the same cyclic order) ran as a logical
    // ring routed 1->0->7->6 (2 steps, 6 us of latency) while {6,7,0,1} was a line.
    const Topology ring = Make("tpu-v5e", {8}, true);
    const CollectiveCost first = Cost(ring, {{6, 7, 0, 1}});
    QVERIFY(Near(first.time_s, 3 * S / W));
    QCOMPARE(first.max_link_bytes, 3 * S);
    QCOMPARE(first.steps, int64_t{3});
    QVERIFY(Near(first.latency_time_s, 3 * us));
    QVERIFY(first.algorithm.find("across its wraparound") != std::string::npos);
    // The wraparound link carries the middle hop of the line: 2 S each way.
    QCOMPARE(Traffic(first).at(ring.LinkBetween(7, 0)), 2 * S);
    QCOMPARE(Traffic(first).at(ring.LinkBetween(0, 7)), 2 * S);
    for (const Groups& g : {Groups{{0, 1, 6, 7}}, Groups{{1, 0, 7, 6}}, Groups{{7, 0, 6, 1}}}) {
      const CollectiveCost c = Cost(ring, g);
      QVERIFY(SameTraffic(Traffic(c), Traffic(first)));
      QCOMPARE(c.steps, int64_t{3});
      QCOMPARE(WalkSteps(ring, g), int64_t{3});
    }
    // Beside the other half {2,3,4,5} (links 2-3, 3-4, 4-5: disjoint): unchanged.
    const CollectiveCost both = Cost(ring, {{2, 3, 4, 5}, {0, 1, 6, 7}});
    QVERIFY(Near(both.time_s, 3 * S / W));
    QVERIFY(SameTraffic(On(Traffic(both), Traffic(first)), Traffic(first)));
    // All-to-all: the per-axis loads of the segment equal routing every pair.
    CollectiveOptions pairs;
    pairs.per_axis_all_to_all = false;
    const CollectiveCost a2a = Cost(ring, {{0, 1, 6, 7}}, CollectiveKind::kAllToAll);
    QVERIFY(SameTraffic(Traffic(a2a), Traffic(Cost(ring, {{0, 1, 6, 7}}, CollectiveKind::kAllToAll, pairs))));
  }

  void cycleWithOneFarHopIsALineInEveryRotation() {
    // A 4x4 v5e mesh: the L-shape 0-1-2-6 ((0,0),(0,1),(0,2),(1,2)) is not a sub-grid. As a cycle
    // only its closing hop 6->0 is not between neighbours, so it is cut there: the line 0-1-2-6,
    // 3 S on its end links -> 139.81 us, 3 steps. Every rotation or reversal of that cycle is the
    // same line (before, rotations such as 2,6,0,1 ran as a routed ring with 2 steps).
    const Topology m = Make("tpu-v5e", {4, 4});
    const CollectiveCost line = Cost(m, {{0, 1, 2, 6}});
    QVERIFY(Near(line.time_s, 3 * S / W));
    QCOMPARE(line.steps, int64_t{3});
    QVERIFY(Near(line.latency_time_s, 3 * us));
    for (const Groups& g : {Groups{{2, 6, 0, 1}}, Groups{{6, 0, 1, 2}}, Groups{{6, 2, 1, 0}}, Groups{{1, 0, 6, 2}}}) {
      const CollectiveCost c = Cost(m, g);
      QVERIFY(SameTraffic(Traffic(c), Traffic(line)));
      QCOMPARE(c.steps, int64_t{3});
      QCOMPARE(WalkSteps(m, g), int64_t{3});
    }
  }

  void subGridAcrossTheWraparound() {
    // A 4x4 TPU v4 torus (W = 4.5e10 too). {3,0,7,4} = rows 0-1 x columns {3,0}: a 2x2 sub-grid
    // through the wraparound of axis 1, the same plan as {0,1,4,5}: two parts of S/2, each link
    // carries S/2 in one phase and S in the other: 1.5 S -> 69.91 us, 2 steps.
    const Topology t = Make("tpu-v4", {4, 4, 1}, true);
    const CollectiveCost wrapped = Cost(t, {{3, 0, 7, 4}});
    const CollectiveCost plain = Cost(t, {{0, 1, 4, 5}});
    QVERIFY(Near(wrapped.time_s, 1.5 * S / W));
    QVERIFY(Near(plain.time_s, 1.5 * S / W));
    QCOMPARE(wrapped.max_link_bytes, 1.5 * S);
    QCOMPARE(wrapped.steps, int64_t{2});
    QVERIFY(wrapped.algorithm.find("multi-axis") != std::string::npos);
    QCOMPARE(WalkSteps(t, {{3, 0, 7, 4}}), int64_t{2});
  }

  void bulkLoadsMatchTheListedHops() {
    // The cost model sums a sequence's hops per route (schedule_emit.h, LoadsOnlySink); listing
    // every hop (BuildCollectiveSchedule) and costing the list (TimeSchedule) must give the same
    // latency, busiest links and per-link bytes: rings (closed, odd and even, one-way and both
    // ways), lines, sub-grids across the wraparound, groups in any member order, every kind.
    struct Case {
      const char* chip;
      std::vector<int64_t> shape;
      bool wrap;
      Groups groups;
    };
    const std::vector<Case> cases = {
        {"tpu-v5e", {8, 1}, false, {{0, 1, 2, 3, 4, 5, 6, 7}}},
        {"tpu-v5e", {8, 1}, false, {{0, 2, 1, 3}, {4, 5, 6, 7}}},
        {"tpu-v5e", {8, 1}, false, {{0, 2, 3}, {4, 7}}},  // stops one and two links apart
        {"tpu-v5e", {8, 1}, false, {{0, 1, 4}, {5, 6, 7}}},
        {"tpu-v4", {8, 1, 1}, true, {{0, 1, 2, 3, 4, 5, 6, 7}}},
        {"tpu-v4", {7, 1, 1}, true, {{0, 1, 2, 3, 4, 5, 6}}},
        {"tpu-v4", {5, 1, 1}, true, {{4, 0, 1}, {2, 3}}},
        {"tpu-v4", {4, 4, 1}, true, {{3, 0, 7, 4}, {1, 2, 5, 6}, {8, 9, 10, 11, 12, 13, 14, 15}}},
        {"tpu-v4", {4, 4, 4}, true, {[] { std::vector<int64_t> all(64); for (int64_t i = 0; i < 64; ++i) all[static_cast<size_t>(i)] = i; return all; }()}},
        {"tpu-v4", {4, 4, 2}, true, {{0, 4, 8, 12, 16, 20, 24, 28}, {1, 5, 9, 13, 17, 21, 25, 29}, {2, 3, 6, 7}}},
        {"tpu-v3", {4, 4}, true, {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}},
        {"tpu-v5e", {4, 4}, false, {{0, 5, 10, 15}, {1, 2, 3, 4, 6, 7}}},
    };
    int compared = 0;
    for (const Case& c : cases) {
      const Topology t = Make(c.chip, c.shape, c.wrap);
      for (bool both_ways : {true, false}) {
        CollectiveOptions o;
        o.bidirectional = both_ways;
        for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
          auto bulk = EstimateCollective(t, kind, c.groups, S, o);
          auto listed = BuildCollectiveSchedule(t, kind, c.groups, S, o);
          QVERIFY(bulk.ok());
          QVERIFY(listed.ok());
          const CollectiveCost hops = TimeSchedule(t, listed.value(), o);
          const std::string what = std::string(c.chip) + " " + std::string(CollectiveKindName(kind)) + (both_ways ? " both ways" : " one way");
          QVERIFY2(Near(bulk->latency_time_s, hops.latency_time_s), what.c_str());
          QVERIFY2(Near(bulk->bandwidth_time_s, hops.bandwidth_time_s), what.c_str());
          QVERIFY2(Near(bulk->total_link_bytes, hops.total_link_bytes), what.c_str());
          QVERIFY2(Near(bulk->max_link_bytes, hops.max_link_bytes), what.c_str());
          QCOMPARE(bulk->link_traffic.size(), hops.link_traffic.size());
          for (size_t i = 0; i < hops.link_traffic.size(); ++i) {
            QCOMPARE(bulk->link_traffic[i].link, hops.link_traffic[i].link);
            QVERIFY2(Near(bulk->link_traffic[i].bytes, hops.link_traffic[i].bytes), what.c_str());
          }
          QVERIFY(hops.latency_time_s > 0);
          ++compared;
        }
      }
    }
    QCOMPARE(compared, 72);
  }
};

QTEST_APPLESS_MAIN(TestCollectiveConsistency)
#include "test_collective_consistency.moc"
