// The item models under QAbstractItemModelTester (hotspot's practice), with their contents checked.
#include <QAbstractItemModelTester>
#include <QColor>
#include <QSortFilterProxyModel>
#include <QtTest>

#include "core/sharding/mesh.h"
#include "views/document.h"
#include "views/item_models.h"
#include "views/sharding_style.h"

using namespace shardscope;
using namespace shardscope::views;

namespace {

const bool kOffscreen = [] {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  return true;
}();

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
    Document doc;
    InstructionTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSortFilterProxyModel proxy;
    proxy.setSourceModel(&model);
    QAbstractItemModelTester proxy_tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setDocument(&doc);
    QCOMPARE(model.rowCount(), 0);
    QVERIFY(doc.loadHloText(kModule, "models.hlo").ok());
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
    QCOMPARE(model.index(0, InstructionTableModel::kBytesPerDevice).data().toString(), QString("1.00 KiB"));
    QCOMPARE(model.index(0, InstructionTableModel::kSharding).data(Qt::DecorationRole).value<QColor>(),
             ShardingFillColor(*s, QGuiApplication::palette()));
    QCOMPARE(model.index(0, InstructionTableModel::kSharding).data(Qt::ToolTipRole).toString(),
             QString::fromStdString(s->ToString()));
    QCOMPARE(model.index(0, InstructionTableModel::kName).data(InstructionTableModel::kIdRole).toLongLong(), x);

    // Filtering through the proxy keeps working while the module is replaced.
    proxy.setFilterKeyColumn(-1);
    proxy.setFilterFixedString("reduce");
    QCOMPARE(proxy.rowCount(), 1);
    QVERIFY(doc.waitUntilIdle(60000));
    QVERIFY(doc.loadHloText(kModule, "again.hlo").ok());
    QCOMPARE(model.rowCount(), 6);
    QCOMPARE(model.index(0, InstructionTableModel::kOrigin).data().toString(), QString("none"));
    QVERIFY(doc.waitUntilIdle(60000));
  }

  void collectiveTable() {
    CollectiveTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model.rowCount(), 0);
    auto row = [](const char* origin, const char* inst, const char* kind, int64_t bytes, const char* groups,
                  const char* reason, std::vector<std::vector<int64_t>> parsed) {
      CollectiveInfo c;
      c.origin = origin, c.instruction = inst, c.kind = kind, c.bytes_per_device = bytes;
      c.replica_groups = groups, c.reason = reason, c.groups = std::move(parsed);
      return c;
    };
    model.setCollectives({row("dot.1", "all-reduce.3", "all-reduce", 2048, "{{0,1},{2,3}}", "dot: contracting dim sharded",
                              {{0, 1}, {2, 3}}),
                          row("w", "all-gather.1", "all-gather", 512, "[2,2]<=[4]", "reshard", {{0, 1}, {2, 3}})});
    // Seen from device 3 the groups column shows its own group; switching back shows them all.
    model.setDevice(3);
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("{2,3} (1 of 2 groups)"));
    model.setDevice(-1);
    // No estimate yet: a dash.
    QCOMPARE(model.index(0, CollectiveTableModel::kTime).data().toString(), QString("\u2013"));
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.index(0, CollectiveTableModel::kKind).data().toString(), QString("all-reduce"));
    QCOMPARE(model.index(0, CollectiveTableModel::kBytes).data().toString(), QString("2.00 KiB"));
    QCOMPARE(model.index(1, CollectiveTableModel::kGroups).data().toString(), QString("[2,2]<=[4]"));
    QCOMPARE(model.at(1)->origin, std::string("w"));
    QVERIFY(model.at(2) == nullptr);
    model.setCollectives({});
    QCOMPARE(model.rowCount(), 0);
  }

  void runHistory() {
    RunHistoryModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setRuns({Run(1, "baseline", 0.0015, 3 * 1024 * 1024, 0.512), Run(2, "attempt 2", 2.5, 1536, 0.1)});
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.index(0, RunHistoryModel::kStepTime).data().toString(), QString("1.50 ms"));
    QCOMPARE(model.index(1, RunHistoryModel::kStepTime).data().toString(), QString("2.50 s"));
    QCOMPARE(model.index(0, RunHistoryModel::kPeakMemory).data().toString(), QString("3.00 MiB"));
    QCOMPARE(model.index(1, RunHistoryModel::kPeakMemory).data().toString(), QString("1.50 KiB"));
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

  void formatting() {
    QCOMPARE(FormatBytes(512), QString("512 B"));
    QCOMPARE(FormatBytes(1536), QString("1.50 KiB"));
    QCOMPARE(FormatBytes(int64_t{64} << 30), QString("64.0 GiB"));
    QCOMPARE(FormatSeconds(0.25), QString("250 ms"));
    QCOMPARE(FormatSeconds(12.5e-9), QString("12.5 ns"));
  }
};

QTEST_MAIN(TestGuiModels)
#include "test_gui_models.moc"
