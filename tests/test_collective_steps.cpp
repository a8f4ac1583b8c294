// Teaching walkthroughs of collectives (simulator/collectives/walkthrough.h): the steps of each
// collective's schedule (the one the cost model times), the transfers and holdings of each step, and
// the cost formula with its numbers — which must agree with EstimateCollective for the same inputs. Published figures are
// cited by their case id in ../shared/reference/validation.md.
#include <QtTest/QtTest>

#include <cmath>
#include <map>
#include <set>

#include "core/ir/replica_groups.h"
#include "core/sharding/mesh.h"
#include "simulator/collectives/cost.h"
#include "core/base/units.h"
#include "simulator/collectives/walkthrough.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

using namespace shardscope;
using namespace shardscope::sim;

namespace {

constexpr double us = 1e-6;
constexpr double kShard = 8388608;  // bf16[2048/4, 8192]: the C1 shard (8.39 MB)

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

Topology ForMesh(const ChipSpec& chip, const DeviceMesh& mesh, TopologyOptions::Wraparound wrap = TopologyOptions::Wraparound::kGenerationRule) {
  TopologyOptions o;
  o.wraparound = wrap;
  auto t = Topology::ForMesh(chip, mesh, {}, o);
  if (!t.ok()) qFatal("topology: %s", t.error().message.c_str());
  return std::move(t.value());
}

// A 1-D slice of n TPU v4 chips (45 GB/s one way per link, 1 us per hop), a ring or a line.
Topology Chain(int64_t n, bool wrap) {
  ChipSpec c = Preset("tpu-v4");
  c.physical_dims = 1;
  c.pod_shape = {n};
  c.links_per_chip = 2;
  c.wraparound = wrap ? WraparoundRule::kAlways : WraparoundRule::kNever;
  auto t = Topology::Create(c, {n});
  if (!t.ok()) qFatal("topology: %s", t.error().message.c_str());
  return std::move(t.value());
}

std::vector<std::vector<int64_t>> Groups(const DeviceMesh& mesh, std::vector<std::string> axes) {
  auto g = ReplicaGroupsForAxes(mesh, axes);
  if (!g.ok()) qFatal("groups: %s", g.error().message.c_str());
  return g.value();
}

CollectiveWalkthrough Walk(const Topology& t, CollectiveKind kind, const std::vector<std::vector<int64_t>>& groups,
                           double bytes, WalkthroughOptions o = {}) {
  auto w = WalkThroughCollective(t, kind, groups, bytes, o);
  if (!w.ok()) qFatal("walkthrough: %s", w.error().message.c_str());
  return std::move(w.value());
}

CollectiveCost Cost(const Topology& t, CollectiveKind kind, const std::vector<std::vector<int64_t>>& groups, double bytes,
                    CollectiveOptions o = {}) {
  auto c = EstimateCollective(t, kind, groups, bytes, o);
  if (!c.ok()) qFatal("cost: %s", c.error().message.c_str());
  return c.value();
}

// The transfer of `step` (1-based) from src to dst carrying `chunk`, or nullptr.
const StepTransfer* Find(const CollectiveWalkthrough& w, int step, int64_t src, int64_t dst, int64_t chunk = -1) {
  for (const auto& t : w.steps[static_cast<size_t>(step - 1)].transfers) {
    if (t.src_device == src && t.dst_device == dst && (chunk < 0 || t.chunks == std::vector<int64_t>{chunk})) return &t;
  }
  return nullptr;
}

// Shards a device holds completely after `step` (0: before step 1).
std::set<int64_t> Full(const CollectiveWalkthrough& w, int step, int64_t device) {
  const auto& h = step == 0 ? w.initial[static_cast<size_t>(device)] : w.steps[static_cast<size_t>(step - 1)].after[static_cast<size_t>(device)];
  std::set<int64_t> out;
  for (size_t c = 0; c < h.cells.size(); ++c) {
    if (h.cells[c].fill >= 1 - 1e-12) out.insert(static_cast<int64_t>(c));
  }
  return out;
}

// The per-link bytes of the plan's transfers equal the link traffic EstimateCollective counted.
void CheckLinksEqual(const CollectiveWalkthrough& w, const Topology& t) {
  std::vector<double> expected(static_cast<size_t>(t.num_links()), 0.0);
  for (const auto& lt : w.cost.link_traffic) expected[static_cast<size_t>(lt.link)] = lt.bytes;
  for (int64_t l = 0; l < t.num_links(); ++l) {
    const double a = w.link_bytes[static_cast<size_t>(l)], b = expected[static_cast<size_t>(l)];
    QVERIFY2(std::fabs(a - b) <= 1e-9 * std::max(1.0, b), qPrintable(QString("link %1: plan %2, cost %3").arg(l).arg(a).arg(b)));
  }
}

// The formula's time is EstimateCollective's, and recomputing it from the numbers it shows gives it too.
void CheckFormula(const CollectiveWalkthrough& w, const CollectiveCost& independent, LatencyModel model = LatencyModel::kOverlapped) {
  QCOMPARE(w.formula.time_s, independent.time_s);
  QCOMPARE(w.cost.time_s, independent.time_s);
  QCOMPARE(w.formula.latency_s, independent.latency_time_s);
  QCOMPARE(w.formula.bandwidth_s, independent.bandwidth_time_s);
  const double latency = w.formula.hops * w.formula.hop_latency_s;
  const double bandwidth = w.formula.link_bytes / w.formula.link_bandwidth;
  const double recomputed = model == LatencyModel::kAdditive ? latency + bandwidth : std::max(latency, bandwidth);
  QVERIFY2(std::fabs(recomputed - independent.time_s) <= 1e-12 + 1e-9 * independent.time_s,
           qPrintable(QString("recomputed %1 vs %2").arg(recomputed).arg(independent.time_s)));
  QVERIFY(!w.formula.text.empty());
  QVERIFY(w.formula.text.find(FormatSeconds(independent.time_s)) != std::string::npos);
  QVERIFY(w.formula.text.find(std::string(CostRegimeName(independent.regime))) != std::string::npos);
}

}  // namespace

class TestCollectiveSteps : public QObject {
  Q_OBJECT

 private slots:
  void parsesReplicaGroups() {
    auto g = ParseReplicaGroupsText("{{0,1},{2,3}}");
    QVERIFY(g.ok());
    QCOMPARE(g->groups, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    QVERIFY(ParseReplicaGroupsText("{}")->empty());
    QVERIFY(ParseReplicaGroupsText("  ")->empty());
    g = ParseReplicaGroupsText(" { {0, 4, 8}, {1,5,9} } ");
    QVERIFY(g.ok());
    QCOMPARE(g->groups, (std::vector<std::vector<int64_t>>{{0, 4, 8}, {1, 5, 9}}));
    // The iota forms XLA prints.
    g = ParseReplicaGroupsText("[2,2]<=[4]");
    QVERIFY(g.ok());
    QCOMPARE(g->groups, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    g = ParseReplicaGroupsText("[2,4]<=[4,2]T(1,0)");
    QVERIFY2(g.ok(), g.ok() ? "" : g.error().message.c_str());
    QCOMPARE(g->groups, (std::vector<std::vector<int64_t>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
    QCOMPARE(ReplicaGroupsText(g->groups), std::string("{{0,2,4,6},{1,3,5,7}}"));
    QCOMPARE(ReplicaGroupsText(g.value()), std::string("[2,4]<=[4,2]T(1,0)"));

    auto pairs = ParseSourceTargetPairsText("{{0,1},{1,2},{2,3}}");
    QVERIFY(pairs.ok());
    QCOMPARE(pairs->size(), size_t{3});
    QCOMPARE(pairs->at(2), (std::pair<int64_t, int64_t>{2, 3}));
    QCOMPARE(SourceTargetPairsText(pairs.value()), std::string("{{0,1},{1,2},{2,3}}"));
    QCOMPARE(SourceTargetPairsText({{12, -3}, {1024, 7}}), std::string("{{12,-3},{1024,7}}"));

    // A text limit: written out when it fits, abbreviated past it (also when a lower bound on the
    // length already says so, without writing it out).
    const std::vector<std::vector<int64_t>> two = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    QCOMPARE(ReplicaGroupsText(two, 21), std::string("{{0,1,2,3},{4,5,6,7}}"));
    QCOMPARE(ReplicaGroupsText(two, 19), std::string("{{0,1,2,3},...} (2 groups of 4)"));
    QCOMPARE(ReplicaGroupsText(two, 18), std::string("{{0,1,2,3},...} (2 groups of 4)"));
    std::vector<std::vector<int64_t>> wide(1, std::vector<int64_t>(1024));
    for (int64_t i = 0; i < 1024; ++i) wide[0][static_cast<size_t>(i)] = i;
    QCOMPARE(ReplicaGroupsText(wide, 2000), std::string("{{0,1,2,3,...},...} (1 groups of 1024)"));
    QCOMPARE(ReplicaGroupsText(wide).size(), size_t{4013});  // 2986 digits, 1023 commas, 4 braces
    QCOMPARE(ReplicaGroupsText(std::vector<std::vector<int64_t>>{}, 0), std::string("{}"));
  }

  // The memo of group texts the partitioner keeps: the same text as ReplicaGroupsText (abbreviated
  // alike), one entry per distinct groups, the oldest dropped past its capacity, and a reference
  // that stays valid while fewer than `capacity` other groups are asked for.
  void replicaGroupsTextMemo() {
    const std::vector<std::vector<int64_t>> a = {{0, 1}, {2, 3}}, b = {{0, 2}, {1, 3}}, c = {{0, 1, 2, 3}};
    ReplicaGroupsTextMemo memo(std::string::npos, 2);
    const std::string& ta = memo(a);
    QCOMPARE(ta, std::string("{{0,1},{2,3}}"));
    QCOMPARE(&memo(a), &ta);  // asked again: the same entry
    const std::string& tb = memo(b);
    QCOMPARE(tb, std::string("{{0,2},{1,3}}"));
    QCOMPARE(ta, std::string("{{0,1},{2,3}}"));  // still valid: one other groups asked for
    QCOMPARE(&memo(a), &ta);
    QCOMPARE(memo(c), std::string("{{0,1,2,3}}"));  // capacity 2: a, the oldest, is dropped
    QCOMPARE(&memo(b), &tb);
    QCOMPARE(memo(a), std::string("{{0,1},{2,3}}"));  // made again
    QCOMPARE(memo({}), std::string("{}"));
    // Abbreviated as ReplicaGroupsText abbreviates: 256 groups of 8.
    std::vector<std::vector<int64_t>> many(256, std::vector<int64_t>(8));
    for (int64_t g = 0; g < 256; ++g)
      for (int64_t i = 0; i < 8; ++i) many[g][i] = g * 8 + i;
    ReplicaGroupsTextMemo short_memo(40);
    QCOMPARE(short_memo(many), ReplicaGroupsText(many, 40));
    QVERIFY2(short_memo(many).size() < 80 && short_memo(many).find("(256 groups of 8)") != std::string::npos,
             short_memo(many).c_str());
    QCOMPARE(ReplicaGroupsTextMemo()(many), ReplicaGroupsText(many));
  }

  void badTextIsAnErrorNamingTheColumn() {
    auto g = ParseReplicaGroupsText("{{0,1},{2,3}");
    QVERIFY(!g.ok());
    QVERIFY2(g.error().message.find("column 13") != std::string::npos, g.error().message.c_str());
    QCOMPARE(g.error().offset, int64_t{12});
    g = ParseReplicaGroupsText("{{0,x}}");
    QVERIFY(!g.ok());
    QVERIFY2(g.error().message.find("expected a non-negative integer in a replica group") != std::string::npos, g.error().message.c_str());
    QVERIFY2(g.error().message.find("column 5") != std::string::npos, g.error().message.c_str());
    g = ParseReplicaGroupsText("{{0,1},{1,2}}");
    QVERIFY(!g.ok());
    QVERIFY2(g.error().message.find("device 1 appears in more than one") != std::string::npos, g.error().message.c_str());
    g = ParseReplicaGroupsText("{{0,1},{}}");
    QVERIFY(!g.ok());
    QVERIFY2(g.error().message.find("empty") != std::string::npos, g.error().message.c_str());
    g = ParseReplicaGroupsText("[2,2]<=[5]");
    QVERIFY(!g.ok());
    QVERIFY2(g.error().message.find("expected iota reshape dimensions with 4 elements, found 5") != std::string::npos, g.error().message.c_str());
    QVERIFY(!ParseReplicaGroupsText("[4]<=[4]").ok());
    QVERIFY(!ParseReplicaGroupsText("[2,2]<=[2,2]T(0,0)").ok());
    QVERIFY(!ParseReplicaGroupsText("{{0,1}} trailing").ok());

    auto p = ParseSourceTargetPairsText("{{0,1,2}}");
    QVERIFY(!p.ok());
    QVERIFY2(p.error().message.find("pair of 2 device ids") != std::string::npos, p.error().message.c_str());
    QVERIFY(!ParseSourceTargetPairsText("{{0,1}").ok());
    QVERIFY(!ParseSourceTargetPairsText("0,1").ok());

    // Groups that do not fit the slice are refused with the device named, not a crash.
    const Topology ring = Chain(4, true);
    auto w = WalkThroughCollective(ring, CollectiveKind::kAllGather, {{0, 1}, {2, 9}}, kShard);
    QVERIFY(!w.ok());
    QVERIFY2(w.error().message.find("device 9") != std::string::npos, w.error().message.c_str());
    QVERIFY(!WalkThroughCollective(ring, CollectiveKind::kAllGather, {{0, 1}, {1, 2}}, kShard).ok());
    QVERIFY(!WalkThroughCollective(ring, CollectiveKind::kCollectivePermute, {}, kShard).ok());
    QVERIFY(!WalkThroughCollective(ring, CollectiveKind::kAllGather, {}, -1).ok());
    auto cp = WalkThroughCollectivePermute(ring, {{0, 1}, {2, 1}}, kShard);
    QVERIFY(!cp.ok());
    QVERIFY2(cp.error().message.find("device 1 is the target of more than one pair") != std::string::npos, cp.error().message.c_str());
    QVERIFY(!WalkThroughCollectivePermute(ring, {{0, 7}}, kShard).ok());
    // Too large to draw: a clear refusal.
    WalkthroughOptions tiny;
    tiny.max_transfers = 10;
    auto big = WalkThroughCollective(ring, CollectiveKind::kAllGather, {}, kShard, tiny);
    QVERIFY(!big.ok());
    QVERIFY2(big.error().message.find("fewer devices") != std::string::npos, big.error().message.c_str());
  }

  void ringAllGatherOfFourTakesTwoBidirectionalSteps() {
    const Topology ring = Chain(4, true);
    const CollectiveWalkthrough w = Walk(ring, CollectiveKind::kAllGather, {}, kShard);
    QCOMPARE(w.steps.size(), size_t{2});
    QCOMPARE(w.cost.steps, int64_t{2});
    QCOMPARE(w.group_size, int64_t{4});
    // Step 1: every device sends its own shard to both neighbours: 8 transfers of a whole shard.
    const auto& s1 = w.steps[0].transfers;
    QCOMPARE(s1.size(), size_t{8});
    for (const auto& t : s1) {
      QCOMPARE(t.bytes, kShard);
      QCOMPARE(t.chunks, std::vector<int64_t>{t.src_device});
      QCOMPARE(t.piece, "shard " + std::to_string(t.src_device));
      QVERIFY(!t.reduce_on_arrival);
      QCOMPARE(t.hops, int64_t{1});
    }
    QVERIFY(Find(w, 1, 0, 1, 0));
    const StepTransfer* wrap = Find(w, 1, 0, 3, 0);
    QVERIFY(wrap);
    QVERIFY(wrap->wraparound);  // 0 -> 3 closes the ring
    QVERIFY(!Find(w, 1, 0, 1, 0)->wraparound);
    // Step 2: each forwards what it received one hop further; N even: half a shard each way.
    const auto& s2 = w.steps[1].transfers;
    QCOMPARE(s2.size(), size_t{8});
    for (const auto& t : s2) {
      QCOMPARE(t.bytes, kShard / 2);
      QCOMPARE(t.fraction, 0.5);
      QVERIFY(t.half);
      QVERIFY(t.piece.rfind("half of shard", 0) == 0);
    }
    for (const auto& t : w.steps[0].transfers) QVERIFY(!t.half);
    // Device 2, opposite device 0, gets one half of shard 0 from each side.
    QVERIFY(Find(w, 2, 1, 2, 0));
    QVERIFY(Find(w, 2, 3, 2, 0));
    // Holdings.
    QCOMPARE(Full(w, 0, 0), (std::set<int64_t>{0}));
    QCOMPARE(Full(w, 1, 0), (std::set<int64_t>{3, 0, 1}));
    QCOMPARE(w.steps[0].after[0].cells[2].fill, 0.0);
    QCOMPARE(Full(w, 2, 0), (std::set<int64_t>{0, 1, 2, 3}));
    QCOMPARE(Full(w, 2, 2), (std::set<int64_t>{0, 1, 2, 3}));
    QCOMPARE(w.steps[1].after[2].text, std::string("holds all 4 shards"));
    QCOMPARE(w.steps[0].after[0].text, std::string("holds shards 0, 1, 3 (3 of 4)"));
    // Captions say what happens.
    QVERIFY2(w.steps[0].caption.rfind("Step 1 of 2: ", 0) == 0, w.steps[0].caption.c_str());
    QVERIFY(w.steps[0].caption.find("both of its neighbours") != std::string::npos);
    QVERIFY(w.steps[1].caption.find("half a shard") != std::string::npos);
    QVERIFY(w.steps[1].caption.find("all 4 shards") != std::string::npos);
    CheckLinksEqual(w, ring);
    CheckFormula(w, Cost(ring, CollectiveKind::kAllGather, {}, kShard));
    // The busiest one-way link carries (N-1)/2 = 1.5 shards (C1 read as an exact ring: 283 us
    // for the 34 MB array on 4 devices at 45 GB/s, validation.md).
    QCOMPARE(w.formula.link_bytes, 1.5 * kShard);
    QVERIFY(std::fabs(w.formula.time_s - 1.5 * kShard / 4.5e10) < 1e-12);
    QVERIFY2(w.formula.text.find("max(1.00 \u00B5s \u00D7 2, 12.6 MB / 45.0 GB/s)") != std::string::npos, w.formula.text.c_str());
    // The book's closed form for comparison: V / W_ICI = 33.6 MB / 90 GB/s = 373 us.
    QCOMPARE(w.formula.book_time_s, BookCollectiveTime(CollectiveKind::kAllGather, 4 * kShard, 4.5e10, us, {4}, true));
    QVERIFY(w.formula.book.find("373 \u00B5s") != std::string::npos);
  }

  void lineOfFourTakesThreeSteps() {
    // C1: TPU v5e {X:8, Y:4}, AllGather_Y of bf16[E_Y, F] (8.39 MB shards); an axis of 4 on v5e has
    // no wraparound, so Y is a line: 3 steps, the busiest link carries N-1 = 3 shards: about 560 us.
    const DeviceMesh mesh = Mesh("X=8,Y=4");
    const Topology t = ForMesh(Preset("tpu-v5e"), mesh);
    const auto groups = Groups(mesh, {"Y"});
    WalkthroughOptions o;
    o.mesh = mesh;
    const CollectiveWalkthrough w = Walk(t, CollectiveKind::kAllGather, groups, kShard, o);
    QCOMPARE(w.steps.size(), size_t{3});
    QCOMPARE(w.num_groups, int64_t{8});
    // Group 0 is devices 0..3 along Y. Step 1: 6 transfers in that group (0<->1, 1<->2, 2<->3).
    int in_group0 = 0;
    for (const auto& tr : w.steps[0].transfers) in_group0 += tr.group == 0;
    QCOMPARE(in_group0, 6);
    QVERIFY(Find(w, 1, 0, 1, 0) && Find(w, 1, 1, 0, 1) && Find(w, 1, 3, 2, 3));
    QVERIFY(!Find(w, 1, 0, 3));  // no wraparound link
    // Step 3: only the shards from the two ends are still moving.
    int last = 0;
    for (const auto& tr : w.steps[2].transfers) last += tr.group == 0;
    QCOMPARE(last, 2);
    QVERIFY(Find(w, 3, 2, 3, 0) && Find(w, 3, 1, 0, 3));
    QCOMPARE(Full(w, 1, 0), (std::set<int64_t>{0, 1}));
    QCOMPARE(Full(w, 2, 0), (std::set<int64_t>{0, 1, 2}));
    QCOMPARE(Full(w, 3, 0), (std::set<int64_t>{0, 1, 2, 3}));
    QVERIFY2(w.steps[0].caption.find("along Y") != std::string::npos, w.steps[0].caption.c_str());
    QVERIFY(w.steps[0].caption.find("no wraparound link") != std::string::npos);
    QVERIFY(w.summary.find("8 groups") != std::string::npos);
    CheckLinksEqual(w, t);
    CheckFormula(w, Cost(t, CollectiveKind::kAllGather, groups, kShard));
    QVERIFY(std::fabs(w.formula.time_s - 560 * us) < 0.01 * 560 * us);  // C1: "about 560 us"
    QVERIFY2(w.formula.text.find("max(1.00 \u00B5s \u00D7 3, 25.2 MB / 45.0 GB/s) = 559 \u00B5s (bandwidth-bound)") != std::string::npos,
             w.formula.text.c_str());
    QCOMPARE(w.formula.unit_bytes, kShard);
    QCOMPARE(w.formula.link_bytes, 3 * kShard);
  }

  void reduceScatterMirrorsAllGather() {
    const Topology ring = Chain(4, true);
    const double B = 4 * kShard;
    const CollectiveWalkthrough ag = Walk(ring, CollectiveKind::kAllGather, {}, kShard);
    const CollectiveWalkthrough rs = Walk(ring, CollectiveKind::kReduceScatter, {}, B);
    QCOMPARE(rs.steps.size(), size_t{2});
    // Step s of the reduce-scatter is step S+1-s of the all-gather, every transfer reversed.
    for (int s = 1; s <= 2; ++s) {
      const auto& mine = rs.steps[static_cast<size_t>(s - 1)].transfers;
      const auto& theirs = ag.steps[static_cast<size_t>(2 - s)].transfers;
      QCOMPARE(mine.size(), theirs.size());
      for (const auto& t : theirs) {
        const StepTransfer* r = Find(rs, s, t.dst_device, t.src_device, t.chunks.front());
        QVERIFY2(r, qPrintable(QString("step %1: %2 -> %3").arg(s).arg(t.dst_device).arg(t.src_device)));
        QCOMPARE(r->bytes, t.bytes);
        QVERIFY(r->reduce_on_arrival);
      }
    }
    // The first step starts with halves (the device opposite an owner splits that chunk).
    QVERIFY(Find(rs, 1, 2, 1, 0) && Find(rs, 1, 2, 3, 0));
    QCOMPARE(Find(rs, 1, 2, 1, 0)->bytes, kShard / 2);
    QVERIFY2(Find(rs, 2, 1, 0, 0)->piece == "partial sum of chunk 0 (1\u00BD of 4 added)", Find(rs, 2, 1, 0, 0)->piece.c_str());
    // Partial-sum coverage: 1 of 4 at first, all 4 for the device's own chunk at the end.
    QCOMPARE(rs.initial[0].cells[0].fill, 0.25);
    QCOMPARE(rs.steps[0].after[1].cells[0].fill, 1.5 / 4);
    for (int64_t d = 0; d < 4; ++d) {
      QCOMPARE(rs.steps[1].after[static_cast<size_t>(d)].cells[static_cast<size_t>(d)].fill, 1.0);
      QVERIFY(rs.steps[1].after[static_cast<size_t>(d)].text.find("fully reduced") != std::string::npos);
    }
    QVERIFY(rs.steps[1].after[0].cells[2].fill < 1);
    QVERIFY(rs.steps[0].caption.find("Reduced on arrival") != std::string::npos);
    CheckLinksEqual(rs, ring);
    CheckFormula(rs, Cost(ring, CollectiveKind::kReduceScatter, {}, B));
    QCOMPARE(rs.formula.unit_bytes, kShard);
    // On a line the same holds (3 steps, partial sums start at the ends).
    const Topology line = Chain(4, false);
    const CollectiveWalkthrough rl = Walk(line, CollectiveKind::kReduceScatter, {}, B);
    QCOMPARE(rl.steps.size(), size_t{3});
    QCOMPARE(rl.steps[0].transfers.size(), size_t{2});
    QVERIFY(Find(rl, 1, 3, 2, 0) && Find(rl, 1, 0, 1, 3));
    CheckLinksEqual(rl, line);
    CheckFormula(rl, Cost(line, CollectiveKind::kReduceScatter, {}, B));
    // Partial sums run over the reverse links: 0 -> 1 carries chip 0's contributions to chunks 1, 2
    // and 3 and 1 -> 0 only the partial sum of chunk 0; the all-gather is the other way round
    // (shards 1, 2, 3 cross 1 -> 0, only shard 0 crosses 0 -> 1).
    QCOMPARE(rl.link_bytes[static_cast<size_t>(line.LinkBetween(0, 1))], 3 * kShard);
    QCOMPARE(rl.link_bytes[static_cast<size_t>(line.LinkBetween(1, 0))], 1 * kShard);
    const CollectiveWalkthrough gl = Walk(line, CollectiveKind::kAllGather, {}, kShard);
    QCOMPARE(gl.link_bytes[static_cast<size_t>(line.LinkBetween(0, 1))], 1 * kShard);
    QCOMPARE(gl.link_bytes[static_cast<size_t>(line.LinkBetween(1, 0))], 3 * kShard);
    // An all-reduce on the line runs the two passes one after the other: its bandwidth time is the
    // reduce-scatter's busiest link (0 -> 1) plus the all-gather's (1 -> 0), 6 chunks, though no
    // single link carries more than 4 (N) over the whole collective.
    const CollectiveWalkthrough al = Walk(line, CollectiveKind::kAllReduce, {}, B);
    CheckLinksEqual(al, line);
    CheckFormula(al, Cost(line, CollectiveKind::kAllReduce, {}, B));
    double most = 0;
    for (double bytes : al.link_bytes) most = std::max(most, bytes);
    QCOMPARE(most, 4 * kShard);
    QCOMPARE(al.cost.max_link_bytes, 6 * kShard);
    QCOMPARE(al.cost.bandwidth_time_s, 6 * kShard / 4.5e10);
    QCOMPARE(al.cost.pass_busiest.size(), size_t{2});
  }

  void allReduceIsReduceScatterThenAllGather() {
    const Topology ring = Chain(4, true);
    const double B = 4 * kShard;
    const CollectiveWalkthrough ar = Walk(ring, CollectiveKind::kAllReduce, {}, B);
    const CollectiveWalkthrough rs = Walk(ring, CollectiveKind::kReduceScatter, {}, B);
    const CollectiveWalkthrough ag = Walk(ring, CollectiveKind::kAllGather, {}, kShard);
    QCOMPARE(ar.steps.size(), size_t{4});
    QCOMPARE(ar.cost.steps, int64_t{4});
    for (size_t s = 0; s < 4; ++s) {
      const auto& ref = s < 2 ? rs.steps[s] : ag.steps[s - 2];
      QCOMPARE(ar.steps[s].phase, std::string(s < 2 ? "reduce-scatter" : "all-gather"));
      QCOMPARE(ar.steps[s].transfers.size(), ref.transfers.size());
      for (size_t i = 0; i < ref.transfers.size(); ++i) {
        QCOMPARE(ar.steps[s].transfers[i].src_device, ref.transfers[i].src_device);
        QCOMPARE(ar.steps[s].transfers[i].dst_device, ref.transfers[i].dst_device);
        QCOMPARE(ar.steps[s].transfers[i].chunks, ref.transfers[i].chunks);
        QCOMPARE(ar.steps[s].transfers[i].bytes, ref.transfers[i].bytes);
        QCOMPARE(ar.steps[s].transfers[i].reduce_on_arrival, s < 2);
      }
    }
    QVERIFY(ar.steps[2].transfers[0].piece.find("reduced chunk") != std::string::npos);
    // After the reduce-scatter each device has its chunk summed; at the end every chunk, summed.
    QCOMPARE(ar.steps[1].after[3].cells[3].fill, 1.0);
    QVERIFY(ar.steps[1].after[3].cells[1].fill < 1);
    for (int64_t d = 0; d < 4; ++d) {
      QCOMPARE(Full(ar, 4, d), (std::set<int64_t>{0, 1, 2, 3}));
      QVERIFY(ar.steps[3].after[static_cast<size_t>(d)].text.find("complete") != std::string::npos);
    }
    QVERIFY(ar.steps[0].caption.find("(reduce-scatter)") != std::string::npos);
    QVERIFY(ar.steps[2].caption.find("(all-gather of the reduced chunks)") != std::string::npos);
    CheckLinksEqual(ar, ring);
    CheckFormula(ar, Cost(ring, CollectiveKind::kAllReduce, {}, B));
    // The book's all-reduce is twice its all-gather of the buffer (SB part 3).
    QCOMPARE(ar.formula.book_time_s, 2 * BookCollectiveTime(CollectiveKind::kAllGather, B, 4.5e10, us, {4}, true));
  }

  void allToAllSendsNTimesNMinusOnePieces() {
    const Topology ring = Chain(4, true);
    const double B = 4 * kShard;
    const CollectiveWalkthrough w = Walk(ring, CollectiveKind::kAllToAll, {}, B);
    QCOMPARE(w.steps.size(), size_t{2});  // the farthest piece travels N/2 hops
    QCOMPARE(w.cost.steps, int64_t{2});
    std::set<std::pair<int64_t, int64_t>> pieces;
    int halves_first_step = 0;
    for (const auto& s : w.steps) {
      for (const auto& t : s.transfers) {
        pieces.insert({t.chunks.front(), t.final_dst_device});
        QCOMPARE(t.hops, int64_t{1});  // store-and-forward: one hop per step
      }
    }
    for (const auto& t : w.steps[0].transfers) halves_first_step += t.fraction == 0.5;
    QCOMPARE(pieces.size(), size_t{4 * 3});  // N(N-1)
    // The 4 pieces to the opposite device go half each way round: 8 half transfers in step 1.
    QCOMPARE(halves_first_step, 8);
    const StepTransfer* half = Find(w, 1, 0, 1, 0);
    QVERIFY(half);
    // Slots: device 0 starts with pieces 0->c in every slot, ends with piece c->0 in slot c.
    for (size_t c = 0; c < 4; ++c) QCOMPARE(w.initial[0].cells[c].colour, int64_t{0});
    QCOMPARE(w.steps[0].after[0].cells[2].fill, 0.0);  // piece 0->2 has left, 2->0 is on its way
    QCOMPARE(w.steps[0].after[0].cells[1].colour, int64_t{1});  // 1->0 arrived in one hop
    for (size_t c = 0; c < 4; ++c) {
      QCOMPARE(w.steps[1].after[0].cells[c].colour, static_cast<int64_t>(c));
      QCOMPARE(w.steps[1].after[0].cells[c].fill, 1.0);
    }
    QVERIFY(w.steps[1].after[0].text.find("done") != std::string::npos);
    QVERIFY(w.steps[0].after[1].text.find("forwarding") != std::string::npos);
    QVERIFY(w.steps[1].caption.find("transposed") != std::string::npos);
    CheckLinksEqual(w, ring);
    CheckFormula(w, Cost(ring, CollectiveKind::kAllToAll, {}, B));
    // C8: all-to-all = all-gather / 4 of the same array in the book's closed form.
    QCOMPARE(w.formula.book_time_s, std::max(2 * us, BookCollectiveTime(CollectiveKind::kAllGather, 4 * B, 4.5e10, 0, {4}, true) / 4));
    // On a 4x4 torus over both axes the pieces' routes give exactly the per-axis link loads.
    const DeviceMesh mesh = Mesh("X=4,Y=4");
    const Topology torus = ForMesh(Preset("tpu-v4"), mesh, TopologyOptions::Wraparound::kAll);
    const CollectiveWalkthrough t2 = Walk(torus, CollectiveKind::kAllToAll, {}, 16 * kShard);
    std::set<std::pair<int64_t, int64_t>> p2;
    for (const auto& s : t2.steps) {
      for (const auto& t : s.transfers) p2.insert({t.chunks.front(), t.final_dst_device});
    }
    QCOMPARE(p2.size(), size_t{16 * 15});
    QCOMPARE(static_cast<int64_t>(t2.steps.size()), t2.cost.steps);
    CheckLinksEqual(t2, torus);
    CheckFormula(t2, Cost(torus, CollectiveKind::kAllToAll, {}, 16 * kShard));
  }

  void permuteIsOneStepAndAHaloExchangeWhenAShift() {
    const DeviceMesh mesh = Mesh("X=2,Y=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    auto pairs = ShiftPairsAlongAxis(mesh, "Y", +1, false);
    QVERIFY(pairs.ok());
    WalkthroughOptions o;
    o.mesh = mesh;
    auto w = WalkThroughCollectivePermute(t, pairs.value(), 65536, o);
    QVERIFY2(w.ok(), w.ok() ? "" : w.error().message.c_str());
    QCOMPARE(w->steps.size(), size_t{1});
    QCOMPARE(w->steps[0].transfers.size(), size_t{6});  // 2 rows x 3 sends (the last column sends nothing)
    for (const auto& tr : w->steps[0].transfers) {
      QCOMPARE(tr.hops, int64_t{1});
      QCOMPARE(tr.dst_device, tr.src_device + 1);
      QVERIFY(tr.piece.rfind("halo of", 0) == 0);
    }
    QVERIFY2(w->halo.find("Halo exchange") != std::string::npos && w->halo.find("along Y") != std::string::npos, w->halo.c_str());
    QVERIFY(w->steps[0].caption.find("Halo exchange") != std::string::npos);
    // Device 1 received the halo of device 0 (a second slot in device 0's colour).
    QCOMPARE(w->steps[0].after[1].cells.size(), size_t{2});
    QCOMPARE(w->steps[0].after[1].cells[1].colour, int64_t{0});
    QCOMPARE(w->steps[0].after[0].cells.size(), size_t{1});  // the first column receives nothing
    QVERIFY(w->steps[0].after[0].text.find("sent its block to 1") != std::string::npos);
    auto cost = EstimateCollectivePermute(t, pairs.value(), 65536);
    QVERIFY(cost.ok());
    CheckFormula(w.value(), cost.value());
    CheckLinksEqual(w.value(), t);
    // The other direction is a halo exchange too; a cyclic shift is a rotation; other pairs neither.
    auto wb = WalkThroughCollectivePermute(t, ShiftPairsAlongAxis(mesh, "Y", -1, false).value(), 65536, o);
    QVERIFY(wb.ok());
    QVERIFY2(wb->halo.find("shift by \u22121 along Y") != std::string::npos, wb->halo.c_str());
    QCOMPARE(wb->steps[0].transfers.front().dst_device, wb->steps[0].transfers.front().src_device - 1);
    auto cyc = WalkThroughCollectivePermute(t, ShiftPairsAlongAxis(mesh, "Y", 1, true).value(), 65536, o);
    QVERIFY(cyc.ok());
    QVERIFY(cyc->halo.empty());
    QVERIFY(cyc->summary.find("rotation") != std::string::npos);
    auto other = WalkThroughCollectivePermute(t, {{0, 5}, {5, 0}}, 65536, o);
    QVERIFY(other.ok());
    QVERIFY(other->halo.empty());
    QCOMPARE(other->steps[0].transfers.front().hops, int64_t{2});
  }

  void groupsRunAtOnce() {
    // AllGather over Y on X=2,Y=4 with wraparound: two rings of 4 side by side, both shown.
    const DeviceMesh mesh = Mesh("X=2,Y=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh, TopologyOptions::Wraparound::kAll);
    const auto groups = Groups(mesh, {"Y"});
    QCOMPARE(groups, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    const CollectiveWalkthrough w = Walk(t, CollectiveKind::kAllGather, groups, kShard);
    QCOMPARE(w.num_groups, int64_t{2});
    QCOMPARE(w.steps.size(), size_t{2});
    for (const auto& s : w.steps) {
      QCOMPARE(s.transfers.size(), size_t{16});
      int per_group[2] = {0, 0};
      for (const auto& tr : s.transfers) {
        ++per_group[tr.group];
        // Each group's transfers stay inside it.
        QCOMPARE(tr.src_device / 4, tr.group);
        QCOMPARE(tr.dst_device / 4, tr.group);
      }
      QCOMPARE(per_group[0], 8);
      QCOMPARE(per_group[1], 8);
    }
    // Positions in the group number the shards: device 5 is position 1 of group 1.
    QCOMPARE(w.initial[5].group, int64_t{1});
    QCOMPARE(w.initial[5].position, int64_t{1});
    QCOMPARE(Full(w, 0, 5), (std::set<int64_t>{1}));
    QCOMPARE(Full(w, 2, 5), (std::set<int64_t>{0, 1, 2, 3}));
    QVERIFY(Find(w, 1, 4, 7, 0)->wraparound);
    CheckLinksEqual(w, t);
    CheckFormula(w, Cost(t, CollectiveKind::kAllGather, groups, kShard));
  }

  void multiAxisGatherSplitsTheShard() {
    // C5: TPU v4 4x4x4 (a full cube: every axis a ring), AllGather_XY of bf16[B_X, D_Y] (B=1024,
    // D=4096): each shard is split into two parts that cross X and Y in opposite orders; 46 us in
    // the book (throughput-bound), and our exact schedule moves (N-1)/N of it.
    const DeviceMesh mesh = Mesh("X=4,Y=4,Z=4");
    const Topology t = ForMesh(Preset("tpu-v4"), mesh);
    const auto groups = Groups(mesh, {"X", "Y"});
    const double per_device = 2.0 * 1024 * 4096 / 16;
    WalkthroughOptions o;
    o.mesh = mesh;
    const CollectiveWalkthrough w = Walk(t, CollectiveKind::kAllGather, groups, per_device, o);
    QCOMPARE(w.parts, int64_t{2});
    QCOMPARE(w.part_fractions, (std::vector<double>{0.5, 0.5}));
    QCOMPARE(static_cast<int64_t>(w.steps.size()), w.cost.steps);
    QCOMPARE(w.steps.size(), size_t{4});  // 2 hops along one axis, then 2 along the other
    // Every step both parts move, on different axes.
    for (const auto& s : w.steps) {
      std::set<std::pair<int64_t, int64_t>> part_axis;
      for (const auto& tr : s.transfers) part_axis.insert({tr.part, tr.axis});
      QCOMPARE(part_axis.size(), size_t{2});
    }
    // In step 3 the blocks carry 4 shards gathered along the first axis.
    QCOMPARE(w.steps[2].transfers.front().chunks.size(), size_t{4});
    QVERIFY(w.steps[2].caption.find("blocks of 4 shards") != std::string::npos);
    QVERIFY2(w.steps[0].caption.find("along X") != std::string::npos && w.steps[0].caption.find("along Y") != std::string::npos,
             w.steps[0].caption.c_str());
    for (const auto& h : w.steps.back().after) QCOMPARE(Full(w, 4, h.device).size(), size_t{16});
    QVERIFY2(w.steps[0].after[0].text == "holds 3 of 16 shards' worth: all of 0, part of 1, 3, 4, 12", w.steps[0].after[0].text.c_str());
    CheckLinksEqual(w, t);
    CheckFormula(w, Cost(t, CollectiveKind::kAllGather, groups, per_device));
    QVERIFY(std::fabs(w.formula.time_s - 46 * us * 15 / 16) < 0.10 * 46 * us);
    // All-reduce over XY: reduce-scatter then all-gather on the same split.
    const CollectiveWalkthrough ar = Walk(t, CollectiveKind::kAllReduce, groups, 16 * per_device, o);
    QCOMPARE(ar.steps.size(), size_t{8});
    for (const auto& h : ar.steps[3].after) {
      if (h.group >= 0) QCOMPARE(h.cells[static_cast<size_t>(h.position)].fill, 1.0);
    }
    for (const auto& h : ar.steps.back().after) QCOMPARE(Full(ar, 8, h.device).size(), size_t{16});
    CheckLinksEqual(ar, t);
    CheckFormula(ar, Cost(t, CollectiveKind::kAllReduce, groups, 16 * per_device));
  }

  void formulaAgreesWithTheCostModelEverywhere() {
    struct Case {
      const char* name;
      Topology topo;
      CollectiveKind kind;
      std::vector<std::vector<int64_t>> groups;
      double bytes;
      CollectiveOptions options;
    };
    std::vector<Case> cases;
    CollectiveOptions one_way;
    one_way.bidirectional = false;
    CollectiveOptions additive;
    additive.latency_model = LatencyModel::kAdditive;
    const DeviceMesh m44 = Mesh("X=4,Y=4");
    cases.push_back({"ring AG one way", Chain(4, true), CollectiveKind::kAllGather, {}, kShard, one_way});
    cases.push_back({"ring AR one way", Chain(5, true), CollectiveKind::kAllReduce, {}, 5 * kShard, one_way});
    cases.push_back({"odd ring AG", Chain(5, true), CollectiveKind::kAllGather, {}, kShard, {}});
    cases.push_back({"odd ring RS additive", Chain(5, true), CollectiveKind::kReduceScatter, {}, 5 * kShard, additive});
    cases.push_back({"line A2A", Chain(6, false), CollectiveKind::kAllToAll, {}, 6 * kShard, {}});
    cases.push_back({"ring A2A one way", Chain(6, true), CollectiveKind::kAllToAll, {}, 6 * kShard, one_way});
    // Members listed out of physical order: still the physical line 0-1-2-3.
    cases.push_back({"shuffled line", Chain(4, false), CollectiveKind::kAllGather, {{0, 2, 1, 3}}, kShard, {}});
    // An irregular group: a logical ring whose hops are routed over the line.
    cases.push_back({"routed ring", Chain(6, false), CollectiveKind::kAllGather, {{0, 2, 5, 3}}, kShard, {}});
    cases.push_back({"routed ring AR", Chain(6, false), CollectiveKind::kAllReduce, {{0, 2, 5, 3}}, 4 * kShard, {}});
    // A segment of a ring through its wraparound link, members in any order: a line.
    cases.push_back({"segment across wraparound", Chain(8, true), CollectiveKind::kAllGather, {{0, 1, 6, 7}, {2, 3, 4, 5}}, kShard, {}});
    cases.push_back({"segment across wraparound A2A", Chain(8, true), CollectiveKind::kAllToAll, {{0, 1, 6, 7}}, 4 * kShard, {}});
    // A cycle with one hop between non-neighbours (an L on a 4x4 mesh) is cut into a line there.
    cases.push_back({"L cut into a line", ForMesh(Preset("tpu-v5e"), m44), CollectiveKind::kAllGather, {{2, 6, 0, 1}}, kShard, {}});
    // A 2x2 sub-grid through the wraparound of a 4x4 torus.
    cases.push_back({"sub-grid across wraparound", ForMesh(Preset("tpu-v4"), m44, TopologyOptions::Wraparound::kAll),
                     CollectiveKind::kAllReduce, {{3, 0, 7, 4}}, 4 * kShard, {}});
    // Groups with different step latencies (a line and a 2-hop pair), latency-bound: max, not sum.
    cases.push_back({"unequal groups", ForMesh(Preset("tpu-v5e"), m44), CollectiveKind::kAllGather, {{0, 1, 2, 3}, {4, 6}}, 64, {}});
    cases.push_back({"strided groups", Chain(8, true), CollectiveKind::kAllGather, {{0, 2, 4, 6}, {1, 3, 5, 7}}, kShard, {}});
    cases.push_back({"2x4 torus AR XY", ForMesh(Preset("tpu-v4"), Mesh("X=2,Y=4"), TopologyOptions::Wraparound::kAll),
                     CollectiveKind::kAllReduce, {}, 8 * kShard, {}});
    cases.push_back({"4x4 mesh AG XY", ForMesh(Preset("tpu-v5e"), m44), CollectiveKind::kAllGather, {}, kShard, {}});
    cases.push_back({"4x4 mesh RS X", ForMesh(Preset("tpu-v5e"), m44), CollectiveKind::kReduceScatter, Groups(m44, {"X"}), kShard, {}});
    // C7: TPU v4 4x4x4, AllGather_X of bf16[128]: latency-bound, about 2 us (2 hops).
    const DeviceMesh cube = Mesh("X=4,Y=4,Z=4");
    cases.push_back({"C7 latency-bound", ForMesh(Preset("tpu-v4"), cube), CollectiveKind::kAllGather, Groups(cube, {"X"}), 256.0 / 4, {}});
    // Two devices per chip (TPU v3 cores): the chip's devices share what it holds.
    auto v3 = WithCoresPerChip(Preset("tpu-v3"), 2);
    QVERIFY(v3.ok());
    cases.push_back({"v3 two cores", ForMesh(v3.value(), Mesh("X=4,Y=4")), CollectiveKind::kAllGather, Groups(m44, {"Y"}), kShard, {}});
    cases.push_back({"h100 switch AG", ForMesh(Preset("h100"), Mesh("X=8")), CollectiveKind::kAllGather, {}, kShard, {}});
    cases.push_back({"h100 switch AR", ForMesh(Preset("h100"), Mesh("X=8")), CollectiveKind::kAllReduce, {}, 8 * kShard, {}});
    cases.push_back({"h100 switch A2A", ForMesh(Preset("h100"), Mesh("X=8")), CollectiveKind::kAllToAll, {}, 8 * kShard, {}});
    for (const Case& c : cases) {
      WalkthroughOptions o;
      o.collective = c.options;
      auto w = WalkThroughCollective(c.topo, c.kind, c.groups, c.bytes, o);
      QVERIFY2(w.ok(), qPrintable(QString("%1: %2").arg(c.name).arg(w.ok() ? "" : w.error().message.c_str())));
      const CollectiveCost cost = Cost(c.topo, c.kind, c.groups, c.bytes, c.options);
      QVERIFY2(static_cast<int64_t>(w->steps.size()) == cost.steps,
               qPrintable(QString("%1: %2 steps, cost %3").arg(c.name).arg(w->steps.size()).arg(cost.steps)));
      CheckFormula(w.value(), cost, c.options.latency_model);
      CheckLinksEqual(w.value(), c.topo);
      if (QTest::currentTestFailed()) {
        qWarning("in case %s", c.name);
        return;
      }
      // Every device of every group ends with everything it should have.
      for (const auto& h : w->steps.back().after) {
        if (h.group < 0) continue;
        if (c.kind == CollectiveKind::kReduceScatter) {
          QVERIFY2(h.cells[static_cast<size_t>(h.position)].fill == 1.0, qPrintable(QString("%1: device %2").arg(c.name).arg(h.device)));
        } else {
          for (size_t s = 0; s < h.cells.size(); ++s) {
            QVERIFY2(h.cells[s].fill == 1.0, qPrintable(QString("%1: device %2 slot %3: %4").arg(c.name).arg(h.device).arg(s).arg(h.cells[s].fill)));
          }
        }
      }
      QVERIFY(!w->summary.empty());
      for (const auto& s : w->steps) QVERIFY2(!s.caption.empty(), c.name);
    }
    // C7 in figures: 2 hops at 1 us, latency-bound.
    const CollectiveWalkthrough c7 = Walk(ForMesh(Preset("tpu-v4"), cube), CollectiveKind::kAllGather, Groups(cube, {"X"}), 64);
    QCOMPARE(c7.cost.regime, CostRegime::kLatencyBound);
    QVERIFY(std::fabs(c7.formula.time_s - 2 * us) < 0.10 * 2 * us);
    QVERIFY(c7.formula.text.find("latency-bound") != std::string::npos);
  }

  void formats() {
    QCOMPARE(FormatBytes(8388608), std::string("8.39 MB"));
    QCOMPARE(FormatBytes(512), std::string("512 B"));
    QCOMPARE(FormatBytes(33554432), std::string("33.6 MB"));
    QCOMPARE(FormatRate(4.5e10), std::string("45.0 GB/s"));
    QCOMPARE(FormatSeconds(186.4e-6), std::string("186 \u00B5s"));
    QCOMPARE(FormatSeconds(1e-6), std::string("1.00 \u00B5s"));
    QCOMPARE(FormatSeconds(0.0129), std::string("12.9 ms"));
    // A toy model's utilisation does not read as zero (the Strategies panel's MFU column).
    QCOMPARE(FormatPercent(0.473), std::string("47.3%"));
    QCOMPARE(FormatPercent(0.00012), std::string("0.012%"));
    QCOMPARE(FormatPercent(0), std::string("0.0%"));
  }
};

QTEST_APPLESS_MAIN(TestCollectiveSteps)
#include "test_collective_steps.moc"
