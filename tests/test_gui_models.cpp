// The item models under QAbstractItemModelTester (hotspot's practice), with their contents checked.
#include <QAbstractItemModelTester>
#include <QColor>
#include <QSortFilterProxyModel>
#include <QtTest>

#include "core/base/units.h"
#include "core/ir/hlo_text.h"
#include "core/sharding/mesh.h"
#include "gui_test_support.h"
#include "views/document_model.h"
#include "views/item_models.h"
#include "views/sharding_style.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

const char* kModule = R"(HloModule models, num_partitions=4

add_f32 {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT s = f32[] add(p0, p1)
}

ENTRY main {
  x = f32[8,128] parameter(0)
  zero = f32[] constant(0)
  ROOT r = f32[8] reduce(x, zero), dimensions={1}, to_apply=add_f32
}
)";

RunOverview Run(int64_t id, const std::string& label, double step, int64_t peak, double mfu) {
  RunOverview r;
  r.id = id;
  r.label = label;
  r.created_unix_ms = 1700000000000 + id;
  r.inputs.mesh_text = "X=4,Y=4";
  r.inputs.chip_preset = "TPU v4";
  r.summary.step_time_s = step;
  r.summary.peak_memory_bytes = peak;
  r.summary.mfu = mfu;
  return r;
}

}  // namespace

class TestGuiModels : public QObject {
  Q_OBJECT

 private slots:
  void instructionTable() {
    Session session;
    DocumentModel& doc = *session.document();
    InstructionTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSortFilterProxyModel proxy;
    proxy.setSourceModel(&model);
    QAbstractItemModelTester proxy_tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setDocument(&doc);
    QCOMPARE(model.rowCount(), 0);
    QVERIFY(session.loadHloText(kModule, "models.hlo").ok());
    // Entry first (x, zero, r), then the reducer (p0, p1, s).
    QCOMPARE(model.rowCount(), 6);
    QCOMPARE(model.columnCount(), int(InstructionTableModel::kColumnCount));
    QCOMPARE(model.index(0, InstructionTableModel::kName).data().toString(), QString("x"));
    QCOMPARE(model.index(2, InstructionTableModel::kOpcode).data().toString(), QString("reduce"));
    QCOMPARE(model.index(3, InstructionTableModel::kName).data().toString(), QString("add_f32/p0"));
    QCOMPARE(model.index(0, InstructionTableModel::kShape).data().toString(), QString("f32[8,128]"));
    QCOMPARE(model.index(0, InstructionTableModel::kOrigin).data().toString(), QString("none"));
    QCOMPARE(model.index(0, InstructionTableModel::kBytesPerDevice).data(InstructionTableModel::kSortRole).toLongLong(),
             qint64{8 * 128 * 4});

    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    const int64_t x = doc.findInstruction("x")->id();
    AxisAssignment a;
    a.dim_axes = {{}, {0, 1}};  // x[I, J_XY]: columns split 4 ways
    auto s = MeshShard(2, doc.mesh(), a);
    QVERIFY(s.ok());
    QVERIFY(doc.annotate(x, *s));
    QVERIFY(changed.count() >= 1);
    QCOMPARE(model.idAt(0), x);
    QCOMPARE(model.rowOf(x), 0);
    QCOMPARE(model.index(0, InstructionTableModel::kSharding).data().toString(), QString("[I, J_XY]"));
    QCOMPARE(model.index(0, InstructionTableModel::kOrigin).data().toString(), QString("user"));
    QCOMPARE(model.index(0, InstructionTableModel::kLocalShape).data().toString(), QString("f32[8,32]"));
    QCOMPARE(model.index(0, InstructionTableModel::kBytesPerDevice).data(InstructionTableModel::kSortRole).toLongLong(),
             qint64{8 * 32 * 4});
    QCOMPARE(model.index(0, InstructionTableModel::kBytesPerDevice).data().toString(), QString("1.02 kB"));
    QCOMPARE(model.index(0, InstructionTableModel::kSharding).data(Qt::DecorationRole).value<QColor>(),
             ShardingFillColor(*s, QGuiApplication::palette()));
    QCOMPARE(model.index(0, InstructionTableModel::kSharding).data(Qt::ToolTipRole).toString(),
             QString::fromStdString(s->ToString()));
    QCOMPARE(model.index(0, InstructionTableModel::kName).data(InstructionTableModel::kIdRole).toLongLong(), x);

    // Filtering through the proxy keeps working while the module is replaced.
    proxy.setFilterKeyColumn(-1);
    proxy.setFilterFixedString("reduce");
    QCOMPARE(proxy.rowCount(), 1);
    QVERIFY(WaitUntilIdle(session));
    QVERIFY(session.loadHloText(kModule, "again.hlo").ok());
    QCOMPARE(model.rowCount(), 6);
    QCOMPARE(model.index(0, InstructionTableModel::kOrigin).data().toString(), QString("none"));
    QVERIFY(WaitUntilIdle(session));
  }

  void collectiveTable() {
    CollectiveTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model.rowCount(), 0);
    // A partitioned program with two inserted collectives: groups written out and in iota form.
    auto spmd = ParseHloModule(R"(HloModule spmd, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[512] parameter(0)
  all-reduce.3 = f32[512] all-reduce(p), replica_groups={{0,1},{2,3}}, to_apply=add
  q = f32[128] parameter(1)
  all-gather.1 = f32[256] all-gather(q), replica_groups=[2,2]<=[4], dimensions={0}
  ROOT t = (f32[512], f32[256]) tuple(all-reduce.3, all-gather.1)
}
)", "spmd.hlo");
    QVERIFY2(spmd.ok(), spmd.ok() ? "" : spmd.error().message.c_str());
    auto program = std::make_shared<PartitionResult>();
    program->module = std::move(spmd).value();
    program->collectives = {{"dot.1", "all-reduce.3", Opcode::kAllReduce, 2048, "{{0,1},{2,3}}", "dot: contracting dim sharded"},
                            {"w", "all-gather.1", Opcode::kAllGather, 512, "[2,2]<=[4]", "reshard"}};
    CollectiveCost cost;
    cost.time_s = 12.5e-6;
    cost.algorithm = "bidirectional ring";
    model.setProgram(program, {cost, std::nullopt}, "tpu-v4");
    // Who takes part, by XLA's group modes: both forms give {0,1} and {2,3}.
    QCOMPARE(model.participants(0), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    QCOMPARE(model.participants(1), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    // Seen from device 3 the groups column shows its own group; switching back shows them all.
    model.setDevice(3);
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("{2,3} (1 of 2 groups)"));
    model.setDevice(-1);
    // The estimate in the units convention; no estimate: a dash.
    QCOMPARE(model.index(0, CollectiveTableModel::kTime).data().toString(), QString::fromUtf8("12.5 \u00B5s"));
    QVERIFY(model.index(0, CollectiveTableModel::kTime).data(Qt::ToolTipRole).toString().contains("bidirectional ring"));
    QCOMPARE(model.index(1, CollectiveTableModel::kTime).data().toString(), QString("\u2013"));
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.index(0, CollectiveTableModel::kKind).data().toString(), QString("all-reduce"));
    QCOMPARE(model.index(0, CollectiveTableModel::kBytes).data().toString(), QString("2.05 kB"));
    QCOMPARE(model.index(1, CollectiveTableModel::kGroups).data().toString(), QString("[2,2]<=[4]"));
    QCOMPARE(model.at(1)->origin, std::string("w"));
    QVERIFY(model.at(2) == nullptr);
    model.clear();
    QCOMPARE(model.rowCount(), 0);
  }

  void runHistory() {
    RunHistoryModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setRuns({Run(1, "baseline", 0.0015, 3 * 1024 * 1024, 0.512), Run(2, "attempt 2", 2.5, 1536, 0.1)});
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.index(0, RunHistoryModel::kStepTime).data().toString(), QString("1.50 ms"));
    QCOMPARE(model.index(1, RunHistoryModel::kStepTime).data().toString(), QString("2.50 s"));
    QCOMPARE(model.index(0, RunHistoryModel::kPeakMemory).data().toString(), QString("3.15 MB"));
    QCOMPARE(model.index(1, RunHistoryModel::kPeakMemory).data().toString(), QString("1.54 kB"));
    QCOMPARE(model.index(0, RunHistoryModel::kMfu).data().toString(), QString("51.2%"));
    QCOMPARE(model.index(0, RunHistoryModel::kMesh).data().toString(), QString("X=4,Y=4"));
    model.addRun(Run(7, "third", 1e-6 * 45.6, 0, 0));
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(model.index(2, RunHistoryModel::kStepTime).data().toString(), QString::fromUtf8("45.6 \u00B5s"));
    QCOMPARE(model.index(2, RunHistoryModel::kId).data(RunHistoryModel::kRunIdRole).toLongLong(), qint64{7});
    // Labels are editable in place; other columns are not.
    QVERIFY(model.flags(model.index(0, RunHistoryModel::kLabel)) & Qt::ItemIsEditable);
    QVERIFY(!(model.flags(model.index(0, RunHistoryModel::kStepTime)) & Qt::ItemIsEditable));
    QSignalSpy edited(&model, &RunHistoryModel::labelEdited);
    QVERIFY(model.setData(model.index(1, RunHistoryModel::kLabel), "renamed"));
    QCOMPARE(edited.count(), 1);
    QCOMPARE(edited.at(0).at(0).toLongLong(), qint64{2});
    QCOMPARE(model.index(1, RunHistoryModel::kLabel).data().toString(), QString("renamed"));
    QVERIFY(!model.setData(model.index(1, RunHistoryModel::kMfu), "x"));
    QVERIFY(model.setLabel(7, "seven"));
    QCOMPARE(model.index(2, RunHistoryModel::kLabel).data().toString(), QString("seven"));
    QVERIFY(model.removeRun(1));
    QVERIFY(!model.removeRun(1));
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.at(0)->id, int64_t{2});
  }

  // The views format through core/base/units.h: SI bytes and three significant digits.
  void formatting() {
    QCOMPARE(FormatBytes(512), std::string("512 B"));
    QCOMPARE(FormatBytes(1536), std::string("1.54 kB"));
    QCOMPARE(FormatBytes(8388608.0 * 3), std::string("25.2 MB"));
    QCOMPARE(FormatSeconds(0.25), std::string("250 ms"));
    QCOMPARE(FormatSeconds(12.5e-9), std::string("12.5 ns"));
    QCOMPARE(FormatSeconds(559e-6), std::string("559 \u00B5s"));
    QCOMPARE(BytesAxisUnit(3.2e9).unit, std::string("GB"));
    QCOMPARE(BytesAxisUnit(3.2e9).divisor, 1e9);
    QCOMPARE(BytesAxisUnit(999).unit, std::string("B"));
    QCOMPARE(SecondsAxisUnit(5.59e-4).unit, std::string("\u00B5s"));
    QCOMPARE(SecondsAxisUnit(0.02).divisor, 1e-3);
  }
};

QTEST_MAIN(TestGuiModels)
#include "test_gui_models.moc"
