// Simulation views: the timeline paints only the visible range and skips events on already painted
// pixels, selects the event under a click, selects a time range with its totals and shows tooltips;
// memory charts keep every interval's maximum when downsampling; the simulation panel runs a step
// of the partitioned program end to end. (The run store, comparison and timeline -> instruction
// mapping are in test_gui_history.)
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/analysis_jobs.h"
#include "gui_test_support.h"
#include "simulator/hardware.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/run_history.h"
#include "views/downsample.h"
#include "views/item_models.h"
#include "views/memory_chart.h"
#include "views/simulation_view.h"
#include "views/timeline_view.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

// One class of 4 devices; `n` back-to-back compute events filling [0, 1 s), and one collective.
std::shared_ptr<RunResult> DenseRun(int n) {
  auto run = std::make_shared<RunResult>();
  DeviceClass c;
  for (int i = 0; i < n; ++i) {
    TimelineEvent e;
    e.stream = Stream::kCompute;
    e.start_s = static_cast<double>(i) / n;
    e.duration_s = 1.0 / n;
    e.instruction = "op." + std::to_string(i);
    e.kind = "fusion";
    c.events.push_back(e);
  }
  TimelineEvent ar;
  ar.stream = Stream::kCommunication;
  ar.start_s = 0.25;
  ar.duration_s = 0.5;
  ar.instruction = "all-reduce.1";
  ar.kind = "all-reduce";
  c.events.push_back(ar);
  run->classes.push_back(c);
  run->device_class = {0, 0, 0, 0};
  run->summary.num_devices = 4;
  run->summary.step_time_s = 1.0;
  return run;
}

const char* kModule = R"(HloModule sim, num_partitions=4

ENTRY main {
  x = f32[64,128] parameter(0), sharding={devices=[4,1]<=[4]}
  w = f32[128,256] parameter(1), sharding={devices=[1,4]<=[4]}
  y = f32[64,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[64,256] tanh(y)
}
)";


// A timeline of 800x200 px showing [0, 1 s): plot from x = 190 to 796 (606 px wide).
constexpr int kPlotLeft = 190, kPlotWidth = 800 - 190 - 4;
int XOf(double t) { return kPlotLeft + static_cast<int>(t * kPlotWidth); }
constexpr int kComputeY = 22 + 4 + 8, kCommY = 22 + 4 + 17 + 8;

// One class; compute [0, 0.2) and [0.5, 0.6); two collectives [0.1, 0.3) and [0.2, 0.4) in flight
// together on the communication lane.
std::shared_ptr<RunResult> GappyRun() {
  auto run = std::make_shared<RunResult>();
  DeviceClass c;
  auto add = [&](Stream s, double start, double dur, const char* name, const char* kind, int64_t bytes, double flops) {
    TimelineEvent e;
    e.stream = s;
    e.start_s = start;
    e.duration_s = dur;
    e.instruction = name;
    e.kind = kind;
    e.bytes = bytes;
    e.flops = flops;
    c.events.push_back(e);
  };
  add(Stream::kCompute, 0.0, 0.2, "dot.1", "dot", 4096, 2e9);
  add(Stream::kCompute, 0.5, 0.1, "fusion.2", "fusion", 1024, 0);
  add(Stream::kCommunication, 0.1, 0.2, "all-gather.3", "all-gather", 1000, 0);
  add(Stream::kCommunication, 0.2, 0.2, "all-reduce.4", "all-reduce", 500, 0);
  run->classes.push_back(c);
  run->device_class = {0, 0};
  run->summary.num_devices = 2;
  run->summary.step_time_s = 1.0;
  return run;
}

}  // namespace

class TestGuiTimeline : public QObject {
  Q_OBJECT

  QTemporaryDir runs_dir_;

 private slots:
  void initTestCase() {
    QVERIFY(shardscope::gui::UseTestRunStore(runs_dir_));
  }

  void clickSelectsTheEventUnderThePointer() {
    TimelineWidget timeline;
    timeline.resize(800, 200);
    timeline.setRun(DenseRun(10));  // op.i covers [i/10, (i+1)/10)
    timeline.setRange(0, 1);
    QSignalSpy clicked(&timeline, &TimelineWidget::eventClicked);
    QTest::mouseClick(&timeline, Qt::LeftButton, {}, QPoint(XOf(0.35), kComputeY));
    QCOMPARE(clicked.count(), 1);
    QCOMPARE(clicked.at(0).at(0).toString(), QString("op.3"));
    QCOMPARE(clicked.at(0).at(1).toInt(), 0);
    QVERIFY(timeline.selectedEvent());
    QCOMPARE(timeline.selectedEvent()->instruction, std::string("op.3"));
    // The communication lane, under the compute lane.
    QTest::mouseClick(&timeline, Qt::LeftButton, {}, QPoint(XOf(0.5), kCommY));
    QCOMPARE(clicked.count(), 2);
    QCOMPARE(clicked.at(1).at(0).toString(), QString("all-reduce.1"));
    // The gutter and the empty part of the communication lane select nothing.
    QTest::mouseClick(&timeline, Qt::LeftButton, {}, QPoint(100, kComputeY));
    QTest::mouseClick(&timeline, Qt::LeftButton, {}, QPoint(XOf(0.1), kCommY));
    QCOMPARE(clicked.count(), 2);
    // eventCenter agrees with the geometry: the middle of op.7 at 0.75 s.
    const QPoint c = timeline.eventCenter(0, Stream::kCompute, "op.7");
    QVERIFY(std::abs(c.x() - XOf(0.75)) <= 1);
    QCOMPARE(c.y(), 22 + 4 + 17 / 2);
    QCOMPARE(timeline.eventAt(c)->instruction, std::string("op.7"));
    QCOMPARE(timeline.eventCenter(0, Stream::kCompute, "no-such-op"), QPoint(-1, -1));
    // A drag pans instead of clicking: 60 px to the right moves the window 0.1 s earlier.
    QTest::mousePress(&timeline, Qt::LeftButton, {}, QPoint(XOf(0.5), kComputeY));
    QMouseEvent move(QEvent::MouseMove, QPointF(XOf(0.5) + 61, kComputeY), timeline.mapToGlobal(QPointF(XOf(0.5) + 61, kComputeY)),
                     Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&timeline, &move);
    QTest::mouseRelease(&timeline, Qt::LeftButton, {}, QPoint(XOf(0.5) + 61, kComputeY));
    QCOMPARE(clicked.count(), 2);
    QVERIFY2(std::abs(timeline.rangeStart() + 0.1) < 0.003, qPrintable(QString::number(timeline.rangeStart())));
  }

  void rangeTotalsAndShiftDragSelection() {
    TimelineWidget timeline;
    timeline.resize(800, 200);
    timeline.setRun(GappyRun());
    timeline.setRange(0, 1);
    // Whole step: compute 0.3 s; communication is the union of two overlapping collectives,
    // [0.1, 0.4) = 0.3 s; both busy in [0.1, 0.2) = 0.1 s; idle = 1 - (0.3 + 0.3 - 0.1) = 0.5 s.
    auto t = timeline.rangeTotals(0, 0, 1);
    QCOMPARE(t.span_s, 1.0);
    QVERIFY(qFuzzyCompare(t.compute_s, 0.3));
    QVERIFY(qFuzzyCompare(t.communication_s, 0.3));
    QVERIFY(qFuzzyCompare(t.overlapped_s, 0.1));
    QVERIFY(qFuzzyCompare(t.idle_s, 0.5));
    QCOMPARE(t.events, int64_t{4});
    QCOMPARE(t.bytes, int64_t{1500});
    QCOMPARE(t.flops, 2e9);
    // [0.15, 0.55): compute [0.15, 0.2) + [0.5, 0.55) = 0.1; comm [0.15, 0.4) = 0.25; both 0.05.
    t = timeline.rangeTotals(0, 0.15, 0.55);
    QVERIFY(qFuzzyCompare(t.compute_s, 0.1));
    QVERIFY(qFuzzyCompare(t.communication_s, 0.25));
    QVERIFY(qFuzzyCompare(t.overlapped_s, 0.05));
    QVERIFY(qFuzzyCompare(t.idle_s + 1, 0.4 - 0.3 + 1));
    QCOMPARE(t.events, int64_t{4});
    // Nothing outside the step.
    t = timeline.rangeTotals(0, 0.7, 0.9);
    QCOMPARE(t.events, int64_t{0});
    QVERIFY(qFuzzyCompare(t.idle_s, 0.2));
    QCOMPARE(timeline.rangeTotals(5, 0, 1).events, int64_t{0});  // no such row

    // Shift+drag from 0.2 s to 0.6 s selects that range (to a pixel).
    QSignalSpy selected(&timeline, &TimelineWidget::rangeSelected);
    QTest::mousePress(&timeline, Qt::LeftButton, Qt::ShiftModifier, QPoint(XOf(0.2), kComputeY));
    QMouseEvent move(QEvent::MouseMove, QPointF(XOf(0.6), kComputeY), timeline.mapToGlobal(QPointF(XOf(0.6), kComputeY)),
                     Qt::NoButton, Qt::LeftButton, Qt::ShiftModifier);
    QApplication::sendEvent(&timeline, &move);
    QTest::mouseRelease(&timeline, Qt::LeftButton, Qt::ShiftModifier, QPoint(XOf(0.6), kComputeY));
    QVERIFY(timeline.hasSelection());
    QVERIFY(selected.count() >= 1);
    const double px = 1.0 / kPlotWidth;
    QVERIFY(std::abs(timeline.selectionStart() - 0.2) <= px);
    QVERIFY(std::abs(timeline.selectionEnd() - 0.6) <= px);
    QCOMPARE(timeline.rangeStart(), 0.0);  // selecting does not pan
    // The selection is painted (highlight over the idle lane background at 0.45 s) ...
    const QImage image = timeline.render();
    TimelineWidget plain;
    plain.resize(800, 200);
    plain.setRun(GappyRun());
    plain.setRange(0, 1);
    const QImage before = plain.render();
    QVERIFY(image.pixelColor(XOf(0.45), kComputeY) != before.pixelColor(XOf(0.45), kComputeY));
    QCOMPARE(image.pixelColor(XOf(0.8), kComputeY), before.pixelColor(XOf(0.8), kComputeY));
    // ... a double-click inside it zooms to it, Escape clears it.
    QTest::mouseDClick(&timeline, Qt::LeftButton, {}, QPoint(XOf(0.4), kComputeY));
    QVERIFY(std::abs(timeline.rangeStart() - 0.2) <= px);
    QVERIFY(std::abs(timeline.rangeEnd() - 0.6) <= px);
    QTest::keyClick(&timeline, Qt::Key_Escape);
    QVERIFY(!timeline.hasSelection());
    QTest::keyClick(&timeline, Qt::Key_F);
    QCOMPARE(timeline.rangeStart(), 0.0);
  }

  void tooltipsAndHighlight() {
    TimelineWidget timeline;
    timeline.resize(800, 200);
    timeline.setRun(GappyRun());
    timeline.setRange(0, 1);
    const QString tip = timeline.toolTipAt(QPoint(XOf(0.1), kComputeY));
    QVERIFY2(tip.contains("dot.1") && tip.contains("(dot)") && tip.contains("200 ms") && tip.contains("2 GFLOP"), qPrintable(tip));
    QVERIFY(timeline.toolTipAt(QPoint(XOf(0.8), kComputeY)).isEmpty());
    // With a resolver the tooltip names the original instruction.
    timeline.setOriginResolver([](const QString& spmd) { return spmd == "dot.1" ? QString("layer/dot") : QString(); });
    QVERIFY(timeline.toolTipAt(QPoint(XOf(0.1), kComputeY)).contains("from <i>layer/dot</i>"));
    // Highlighting an origin outlines its events and changes nothing else.
    const QImage before = timeline.render();
    timeline.setHighlightedOrigin("layer/dot");
    const QImage after = timeline.render();
    int changed = 0, outside = 0;
    for (int y = 0; y < before.height(); ++y) {
      for (int x = 0; x < before.width(); ++x) {
        if (before.pixel(x, y) == after.pixel(x, y)) continue;
        ++changed;
        if (x < XOf(0) - 1 || x > XOf(0.2) + 2 || y < 22 + 4 || y > 22 + 4 + 17) ++outside;
      }
    }
    QVERIFY(changed > 100);  // the outline of a 121 x 15 px box
    QCOMPARE(outside, 0);
  }

  void downsampleKeepsPeaks() {
    std::vector<SeriesPoint> points;
    for (int i = 0; i < 100000; ++i) points.push_back({i * 1e-6, static_cast<double>(i % 97)});
    points[43210].v = 5000;  // a one-sample spike
    points[99998].v = 4000;  // another near the end
    const auto out = DownsampleKeepingMaxima(points, 400);
    QVERIFY(out.size() <= 402);
    QVERIFY(out.size() >= 300);
    QCOMPARE(out.front(), points.front());
    QCOMPARE(out.back(), points.back());
    bool spike = false, late = false;
    for (const auto& p : out) {
      spike |= p == points[43210];
      late |= p == points[99998];
    }
    QVERIFY(spike);
    QVERIFY(late);
    for (size_t i = 1; i < out.size(); ++i) QVERIFY(out[i].t >= out[i - 1].t);  // still in time order
    // Every bucket keeps its maximum: the global maximum of any interval survives.
    double max_in = 0, max_out = 0;
    for (const auto& p : points) max_in = std::max(max_in, p.v);
    for (const auto& p : out) max_out = std::max(max_out, p.v);
    QCOMPARE(max_out, max_in);
    // Small series are returned as they are.
    std::vector<SeriesPoint> small(points.begin(), points.begin() + 50);
    QCOMPARE(DownsampleKeepingMaxima(small, 400), small);
  }

  void timelinePaintsOnlyWhatIsVisible() {
    TimelineWidget timeline;
    timeline.resize(800, 200);
    timeline.setRun(DenseRun(100000));
    QCOMPARE(timeline.rowCount(), 1);
    QCOMPARE(timeline.rangeStart(), 0.0);
    QVERIFY(timeline.rangeEnd() >= 1.0);
    timeline.render();
    TimelineWidget::PaintStats all = timeline.lastPaintStats();
    QCOMPARE(all.considered, int64_t{100001});
    // About one rectangle per pixel column (the plot is ~600 px wide), not 100000.
    QVERIFY2(all.drawn <= 800, qPrintable(QString::number(all.drawn)));
    QVERIFY(all.drawn >= 300);
    QCOMPARE(all.drawn + all.skipped, all.considered);
    // Zoomed into 1% of the step: only that range is visited.
    timeline.setRange(0.5, 0.51);
    timeline.render();
    const auto zoomed = timeline.lastPaintStats();
    QVERIFY2(zoomed.considered < 1200, qPrintable(QString::number(zoomed.considered)));
    QVERIFY(zoomed.considered >= 1000);
    QVERIFY(zoomed.drawn > 0);
    // The communication lane shows the all-reduce colour in the middle of the window.
    timeline.setRange(0, 1);
    const QImage image = timeline.render();
    const int x = 190 + (800 - 190 - 4) / 2;  // middle of the plot
    const int comm_y = 22 + 4 + 17 + 8;       // inside the communication lane
    QCOMPARE(image.pixelColor(x, comm_y).rgb(), EventKindColor("all-reduce", timeline.palette()).rgb());
    // ... and the compute lane is filled edge to edge by the dense events.
    QCOMPARE(image.pixelColor(x, 22 + 4 + 8).rgb(), EventKindColor("fusion", timeline.palette()).rgb());
  }

  void memoryChartDownsamplesAndExports() {
    MemoryChart* chart = MemoryChart::Create();
    chart->resize(600, 300);
    MemoryChart::Series s;
    s.name = "total";
    s.color = Qt::red;
    for (int i = 0; i < 50000; ++i) s.points.push_back({i * 1e-6, 1000.0 + (i == 777 ? 1e6 : i % 10)});
    chart->setSeries("memory", {s}, 777e-6);
    QVERIFY(chart->pointCount() <= static_cast<int>(MemoryChart::kPointsPerSeries) + 2);
    QVERIFY(chart->pointCount() > 100);
    QTemporaryDir dir;
    QVERIFY(chart->exportImage(dir.filePath("m.svg")));
    QVERIFY(chart->exportImage(dir.filePath("m.png")));
    QFile svg(dir.filePath("m.svg"));
    QVERIFY(svg.open(QIODevice::ReadOnly));
    QVERIFY(svg.readAll().contains("<svg"));
    QVERIFY(!QImage(dir.filePath("m.png")).isNull());
    chart->clear();
    QCOMPARE(chart->pointCount(), 0);
    delete chart;
  }

  void simulateStepEndToEnd() {
    if (ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    Session doc;
    SimulationView view;
    view.setModels(doc.document(), doc.analysis(), doc.runs());
    QVERIFY(doc.loadHloText(kModule, "sim.hlo").ok());
    QVERIFY(WaitUntilIdle(doc, 60000));
    const size_t stored_before = doc.runs()->runs().size();
    doc.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(doc, 120000));
    const SimulatedStep& out = doc.analysis()->simulation();
    QVERIFY2(out.ok(), out.message.c_str());
    QCOMPARE(doc.runs()->runs().size(), stored_before + 1);
    const auto first = out.run;
    const RunResult& run = *first;
    QVERIFY(run.id > 0);  // stored
    QCOMPARE(doc.runs()->runs().back().id, run.id);
    QCOMPARE(run.num_devices(), int64_t{4});
    QVERIFY(run.summary.step_time_s > 0);
    QVERIFY(run.summary.peak_memory_bytes > 0);
    // x[4,1] . w[1,4]: the partitioner needs a collective to combine the column-split w with the
    // row-split x, and the run shows communication.
    QVERIFY(out.collectives >= 1);
    QVERIFY(run.summary.communication_time_s > 0);
    const int row = view.history()->rowCount() - 1;
    QCOMPARE(view.history()->index(row, RunHistoryModel::kId).data(RunHistoryModel::kRunIdRole).toLongLong(), run.id);
    // The mesh comes from the file's shardings: x is split 4 ways along one axis.
    QCOMPARE(view.history()->index(row, RunHistoryModel::kMesh).data().toString(), QString("X=4"));
    QCOMPARE(view.history()->index(row, RunHistoryModel::kModule).data().toString(), QString("sim"));  // not "sim.spmd"
    QCOMPARE(view.timeline()->run(), first.get());
    QCOMPARE(view.shownRun(), run.id);
    QVERIFY(view.timeline()->rowCount() >= 1);
    QVERIFY(view.memoryChart()->pointCount() > 0);
    // A second run with another chip lands in the history too.
    doc.analysis()->requestSimulation("tpu-v5e");
    QVERIFY(WaitUntilIdle(doc, 120000));
    QCOMPARE(doc.runs()->runs().size(), stored_before + 2);
    QCOMPARE(view.history()->rowCount(), row + 2);
    QVERIFY(view.showRun(run.id));
    QVERIFY(WaitUntilIdle(doc, 30000));
    QCOMPARE(view.timeline()->run()->id, run.id);
    // The shardings did not change: both simulations ran the one partitioned program.
    QCOMPARE(doc.analysisJobs()->partitionings(), 1);
  }

  // A simulation of shardings that are partitioned already (the Partitioned program panel asked
  // for it) does not partition again; an edit does; the replicated baseline is its own program.
  void simulationReusesThePartitionedProgram() {
    if (ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    Session doc;
    QVERIFY(doc.loadHloText(kModule, "sim.hlo").ok());
    QVERIFY(WaitUntilIdle(doc));
    doc.analysis()->requestPartition();
    QVERIFY(WaitUntilIdle(doc, 120000));
    QVERIFY(doc.analysis()->partition().ok());
    QCOMPARE(doc.analysisJobs()->partitionings(), 1);
    doc.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(doc, 120000));
    QVERIFY2(doc.analysis()->simulation().ok(), doc.analysis()->simulation().message.c_str());
    QCOMPARE(doc.analysisJobs()->partitionings(), 1);
    const auto first = doc.analysis()->simulation().run;
    // The run still maps its events back to the original instructions.
    QVERIFY(!first->origins.empty());
    QCOMPARE(doc.analysis()->simulation().collectives,
             static_cast<int64_t>(doc.analysis()->partition().result->collectives.size()));
    // Replicated: partitioned on its own (no shardings), the sharded program is kept.
    doc.analysis()->requestSimulation("tpu-v4", AnalysisModel::SimulationInput::kReplicated);
    QVERIFY(WaitUntilIdle(doc, 120000));
    QVERIFY(doc.analysis()->simulation().ok());
    QCOMPARE(doc.analysis()->simulation().collectives, int64_t{0});
    doc.analysis()->requestSimulation("tpu-v5e");
    QVERIFY(WaitUntilIdle(doc, 120000));
    QCOMPARE(doc.analysisJobs()->partitionings(), 1);
    // An edit: the next simulation partitions the new shardings.
    const Instruction* w = doc.document()->findInstruction("w");
    QVERIFY(doc.document()->clearAnnotation(w->id()));
    QVERIFY(WaitUntilIdle(doc));
    doc.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(doc, 120000));
    QVERIFY(doc.analysis()->simulation().ok());
    QCOMPARE(doc.analysisJobs()->partitionings(), 2);
  }
};

QTEST_MAIN(TestGuiTimeline)
#include "test_gui_timeline.moc"
