// The whole-model issue: the compute calibration (one file per chip preset), matrix-unit tiling,
// peak memory against the chip's HBM, and the reproduce registry's small cases against the papers'
// published figures (GSPMD Table 2 = validation.md G4).
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <map>
#include <string>

#include "app/pipeline/reproduce.h"
#include "tests/cli_test_support.h"
#include "core/ir/hlo_text.h"
#include "simulator/compute_cost.h"
#include "simulator/hardware.h"
#include "simulator/run_store.h"

using namespace shardscope;
using namespace shardscope::sim;
using namespace shardscope::pipeline;

class TestReproduce : public QObject {
  Q_OBJECT

 private slots:
  void calibrationPerPreset() {
    auto v3 = ChipPreset("tpu-v3");
    QVERIFY(v3.ok());
    QCOMPARE(v3->mxu_tile, int64_t{128});
    QCOMPARE(v3->mxu_rows, int64_t{8});
    QVERIFY(v3->flops_efficiency > 0.5 && v3->flops_efficiency < 1.0);
    QVERIFY(v3->op_overhead > 0);
    QVERIFY2(v3->calibration.find("simulator/calibration/tpu_v3.cpp") != std::string::npos, v3->calibration.c_str());
    // Every preset is calibrated (its own file); v6e's matrix unit is 256 wide.
    for (const std::string& name : ChipPresetNames()) {
      auto c = ChipPreset(name);
      QVERIFY(c.ok());
      QVERIFY2(!c->calibration.empty(), name.c_str());
      QVERIFY(c->mxu_tile > 0);
    }
    QCOMPARE(ChipPreset("tpu-v6e")->mxu_tile, int64_t{256});
    // Custom chips take the same keys; the roofline adds the per-op overhead.
    auto custom = ParseChipSpecJson(R"({"base": "tpu-v3", "flops_efficiency": 0.5, "hbm_efficiency": 1, "op_overhead": 1e-5, "mxu_tile": 0})");
    QVERIFY2(custom.ok(), custom.ok() ? "" : custom.error().message.c_str());
    const double t = ComputeCost(1e12, 0, custom.value());
    QVERIFY(std::abs(t - (1e12 / (0.5 * 1.23e14) + 1e-5)) < 1e-12);
    auto bad = ParseChipSpecJson(R"({"base": "tpu-v3", "op_overhead": -1})");
    QVERIFY(!bad.ok());
  }

  void matrixUnitPadding() {
    auto m = ParseHloModule(R"(HloModule m
ENTRY e {
  a = bf16[8,100] parameter(0)
  b = bf16[100,200] parameter(1)
  ROOT d = bf16[8,200] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)");
    QVERIFY2(m.ok(), m.ok() ? "" : m.error().message.c_str());
    const Instruction* dot = (*m)->entry()->root();
    auto v3 = ChipPreset("tpu-v3").value();
    QCOMPARE(CountFlops(*dot).value(), 2.0 * 8 * 100 * 200);
    // Contracted 100 -> 128; of rows 8 x columns 200 the unit streams the 8 rows (a multiple of
    // 8) and pads the 200 columns to 256: 2 x 8 x 128 x 256.
    QCOMPARE(CountMxuFlops(*dot, v3).value(), 2.0 * 8 * 128 * 256);
    ChipSpec ideal = v3;
    ideal.mxu_tile = 0;
    ideal.mxu_rows = 0;
    QCOMPARE(CountMxuFlops(*dot, ideal).value(), 2.0 * 8 * 100 * 200);
  }

  void runStoreKeepsTheFit() {
    QTemporaryDir dir;
    auto store = RunStore::Open(dir.filePath("runs.sqlite").toStdString());
    QVERIFY(store.ok());
    RunResult run;
    run.inputs.module_name = "m";
    run.summary.num_devices = 1;
    run.summary.peak_memory_bytes = 20;
    run.summary.device_hbm_bytes = 16;
    QVERIFY(!run.summary.fits());
    QCOMPARE(run.summary.missing_bytes(), int64_t{4});
    auto id = store->SaveRun(run);
    QVERIFY2(id.ok(), id.ok() ? "" : id.error().message.c_str());
    auto list = store->ListRuns();
    QVERIFY(list.ok());
    QCOMPARE(list->back().summary.device_hbm_bytes, int64_t{16});
    QVERIFY(!list->back().summary.fits());
  }

  // GSPMD Table 2 (validation.md G4), the columns that simulate in seconds: 64B parameters on 128
  // and 512 TPU v3 cores, with the paper's 32000-word vocabulary (embedding and softmax, GSPMD
  // §5.1). The issue's bounds: step time within 15%, MFU within 5 points, peak memory within 10%
  // (+1.1% and -1.3%; without the vocabulary +0.6% and -1.7%, since cheap producers read only by
  // dots are fused into them instead of kept: relu(h) beside h; docs/reproduce.md).
  void gspmdTable2Small() {
    auto spec = FindReproduceCase("gspmd-table2");
    QVERIFY(spec.ok());
    QCOMPARE(spec.value()->columns.size(), size_t{7});
    for (const ReproduceColumn& c : spec.value()->columns) QCOMPARE(c.settings.at("vocab"), std::string("32000"));
    QVERIFY(!FindReproduceCase("gspmd-table99").ok());
    ReproduceOptions o;
    o.small_only = true;
    const ReproducedCase r = RunReproduceCase(*spec.value(), o);
    QCOMPARE(r.columns.size(), size_t{2});
    for (const ReproducedColumn& c : r.columns) {
      QVERIFY2(c.status.ok(), c.status.ok() ? "" : c.status.error().message.c_str());
      for (const ReproducedValue& v : c.values) {
        const std::string what = c.column->label + " " + std::string(ReproduceMetricName(v.published.metric)) + ": " +
                                 std::to_string(v.simulated) + " vs " + std::to_string(v.published.value);
        switch (v.published.metric) {
          case ReproduceMetric::kStepTime: QVERIFY2(v.within_tolerance, what.c_str()); break;
          case ReproduceMetric::kMfu: QVERIFY2(std::abs(v.difference_points) <= 5.0, what.c_str()); break;
          case ReproduceMetric::kPeakMemory: QVERIFY2(v.within_tolerance, what.c_str()); break;
          default: break;
        }
      }
      QCOMPARE(c.fits, static_cast<double>(c.peak_memory_bytes) <= c.device_hbm_bytes);
      QCOMPARE(c.device_hbm_bytes, 16.0 * 1024 * 1024 * 1024);  // a v3 core: half of the chip's 32 GiB
    }
    // Depth does not change the step at a fixed global batch: 512 devices x 4x the batch runs in
    // about the 128-device step (paper: 5.74 -> 6.25 s, +9%).
    const double grow = r.columns[1].step_time_s / r.columns[0].step_time_s;
    QVERIFY2(grow > 1.0 && grow < 1.15, std::to_string(grow).c_str());
    const std::string text = ReproduceTableText(r);
    QVERIFY(text.rfind("worst: ") != std::string::npos);
    QVERIFY(text.substr(text.rfind("worst: ")).find('%') != std::string::npos);
    QVERIFY(r.worst_percent <= 10.0);
    QVERIFY(ReproduceCsv(r).find("gspmd-table2,\"64B, 128 devices\",step time,5.74,") != std::string::npos);
  }

  // GSPMD Table 3 (section 5.1): the narrower Transformer (M=4096, H=16384, N=64, D=128, 64
  // layers) 2D finalized on six meshes, each on the v3 slice of its core count. The paper's
  // conclusion: at the same device count a smaller Y (in-layer model-parallel) axis is faster,
  // since activation communication is O(M) per layer against O(MH + MND) compute — (16,4) 3.10 s
  // against (4,16) 3.56 s on 64 cores, (16,8) 3.37 against (8,16) 3.43 on 128, (32,8) 3.36 against
  // (8,32) 5.71 on 256. The simulator reproduces the ordering, and five of six steps within 15%
  // (10-14% short; the (8,32) column 33% short, the Y=32 axis an open line of 16 chips:
  // docs/reproduce.md).
  void gspmdTable3SmallerYIsFaster() {
    auto spec = FindReproduceCase("gspmd-table3");
    QVERIFY(spec.ok());
    QCOMPARE(spec.value()->columns.size(), size_t{6});
    const ReproducedCase r = RunReproduceCase(*spec.value());
    QCOMPARE(r.columns.size(), size_t{6});
    std::map<std::string, double> step;
    int steps_within = 0;
    for (const ReproducedColumn& c : r.columns) {
      QVERIFY2(c.status.ok(), c.status.ok() ? "" : c.status.error().message.c_str());
      QCOMPARE(c.device_hbm_bytes, 16.0 * 1024 * 1024 * 1024);
      step[c.column->label] = c.step_time_s;
      for (const ReproducedValue& v : c.values)
        if (v.published.metric == ReproduceMetric::kStepTime && v.within_tolerance) ++steps_within;
    }
    QCOMPARE(steps_within, 5);
    const std::pair<const char*, const char*> faster[] = {
        {"(16,4) 64 devices", "(4,16) 64 devices"}, {"(16,8) 128 devices", "(8,16) 128 devices"}, {"(32,8) 256 devices", "(8,32) 256 devices"}};
    for (const auto& [small_y, large_y] : faster) {
      QVERIFY2(step.count(small_y) && step.count(large_y), small_y);
      QVERIFY2(step[small_y] < step[large_y], (std::string(small_y) + " " + std::to_string(step[small_y]) + " s vs " +
                                               large_y + " " + std::to_string(step[large_y]) + " s").c_str());
    }
  }

  // The whole-model issue's max-batch: Table 2's 64B model on 128 v3 cores. The paper ran batch 64,
  // which peaks at 15.47 GB (paper: 15.3 GB), 1.7 GB under a v3 core's 16 GiB. The next multiple
  // of the data-parallel axis (8), 72, fits too (16.99 GB, rematerialising a few weight converts);
  // 80 does not (17.37 GB: its extra activations are not cheap to recompute). Without the
  // vocabulary layers 16.90 and 17.28 GB. Before cheap producers were fused into the dots that
  // read them (relu(h) kept beside h), 64 was the largest.
  void maxBatchOfTable2() {
    auto spec = FindReproduceCase("gspmd-table2");
    QVERIFY(spec.ok());
    ReproduceColumn c = spec.value()->columns[0];
    auto r = FindMaxBatch(c, 8, 128);
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    QCOMPARE(r->batch % 8, int64_t{0});
    QVERIFY2(r->batch == 72, std::to_string(r->batch).c_str());
    QVERIFY(r->peak_memory_bytes <= r->device_hbm_bytes);
    QCOMPARE(r->next_batch, r->batch + 8);
    QVERIFY(r->next_peak_bytes > r->device_hbm_bytes);
    QVERIFY(!FindMaxBatch(c, 0, 128).ok());
  }

  // `shardscope-cli max-batch MODEL --mesh ...` builds the model for the mesh it is given (the
  // model's mesh_x / mesh_y / stages follow --mesh), so a mesh other than the zoo's default 4x4
  // runs; a pipelined model's batch is microbatches x microbatch.
  void maxBatchCliFollowsTheMesh() {
    using shardscope::testing::RunCli;
    // Table 2's 64B model on 128 cores from the command line: 72, as maxBatchOfTable2 finds with
    // the reproduction's settings (SGD, as there; here without the vocabulary layers).
    auto t = RunCli({"max-batch", "transformer", "--chip", "tpu-v3", "--mesh", "X=8,Y=16", "--cores-per-chip", "2",
                     "--set", "layers=32", "--set", "model=8192", "--set", "hidden=65536", "--set", "heads=128",
                     "--set", "head_dim=256", "--set", "seq=1024", "--set", "dtype=f32", "--set", "act_dtype=bf16",
                     "--set", "optimizer=sgd"});
    QVERIFY2(t.code == 0, qPrintable(t.out + t.err));
    QVERIFY2(t.out.contains("max_batch: 72\n"), qPrintable(t.out));
    // A pipelined model: the microbatch size is searched in multiples of X, the batch reported is
    // microbatches x microbatch.
    auto p = RunCli({"max-batch", "pipelined-transformer", "--chip", "tpu-v3", "--mesh", "L=2,X=2,Y=1", "--set", "layers=2",
                     "--set", "microbatches=4", "--limit", "64"});
    QVERIFY2(p.code == 0, qPrintable(p.out + p.err));
    QVERIFY2(p.out.contains("global batch = 4 microbatches x microbatch"), qPrintable(p.out));
    QVERIFY2(p.out.contains("every microbatch up to the limit 64 fits") && p.out.contains("max_batch: 256\n"), qPrintable(p.out));
    // A mesh the model cannot take is a usage error naming the axis.
    auto b = RunCli({"max-batch", "transformer", "--chip", "tpu-v3", "--mesh", "X=8,Z=16"});
    QCOMPARE(b.code, 2);
    QVERIFY2(b.err.contains("no setting for mesh axis 'Z'"), qPrintable(b.err));
  }

  // `max-batch FILE.hlo --dim x:0`: a module the zoo did not build (here the same Table 2 64B
  // model, written at batch 8 and read back as HLO) has its batch class scaled in multiples of 8 —
  // and finds the 72 the zoo's rebuilt models find (maxBatchCliFollowsTheMesh).
  void maxBatchOfAModuleFile() {
    using shardscope::testing::RunCli;
    QTemporaryDir dir;
    const QString file = dir.filePath("t2.hlo");
    auto built = RunCli({"zoo", "build", "transformer", "--set", "mesh_x=8", "--set", "mesh_y=16", "--set", "batch=8",
                         "--set", "layers=32", "--set", "model=8192", "--set", "hidden=65536", "--set", "heads=128",
                         "--set", "head_dim=256", "--set", "seq=1024", "--set", "dtype=f32", "--set", "act_dtype=bf16",
                         "--set", "optimizer=sgd", "-o", file});
    QVERIFY2(built.code == 0, qPrintable(built.err));
    auto t = RunCli({"max-batch", file, "--dim", "x:0", "--chip", "tpu-v3", "--mesh", "X=8,Y=16", "--cores-per-chip", "2"});
    QVERIFY2(t.code == 0, qPrintable(t.out + t.err));
    QVERIFY2(t.out.contains("x:0 = 80 does not fit") && t.out.contains("max_batch: 72\n"), qPrintable(t.out));
    auto bad = RunCli({"max-batch", file, "--dim", "y:0", "--chip", "tpu-v3", "--mesh", "X=8,Y=16", "--cores-per-chip", "2"});
    QCOMPARE(bad.code, 2);
    QVERIFY2(bad.err.contains("'y:0' is not a dimension of an entry parameter"), qPrintable(bad.err));
  }

  // `reproduce NAME --verify`: each zoo column's sharding checked numerically on its small twin
  // (app/pipeline/small_twin.h) before the table, whose last line stays "worst: P%".
  void reproduceVerifiesOnSmallTwins() {
    using shardscope::testing::RunCli;
    auto r = RunCli({"reproduce", "gspmd-table2", "--column", "64B, 128 devices", "--verify"});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("verify 64B, 128 devices: verified on a small twin, max |error| ") &&
                 r.out.contains("batch 64 -> 8") && r.out.contains("layers 32 -> 2"),
             qPrintable(r.out));
    QVERIFY2(r.out.trimmed().split('\n').last().startsWith("worst: "), qPrintable(r.out));
    QVERIFY(r.out.indexOf("verify 64B") < r.out.indexOf("worst: "));
  }

  // GSPMD Table 7, the hybrid sparse/dense MoE Transformer on (8,4), (16,8) and (32,16): the paper's
  // point is that the step time stays about constant as experts, batch and expert size grow with
  // the devices (2.12, 2.19, 2.08 s: the largest 5% above the smallest); the simulated steps are
  // 3.05, 3.19 and 3.12 s (5%; the test allows 12%: the (8,4) step moves most, with what it
  // recomputes to approach or meet the HBM limit), and the utilisation is within 5 points of the
  // paper's at each mesh beside the share recomputed to fit (below). The absolute step
  // is about +45%: the table does not give M, the layer count or the sequence, and the zoo's model
  // (our reading, docs/zoo.md) does about 1.5x the FLOPs the paper's utilisation implies; peak
  // memory is 1.3-1.5x the paper's (no rematerialisation in the zoo model; (16,8) and (32,16) fit
  // by the simulator's rematerialisation under the limit, and (8,4) too since windows read only by
  // dots are read in place, 4.8% of its step recomputed; docs/reproduce.md). (64,32) simulates 25% slower (communication 39% of its step) and is
  // not run here.
  void gspmdTable7Small() {
    auto spec = FindReproduceCase("gspmd-table7");
    QVERIFY(spec.ok());
    QCOMPARE(spec.value()->columns.size(), size_t{4});
    ReproduceOptions o;
    o.small_only = true;
    const ReproducedCase r = RunReproduceCase(*spec.value(), o);
    QCOMPARE(r.columns.size(), size_t{3});
    double lo = 1e9, hi = 0;
    for (const ReproducedColumn& c : r.columns) {
      QVERIFY2(c.status.ok(), c.status.ok() ? "" : c.status.error().message.c_str());
      lo = std::min(lo, c.step_time_s);
      hi = std::max(hi, c.step_time_s);
      for (const ReproducedValue& v : c.values) {
        const std::string what = c.column->label + " " + std::string(ReproduceMetricName(v.published.metric)) + ": " +
                                 std::to_string(v.simulated) + " vs " + std::to_string(v.published.value);
        // MFU counts the simulator's recompute under the HBM limit as lost time; the paper's runs
        // fit without it (12.3-12.9 GB): within 5 points beside that share. (8,4): 48.2% against
        // 55.3%, 4.8% of its step recomputed to fit (54.7% with --no-remat, which does not fit).
        if (v.published.metric == ReproduceMetric::kMfu)
          QVERIFY2(std::abs(v.difference_points) <= 5.0 + c.recompute_percent, what.c_str());
        if (v.published.metric == ReproduceMetric::kStepTime) {
          QVERIFY2(v.difference_percent > 30.0 && v.difference_percent < 60.0, what.c_str());
        }
      }
      QCOMPARE(c.values[2].published.metric, ReproduceMetric::kPeakMemory);
      QVERIFY2(static_cast<double>(c.peak_memory_bytes) > 1.3 * c.values[2].published.value, c.column->label.c_str());
    }
    QVERIFY2(hi / lo < 1.12, (std::to_string(lo) + " .. " + std::to_string(hi)).c_str());
  }

  // GSPMD Table 6 (validation.md G5), the 32-device column: GShard's MoE Transformer on a v3-32
  // slice (16 chips, 4x4). The paper's all-to-all takes 2% of the step; on the 4x4 slice the
  // simulated one takes 1.9% (7.0% when the 1-D mesh was laid on a 16x1 line of chips, whose one
  // middle link carried half of every all-to-all). The peak fits HBM by rematerialising (17.1 GB;
  // 18.17 GB and "does not fit" before the layout choice, simulator/buffer_layout.h, stopped padding
  // the [G,S,E] gating tensors' E = 32 to 128 lanes); the paper's 10.8 GB is left. The step is within
  // issue 15's 20% (1.16 s against 0.98 s, +18.8%; +32% before the producer fusion into dots and the
  // dots' output fusion of a scaled result, `scores * c`, whose constant the text declares after
  // the dot): docs/reproduce.md, gspmd-table6.
  void gspmdTable6Small() {
    auto spec = FindReproduceCase("gspmd-table6");
    QVERIFY(spec.ok());
    ReproduceOptions o;
    o.small_only = true;
    const ReproducedCase r = RunReproduceCase(*spec.value(), o);
    QCOMPARE(r.columns.size(), size_t{1});
    const ReproducedColumn& c = r.columns[0];
    QVERIFY2(c.status.ok(), c.status.ok() ? "" : c.status.error().message.c_str());
    QCOMPARE(c.column->slice, (std::vector<int64_t>{4, 4}));
    QVERIFY(c.fits);
    for (const ReproducedValue& v : c.values) {
      const std::string what = std::string(ReproduceMetricName(v.published.metric)) + ": " + std::to_string(v.simulated);
      if (v.published.metric == ReproduceMetric::kAllToAllShare) QVERIFY2(v.within_tolerance, what.c_str());
      if (v.published.metric == ReproduceMetric::kStepTime) {
        QVERIFY2(v.difference_percent > 10.0 && v.difference_percent < 20.0, what.c_str());
      }
    }
  }

  // validation.md C1-C8 through the registry (`reproduce book-collectives`): every collective within
  // 10% of the book's figure — for C1 with wraparound, C3, C4 and C6 the book's V / W times
  // (N - 1) / N, the exact ring over 4 devices validation.md asks for (the label says so); C8's
  // ratio is N / (4 (N - 1)) = 0.267 on a ring of 16 against the book's large-N 1/4.
  // tests/test_simulator_cost.cpp checks the same cases figure by figure.
  void bookCollectives() {
    auto spec = FindReproduceCase("book-collectives");
    QVERIFY(spec.ok());
    QCOMPARE(spec.value()->columns.size(), size_t{9});
    const ReproducedCase r = RunReproduceCase(*spec.value());
    QCOMPARE(r.columns.size(), size_t{9});
    QCOMPARE(r.checked, int64_t{9});
    QCOMPARE(r.within, int64_t{9});
    QVERIFY(r.worst_percent < 10.0);
    const ReproducedColumn& c1 = r.columns[0];
    QVERIFY(c1.status.ok());
    QCOMPARE(c1.values[0].published.value, 560e-6);
    QVERIFY(std::abs(c1.values[0].simulated - 3 * 2048.0 / 4 * 8192 * 2 / 4.5e10) < 1e-9);  // exact line: 559.2 us
    QVERIFY(r.columns[3].column->label.find("[book 23 us x 0.75]") != std::string::npos);
    QVERIFY(std::abs(r.columns[8].values[0].simulated - 16.0 / (4 * 15)) < 1e-9);
    QVERIFY(ReproduceTableText(r).find("C7 AllGather_X bf16[128], v4 4x4x4") != std::string::npos);
  }

  // GSPMD Table 8 (validation.md G6), spatial partitioning of the 3-D U-Net at image 128: the same
  // calibration gives the paper's utilisation (47.9% on one core, 43.5-43.8% partitioned) within 5
  // points at every partition count, the drop from one core to two included (47.2% -> 44.6%); the
  // step time is 30-38% short because the zoo's U-Net has fewer FLOPs than the paper's
  // (docs/reproduce.md), so the test holds that honest bound (-15% to -40%). Section 5.6's "15.7x
  // step time reduction on 16 partitions", issue 15's measure: 13.8x, within 15%.
  void gspmdTable8Small() {
    auto spec = FindReproduceCase("gspmd-table8");
    QVERIFY(spec.ok());
    ReproduceOptions o;
    o.small_only = true;
    const ReproducedCase r = RunReproduceCase(*spec.value(), o);
    QCOMPARE(r.columns.size(), size_t{5});
    QCOMPARE(r.columns[0].column->label, std::string("(1,1) image 128"));
    for (const ReproducedColumn& c : r.columns) {
      QVERIFY2(c.status.ok(), c.status.ok() ? "" : c.status.error().message.c_str());
      for (const ReproducedValue& v : c.values) {
        const std::string what = c.column->label + " " + std::string(ReproduceMetricName(v.published.metric)) + ": " +
                                 std::to_string(v.simulated);
        if (v.published.metric == ReproduceMetric::kMfu) QVERIFY2(std::abs(v.difference_points) <= 5.0, what.c_str());
        if (v.published.metric == ReproduceMetric::kStepTime) {
          QVERIFY2(v.difference_percent < -15.0 && v.difference_percent > -40.0, what.c_str());
        }
      }
    }
    // One device is one TensorCore of a v3 chip (Topology::ForMesh, WithCoresInUse): its MFU is
    // against one core's peak, and partitioning costs utilisation as in the paper.
    QVERIFY2(r.columns[0].mfu_percent > r.columns[1].mfu_percent + 1.0, std::to_string(r.columns[0].mfu_percent).c_str());
    const ReproducedColumn& sixteen = r.columns[4];
    QCOMPARE(sixteen.column->baseline, r.columns[0].column->label);
    const ReproducedValue& speedup = sixteen.values.back();
    QCOMPARE(speedup.published.metric, ReproduceMetric::kSpeedup);
    QVERIFY(std::abs(speedup.published.value - 2.99 / 0.19) < 1e-9);
    QVERIFY(std::abs(speedup.simulated - r.columns[0].step_time_s / sixteen.step_time_s) < 1e-9);
    QVERIFY2(speedup.within_tolerance, std::to_string(speedup.simulated).c_str());
    // Memory about halves with each doubling of the partitions (paper: 14.8 -> 7.9 -> 4.5 -> 2.7 GB,
    // 0.53x to 0.60x a step; simulated 14.65 -> 7.45 -> 3.85 -> 2.05 GB, 0.51x to 0.53x). One core
    // peaks at 20.0 GB (over its 16 GiB: rematerialisation under the limit stops there), the
    // paper's at 14.3 GB, below its two-core figure.
    for (size_t k = 2; k < r.columns.size(); ++k) {
      const double ratio = static_cast<double>(r.columns[k].peak_memory_bytes) / static_cast<double>(r.columns[k - 1].peak_memory_bytes);
      QVERIFY2(ratio > 0.45 && ratio < 0.62, std::to_string(ratio).c_str());
    }
    // With the activations laid out as XLA's layout assignment may (simulator/buffer_layout.h: the
    // channel dims of 32 and 64 not padded to 128 lanes when a spatial dim can take the lanes) and
    // a dot's or reduce's output fusion reading constants declared after it (docs/simulator-engine.md,
    // "Fusion"), the (1,2) and (1,4) peaks are within 10% of the paper's 14.8 and 7.9 GB (14.65 and
    // 7.45 GB; 18.66 and 10.52 GB before that fusion). The paper's smaller peaks shrink less than
    // ours ("TPU-specific padding ... does not scale linearly"): (1,16) 2.05 GB against 2.7 GB.
    for (size_t k = 1; k < 3; ++k) {
      const ReproducedValue& peak = r.columns[k].values[2];
      QCOMPARE(peak.published.metric, ReproduceMetric::kPeakMemory);
      QVERIFY2(peak.within_tolerance, (r.columns[k].column->label + ": " + std::to_string(peak.simulated)).c_str());
    }
  }
};

QTEST_APPLESS_MAIN(TestReproduce)
#include "test_reproduce.moc"
