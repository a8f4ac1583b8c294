// Simulation views: the timeline paints only the visible range and skips events on already painted
// pixels; memory charts keep every interval's maximum when downsampling; the simulation panel runs
// a step of the partitioned program end to end.
#include <QTemporaryDir>
#include <QtTest>

#include "views/document.h"
#include "views/downsample.h"
#include "views/item_models.h"
#include "views/memory_chart.h"
#include "views/simulation_view.h"
#include "views/timeline_view.h"

using namespace shardscope;
using namespace shardscope::views;

namespace {

const bool kOffscreen = [] {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  return true;
}();

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

}  // namespace

class TestGuiTimeline : public QObject {
  Q_OBJECT

 private slots:
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
    if (ChipPresets().empty()) QSKIP("the simulator is not built in");
    Document doc;
    SimulationView view;
    view.setDocument(&doc);
    QVERIFY(doc.loadHloText(kModule, "sim.hlo").ok());
    QVERIFY(doc.waitUntilIdle(60000));
    doc.requestSimulation("tpu-v4");
    QVERIFY(doc.waitUntilIdle(120000));
    const SimulationOutput& out = doc.simulation();
    QVERIFY2(out.ok, out.message.c_str());
    QCOMPARE(doc.runs().size(), size_t{1});
    const RunResult& run = *doc.runs().front();
    QCOMPARE(run.id, int64_t{1});
    QCOMPARE(run.num_devices(), int64_t{4});
    QVERIFY(run.summary.step_time_s > 0);
    QVERIFY(run.summary.peak_memory_bytes > 0);
    // x[4,1] . w[1,4]: the partitioner needs a collective to combine the column-split w with the
    // row-split x, and the run shows communication.
    QVERIFY(out.collectives >= 1);
    QVERIFY(run.summary.communication_time_s > 0);
    QCOMPARE(view.history()->rowCount(), 1);
    // The mesh comes from the file's shardings: x is split 4 ways along one axis.
    QCOMPARE(view.history()->index(0, RunHistoryModel::kMesh).data().toString(), QString("X=4"));
    QCOMPARE(view.timeline()->run(), doc.runs().front().get());
    QVERIFY(view.timeline()->rowCount() >= 1);
    QVERIFY(view.memoryChart()->pointCount() > 0);
    // A second run with another chip lands in the history too.
    doc.requestSimulation("tpu-v5e");
    QVERIFY(doc.waitUntilIdle(120000));
    QCOMPARE(doc.runs().size(), size_t{2});
    QCOMPARE(view.history()->rowCount(), 2);
    QVERIFY(view.showRun(1));
    QCOMPARE(view.timeline()->run()->id, int64_t{1});
  }
};

QTEST_MAIN(TestGuiTimeline)
#include "test_gui_timeline.moc"
