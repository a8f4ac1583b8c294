// Collective and compute cost models against the published figures of
// ../shared/reference/validation.md (case ids C1..C8, A1..A4), plus contention, subgroups,
// collective-permute, the roofline and the `collective` CLI subcommand.
//
// How the book's figures are read (validation.md): the book's AllGather time V / W_ICI is the
// large-N limit. The simulator models the exact bidirectional ring, which moves (N-1)/N of V, so a
// figure given as V / W is compared with (N-1)/N of it ("the exact-ring form"), and the book's
// closed form (BookCollectiveTime) is checked against the published figure itself.
#include <QtTest/QtTest>

#include <cmath>

#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "simulator/collectives/cost.h"
#include "simulator/compute_cost.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"
#include "tests/built_paths.h"

using namespace shardscope;
using namespace shardscope::sim;

namespace {

constexpr double us = 1e-6;

ChipSpec Preset(const char* name) {
  auto c = ChipPreset(name);
  if (!c.ok()) qFatal("preset %s: %s", name, c.error().message.c_str());
  return c.value();
}

DeviceMesh Mesh(const char* text) {
  auto m = DeviceMesh::Parse(text);
  if (!m.ok()) qFatal("mesh %s: %s", text, m.error().message.c_str());
  return m.value();
}

Topology ForMesh(const ChipSpec& chip, const DeviceMesh& mesh, TopologyOptions opts = {}) {
  auto t = Topology::ForMesh(chip, mesh, {}, opts);
  if (!t.ok()) qFatal("topology: %s", t.error().message.c_str());
  return std::move(t.value());
}

Topology Make(const ChipSpec& chip, std::vector<int64_t> shape, TopologyOptions opts = {}) {
  auto t = Topology::Create(chip, std::move(shape), opts);
  if (!t.ok()) qFatal("topology: %s", t.error().message.c_str());
  return std::move(t.value());
}

std::vector<std::vector<int64_t>> Groups(const DeviceMesh& mesh, std::vector<std::string> axes) {
  auto g = ReplicaGroupsForAxes(mesh, axes);
  if (!g.ok()) qFatal("groups: %s", g.error().message.c_str());
  return g.value();
}

CollectiveCost Cost(const Topology& t, CollectiveKind kind, const std::vector<std::vector<int64_t>>& groups,
                    double bytes, CollectiveOptions opts = {}) {
  auto c = EstimateCollective(t, kind, groups, bytes, opts);
  if (!c.ok()) qFatal("cost: %s", c.error().message.c_str());
  return c.value();
}

double EstimatePermuteTime(const Topology& t, const CollectiveRequest& r) {
  auto c = EstimateCollectivePermute(t, r.source_target_pairs, r.operand_bytes);
  if (!c.ok()) qFatal("permute: %s", c.error().message.c_str());
  return c->time_s;
}

bool Within(double value, double reference, double rel) { return std::fabs(value - reference) <= rel * std::fabs(reference); }

#define QVERIFY_WITHIN(value, reference, rel)                                                                       \
  QVERIFY2(Within((value), (reference), (rel)),                                                                     \
           qPrintable(QString("%1 = %2, expected %3 within %4%").arg(#value).arg((value), 0, 'g', 8).arg((reference), 0, 'g', 8).arg((rel) * 100)))

// A 1-D ring of `n` chips with the given one-way link bandwidth and 1 us hops (the ASTRA-sim runs).
ChipSpec RingChip(double link_bandwidth, int64_t n) {
  ChipSpec c = Preset("tpu-v4");
  c.name = "ring";
  c.ici_link_bandwidth = link_bandwidth;
  c.physical_dims = 1;
  c.pod_shape = {n};
  c.wraparound = WraparoundRule::kAlways;
  c.links_per_chip = 2;
  return c;
}

// C1/C2 arrays: bf16[E, F] sharded [E_Y, F] over Y=4.
constexpr double kBf16 = 2;

}  // namespace

class TestSimulatorCost : public QObject {
  Q_OBJECT

 private slots:
  // ---- C1: TPU v5e {X:8, Y:4}, AllGather_Y of bf16[E_Y, F], E=2048, F=8192 --------------------------
  void c1AllGatherV5eWithoutWraparound() {
    // C1: on v5e an axis of 4 has no wraparound (the generation rule), so Y is a line. The book's
    // answer for that case is 3 * 8.4e6 / 4.5e10 = 560 us: the busiest one-way link carries N-1 = 3
    // shards. That is already the exact line algorithm, so the model must match it directly.
    const DeviceMesh mesh = Mesh("X=8,Y=4");
    const Topology t = ForMesh(Preset("tpu-v5e"), mesh);
    QCOMPARE(t.wraparound(), (std::vector<bool>{false, false}));
    const double shard = 2048.0 / 4 * 8192 * kBf16;  // 8.4 MB per device, 34 MB whole
    const CollectiveCost c = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"Y"}), shard);
    QVERIFY_WITHIN(c.time_s, 560 * us, 0.10);
    QVERIFY_WITHIN(c.time_s, 3 * shard / 4.5e10, 1e-9);  // exact: 559.2 us
    QCOMPARE(c.regime, CostRegime::kBandwidthBound);
    QCOMPARE(c.steps, int64_t{3});
    QCOMPARE(c.num_groups, int64_t{8});
    QCOMPARE(c.group_size, int64_t{4});
    QCOMPARE(c.max_link_bytes, 3 * shard);       // the busiest one-way link: N-1 shards
    QCOMPARE(c.bytes_per_device, 3 * shard);     // each device receives the 3 other shards
    // Every group is a column line of 3 cables = 6 one-way links; 8 groups; total bytes x hops:
    // per line, right-going links carry 1+2+3 shards and left-going 3+2+1.
    QCOMPARE(static_cast<int64_t>(c.link_traffic.size()), int64_t{48});
    QCOMPARE(c.total_link_bytes, 8 * 12 * shard);
    // The measured 680 us is slower than either (SB: "not getting 100% of the theoretical bandwidth").
    QVERIFY(c.time_s < 680 * us);
    // The book's closed form without wraparound reproduces its own figure.
    QVERIFY_WITHIN(BookCollectiveTime(CollectiveKind::kAllGather, 4 * shard, 4.5e10, us, {4}, false), 560 * us, 0.10);
  }

  void c1AllGatherV5eWithWraparound() {
    // C1 "377 us with bidirectional links" is V / W = 34e6 / 9e10: the large-N limit. The exact
    // bidirectional ring on 4 devices moves (N-1)/N = 3/4 of V, i.e. 1.5 shards per one-way link:
    // 279.6 us for V = 33.55 MB. validation.md gives the matching exact figure, 283 us + 3 hops of
    // latency = 286 us (ASTRA-style, latency added; this model overlaps latency with transfer, the
    // book's T_hop = max[T_min, ...], and its ring finishes in N/2 = 2 steps), and 377 x 3/4 = 283 us.
    // We compare with those, and check the book's closed form against 377 us itself.
    const DeviceMesh mesh = Mesh("X=8,Y=4");
    TopologyOptions torus;
    torus.wraparound = TopologyOptions::Wraparound::kAll;
    const Topology t = ForMesh(Preset("tpu-v5e"), mesh, torus);
    const double shard = 2048.0 / 4 * 8192 * kBf16;
    const CollectiveCost c = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"Y"}), shard);
    QVERIFY_WITHIN(c.time_s, 286 * us, 0.10);
    QVERIFY_WITHIN(c.time_s, 377 * us * 3 / 4, 0.10);
    QVERIFY_WITHIN(c.time_s, 1.5 * shard / 4.5e10, 1e-9);
    QVERIFY(!Within(c.time_s, 377 * us, 0.10));  // the large-N figure is NOT what an exact ring gives
    QCOMPARE(c.steps, int64_t{2});
    QCOMPARE(c.max_link_bytes, 1.5 * shard);
    QCOMPARE(c.bytes_per_device, 3 * shard);
    QVERIFY(c.algorithm.find("ring with wraparound") != std::string::npos);
    QVERIFY_WITHIN(BookCollectiveTime(CollectiveKind::kAllGather, 4 * shard, 4.5e10, us, {4}, true), 377 * us, 0.10);
    // Without wraparound the time is about twice the torus time (hardware.md).
    const CollectiveCost line = Cost(ForMesh(Preset("tpu-v5e"), mesh), CollectiveKind::kAllGather, Groups(mesh, {"Y"}), shard);
    QVERIFY_WITHIN(line.time_s / c.time_s, 2.0, 0.01);
    // Additive latency (alpha-beta) adds the 2 hops: 281.6 us.
    CollectiveOptions additive;
    additive.latency_model = LatencyModel::kAdditive;
    QVERIFY_WITHIN(Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"Y"}), shard, additive).time_s, 1.5 * shard / 4.5e10 + 2 * us, 1e-9);
  }

  // ---- C2: same with E=256, F=256 (32 kB per shard): latency-bound ---------------------------------
  void c2LatencyBound() {
    // C2: 32e3 / 4.5e10 = 0.7 us per hop < T_min = 1 us, so each of the 3 hops of the (no wraparound)
    // line takes T_min: 3 us in theory (8 us measured). The overlapped model gives exactly 3 us.
    const DeviceMesh mesh = Mesh("X=8,Y=4");
    const Topology t = ForMesh(Preset("tpu-v5e"), mesh);
    const double shard = 256.0 / 4 * 256 * kBf16;  // 32 kB
    const CollectiveCost c = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"Y"}), shard);
    QVERIFY_WITHIN(c.time_s, 3 * us, 0.10);
    QCOMPARE(c.regime, CostRegime::kLatencyBound);
    QCOMPARE(c.latency_time_s, 3 * us);
    QVERIFY_WITHIN(c.bandwidth_time_s, 3 * shard / 4.5e10, 1e-9);
    // The additive (alpha-beta) variant lands between theory and the 8 us measurement: 5.2 us.
    CollectiveOptions additive;
    additive.latency_model = LatencyModel::kAdditive;
    const double add = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"Y"}), shard, additive).time_s;
    QVERIFY_WITHIN(add, 3 * us + 3 * shard / 4.5e10, 1e-9);
    QVERIFY(add > 3 * us && add < 8 * us);
    // The book's 45 kB threshold on v5e: a buffer under 4.5e10 x 1 us is latency-bound per hop.
    const double at_threshold = 45e3;
    QCOMPARE(Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"Y"}), at_threshold * 0.9).regime, CostRegime::kLatencyBound);
    QCOMPARE(Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"Y"}), at_threshold * 1.1).regime, CostRegime::kBandwidthBound);
  }

  // ---- C3..C7: TPU v4 4x4x4 {X:4, Y:4, Z:4}, B=1024, D=4096, bf16[B_X, D_Y] -----------------------------
  void c3c4AllGatherSingleAxisV4() {
    // C3/C4: the book gathers 2BD/Y = 2.1 MB over one axis of 4 with wraparound in V / W = 23 us; the
    // exact bidirectional ring moves 3/4 of that: 23 x 3/4 = 17.3 us (model: 17.5 us).
    const DeviceMesh mesh = Mesh("X=4,Y=4,Z=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    QCOMPARE(t.wraparound(), (std::vector<bool>{true, true, true}));  // whole 4x4x4 cube
    const double B = 1024, D = 4096;
    const double per_device = 2 * B * D / 16;  // [B_X, D_Y]
    for (const char* axis : {"X", "Y"}) {
      const CollectiveCost c = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {axis}), per_device);
      QVERIFY_WITHIN(c.time_s, 23 * us * 3 / 4, 0.10);
      QVERIFY_WITHIN(c.time_s, 1.5 * per_device / 4.5e10, 1e-9);
      QCOMPARE(c.regime, CostRegime::kBandwidthBound);
      QCOMPARE(c.num_groups, int64_t{16});
      QVERIFY_WITHIN(BookCollectiveTime(CollectiveKind::kAllGather, 4 * per_device, 4.5e10, us, {4}, true), 23 * us, 0.10);
    }
  }

  void c5AllGatherTwoAxes() {
    // C5: AllGather_XY of [B_X, D_Y] -> [B, D]: V = 2BD = 8.4 MB over two axes at once, V / (2 W) =
    // 46 us, throughput-bound, latency floor 2-4 us. The exact two-axis algorithm moves 15/16 of V:
    // 43.7 us, within 10% of 46 us directly; its latency floor is 4 hops = 4 us.
    const DeviceMesh mesh = Mesh("X=4,Y=4,Z=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    const double B = 1024, D = 4096, V = 2 * B * D;
    const CollectiveCost c = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"X", "Y"}), V / 16);
    QVERIFY_WITHIN(c.time_s, 46 * us, 0.10);
    QVERIFY_WITHIN(c.time_s, 46.6 * us * 15 / 16, 0.01);
    QCOMPARE(c.regime, CostRegime::kBandwidthBound);
    QCOMPARE(c.steps, int64_t{4});
    QCOMPARE(c.latency_time_s, 4 * us);
    QCOMPARE(c.group_size, int64_t{16});
    QVERIFY(c.algorithm.find("multi-axis") != std::string::npos);
    // Both axes' links are used equally: the X and Y links carry the same busiest load.
    double max_x = 0, max_y = 0, max_z = 0;
    for (const auto& lt : c.link_traffic) {
      const int64_t axis = t.link(lt.link).axis;
      (axis == 0 ? max_x : axis == 1 ? max_y : max_z) = std::max(axis == 0 ? max_x : axis == 1 ? max_y : max_z, lt.bytes);
    }
    QCOMPARE(max_x, max_y);
    QCOMPARE(max_z, 0.0);
    QVERIFY_WITHIN(BookCollectiveTime(CollectiveKind::kAllGather, V, 4.5e10, us, {4, 4}, true), 46 * us, 0.10);
    // Over two axes is faster than over the same 16 devices on one ring (one axis of 16 on v5e).
    QVERIFY(c.time_s < 0.6 * 15.0 / 16 * V / 9e10);
  }

  void c5UnequalAxesAreBalanced() {
    // Several axes of different sizes: the split between the rotated gather orders balances the
    // busiest link of each axis; an 8x4 torus reaches the ideal (N-1) S / (links in) = 31 S / 4.
    TopologyOptions torus;
    torus.wraparound = TopologyOptions::Wraparound::kAll;
    const DeviceMesh mesh = Mesh("X=8,Y=4");
    const Topology t = ForMesh(Preset("tpu-v5e"), mesh, torus);
    const double S = 1 << 20;
    const CollectiveCost c = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"X", "Y"}), S);
    QVERIFY_WITHIN(c.max_link_bytes, 31 * S / 4, 1e-9);
    QVERIFY_WITHIN(c.bandwidth_time_s, 31 * S / 4 / 4.5e10, 0.05);
  }

  void c6UnreducedAxis() {
    // C6: AllGather_Z of [B_X, D_Y]{U_Z}: the book moves V = 2BD / 16 = 0.5 MB over the Z ring in
    // V / W = 5.8 us; exact ring: 3/4 of it = 4.4 us.
    const DeviceMesh mesh = Mesh("X=4,Y=4,Z=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    const double V = 2 * 1024.0 * 4096 / 16;
    const CollectiveCost c = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"Z"}), V / 4);
    QVERIFY_WITHIN(c.time_s, 5.8 * us * 3 / 4, 0.10);
    QVERIFY_WITHIN(BookCollectiveTime(CollectiveKind::kAllGather, V, 4.5e10, us, {4}, true), 5.8 * us, 0.10);
    for (const auto& lt : c.link_traffic) QCOMPARE(t.link(lt.link).axis, int64_t{2});  // Z links only
  }

  void c7LatencyBoundTwoHops() {
    // C7: AllGather_X of bf16[128] on the v4 4x4x4: 64 bytes per device; with wraparound the gather
    // needs only 2 hops: about 2 us, latency-bound.
    const DeviceMesh mesh = Mesh("X=4,Y=4,Z=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    const CollectiveCost c = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"X"}), 128 * kBf16 / 4);
    QVERIFY_WITHIN(c.time_s, 2 * us, 0.10);
    QCOMPARE(c.steps, int64_t{2});
    QCOMPARE(c.regime, CostRegime::kLatencyBound);
    QVERIFY_WITHIN(BookCollectiveTime(CollectiveKind::kAllGather, 256, 4.5e10, us, {4}, true), 2 * us, 0.10);
  }

  // ---- C8: AllToAll = AllGather / 4 on a bidirectional ring ------------------------------------------------
  void c8AllToAllIsQuarterOfAllGather() {
    // C8 (SB Q10): for the same array V, AllToAll = AllGather / 4 on a bidirectional ring (large N).
    // Exactly, for even N: A2A moves V/8 per one-way link, AG (N-1)/(2N) V: ratio N / (4 (N-1)):
    // 0.267 for N = 16 (within 10% of 1/4), 0.254 for N = 64.
    for (int64_t n : {16, 64}) {
      const Topology t = Make(RingChip(4.5e10, n), {n});
      const double V = 256.0 * 1024 * 1024;
      const double ag = Cost(t, CollectiveKind::kAllGather, {}, V / static_cast<double>(n)).time_s;
      const CollectiveCost a2a = Cost(t, CollectiveKind::kAllToAll, {}, V / static_cast<double>(n));
      QVERIFY_WITHIN(a2a.time_s / ag, 0.25, 0.10);
      QVERIFY_WITHIN(a2a.time_s / ag, static_cast<double>(n) / (4.0 * static_cast<double>(n - 1)), 1e-9);
      QVERIFY_WITHIN(a2a.max_link_bytes, V / 8, 1e-9);
      QCOMPARE(a2a.steps, n / 2);  // the farthest chunk travels N/2 hops
      QCOMPARE(a2a.bytes_per_device, static_cast<double>(n - 1) / static_cast<double>(n) * V / static_cast<double>(n));
    }
    // On a v5e axis of 16 (which has wraparound) the same holds.
    const DeviceMesh mesh = Mesh("X=16,Y=16");
    const Topology pod = ForMesh(Preset("tpu-v5e"), mesh);
    const double S = 1 << 22;
    const double ratio = Cost(pod, CollectiveKind::kAllToAll, Groups(mesh, {"X"}), S).time_s /
                         Cost(pod, CollectiveKind::kAllGather, Groups(mesh, {"X"}), S).time_s;
    QVERIFY_WITHIN(ratio, 0.25, 0.10);
    // One-directional ring (SB Q10 part 3): the factor is exactly 1/2 for every N.
    CollectiveOptions one_way;
    one_way.bidirectional = false;
    const Topology ring = Make(RingChip(4.5e10, 8), {8});
    const double ag1 = Cost(ring, CollectiveKind::kAllGather, {}, S, one_way).time_s;
    const double a2a1 = Cost(ring, CollectiveKind::kAllToAll, {}, S, one_way).time_s;
    QVERIFY_WITHIN(a2a1 / ag1, 0.5, 1e-9);
    QCOMPARE(BookCollectiveTime(CollectiveKind::kAllToAll, 8 * S, 4.5e10, 0, {8}, true),
             BookCollectiveTime(CollectiveKind::kAllGather, 8 * S, 4.5e10, 0, {8}, true) / 4);
  }

  void allToAllPerAxisEqualsRoutingEveryPair() {
    // The fast per-axis all-to-all must give exactly the loads of routing every chunk.
    struct Case { ChipSpec chip; std::vector<int64_t> shape; std::vector<std::vector<int64_t>> groups; bool bidirectional; };
    std::vector<Case> cases;
    cases.push_back({Preset("tpu-v4"), {4, 4, 4}, {}, true});
    cases.push_back({Preset("tpu-v4"), {4, 4, 4}, {}, false});
    cases.push_back({Preset("tpu-v5e"), {8, 4}, {}, true});
    {
      // 12 consecutive chips of a 16-ring (row 3 of the v5e pod): some routes leave the group.
      const Topology pod = Make(Preset("tpu-v5e"), {16, 16});
      std::vector<int64_t> g;
      for (int64_t y = 2; y < 14; ++y) g.push_back(pod.ChipAt({3, y}));
      cases.push_back({Preset("tpu-v5e"), {16, 16}, {g}, true});
      // 2 x 3 sub-grids.
      std::vector<std::vector<int64_t>> subgrids;
      for (int64_t x0 : {0, 4}) {
        std::vector<int64_t> sg;
        for (int64_t x = x0; x < x0 + 2; ++x) {
          for (int64_t y = 5; y < 8; ++y) sg.push_back(pod.ChipAt({x, y}));
        }
        subgrids.push_back(sg);
      }
      cases.push_back({Preset("tpu-v5e"), {16, 16}, subgrids, true});
    }
    for (const auto& c : cases) {
      const Topology t = Make(c.chip, c.shape);
      CollectiveOptions fast, slow;
      fast.bidirectional = slow.bidirectional = c.bidirectional;
      slow.per_axis_all_to_all = false;
      const CollectiveCost a = Cost(t, CollectiveKind::kAllToAll, c.groups, 3e6, fast);
      const CollectiveCost b = Cost(t, CollectiveKind::kAllToAll, c.groups, 3e6, slow);
      QCOMPARE(a.link_traffic.size(), b.link_traffic.size());
      for (size_t i = 0; i < a.link_traffic.size(); ++i) {
        QCOMPARE(a.link_traffic[i].link, b.link_traffic[i].link);
        QVERIFY_WITHIN(a.link_traffic[i].bytes, b.link_traffic[i].bytes, 1e-9);
      }
      QCOMPARE(a.steps, b.steps);
      QCOMPARE(a.latency_time_s, b.latency_time_s);
      QVERIFY_WITHIN(a.time_s, b.time_s, 1e-9);
    }
  }

  // ---- A1..A4: ASTRA-sim 2.x analytical backend (1 us links) ------------------------------------------------
  void astraSimCrossChecks_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("devices");
    QTest::addColumn<double>("bandwidth");
    QTest::addColumn<double>("array_bytes");
    QTest::addColumn<bool>("bidirectional");
    QTest::addColumn<double>("astra_s");
    // A1: AllReduce 1 GiB, 16-device ring, 100e9 one way, one direction: 20.19 ms.
    QTest::newRow("A1") << "all-reduce" << 16 << 100e9 << 1073741824.0 << false << 20.19e-3;
    // A2: same, bidirectional ring: 10.11 ms.
    QTest::newRow("A2") << "all-reduce" << 16 << 100e9 << 1073741824.0 << true << 10.11e-3;
    // A3: AllReduce 64 MiB: one direction 1.290 ms / bidirectional 0.660 ms.
    QTest::newRow("A3 one direction") << "all-reduce" << 16 << 100e9 << 67108864.0 << false << 1.290e-3;
    QTest::newRow("A3 bidirectional") << "all-reduce" << 16 << 100e9 << 67108864.0 << true << 0.660e-3;
    // A4: AllGather of a 34 MB array over 4 devices at 45e9 one way: 569.7 us / 286.3 us.
    QTest::newRow("A4 one direction") << "all-gather" << 4 << 45e9 << 34e6 << false << 569.7e-6;
    QTest::newRow("A4 bidirectional") << "all-gather" << 4 << 45e9 << 34e6 << true << 286.3e-6;
  }
  void astraSimCrossChecks() {
    // ASTRA-sim adds the link latency to every ring step (alpha-beta) and runs a bidirectional ring
    // as two one-directional rings of N-1 steps; our default overlaps latency with transfer and our
    // bidirectional ring needs N/2 steps. Both settings must land within 10% of ASTRA-sim; the
    // additive setting within 2.5% (A3 bidirectional: 0.645 vs 0.660 ms, the 14 steps fewer).
    QFETCH(QString, kind);
    QFETCH(int, devices);
    QFETCH(double, bandwidth);
    QFETCH(double, array_bytes);
    QFETCH(bool, bidirectional);
    QFETCH(double, astra_s);
    const Topology t = Make(RingChip(bandwidth, devices), {devices});
    QVERIFY(t.wraps(0));
    auto k = CollectiveKindFromName(kind.toStdString());
    QVERIFY(k.ok());
    // Operand per device: the all-reduce buffer is the whole array; the all-gather operand a shard.
    const double operand = k.value() == CollectiveKind::kAllReduce ? array_bytes : array_bytes / devices;
    CollectiveOptions opts;
    opts.bidirectional = bidirectional;
    const CollectiveCost overlapped = Cost(t, k.value(), {}, operand, opts);
    QVERIFY_WITHIN(overlapped.time_s, astra_s, 0.10);
    opts.latency_model = LatencyModel::kAdditive;
    const CollectiveCost additive = Cost(t, k.value(), {}, operand, opts);
    QVERIFY_WITHIN(additive.time_s, astra_s, 0.025);
    // The bytes are the ring's: each one-way link moves (N-1)/N of the array per pass (one
    // direction) or half of that (bidirectional); an all-reduce makes two passes.
    const double n = devices;
    const double passes = k.value() == CollectiveKind::kAllReduce ? 2 : 1;
    QVERIFY_WITHIN(overlapped.max_link_bytes, passes * (n - 1) / n * array_bytes / (bidirectional ? 2 : 1), 1e-9);
  }

  void nvSwitchMatchesNcclBusBandwidth() {
    // nccl-tests conventions (hardware.md): busbw = algbw x (n-1)/n for AllGather, 2(n-1)/n for
    // AllReduce. On the modelled NVSwitch node the bandwidth-bound busbw equals the per-GPU NVLink
    // bandwidth, 4.5e11 B/s.
    const Topology node = Make(Preset("h100"), {8});
    const double V = 1 << 30;
    const CollectiveCost ag = Cost(node, CollectiveKind::kAllGather, {}, V / 8);
    QVERIFY_WITHIN(V / ag.time_s * 7 / 8, 4.5e11, 1e-9);
    QCOMPARE(ag.steps, int64_t{1});
    const CollectiveCost ar = Cost(node, CollectiveKind::kAllReduce, {}, V);
    QVERIFY_WITHIN(V / ar.time_s * 2 * 7 / 8, 4.5e11, 1e-9);
    // nccl-tests' all-to-all size S is the per-GPU buffer (S/n goes to each peer).
    const CollectiveCost a2a = Cost(node, CollectiveKind::kAllToAll, {}, V / 8);
    QVERIFY_WITHIN(V / 8 / a2a.time_s * 7 / 8, 4.5e11, 1e-9);
    // Small messages: one switch traversal = one hop of latency.
    QCOMPARE(Cost(node, CollectiveKind::kAllGather, {}, 8).time_s, 1 * us);
  }

  // ---- ReduceScatter / AllReduce relations ----------------------------------------------------------------
  void reduceScatterAndAllReduce() {
    const DeviceMesh mesh = Mesh("X=4,Y=4,Z=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    const double V = 64 << 20;
    const auto g = Groups(mesh, {"X"});
    const CollectiveCost ag = Cost(t, CollectiveKind::kAllGather, g, V / 4);
    const CollectiveCost rs = Cost(t, CollectiveKind::kReduceScatter, g, V);
    const CollectiveCost ar = Cost(t, CollectiveKind::kAllReduce, g, V);
    // SB: ReduceScatter costs the same as the AllGather of its result; AllReduce = RS + AG = 2x.
    QCOMPARE(rs.time_s, ag.time_s);
    QCOMPARE(ar.time_s, 2 * ag.time_s);
    QCOMPARE(ar.steps, 2 * ag.steps);
    QCOMPARE(rs.bytes_per_device, 0.75 * V);
    QCOMPARE(ar.bytes_per_device, 1.5 * V);
    QVERIFY_WITHIN(BookCollectiveTime(CollectiveKind::kAllReduce, V, 4.5e10, us, {4}, true), 2 * V / 9e10, 1e-9);
    // Throughput-bound time does not depend on the number of devices (SB takeaway), up to (N-1)/N.
    const DeviceMesh big = Mesh("X=16,Y=16");
    const Topology pod = ForMesh(Preset("tpu-v5e"), big);
    const double t16 = Cost(pod, CollectiveKind::kAllGather, Groups(big, {"X"}), V / 16).time_s;
    QVERIFY_WITHIN(t16, 15.0 / 16 * V / 9e10, 1e-9);
  }

  // ---- subgroups, irregular groups, shared links ------------------------------------------------------------
  void subgroupsMapOntoPhysicalRings() {
    // v5e 16x16 pod: an axis of 16 wraps, so a group of all 16 chips along it is a ring, while a
    // group of 4 consecutive chips on the same axis is a line segment.
    const Topology pod = Make(Preset("tpu-v5e"), {16, 16});
    const double S = 1 << 24;
    std::vector<std::vector<int64_t>> rows;
    for (int64_t x = 0; x < 16; ++x) {
      std::vector<int64_t> g;
      for (int64_t y = 0; y < 16; ++y) g.push_back(pod.ChipAt({x, y}));
      rows.push_back(g);
    }
    const CollectiveCost ring = Cost(pod, CollectiveKind::kAllGather, rows, S);
    QVERIFY_WITHIN(ring.max_link_bytes, 7.5 * S, 1e-12);
    QCOMPARE(ring.steps, int64_t{8});
    std::vector<std::vector<int64_t>> quads;
    for (int64_t y0 = 0; y0 < 16; y0 += 4) quads.push_back({pod.ChipAt({0, y0}), pod.ChipAt({0, y0 + 1}), pod.ChipAt({0, y0 + 2}), pod.ChipAt({0, y0 + 3})});
    const CollectiveCost line = Cost(pod, CollectiveKind::kAllGather, quads, S);
    QCOMPARE(line.max_link_bytes, 3 * S);
    QVERIFY(line.algorithm.find("line") != std::string::npos);
    // Members listed out of physical order still map to the ring (order does not change the cost).
    const CollectiveCost shuffled = Cost(pod, CollectiveKind::kAllGather, {{pod.ChipAt({0, 2}), pod.ChipAt({0, 0}), pod.ChipAt({0, 3}), pod.ChipAt({0, 1})}}, S);
    QCOMPARE(shuffled.time_s, line.time_s);
  }

  void stridedGroupsShareLinks() {
    // A line of 4 chips, groups {0,2} and {1,3}: each pair is 2 hops apart and both use the middle
    // link in the same direction, so that link carries 2 shards and the gather takes twice as long as
    // for adjacent pairs {0,1}, {2,3}.
    const Topology t = Make(Preset("tpu-v5e"), {4});
    const double S = 9e6;
    const CollectiveCost adjacent = Cost(t, CollectiveKind::kAllGather, {{0, 1}, {2, 3}}, S);
    const CollectiveCost strided = Cost(t, CollectiveKind::kAllGather, {{0, 2}, {1, 3}}, S);
    QVERIFY_WITHIN(adjacent.time_s, S / 4.5e10, 1e-12);
    QVERIFY_WITHIN(strided.time_s, 2 * S / 4.5e10, 1e-12);
    QCOMPARE(strided.max_link_bytes, 2 * S);
    const int64_t middle = t.LinkBetween(1, 2);
    bool found = false;
    for (const auto& lt : strided.link_traffic) {
      if (lt.link == middle) {
        QCOMPARE(lt.bytes, 2 * S);
        found = true;
      }
    }
    QVERIFY(found);
    // A scattered group (the diagonal of a 4x4 mesh) runs as a logical ring 0-5-10-15 routed over
    // the network: each logical hop carries 1.5 shards; link (0,0)->(1,0) is on both the 0->5 hop
    // and the 0->15 hop (routed the long way round, 6 links): 3 shards. Each of the 2 steps waits
    // for its longest route, 6 hops: 12 us of latency.
    const Topology m = Make(Preset("tpu-v5e"), {4, 4});
    const CollectiveCost scattered = Cost(m, CollectiveKind::kAllGather, {{0, 5, 10, 15}}, S);
    QVERIFY(scattered.algorithm.find("logical ring") != std::string::npos);
    QCOMPARE(scattered.max_link_bytes, 3 * S);
    QCOMPARE(scattered.busiest_link, m.LinkBetween(m.ChipAt({0, 0}), m.ChipAt({1, 0})));
    QCOMPARE(scattered.steps, int64_t{2});
    QCOMPARE(scattered.latency_time_s, 12 * us);
    QCOMPARE(Cost(m, CollectiveKind::kAllGather, {{0, 1, 2, 3}}, S).latency_time_s, 3 * us);
  }

  void twoCoresPerChipShareLinks() {
    auto v3 = WithCoresPerChip(Preset("tpu-v3"), 2);
    QVERIFY(v3.ok());
    const Topology t = Make(v3.value(), {2, 2});
    // The two cores of one chip exchange data without touching a link.
    const CollectiveCost same_chip = Cost(t, CollectiveKind::kAllGather, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, 1e6);
    QCOMPARE(same_chip.time_s, 0.0);
    QCOMPARE(same_chip.total_link_bytes, 0.0);
    // Devices on two chips: the chips' devices are combined on-chip, then chip 1 receives both
    // shards of chip 0 over the one link between them (and back): 2 S / w, the lower bound.
    const double S = 1e7;
    const CollectiveCost across = Cost(t, CollectiveKind::kAllGather, {{0, 1, 2, 3}}, S);
    QVERIFY_WITHIN(across.time_s, 2 * S / 1e11, 1e-12);
    QCOMPARE(across.max_link_bytes, 2 * S);
    QVERIFY(across.algorithm.find("2 devices per chip") != std::string::npos);
    // All-reduce of 4 MB over those 4 devices: reduce on-chip, then RS + AG between the 2 chips.
    QVERIFY_WITHIN(Cost(t, CollectiveKind::kAllReduce, {{0, 1, 2, 3}}, 4e6).max_link_bytes, 4e6, 1e-12);
    // Uneven placement ({0, 1, 2}: two devices on chip 0, one on chip 1) falls back to a ring over
    // the devices.
    const CollectiveCost uneven = Cost(t, CollectiveKind::kAllGather, {{0, 1, 2}}, S);
    QVERIFY(uneven.algorithm.find("ring over the group") != std::string::npos);
    QVERIFY(uneven.time_s >= 2 * S / 1e11 * (1 - 1e-12));  // (scaled from one byte: within rounding)
  }

  void badInputIsAnError() {
    const Topology t = Make(Preset("tpu-v5e"), {4});
    auto out_of_range = EstimateCollective(t, CollectiveKind::kAllGather, {{0, 9}}, 1);
    QVERIFY(!out_of_range.ok());
    QVERIFY(out_of_range.error().message.find("device 9") != std::string::npos);
    auto twice = EstimateCollective(t, CollectiveKind::kAllGather, {{0, 1}, {1, 2}}, 1);
    QVERIFY(!twice.ok());
    QVERIFY(twice.error().message.find("more than one") != std::string::npos);
    QVERIFY(!EstimateCollective(t, CollectiveKind::kAllGather, {{0, 1}}, -5).ok());
    QVERIFY(!EstimateCollective(t, CollectiveKind::kCollectivePermute, {{0, 1}}, 5).ok());
    auto groups = ReplicaGroupsForAxes(Mesh("X=2,Y=2"), {"Z"});
    QVERIFY(!groups.ok());
    QVERIFY(groups.error().message.find("no axis 'Z'") != std::string::npos);
    QVERIFY(!CollectiveKindFromName("broadcast").ok());
    QCOMPARE(CollectiveKindFromName("AllGather").value(), CollectiveKind::kAllGather);
    QCOMPARE(CollectiveKindFromName("reduce_scatter").value(), CollectiveKind::kReduceScatter);
    // A group of one device costs nothing.
    QCOMPARE(Cost(t, CollectiveKind::kAllReduce, {{0}, {1}, {2}, {3}}, 1e9).time_s, 0.0);
  }

  void replicaGroupsForAxes() {
    const DeviceMesh mesh = Mesh("X=2,Y=3");
    QCOMPARE(Groups(mesh, {"Y"}), (std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}}));
    QCOMPARE(Groups(mesh, {"X"}), (std::vector<std::vector<int64_t>>{{0, 3}, {1, 4}, {2, 5}}));
    QCOMPARE(Groups(mesh, {"X", "Y"}), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 4, 5}}));
    QCOMPARE(Groups(mesh, {"Y", "X"}), (std::vector<std::vector<int64_t>>{{0, 3, 1, 4, 2, 5}}));
    QCOMPARE(Groups(mesh, {}), (std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}, {4}, {5}}));
    auto halo = ShiftPairsAlongAxis(mesh, "Y", +1, false);
    QVERIFY(halo.ok());
    QCOMPARE(halo.value(), (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}, {3, 4}, {4, 5}}));
    auto rot = ShiftPairsAlongAxis(mesh, "Y", -1, true);
    QCOMPARE(rot.value(), (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {1, 0}, {2, 1}, {3, 5}, {4, 3}, {5, 4}}));
  }

  // ---- collective-permute and contention --------------------------------------------------------------------
  void collectivePermuteHaloExchange() {
    // Halo exchange on a v5e ring of 16: every transfer is one hop on its own link.
    const DeviceMesh mesh = Mesh("X=16,Y=16");
    const Topology pod = ForMesh(Preset("tpu-v5e"), mesh);
    const double B = 4.5e6;
    auto pairs = ShiftPairsAlongAxis(mesh, "X", +1, true);
    QVERIFY(pairs.ok());
    auto c = EstimateCollectivePermute(pod, pairs.value(), B);
    QVERIFY(c.ok());
    QVERIFY_WITHIN(c->time_s, B / 4.5e10, 1e-9);  // 100 us
    QCOMPARE(c->steps, int64_t{1});
    QCOMPARE(c->max_link_bytes, B);
    QCOMPARE(static_cast<int64_t>(c->link_traffic.size()), int64_t{256});
    // Tiny halos are latency-bound: one hop, 1 us.
    auto tiny = EstimateCollectivePermute(pod, pairs.value(), 1024);
    QCOMPARE(tiny->time_s, 1 * us);
    QCOMPARE(tiny->regime, CostRegime::kLatencyBound);

    // A cyclic shift on a line (no wraparound): the end-to-start transfer is routed back over 3 hops.
    // Shifting both ways at once, link 0->1 carries the +1 send 0->1 and the -1 wrap send 0->3: shared.
    const Topology line = Make(Preset("tpu-v5e"), {4});
    auto plus = EstimateCollectivePermute(line, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, B);
    QVERIFY_WITHIN(plus->time_s, B / 4.5e10, 1e-9);
    QCOMPARE(plus->steps, int64_t{3});
    auto both = EstimateCollectivePermute(line, {{0, 1}, {1, 2}, {2, 3}, {3, 0}, {1, 0}, {2, 1}, {3, 2}, {0, 3}}, B);
    QVERIFY_WITHIN(both->time_s, 2 * B / 4.5e10, 1e-9);
    QCOMPARE(both->max_link_bytes, 2 * B);
  }

  void contentionSharesLinksFairly() {
    const Topology line = Make(Preset("tpu-v5e"), {4});
    const double w = 4.5e10, b = 9e6;  // b / w = 200 us
    // Two transfers over the same link: each gets half, both finish at 2 b / w.
    auto two = SimulateTransfers(line, {{0, 1, b, 0}, {0, 1, b, 0}});
    QVERIFY(two.ok());
    QVERIFY_WITHIN(two.value()[0].finish_s, 2 * b / w, 1e-9);
    QVERIFY_WITHIN(two.value()[1].finish_s, 2 * b / w, 1e-9);
    // Unequal sizes: the small one finishes at 2b/w, then the big one runs at full rate: 4b/w.
    auto uneven = SimulateTransfers(line, {{0, 1, b, 0}, {0, 1, 3 * b, 0}});
    QVERIFY_WITHIN(uneven.value()[0].finish_s, 2 * b / w, 1e-9);
    QVERIFY_WITHIN(uneven.value()[1].finish_s, 4 * b / w, 1e-9);
    // Max-min fairness over a chain: A on 0->1, B on 0->1->2, C on 1->2: everybody gets w/2.
    auto chain = SimulateTransfers(line, {{0, 1, b, 0}, {0, 2, b, 0}, {1, 2, b, 0}});
    for (const auto& t : chain.value()) QVERIFY_WITHIN(t.data_done_s, 2 * b / w, 1e-9);
    QCOMPARE(chain.value()[1].hops, int64_t{2});
    // A later start shares the link only while both are active. Starting at b/w, the second finds
    // the first already done.
    auto late = SimulateTransfers(line, {{0, 1, b, 0}, {0, 1, b, b / w}});
    QVERIFY_WITHIN(late.value()[0].finish_s, b / w, 1e-9);
    QVERIFY_WITHIN(late.value()[1].finish_s, 2 * b / w, 1e-9);
    auto overlap = SimulateTransfers(line, {{0, 1, b, 0}, {0, 1, b, b / (2 * w)}});
    // t in [0, b/2w): first alone, sends b/2; then both at w/2: first needs b/2 more -> b/w more.
    QVERIFY_WITHIN(overlap.value()[0].finish_s, 1.5 * b / w, 1e-9);
    QVERIFY_WITHIN(overlap.value()[1].finish_s, 2 * b / w, 1e-9);
    // Latency: overlapped = max(route latency, data time); additive = data time + route latency.
    auto small = SimulateTransfers(line, {{0, 3, 100, 0}});
    QCOMPARE(small.value()[0].finish_s, 3 * us);
    CollectiveOptions additive;
    additive.latency_model = LatencyModel::kAdditive;
    auto small_add = SimulateTransfers(line, {{0, 3, b, 0}}, additive);
    QVERIFY_WITHIN(small_add.value()[0].finish_s, b / w + 3 * us, 1e-9);
    // Same-chip transfers are free; bad devices are errors.
    QCOMPARE(SimulateTransfers(line, {{2, 2, b, 0}}).value()[0].finish_s, 0.0);
    QVERIFY(!SimulateTransfers(line, {{0, 7, b, 0}}).ok());
  }

  void concurrentCollectivesShareLinks() {
    // Two all-gathers over the same groups issued together take twice as long as one; over
    // disjoint links they do not slow each other.
    const DeviceMesh mesh = Mesh("X=4,Y=4,Z=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    const double S = 1 << 22;
    const double alone = Cost(t, CollectiveKind::kAllGather, Groups(mesh, {"X"}), S).time_s;
    CollectiveRequest rx{CollectiveKind::kAllGather, Groups(mesh, {"X"}), S, {}};
    CollectiveRequest ry{CollectiveKind::kAllGather, Groups(mesh, {"Y"}), S, {}};
    auto same = EstimateConcurrentCollectives(t, {rx, rx});
    QVERIFY(same.ok());
    QVERIFY_WITHIN(same.value()[0], 2 * alone, 1e-9);
    auto disjoint = EstimateConcurrentCollectives(t, {rx, ry});
    QVERIFY_WITHIN(disjoint.value()[0], alone, 1e-9);
    QVERIFY_WITHIN(disjoint.value()[1], alone, 1e-9);
    // Alone, a request finishes at EstimateCollective's time.
    QVERIFY_WITHIN(EstimateConcurrentCollectives(t, {rx}).value()[0], alone, 1e-9);
    // Unequal sizes on the same links: both run at half speed until the small one is done (2T),
    // then the big one (3T alone, 1/3 done) finishes its remaining 2T alone: 4T.
    CollectiveRequest big{CollectiveKind::kAllGather, Groups(mesh, {"X"}), 3 * S, {}};
    auto mixed = EstimateConcurrentCollectives(t, {rx, big});
    QVERIFY_WITHIN(mixed.value()[0], 2 * alone, 1e-9);
    QVERIFY_WITHIN(mixed.value()[1], 4 * alone, 1e-9);
    // A collective-permute request is routed like EstimateCollectivePermute.
    CollectiveRequest perm{CollectiveKind::kCollectivePermute, {}, S, ShiftPairsAlongAxis(mesh, "Z", 1, true).value()};
    QVERIFY_WITHIN(EstimateConcurrentCollectives(t, {perm}).value()[0], EstimatePermuteTime(t, perm), 1e-9);
  }

  void costScalesWithTheOperand() {
    // A collective over replica groups is timed at one operand byte and scaled: at B bytes its
    // link loads and bandwidth time are B times the per-byte ones, its latency and steps the same,
    // so small operands are latency-bound and large ones bandwidth-bound (the book's max[T_min x
    // hops, V / W]). EstimateCollective is exactly the per-byte cost at B (the engine's memo
    // relies on it).
    const DeviceMesh mesh = Mesh("X=4,Y=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce,
                                CollectiveKind::kAllToAll}) {
      auto per_byte = EstimateCollectivePerByte(t, kind, Groups(mesh, {"X"}));
      QVERIFY(per_byte.ok());
      QVERIFY(per_byte->latency_time_s > 0 && per_byte->bandwidth_time_s > 0);
      for (double b : {64.0, 1e6, 1e9}) {
        const CollectiveCost c = Cost(t, kind, Groups(mesh, {"X"}), b);
        const CollectiveCost at = CollectiveCostAt(*per_byte, b);
        QCOMPARE(c.time_s, at.time_s);
        QCOMPARE(c.latency_time_s, per_byte->latency_time_s);
        QCOMPARE(c.steps, per_byte->steps);
        QVERIFY_WITHIN(c.bandwidth_time_s, b * per_byte->bandwidth_time_s, 1e-12);
        QVERIFY_WITHIN(c.max_link_bytes, b * per_byte->max_link_bytes, 1e-12);
        QVERIFY_WITHIN(c.bytes_per_device, b * per_byte->bytes_per_device, 1e-12);
        QCOMPARE(c.link_traffic.size(), per_byte->link_traffic.size());
        QCOMPARE(c.regime, b == 64.0 ? CostRegime::kLatencyBound : CostRegime::kBandwidthBound);
      }
    }
    // Concurrent groups: each group's data-done time grows with the operand, its latency does not.
    CollectiveRequest one{CollectiveKind::kAllGather, Groups(mesh, {"X"}), 1.0, {}};
    CollectiveRequest big = one;
    big.operand_bytes = 1e8;
    auto unit = EstimateConcurrentCollectiveParts(t, {one, one});
    auto scaled = EstimateConcurrentCollectiveParts(t, {big, big});
    QVERIFY(unit.ok() && scaled.ok());
    for (size_t r = 0; r < 2; ++r) {
      QCOMPARE(scaled->latency_s[r], unit->latency_s[r]);
      QVERIFY_WITHIN(scaled->data_done_s[r], 1e8 * unit->data_done_s[r], 1e-9);
      QCOMPARE(EstimateConcurrentCollectives(t, {big, big}).value()[r],
               CombineCollectiveLatency(scaled->latency_s[r], scaled->data_done_s[r]));
    }
    // Bad sizes are still errors.
    QVERIFY(!EstimateCollective(t, CollectiveKind::kAllGather, Groups(mesh, {"X"}), -1).ok());
    QVERIFY(!EstimateCollective(t, CollectiveKind::kAllGather, Groups(mesh, {"X"}), std::nan("")).ok());
  }

  void allReducePassesRunOneAfterTheOther() {
    // An all-reduce on a line of 4 (v5e, no wraparound on an axis of 4): the reduce-scatter's
    // partial sums load the links leaving the ends most (0 -> 1 and 3 -> 2 carry 3 chunks each), the
    // all-gather's shards the links into them (1 -> 0 and 2 -> 3); the passes run one after the
    // other, so the bandwidth time is 6 chunks / W (the book's no-wraparound AllReduce = 2 x
    // AllGather), though no link carries more than 4 chunks over the whole collective.
    const Topology t = Make(Preset("tpu-v5e"), {4, 1});
    const double B = 4e6, W = 4.5e10;
    const CollectiveCost ar = Cost(t, CollectiveKind::kAllReduce, {{0, 1, 2, 3}}, B);
    QCOMPARE(ar.pass_busiest.size(), size_t{2});
    const int64_t rs_link = ar.pass_busiest[0].link, ag_link = ar.pass_busiest[1].link;
    QVERIFY(rs_link == t.LinkBetween(0, 1) || rs_link == t.LinkBetween(3, 2));
    QVERIFY(ag_link == t.LinkBetween(1, 0) || ag_link == t.LinkBetween(2, 3));
    QVERIFY_WITHIN(ar.bandwidth_time_s, 6 * (B / 4) / W, 1e-12);
    QVERIFY_WITHIN(ar.max_link_bytes, 6 * (B / 4), 1e-12);
    double most = 0;
    for (const auto& lt : ar.link_traffic) most = std::max(most, lt.bytes);
    QVERIFY_WITHIN(most, 4 * (B / 4), 1e-12);
    // 2 x the all-gather of the result, as the book has it.
    QVERIFY_WITHIN(ar.time_s, 2 * Cost(t, CollectiveKind::kAllGather, {{0, 1, 2, 3}}, B / 4).time_s, 1e-12);
    // Alone in the fluid model it finishes at the same time (the passes are chained jobs).
    CollectiveRequest r{CollectiveKind::kAllReduce, {{0, 1, 2, 3}}, B, {}};
    QVERIFY_WITHIN(EstimateConcurrentCollectives(t, {r}).value()[0], ar.time_s, 1e-9);
    // Beside an all-gather on the same line: the gather shares the all-reduce's second pass's links.
    CollectiveRequest g{CollectiveKind::kAllGather, {{0, 1, 2, 3}}, B / 4, {}};
    auto both = EstimateConcurrentCollectives(t, {r, g});
    QVERIFY(both.ok());
    QVERIFY(both.value()[0] > ar.time_s);
  }

  // ---- compute ------------------------------------------------------------------------------------------------
  void rooflineCompute() {
    const ChipSpec v5e = IdealRoofline(Preset("tpu-v5e"));
    // bf16 matmul [8192,8192] x [8192,8192]: 2 N^3 FLOPs, 3 N^2 x 2 bytes: compute-bound.
    const double n = 8192, flops = 2 * n * n * n, bytes = 3 * n * n * 2;
    const RooflineEstimate big = ComputeRoofline(flops, bytes, v5e);
    QVERIFY(big.compute_bound);
    QCOMPARE(big.time_s, flops / 1.97e14);
    QCOMPARE(ComputeCost(flops, bytes, v5e), flops / 1.97e14);
    // Elementwise add of 1e8 bf16 elements: 1 FLOP per element, 3 x 2 bytes per element: memory-bound.
    const RooflineEstimate add = ComputeRoofline(1e8, 6e8, v5e);
    QVERIFY(!add.compute_bound);
    QCOMPARE(add.time_s, 6e8 / 8.19e11);
    // The ridge point: peak / HBM bandwidth, about 240 FLOPs/byte on v5e.
    QVERIFY_WITHIN(big.ridge_intensity, 240.5, 0.001);
    // Efficiency factor and two cores per chip.
    ChipSpec slow = v5e;
    slow.flops_efficiency = 0.5;
    QCOMPARE(ComputeCost(flops, bytes, slow), 2 * flops / 1.97e14);
    auto v3 = WithCoresPerChip(IdealRoofline(Preset("tpu-v3")), 2);
    QCOMPARE(ComputeCost(1.23e14, 0, v3.value()), 2.0);  // one core: half the chip's FLOP/s
    QCOMPARE(ComputeCost(0, 4.5e11, v3.value()), 1.0);   // one core: half the HBM bandwidth
    // The calibrated preset: the matrix units' and HBM's sustained shares plus the per-op overhead.
    const ChipSpec real = Preset("tpu-v5e");
    QCOMPARE(ComputeCost(flops, bytes, real), flops / (1.97e14 * real.flops_efficiency) + real.op_overhead);
    QCOMPARE(ComputeCost(1e8, 6e8, real), 6e8 / (8.19e11 * real.hbm_efficiency) + real.op_overhead);
  }

  void countFlopsOfDotAndConvolution() {
    Module m("m");
    Computation* c = m.AddComputation("entry", true);
    Instruction* a = c->AddInstruction(Opcode::kParameter, Shape(PrimitiveType::kBF16, {4, 64, 128}), {}, "a");
    a->parameter_number = 0;
    Instruction* b = c->AddInstruction(Opcode::kParameter, Shape(PrimitiveType::kBF16, {4, 128, 32}), {}, "b");
    b->parameter_number = 1;
    Instruction* dot = c->AddInstruction(Opcode::kDot, Shape(PrimitiveType::kBF16, {4, 64, 32}), {a, b}, "dot");
    dot->dot_dims.lhs_batch = {0};
    dot->dot_dims.rhs_batch = {0};
    dot->dot_dims.lhs_contracting = {2};
    dot->dot_dims.rhs_contracting = {1};
    auto f = CountFlops(*dot);
    QVERIFY(f.ok());
    QCOMPARE(f.value(), 2.0 * 4 * 64 * 32 * 128);
    QCOMPARE(BytesAccessed(*dot), 2.0 * (4 * 64 * 128 + 4 * 128 * 32 + 4 * 64 * 32));
    // Convolution b01f_01io->b01f: input [8, 32, 32, 16], kernel [3, 3, 16, 64] -> [8, 32, 32, 64].
    Instruction* x = c->AddInstruction(Opcode::kParameter, Shape(PrimitiveType::kF32, {8, 32, 32, 16}), {}, "x");
    x->parameter_number = 2;
    Instruction* k = c->AddInstruction(Opcode::kParameter, Shape(PrimitiveType::kF32, {3, 3, 16, 64}), {}, "k");
    k->parameter_number = 3;
    Instruction* conv = c->AddInstruction(Opcode::kConvolution, Shape(PrimitiveType::kF32, {8, 32, 32, 64}), {x, k}, "conv");
    conv->conv_dims.input_batch = 0;
    conv->conv_dims.input_feature = 3;
    conv->conv_dims.input_spatial = {1, 2};
    conv->conv_dims.kernel_spatial = {0, 1};
    conv->conv_dims.kernel_input_feature = 2;
    conv->conv_dims.kernel_output_feature = 3;
    conv->conv_dims.output_batch = 0;
    conv->conv_dims.output_feature = 3;
    conv->conv_dims.output_spatial = {1, 2};
    auto cf = CountFlops(*conv);
    QVERIFY(cf.ok());
    QCOMPARE(cf.value(), 2.0 * 8 * 32 * 32 * 64 * 3 * 3 * 16);
    QVERIFY(!CountFlops(*a).ok());
  }

  // ---- CLI ------------------------------------------------------------------------------------------------------
  void cliCollective() {
    const QString cli = QString::fromUtf8(SHARDSCOPE_CLI_PATH);
    if (!QFileInfo::exists(cli)) QSKIP("shardscope-cli is not built");
    auto run = [&](const QStringList& args, int* code) {
      QProcess p;
      p.start(cli, args);
      p.waitForFinished(60000);
      *code = p.exitCode();
      return QString::fromUtf8(p.readAllStandardOutput()) + QString::fromUtf8(p.readAllStandardError());
    };
    int code = -1;
    // C1 through the CLI: v5e, Y of 4 has no wraparound: 559.2 us.
    QString out = run({"collective", "all-gather", "--chip", "tpu-v5e", "--mesh", "X=8,Y=4", "--shape", "bf16[2048,8192]",
                       "--sharding", "[E_Y, F]", "--axes", "Y"}, &code);
    QCOMPARE(code, 0);
    const QStringList lines = out.trimmed().split('\n');
    QVERIFY2(lines.last().startsWith("time_us: "), qPrintable(out));
    const double t = lines.last().mid(9).toDouble();
    QVERIFY_WITHIN(t, 560.0, 0.10);
    QVERIFY(out.contains("bandwidth-bound"));
    // Forced wraparound: the exact ring, 279.6 us.
    out = run({"collective", "all-gather", "--chip", "tpu-v5e", "--mesh", "X=8,Y=4", "--wraparound", "--shape",
               "bf16[2048,8192]", "--sharding", "[E_Y, F]", "--axes", "Y"}, &code);
    QCOMPARE(code, 0);
    QVERIFY_WITHIN(out.trimmed().split('\n').last().mid(9).toDouble(), 286.0, 0.10);
    // C5 over two axes on v4.
    out = run({"collective", "all-gather", "--chip", "tpu-v4", "--mesh", "X=4,Y=4,Z=4", "--shape", "bf16[1024,4096]",
               "--sharding", "[B_X, D_Y]", "--axes", "X,Y"}, &code);
    QCOMPARE(code, 0);
    QVERIFY_WITHIN(out.trimmed().split('\n').last().mid(9).toDouble(), 46.0, 0.10);
    // All-reduce of an unreduced array.
    out = run({"collective", "all-reduce", "--chip", "tpu-v4", "--mesh", "X=4,Y=4,Z=4", "--shape", "bf16[1024,4096]",
               "--sharding", "[B_X, D_Y]{U_Z}", "--axes", "Z"}, &code);
    QCOMPARE(code, 0);
    QVERIFY_WITHIN(out.trimmed().split('\n').last().mid(9).toDouble(), 2 * 1.5 * (2.0 * 1024 * 4096 / 16 / 4) / 4.5e10 * 1e6, 1e-3);
    // Bad input: exit 2 with a message.
    out = run({"collective", "all-gather", "--chip", "tpu-v9", "--mesh", "X=8,Y=4", "--shape", "bf16[2048,8192]",
               "--sharding", "[E_Y, F]", "--axes", "Y"}, &code);
    QCOMPARE(code, 2);
    QVERIFY(out.contains("unknown chip"));
    out = run({"collective", "gather-all", "--chip", "tpu-v5e", "--mesh", "X=8,Y=4", "--shape", "bf16[2048,8192]",
               "--sharding", "[E_Y, F]", "--axes", "Y"}, &code);
    QCOMPARE(code, 2);
    out = run({"collective", "all-gather", "--chip", "tpu-v5e", "--mesh", "X=8,Y=4", "--shape", "bf16[2048,8192]",
               "--sharding", "[E_Y, F]", "--axes", "X"}, &code);
    QCOMPARE(code, 2);
    QVERIFY2(out.contains("does not shard"), qPrintable(out));
  }
};

QTEST_APPLESS_MAIN(TestSimulatorCost)
#include "test_simulator_cost.moc"
