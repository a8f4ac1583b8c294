// Weight-update sharding in the GUI (paper 000; docs/weight-update-sharding.md): the toggle in the
// partitioned-program view re-partitions the data-parallel Transformer with the pass (the gradient
// all-reduces become reduce-scatters, the updated weights are all-gathered), the simulation panel
// shows the step before and after side by side, and the toggle is undoable and saved with the
// project.
#include <QCheckBox>
#include <QLabel>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QUndoStack>
#include <QtTest>

#include <algorithm>
#include <vector>

#include "app/gui/session.h"
#include "app/pipeline/sources.h"
#include "core/base/units.h"
#include "gui_test_support.h"
#include "simulator/hardware.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/mesh_view.h"
#include "views/partitioned_view.h"
#include "views/simulation_view.h"
#include "views/weight_update_panel.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

// A data-parallel Transformer (every weight replicated, the batch over the 2x2 mesh, Adam, bf16
// activations) whose matrices are large enough for the pass to shard them on the default chip: 2
// layers of model 512, feed-forward 2048.
bool LoadDataParallelTransformer(Session& session) {
  auto built = pipeline::BuildZooModel("transformer", {{"annotations", "data-parallel"}, {"layers", "2"}, {"batch", "8"},
                                                       {"seq", "64"}, {"model", "512"}, {"heads", "8"}, {"head_dim", "64"},
                                                       {"hidden", "2048"}, {"optimizer", "adam"}, {"act_dtype", "bf16"}, {"mesh_x", "2"},
                                                       {"mesh_y", "2"}});
  if (!built.ok()) {
    qWarning("%s", built.error().message.c_str());
    return false;
  }
  session.document()->setModule(std::move(built->module), built->mesh, "example", "transformer");
  return WaitUntilIdle(session, 120000);
}

int CountKind(const PartitionedProgram& p, Opcode kind) {
  int n = 0;
  for (const InsertedCollective& c : p.result->collectives) n += c.kind == kind;
  return n;
}

}  // namespace

class TestGuiWeightUpdate : public QObject {
  Q_OBJECT

 private slots:
  void toggleShardsTheUpdateAndComparesTheSteps() {
    if (sim::ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    QTemporaryDir dir;
    QVERIFY(gui::UseTestRunStore(dir));
    Session session;
    PartitionedView partitioned;
    SimulationView simulation;
    partitioned.setModels(session.document(), session.analysis(), session.jobs());
    simulation.setModels(session.document(), session.analysis(), session.runs());
    partitioned.resize(1000, 700);
    partitioned.show();
    QVERIFY(LoadDataParallelTransformer(session));
    QCheckBox* toggle = partitioned.weightUpdateToggle();
    QVERIFY(toggle->isEnabled() && !toggle->isChecked());

    // Plain data parallelism first: gradient all-reduces, no reduce-scatter.
    QSignalSpy partitions(session.analysis(), &AnalysisModel::partitionUpdated);
    partitioned.partitionNow();
    QVERIFY(partitions.wait(120000));
    QVERIFY(WaitUntilIdle(session, 120000));
    {
      const PartitionedProgram& p = session.analysis()->partition();
      QVERIFY2(p.ok(), p.message.c_str());
      QVERIFY(!p.weight_update_sharding);
      QCOMPARE(CountKind(p, Opcode::kReduceScatter), 0);
      QVERIFY(CountKind(p, Opcode::kAllReduce) > 0);
    }
    const int all_reduces_before = CountKind(session.analysis()->partition(), Opcode::kAllReduce);

    // The click: the option is set on the document (undoable) and the program partitioned again.
    partitions.clear();
    QTest::mouseClick(toggle, Qt::LeftButton);
    QVERIFY(toggle->isChecked());
    QVERIFY(session.document()->weightUpdateSharding());
    QVERIFY(session.document()->isModified());
    QVERIFY(partitions.wait(120000) || !partitions.isEmpty());
    QVERIFY(WaitUntilIdle(session, 120000));
    {
      const PartitionedProgram& p = session.analysis()->partition();
      QVERIFY2(p.ok(), p.message.c_str());
      QVERIFY(p.weight_update_sharding);
      QVERIFY(CountKind(p, Opcode::kReduceScatter) > 0);
      QVERIFY(CountKind(p, Opcode::kAllGather) > 0);
      QVERIFY(CountKind(p, Opcode::kAllReduce) < all_reduces_before);
      QVERIFY(p.Text().find("reduce-scatter(") != std::string::npos);
      // Each inserted collective says why, citing the paper's section.
      bool reasoned = false;
      for (const InsertedCollective& c : p.result->collectives)
        reasoned |= c.kind == Opcode::kReduceScatter && c.reason.rfind("weight-update sharding:", 0) == 0;
      QVERIFY(reasoned);
      QVERIFY2(partitioned.statusLabel()->text().contains("weight-update sharding"),
               qPrintable(partitioned.statusLabel()->text()));
    }

    // The mesh view: which shard of a weight's update (and of its Adam moments) each device keeps.
    {
      MeshView mesh;
      mesh.setDocument(session.document());
      mesh.setAnalysis(session.analysis());
      mesh.resize(500, 600);
      const WeightUpdateDecision* wi = nullptr;  // the first weight the pass sharded
      for (const WeightUpdateDecision& d : session.analysis()->partition().weight_update_decisions)
        if (d.sharded && !wi) wi = &d;
      QVERIFY2(wi, session.analysis()->partition().weight_update_summary.c_str());
      const QString w = QString::fromStdString(wi->weight);
      for (const QString& name : {w, w + "_m", w + "_v"}) {
        const Instruction* inst = session.document()->findInstruction(name);
        QVERIFY2(inst, qPrintable(name));
        session.document()->select(inst->id());
        const auto& shards = mesh.grid()->updateShards();
        QVERIFY2(shards.has_value(), qPrintable(name));
        QCOMPARE(shards->shards, wi->shards);
        QCOMPARE(shards->shard_of_device, wi->shard_of_device);
        QVERIFY2(mesh.gridInfo()->text().contains("Weight-update sharding"), qPrintable(mesh.gridInfo()->text()));
        QVERIFY(mesh.gridInfo()->text().contains(w + "_m, " + w + "_v"));
      }
      // Over the 2x2 mesh, a shard per device (one phase over the 4 replicas or two phases over
      // the 2 x 2 replica mesh): every device keeps a different one.
      QCOMPARE(wi->shards, int64_t{4});
      std::vector<int64_t> sorted = wi->shard_of_device;
      std::sort(sorted.begin(), sorted.end());
      QCOMPARE(sorted, (std::vector<int64_t>{0, 1, 2, 3}));
      // A tensor the pass does not shard shows no update band.
      session.document()->select(session.document()->findInstruction("x")->id());
      QVERIFY(!mesh.grid()->updateShards().has_value());
    }

    // Simulated: the step before and after the pass side by side.
    simulation.simulate();
    QVERIFY(WaitUntilIdle(session, 300000));
    const SimulatedStep& s = session.analysis()->simulation();
    QVERIFY2(s.ok(), s.message.c_str());
    QVERIFY(s.weight_update.has_value());
    const WeightUpdateComparison& c = *s.weight_update;
    QCOMPARE(c.after.step_time_s, s.run->summary.step_time_s);
    QVERIFY2(c.after.step_time_s < c.before.step_time_s,
             qPrintable(QString("after %1 s, before %2 s").arg(c.after.step_time_s).arg(c.before.step_time_s)));
    QVERIFY(c.after.weight_update_s < c.before.weight_update_s);
    QVERIFY(c.after.peak_memory_bytes < c.before.peak_memory_bytes);
    // The optimizer state is what each replica no longer holds whole.
    const size_t opt = static_cast<size_t>(MemoryCategory::kOptimizerState);
    QVERIFY(c.after.peak_by_category[opt] < c.before.peak_by_category[opt]);
    QVERIFY(c.sharded > 0 && c.sharded <= c.all_reduces);
    WeightUpdatePanel* panel = simulation.weightUpdatePanel();
    QVERIFY(panel->isVisibleTo(&simulation));
    QTableWidget* t = panel->table();
    QCOMPARE(t->item(WeightUpdatePanel::kBefore, WeightUpdatePanel::kStep)->text(),
             QString::fromStdString(FormatSeconds(c.before.step_time_s)));
    QCOMPARE(t->item(WeightUpdatePanel::kAfter, WeightUpdatePanel::kStep)->text(),
             QString::fromStdString(FormatSeconds(c.after.step_time_s)));
    QVERIFY(t->item(WeightUpdatePanel::kSaving, WeightUpdatePanel::kStep)->text().startsWith(QString::fromUtf8("\u2212")));
    QVERIFY(panel->headline()->text().contains("Weight-update sharding"));

    // Saved with the project, read back as it was (and the document clean).
    const QString path = dir.filePath("dp.shardscope");
    Status st = session.saveProject(path);
    QVERIFY2(st.ok(), st.ok() ? "" : st.error().message.c_str());
    QVERIFY(session.projectJson().contains("\"weight_update_sharding\": true"));
    {
      Session reopened;
      st = reopened.loadProject(path);
      QVERIFY2(st.ok(), st.ok() ? "" : st.error().message.c_str());
      QVERIFY(reopened.document()->weightUpdateSharding());
      QVERIFY(!reopened.document()->isModified());
      QVERIFY(WaitUntilIdle(reopened, 120000));
    }

    // Undo turns it off again (and re-partitions the program shown); redo back on.
    partitions.clear();
    session.document()->undoStack()->undo();
    QVERIFY(!session.document()->weightUpdateSharding());
    QVERIFY(!toggle->isChecked());
    QVERIFY(WaitUntilIdle(session, 300000));
    QVERIFY(!partitions.isEmpty());
    QVERIFY(!session.analysis()->partition().weight_update_sharding);
    QVERIFY(session.analysis()->partition().weight_update_decisions.empty());
    QCOMPARE(CountKind(session.analysis()->partition(), Opcode::kReduceScatter), 0);
    // ... and the simulation shown is re-run without the pass: no comparison.
    QVERIFY(session.analysis()->simulation().ok());
    QVERIFY(!session.analysis()->simulation().weight_update.has_value());
    QVERIFY(!panel->isVisibleTo(&simulation));
    session.document()->undoStack()->redo();
    QVERIFY(toggle->isChecked());
    QVERIFY(WaitUntilIdle(session, 300000));
  }

  // A module the pass has nothing to shard in (no gradient all-reduce): the toggle still works and
  // the program is the partitioner's, with a summary saying so; never an error dialog or a crash.
  void toggleOnAProgramWithoutGradients() {
    Session session;
    PartitionedView partitioned;
    partitioned.setModels(session.document(), session.analysis(), session.jobs());
    partitioned.show();
    QVERIFY(session.loadHloText(gui::kHandConvModule, "handconv.hlo").ok());
    QVERIFY(WaitUntilIdle(session, 60000));
    QTest::mouseClick(partitioned.weightUpdateToggle(), Qt::LeftButton);
    QVERIFY(session.document()->weightUpdateSharding());
    QVERIFY(WaitUntilIdle(session, 120000));
    const PartitionedProgram& p = session.analysis()->partition();
    QVERIFY2(p.ok(), p.message.c_str());
    QCOMPARE(CountKind(p, Opcode::kReduceScatter), 0);
  }
};

QTEST_MAIN(TestGuiWeightUpdate)
#include "test_gui_weight_update.moc"
