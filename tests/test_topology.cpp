// Hardware presets, custom chips from JSON, and the physical topology: link counts, each
// generation's wraparound rule, hop distances and routes, device placement, bisection bandwidth.
// Figures: ../shared/reference/hardware.md (SB = How To Scale Your Model, GC = Google Cloud).
#include <QtTest/QtTest>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/sharding/mesh.h"
#include "simulator/hardware.h"
#include "simulator/mesh_placement.h"
#include "simulator/topology.h"

using namespace shardscope;
using namespace shardscope::sim;

namespace {

ChipSpec Preset(const char* name) {
  auto c = ChipPreset(name);
  if (!c.ok()) qFatal("preset %s: %s", name, c.error().message.c_str());
  return c.value();
}

Topology Make(const ChipSpec& chip, std::vector<int64_t> shape, TopologyOptions opts = {}) {
  auto t = Topology::Create(chip, std::move(shape), opts);
  if (!t.ok()) qFatal("topology: %s", t.error().message.c_str());
  return std::move(t.value());
}

bool Near(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::fabs(b); }

}  // namespace

class TestTopology : public QObject {
  Q_OBJECT

 private slots:
  // ---- presets ----
  void presetsMatchHardwareReference() {
    QCOMPARE(ChipPresetNames(), (std::vector<std::string>{"tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "h100"}));
    const double GiB = 1024.0 * 1024 * 1024;
    struct Row { const char* name; double flops, hbm, hbm_bw, ici, links; };
    // hardware.md table: peak bf16, HBM, HBM bandwidth, ICI one way per link, links per chip.
    const Row rows[] = {
        {"tpu-v2", 4.6e13, 16 * GiB, 7.0e11, 6.0e10, 4},   // SB 1.2e11 both ways -> 6e10 one way
        {"tpu-v3", 1.23e14, 32 * GiB, 9.0e11, 1.0e11, 4},  // GC 1.23e14 chosen over SB's 1.4e14
        {"tpu-v4", 2.75e14, 32 * GiB, 1.2e12, 4.5e10, 6},
        {"tpu-v5e", 1.97e14, 16e9, 8.19e11, 4.5e10, 4},
        {"tpu-v5p", 4.59e14, 95 * GiB, 2.765e12, 9.0e10, 6},
        {"tpu-v6e", 9.18e14, 32e9, 1.64e12, 9.0e10, 4},
        {"h100", 9.89e14, 80e9, 3.35e12, 4.5e11, 1},
    };
    for (const auto& r : rows) {
      const ChipSpec c = Preset(r.name);
      QCOMPARE(c.name, std::string(r.name));
      QCOMPARE(c.peak_flops, r.flops);
      QCOMPARE(c.hbm_bytes, r.hbm);
      QCOMPARE(c.hbm_bandwidth, r.hbm_bw);
      QCOMPARE(c.ici_link_bandwidth, r.ici);
      QCOMPARE(static_cast<double>(c.links_per_chip), r.links);
      QCOMPARE(c.hop_latency, 1e-6);  // SB part 3: about 1 us per hop
      QVERIFY(ValidateChipSpec(c).ok());
    }
    QCOMPARE(Preset("tpu-v5e").dcn_bandwidth, 3.125e9);
    QCOMPARE(Preset("tpu-v5p").dcn_bandwidth, 6.25e9);
    QCOMPARE(Preset("tpu-v6e").dcn_bandwidth, 1.25e10);
    QCOMPARE(Preset("tpu-v5e").ici_link_bandwidth_bidirectional(), 9e10);
    // Aliases.
    QCOMPARE(Preset("v5e").name, std::string("tpu-v5e"));
    QCOMPARE(Preset("TPU v4").name, std::string("tpu-v4"));
    auto bad = ChipPreset("tpu-v9");
    QVERIFY(!bad.ok());
    QVERIFY(bad.error().message.find("tpu-v5e") != std::string::npos);  // lists the presets
  }

  void twoCoresPerChip() {
    auto v3 = WithCoresPerChip(Preset("tpu-v3"), 2);
    QVERIFY(v3.ok());
    QCOMPARE(v3->device_peak_flops(), 1.23e14 / 2);
    QCOMPARE(v3->device_hbm_bytes(), 16.0 * 1024 * 1024 * 1024);
    QCOMPARE(v3->device_hbm_bandwidth(), 4.5e11);
    auto v4 = WithCoresPerChip(Preset("tpu-v4"), 2);
    QVERIFY(!v4.ok());
    QVERIFY(v4.error().message.find("tpu-v4") != std::string::npos);
    // Two devices per chip share the chip's links: 4 chips, 8 devices, same link count.
    Topology t = Make(v3.value(), {2, 2});
    QCOMPARE(t.num_devices(), int64_t{8});
    QCOMPARE(t.num_chips(), int64_t{4});
    QCOMPARE(t.ChipOfDevice(0), int64_t{0});
    QCOMPARE(t.ChipOfDevice(1), int64_t{0});
    QCOMPARE(t.ChipOfDevice(7), int64_t{3});
    QCOMPARE(t.DevicesOnChip(2), (std::vector<int64_t>{4, 5}));
    QCOMPARE(t.num_links(), int64_t{8});
  }

  // ---- JSON ----
  void customChipFromJson() {
    auto c = ParseChipSpecJson(
        "{\n"
        "  \"name\": \"my-chip\",\n"
        "  \"peak_flops\": 3e14,\n"
        "  \"hbm_bytes\": 64e9,\n"
        "  \"hbm_bandwidth\": 2e12,\n"
        "  \"ici_bandwidth\": 1e11,\n"
        "  \"physical_dims\": 3,\n"
        "  \"pod_shape\": \"8x8x8\",\n"
        "  \"wraparound\": \"full-cubes\",\n"
        "  \"description\": \"a \\\"what if\\\" chip\"\n"
        "}");
    QVERIFY2(c.ok(), c.ok() ? "" : c.error().message.c_str());
    QCOMPARE(c->name, std::string("my-chip"));
    QCOMPARE(c->peak_flops, 3e14);
    QCOMPARE(c->links_per_chip, int64_t{6});  // default: 2 per dimension
    QCOMPARE(c->pod_shape, (std::vector<int64_t>{8, 8, 8}));
    QCOMPARE(c->wraparound, WraparoundRule::kFullCubes);
    QCOMPARE(c->description, std::string("a \"what if\" chip"));
    QCOMPARE(c->hop_latency, 1e-6);

    // "base" starts from a preset and overrides single figures.
    auto b = ParseChipSpecJson("{\"base\": \"tpu-v5e\", \"name\": \"v5e-gc\", \"ici_bandwidth\": 5e10}");
    QVERIFY(b.ok());
    QCOMPARE(b->ici_link_bandwidth, 5e10);
    QCOMPARE(b->peak_flops, 1.97e14);
    QCOMPARE(b->wraparound, WraparoundRule::kAxisOf16);

    // Through a file.
    const QString path = QDir::temp().filePath("simcost_test_chip.json");
    {
      std::ofstream f(path.toStdString());
      f << "{\"base\": \"h100\", \"name\": \"h100-slow\", \"ici_bandwidth\": 2e11}\n";
    }
    auto fromFile = ResolveChip(path.toStdString());
    QVERIFY(fromFile.ok());
    QCOMPARE(fromFile->interconnect, InterconnectKind::kSwitch);
    QCOMPARE(fromFile->ici_link_bandwidth, 2e11);
    std::remove(path.toStdString().c_str());
    {
      std::ofstream f(path.toStdString());
      f << "{\"base\": \"h100\",\n  \"ici_bandwidth\": \"fast\"}\n";
    }
    auto badFile = LoadChipSpecFile(path.toStdString());
    QVERIFY(!badFile.ok());
    QVERIFY2(badFile.error().message.rfind(path.toStdString() + ":2:20: ", 0) == 0, badFile.error().message.c_str());
    std::remove(path.toStdString().c_str());
    auto missing = ResolveChip("/nonexistent/dir/chip.json");
    QVERIFY(!missing.ok());
    QVERIFY(missing.error().message.find("/nonexistent/dir/chip.json") != std::string::npos);
  }

  void jsonErrorsCarryLineAndColumn_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("expected");
    QTest::newRow("missing colon") << "{\n  \"peak_flops\" 1e14\n}" << "2:16: expected ':'";
    QTest::newRow("unknown key") << "{\"base\": \"tpu-v4\",\n \"flops\": 1}" << "2:2: unknown key \"flops\"";
    QTest::newRow("nested") << "{\"base\": \"tpu-v4\", \"pod_shape\": [4, 4, 4]}" << "1:33: nested objects and arrays";
    QTest::newRow("duplicate") << "{\"base\": \"tpu-v4\",\n\"name\": \"a\",\n\"name\": \"b\"}" << "3:1: duplicate key \"name\"";
    QTest::newRow("bad number") << "{\"base\": \"tpu-v4\", \"hop_latency\": 1e-}" << "1:35: malformed number";
    QTest::newRow("wrong type") << "{\"base\": \"tpu-v4\",\n  \"peak_flops\": \"fast\"}" << "2:17: \"peak_flops\" must be a number";
    QTest::newRow("bad base") << "{\"base\": \"tpu-v9\"}" << "1:10: unknown chip 'tpu-v9'";
    QTest::newRow("trailing") << "{\"base\": \"tpu-v4\"} x" << "1:20: unexpected text";
    QTest::newRow("unterminated") << "{\"name\": \"abc" << "1:10: unterminated string";
    QTest::newRow("missing required") << "{\"name\": \"x\", \"peak_flops\": 1e14}" << "missing required key \"hbm_bytes\"";
    QTest::newRow("negative") << "{\"base\": \"tpu-v4\", \"hbm_bandwidth\": -1}" << "hbm_bandwidth must be a positive number";
    QTest::newRow("bad wraparound") << "{\"base\": \"tpu-v4\", \"wraparound\": \"sometimes\"}" << "1:34: unknown wraparound rule";
  }
  void jsonErrorsCarryLineAndColumn() {
    QFETCH(QString, text);
    QFETCH(QString, expected);
    auto c = ParseChipSpecJson(text.toStdString());
    QVERIFY(!c.ok());
    QVERIFY2(c.error().message.find(expected.toStdString()) != std::string::npos, c.error().message.c_str());
  }

  // ---- wraparound rules ----
  void wraparoundRulesPerGeneration() {
    using V = std::vector<bool>;
    // v2/v3: only the whole pod is a torus.
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v2"), {16, 32}), (V{true, true}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v2"), {16, 16}), (V{false, false}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v3"), {32, 32}), (V{true, true}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v3"), {4, 8}), (V{false, false}));
    // v4/v5p: whole 4x4x4 cubes (every axis a multiple of 4) are tori.
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v4"), {4, 4, 4}), (V{true, true, true}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v4"), {4, 4, 8}), (V{true, true, true}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v4"), {2, 2, 4}), (V{false, false, false}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v4"), {4, 4, 2}), (V{false, false, false}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v5p"), {16, 16, 24}), (V{true, true, true}));
    // v5e/v6e: only an axis of size 16 (hardware.md; SB's C1 note: axis 4 has no wraparound).
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v5e"), {16, 16}), (V{true, true}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v5e"), {8, 16}), (V{false, true}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v5e"), {8, 4}), (V{false, false}));
    QCOMPARE(Topology::GenerationWraparound(Preset("tpu-v6e"), {16, 4}), (V{true, false}));
    // Switch: no rings.
    Topology h = Make(Preset("h100"), {8});
    QVERIFY(h.is_switch());
    QCOMPARE(h.wraparound(), (V{false}));

    // Overrides.
    TopologyOptions all;
    all.wraparound = TopologyOptions::Wraparound::kAll;
    QCOMPARE(Make(Preset("tpu-v5e"), {8, 4}, all).wraparound(), (V{true, true}));
    TopologyOptions none;
    none.wraparound = TopologyOptions::Wraparound::kNone;
    QCOMPARE(Make(Preset("tpu-v4"), {4, 4, 4}, none).wraparound(), (V{false, false, false}));
    TopologyOptions per_axis;
    per_axis.wraparound_per_axis = V{false, true};
    QCOMPARE(Make(Preset("tpu-v5e"), {8, 4}, per_axis).wraparound(), (V{false, true}));
    // An axis of 2 never gets a separate wraparound link.
    QCOMPARE(Make(Preset("tpu-v5e"), {2, 4}, all).wraparound(), (V{false, true}));
  }

  // ---- links ----
  void linkCounts() {
    // v5e 8x4 mesh (no wraparound): 7*4 + 8*3 = 52 cables = 104 one-way links.
    Topology m = Make(Preset("tpu-v5e"), {8, 4});
    QCOMPARE(m.num_links(), int64_t{104});
    // v5e 16x16 pod: a 2-D torus, 2 * 256 cables, every chip has its 4 links.
    Topology pod = Make(Preset("tpu-v5e"), {16, 16});
    QCOMPARE(pod.num_links(), int64_t{1024});
    for (int64_t c = 0; c < pod.num_chips(); ++c) QCOMPARE(static_cast<int64_t>(pod.OutLinks(c).size()), int64_t{4});
    // v4 4x4x4 torus: 3 * 64 cables, 6 links per chip (links_per_chip).
    Topology cube = Make(Preset("tpu-v4"), {4, 4, 4});
    QCOMPARE(cube.num_links(), int64_t{384});
    for (int64_t c = 0; c < cube.num_chips(); ++c) {
      QCOMPARE(static_cast<int64_t>(cube.OutLinks(c).size()), Preset("tpu-v4").links_per_chip);
    }
    // v4 2x2x1: no wraparound, 4 cables.
    QCOMPARE(Make(Preset("tpu-v4"), {2, 2}).num_links(), int64_t{8});
    // h100 node: one up- and one down-link per GPU.
    Topology h = Make(Preset("h100"), {8});
    QCOMPARE(h.num_links(), int64_t{16});
    QCOMPARE(h.num_nodes(), int64_t{9});

    // Links are objects: endpoints, axis, direction, bandwidth, wraparound flag.
    int64_t wraps = 0;
    for (const auto& l : pod.links()) {
      QCOMPARE(pod.link(l.id).id, l.id);
      QCOMPARE(l.bandwidth, 4.5e10);
      QCOMPARE(l.latency, 1e-6);
      QVERIFY(l.src != l.dst);
      QCOMPARE(pod.HopDistance(l.src, l.dst), int64_t{1});
      if (l.wraparound) ++wraps;
      const auto a = pod.ChipCoords(l.src), b = pod.ChipCoords(l.dst);
      QVERIFY(((a[static_cast<size_t>(l.axis)] + l.direction + 16) % 16) == b[static_cast<size_t>(l.axis)]);
    }
    QCOMPARE(wraps, int64_t{2 * 2 * 16});  // 16 rings per axis, one cable (2 links) each
    const int64_t l = cube.NeighborLink(cube.ChipAt({3, 0, 0}), 0, +1);
    QVERIFY(l >= 0);
    QVERIFY(cube.link(l).wraparound);
    QCOMPARE(cube.link(l).dst, cube.ChipAt({0, 0, 0}));
    QCOMPARE(m.NeighborLink(m.ChipAt({7, 0}), 0, +1), int64_t{-1});  // mesh edge
  }

  void hopDistancesAndRoutes() {
    Topology cube = Make(Preset("tpu-v4"), {4, 4, 4});
    const int64_t origin = cube.ChipAt({0, 0, 0});
    QCOMPARE(cube.HopDistance(origin, cube.ChipAt({3, 3, 3})), int64_t{3});  // one wraparound hop per axis
    QCOMPARE(cube.HopDistance(origin, cube.ChipAt({2, 2, 2})), int64_t{6});
    QCOMPARE(cube.PathLatency(cube.Route(origin, cube.ChipAt({2, 2, 2}))), 6e-6);
    Topology m = Make(Preset("tpu-v5e"), {8, 4});
    QCOMPARE(m.HopDistance(m.ChipAt({0, 0}), m.ChipAt({7, 3})), int64_t{10});
    // Routes: dimension order, the hops chain up and have the hop distance's length.
    for (int64_t a = 0; a < cube.num_chips(); a += 7) {
      for (int64_t b = 0; b < cube.num_chips(); b += 5) {
        const auto path = cube.Route(a, b);
        QCOMPARE(static_cast<int64_t>(path.size()), cube.HopDistance(a, b));
        int64_t at = a;
        int64_t last_axis = -1;
        for (int64_t l : path) {
          QCOMPARE(cube.link(l).src, at);
          QVERIFY(cube.link(l).axis >= last_axis);
          last_axis = cube.link(l).axis;
          at = cube.link(l).dst;
        }
        QCOMPARE(at, b);
      }
    }
    // A tie round a ring of 4: Route takes the positive way, SplitRoutes splits half/half.
    const int64_t opposite = cube.ChipAt({2, 0, 0});
    const auto r = cube.Route(origin, opposite);
    QCOMPARE(r.size(), size_t{2});
    QCOMPARE(cube.link(r[0]).direction, +1);
    const auto split = cube.SplitRoutes(origin, cube.ChipAt({2, 2, 0}));
    QCOMPARE(split.size(), size_t{4});
    double total = 0;
    for (const auto& [f, p] : split) {
      QCOMPARE(f, 0.25);
      QCOMPARE(p.size(), size_t{4});
      total += f;
    }
    QCOMPARE(total, 1.0);
    // One-directional routes go the long way round when needed.
    QCOMPARE(cube.Route(origin, cube.ChipAt({3, 0, 0}), RoutePolicy::kPositiveOnly).size(), size_t{3});
    // Switch: up-link then down-link, one hop.
    Topology h = Make(Preset("h100"), {8});
    QCOMPARE(h.Route(2, 5), (std::vector<int64_t>{4, 11}));
    QCOMPARE(h.HopDistance(2, 5), int64_t{1});
    QCOMPARE(h.PathLatency(h.Route(2, 5)), 1e-6);
  }

  // ---- placement of the logical mesh ----
  void meshPlacement() {
    auto mesh = DeviceMesh::Parse("X=8,Y=4");
    QVERIFY(mesh.ok());
    auto t = Topology::ForMesh(Preset("tpu-v5e"), mesh.value());
    QVERIFY(t.ok());
    QCOMPARE(t->shape(), (std::vector<int64_t>{8, 4}));
    QCOMPARE(t->ChipOfDevice(mesh->DeviceAt({2, 3})), t->ChipAt({2, 3}));  // row-major

    // More mesh axes than chip dimensions: leading axes merge.
    auto mesh4 = DeviceMesh::Parse("a=2,b=2,c=4,d=4");
    QVERIFY(mesh4.ok());
    auto t4 = Topology::ForMesh(Preset("tpu-v5e"), mesh4.value());
    QVERIFY(t4.ok());
    QCOMPARE(t4->shape(), (std::vector<int64_t>{16, 4}));
    // Fewer: trailing 1s; v4 8x4x1 is not made of whole cubes -> no wraparound.
    auto t3 = Topology::ForMesh(Preset("tpu-v4"), mesh.value());
    QVERIFY(t3.ok());
    QCOMPARE(t3->shape(), (std::vector<int64_t>{8, 4, 1}));
    QCOMPARE(t3->wraparound(), (std::vector<bool>{false, false, false}));
    // Two cores per chip: the last axis is halved.
    auto v3 = WithCoresPerChip(Preset("tpu-v3"), 2);
    auto tc = Topology::ForMesh(v3.value(), mesh.value());
    QVERIFY(tc.ok());
    QCOMPARE(tc->shape(), (std::vector<int64_t>{8, 2}));
    QCOMPARE(tc->ChipOfDevice(mesh->DeviceAt({1, 3})), tc->ChipAt({1, 1}));
    // The cores of a chip go on the mesh axis that leaves more axes as closed rings: X=64,Y=32 on
    // the 32x32 v3 pod (GSPMD Table 7's (64,32)) puts the two cores on X, so X is 32 chips along
    // physical axis 0 and Y 32 chips along axis 1, both wrapped (cores on Y laid Y on 16 chips of
    // axis 1, an open line, and X as a snake over both axes).
    auto wide = DeviceMesh::Parse("X=64,Y=32");
    QVERIFY(wide.ok());
    auto tw = Topology::ForMesh(v3.value(), wide.value());
    QVERIFY2(tw.ok(), tw.ok() ? "" : tw.error().message.c_str());
    QCOMPARE(tw->shape(), (std::vector<int64_t>{32, 32}));
    QCOMPARE(tw->wraparound(), (std::vector<bool>{true, true}));
    QCOMPARE(tw->ChipOfDevice(wide->DeviceAt({0, 5})), tw->ChipOfDevice(wide->DeviceAt({1, 5})));  // one chip
    QCOMPARE(tw->ChipOfDevice(wide->DeviceAt({2, 5})), tw->ChipAt({1, 5}));
    QCOMPARE(tw->ChipOfDevice(wide->DeviceAt({0, 31})), tw->ChipAt({0, 31}));
    QCOMPARE(tw->HopDistance(tw->ChipOfDevice(wide->DeviceAt({0, 0})), tw->ChipOfDevice(wide->DeviceAt({0, 31}))), int64_t{1});
    QVERIFY2(tw->DescribePlacement().find("Y=32 along physical axis 1") != std::string::npos, tw->DescribePlacement().c_str());
    // One device on a two-core chip (GSPMD Table 8's (1,1)): one TensorCore, with one core's
    // FLOP/s, HBM and bandwidth; the preset's name is kept.
    auto one = DeviceMesh::Parse("X=1,Y=1");
    QVERIFY(one.ok());
    auto t1 = Topology::ForMesh(v3.value(), one.value());
    QVERIFY2(t1.ok(), t1.ok() ? "" : t1.error().message.c_str());
    QCOMPARE(t1->num_chips(), int64_t{1});
    QCOMPARE(t1->chip().name, std::string("tpu-v3"));
    QCOMPARE(t1->chip().cores_per_chip, int64_t{1});
    QCOMPARE(t1->chip().device_peak_flops(), v3->device_peak_flops());
    QCOMPARE(t1->chip().device_hbm_bytes(), v3->device_hbm_bytes());
    QCOMPARE(t1->chip().device_hbm_bandwidth(), v3->device_hbm_bandwidth());
    QVERIFY(t1->chip().description.find("1 of its 2 cores in use") != std::string::npos);
    QVERIFY(!Topology::ForMesh(v3.value(), one.value(), {2}).ok());  // two chips for one device
    // Explicit slice shape.
    auto te = Topology::ForMesh(Preset("tpu-v4"), mesh.value(), {4, 4, 2});
    QVERIFY(te.ok());
    QCOMPARE(te->num_chips(), int64_t{32});

    // Errors a person can act on.
    auto wrong = Topology::ForMesh(Preset("tpu-v4"), mesh.value(), {2, 2, 2});
    QVERIFY(!wrong.ok());
    QVERIFY(wrong.error().message.find("8 chips") != std::string::npos);
    auto big = DeviceMesh::Parse("X=16");
    auto h = Topology::ForMesh(Preset("h100"), big.value());
    QVERIFY(!h.ok());
    QVERIFY(h.error().message.find("node has 8") != std::string::npos);
    auto huge = Topology::Create(Preset("tpu-v5e"), {32, 16});
    QVERIFY(!huge.ok());
    QVERIFY(huge.error().message.find("pod has 256") != std::string::npos);
    auto v5e3d = Topology::Create(Preset("tpu-v5e"), {4, 4, 4});
    QVERIFY(!v5e3d.ok());
    QVERIFY(v5e3d.error().message.find("2-D") != std::string::npos);
  }

  // Issue 12 / WUS paper section 6.1: a 1-D mesh of 1024 TPU v3 chips runs on the 32x32 pod
  // (a torus), laid out as a ring that snakes over it, so the last device neighbours the first.
  void oneDimensionalMeshSnakesOverTheTorus() {
    auto mesh = DeviceMesh::Parse("X=1024");
    QVERIFY(mesh.ok());
    auto t = Topology::ForMesh(Preset("tpu-v3"), mesh.value());
    QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());
    QCOMPARE(t->shape(), (std::vector<int64_t>{32, 32}));
    QCOMPARE(t->wraparound(), (std::vector<bool>{true, true}));
    for (int64_t d = 0; d < 1024; ++d) {
      const int64_t next = (d + 1) % 1024;
      QCOMPARE(t->HopDistance(t->ChipOfDevice(d), t->ChipOfDevice(next)), int64_t{1});
    }
    QCOMPARE(t->ChipOfDevice(31), t->ChipAt({0, 31}));
    QCOMPARE(t->ChipOfDevice(32), t->ChipAt({1, 31}));  // the second row runs backwards
    QCOMPARE(t->ChipOfDevice(1023), t->ChipAt({31, 0}));
    const std::string& how = t->DescribePlacement();
    QVERIFY2(how.find("X=1024 over physical axes 0,1 (snake, a closed ring)") != std::string::npos, how.c_str());

    // Row-major (the override): device 32 starts the next row, two hops from device 31.
    TopologyOptions row;
    row.placement = MeshPlacement::kRowMajor;
    auto r = Topology::ForMesh(Preset("tpu-v3"), mesh.value(), {}, row);
    QVERIFY(r.ok());
    QCOMPARE(r->ChipOfDevice(32), r->ChipAt({1, 0}));
    QCOMPARE(r->HopDistance(r->ChipOfDevice(31), r->ChipOfDevice(32)), int64_t{2});
    QVERIFY(r->DescribePlacement().find("row-major, an open line") != std::string::npos);

    // Two cores per chip: 2048 devices on the same 1024 chips, both cores of a chip adjacent.
    auto two = WithCoresPerChip(Preset("tpu-v3"), 2);
    auto mesh2 = DeviceMesh::Parse("X=2048");
    auto t2 = Topology::ForMesh(two.value(), mesh2.value());
    QVERIFY(t2.ok());
    QCOMPARE(t2->shape(), (std::vector<int64_t>{32, 32}));
    QCOMPARE(t2->ChipOfDevice(0), t2->ChipOfDevice(1));
    QCOMPARE(t2->HopDistance(t2->ChipOfDevice(2047), t2->ChipOfDevice(0)), int64_t{1});

    // A 2-D mesh that is not the slice's shape: X takes the outer factors, Y the inner ones.
    auto mesh2d = DeviceMesh::Parse("X=64,Y=16");
    auto t3 = Topology::ForMesh(Preset("tpu-v3"), mesh2d.value());
    QVERIFY(t3.ok());
    QCOMPARE(t3->shape(), (std::vector<int64_t>{32, 32}));
    for (int64_t y = 0; y < 16; ++y) {  // each Y group: 16 neighbouring chips of one row
      QCOMPARE(t3->HopDistance(t3->ChipOfDevice(mesh2d->DeviceAt({5, y})), t3->ChipOfDevice(mesh2d->DeviceAt({5, (y + 1) % 16}))),
               int64_t{y == 15 ? 15 : 1});
    }
    // Slices a generation gives a chip count.
    QCOMPARE(Topology::SliceShapeFor(Preset("tpu-v3"), 128).value(), (std::vector<int64_t>{8, 16}));
    QCOMPARE(Topology::SliceShapeFor(Preset("tpu-v4"), 64).value(), (std::vector<int64_t>{4, 4, 4}));
    QVERIFY(!Topology::SliceShapeFor(Preset("tpu-v3"), 2048).ok());
    QVERIFY(!MeshPlacementFromName("spiral").ok());
  }

  // A mesh whose own order strides an axis over the chips is laid in the order that puts every axis
  // on a box of chips (simulator/mesh_placement.h, the strategy search's rule): GSPMD Table 4's
  // (L,X,Y) = (2,16,8) on 256 TPU v3 cores (8x16 chips). In its own order Y took the two cores and
  // 4 chips of axis 1 and X the rest of axis 1 at a stride of 4; laid as "L,X,Y", L is the two
  // cores of each chip, X the 16 chips of axis 1 and Y the 8 of axis 0, each a line of neighbours.
  void stridedMeshOrderPlacedOnBoxes() {
    auto two = WithCoresPerChip(Preset("tpu-v3"), 2);
    QVERIFY(two.ok());
    auto mesh = DeviceMesh::Parse("L=2,X=16,Y=8");
    QVERIFY(mesh.ok());
    auto own = PlaceMeshInOrder(two.value(), {8, 16}, mesh.value(), {}, /*require_boxes=*/false);
    QVERIFY(own.ok());
    QVERIFY(!own->boxes && own->canonical);
    QVERIFY(!EveryAxisOnABox({8, 16}, mesh.value(), own->device_to_chip));
    auto t = Topology::ForMesh(two.value(), mesh.value(), {8, 16});
    QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());
    QVERIFY(EveryAxisOnABox({8, 16}, mesh.value(), t->device_to_chip()));
    const std::string& how = t->DescribePlacement();
    QVERIFY2(how.find("in order L,X,Y (minor first), every axis on a box of chips") == 0, how.c_str());
    QVERIFY2(how.find("L=2 on 2 cores; X=16 on 16 (all) of axis 1; Y=8 on 8 (all) of axis 0") != std::string::npos, how.c_str());
    const DeviceMesh& m = mesh.value();
    QCOMPARE(t->ChipOfDevice(m.DeviceAt({0, 3, 5})), t->ChipOfDevice(m.DeviceAt({1, 3, 5})));  // L: the two cores
    for (int64_t x = 0; x + 1 < 16; ++x)
      QCOMPARE(t->HopDistance(t->ChipOfDevice(m.DeviceAt({0, x, 2})), t->ChipOfDevice(m.DeviceAt({0, x + 1, 2}))), int64_t{1});
    for (int64_t y = 0; y + 1 < 8; ++y)
      QCOMPARE(t->HopDistance(t->ChipOfDevice(m.DeviceAt({1, 7, y})), t->ChipOfDevice(m.DeviceAt({1, 7, y + 1}))), int64_t{1});
    // A mesh whose own order is already on boxes keeps ForMesh's own layout and description.
    auto wide = Topology::ForMesh(two.value(), DeviceMesh::Parse("X=8,Y=16").value(), {8, 8});
    QVERIFY(wide.ok());
    QVERIFY2(wide->DescribePlacement().find("in order") == std::string::npos, wide->DescribePlacement().c_str());
    // An explicit device placement is kept as given.
    TopologyOptions given;
    given.device_to_chip = own->device_to_chip;
    auto kept = Topology::ForMesh(two.value(), mesh.value(), {8, 16}, given);
    QVERIFY(kept.ok());
    QCOMPARE(kept->device_to_chip(), own->device_to_chip);
  }

  // A mesh laid in a given order (TopologyOptions::mesh_order, the strategy search's placement of a
  // candidate): PlaceMeshInOrder's device placement, said as such; wins over the mesh's own layout.
  void meshOrderLaysTheMeshAsGiven() {
    auto two = WithCoresPerChip(Preset("tpu-v3"), 2);
    QVERIFY(two.ok());
    const DeviceMesh mesh = DeviceMesh::Parse("L=4,X=1,Y=32").value();
    for (const std::string order : {"Y,X,L", "L,Y,X", "Y,L"}) {
      auto placed = PlaceMeshInOrder(two.value(), {8, 8}, mesh, order, /*require_boxes=*/false);
      QVERIFY2(placed.ok(), order.c_str());
      TopologyOptions o;
      o.mesh_order = order;
      auto t = Topology::ForMesh(two.value(), mesh, {8, 8}, o);
      QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());
      QCOMPARE(t->device_to_chip(), placed->device_to_chip);
      QVERIFY2(t->DescribePlacement().find("in order " + placed->order + " (minor first, as given): ") == 0,
               t->DescribePlacement().c_str());
    }
    // "Y,X,L" is not the mesh's own layout: Y takes the cores and half of physical axis 0, so the
    // two layouts differ.
    TopologyOptions yxl;
    yxl.mesh_order = "Y,X,L";
    QVERIFY(Topology::ForMesh(two.value(), mesh, {8, 8}, yxl)->device_to_chip() !=
            Topology::ForMesh(two.value(), mesh, {8, 8})->device_to_chip());
    // An axis of size 1 may be left out (it takes no chips); another may not.
    TopologyOptions short_order;
    short_order.mesh_order = "Y,L";
    QVERIFY(Topology::ForMesh(two.value(), mesh, {8, 8}, short_order).ok());
    auto expect_error = [&](const TopologyOptions& o, const ChipSpec& chip, const char* part) {
      auto t = Topology::ForMesh(chip, mesh, chip.interconnect == InterconnectKind::kGrid ? std::vector<int64_t>{8, 8}
                                                                                          : std::vector<int64_t>{},
                                 o);
      QVERIFY(!t.ok());
      QVERIFY2(t.error().message.find(part) != std::string::npos, t.error().message.c_str());
    };
    TopologyOptions unknown, missing, both;
    unknown.mesh_order = "Y,Z";
    expect_error(unknown, two.value(), "names an axis the mesh L=4,X=1,Y=32 does not have");
    missing.mesh_order = "Y,X";
    expect_error(missing, two.value(), "must name every axis");
    both.mesh_order = "Y,X,L";
    both.device_to_chip = Topology::ForMesh(two.value(), mesh, {8, 8})->device_to_chip();
    expect_error(both, two.value(), "contradict");
    TopologyOptions on_switch;
    on_switch.mesh_order = "Y,X,L";
    expect_error(on_switch, Preset("h100"), "has no torus");
  }

  void reorderedPlacement() {
    Topology t = Make(Preset("tpu-v5e"), {4});
    QVERIFY(t.SetDeviceToChip({3, 2, 1, 0}).ok());
    QCOMPARE(t.ChipOfDevice(0), int64_t{3});
    QCOMPARE(t.DevicesOnChip(3), (std::vector<int64_t>{0}));
    Status s = t.SetDeviceToChip({0, 0, 1, 2});
    QVERIFY(!s.ok());
    QVERIFY(s.error().message.find("chip 0 holds 2 devices") != std::string::npos);
    QVERIFY(!t.SetDeviceToChip({0, 1, 2}).ok());
    QCOMPARE(t.ChipOfDevice(0), int64_t{3});  // unchanged after a failed reorder
    TopologyOptions o;
    o.device_to_chip = {1, 0, 3, 2};
    Topology r = Make(Preset("tpu-v5e"), {4}, o);
    QCOMPARE(r.ChipOfDevice(0), int64_t{1});
  }

  // ---- bisection (GC figures in hardware.md) ----
  void bisectionBandwidth() {
    // Convention that reproduces all three GC figures: ONE-WAY bandwidth across the minimum cut,
    // counting the wraparound links (a torus ring is cut twice).
    // v3 pod 32x32 torus: 32 rings x 2 cuts = 64 links x 1e11 = 6.4 TB/s (GC: 6.4 TB/s) exactly.
    const auto v3 = Make(Preset("tpu-v3"), {32, 32}).Bisection();
    QCOMPARE(v3.links_cut, int64_t{64});
    QCOMPARE(v3.one_way, 6.4e12);
    QCOMPARE(v3.both_ways, 12.8e12);  // both ways would be twice GC's figure
    // v4 pod 16x16x16: 256 rings x 2 = 512 links x 4.5e10 = 23.0 TB/s (GC: about 24 TB/s, 4% off;
    // GC's per-chip 2400 Gbit/s over 6 links = 5e10 per link would give 25.6 TB/s).
    const auto v4 = Make(Preset("tpu-v4"), {16, 16, 16}).Bisection();
    QCOMPARE(v4.links_cut, int64_t{512});
    QCOMPARE(v4.one_way, 512 * 4.5e10);
    QVERIFY(Near(v4.one_way, 24e12, 0.05));
    QVERIFY(!Near(v4.both_ways, 24e12, 0.5));
    // v5e pod 16x16 (both axes of 16 wrap): 16 rings x 2 = 32 links. With SB's 4.5e10 per link
    // that is 1.44 TB/s, 10% under GC's 1.6 TB/s; GC's own 1600 Gbit/s per chip over 4 links is
    // 5e10 per link, which gives GC's 1.6 TB/s exactly. So one-way again, with GC's link rate.
    const auto v5e = Make(Preset("tpu-v5e"), {16, 16}).Bisection();
    QCOMPARE(v5e.links_cut, int64_t{32});
    QCOMPARE(v5e.one_way, 32 * 4.5e10);
    auto gc = ParseChipSpecJson("{\"base\": \"tpu-v5e\", \"ici_bandwidth\": 5e10}");
    QVERIFY(gc.ok());
    QCOMPARE(Make(gc.value(), {16, 16}).Bisection().one_way, 1.6e12);
    // Minimum cut: across the longest axis (v5p 16x16x24 -> cut across the 24).
    const auto v5p = Make(Preset("tpu-v5p"), {16, 16, 24}).Bisection();
    QCOMPARE(v5p.cut_axis, int64_t{2});
    QCOMPARE(v5p.links_cut, int64_t{512});
    // A mesh (no wraparound) is cut once: v5e 8x4 -> cut across the 8: 4 links.
    QCOMPARE(Make(Preset("tpu-v5e"), {8, 4}).Bisection().links_cut, int64_t{4});
    // Switch: half the GPUs each send at full rate.
    QCOMPARE(Make(Preset("h100"), {8}).Bisection().one_way, 4 * 4.5e11);
  }

  void describe() {
    const std::string d = Make(Preset("tpu-v4"), {4, 4, 4}).Describe();
    QVERIFY2(d.find("4x4x4 torus") != std::string::npos, d.c_str());
    QVERIFY(d.find("384 one-way links") != std::string::npos);
    QVERIFY(Make(Preset("tpu-v5e"), {8, 4}).Describe().find("wraparound on axes: none") != std::string::npos);
    QVERIFY(Preset("tpu-v5e").ToString().find("axis-of-16") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TestTopology)
#include "test_topology.moc"
