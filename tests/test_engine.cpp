// The execution engine on hand-computable programs: one dot (the roofline), one all-gather (equals
// EstimateCollective; validation C1), an independent dot hiding an async all-gather, a dependent
// chain adding up, the collectives-early list schedule, while-loop trip counts, fusion, contention
// between concurrent collectives, device classes (split only when timelines differ), errors, a zoo
// training step end to end, and the `simulate` CLI subcommand.
#include <QtCore/QDir>
#include <QtCore/QFile>
#include <QtCore/QJsonDocument>
#include <QtCore/QJsonObject>
#include <QtCore/QProcess>
#include <QtCore/QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <memory>
#include <set>
#include <string>

#include "core/ir/hlo_text.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "core/zoo/model_zoo.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "simulator/collectives/cost.h"
#include "simulator/compute_cost.h"
#include "simulator/engine.h"
#include "simulator/hardware.h"
#include "simulator/run_store.h"
#include "simulator/schedule.h"
#include "simulator/topology.h"
#include "tests/cli_test_support.h"
#include "tests/zoo_partitioning.h"

using namespace shardscope;
using shardscope::testing::CliResult;
using shardscope::testing::RunCli;
using namespace shardscope::sim;

namespace {

constexpr double us = 1e-6;

std::unique_ptr<Module> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test.hlo");
  if (!m.ok()) qFatal("parse: %s", m.error().message.c_str());
  return std::move(m).value();
}

// The engine's mechanics are checked on the ideal roofline (expected times are written as FLOPs /
// peak); the chips' calibration is checked against the papers in test_reproduce.
Topology TopologyFor(const char* chip_name, const char* mesh_text, TopologyOptions to = {}) {
  auto chip = ChipPreset(chip_name);
  if (!chip.ok()) qFatal("chip: %s", chip.error().message.c_str());
  auto mesh = DeviceMesh::Parse(mesh_text);
  if (!mesh.ok()) qFatal("mesh: %s", mesh.error().message.c_str());
  auto t = Topology::ForMesh(IdealRoofline(chip.value()), mesh.value(), {}, to);
  if (!t.ok()) qFatal("topology: %s", t.error().message.c_str());
  return std::move(t).value();
}

Simulation Run(const Module& m, const Topology& topo, const SimulationOptions& o = {}) {
  auto s = Simulate(m, topo, o);
  if (!s.ok()) qFatal("simulate: %s", s.error().message.c_str());
  return std::move(s).value();
}

bool Near(double a, double b, double rel = 1e-12) { return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)); }

const TimelineEvent* Event(const Simulation& s, const std::string& name, int64_t device = 0) {
  const DeviceClass* c = s.run.ClassOf(device);
  for (const TimelineEvent& e : c->events)
    if (e.instruction == name) return &e;
  return nullptr;
}

std::vector<std::vector<int64_t>> Iota(int64_t groups, int64_t size, bool strided = false) {
  std::vector<std::vector<int64_t>> g(static_cast<size_t>(groups));
  for (int64_t i = 0; i < groups; ++i)
    for (int64_t j = 0; j < size; ++j) g[static_cast<size_t>(i)].push_back(strided ? j * groups + i : i * size + j);
  return g;
}

// C1 of validation.md: TPU v5e, mesh {X:8, Y:4}, AllGather over Y of bf16[E_Y, F], E=2048, F=8192.
const char* kC1 = R"(HloModule c1, num_partitions=32
ENTRY %main (p: bf16[512,8192]) -> bf16[2048,8192] {
  %p = bf16[512,8192] parameter(0)
  ROOT %ag = bf16[2048,8192] all-gather(%p), dimensions={0}, replica_groups=[8,4]<=[32], use_global_device_ids=true, channel_id=1
}
)";

const char* kDot = R"(HloModule dot1, num_partitions=1
ENTRY %main (a: bf16[4096,4096], b: bf16[4096,4096]) -> bf16[4096,4096] {
  %a = bf16[4096,4096] parameter(0)
  %b = bf16[4096,4096] parameter(1)
  ROOT %d = bf16[4096,4096] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";

std::string WriteTemp(const QTemporaryDir& dir, const char* name, const std::string& text) {
  const QString path = dir.filePath(name);
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write %s", qPrintable(path));
  f.write(text.data(), static_cast<qint64>(text.size()));
  return path.toStdString();
}

QString LastLine(const QString& out) {
  QStringList lines = out.split('\n', Qt::SkipEmptyParts);
  return lines.isEmpty() ? QString() : lines.last();
}

}  // namespace

class TestEngine : public QObject {
  Q_OBJECT

 private slots:
  // One dot on one v5e chip: compute-bound, time = 2 * 4096^3 FLOPs / 197 TFLOP/s = 697.66 us (the
  // 3 x 32 MiB of HBM traffic would take 122.9 us), MFU exactly 1.
  void OneDotIsTheRoofline() {
    auto m = Parse(kDot);
    Topology topo = TopologyFor("tpu-v5e", "X=1");
    Simulation s = Run(*m, topo);
    const double flops = 2.0 * 4096.0 * 4096.0 * 4096.0;
    QCOMPARE(topo.chip().device_peak_flops(), 1.97e14);
    QVERIFY(Near(s.run.summary.step_time_s, flops / 1.97e14));
    QVERIFY(std::fabs(s.run.summary.step_time_s - 697.66 * us) < 0.01 * us);
    QVERIFY(Near(s.run.summary.step_time_s, ComputeCost(flops, 3.0 * 4096 * 4096 * 2, topo.chip())));
    QVERIFY(Near(s.run.summary.mfu, 1.0));
    QCOMPARE(s.run.summary.total_flops, flops);
    QCOMPARE(s.run.summary.compute_time_s, s.run.summary.step_time_s);
    QCOMPARE(s.run.summary.communication_time_s, 0.0);
    QCOMPARE(s.run.summary.idle_time_s, 0.0);
    const DeviceClass& c = s.run.classes[0];
    QCOMPARE(c.events.size(), size_t(1));
    QCOMPARE(c.events[0].stream, Stream::kCompute);
    QCOMPARE(c.events[0].kind, std::string("dot"));
    QCOMPARE(c.events[0].bytes, int64_t(3) * 4096 * 4096 * 2);
    QCOMPARE(c.events[0].flops, flops);
    // Memory: a and b (params) and d; a and b are donated and die when the dot ends, d is the output.
    QCOMPARE(s.run.summary.peak_memory_bytes, int64_t(3) * 4096 * 4096 * 2);
  }

  // A memory-bound elementwise op: time = bytes / HBM bandwidth = 3 x 64 MiB / 819 GB/s.
  void ElementwiseIsMemoryBound() {
    auto m = Parse(R"(HloModule add1, num_partitions=1
ENTRY %main (a: f32[4096,4096], b: f32[4096,4096]) -> f32[4096,4096] {
  %a = f32[4096,4096] parameter(0)
  %b = f32[4096,4096] parameter(1)
  ROOT %c = f32[4096,4096] add(%a, %b)
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=1");
    Simulation s = Run(*m, topo);
    QVERIFY(Near(s.run.summary.step_time_s, 3.0 * 4096 * 4096 * 4 / 8.19e11));
    QCOMPARE(s.run.summary.mfu, 0.0);
  }

  // One all-gather: the step is exactly EstimateCollective over its replica groups. Validation C1
  // (v5e, {X:8, Y:4}, AllGather_Y of bf16[E_Y, F], E=2048, F=8192): an axis of 4 on v5e has no
  // wraparound, published "about 560 us" — the line model gives 559.2 us.
  void OneAllGatherEqualsEstimateCollective() {
    auto m = Parse(kC1);
    Topology topo = TopologyFor("tpu-v5e", "X=8,Y=4");
    Simulation s = Run(*m, topo);
    auto cost = EstimateCollective(topo, CollectiveKind::kAllGather, Iota(8, 4), 512.0 * 8192 * 2);
    QVERIFY(cost.ok());
    QCOMPARE(s.run.summary.step_time_s, cost->time_s);
    QVERIFY(std::fabs(s.run.summary.step_time_s - 560 * us) < 0.10 * 560 * us);
    QCOMPARE(s.run.summary.communication_time_s, cost->time_s);
    QCOMPARE(s.run.summary.exposed_communication_s, cost->time_s);
    QCOMPARE(s.run.collectives.size(), size_t(1));
    QCOMPARE(s.run.collectives[0].kind, std::string("all-gather"));
    QCOMPARE(s.run.collectives[0].bytes, int64_t(512) * 8192 * 2);
    QCOMPARE(s.run.collectives[0].time_s, cost->time_s);
    QCOMPARE(s.run.collectives[0].regime, std::string("bandwidth-bound"));
    QCOMPARE(s.run.collectives[0].replica_groups, std::string("[8,4]<=[32]"));
    QCOMPARE(s.run.summary.bytes_communicated, static_cast<int64_t>(std::llround(cost->bytes_per_device * 32)));
    // All 32 devices run the same timeline (every group is a line of 4 along Y): one class.
    QCOMPARE(s.run.classes.size(), size_t(1));
    QCOMPARE(s.run.num_devices(), int64_t(32));
    // The shard is gathered in place into the result (the operand dies there): 32 MiB.
    QCOMPARE(s.run.summary.peak_memory_bytes, int64_t(2048) * 8192 * 2);
  }

  // An independent dot (697.7 us) hides an async all-gather (559.2 us): the step is the dot, no
  // communication is exposed. With a shorter dot (348.8 us) the all-gather is exposed by the
  // difference.
  void IndependentDotHidesAsyncAllGather() {
    for (int64_t rows : {4096, 2048}) {
      const std::string r = std::to_string(rows);
      auto m = Parse("HloModule overlap, num_partitions=32\n"
                     "ENTRY %main (p: bf16[512,8192], a: bf16[" + r + ",4096], b: bf16[4096,4096]) -> (bf16[2048,8192], bf16[" + r + ",4096]) {\n"
                     "  %p = bf16[512,8192] parameter(0)\n"
                     "  %a = bf16[" + r + ",4096] parameter(1)\n"
                     "  %b = bf16[4096,4096] parameter(2)\n"
                     "  %ag = bf16[2048,8192] all-gather(%p), dimensions={0}, replica_groups=[8,4]<=[32]\n"
                     "  %d = bf16[" + r + ",4096] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                     "  ROOT %t = (bf16[2048,8192], bf16[" + r + ",4096]) tuple(%ag, %d)\n}\n");
      Topology topo = TopologyFor("tpu-v5e", "X=8,Y=4");
      Simulation s = Run(*m, topo);
      const double t_ag = EstimateCollective(topo, CollectiveKind::kAllGather, Iota(8, 4), 512.0 * 8192 * 2)->time_s;
      const double t_dot = 2.0 * static_cast<double>(rows) * 4096 * 4096 / 1.97e14;
      QVERIFY(Near(Event(s, "d")->duration_s, t_dot));
      QCOMPARE(Event(s, "ag")->start_s, 0.0);
      QCOMPARE(Event(s, "d")->start_s, 0.0);
      QVERIFY(Near(s.run.summary.step_time_s, std::max(t_ag, t_dot)));
      QVERIFY(Near(s.run.summary.compute_time_s, t_dot));
      QVERIFY(Near(s.run.summary.communication_time_s, t_ag));
      if (rows == 4096) {
        QCOMPARE(s.run.summary.exposed_communication_s, 0.0);
      } else {
        QVERIFY(Near(s.run.summary.exposed_communication_s, t_ag - t_dot, 1e-9));
      }
      QCOMPARE(s.run.summary.idle_time_s, 0.0);
    }
  }

  // all-gather -> dot -> all-reduce: nothing can overlap, the times add up.
  void DependentChainAddsUp() {
    auto m = Parse(R"(HloModule chain, num_partitions=32
ENTRY %main (p: bf16[512,8192], w: bf16[8192,4096]) -> bf16[2048,4096] {
  %p = bf16[512,8192] parameter(0)
  %w = bf16[8192,4096] parameter(1)
  %ag = bf16[2048,8192] all-gather(%p), dimensions={0}, replica_groups=[8,4]<=[32]
  %d = bf16[2048,4096] dot(%ag, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %ar = bf16[2048,4096] all-reduce(%d), replica_groups=[4,8]<=[8,4]T(1,0), to_apply=%add
}
%add (x: bf16[], y: bf16[]) -> bf16[] {
  %x = bf16[] parameter(0)
  %y = bf16[] parameter(1)
  ROOT %s = bf16[] add(%x, %y)
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=8,Y=4");
    Simulation s = Run(*m, topo);
    const double t_ag = EstimateCollective(topo, CollectiveKind::kAllGather, Iota(8, 4), 512.0 * 8192 * 2)->time_s;
    const double t_dot = ComputeCost(2.0 * 2048 * 4096 * 8192, 2.0 * (2048.0 * 8192 + 8192.0 * 4096 + 2048.0 * 4096), topo.chip());
    const double t_ar =
        EstimateCollective(topo, CollectiveKind::kAllReduce, Iota(4, 8, true), 2048.0 * 4096 * 2)->time_s;
    QVERIFY(Near(Event(s, "d")->duration_s, t_dot));
    QVERIFY(Near(Event(s, "ar")->duration_s, t_ar));
    QVERIFY(Near(s.run.summary.step_time_s, t_ag + t_dot + t_ar));
    QVERIFY(Near(s.run.summary.exposed_communication_s, t_ag + t_ar));
    QCOMPARE(s.run.summary.idle_time_s, 0.0);
    QCOMPARE(s.run.collectives.size(), size_t(2));
  }

  // The collective's operand q is produced after an independent dot in program order. Program
  // order: d1, q, then ag, then d2 waits for it: T1 + Tq + Tag + T2. The collectives-early list
  // schedule runs q first so the all-gather overlaps d1: Tq + max(T1, Tag) + T2.
  void CollectivesEarlySchedule() {
    auto m = Parse(R"(HloModule sched, num_partitions=32
ENTRY %main (p: bf16[512,8192], a: bf16[4096,4096], b: bf16[4096,4096], z: bf16[8192,1024]) -> (bf16[4096,4096], bf16[2048,1024]) {
  %p = bf16[512,8192] parameter(0)
  %a = bf16[4096,4096] parameter(1)
  %b = bf16[4096,4096] parameter(2)
  %z = bf16[8192,1024] parameter(3)
  %d1 = bf16[4096,4096] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %q = bf16[512,8192] multiply(%p, %p)
  %ag = bf16[2048,8192] all-gather(%q), dimensions={0}, replica_groups=[8,4]<=[32]
  %d2 = bf16[2048,1024] dot(%ag, %z), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (bf16[4096,4096], bf16[2048,1024]) tuple(%d1, %d2)
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=8,Y=4");
    const ChipSpec& chip = topo.chip();
    const double t1 = 2.0 * 4096 * 4096 * 4096 / 1.97e14;
    const double tq = ComputeCost(0, 2.0 * 512 * 8192 * 2, chip);  // p read once, q written
    const double tag = EstimateCollective(topo, CollectiveKind::kAllGather, Iota(8, 4), 512.0 * 8192 * 2)->time_s;
    const double t2 = 2.0 * 2048 * 1024 * 8192 / 1.97e14;
    Simulation in_order = Run(*m, topo);
    QVERIFY(Near(Event(in_order, "q")->duration_s, tq));
    QVERIFY(Near(Event(in_order, "d2")->duration_s, t2));
    QVERIFY(Near(in_order.run.summary.step_time_s, t1 + tq + tag + t2));
    SimulationOptions o;
    o.program.schedule = ScheduleKind::kCollectivesEarly;
    Simulation early = Run(*m, topo, o);
    QCOMPARE(Event(early, "q")->start_s, 0.0);
    QVERIFY(Near(Event(early, "ag")->start_s, tq));
    QVERIFY(Near(early.run.summary.step_time_s, tq + std::max(t1, tag) + t2));
    QCOMPARE(early.run.summary.exposed_communication_s, 0.0);
  }

  // The memory list schedule (issue 12): four products of p, each reduced to a row. Written as
  // the partitioner emits a post-order, the program makes every product before the first reduce
  // (p + four 256 KiB products live); the list schedule reduces each product as soon as it is made
  // (p, the scaled copy a dot reads, its product, and the rows). Only the order changes: the same fused steps, the same step time
  // one after another. memory-limit keeps program order while it fits the device's HBM and takes
  // the list schedule when it does not.
  void MemoryListScheduleFreesEarly() {
    std::string text = "HloModule order, num_partitions=1\nENTRY %main (p: f32[256,256]) -> (f32[256], f32[256], f32[256], f32[256]) {\n"
                       "  %p = f32[256,256] parameter(0)\n  %zero = f32[] constant(0)\n";
    for (int i = 0; i < 4; ++i) {
      const std::string k = std::to_string(i);
      text += "  %c" + k + " = f32[] constant(" + std::to_string(i + 1) + ")\n";
      text += "  %b" + k + " = f32[256,256] broadcast(%c" + k + "), dimensions={}\n";
      text += "  %s" + k + " = f32[256,256] multiply(%p, %b" + k + ")\n";
      text += "  %d" + k + " = f32[256,256] dot(%s" + k + ", %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n";
    }
    for (int i = 0; i < 4; ++i) {
      const std::string k = std::to_string(i);
      text += "  %r" + k + " = f32[256] reduce(%d" + k + ", %zero), dimensions={1}, to_apply=%add\n";
    }
    text += "  ROOT %t = (f32[256], f32[256], f32[256], f32[256]) tuple(%r0, %r1, %r2, %r3)\n}\n";
    text = "HloModule order, num_partitions=1\n%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
           "  %b = f32[] parameter(1)\n  ROOT %c = f32[] add(%a, %b)\n}\n" + text.substr(text.find('\n') + 1);
    auto m = Parse(text);
    Topology topo = TopologyFor("tpu-v4", "X=1");
    SimulationOptions o;
    o.program.donate_parameters = false;
    o.program.schedule = ScheduleKind::kProgramOrder;
    const Simulation in_order = Run(*m, topo, o);
    o.program.schedule = ScheduleKind::kMemoryList;
    const Simulation listed = Run(*m, topo, o);
    const int64_t matrix = 256 * 256 * 4, row = 256 * 4;
    QVERIFY2(in_order.run.summary.peak_memory_bytes >= matrix + 4 * matrix,
             std::to_string(in_order.run.summary.peak_memory_bytes).c_str());
    QVERIFY2(listed.run.summary.peak_memory_bytes <= 3 * matrix + 4 * row + 64,
             std::to_string(listed.run.summary.peak_memory_bytes).c_str());
    QVERIFY(Near(listed.run.summary.step_time_s, in_order.run.summary.step_time_s));
    QVERIFY(Near(listed.run.summary.compute_time_s, in_order.run.summary.compute_time_s));
    // The list schedule reduces d0 before it computes d1.
    QVERIFY(Event(listed, "r0")->start_s < Event(listed, "d1")->start_s);
    QVERIFY(Event(in_order, "r0")->start_s > Event(in_order, "d3")->start_s);

    // memory-limit: on the real chip (32 GiB) the program order fits and is kept...
    o.program.schedule = ScheduleKind::kMemoryLimit;
    auto program = BuildExecProgram(*m, topo.chip(), o.program);
    QVERIFY(program.ok());
    QCOMPARE(program->schedule, ScheduleKind::kProgramOrder);
    QCOMPARE(program->sequential_peak_bytes[1], int64_t{0});  // the list schedule was not needed
    // ...on a chip with 1 MiB of HBM it does not, and the list schedule is taken.
    ChipSpec small = topo.chip();
    small.hbm_bytes = 1 << 20;
    auto tight = BuildExecProgram(*m, small, o.program);
    QVERIFY(tight.ok());
    QCOMPARE(tight->schedule, ScheduleKind::kMemoryList);
    QVERIFY(tight->sequential_peak_bytes[1] < tight->sequential_peak_bytes[0]);
    QCOMPARE(ScheduleKindFromName("memory-list").value(), ScheduleKind::kMemoryList);
    QCOMPARE(ScheduleKindFromName("memory-limit").value(), ScheduleKind::kMemoryLimit);
    QCOMPARE(ScheduleKindName(ScheduleKind::kMemoryLimit), std::string_view("memory-limit"));
  }

  // A fused group that reads one element of a tuple runs before the tuple's other elements are
  // computed (copy c0 fuses into slice a, at a's place, before b): the element is read alone. Two
  // XLA conformance modules (variadic reduces, partitioned) failed with "value of b used before it
  // was computed".
  void FusedGroupReadsOneTupleElement() {
    auto m = Parse(R"(HloModule t, num_partitions=1
ENTRY %main (p: f32[28], q: s32[28], i: s32[]) -> (f32[14], s32[14]) {
  %p = f32[28] parameter(0)
  %q = s32[28] parameter(1)
  %i = s32[] parameter(2)
  %a = f32[14] dynamic-slice(%p, %i), dynamic_slice_sizes={14}
  %b = s32[14] dynamic-slice(%q, %i), dynamic_slice_sizes={14}
  %t = (f32[14], s32[14]) tuple(%a, %b)
  %g0 = f32[14] get-tuple-element(%t), index=0
  %c0 = f32[14] copy(%g0)
  %g1 = s32[14] get-tuple-element(%t), index=1
  %c1 = s32[14] copy(%g1)
  ROOT %r = (f32[14], s32[14]) tuple(%c0, %c1)
}
)");
    Topology topo = TopologyFor("tpu-v4", "X=1");
    auto s = Simulate(*m, topo);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    // Two ops: a with c0 fused into it, b with c1.
    QCOMPARE(s->stats.compute_ops, int64_t{2});
  }

  // Trip counts: the counter pattern (init 0, +1, LT 5), known_trip_count, and an unknown loop
  // (default with a warning). The body runs trip times, the condition trip+1 times.
  void WhileLoopTripCounts() {
    auto make = [](const std::string& limit, const std::string& config) {
      return "HloModule loop, num_partitions=1\n"
             "%body (p: (s32[], f32[256,256])) -> (s32[], f32[256,256]) {\n"
             "  %p = (s32[], f32[256,256]) parameter(0)\n"
             "  %i = s32[] get-tuple-element(%p), index=0\n"
             "  %x = f32[256,256] get-tuple-element(%p), index=1\n"
             "  %one = s32[] constant(1)\n"
             "  %i2 = s32[] add(%i, %one)\n"
             "  %y = f32[256,256] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
             "  ROOT %t = (s32[], f32[256,256]) tuple(%i2, %y)\n}\n"
             "%cond (p: (s32[], f32[256,256])) -> pred[] {\n"
             "  %p = (s32[], f32[256,256]) parameter(0)\n"
             "  %i = s32[] get-tuple-element(%p), index=0\n" +
             limit +
             "  ROOT %c = pred[] compare(%i, %n), direction=LT\n}\n"
             "ENTRY %main (x: f32[256,256], lim: s32[]) -> f32[256,256] {\n"
             "  %x = f32[256,256] parameter(0)\n"
             "  %lim = s32[] parameter(1)\n"
             "  %zero = s32[] constant(0)\n"
             "  %init = (s32[], f32[256,256]) tuple(%zero, %x)\n"
             "  %w = (s32[], f32[256,256]) while(%init), condition=%cond, body=%body" + config + "\n"
             "  ROOT %r = f32[256,256] get-tuple-element(%w), index=1\n}\n";
    };
    Topology topo = TopologyFor("tpu-v5e", "X=1");
    auto count_dots = [](const Simulation& s) {
      int n = 0;
      for (const TimelineEvent& e : s.run.classes[0].events) n += e.kind == "dot";
      return n;
    };
    {
      auto m = Parse(make("  %n = s32[] constant(5)\n", ""));
      QCOMPARE(WhileTripCount(*m->entry()->Find("w")), std::optional<int64_t>(5));
      Simulation s = Run(*m, topo);
      QVERIFY(s.warnings.empty());
      QCOMPARE(count_dots(s), 5);
      QVERIFY(Event(s, "body/y[0]") != nullptr);
      QVERIFY(Event(s, "body/y[4]") != nullptr);
      QVERIFY(Event(s, "body/y[5]") == nullptr);
      QVERIFY(Event(s, "cond/c[5]") != nullptr);  // the condition's last, failing evaluation
      // Serial compute, no communication: the step is the sum of the compute events.
      double sum = 0;
      for (const TimelineEvent& e : s.run.classes[0].events) sum += e.duration_s;
      QVERIFY(Near(s.run.summary.step_time_s, sum, 1e-9));
      const double t_dot = ComputeCost(2.0 * 256 * 256 * 256, 2.0 * 256 * 256 * 4, topo.chip());
      QVERIFY(s.run.summary.step_time_s > 5 * t_dot);
      QVERIFY(s.run.summary.step_time_s < 5 * t_dot + 1 * us);
    }
    {
      auto m = Parse(make("  %n = s32[] constant(5)\n", ", backend_config={\"known_trip_count\":{\"n\":\"7\"}}"));
      QCOMPARE(count_dots(Run(*m, topo)), 7);  // XLA's known_trip_count wins
    }
    {
      // The limit comes from outside the loop: unknown; default 1, or as configured, with a warning.
      auto m = Parse(make("  %n = s32[] get-tuple-element(%p), index=0\n", ""));
      QCOMPARE(WhileTripCount(*m->entry()->Find("w")), std::optional<int64_t>());
      Simulation s = Run(*m, topo);
      QCOMPARE(count_dots(s), 1);
      QCOMPARE(s.warnings.size(), size_t(1));
      QVERIFY(s.warnings[0].find("trip count unknown") != std::string::npos);
      SimulationOptions o;
      o.program.default_trip_count = 3;
      QCOMPARE(count_dots(Run(*m, topo, o)), 3);
    }
  }

  // Loop replay (ExecProgramOptions::replay_loop_iterations): the iterations after the third are
  // written from the second and third when those repeat; the program must be exactly the one
  // every iteration expanded gives. Pipelined training steps (both schedules), nested loops whose
  // inner trip count is unknown (a warning per outer iteration), and loops whose state rotates
  // through positions (their iterations do not repeat with one step: expanded as before).
  static void CompareExecPrograms(const ExecProgram& a, const ExecProgram& b) {
    QCOMPARE(a.ops.size(), b.ops.size());
    for (size_t k = 0; k < a.ops.size(); ++k) {
      const ExecOp& x = a.ops[k];
      const ExecOp& y = b.ops[k];
      QVERIFY2(x.name == y.name && x.kind == y.kind && x.kind_name == y.kind_name, (x.name + " vs " + y.name).c_str());
      QVERIFY2(x.duration_s == y.duration_s && x.flops == y.flops && x.bytes == y.bytes, x.name.c_str());
      QVERIFY2(x.collective == y.collective && x.deps == y.deps && x.uses == y.uses && x.defs == y.defs, x.name.c_str());
      QVERIFY2(x.in_place == y.in_place && x.members == y.members && x.loop == y.loop && x.iteration == y.iteration &&
                   x.recompute == y.recompute,
               x.name.c_str());
    }
    QCOMPARE(a.buffers.size(), b.buffers.size());
    for (size_t k = 0; k < a.buffers.size(); ++k) {
      const Buffer& x = a.buffers[k];
      const Buffer& y = b.buffers[k];
      QVERIFY2(x.name == y.name && x.bytes == y.bytes && x.logical_bytes == y.logical_bytes && x.category == y.category &&
                   x.def_op == y.def_op && x.is_parameter == y.is_parameter && x.is_constant == y.is_constant &&
                   x.is_output == y.is_output && x.donated == y.donated,
               (x.name + " vs " + y.name).c_str());
    }
    QCOMPARE(a.collectives.size(), b.collectives.size());
    for (size_t k = 0; k < a.collectives.size(); ++k) {
      QVERIFY(a.collectives[k].kind == b.collectives[k].kind);
      QVERIFY(a.collectives[k].groups == b.collectives[k].groups && a.collectives[k].pairs == b.collectives[k].pairs);
      QCOMPARE(a.collectives[k].operand_bytes, b.collectives[k].operand_bytes);
    }
    QCOMPARE(a.loops.size(), b.loops.size());
    for (size_t k = 0; k < a.loops.size(); ++k) {
      QCOMPARE(a.loops[k].name, b.loops[k].name);
      QCOMPARE(a.loops[k].body, b.loops[k].body);
      QCOMPARE(a.loops[k].trips, b.loops[k].trips);
      QCOMPARE(a.loops[k].parent, b.loops[k].parent);
      QCOMPARE(a.loops[k].parent_iteration, b.loops[k].parent_iteration);
    }
    QCOMPARE(a.warnings, b.warnings);
    QCOMPARE(a.flops, b.flops);
    QVERIFY(a.schedule == b.schedule);
    QVERIFY(a.sequential_peak_bytes == b.sequential_peak_bytes);
    QCOMPARE(a.rematerialized_values, b.rematerialized_values);
    QCOMPARE(a.rematerialized_bytes, b.rematerialized_bytes);
  }
  // Builds `m` with and without replay; returns the iterations replayed.
  static int64_t ReplayMatchesExpansion(const Module& m, const ChipSpec& chip, const ExecProgramOptions& options = {}) {
    ExecProgramOptions on = options, off = options;
    off.replay_loop_iterations = false;
    auto a = BuildExecProgram(m, chip, on);
    auto b = BuildExecProgram(m, chip, off);
    if (!a.ok() || !b.ok()) qFatal("build: %s", (a.ok() ? b.error() : a.error()).message.c_str());
    CompareExecPrograms(*a, *b);
    if (b->replayed_iterations != 0) qFatal("replay off, yet iterations replayed");
    return a->replayed_iterations;
  }

  void LoopReplayBuildsTheSameProgram() {
    const ChipSpec chip = ChipPreset("tpu-v4").value();
    // Pipelined training steps: GPipe and circular, rematerialisation on, 12 microbatches.
    for (const char* schedule : {"gpipe", "circular"}) {
      auto spmd = testing::PartitionZooUnverified("pipelined-transformer",
                                                  {{"stages", "4"}, {"mesh_x", "1"}, {"mesh_y", "2"}, {"microbatches", "12"},
                                                   {"layers", "8"}, {"schedule", schedule}, {"remat", "1"}});
      QVERIFY2(spmd.ok(), spmd.ok() ? "" : spmd.error().message.c_str());
      const int64_t replayed = ReplayMatchesExpansion(*spmd->module, chip);
      if (QTest::currentTestFailed()) return;
      QVERIFY2(replayed >= 10, schedule);  // most of the forward and backward loops' iterations
      // Built without names (ExecProgramOptions::names, a run without timelines): the same
      // program, iterations replayed alike, but for the names of compute ops and op-defined buffers.
      ExecProgramOptions unnamed;
      unnamed.names = false;
      QCOMPARE(ReplayMatchesExpansion(*spmd->module, chip, unnamed), replayed);
      if (QTest::currentTestFailed()) return;
      {
        auto named = BuildExecProgram(*spmd->module, chip);
        auto bare = BuildExecProgram(*spmd->module, chip, unnamed);
        QVERIFY(named.ok() && bare.ok());
        for (ExecOp& op : named->ops)
          if (op.kind == ExecKind::kCompute) op.name.clear();
        for (Buffer& b : named->buffers)
          if (b.def_op >= 0) b.name.clear();
        CompareExecPrograms(*named, *bare);
        if (QTest::currentTestFailed()) return;
      }
      // The simulated step is the same too.
      Topology topo = TopologyFor("tpu-v4", "L=4,X=1,Y=2");
      SimulationOptions off;
      off.program.replay_loop_iterations = false;
      Simulation s_on = Run(*spmd->module, topo), s_off = Run(*spmd->module, topo, off);
      QCOMPARE(s_on.run.summary.step_time_s, s_off.run.summary.step_time_s);
      QCOMPARE(s_on.run.summary.peak_memory_bytes, s_off.run.summary.peak_memory_bytes);
    }
    // An outer loop of 9 around an inner loop whose trip count is unknown (default 3: a warning
    // per outer iteration), with a constant in the body.
    {
      auto m = Parse(R"(HloModule nested, num_partitions=1
%ibody (q: (s32[], f32[128,128])) -> (s32[], f32[128,128]) {
  %q = (s32[], f32[128,128]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %x = f32[128,128] get-tuple-element(%q), index=1
  %one = s32[] constant(1)
  %j2 = s32[] add(%j, %one)
  %y = f32[128,128] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[], f32[128,128]) tuple(%j2, %y)
}
%icond (q: (s32[], f32[128,128])) -> pred[] {
  %q = (s32[], f32[128,128]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] get-tuple-element(%q), index=0
  ROOT %c = pred[] compare(%j, %n), direction=LT
}
%body (p: (s32[], f32[128,128])) -> (s32[], f32[128,128]) {
  %p = (s32[], f32[128,128]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[128,128] get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %k = f32[128,128] constant({...})
  %s = f32[128,128] add(%x, %k)
  %zero = s32[] constant(0)
  %init = (s32[], f32[128,128]) tuple(%zero, %s)
  %inner = (s32[], f32[128,128]) while(%init), condition=%icond, body=%ibody
  %r = f32[128,128] get-tuple-element(%inner), index=1
  %ag = f32[256,128] all-gather(%r), dimensions={0}, replica_groups={{0,1}}
  %sl = f32[128,128] slice(%ag), slice={[0:128], [0:128]}
  ROOT %t = (s32[], f32[128,128]) tuple(%i2, %sl)
}
%cond (p: (s32[], f32[128,128])) -> pred[] {
  %p = (s32[], f32[128,128]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(9)
  ROOT %c = pred[] compare(%i, %n), direction=LT
}
ENTRY %main (x: f32[128,128]) -> f32[128,128] {
  %x = f32[128,128] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[128,128]) tuple(%zero, %x)
  %w = (s32[], f32[128,128]) while(%init), condition=%cond, body=%body
  ROOT %r = f32[128,128] get-tuple-element(%w), index=1
}
)");
      m->num_partitions = 2;
      ExecProgramOptions o;
      o.default_trip_count = 3;
      const int64_t replayed = ReplayMatchesExpansion(*m, chip, o);
      if (QTest::currentTestFailed()) return;
      QCOMPARE(replayed, int64_t{5});  // outer iterations 4..8 (the inner loops run 3: too short)
    }
    // State rotating through four positions: (i, a, b, c, d) -> (i+1, b, c, d, a), a dot of the
    // first each iteration. Iterations 1-3 read b, c, d: ids one apart, not a whole iteration's
    // buffers apart, so nothing is replayed; the program is the expanded one.
    {
      auto m = Parse(R"(HloModule rotate, num_partitions=1
%body (p: (s32[], f32[64,64], f32[64,64], f32[64,64], f32[64,64])) -> (s32[], f32[64,64], f32[64,64], f32[64,64], f32[64,64]) {
  %p = (s32[], f32[64,64], f32[64,64], f32[64,64], f32[64,64]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %a = f32[64,64] get-tuple-element(%p), index=1
  %b = f32[64,64] get-tuple-element(%p), index=2
  %c = f32[64,64] get-tuple-element(%p), index=3
  %d = f32[64,64] get-tuple-element(%p), index=4
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %y = f32[64,64] dot(%a, %a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[], f32[64,64], f32[64,64], f32[64,64], f32[64,64]) tuple(%i2, %b, %c, %d, %a)
}
%cond (p: (s32[], f32[64,64], f32[64,64], f32[64,64], f32[64,64])) -> pred[] {
  %p = (s32[], f32[64,64], f32[64,64], f32[64,64], f32[64,64]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(10)
  ROOT %c = pred[] compare(%i, %n), direction=LT
}
ENTRY %main (a: f32[64,64], b: f32[64,64], c: f32[64,64], d: f32[64,64]) -> f32[64,64] {
  %a = f32[64,64] parameter(0)
  %b = f32[64,64] parameter(1)
  %c = f32[64,64] parameter(2)
  %d = f32[64,64] parameter(3)
  %zero = s32[] constant(0)
  %init = (s32[], f32[64,64], f32[64,64], f32[64,64], f32[64,64]) tuple(%zero, %a, %b, %c, %d)
  %w = (s32[], f32[64,64], f32[64,64], f32[64,64], f32[64,64]) while(%init), condition=%cond, body=%body
  ROOT %r = f32[64,64] get-tuple-element(%w), index=1
}
)");
      QCOMPARE(ReplayMatchesExpansion(*m, chip), int64_t{0});
    }
  }

  // dot + bias broadcast + add + tanh: one fused op that reads a, b and the bias vector and writes
  // the result once; unfused, four ops with every intermediate in HBM.
  void ElementwiseFusesIntoItsProducer() {
    auto m = Parse(R"(HloModule fuse, num_partitions=1
ENTRY %main (a: f32[1024,1024], b: f32[1024,1024], c: f32[1024]) -> f32[1024,1024] {
  %a = f32[1024,1024] parameter(0)
  %b = f32[1024,1024] parameter(1)
  %c = f32[1024] parameter(2)
  %d = f32[1024,1024] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %cb = f32[1024,1024] broadcast(%c), dimensions={1}
  %e = f32[1024,1024] add(%d, %cb)
  ROOT %r = f32[1024,1024] tanh(%e)
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=1");
    const double mat = 1024.0 * 1024 * 4;
    Simulation fused = Run(*m, topo);
    QCOMPARE(fused.run.classes[0].events.size(), size_t(1));
    const TimelineEvent& e = fused.run.classes[0].events[0];
    QCOMPARE(e.instruction, std::string("d"));
    QCOMPARE(e.kind, std::string("dot-fusion"));
    QCOMPARE(e.bytes, static_cast<int64_t>(3 * mat + 4096));
    QVERIFY(Near(fused.run.summary.step_time_s, ComputeCost(2.0 * 1024 * 1024 * 1024, 3 * mat + 4096, topo.chip())));
    SimulationOptions o;
    o.program.fuse_elementwise = false;
    Simulation unfused = Run(*m, topo, o);
    QCOMPARE(unfused.run.classes[0].events.size(), size_t(4));
    const double t = ComputeCost(2.0 * 1024 * 1024 * 1024, 3 * mat, topo.chip()) +  // dot
                     ComputeCost(0, mat + 4096, topo.chip()) +                      // broadcast
                     ComputeCost(0, 3 * mat, topo.chip()) +                         // add
                     ComputeCost(0, 2 * mat, topo.chip());                          // tanh
    QVERIFY(Near(unfused.run.summary.step_time_s, t, 1e-9));
  }

  // A dot's result scaled by a constant the text declares after the dot (the zoo's attention:
  // `scores`, then `c`, then `scores * broadcast(c)`) is still the dot's output fusion: constants
  // exist before any op runs (`s` is returned too, so it is not a cheap producer fused into the
  // dot `e` instead). Only when the scaled op is the dot's one reader: `n`, a second reader of `e`
  // whose constant comes after `e`, stays an op of its own, which reads `e` from HBM.
  void OutputFusionReadsALaterConstant() {
    auto m = Parse(R"(HloModule scale, num_partitions=1
ENTRY %main (a: f32[1024,1024], b: f32[1024,1024]) -> (f32[1024,1024], f32[1024,1024], f32[1024,1024]) {
  %a = f32[1024,1024] parameter(0)
  %b = f32[1024,1024] parameter(1)
  %d = f32[1024,1024] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %c = f32[] constant(0.125)
  %cb = f32[1024,1024] broadcast(%c), dimensions={}
  %s = f32[1024,1024] multiply(%d, %cb)
  %e = f32[1024,1024] dot(%s, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %c2 = f32[] constant(2)
  %cb2 = f32[1024,1024] broadcast(%c2), dimensions={}
  %n = f32[1024,1024] multiply(%e, %cb2)
  ROOT %out = (f32[1024,1024], f32[1024,1024], f32[1024,1024]) tuple(%s, %e, %n)
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=1");
    const double mat = 1024.0 * 1024 * 4;
    Simulation sim = Run(*m, topo);
    const auto& events = sim.run.classes[0].events;
    QCOMPARE(events.size(), size_t(3));
    QCOMPARE(events[0].instruction, std::string("d"));
    QCOMPARE(events[0].kind, std::string("dot-fusion"));  // d and s: reads a, b and the scalar, writes s
    QCOMPARE(events[0].bytes, static_cast<int64_t>(3 * mat + 4));
    QCOMPARE(events[1].instruction, std::string("e"));
    QCOMPARE(events[1].kind, std::string("dot"));  // e is read by the root too: written as it is
    QCOMPARE(events[2].instruction, std::string("n"));
    QCOMPARE(events[2].bytes, static_cast<int64_t>(2 * mat + 4));
  }

  // Multi-input loop fusion (docs/simulator-engine.md): Adam's update of one weight — m' and v'
  // from the gradient, w' from both — is one compute op that reads w, g, m, v once and writes w',
  // m', v' once (7 arrays and the scalar constants the inlined broadcasts read), where the
  // one-operand rule left m' and v' separate groups.
  void MultiInputLoopFusionOfAnUpdate() {
    auto m = Parse(R"(HloModule adam, num_partitions=1
ENTRY %main (w: f32[1024,1024], g: f32[1024,1024], m: f32[1024,1024], v: f32[1024,1024]) -> (f32[1024,1024], f32[1024,1024], f32[1024,1024]) {
  %w = f32[1024,1024] parameter(0)
  %g = f32[1024,1024] parameter(1)
  %m = f32[1024,1024] parameter(2)
  %v = f32[1024,1024] parameter(3)
  %c1 = f32[] constant(0.9)
  %b1 = f32[1024,1024] broadcast(%c1), dimensions={}
  %ms = f32[1024,1024] multiply(%m, %b1)
  %c2 = f32[] constant(0.1)
  %b2 = f32[1024,1024] broadcast(%c2), dimensions={}
  %gs = f32[1024,1024] multiply(%g, %b2)
  %m_new = f32[1024,1024] add(%ms, %gs)
  %gg = f32[1024,1024] multiply(%g, %g)
  %c3 = f32[] constant(0.999)
  %b3 = f32[1024,1024] broadcast(%c3), dimensions={}
  %vs = f32[1024,1024] multiply(%v, %b3)
  %v_new = f32[1024,1024] add(%vs, %gg)
  %sq = f32[1024,1024] sqrt(%v_new)
  %q = f32[1024,1024] divide(%m_new, %sq)
  %w_new = f32[1024,1024] subtract(%w, %q)
  ROOT %out = (f32[1024,1024], f32[1024,1024], f32[1024,1024]) tuple(%w_new, %m_new, %v_new)
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=1");
    const double mat = 1024.0 * 1024 * 4;
    Simulation s = Run(*m, topo);
    QCOMPARE(s.run.classes[0].events.size(), size_t(1));
    const TimelineEvent& e = s.run.classes[0].events[0];
    QCOMPARE(e.kind, std::string("fusion"));
    QCOMPARE(e.bytes, static_cast<int64_t>(7 * mat + 3 * 4));
    QVERIFY(Near(s.run.summary.step_time_s, ComputeCost(0, 7 * mat + 12, topo.chip())));
  }

  // Groups are merged only when no other op lies on a path between them: here the all-reduce reads
  // the exp and the add reads both, so the exp and the add stay two ops (one op would wait for
  // itself).
  void LoopFusionNeverMakesACycle() {
    auto m = Parse(R"(HloModule cycle, num_partitions=2
ENTRY %main (p: f32[1024,1024]) -> f32[1024,1024] {
  %p = f32[1024,1024] parameter(0)
  %a = f32[1024,1024] exponential(%p)
  %r = f32[1024,1024] all-reduce(%a), replica_groups={{0,1}}, to_apply=%sum, channel_id=1
  ROOT %b = f32[1024,1024] add(%a, %r)
}
%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=2");
    Simulation s = Run(*m, topo);
    int compute = 0;
    for (const TimelineEvent& e : s.run.classes[0].events) compute += e.stream == Stream::kCompute ? 1 : 0;
    QCOMPARE(compute, 2);
    QVERIFY(Event(s, "a") && Event(s, "b") && Event(s, "a")->end_s() <= Event(s, "b")->start_s);
  }

  // A combined (variadic) collective, as weight-update sharding's batching (section 5.2) emits, is
  // one collective of the operands' total bytes: one latency, not one per operand.
  void CombinedCollectiveIsCostedOnce() {
    const char* sum = R"(
%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
)";
    auto apart = Parse(std::string(R"(HloModule apart, num_partitions=8
ENTRY %main (a: f32[256], b: f32[256]) -> (f32[32], f32[32]) {
  %a = f32[256] parameter(0)
  %b = f32[256] parameter(1)
  %ra = f32[32] reduce-scatter(%a), dimensions={0}, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=%sum, channel_id=1
  %rb = f32[32] reduce-scatter(%b), dimensions={0}, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=%sum, channel_id=2
  ROOT %t = (f32[32], f32[32]) tuple(%ra, %rb)
}
)") + sum);
    auto combined = Parse(std::string(R"(HloModule combined, num_partitions=8
ENTRY %main (a: f32[256], b: f32[256]) -> (f32[32], f32[32]) {
  %a = f32[256] parameter(0)
  %b = f32[256] parameter(1)
  ROOT %r = (f32[32], f32[32]) reduce-scatter(%a, %b), dimensions={0}, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=%sum, channel_id=1
}
)") + sum);
    Topology topo = TopologyFor("tpu-v5e", "X=8");
    Simulation one = Run(*combined, topo);
    Simulation two = Run(*apart, topo);
    QCOMPARE(one.run.collectives.size(), size_t(1));
    QCOMPARE(one.run.collectives[0].bytes, int64_t(2 * 256 * 4));
    auto cost = EstimateCollective(topo, CollectiveKind::kReduceScatter, {}, 2 * 256 * 4.0);
    QVERIFY(cost.ok());
    QVERIFY(Near(one.run.summary.step_time_s, cost->time_s, 1e-9));
    QCOMPARE(two.run.collectives.size(), size_t(2));
    QVERIFY(one.run.summary.step_time_s < 0.75 * two.run.summary.step_time_s);  // latency-bound: about half
  }

  // Two all-gathers over the same Y groups in flight at once share every link: each finishes at
  // EstimateConcurrentCollectives' time (twice the time alone); one at a time they also take twice
  // as long in total. Over disjoint links (X groups and Y groups) the concurrent pair takes only as
  // long as the slower one.
  void ConcurrentCollectivesContend() {
    const std::string same = R"(HloModule two, num_partitions=32
ENTRY %main (p: bf16[512,8192], q: bf16[512,8192]) -> (bf16[2048,8192], bf16[2048,8192]) {
  %p = bf16[512,8192] parameter(0)
  %q = bf16[512,8192] parameter(1)
  %ag1 = bf16[2048,8192] all-gather(%p), dimensions={0}, replica_groups=[8,4]<=[32]
  %ag2 = bf16[2048,8192] all-gather(%q), dimensions={0}, replica_groups=[8,4]<=[32]
  ROOT %t = (bf16[2048,8192], bf16[2048,8192]) tuple(%ag1, %ag2)
}
)";
    Topology topo = TopologyFor("tpu-v5e", "X=8,Y=4");
    auto m = Parse(same);
    CollectiveRequest r;
    r.kind = CollectiveKind::kAllGather;
    r.groups = Iota(8, 4);
    r.operand_bytes = 512.0 * 8192 * 2;
    const double alone = EstimateCollective(topo, r.kind, r.groups, r.operand_bytes)->time_s;
    auto together = EstimateConcurrentCollectives(topo, {r, r});
    QVERIFY(together.ok());
    Simulation serial = Run(*m, topo);
    QVERIFY(Near(serial.run.summary.step_time_s, 2 * alone));
    QVERIFY(Near(Event(serial, "ag2")->start_s, alone));
    SimulationOptions o;
    o.max_concurrent_collectives = 2;
    Simulation conc = Run(*m, topo, o);
    QVERIFY(Near(conc.run.summary.step_time_s, (*together)[0], 1e-9));
    QVERIFY(Near(Event(conc, "ag1")->duration_s, (*together)[0], 1e-9));
    QCOMPARE(Event(conc, "ag2")->start_s, 0.0);
    QVERIFY((*together)[0] > 1.9 * alone);

    const std::string disjoint = R"(HloModule two, num_partitions=32
ENTRY %main (p: bf16[512,8192], q: bf16[256,8192]) -> (bf16[2048,8192], bf16[2048,8192]) {
  %p = bf16[512,8192] parameter(0)
  %q = bf16[256,8192] parameter(1)
  %ag1 = bf16[2048,8192] all-gather(%p), dimensions={0}, replica_groups=[8,4]<=[32]
  %ag2 = bf16[2048,8192] all-gather(%q), dimensions={0}, replica_groups=[4,8]<=[8,4]T(1,0)
  ROOT %t = (bf16[2048,8192], bf16[2048,8192]) tuple(%ag1, %ag2)
}
)";
    auto d = Parse(disjoint);
    const double ty = alone;
    const double tx = EstimateCollective(topo, CollectiveKind::kAllGather, Iota(4, 8, true), 256.0 * 8192 * 2)->time_s;
    QVERIFY(Near(Run(*d, topo).run.summary.step_time_s, tx + ty));
    QVERIFY(Near(Run(*d, topo, o).run.summary.step_time_s, std::max(tx, ty), 1e-9));
  }

  // Replica groups laid out differently take different times: devices split into classes exactly
  // where their timelines differ, and each group's all-reduce takes its own time (the groups run
  // together, so each gets its finish time from EstimateConcurrentCollectives with one request per
  // group). Capping the classes merges them (everyone takes the slowest group's time) with a warning.
  void DeviceClassesSplitOnlyWhereTimelinesDiffer() {
    auto m = Parse(R"(HloModule asym, num_partitions=8
ENTRY %main (p: f32[1048576]) -> f32[1048576] {
  %p = f32[1048576] parameter(0)
  %ar1 = f32[1048576] all-reduce(%p), replica_groups={{0,1},{2,7},{3,4},{5,6}}, to_apply=%add
  ROOT %ar2 = f32[1048576] all-reduce(%ar1), channel_id=1, replica_groups={}, to_apply=%add
}
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
)");
    // A line of 8 chips: {2,7} is routed over the links {3,4} and {5,6} use; {0,1} shares nothing.
    Topology topo = TopologyFor("tpu-v5e", "X=8");
    const double bytes = 1048576.0 * 4;
    std::vector<CollectiveRequest> reqs;
    for (std::vector<int64_t> g : std::vector<std::vector<int64_t>>{{0, 1}, {2, 7}, {3, 4}, {5, 6}}) {
      CollectiveRequest r;
      r.kind = CollectiveKind::kAllReduce;
      r.operand_bytes = bytes;
      r.groups = {g};
      reqs.push_back(r);
    }
    auto f = EstimateConcurrentCollectives(topo, reqs);
    QVERIFY(f.ok());
    const double t01 = (*f)[0], t27 = (*f)[1], t34 = (*f)[2], t56 = (*f)[3];
    const double alone = EstimateCollective(topo, CollectiveKind::kAllReduce, {{0, 1}}, bytes)->time_s;
    QVERIFY(Near(t01, alone, 1e-9));
    QVERIFY(t27 > 1.5 * t01);
    const double slowest = std::max({t01, t27, t34, t56});
    const double tall = EstimateCollective(topo, CollectiveKind::kAllReduce, {}, bytes)->time_s;
    Simulation s = Run(*m, topo);
    std::set<double> distinct{t01, t27, t34, t56};
    QCOMPARE(s.run.classes.size(), distinct.size());
    QCOMPARE(s.run.device_class[0], s.run.device_class[1]);
    QCOMPARE(s.run.device_class[2], s.run.device_class[7]);
    QVERIFY(s.run.device_class[0] != s.run.device_class[2]);
    const double expected[8] = {t01, t01, t27, t34, t34, t56, t56, t27};
    for (int d = 0; d < 8; ++d) {
      QVERIFY(Near(Event(s, "ar1", d)->duration_s, expected[d], 1e-9));
      // The second all-reduce waits for the slowest group: everyone starts it together.
      QVERIFY(Near(Event(s, "ar2", d)->start_s, slowest, 1e-9));
      QCOMPARE(s.run.DeviceTimeline(d).front().device, int64_t(d));
    }
    QVERIFY(Near(s.run.summary.step_time_s, slowest + tall, 1e-9));

    // Groups that are translates of each other keep one class (and the joint estimate).
    auto sym = Parse(R"(HloModule sym, num_partitions=8
ENTRY %main (p: f32[1048576]) -> f32[1048576] {
  %p = f32[1048576] parameter(0)
  ROOT %ar1 = f32[1048576] all-reduce(%p), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
}
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
)");
    Simulation ss = Run(*sym, topo);
    QCOMPARE(ss.run.classes.size(), size_t(1));
    QVERIFY(Near(ss.run.summary.step_time_s,
                 EstimateCollective(topo, CollectiveKind::kAllReduce, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, bytes)->time_s));

    SimulationOptions o;
    o.max_device_classes = 1;
    Simulation capped = Run(*m, topo, o);
    QCOMPARE(capped.run.classes.size(), size_t(1));
    QVERIFY(Near(Event(capped, "ar1", 0)->duration_s, slowest, 1e-9));
    QVERIFY(!capped.warnings.empty());
    QVERIFY(Near(capped.run.summary.step_time_s, s.run.summary.step_time_s, 1e-9));
  }

  // A halo exchange (collective-permute, shift by one along a line of 4): the step is
  // EstimateCollectivePermute of its pairs.
  void CollectivePermuteEqualsEstimate() {
    auto m = Parse(R"(HloModule halo, num_partitions=4
ENTRY %main (p: f32[1024,1024]) -> f32[1024,1024] {
  %p = f32[1024,1024] parameter(0)
  ROOT %cp = f32[1024,1024] collective-permute(%p), source_target_pairs={{0,1},{1,2},{2,3}}
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=4");
    Simulation s = Run(*m, topo);
    auto cost = EstimateCollectivePermute(topo, {{0, 1}, {1, 2}, {2, 3}}, 1024.0 * 1024 * 4);
    QVERIFY(cost.ok());
    QVERIFY(Near(s.run.summary.step_time_s, cost->time_s));
    QCOMPARE(s.run.collectives[0].kind, std::string("collective-permute"));
    QCOMPARE(s.run.collectives[0].replica_groups, std::string("{{0,1},{1,2},{2,3}}"));
    QCOMPARE(s.run.classes.size(), size_t(1));
  }

  // The async pair all-gather-start / all-gather-done is the same collective as all-gather.
  void AsyncStartDoneIsOneCollective() {
    auto m = Parse(R"(HloModule async, num_partitions=32
ENTRY %main (p: bf16[512,8192]) -> bf16[2048,8192] {
  %p = bf16[512,8192] parameter(0)
  %ags = (bf16[512,8192], bf16[2048,8192]) all-gather-start(%p), dimensions={0}, replica_groups=[8,4]<=[32]
  ROOT %agd = bf16[2048,8192] all-gather-done(%ags)
}
)");
    Topology topo = TopologyFor("tpu-v5e", "X=8,Y=4");
    Simulation s = Run(*m, topo);
    Simulation plain = Run(*Parse(kC1), topo);
    QCOMPARE(s.run.summary.step_time_s, plain.run.summary.step_time_s);
    QCOMPARE(s.run.collectives.size(), size_t(1));
    QCOMPARE(s.run.summary.peak_memory_bytes, plain.run.summary.peak_memory_bytes);
  }

  void NamesAndText() {
    QCOMPARE(ScheduleKindFromName("collectives-early").value(), ScheduleKind::kCollectivesEarly);
    QCOMPARE(ScheduleKindFromName("Program_Order").value(), ScheduleKind::kProgramOrder);
    QVERIFY(!ScheduleKindFromName("fastest").ok());
    ReplicaGroups g;
    g.groups = {{0, 1}, {2, 3}};
    QCOMPARE(ReplicaGroupsText(g), std::string("{{0,1},{2,3}}"));
    ReplicaGroups big;
    for (int i = 0; i < 256; ++i) big.groups.push_back({8 * i, 8 * i + 1, 8 * i + 2, 8 * i + 3, 8 * i + 4, 8 * i + 5, 8 * i + 6, 8 * i + 7});
    const std::string t = ReplicaGroupsText(big, 2000);
    QVERIFY(t.size() < 100);
    QVERIFY(t.find("256 groups of 8") != std::string::npos);
  }

  void BadInputIsAnError() {
    Topology four = TopologyFor("tpu-v5e", "X=4");
    auto m = Parse(kC1);
    auto r = Simulate(*m, four);
    QVERIFY(!r.ok());
    QVERIFY(r.error().message.find("partitioned for 32 devices") != std::string::npos);
    auto g = Parse(R"(HloModule g, num_partitions=1
ENTRY %main (p: f32[8]) -> f32[32] {
  %p = f32[8] parameter(0)
  ROOT %ag = f32[32] all-gather(%p), dimensions={0}, replica_groups={{0,1,2,3}}
}
)");
    Topology two = TopologyFor("tpu-v5e", "X=2");
    auto r2 = Simulate(*g, two);
    QVERIFY(!r2.ok());
    QVERIFY2(r2.error().message.find("partition id 2 out of range") != std::string::npos, r2.error().message.c_str());
    SimulationOptions o;
    o.max_concurrent_collectives = 0;
    QVERIFY(!Simulate(*g, two, o).ok());
    o = {};
    o.program.max_exec_ops = 0;
    QVERIFY(!Simulate(*g, two, o).ok());
  }

  // The zoo's 2-layer Transformer training step (Adam, 2D finalized, batch 16) propagated and
  // partitioned for a 4x4 mesh; `model_flops` gets the unpartitioned module's FLOPs.
  static Result<PartitionResult> PartitionedZooStep(double* model_flops = nullptr, const std::string& batch = "16") {
    return testing::PartitionZooUnverified(
        "transformer", {{"layers", "2"}, {"mesh_x", "4"}, {"mesh_y", "4"}, {"batch", batch}}, nullptr,
        [model_flops](Module& m) {
          if (model_flops) *model_flops = CountModuleFlops(m);
        },
        /*to_parameters=*/true);
  }

  // A zoo training step (2 layers, Adam, 2D finalized) partitioned for 4x4 and simulated on v4:
  // one timeline for all 16 devices, every memory category present, figures consistent.
  void ZooTrainingStep() {
    double model_flops = 0;
    auto p = PartitionedZooStep(&model_flops);
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    QVERIFY(model_flops > 0);
    Topology topo = TopologyFor("tpu-v4", "X=4,Y=4");
    SimulationOptions o;
    o.model_flops = model_flops;
    o.mesh_text = "X=4,Y=4";
    Simulation s = Run(*p->module, topo, o);
    const RunSummary& sum = s.run.summary;
    QCOMPARE(s.run.classes.size(), size_t(1));
    QVERIFY(s.run.Validate().ok());
    QVERIFY(sum.step_time_s > 0);
    QVERIFY(sum.compute_time_s <= sum.step_time_s * (1 + 1e-12));
    QVERIFY(sum.exposed_communication_s <= sum.communication_time_s * (1 + 1e-12));
    QVERIFY(Near(sum.compute_time_s + sum.exposed_communication_s + sum.idle_time_s, sum.step_time_s, 1e-9));
    QVERIFY(sum.mfu > 0 && sum.mfu <= 1);
    QVERIFY(Near(sum.mfu, model_flops / (sum.step_time_s * 16 * topo.chip().device_peak_flops()), 1e-9));
    size_t comm_events = 0;
    for (const TimelineEvent& e : s.run.classes[0].events) comm_events += e.stream == Stream::kCommunication;
    QCOMPARE(comm_events, s.run.collectives.size());
    QVERIFY(!s.run.collectives.empty());
    std::array<int64_t, kNumMemoryCategories> max_by{};
    for (const MemorySample& ms : s.run.classes[0].memory)
      for (int k = 0; k < kNumMemoryCategories; ++k) max_by[k] = std::max(max_by[k], ms.bytes[k]);
    QVERIFY(max_by[static_cast<int>(MemoryCategory::kParameters)] > 0);
    QVERIFY(max_by[static_cast<int>(MemoryCategory::kOptimizerState)] > 0);
    QVERIFY(max_by[static_cast<int>(MemoryCategory::kActivations)] > 0);
    QVERIFY(max_by[static_cast<int>(MemoryCategory::kGradients)] > 0);
    QVERIFY(!s.run.classes[0].peak_buffers.empty());
    QCOMPARE(s.run.inputs.mesh_text, std::string("X=4,Y=4"));
    QCOMPARE(s.run.inputs.chip_preset, std::string("tpu-v4"));
    QVERIFY(!s.run.inputs.module_hash.empty());
    // The collectives-early schedule runs the same work.
    o.program.schedule = ScheduleKind::kCollectivesEarly;
    Simulation e = Run(*p->module, topo, o);
    QVERIFY(Near(e.run.summary.total_flops, sum.total_flops));
    QCOMPARE(e.run.collectives.size(), s.run.collectives.size());
  }

  // CollectiveTimingMemo (simulator/collective_timing.h): simulations sharing one give exactly
  // the figures they give alone, on several topologies (its keys hold the topology), and the
  // second simulation of a program finds every collective in it.
  void CollectiveMemoChangesNothing() {
    auto p = PartitionedZooStep();
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    const std::vector<Topology> topologies = {TopologyFor("tpu-v4", "X=4,Y=4"), TopologyFor("tpu-v4", "X=16"),
                                              TopologyFor("tpu-v3", "X=4,Y=4")};
    std::vector<Simulation> alone;
    for (const Topology& topo : topologies) alone.push_back(Run(*p->module, topo));
    // The topologies time the program differently (else the keys would not need them).
    QVERIFY(alone[0].run.summary.step_time_s != alone[1].run.summary.step_time_s);
    SimulationOptions o;
    o.collective_memo = std::make_shared<CollectiveTimingMemo>();
    for (int round = 0; round < 2; ++round) {
      for (size_t k = 0; k < topologies.size(); ++k) {
        const int64_t misses = o.collective_memo->misses();
        Simulation s = Run(*p->module, topologies[k], o);
        QCOMPARE(s.run.summary.step_time_s, alone[k].run.summary.step_time_s);
        QCOMPARE(s.run.summary.peak_memory_bytes, alone[k].run.summary.peak_memory_bytes);
        QCOMPARE(s.run.summary.exposed_communication_s, alone[k].run.summary.exposed_communication_s);
        QVERIFY(s.run.collectives == alone[k].run.collectives);
        if (round == 1) QCOMPARE(o.collective_memo->misses(), misses);  // every collective found
      }
    }
    QVERIFY(o.collective_memo->hits() >= static_cast<int64_t>(alone[0].stats.distinct_collectives));
    // The same step at twice the batch: its collectives over replica groups are the first one's
    // at other sizes, kept at one byte, so only its collective-permutes (kept at their size) can
    // be new to the memo; the figures are still those it gives alone.
    auto twice = PartitionedZooStep(nullptr, "32");
    QVERIFY2(twice.ok(), twice.ok() ? "" : twice.error().message.c_str());
    const Simulation twice_alone = Run(*twice->module, topologies[0]);
    QVERIFY(twice_alone.run.summary.step_time_s > alone[0].run.summary.step_time_s);
    int64_t permutes = 0, resized = 0;
    for (const CollectiveRecord& c : twice_alone.run.collectives) {
      permutes += c.kind == "collective-permute";
      for (const CollectiveRecord& d : alone[0].run.collectives)
        resized += c.kind == d.kind && c.replica_groups == d.replica_groups && c.bytes != d.bytes;
    }
    QVERIFY(resized > 0);
    const int64_t misses_before = o.collective_memo->misses();
    const Simulation twice_memo = Run(*twice->module, topologies[0], o);
    QCOMPARE(twice_memo.run.summary.step_time_s, twice_alone.run.summary.step_time_s);
    QVERIFY(twice_memo.run.collectives == twice_alone.run.collectives);
    QVERIFY(o.collective_memo->misses() - misses_before <= permutes);
    // A memo over its byte budget empties itself and still gives the same figures.
    o.collective_memo = std::make_shared<CollectiveTimingMemo>(1);
    Simulation tiny = Run(*p->module, topologies[0], o);
    QCOMPARE(tiny.run.summary.step_time_s, alone[0].run.summary.step_time_s);
    QVERIFY(o.collective_memo->bytes() > 1 || alone[0].stats.distinct_collectives <= 1);
  }

  // SimulationOptions::timelines off (the strategy search's candidates; their programs are built
  // without names, ExecProgramOptions::names): the same summary, collectives and per-class peaks,
  // without the classes' events, memory samples and peak buffers — on a partitioned step that
  // fits, and on a step rematerialised under a low HBM.
  void FiguresWithoutTimelinesAreTheSame() {
    auto p = PartitionedZooStep();
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    auto step = ZooBuild("transformer", {{"layers", "3"}, {"optimizer", "adam"}, {"mesh_x", "1"}, {"mesh_y", "1"}});
    QVERIFY2(step.ok(), step.ok() ? "" : step.error().message.c_str());
    const Topology one = TopologyFor("tpu-v4", "X=1");
    const int64_t peak = Run(**step, one).run.summary.peak_memory_bytes;
    auto tight_chip = ChipPreset("tpu-v4");
    QVERIFY(tight_chip.ok());
    tight_chip->hbm_bytes = 0.9 * static_cast<double>(peak);  // 90% of the step's peak
    auto mesh = DeviceMesh::Parse("X=1");
    QVERIFY(mesh.ok());
    auto tight = Topology::ForMesh(IdealRoofline(tight_chip.value()), mesh.value());
    QVERIFY(tight.ok());
    const std::vector<std::pair<const Module*, const Topology*>> cases = {
        {p->module.get(), nullptr}, {step->get(), &tight.value()}};
    const Topology fits = TopologyFor("tpu-v4", "X=4,Y=4");
    for (const auto& [module, given] : cases) {
      const Topology& topo = given ? *given : fits;
      const Simulation with = Run(*module, topo);
      SimulationOptions o;
      o.timelines = false;
      const Simulation without = Run(*module, topo, o);
      QVERIFY(with.run.summary == without.run.summary);
      QVERIFY(with.run.collectives == without.run.collectives);
      QCOMPARE(without.stats.rematerialized_values, with.stats.rematerialized_values);
      QCOMPARE(with.stats.rematerialized_values > 0, given != nullptr);  // the low HBM rematerialises
      QVERIFY(without.run.Validate().ok());
      int64_t peak_with = 0, peak_without = 0;
      bool detail_with = false;
      for (const DeviceClass& c : with.run.classes) {
        peak_with = std::max(peak_with, c.peak_memory_bytes);
        detail_with = detail_with || (!c.events.empty() && c.memory.size() > 1 && !c.peak_buffers.empty());
      }
      for (const DeviceClass& c : without.run.classes) {
        peak_without = std::max(peak_without, c.peak_memory_bytes);
        QVERIFY(c.events.empty());
        QVERIFY(c.memory.size() <= 1);
        QVERIFY(c.peak_buffers.empty());
      }
      QVERIFY(detail_with);
      QCOMPARE(peak_without, peak_with);
      QCOMPARE(without.run.num_devices(), with.run.num_devices());
    }
  }

  void CliSimulate() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string hlo = WriteTemp(dir, "c1.hlo", kC1);
    const QString db = dir.filePath("runs.sqlite"), trace = dir.filePath("t.json"), csv = dir.filePath("t.csv");
    CliResult r = RunCli({"simulate", QString::fromStdString(hlo), "--chip", "tpu-v5e", "--mesh", "X=8,Y=4", "--db", db,
                          "--trace", trace, "--csv", csv});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QRegularExpression last("^step_time_us: (\\d+\\.\\d+) peak_memory_bytes: (\\d+)$");
    auto match = last.match(LastLine(r.out));
    QVERIFY2(match.hasMatch(), qPrintable(LastLine(r.out)));
    QVERIFY(std::fabs(match.captured(1).toDouble() - 559.241) < 0.01);  // validation C1, no wraparound
    QCOMPARE(match.captured(2).toLongLong(), 33554432LL);
    QVERIFY(QFile::exists(trace));
    QVERIFY(QFile::exists(csv));
    auto store = RunStore::Open(db.toStdString(), RunStore::OpenMode::kOpenExisting);
    QVERIFY(store.ok());
    auto runs = store->ListRuns();
    QVERIFY(runs.ok());
    QCOMPARE(runs->size(), size_t(1));
    QVERIFY(std::fabs((*runs)[0].summary.step_time_s * 1e6 - match.captured(1).toDouble()) < 0.001);

    // --json: one JSON object, then the last line.
    r = RunCli({"simulate", QString::fromStdString(hlo), "--chip", "tpu-v5e", "--mesh", "X=8,Y=4", "--json"});
    QCOMPARE(r.code, 0);
    const QStringList lines = r.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 2);
    QJsonParseError err;
    const QJsonDocument doc = QJsonDocument::fromJson(lines[0].toUtf8(), &err);
    QVERIFY2(doc.isObject(), qPrintable(err.errorString()));
    QCOMPARE(doc.object().value("num_devices").toInt(), 32);
    QCOMPARE(doc.object().value("peak_memory_bytes").toDouble(), 33554432.0);

    // No wraparound forced on a 4-axis already without it: same; with wraparound forced, faster.
    r = RunCli({"simulate", QString::fromStdString(hlo), "--chip", "tpu-v5e", "--mesh", "X=8,Y=4", "--wraparound"});
    QCOMPARE(r.code, 0);
    QVERIFY(last.match(LastLine(r.out)).captured(1).toDouble() < 400);

    // Bad input: exit 2 with a message.
    r = RunCli({"simulate", QString::fromStdString(hlo), "--mesh", "X=8,Y=4"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("--chip"));
    r = RunCli({"simulate", QString::fromStdString(hlo), "--chip", "tpu-v99", "--mesh", "X=8,Y=4"});
    QCOMPARE(r.code, 2);
    r = RunCli({"simulate", QString::fromStdString(hlo), "--chip", "tpu-v5e", "--mesh", "X=4"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("32 devices"));
    // A module annotated for 16 devices on a mesh of 4: the error says what it is written for.
    const std::string for16 = WriteTemp(dir, "for16.hlo",
                                        "HloModule a, num_partitions=16\n"
                                        "ENTRY %main (p: f32[16,16]) -> f32[16,16] {\n"
                                        "  %p = f32[16,16] parameter(0), sharding={devices=[4,4]<=[16]}\n"
                                        "  ROOT %n = f32[16,16] negate(%p), sharding={devices=[4,4]<=[16]}\n}\n");
    r = RunCli({"simulate", QString::fromStdString(for16), "--chip", "tpu-v5e", "--mesh", "X=2,Y=2"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("partitioning for 4 devices failed") &&
                 r.err.contains("written for num_partitions=16; --mesh X=2,Y=2 has 4 devices"),
             qPrintable(r.err));
    r = RunCli({"simulate", QString::fromStdString(for16), "--chip", "tpu-v5e", "--mesh", "X=4,Y=4"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    r = RunCli({"simulate", dir.filePath("missing.hlo"), "--chip", "tpu-v5e", "--mesh", "X=4"});
    QCOMPARE(r.code, 2);
    const std::string bad = WriteTemp(dir, "bad.hlo", "HloModule broken\nENTRY %main {\n");
    r = RunCli({"simulate", QString::fromStdString(bad), "--chip", "tpu-v5e", "--mesh", "X=4"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("bad.hlo"));
    // A misspelt option is named, by every command (not "expected exactly one FILE.hlo").
    for (const QStringList& args : {QStringList{"simulate", QString::fromStdString(hlo), "--chip", "tpu-v5e", "--mesh", "X=8,Y=4", "--meshh", "1"},
                                    QStringList{"partition", QString::fromStdString(hlo), "--mesh", "X=8,Y=4"},
                                    QStringList{"check", QString::fromStdString(hlo), "--mesh", "X=8,Y=4"},
                                    QStringList{"runs", "list", dir.filePath("runs.db"), "--mesh", "X=8,Y=4"}}) {
      r = RunCli(args);
      QCOMPARE(r.code, 2);
      QVERIFY2(r.err.contains("unknown or incomplete option '--me"), qPrintable(r.err));
    }

    // An annotated (unpartitioned) module is propagated and partitioned first.
    auto zoo = ZooBuild("transformer-layer", {{"mesh_x", "2"}, {"mesh_y", "2"}});
    QVERIFY(zoo.ok());
    const std::string annotated = WriteTemp(dir, "layer.hlo", PrintHloModule(**zoo));
    r = RunCli({"simulate", QString::fromStdString(annotated), "--chip", "tpu-v5e", "--mesh", "X=2,Y=2"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY(r.out.contains("partitioned for 4 devices"));
    QVERIFY(last.match(LastLine(r.out)).hasMatch());
  }
};

QTEST_APPLESS_MAIN(TestEngine)
#include "test_engine.moc"
