// The simulator's pipelining and rematerialisation accounting (simulator/pipeline_accounting.h,
// RunSummary's bubble / recompute / raw utilisation; GSPMD Tables 4 and 5): pipeline loops found
// from the shift's collective-permute (chains for GPipe, rings for the circular schedule, not a halo
// exchange), each device's position along the flow, the padded iterations of each device, exact
// bubble and recompute FLOPs and times on small hand-written pipelined programs, the remat markers,
// MFU against the raw utilisation, the zoo's pipelined Transformer end to end, and the CLI's
// `simulate` printing the figures.
#include <QtCore/QJsonDocument>
#include <QtCore/QJsonObject>
#include <QtCore/QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "core/ir/hlo_text.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "core/zoo/pipelined_transformer.h"
#include "simulator/compute_cost.h"
#include "simulator/engine.h"
#include "simulator/hardware.h"
#include "simulator/pipeline_accounting.h"
#include "simulator/schedule.h"
#include "simulator/topology.h"
#include "tests/cli_test_support.h"
#include "tests/zoo_partitioning.h"
#include "core/zoo/zoo.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"

using namespace shardscope;
using namespace shardscope::sim;
using shardscope::testing::CliResult;
using shardscope::testing::RunCli;

namespace {

std::unique_ptr<Module> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test.hlo");
  if (!m.ok()) qFatal("parse: %s", m.error().message.c_str());
  return std::move(m).value();
}

Topology TopologyFor(const char* mesh_text) {
  auto chip = ChipPreset("tpu-v5e");
  if (!chip.ok()) qFatal("chip: %s", chip.error().message.c_str());
  auto mesh = DeviceMesh::Parse(mesh_text);
  if (!mesh.ok()) qFatal("mesh: %s", mesh.error().message.c_str());
  auto t = Topology::ForMesh(IdealRoofline(chip.value()), mesh.value());
  if (!t.ok()) qFatal("topology: %s", t.error().message.c_str());
  return std::move(t).value();
}

Simulation Run(const Module& m, const Topology& topo) {
  auto s = Simulate(m, topo);
  if (!s.ok()) qFatal("simulate: %s", s.error().message.c_str());
  return std::move(s).value();
}

std::string PairsText(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::string s = "{";
  for (size_t k = 0; k < pairs.size(); ++k)
    s += (k ? ",{" : "{") + std::to_string(pairs[k].first) + "," + std::to_string(pairs[k].second) + "}";
  return s + "}";
}

// A pipelined loop on a mesh (L=4, X=2) (device 2l + x): T iterations, each a "stage" dot and a
// dot marked as recomputed (op_name ".../recompute/..."), then the buffer shifted by `pairs`;
// `extra` adds instructions to the body (before the root; may use %r).
std::string LoopProgram(int64_t trips, const std::vector<std::pair<int64_t, int64_t>>& pairs, const std::string& extra = "") {
  const std::string t = "(s32[], f32[128,128])";
  return "HloModule pipe, num_partitions=8\n"
         "%body (p: " + t + ") -> " + t + " {\n"
         "  %p = " + t + " parameter(0)\n"
         "  %i = s32[] get-tuple-element(%p), index=0\n"
         "  %x = f32[128,128] get-tuple-element(%p), index=1\n"
         "  %one = s32[] constant(1)\n"
         "  %i2 = s32[] add(%i, %one)\n"
         "  %y = f32[128,128] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
         "  %r = f32[128,128] dot(%y, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
         "metadata={op_name=\"backward/recompute/layer0/dot\"}\n" +
         extra +
         "  %s = f32[128,128] collective-permute(%r), source_target_pairs=" + PairsText(pairs) + "\n"
         "  ROOT %t = " + t + " tuple(%i2, %s)\n}\n"
         "%cond (p: " + t + ") -> pred[] {\n"
         "  %p = " + t + " parameter(0)\n"
         "  %i = s32[] get-tuple-element(%p), index=0\n"
         "  %n = s32[] constant(" + std::to_string(trips) + ")\n"
         "  ROOT %c = pred[] compare(%i, %n), direction=LT\n}\n"
         "ENTRY %main (x: f32[128,128]) -> f32[128,128] {\n"
         "  %x = f32[128,128] parameter(0)\n"
         "  %zero = s32[] constant(0)\n"
         "  %init = " + t + " tuple(%zero, %x)\n"
         "  %w = " + t + " while(%init), condition=%cond, body=%body\n"
         "  %o = f32[128,128] get-tuple-element(%w), index=1\n"
         "  ROOT %last = f32[128,128] dot(%o, %o), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
}

// Stage l -> l + 1 along L in both X columns (GPipe's shift); with `ring`, also L-1 -> 0.
std::vector<std::pair<int64_t, int64_t>> Chain(bool ring, bool backward = false) {
  std::vector<std::pair<int64_t, int64_t>> p;
  for (int64_t x = 0; x < 2; ++x)
    for (int64_t l = 0; l < 4; ++l) {
      if (!ring && l == 3) continue;
      const int64_t a = 2 * l + x, b = 2 * ((l + 1) % 4) + x;
      p.emplace_back(backward ? b : a, backward ? a : b);
    }
  return p;
}

// The iteration of "body/y[3]" (-1 without one).
int64_t IterationOf(const std::string& name) {
  const auto open = name.rfind('[');
  const auto close = name.rfind(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return -1;
  return std::stoll(name.substr(open + 1, close - open - 1));
}

constexpr double kDotFlops = 2.0 * 128 * 128 * 128;

}  // namespace

class TestPipelineAccounting : public QObject {
  Q_OBJECT

 private slots:
  // The one rule (PaddedIteration) and its closed form (BubbleShareEstimate), which the strategy
  // search uses before simulating. GPipe, 4 stages x 6 microbatches: T = N + L - 1 = 9 iterations;
  // stage p works on microbatch t - p in iterations p .. p + 5 and on padding in the other 3, so the
  // bubble share is (L - 1) / (N + L - 1) = 3/9 (GSPMD §3.3).
  void paddedIterationRule() {
    const int64_t L = 4, T = 9;
    for (int64_t p = 0; p < L; ++p) {
      int64_t padded = 0;
      for (int64_t t = 0; t < T; ++t) {
        const bool real = t >= p && t - p < 6;
        QCOMPARE(PaddedIteration(p, L, T, t), !real);
        padded += PaddedIteration(p, L, T, t) ? 1 : 0;
      }
      QCOMPARE(padded, L - 1);
      QVERIFY(!PaddedIteration(p, L, T, -1));
      QVERIFY(!PaddedIteration(p, L, T, T));  // the condition's last evaluation
    }
    QCOMPARE(BubbleShareEstimate(L, T), 3.0 / 9.0);
    PipelinedTransformerConfig c;
    c.stages = 4;
    c.microbatches = 6;
    c.layers = 8;
    QCOMPARE(PipelineIterations(c), T);
    // Not a pipeline: one stage, or fewer iterations than stages.
    QCOMPARE(BubbleShareEstimate(1, 9), 0.0);
    QCOMPARE(BubbleShareEstimate(4, 3), 0.0);
    QVERIFY(!PaddedIteration(0, 4, 3, 0));
  }

  // The remat markers: the zoo's "recompute" scope, XLA's ".remat" clones, JAX's remat/checkpoint
  // name stack; and words that merely contain them do not count.
  void rematMarkers() {
    auto m = Parse(R"(HloModule marks
ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4] parameter(0)
  %zoo = f32[4] negate(%a), metadata={op_name="backward/recompute/layer0/attention/dot"}
  %xla = f32[4] negate(%zoo)
  %xla.remat = f32[4] negate(%xla)
  %dot.7.remat2 = f32[4] negate(%xla.remat)
  %jax = f32[4] negate(%dot.7.remat2), metadata={op_name="jit(step)/transpose(jvp(rematted_computation))/dot_general"}
  %ckpt = f32[4] negate(%jax), metadata={op_name="jit(step)/checkpoint/mul"}
  %plain = f32[4] negate(%ckpt), metadata={op_name="forward/layer0/recomputed_norm/mul"}
  ROOT %remat_like = f32[4] negate(%plain), metadata={op_name="backward/layer0/dot"}
}
)");
    const Computation& e = *m->entry();
    QVERIFY(IsRematerialization(*e.Find("zoo")));
    QVERIFY(!IsRematerialization(*e.Find("xla")));
    QVERIFY(IsRematerialization(*e.Find("xla.remat")));
    QVERIFY(IsRematerialization(*e.Find("dot.7.remat2")));
    QVERIFY(IsRematerialization(*e.Find("jax")));
    QVERIFY(IsRematerialization(*e.Find("ckpt")));
    QVERIFY(!IsRematerialization(*e.Find("plain")));
    QVERIFY(!IsRematerialization(*e.Find("remat_like")));
    QVERIFY(!IsRematerialization(*e.Find("a")));
  }

  // GPipe's shift (chains 0->2->4->6, 1->3->5->7), N = 3 microbatches through L = 4 stages: T = 6
  // iterations; stage l works on real data in iterations l .. l + 2 and on padding in the other 3.
  // Exact: bubble FLOPs = 8 devices x 3 iterations x the two dots; recompute FLOPs = 8 x 6 x one
  // dot; the bubble time of each device is the sum of its compute events in its padded
  // iterations; MFU = raw x (1 - wasted / executed).
  void gpipeChainBubbleIsExact() {
    auto m = Parse(LoopProgram(6, Chain(false)));
    Topology topo = TopologyFor("L=4,X=2");
    Simulation s = Run(*m, topo);
    const RunSummary& sum = s.run.summary;
    QCOMPARE(sum.pipeline_stages, int64_t{4});
    QCOMPARE(sum.bubble_flops, 8 * 3 * 2 * kDotFlops);
    QCOMPARE(sum.recompute_flops, 8 * 6 * kDotFlops);
    QCOMPARE(sum.total_flops, 8 * (6 * 2 + 1) * kDotFlops);
    // Bubble time from the timelines, device by device: stage l = device / 2.
    double expected_bubble = 0, expected_recompute = 0;
    for (int64_t d = 0; d < 8; ++d) {
      const int64_t stage = d / 2;
      for (const TimelineEvent& e : s.run.DeviceTimeline(d)) {
        if (e.stream != Stream::kCompute) continue;
        if (e.instruction.rfind("body/r[", 0) == 0) expected_recompute += e.duration_s;
        const int64_t t = IterationOf(e.instruction);
        if (t < 0 || t >= 6) continue;  // outside the loop, or the condition's last evaluation
        if (t < stage || t > stage + 2) expected_bubble += e.duration_s;
      }
    }
    QVERIFY(expected_bubble > 0);
    QVERIFY(std::fabs(sum.bubble_time_s - expected_bubble / 8) <= 1e-15);
    QVERIFY(std::fabs(sum.recompute_time_s - expected_recompute / 8) <= 1e-15);
    // The dots dominate: the bubble is 3 of 6 iterations' dots (the adds and compares are tiny).
    // (dot(x, x) reads its one operand once and writes its result.)
    const double t_dot = ComputeCost(kDotFlops, 2.0 * 128 * 128 * 4, topo.chip());
    QVERIFY(sum.bubble_time_s >= 3 * 2 * t_dot);
    QVERIFY(sum.bubble_time_s < 3 * 2 * t_dot * 1.05);
    const double peak = topo.chip().device_peak_flops() * 8;
    QCOMPARE(sum.raw_flops_utilization, sum.total_flops / (sum.step_time_s * peak));
    const double useful = sum.total_flops - sum.bubble_flops - (sum.recompute_flops - 8 * 3 * kDotFlops);
    QVERIFY(std::fabs(sum.mfu - useful / (sum.step_time_s * peak)) <= 1e-12 * sum.mfu);
    QVERIFY(sum.mfu < sum.raw_flops_utilization);
    // Shares of the step, and the summary text.
    QCOMPARE(sum.bubble_share(), sum.bubble_time_s / sum.step_time_s);
    const std::string text = DescribeSimulation(s);
    QVERIFY2(text.find("pipeline bubbles:") != std::string::npos, text.c_str());
    QVERIFY2(text.find("4 stages") != std::string::npos, text.c_str());
    QVERIFY2(text.find("raw FLOPS utilisation:") != std::string::npos, text.c_str());
  }

  // The structure itself: positions along the flow for a chain, a ring (circular), the reverse
  // ring (the backward loop: data enters at the last stage), and which iterations are padded.
  void positionsAlongTheFlow() {
    Topology topo = TopologyFor("L=4,X=2");
    struct Case {
      const char* name;
      std::vector<std::pair<int64_t, int64_t>> pairs;
      bool ring;
      std::vector<int64_t> position;  // by device
    };
    const std::vector<Case> cases = {
        {"chain", Chain(false), false, {0, 0, 1, 1, 2, 2, 3, 3}},
        {"ring", Chain(true), true, {0, 0, 1, 1, 2, 2, 3, 3}},
        {"reverse chain", Chain(false, true), false, {3, 3, 2, 2, 1, 1, 0, 0}},
        {"reverse ring", Chain(true, true), true, {3, 3, 2, 2, 1, 1, 0, 0}},
    };
    for (const Case& c : cases) {
      auto m = Parse(LoopProgram(9, c.pairs));
      auto program = BuildExecProgram(*m, topo.chip());
      QVERIFY(program.ok());
      const PipelineStructure p = FindPipelineStructure(*program, 8);
      QVERIFY2(p.pipelined(), c.name);
      QCOMPARE(p.loops.size(), size_t{1});
      QCOMPARE(p.loops[0].stages, int64_t{4});
      QCOMPARE(p.loops[0].trips, int64_t{9});
      QCOMPARE(p.loops[0].ring, c.ring);
      QCOMPARE(p.loops[0].position, c.position);
      // T = 9, P = 4: position p computes real data in iterations p .. p + 5.
      for (int64_t d = 0; d < 8; ++d)
        for (int64_t t = 0; t < 9; ++t) {
          const int64_t pos = c.position[static_cast<size_t>(d)];
          QCOMPARE(p.loops[0].Padded(d, t), t < pos || t > pos + 5);
        }
      QVERIFY(!p.loops[0].Padded(0, 9));  // the condition's last evaluation is no iteration
    }
  }

  // Not pipelines: a halo exchange (permutes both ways in one iteration), a loop shorter than the
  // chain, a permute that leaves devices out, and chains of different lengths.
  void notPipelines() {
    Topology topo = TopologyFor("L=4,X=2");
    auto pipelined = [&](const std::string& text) {
      auto m = Parse(text);
      auto program = BuildExecProgram(*m, topo.chip());
      if (!program.ok()) qFatal("%s", program.error().message.c_str());
      return FindPipelineStructure(*program, 8).pipelined();
    };
    QVERIFY(pipelined(LoopProgram(6, Chain(false))));
    const std::string back =
        "  %h = f32[128,128] collective-permute(%r), source_target_pairs=" + PairsText(Chain(false, true)) + "\n";
    QVERIFY(!pipelined(LoopProgram(6, Chain(false), back)));
    QVERIFY(!pipelined(LoopProgram(3, Chain(false))));
    QVERIFY(!pipelined(LoopProgram(6, {{0, 2}, {2, 4}, {4, 6}})));
    QVERIFY(!pipelined(LoopProgram(6, {{0, 2}, {2, 4}, {4, 6}, {1, 3}, {3, 5}})));
    // A program without loops: no bubble, MFU as before (every FLOP useful), raw = MFU.
    auto m = Parse(R"(HloModule flat, num_partitions=8
ENTRY %main (x: f32[128,128]) -> f32[128,128] {
  %x = f32[128,128] parameter(0)
  ROOT %d = f32[128,128] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)");
    Simulation s = Run(*m, topo);
    QCOMPARE(s.run.summary.pipeline_stages, int64_t{0});
    QCOMPARE(s.run.summary.bubble_time_s, 0.0);
    QCOMPARE(s.run.summary.recompute_time_s, 0.0);
    QCOMPARE(s.run.summary.mfu, s.run.summary.raw_flops_utilization);
  }

  // A loop nested in a pipeline iteration belongs to that iteration: its ops are bubble work in
  // the padded iterations of the outer loop.
  void nestedLoopOpsBelongToTheIteration() {
    const std::string t = "(s32[], f32[128,128])";
    const std::string inner =
        "%ibody (q: " + t + ") -> " + t + " {\n  %q = " + t + " parameter(0)\n  %j = s32[] get-tuple-element(%q), index=0\n"
        "  %v = f32[128,128] get-tuple-element(%q), index=1\n  %one = s32[] constant(1)\n  %j2 = s32[] add(%j, %one)\n"
        "  %u = f32[128,128] dot(%v, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT %o = " + t + " tuple(%j2, %u)\n}\n"
        "%icond (q: " + t + ") -> pred[] {\n  %q = " + t + " parameter(0)\n  %j = s32[] get-tuple-element(%q), index=0\n"
        "  %n = s32[] constant(2)\n  ROOT %c = pred[] compare(%j, %n), direction=LT\n}\n";
    const std::string extra =
        "  %z = s32[] constant(0)\n  %it = " + t + " tuple(%z, %r)\n"
        "  %iw = " + t + " while(%it), condition=%icond, body=%ibody\n";
    auto m = Parse("HloModule pipe, num_partitions=8\n" + inner +
              LoopProgram(6, Chain(false), extra).substr(std::string("HloModule pipe, num_partitions=8\n").size()));
    Simulation s = Run(*m, TopologyFor("L=4,X=2"));
    // Per padded iteration: the two dots of the body and the inner loop's two.
    QCOMPARE(s.run.summary.bubble_flops, 8 * 3 * 4 * kDotFlops);
  }

  // The zoo's pipelined Transformer (GPipe and circular, with rematerialisation) partitioned on
  // (L, X, Y) = (4, 1, 2), simulated: the forward and backward loops are found with 4 stages;
  // every iteration does the same FLOPs, so the bubble is exactly (L - 1) / T of the loops' FLOPs;
  // the recomputed FLOPs are exactly the forward loop's (backward re-runs the stage's layers).
  void zooPipelineBubbleAndRecompute_data() {
    QTest::addColumn<QString>("schedule");
    QTest::newRow("gpipe") << "gpipe";
    QTest::newRow("circular") << "circular";
  }
  void zooPipelineBubbleAndRecompute() {
    QFETCH(QString, schedule);
    // (Numerical verification of this model is tests/test_spmd_pipelining.cpp's.)
    auto spmd = testing::PartitionZooUnverified("pipelined-transformer",
                                                {{"stages", "4"}, {"mesh_x", "1"}, {"mesh_y", "2"}, {"microbatches", "4"},
                                                 {"layers", "8"}, {"schedule", schedule.toStdString()}, {"remat", "1"}});
    QVERIFY2(spmd.ok(), spmd.ok() ? "" : spmd.error().message.c_str());
    const Module& program_module = *spmd->module;
    Topology topo = TopologyFor("L=4,X=1,Y=2");
    Simulation s = Run(program_module, topo);
    const RunSummary& sum = s.run.summary;
    QCOMPARE(sum.pipeline_stages, int64_t{4});
    PipelinedTransformerConfig c;
    c.stages = 4;
    c.microbatches = 4;
    c.layers = 8;
    c.schedule = schedule == "circular" ? PipelineSchedule::kCircular : PipelineSchedule::kGPipe;
    const int64_t T = PipelineIterations(c);
    // FLOPs of the events of each loop on device 0 (every device runs the same program).
    double forward = 0, backward = 0, recomputed = 0;
    for (const TimelineEvent& e : s.run.DeviceTimeline(0)) {
      if (e.stream != Stream::kCompute) continue;
      if (e.instruction.rfind("forward_body", 0) == 0) forward += e.flops;
      if (e.instruction.rfind("backward_body", 0) == 0) backward += e.flops;
    }
    auto program = BuildExecProgram(program_module, topo.chip());
    QVERIFY(program.ok());
    for (const ExecOp& op : program->ops)
      if (op.recompute) recomputed += op.flops;
    QVERIFY(forward > 0 && backward > 0);
    const double rel = 1e-12;
    QVERIFY2(std::fabs(sum.recompute_flops - 8 * recomputed) <= rel * sum.recompute_flops, "recompute");
    QVERIFY2(std::fabs(recomputed - forward) <= rel * forward,
             (std::to_string(recomputed) + " recomputed vs forward " + std::to_string(forward)).c_str());
    const double expected_bubble = 8.0 * (forward + backward) * 3.0 / static_cast<double>(T);
    QVERIFY2(std::fabs(sum.bubble_flops - expected_bubble) <= 1e-9 * expected_bubble,
             (std::to_string(sum.bubble_flops) + " vs " + std::to_string(expected_bubble)).c_str());
    QVERIFY(sum.bubble_time_s > 0 && sum.recompute_time_s > 0);
    QVERIFY(sum.mfu < sum.raw_flops_utilization);
  }

  // `shardscope-cli simulate` prints the figures, as text and in --json.
  void cliSimulatePrintsThem() {
    QTemporaryDir dir;
    const QString hlo = dir.filePath("pipe.hlo");
    {
      QFile f(hlo);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QByteArray::fromStdString(LoopProgram(6, Chain(false))));
    }
    CliResult text = RunCli({"simulate", hlo, "--chip", "tpu-v5e", "--mesh", "L=4,X=2", "--no-partition"});
    QVERIFY2(text.code == 0, qPrintable(text.err + text.out));
    QVERIFY2(text.out.contains("pipeline bubbles:"), qPrintable(text.out));
    QVERIFY2(text.out.contains("recompute:"), qPrintable(text.out));
    QVERIFY2(text.out.contains("raw FLOPS utilisation:"), qPrintable(text.out));
    CliResult json = RunCli({"simulate", hlo, "--chip", "tpu-v5e", "--mesh", "L=4,X=2", "--no-partition", "--json"});
    QVERIFY2(json.code == 0, qPrintable(json.err + json.out));
    const QJsonObject o = QJsonDocument::fromJson(json.out.section('\n', 0, 0).toUtf8()).object();
    QCOMPARE(o.value("pipeline_stages").toInt(), 4);
    QVERIFY(o.value("bubble_time_s").toDouble() > 0);
    QVERIFY(o.value("bubble_share").toDouble() > 0 && o.value("bubble_share").toDouble() < 1);
    QVERIFY(o.value("recompute_time_s").toDouble() > 0);
    QVERIFY(o.value("raw_flops_utilization").toDouble() > o.value("mfu").toDouble());
  }
};

QTEST_GUILESS_MAIN(TestPipelineAccounting)
#include "test_pipeline_accounting.moc"
