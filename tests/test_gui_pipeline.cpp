// Pipelining in the GUI (GSPMD §3.3): the mesh view shows which device holds which stage and which
// layers (GPipe: consecutive layers; circular: round-robin), and a simulated pipelined step marks
// the bubble on the timeline — the iterations in which each stage computes on padding — with its
// share of the step. The layout and the bubble come from views/pipeline_stages.h.
#include <QtTest>

#include "app/pipeline/sources.h"
#include "gui_test_support.h"
#include "simulator/hardware.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/mesh_view.h"
#include "views/pipeline_stages.h"
#include "views/simulation_view.h"
#include "views/timeline_view.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

// The pipelined Transformer on (L, X, Y) = (2, 1, 2): 2 stages of 2 layers, 2 microbatches.
ZooOverrides Small(const std::string& schedule) {
  return {{"stages", "2"}, {"mesh_x", "1"}, {"mesh_y", "2"}, {"microbatches", "2"}, {"layers", "4"},
          {"seq", "4"}, {"model", "8"}, {"heads", "2"}, {"head_dim", "4"}, {"hidden", "16"},
          {"schedule", schedule}};
}

bool Load(Session& s, const std::string& schedule) {
  auto m = pipeline::BuildZooModel("pipelined-transformer", Small(schedule));
  if (!m.ok()) return false;
  s.document()->setModule(std::move(m->module), m->mesh, "example", "pipelined-transformer");
  return true;
}

}  // namespace

class TestGuiPipeline : public QObject {
  Q_OBJECT

  QTemporaryDir runs_dir_;

 private slots:
  void initTestCase() {
    QVERIFY(shardscope::gui::UseTestRunStore(runs_dir_));
  }

  // Mesh (L, X, Y) = (2, 1, 2), devices row-major: devices 0, 1 hold stage 0, devices 2, 3 stage 1.
  void meshShowsTheStages_data() {
    QTest::addColumn<QString>("schedule");
    QTest::newRow("gpipe") << "gpipe";
    QTest::newRow("circular") << "circular";
  }
  void meshShowsTheStages() {
    QFETCH(QString, schedule);
    const bool circular = schedule == "circular";
    Session session;
    QVERIFY(Load(session, schedule.toStdString()));
    MeshView mesh;
    mesh.setDocument(session.document());
    mesh.resize(600, 500);
    const auto& stages = mesh.grid()->pipelineStages();
    QVERIFY(stages.has_value());
    QCOMPARE(stages->axis_name, std::string("L"));
    QCOMPARE(stages->stages, int64_t{2});
    QCOMPARE(stages->layers_per_stage, int64_t{2});
    QCOMPARE(stages->circular, circular);
    QCOMPARE(stages->stage_of_device, (std::vector<int64_t>{0, 0, 1, 1}));
    // GPipe: stage l holds layers 2l, 2l + 1; circular: layers l, l + 2 (round-robin).
    if (circular) {
      QCOMPARE(stages->layers_of_stage, (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
      QCOMPARE(stages->LayersText(1), std::string("layers 1, 3"));
    } else {
      QCOMPARE(stages->layers_of_stage, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
      QCOMPARE(stages->LayersText(1), std::string("layers 2-3"));
    }
    // The forward loop shifts towards higher stages, the backward loop the other way.
    QCOMPARE(stages->loops, (std::vector<std::pair<std::string, bool>>{{"forward_body", true}, {"backward_body", false}}));
    // Not pipelined: no stages.
    QVERIFY(session.loadExample("transformer").ok());
    QVERIFY(!mesh.grid()->pipelineStages().has_value());
  }

  // A simulated GPipe step: T = N + L - 1 = 3 iterations per loop, each stage computes on padding
  // in L - 1 = 1 of them, forward and backward; the timeline marks those spans on every row.
  void timelineMarksTheBubble() {
    if (ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    Session session;
    SimulationView view;
    view.setModels(session.document(), session.analysis(), session.runs());
    QVERIFY(Load(session, "gpipe"));
    QVERIFY(WaitUntilIdle(session, 60000));
    session.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(session, 120000));
    const SimulatedStep& out = session.analysis()->simulation();
    QVERIFY2(out.ok(), out.message.c_str());
    const RunResult& run = *out.run;
    const auto& marks = view.timeline()->rowMarks();
    QCOMPARE(static_cast<int>(marks.size()), view.timeline()->rowCount());
    QVERIFY(!marks.empty());
    const DocumentModel* doc = session.document();
    auto stages = DerivePipelineStages(*doc->module(), doc->mesh(), [doc](const Instruction& i) { return doc->sharding(i.id()); });
    QVERIFY(stages.has_value());
    const auto reps = run.RepresentativeDevices();
    for (size_t r = 0; r < marks.size(); ++r) {
      QCOMPARE(marks[r].spans.size(), size_t{2});  // one padded iteration forward, one backward
      const int64_t stage = stages->stage_of_device[static_cast<size_t>(reps[r])];
      QVERIFY2(marks[r].caption.startsWith("bubble "), qPrintable(marks[r].caption));
      QVERIFY2(marks[r].caption.contains(QString("(stage %1").arg(stage)), qPrintable(marks[r].caption));
      const StepBubble b = DeviceBubble(run, reps[r], *stages);
      QVERIFY(b.share > 0 && b.share < 0.5);
      QVERIFY2(marks[r].caption.contains(QString::number(100.0 * b.share, 'f', 1) + "%"), qPrintable(marks[r].caption));
      // Stage 0 idles on padding at the end of the forward loop (iteration 2), stage 1 at its
      // start (iteration 0); backward runs the other way round.
      for (const BubbleSpan& s : b.spans) {
        QVERIFY(s.end_s > s.start_s);
        if (s.loop == "forward_body") QCOMPARE(s.iteration, stage == 0 ? int64_t{2} : int64_t{0});
        else QCOMPARE(s.iteration, stage == 0 ? int64_t{0} : int64_t{2});
      }
    }
  }
};

QTEST_MAIN(TestGuiPipeline)
#include "test_gui_pipeline.moc"
