// Pipelining in the GUI (GSPMD §3.3): the mesh view shows which device holds which stage and which
// layers (GPipe: consecutive layers; circular: round-robin), and a simulated pipelined step marks
// the bubble on the timeline — the iterations in which each stage computes on padding — with its
// share of the step. The layout and the bubble come from views/pipeline_stages.h.
#include <QtTest>

#include <cmath>

#include <QLabel>
#include <QTableWidget>

#include "app/gui/main_window.h"
#include "app/pipeline/sources.h"
#include "gui_test_support.h"
#include "simulator/hardware.h"
#include "views/analysis_model.h"
#include "views/collective_stepper.h"
#include "views/document_model.h"
#include "views/mesh_view.h"
#include "core/base/units.h"
#include "simulator/pipeline_accounting.h"
#include "views/pipeline_figures.h"
#include "views/pipeline_stages.h"
#include "views/shifting_buffer_view.h"
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

bool LoadInto(Session& s, const ZooOverrides& overrides) {
  auto m = pipeline::BuildZooModel("pipelined-transformer", overrides);
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

  // The teaching panel steps through the shifting buffer with the keyboard (below).
  void teachingStepsTheShiftingBuffer();

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
    // One home for the bubble: the view's spans are the accounting's. The view's per-device bubble
    // time, averaged over the devices, is the engine's RunSummary::bubble_time_s (both from
    // simulator/pipeline_accounting), and each row's share is its seconds over the step.
    double mean = 0;
    for (int64_t d = 0; d < run.num_devices(); ++d) {
      const StepBubble b = DeviceBubble(run, d, *stages);
      QVERIFY(b.seconds > 0);
      QCOMPARE(b.share, b.seconds / run.summary.step_time_s);
      mean += b.seconds / static_cast<double>(run.num_devices());
    }
    QVERIFY(run.summary.bubble_time_s > 0);
    QVERIFY2(std::fabs(mean - run.summary.bubble_time_s) <= 1e-9 * run.summary.bubble_time_s,
             qPrintable(QString("view %1 s, accounting %2 s").arg(mean, 0, 'g', 17).arg(run.summary.bubble_time_s, 0, 'g', 17)));

    // The panel's pipelining figures are the run's accounting (GSPMD Tables 4-5's rows).
    const PipelineFigures* fig = view.pipelineFigures();
    QVERIFY(!fig->isHidden());
    const RunSummary& sum = run.summary;
    auto q = [](const std::string& x) { return QString::fromStdString(x); };
    QCOMPARE(fig->bubble()->text(), q(FormatSeconds(sum.bubble_time_s)) + " (" + PipelineFigures::Percent(sum.bubble_share()) + ")");
    QCOMPARE(fig->recompute()->text(),
             q(FormatSeconds(sum.recompute_time_s)) + " (" + PipelineFigures::Percent(sum.recompute_share()) + ")");
    QCOMPARE(fig->rawUtilization()->text(), PipelineFigures::Percent(sum.raw_flops_utilization));
    QCOMPARE(fig->mfu()->text(), PipelineFigures::Percent(sum.mfu));
    // The numbers shown are the accounting's: read back from the labels.
    auto number = [](const QString& t) { return t.section('(', 1).section('%', 0, 0).toDouble(); };
    QVERIFY(std::fabs(number(fig->bubble()->text()) - 100 * sum.bubble_share()) <= 0.05 + 0.01 * 100 * sum.bubble_share());
    QVERIFY(std::fabs(fig->mfu()->text().section('%', 0, 0).toDouble() - 100 * sum.mfu) <= 0.05 + 0.01 * 100 * sum.mfu);
    QCOMPARE(PipelineFigures::Percent(0.25), QString("25.0%"));
    QCOMPARE(PipelineFigures::Percent(0.00012), QString("0.012%"));
    QVERIFY(sum.raw_flops_utilization > sum.mfu);
    QVERIFY(fig->bubble()->toolTip().contains("padding"));
    QVERIFY(fig->recompute()->toolTip().contains("rematerialised"));

    // An unpipelined run: the figures are absent, not zero.
    QVERIFY(session.loadExample("transformer").ok());
    QVERIFY(WaitUntilIdle(session, 60000));
    QVERIFY(fig->isHidden());
    session.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(session, 120000));
    QVERIFY(session.analysis()->simulation().ok());
    QCOMPARE(session.analysis()->simulation().run->summary.pipeline_stages, int64_t{0});
    QVERIFY(fig->isHidden());
    QVERIFY(fig->bubble()->text().isEmpty());

    // Rematerialisation without pipelining (XLA's remat clones are named "<name>.remat"): the
    // table is titled so, shows the recompute, and has no bubble row.
    QVERIFY(session
                .loadHloText("HloModule remat\n"
                             "ENTRY main {\n"
                             "  x = f32[256,256] parameter(0)\n"
                             "  w = f32[256,256] parameter(1)\n"
                             "  h = f32[256,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                             "  h.remat = f32[256,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                             "  ROOT s = f32[256,256] add(h, h.remat)\n"
                             "}\n",
                             "remat.hlo")
                .ok());
    QVERIFY(WaitUntilIdle(session, 60000));
    session.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(session, 120000));
    QVERIFY(session.analysis()->simulation().ok());
    const RunSummary& remat = session.analysis()->simulation().run->summary;
    QCOMPARE(remat.pipeline_stages, int64_t{0});
    QVERIFY(remat.recompute_time_s > 0);
    QVERIFY(!fig->isHidden());
    QCOMPARE(fig->title(), QString("Rematerialisation"));
    QVERIFY(fig->bubble()->isHidden());
    QCOMPARE(fig->recompute()->text(),
             q(FormatSeconds(remat.recompute_time_s)) + " (" + PipelineFigures::Percent(remat.recompute_share()) + ")");
    QVERIFY(remat.recompute_share() > 0.2 && remat.recompute_share() < 0.8);  // one of the two dots
    QVERIFY(remat.raw_flops_utilization > remat.mfu);
  }
};


void TestGuiPipeline::teachingStepsTheShiftingBuffer() {
  using shardscope::gui::MainWindow;
  MainWindow w;
  w.setBatchMode(true);
  w.resize(1600, 1000);
  w.show();
  w.activateWindow();
  QVERIFY(QTest::qWaitForWindowActive(&w));  // the panel's keys are shortcuts of the active window
  // GPipe, 4 stages x 6 microbatches on (L, X, Y) = (4, 1, 2): T = N + L - 1 = 9 iterations.
  QVERIFY(LoadInto(*w.session(), {{"stages", "4"}, {"mesh_x", "1"}, {"mesh_y", "2"}, {"microbatches", "6"}, {"layers", "4"},
                                  {"seq", "4"}, {"model", "8"}, {"heads", "2"}, {"head_dim", "4"}, {"hidden", "16"},
                                  {"schedule", "gpipe"}}));
  QVERIFY(w.showView("shifting-buffer"));
  ShiftingBufferView* v = w.shiftingBuffer();
  QVERIFY(v->isVisible());
  QCOMPARE(v->iterationCount(), 9);
  QCOMPARE(v->table()->rowCount(), 4);
  // The collective beside it is the shift itself: one collective-permute, stage s -> s + 1.
  QVERIFY(w.teachingPanel()->hasPlan());
  QCOMPARE(w.teachingPanel()->plan().request.kind, sim::CollectiveKind::kCollectivePermute);
  QCOMPARE(w.teachingPanel()->plan().request.pairs, v->schedule()->iterations.front().device_pairs);
  QVERIFY(w.teachingPanel()->plan().request.operand_bytes > 0);
  QVERIFY2(w.teachingPanel()->captionText().contains("pipeline shift"), qPrintable(w.teachingPanel()->captionText()));
  QVERIFY2(!w.teachingPanel()->captionText().contains("alo exchange"), qPrintable(w.teachingPanel()->captionText()));
  v->setFocus();
  QTest::keyClick(v, Qt::Key_Home);
  QCOMPARE(v->currentIteration(), 0);
  QCOMPARE(v->cellText(0, ShiftingBufferView::kAfter), QString("microbatch 0"));
  QCOMPARE(v->cellText(1, ShiftingBufferView::kAfter), QString("padding — bubble"));
  QVERIFY(!v->isBubble(0) && v->isBubble(1) && v->isBubble(3));
  // → three times: iteration t = 3, the pipeline full. Before the shift stage s holds microbatch
  // 2 - s, after it 3 - s; every stage sends one stage on, the last one's result leaves.
  for (int k = 0; k < 3; ++k) QTest::keyClick(v, Qt::Key_Right);
  QCOMPARE(v->currentIteration(), 3);
  const QString before[] = {"microbatch 2", "microbatch 1", "microbatch 0", "padding"};
  for (int st = 0; st < 4; ++st) {
    QCOMPARE(v->cellText(st, ShiftingBufferView::kBefore), before[st]);
    QCOMPARE(v->cellText(st, ShiftingBufferView::kAfter), QString("microbatch %1").arg(3 - st));
    QVERIFY(!v->isBubble(st));
  }
  QCOMPARE(v->cellText(0, ShiftingBufferView::kDevices), QString("0, 1"));
  QCOMPARE(v->cellText(0, ShiftingBufferView::kSendsTo), QString("→ stage 1"));
  QCOMPARE(v->cellText(3, ShiftingBufferView::kSendsTo), QString("— (leaves the pipeline)"));
  QVERIFY2(v->captionText().contains("(6 device pairs)"), qPrintable(v->captionText()));  // 3 links x 2 along Y
  QVERIFY2(v->captionText().contains("Every stage computes on a real microbatch"), qPrintable(v->captionText()));
  // ← steps back; End: the last iteration, only stage 3 on real data (microbatch 5).
  QTest::keyClick(v, Qt::Key_Left);
  QCOMPARE(v->currentIteration(), 2);
  QCOMPARE(v->cellText(3, ShiftingBufferView::kAfter), QString("padding — bubble"));
  QTest::keyClick(v, Qt::Key_End);
  QCOMPARE(v->currentIteration(), 8);
  QTest::keyClick(v, Qt::Key_Right);  // stays at the last
  QCOMPARE(v->currentIteration(), 8);
  QCOMPARE(v->cellText(3, ShiftingBufferView::kAfter), QString("microbatch 5"));
  QVERIFY2(v->captionText().contains("Bubble: stages 0, 1, 2 compute on padding."), qPrintable(v->captionText()));

  // Circular, 4 stages x 4 microbatches, 2 layers per stage: iteration t = 4 hands microbatch 0
  // from stage 3 (layer 3) round to stage 0 for its second round (layer 4).
  QVERIFY(LoadInto(*w.session(), {{"stages", "4"}, {"mesh_x", "1"}, {"mesh_y", "2"}, {"microbatches", "4"}, {"layers", "8"},
                                  {"seq", "4"}, {"model", "8"}, {"heads", "2"}, {"head_dim", "4"}, {"hidden", "16"},
                                  {"schedule", "circular"}}));
  QVERIFY(v->hasSchedule());
  QCOMPARE(v->iterationCount(), 11);
  v->setFocus();
  QTest::keyClick(v, Qt::Key_Home);
  for (int k = 0; k < 4; ++k) QTest::keyClick(v, Qt::Key_Right);
  QCOMPARE(v->cellText(3, ShiftingBufferView::kBefore), QString("microbatch 0 (round 0, layer 3)"));
  QCOMPARE(v->cellText(3, ShiftingBufferView::kSendsTo), QString("→ stage 0"));
  QCOMPARE(v->cellText(0, ShiftingBufferView::kAfter), QString("microbatch 0 (round 1, layer 4)"));
  QVERIFY2(v->captionText().contains("wraps round to stage 0"), qPrintable(v->captionText()));

  // Not pipelined: no shifting buffer.
  QVERIFY(w.session()->loadExample("transformer").ok());
  QVERIFY(!v->hasSchedule());
  QVERIFY(v->isHidden());
}

QTEST_MAIN(TestGuiPipeline)
#include "test_gui_pipeline.moc"
