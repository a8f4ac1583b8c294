// Weight-update sharding's section 6.1 (paper 000_7bf40aea6196c6f5, Xu et al., "Automatic
// Cross-Replica Sharding of Weight Update in Data-Parallel Training"; validation.md W1), simulated
// on TPU v3 with each chip's two cores as replicas on the physical 2-D torus: the zoo's plain
// data-parallel training step at the paper's batch sizes and optimizers (Table 1), partitioned,
// rewritten by the pass and simulated before and after it.
//
// What the simulator reproduces (docs/weight-update-sharding.md, "Section 6.1 simulated"): with
// the calibrated compute (simulator/calibration) and the multi-input loop fusion
// (docs/simulator-engine.md: the replicated Adam update is one pass over the weight, gradient and
// moments) the Transformer cases meet the bounds; ResNet-50's 6% does not: its small LARS
// weights stay replicated one by one (the pass's per-tensor profitability rule); the paper's
// batched decision (batch_small_updates) shards them but its simulated gain is mostly the
// baseline's uncombined all-reduces: with XLA's all-reduce combiner on both programs it is 0.5%.
// That comparison is marked as an expected failure and reports when it is met.
#include <QtTest/QtTest>

#include <QProcess>
#include <QTemporaryDir>

#include <cmath>
#include <string>

#include "app/pipeline/weight_update_sharding_paper.h"
#include "tests/cli_test_support.h"

using namespace shardscope;
using shardscope::testing::RunCli;
using namespace shardscope::pipeline;

namespace {

const WeightUpdateShardingPaperCase& Case(const std::string& id) {
  static const std::vector<WeightUpdateShardingPaperCase> cases = WeightUpdateShardingPaperCases();
  for (const auto& c : cases)
    if (c.id == id) return c;
  qFatal("no case %s", id.c_str());
}

WeightUpdateShardingPaperRun Run(const std::string& id, const WeightUpdateShardingOptions& pass = {},
                                 const std::optional<AllReduceCombinerOptions>& combiner = std::nullopt) {
  auto r = RunWeightUpdateShardingPaperCase(Case(id), pass, combiner);
  if (!r.ok()) qFatal("%s", r.error().message.c_str());
  const WeightUpdateShardingPaperRun& x = *r;
  qInfo("%s (batched rule %s, all-reduce combiner %s):", id.c_str(), pass.batch_small_updates ? "on" : "off",
        combiner ? "on" : "off");
  qInfo("%s: step %.2f ms -> %.2f ms (%.1f%% shorter; paper: %.0f%%), peak %.2f GB -> %.2f GB, %lld of %lld all-reduces sharded",
        id.c_str(), x.before_s * 1e3, x.after_s * 1e3, 100 * x.reduction(), 100 * Case(id).paper_reduction,
        static_cast<double>(x.before_peak) / 1e9, static_cast<double>(x.after_peak) / 1e9,
        static_cast<long long>(x.sharded), static_cast<long long>(x.all_reduces));
  qInfo("%s: compute %.2f -> %.2f ms, communication %.2f -> %.2f ms (exposed %.2f -> %.2f ms)", id.c_str(),
        1e3 * x.before_compute_s, 1e3 * x.after_compute_s, 1e3 * x.before_communication_s, 1e3 * x.after_communication_s,
        1e3 * x.before_exposed_s, 1e3 * x.after_exposed_s);
  return x;
}

// "before weight-update sharding: step 177.3 us, ..." -> 177.3
double StepMicros(const QString& out, const QString& prefix) {
  for (const QString& line : out.split('\n')) {
    if (!line.startsWith(prefix + " weight-update sharding: step ")) continue;
    return line.section(' ', 4, 4).toDouble();
  }
  return -1;
}

}  // namespace

class TestWusPaper : public QObject {
  Q_OBJECT

 private slots:
  // The CLI surfaces on a small data-parallel Transformer (16 devices, Adam, 1 KiB shards allowed
  // so every weight matrix is sharded): partition writes the three step programs, verify checks
  // them composed against the plain program, simulate prints the step before and after.
  void cliSurfaces() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString dp = dir.filePath("dp.hlo"), out = dir.filePath("dp.wus.hlo");
    auto b = RunCli({"zoo", "build", "transformer", "--set", "annotations=data-parallel", "--set", "mesh_x=4", "--set", "mesh_y=4",
                     "--set", "batch=64", "--set", "backward=1", "--set", "optimizer=adam", "-o", dp});
    QVERIFY2(b.code == 0, qPrintable(b.err));
    const QStringList wus = {"--weight-update-sharding", "--min-shard-bytes", "1024"};
    auto p = RunCli(QStringList{"partition", dp, "-o", out} + wus);
    QVERIFY2(p.code == 0, qPrintable(p.err));
    QVERIFY(p.out.contains("weight-update sharding: 8 of 12 gradient all-reduces sharded"));
    QVERIFY(p.out.contains("layer1_wi (all-reduce all-reduce.11 in main): sharded"));
    for (const QString& f : {out, out + ".sharding.hlo", out + ".unsharding.hlo"}) QVERIFY2(QFile::exists(f), qPrintable(f));
    auto v = RunCli(QStringList{"verify", dp} + wus);
    QVERIFY2(v.code == 0, qPrintable(v.err));
    QVERIFY(v.out.contains("verdict: match"));
    auto s = RunCli(QStringList{"simulate", dp, "--chip", "tpu-v3", "--mesh", "X=4,Y=4"} + wus);
    QVERIFY2(s.code == 0, qPrintable(s.err));
    const double before = StepMicros(s.out, "before"), after = StepMicros(s.out, "after");
    QVERIFY2(before > 0 && after > 0, qPrintable(s.out));
    QVERIFY2(after < before, qPrintable(QString("%1 -> %2 us").arg(before).arg(after)));
  }

  // validation.md W1: Transformer on 1024 chips, 46.5 ms -> 25.6 ms (a 1.82x step-time ratio).
  void transformer1024Chips() {
    const auto& c = Case("wus-6.1-transformer-1024");
    const auto r = Run(c.id);
    qInfo("W1 simulated: %.1f ms -> %.1f ms (paper %.1f -> %.1f), peak %.2f -> %.2f GB", 1e3 * r.before_s, 1e3 * r.after_s,
          1e3 * c.paper_before_s, 1e3 * c.paper_after_s, r.before_peak / 1e9, r.after_peak / 1e9);
    // The pass shards the update of every large weight: the three matrices of each of the 16
    // layers (wqkv, wi, wout) with partial sharding over rows of 64 replicas; the rest (LayerNorm
    // scales, the attention output's 2 MiB bf16 gradient: a 32 KiB row shard) stay latency-bound.
    QVERIFY2(r.sharded >= 48, std::to_string(r.sharded).c_str());
    // The step without the pass: within 25% of the paper's 46.5 ms (39.3 ms; 72.9 ms while the
    // replicated Adam update was costed as its unfused elementwise ops).
    QVERIFY2(std::abs(r.before_s / c.paper_before_s - 1) < 0.25, std::to_string(r.before_s).c_str());
    // Faster with the pass, by at least the paper's 45%, and with less memory per device (the
    // weights and Adam's state kept sharded between steps).
    QVERIFY(r.reduction() >= c.paper_reduction);
    QVERIFY(r.after_peak < r.before_peak / 2);
    // The step with the pass: within 25% of the paper's 25.6 ms (21.0 ms).
    QVERIFY2(std::abs(r.after_s / c.paper_after_s - 1) < 0.25, std::to_string(r.after_s).c_str());
    // The ratio within 15% of the paper's 1.82x (1.93x).
    QVERIFY2(std::abs((r.before_s / r.after_s) / (c.paper_before_s / c.paper_after_s) - 1) < 0.15,
             std::to_string(r.before_s / r.after_s).c_str());
    // With the all-reduce combiner on both programs both steps get shorter (38.1 -> 33.9 ms and
    // 19.8 -> 16.9 ms: the LayerNorm and attention-output gradients' all-reduces are batched), the
    // ratio stays within 15% (2.01x); the step times leave the 25% (docs/weight-update-sharding.md,
    // "The all-reduce combiner").
    const auto k = Run(c.id, {}, AllReduceCombinerOptions{});
    QVERIFY(k.before_s < r.before_s);
    QVERIFY(k.after_s < r.after_s);
    QCOMPARE(k.sharded, r.sharded);
    QVERIFY2(std::abs((k.before_s / k.after_s) / (c.paper_before_s / c.paper_after_s) - 1) < 0.15,
             std::to_string(k.before_s / k.after_s).c_str());
  }

  // Paper section 6.1: Transformer on 16 chips (32 cores, batch 512), "in the range of 9%".
  void transformer16Chips() {
    const auto& c = Case("wus-6.1-transformer-16");
    const auto r = Run(c.id);
    QCOMPARE(r.sharded, int64_t(64));  // all four matrices of every layer: shards of 512 KiB and more
    QVERIFY(r.reduction() >= c.paper_reduction);
    QVERIFY2(r.reduction() < 1.5 * c.paper_reduction, std::to_string(r.reduction()).c_str());  // 9.1%
  }

  // `reproduce wus-6.1` (app/pipeline/reproduce.cpp): one row per published figure of section 6.1,
  // the paper's beside the simulated. W1 (validation.md W1): 46.5 ms and 25.6 ms within 25%, the
  // 1.82x ratio within 15%; 16 chips: "in the range of 9%" within 4.5 points; ResNet-50's 6% is
  // printed OUTSIDE its 1.5 points (see resnet50OnLars1024Chips).
  void reproduceCommand() {
    QTemporaryDir dir;
    const QString csv = dir.filePath("wus.csv");
    auto r = RunCli({"reproduce", "wus-6.1", "--csv", csv});
    QVERIFY2(r.code == 0, qPrintable(r.err + r.out));
    // "transformer 1024 chips step before pass  46.5 ms  39.3 ms  -15.4%  within 25%"
    auto row = [&](const QString& column, const QString& figure) -> QStringList {
      for (const QString& line : r.out.split('\n'))
        if (line.startsWith(column) && line.mid(23).startsWith(figure)) return line.mid(23 + figure.size()).split(' ', Qt::SkipEmptyParts);
      return {};
    };
    const QStringList before = row("transformer 1024 chips", "step before pass");
    QVERIFY2(before.size() >= 7, qPrintable(r.out));
    QCOMPARE(before[0] + " " + before[1], QString("46.5 ms"));
    QVERIFY2(std::abs(before[2].toDouble() / 46.5 - 1) < 0.25, qPrintable(before.join(' ')));
    QCOMPARE(before[5], QString("within"));
    const QStringList after = row("transformer 1024 chips", "step after pass");
    QVERIFY2(after.size() >= 7, qPrintable(r.out));
    QCOMPARE(after[0] + " " + after[1], QString("25.6 ms"));
    QVERIFY2(std::abs(after[2].toDouble() / 25.6 - 1) < 0.25, qPrintable(after.join(' ')));
    QCOMPARE(after[5], QString("within"));
    const QStringList ratio = row("transformer 1024 chips", "speedup");
    QVERIFY2(ratio.size() >= 5, qPrintable(r.out));
    QCOMPARE(ratio[0], QString("1.82x"));
    QVERIFY2(std::abs(ratio[1].chopped(1).toDouble() / 1.82 - 1) < 0.15, qPrintable(ratio.join(' ')));
    QCOMPARE(ratio[3], QString("within"));
    const QStringList small = row("transformer 16 chips", "step reduction");
    QVERIFY2(small.size() >= 6, qPrintable(r.out));  // 9.0% 9.1% +0.1 pts within 4.5 pts
    QCOMPARE(small[0], QString("9.0%"));
    QVERIFY2(std::abs(small[1].chopped(1).toDouble() - 9.0) <= 4.5, qPrintable(small.join(' ')));
    QCOMPARE(small[4], QString("within"));
    const QStringList resnet = row("resnet50 1024 chips", "step reduction");
    QVERIFY2(resnet.size() >= 6, qPrintable(r.out));
    QCOMPARE(resnet[0], QString("6.0%"));
    QCOMPARE(resnet[4], QString("OUTSIDE"));  // docs/weight-update-sharding.md says why
    // Each column also prints its two step times, and the CSV has the same rows.
    QVERIFY2(r.out.contains("transformer 1024 chips: step "), qPrintable(r.out));
    QVERIFY(r.out.contains("within tolerance: 4 of 5"));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(f.readAll());
    QVERIFY2(text.contains("wus-6.1,\"transformer 1024 chips\",step before pass,0.0465,"), qPrintable(text));
    QVERIFY(text.contains("wus-6.1,\"transformer 1024 chips\",speedup,"));
  }

  // Paper section 6.1: ResNet-50 with LARS on 1024 chips (2048 cores, batch 32768), "a 6% speedup".
  void resnet50OnLars1024Chips() {
    const auto& c = Case("wus-6.1-resnet50-1024");
    const auto r = Run(c.id);
    // The largest LARS weights (3x3x512x512 and 1x1 with 2048 channels: row shards of 64 KiB and
    // more) are sharded over rows of 64 replicas; the step gets shorter (0.9%: the fused LARS update
    // of four weights is little to save in a 58 ms step). BatchNorm normalises each core's 16
    // examples (bn_batch, as the reference TPU ResNet does): the only all-reduces are the 161
    // gradients' and the loss's.
    QCOMPARE(r.all_reduces, int64_t{161});
    QVERIFY2(r.sharded >= 4, std::to_string(r.sharded).c_str());
    QVERIFY2(r.reduction() > 0.0, std::to_string(r.reduction()).c_str());
    // With the batched profitability of section 5.2 (batch_small_updates) the small LARS weights
    // are decided in batches: all 161 all-reduces sharded, 24.5% shorter. Most of that gain is
    // latency the baseline pays for 161 separate all-reduces, which XLA's all-reduce combiner
    // batches in the paper's baseline as well.
    WeightUpdateShardingOptions batched;
    batched.batch_small_updates = true;
    const auto b = Run(c.id, batched);
    QCOMPARE(b.sharded, b.all_reduces);  // the small updates too, batch by batch
    QVERIFY(b.after_s < r.after_s);
    QVERIFY(b.after_peak <= r.after_peak);
    // With the all-reduce combiner (partitioner/all_reduce_combiner.h, 30 MiB) on both programs:
    // the baseline's 162 all-reduces become 2, 57.7 -> 47.6 ms; the pass then saves 0.7%
    // (per-tensor rule) and 8.4% (batched rule: the sharded updates of 161 weights, compute 47.4 ->
    // 42.6 ms). The latter is the paper's configuration (XLA combines the baseline's all-reduces;
    // section 5.2 batches the small updates), 2.4 points above its 6%; it is not the default
    // because on the Transformer of W1 it takes the step times out of their 25%
    // (docs/weight-update-sharding.md, "The all-reduce combiner").
    const auto rc = Run(c.id, {}, AllReduceCombinerOptions{});
    const auto bc = Run(c.id, batched, AllReduceCombinerOptions{});
    QVERIFY2(rc.before_s < 0.9 * r.before_s, std::to_string(rc.before_s).c_str());
    QVERIFY(rc.before_exposed_s < r.before_exposed_s / 2);
    QCOMPARE(rc.sharded, r.sharded);  // the pass decides before the combiner runs
    QCOMPARE(bc.sharded, b.sharded);
    QVERIFY2(rc.reduction() > 0.0, std::to_string(rc.reduction()).c_str());
    QVERIFY2(bc.reduction() < b.reduction() / 2, std::to_string(bc.reduction()).c_str());
    QVERIFY2(bc.reduction() > rc.reduction() + 0.05, std::to_string(bc.reduction()).c_str());
    QEXPECT_FAIL("", "0.9% shorter (24.5% with the batched rule; with the all-reduce combiner on both programs 0.7% "
                     "and 8.4%), not 6% within 1.5 points: the per-tensor rule keeps 157 small weights replicated, and "
                     "the batched rule's 24.5% is mostly the baseline's uncombined all-reduces; "
                     "docs/weight-update-sharding.md",
                 Continue);
    QVERIFY(std::abs(r.reduction() - c.paper_reduction) <= 0.015);
  }
};

QTEST_MAIN(TestWusPaper)
#include "test_wus_paper.moc"
