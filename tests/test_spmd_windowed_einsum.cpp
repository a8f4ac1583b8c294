// Windowed einsum (partitioner/spmd/windowed_einsum.h): a dot whose plan all-gathers one operand
// runs as a loop of n - 1 iterations that multiply one window and pass it round the ring with a
// collective-permute, then the last window's product. Checked on the three kinds of windowed
// dimension (non-contracting, contracting, batch), even and uneven, numerically against the
// unpartitioned module; the threshold; and the simulated overlap of the transfers with the products.
#include <QtTest>
#include <QFile>
#include <QTemporaryDir>

#include <string>

#include "core/ir/hlo_text.h"
#include "simulator/engine.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"
#include "spmd_test_support.h"
#include "tests/cli_test_support.h"

using namespace shardscope;

namespace {

using testing::Find;

// x [8,16] by rows, w [16,N] by columns over 4 devices, the result by rows: the plan all-gathers w.
std::string NonContracting(int64_t n_cols) {
  return "HloModule nc, num_partitions=4\n\nENTRY main {\n"
         "  x = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}\n"
         "  w = f32[16," + std::to_string(n_cols) + "] parameter(1), sharding={devices=[1,4]<=[4]}\n"
         "  ROOT d = f32[8," + std::to_string(n_cols) + "] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
         "sharding={devices=[4,1]<=[4]}\n}\n";
}

PartitionResult Windowed(const std::string& hlo, int64_t threshold_mib, std::unique_ptr<Module>* original = nullptr) {
  testing::PartitionVerifyOptions o;
  o.spmd.windowed_einsum_threshold_mib = threshold_mib;
  o.seeds = {7, 8};
  std::string why;
  auto r = testing::PartitionAndVerify(hlo, 4, &why, o, original);
  if (!r) qFatal("%s", why.c_str());
  return std::move(*r);
}

}  // namespace

class TestSpmdWindowedEinsum : public QObject {
  Q_OBJECT
 private slots:
  // Off (the default) and under the threshold: the plan's all-gather. At the threshold: a loop.
  void thresholdDecides() {
    const std::string hlo = NonContracting(32);
    for (const int64_t threshold : {int64_t{-1}, int64_t{1}}) {  // w gathered is 2 kB, under 1 MiB
      const PartitionResult r = Windowed(hlo, threshold);
      QCOMPARE(Find(*r.module, Opcode::kAllGather).size(), size_t{1});
      QVERIFY(Find(*r.module, Opcode::kWhile).empty());
    }
    const PartitionResult r = Windowed(hlo, 0);
    QVERIFY(Find(*r.module, Opcode::kAllGather).empty());
    const auto loops = Find(*r.module, Opcode::kWhile);
    QCOMPARE(loops.size(), size_t{1});
    QVERIFY2(loops[0]->backend_config.find("\"n\":\"3\"") != std::string::npos, loops[0]->backend_config.c_str());
    // One collective-permute, in the loop's body: every device receives its ring successor's
    // window of w ([16,8]).
    const auto permutes = Find(*r.module, Opcode::kCollectivePermute);
    QCOMPARE(permutes.size(), size_t{1});
    QCOMPARE(permutes[0]->parent(), loops[0]->while_body());
    QCOMPARE(permutes[0]->shape().ToString(false), std::string("f32[16,8]"));
    const std::vector<std::pair<int64_t, int64_t>> ring = {{1, 0}, {2, 1}, {3, 2}, {0, 3}};
    QCOMPARE(permutes[0]->source_target_pairs, ring);
    QCOMPARE(r.collectives.size(), size_t{1});
    QVERIFY2(r.collectives[0].reason.find("windowed einsum: rhs window passed on (4 windows") == 0,
             r.collectives[0].reason.c_str());
    // The products write the result's column windows in place; the result keeps its shape.
    QCOMPARE(Find(*r.module, Opcode::kDot).size(), size_t{2});  // in the body and after the loop
    QCOMPARE(r.module->entry()->root()->shape().ToString(false), std::string("f32[2,32]"));
  }

  // Uneven windows: 30 columns over 4 devices are windows of 8, the last with 2 of padding; the
  // result is written into 32 columns and sliced to 30.
  void unevenNonContracting() {
    const PartitionResult r = Windowed(NonContracting(30), 0);
    QCOMPARE(Find(*r.module, Opcode::kWhile).size(), size_t{1});
    QCOMPARE(r.module->entry()->root()->shape().ToString(false), std::string("f32[2,30]"));
  }

  // w split along the contracted dim (18 rows over 4: windows of 5, 2 rows of padding): each step
  // multiplies x's matching 5 columns and adds; the padding of the last window is zeroed.
  void contractingWindowAddsPartialProducts() {
    const std::string hlo =
        "HloModule c, num_partitions=4\n\nENTRY main {\n"
        "  x = f32[8,18] parameter(0), sharding={devices=[4,1]<=[4]}\n"
        "  w = f32[18,32] parameter(1), sharding={devices=[4,1]<=[4]}\n"
        "  ROOT d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]<=[4]}\n}\n";
    const PartitionResult r = Windowed(hlo, 0);
    QVERIFY(Find(*r.module, Opcode::kAllGather).empty());
    QVERIFY(Find(*r.module, Opcode::kAllReduce).empty());
    const auto permutes = Find(*r.module, Opcode::kCollectivePermute);
    QCOMPARE(permutes.size(), size_t{1});
    QCOMPARE(permutes[0]->shape().ToString(false), std::string("f32[5,32]"));
    QCOMPARE(Find(*r.module, Opcode::kDynamicSlice).empty(), false);  // x's window of columns
  }

  // A batch dim: w split along the batch dim the result keeps whole.
  void batchWindowSlicesAndWrites() {
    const std::string hlo =
        "HloModule b, num_partitions=4\n\nENTRY main {\n"
        "  x = f32[6,8,16] parameter(0), sharding={devices=[1,4,1]<=[4]}\n"
        "  w = f32[6,16,32] parameter(1), sharding={devices=[4,1,1]<=[4]}\n"
        "  ROOT d = f32[6,8,32] dot(x, w), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
        "rhs_contracting_dims={1}, sharding={devices=[1,4,1]<=[4]}\n}\n";
    const PartitionResult r = Windowed(hlo, 0);
    QCOMPARE(Find(*r.module, Opcode::kWhile).size(), size_t{1});
    QCOMPARE(Find(*r.module, Opcode::kCollectivePermute)[0]->shape().ToString(false), std::string("f32[2,16,32]"));
    QCOMPARE(r.module->entry()->root()->shape().ToString(false), std::string("f32[6,2,32]"));
  }

  // XLA's order: with windowed einsum on, a loop that keeps one operand and the output as they
  // are comes before a plan that moves fewer bytes. x [128,128] by rows, w [128,1024] by columns,
  // the result by rows (x's): off, the plan gathers x (12288 elements per device) and moves the
  // result from column to row shards (24576), fewer than w's windows (98304). On, w travels window
  // by window, x and the result stay, and nothing else moves.
  void windowedLoopComesBeforeCheaperPlans() {
    const std::string hlo =
        "HloModule pref, num_partitions=4\n\nENTRY main {\n"
        "  x = f32[128,128] parameter(0), sharding={devices=[4,1]<=[4]}\n"
        "  w = f32[128,1024] parameter(1), sharding={devices=[1,4]<=[4]}\n"
        "  ROOT d = f32[128,1024] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]<=[4]}\n}\n";
    const PartitionResult off = Windowed(hlo, -1);
    QVERIFY(Find(*off.module, Opcode::kWhile).empty());
    bool gathers_x = false;
    for (const Instruction* ag : Find(*off.module, Opcode::kAllGather)) gathers_x |= ag->shape().ToString(false) == "f32[128,128]";
    QVERIFY2(gathers_x, "without the loop the cheaper plan gathers x");
    const PartitionResult on = Windowed(hlo, 0);
    QCOMPARE(Find(*on.module, Opcode::kWhile).size(), size_t{1});
    QCOMPARE(on.collectives.size(), size_t{1});
    QCOMPARE(Find(*on.module, Opcode::kCollectivePermute)[0]->shape().ToString(false), std::string("f32[128,256]"));
    QVERIFY(Find(*on.module, Opcode::kAllGather).empty());
    QVERIFY(Find(*on.module, Opcode::kAllToAll).empty());
  }

  // The windowed reduce-scatter: x and w both split along the contracted dim (over 4), the
  // result's columns over the same devices. Instead of the local product and a reduce-scatter,
  // each step multiplies x by w's columns of one output window, adds the partial sums received
  // from the ring successor and passes them on; after 4 steps a device holds its own columns,
  // summed. Even (64 columns: windows of 16) and uneven (62: w padded to 64, windows of 16).
  void windowedReduceScatterPassesPartialSums() {
    for (const int64_t cols : {int64_t{64}, int64_t{62}}) {
      const std::string hlo =
          "HloModule rs, num_partitions=4\n\nENTRY main {\n"
          "  x = f32[8,32] parameter(0), sharding={devices=[1,4]<=[4]}\n"
          "  w = f32[32," + std::to_string(cols) + "] parameter(1), sharding={devices=[4,1]<=[4]}\n"
          "  ROOT d = f32[8," + std::to_string(cols) + "] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
          "sharding={devices=[1,4]<=[4]}\n}\n";
      const PartitionResult off = Windowed(hlo, -1);
      QCOMPARE(Find(*off.module, Opcode::kWhile).size(), size_t{0});
      if (cols == 64) QCOMPARE(Find(*off.module, Opcode::kReduceScatter).size(), size_t{1});
      const PartitionResult r = Windowed(hlo, 0);
      const auto loops = Find(*r.module, Opcode::kWhile);
      QCOMPARE(loops.size(), size_t{1});
      QVERIFY2(loops[0]->backend_config.find("\"n\":\"3\"") != std::string::npos, loops[0]->backend_config.c_str());
      QVERIFY(Find(*r.module, Opcode::kReduceScatter).empty());
      QVERIFY(Find(*r.module, Opcode::kAllReduce).empty());
      QVERIFY(Find(*r.module, Opcode::kAllGather).empty());
      const auto permutes = Find(*r.module, Opcode::kCollectivePermute);
      QCOMPARE(permutes.size(), size_t{1});
      QCOMPARE(permutes[0]->parent(), loops[0]->while_body());
      QCOMPARE(permutes[0]->shape().ToString(false), std::string("f32[8,16]"));  // the partial sums of one window
      const std::vector<std::pair<int64_t, int64_t>> ring = {{1, 0}, {2, 1}, {3, 2}, {0, 3}};
      QCOMPARE(permutes[0]->source_target_pairs, ring);
      QVERIFY2(r.collectives[0].reason.find("windowed einsum: partial sums of 4 output windows") == 0,
               r.collectives[0].reason.c_str());
      QCOMPARE(r.module->entry()->root()->shape().ToString(false), std::string("f32[8,16]"));
    }
  }

  // XLA's max_windowed_einsum_iteration: a loop over more windows than the cap is not built.
  void iterationCapKeepsTheAllGather() {
    const std::string hlo = NonContracting(32);
    for (const int64_t cap : {int64_t{3}, int64_t{4}}) {
      testing::PartitionVerifyOptions o;
      o.spmd.windowed_einsum_threshold_mib = 0;
      o.spmd.windowed_einsum_max_iterations = cap;
      std::string why;
      auto r = testing::PartitionAndVerify(hlo, 4, &why, o);
      QVERIFY2(r, why.c_str());
      QCOMPARE(Find(*r->module, Opcode::kWhile).size(), size_t{cap >= 4 ? 1u : 0u});
      QCOMPARE(Find(*r->module, Opcode::kAllGather).size(), size_t{cap >= 4 ? 0u : 1u});
    }
  }

  // The CLI: --windowed-einsum-mib turns the loops on, --windowed-einsum-max-iterations caps their
  // windows, and the cap alone is refused (the loops are off without a threshold).
  void cliOptions() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString file = dir.filePath("nc.hlo");
    {
      QFile f(file);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QByteArray::fromStdString(NonContracting(32)));
    }
    auto loops = [&](const QStringList& extra) {
      auto r = testing::RunCli(QStringList{"partition", file, "--no-propagate"} + extra);
      if (r.code != 0) qFatal("%s", qPrintable(r.err));
      return r.out.count(" while(");
    };
    QCOMPARE(loops({}), 0);
    QCOMPARE(loops({"--windowed-einsum-mib", "0"}), 1);
    QCOMPARE(loops({"--windowed-einsum-mib", "0", "--windowed-einsum-max-iterations", "4"}), 1);
    QCOMPARE(loops({"--windowed-einsum-mib", "0", "--windowed-einsum-max-iterations", "3"}), 0);
    auto alone = testing::RunCli({"partition", file, "--windowed-einsum-max-iterations", "3"});
    QCOMPARE(alone.code, 2);
    QVERIFY2(alone.err.contains("needs --windowed-einsum-mib"), qPrintable(alone.err));
  }

  // On a 2-D mesh the ring runs within each group of the gathered axis: w's columns over Y (4),
  // x's rows over X (2); the windows travel among the 4 devices of each row.
  void ringStaysWithinTheGatheredAxis() {
    const std::string hlo =
        "HloModule m2, num_partitions=8\n\nENTRY main {\n"
        "  x = f32[64,16] parameter(0), sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}\n"
        "  w = f32[16,32] parameter(1), sharding={devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}\n"
        "  ROOT d = f32[64,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
        "sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}\n}\n";
    testing::PartitionVerifyOptions o;
    o.spmd.windowed_einsum_threshold_mib = 0;
    std::string why;
    auto r = testing::PartitionAndVerify(hlo, 8, &why, o);
    QVERIFY2(r, why.c_str());
    const auto permutes = Find(*r->module, Opcode::kCollectivePermute);
    QCOMPARE(permutes.size(), size_t{1});
    QCOMPARE(permutes[0]->source_target_pairs.size(), size_t{8});
    for (const auto& [from, to] : permutes[0]->source_target_pairs) QCOMPARE(from / 4, to / 4);
  }

  // Simulated: the transfers run beside the products, so less communication is exposed than with
  // the all-gather of w before the dot (the plan without the loop too); the same bytes move (n - 1
  // windows).
  void simulatedTransfersOverlapTheProducts() {
    const std::string hlo =
        "HloModule big, num_partitions=4\n\nENTRY main {\n"
        "  x = bf16[16384,8192] parameter(0), sharding={devices=[4,1]<=[4]}\n"
        "  w = bf16[8192,4096] parameter(1), sharding={devices=[1,4]<=[4]}\n"
        "  ROOT d = bf16[16384,4096] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
        "sharding={devices=[4,1]<=[4]}\n}\n";
    auto m = ParseHloModule(hlo);
    QVERIFY(m.ok());
    auto chip = sim::ChipPreset("tpu-v4");
    QVERIFY(chip.ok());
    auto mesh = DeviceMesh::Parse("X=4");
    QVERIFY(mesh.ok());
    auto topology = sim::Topology::ForMesh(*chip, *mesh, {}, {});
    QVERIFY(topology.ok());
    double exposed[2], step[2], moved[2];
    for (const int64_t threshold : {int64_t{-1}, int64_t{0}}) {
      SpmdOptions o;
      o.windowed_einsum_threshold_mib = threshold;
      auto p = PartitionModule(**m, o);
      QVERIFY(p.ok());
      auto s = sim::Simulate(*p->module, *topology);
      QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
      const size_t k = threshold < 0 ? 0 : 1;
      exposed[k] = s->run.summary.exposed_communication_s;
      step[k] = s->run.summary.step_time_s;
      moved[k] = s->run.summary.bytes_communicated;
    }
    QCOMPARE(moved[1], moved[0]);  // 3 windows of 16 MiB against an all-gather receiving 3 shards
    QVERIFY2(exposed[1] < 0.5 * exposed[0], qPrintable(QString("exposed %1 s windowed, %2 s gathered").arg(exposed[1]).arg(exposed[0])));
    QVERIFY2(step[1] < step[0], qPrintable(QString("step %1 s windowed, %2 s gathered").arg(step[1]).arg(step[0])));
  }
};

QTEST_APPLESS_MAIN(TestSpmdWindowedEinsum)
#include "test_spmd_windowed_einsum.moc"
