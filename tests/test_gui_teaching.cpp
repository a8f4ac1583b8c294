// Teaching mode: stepping through a collective on the mesh. The stepper shows the transfers of each
// step as arrows and what every device holds, captions each step, fills in the cost formula with
// the numbers, plays the steps, and opens a collective double-clicked in the partitioned program.
#include <set>

#include <QComboBox>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "app/pipeline/simulate.h"
#include "core/sharding/mesh.h"
#include "gui_test_support.h"
#include "simulator/hardware.h"
#include "views/analysis_model.h"
#include "views/collective_stepper.h"
#include "views/document_model.h"
#include "views/item_models.h"
#include "views/partitioned_view.h"
#include "views/sharding_style.h"
#include "tests/built_paths.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

// x is split 4 ways by rows and w by columns: the partitioner must gather to multiply them.
const char* kModule = R"(HloModule teach, num_partitions=4

ENTRY main {
  x = f32[64,128] parameter(0), sharding={devices=[4,1]<=[4]}
  w = f32[128,256] parameter(1), sharding={devices=[1,4]<=[4]}
  y = f32[64,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[64,256] tanh(y)
}
)";

QPalette Dark() {
  QPalette p;
  p.setColor(QPalette::Window, QColor(45, 47, 51));
  p.setColor(QPalette::WindowText, QColor(225, 227, 230));
  p.setColor(QPalette::Base, QColor(32, 34, 37));
  p.setColor(QPalette::AlternateBase, QColor(42, 44, 48));
  p.setColor(QPalette::Text, QColor(225, 227, 230));
  p.setColor(QPalette::Button, QColor(55, 58, 63));
  p.setColor(QPalette::ButtonText, QColor(225, 227, 230));
  p.setColor(QPalette::Mid, QColor(95, 98, 104));
  return p;
}

double MeanGrey(const QImage& image) {
  double sum = 0;
  int n = 0;
  for (int y = 0; y < image.height(); y += 3) {
    for (int x = 0; x < image.width(); x += 3) {
      sum += qGray(image.pixel(x, y));
      ++n;
    }
  }
  return n ? sum / n : 0;
}

// A stepper with the chips the application offers (the session's analysis model gives the same).
struct Stepper : CollectiveStepper {
  Stepper() { setChips(ChipPresetNames(), pipeline::DefaultChip()); }
};

}  // namespace

class TestGuiTeaching : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (ChipPresetNames().empty()) QSKIP("the simulator is not built in");
  }

  void everyExamplePlans() {
    Stepper stepper;
    const auto examples = TeachingExamples();
    QVERIFY(examples.size() >= 5);
    QCOMPARE(stepper.exampleBox()->count(), static_cast<int>(examples.size()) + 1);
    std::set<CollectiveKind> kinds;
    for (const auto& e : examples) {
      QVERIFY2(stepper.showExample(QString::fromStdString(e.name)), stepper.captionText().toUtf8().constData());
      QVERIFY(stepper.stepCount() >= 1);
      QCOMPARE(stepper.currentStep(), 0);
      QCOMPARE(stepper.exampleBox()->currentData().toString(), QString::fromStdString(e.name));
      kinds.insert(stepper.plan().walk.kind);
      for (int s = 1; s <= stepper.stepCount(); ++s) {
        stepper.setStep(s);
        QVERIFY(stepper.captionText().startsWith(QString("Step %1 of %2").arg(s).arg(stepper.stepCount())));
        QVERIFY(!stepper.currentTransfers().empty());
      }
      QVERIFY(stepper.formulaText().contains("T = "));
    }
    // The five kinds a learner meets: all-gather, reduce-scatter, all-reduce, all-to-all, permute.
    QCOMPARE(kinds.size(), size_t{5});
    QVERIFY(!stepper.showExample("no-such-example"));
  }

  void stepsThroughARingAllGather() {
    Stepper stepper;
    stepper.resize(1200, 640);
    QSignalSpy steps(&stepper, &CollectiveStepper::stepChanged);
    QVERIFY(stepper.showExample("all-gather-ring"));
    // X=4,Y=4 with wraparound; all-gather over X: 4 rings of 4, 2 bidirectional steps.
    QCOMPARE(stepper.stepCount(), 2);
    QCOMPARE(stepper.currentStep(), 0);
    QVERIFY(stepper.captionText().startsWith("Start"));
    QVERIFY(stepper.currentTransfers().empty());
    QVERIFY(!stepper.previousButton()->isEnabled());
    stepper.grab();
    QCOMPARE(stepper.canvas()->lastPaintStats().arrows, 0);
    QCOMPARE(stepper.canvas()->lastPaintStats().tiles, 16);
    // X is the row axis: device 4 is drawn under device 0, device 1 to its right.
    QVERIFY(stepper.canvas()->tileRect(4).top() > stepper.canvas()->tileRect(0).bottom());
    QVERIFY(stepper.canvas()->tileRect(1).left() > stepper.canvas()->tileRect(0).right());
    // Each device starts with its own shard: one full cell of four.
    const auto& start = stepper.currentDevices();
    QCOMPARE(start.size(), size_t{16});
    QCOMPARE(start[4].position, int64_t{1});
    QCOMPARE(start[4].cells.size(), size_t{4});
    QCOMPARE(start[4].cells[1].fill, 1.0);
    QCOMPARE(start[4].cells[0].fill, 0.0);

    stepper.next();
    QCOMPARE(stepper.currentStep(), 1);
    QCOMPARE(steps.count(), 1);
    QVERIFY2(stepper.captionText().startsWith("Step 1 of 2: Every device sends its own shard to both of its neighbours along X"),
             qPrintable(stepper.captionText()));
    QCOMPARE(stepper.currentTransfers().size(), size_t{32});  // 4 groups x 4 devices x 2 directions
    for (const auto& t : stepper.currentTransfers()) {
      QCOMPARE(t.bytes, 8388608.0);
      QVERIFY(!t.half);
      // Groups are the columns: a transfer never leaves its column.
      QCOMPARE(t.src_device % 4, t.dst_device % 4);
      QCOMPARE(t.group, t.src_device % 4);
    }
    stepper.grab();
    auto stats = stepper.canvas()->lastPaintStats();
    QCOMPARE(stats.arrows, 32);
    QCOMPARE(stats.wraparound, 8);  // 0 <-> 12 closes each ring, both ways, in 4 columns
    QCOMPARE(stats.dashed, 0);
    // Device 4 now holds shards 0, 1, 2 (its neighbours' and its own).
    QCOMPARE(stepper.currentDevices()[4].cells[0].fill, 1.0);
    QCOMPARE(stepper.currentDevices()[4].cells[2].fill, 1.0);
    QCOMPARE(stepper.currentDevices()[4].cells[3].fill, 0.0);

    stepper.next();
    QCOMPARE(stepper.currentStep(), 2);
    QVERIFY(stepper.captionText().contains("half a shard"));
    stepper.grab();
    stats = stepper.canvas()->lastPaintStats();
    QCOMPARE(stats.arrows, 32);
    QCOMPARE(stats.dashed, 32);  // the last hop of an even ring carries halves
    for (const auto& d : stepper.currentDevices()) {
      for (const auto& c : d.cells) QCOMPARE(c.fill, 1.0);
    }
    QVERIFY(!stepper.nextButton()->isEnabled());
    QCOMPARE(stepper.playButton()->text(), QString("Replay"));
    stepper.next();  // stays at the end
    QCOMPARE(stepper.currentStep(), 2);
    stepper.previous();
    QCOMPARE(stepper.currentStep(), 1);
    QCOMPARE(stepper.slider()->value(), 1);
    stepper.slider()->setValue(0);
    QCOMPARE(stepper.currentStep(), 0);

    // The formula with the numbers: 1.5 shards of 8.39 MB on the busiest link at 45 GB/s (TPU v4).
    const QString f = stepper.formulaText();
    QVERIFY2(f.contains(QString::fromUtf8("T = max(T_hop \u00D7 hops, V_link / W) = max(1.00 \u00B5s \u00D7 2, 12.6 MB / 45.0 GB/s) = 280 \u00B5s (bandwidth-bound)")),
             qPrintable(f));
    QVERIFY(f.contains("N = 4 devices per group (along X), 4 groups at once"));
    QVERIFY(f.contains("S = 8.39 MB"));
    QVERIFY(f.contains("Book"));
    QVERIFY(std::abs(stepper.plan().walk.formula.time_s - 1.5 * 8388608 / 4.5e10) < 1e-12);
  }

  void reduceArrowsAreMarked() {
    Stepper stepper;
    stepper.resize(1200, 640);
    QVERIFY(stepper.showExample("reduce-scatter"));
    stepper.setStep(1);
    stepper.grab();
    const auto stats = stepper.canvas()->lastPaintStats();
    QVERIFY(stats.arrows > 0);
    QCOMPARE(stats.reduce, stats.arrows);  // every reduce-scatter message is added on arrival
    for (const auto& t : stepper.currentTransfers()) QVERIFY(t.reduce_on_arrival);
    QVERIFY(stepper.captionText().contains("Reduced on arrival"));
  }

  void playsToTheEndAndStops() {
    Stepper stepper;
    QVERIFY(stepper.showExample("all-reduce"));
    QCOMPARE(stepper.stepCount(), 4);  // reduce-scatter (2) + all-gather (2) round rings of 4
    QCOMPARE(stepper.plan().walk.steps[1].phase, std::string("reduce-scatter"));
    QCOMPARE(stepper.plan().walk.steps[2].phase, std::string("all-gather"));
    stepper.setPlayInterval(20);
    stepper.play();
    QVERIFY(stepper.isPlaying());
    QCOMPARE(stepper.playButton()->text(), QString("Pause"));
    QTRY_COMPARE_WITH_TIMEOUT(stepper.currentStep(), 4, 5000);
    QTRY_VERIFY_WITH_TIMEOUT(!stepper.isPlaying(), 2000);
    QVERIFY(stepper.captionText().contains("all-gather of the reduced chunks"));
    // Play from the end starts again from the beginning.
    stepper.setPlayInterval(100000);
    stepper.play();
    QCOMPARE(stepper.currentStep(), 0);
    stepper.togglePlay();
    QVERIFY(!stepper.isPlaying());
  }

  void settingsReplanTheSameCollective() {
    Stepper stepper;
    QVERIFY(stepper.showExample("all-gather-ring"));
    QCOMPARE(stepper.stepCount(), 2);
    // Without wraparound each column is a line: 3 steps, and the busiest link carries 3 shards.
    const int off = stepper.wraparoundBox()->findData(static_cast<int>(TopologyOptions::Wraparound::kNone));
    QVERIFY(off >= 0);
    stepper.wraparoundBox()->setCurrentIndex(off);
    emit stepper.wraparoundBox()->activated(off);
    QVERIFY(stepper.hasPlan());
    QCOMPARE(stepper.stepCount(), 3);
    QVERIFY(stepper.formulaText().contains("25.2 MB / 45.0 GB/s"));
    QVERIFY(stepper.formulaText().contains("N\u22121 on a line without wraparound"));
  }

  void badGroupsSayWhy() {
    Stepper stepper;
    TeachingRequest r;
    r.kind = CollectiveKind::kAllGather;
    r.mesh = DeviceMesh::Parse("X=4").value();
    r.groups = {{0, 1}, {2, 7}};
    r.operand_bytes = 1024;
    QVERIFY(!stepper.setRequest(r));
    QVERIFY(!stepper.hasPlan());
    QVERIFY2(stepper.captionText().contains("device 7"), qPrintable(stepper.captionText()));
    QVERIFY(!stepper.nextButton()->isEnabled());
    QCOMPARE(stepper.stepCount(), 0);
    stepper.grab();  // paints the message, no crash
    r.groups = {{0, 1}, {2, 3}};
    r.chip = "tpu-v99";
    QVERIFY(!stepper.setRequest(r));
    QVERIFY2(stepper.captionText().contains("tpu-v99"), qPrintable(stepper.captionText()));
    r.chip.clear();
    QVERIFY(stepper.setRequest(r));
    QCOMPARE(stepper.plan().request.chip, pipeline::DefaultChip());
  }

  void darkPaletteIsDark() {
    Stepper stepper;
    stepper.setPalette(Dark());
    stepper.resize(1000, 600);
    QVERIFY(stepper.showExample("all-to-all"));
    stepper.setStep(1);
    const QImage image = stepper.canvas()->grab().toImage();
    QVERIFY2(MeanGrey(image) < 110, qPrintable(QString::number(MeanGrey(image))));
    QVERIFY(stepper.canvas()->lastPaintStats().arrows > 0);
    // The arrow colours are bright enough to see on the dark tiles.
    QVERIFY(stepper.canvas()->groupColor(0).lightness() > 120);
  }

  void doubleClickInThePartitionedProgramOpensIt() {
    Session doc;
    PartitionedView partitioned;
    partitioned.setModels(doc.document(), doc.analysis(), doc.jobs());
    Stepper stepper;
    // What the main window does with the signal.
    connect(&partitioned, &PartitionedView::collectiveActivated, &stepper,
            [&](const InsertedCollective& c, const std::vector<std::vector<int64_t>>& participants) {
              stepper.showCollective(c, participants, doc.document()->mesh());
            });
    QVERIFY(doc.loadHloText(kModule, "teach.hlo").ok());
    QVERIFY(WaitUntilIdle(doc));
    partitioned.resize(900, 500);
    partitioned.show();
    partitioned.partitionNow();
    QTRY_VERIFY_WITH_TIMEOUT(!doc.analysis()->partitionBusy(), 60000);
    QVERIFY(WaitUntilIdle(doc));
    const PartitionedProgram& out = doc.analysis()->partition();
    QVERIFY2(out.ok(), out.message.c_str());
    QVERIFY(!out.result->collectives.empty());
    partitioned.showCollectives();  // the Collectives tab
    QTableView* table = partitioned.collectiveTable();
    QTRY_VERIFY(table->isVisible());
    QCOMPARE(table->model()->rowCount(), static_cast<int>(out.result->collectives.size()));
    const QModelIndex index = table->model()->index(0, 0);
    table->scrollTo(index);
    QSignalSpy activated(&partitioned, &PartitionedView::collectiveActivated);
    const QPoint at = table->visualRect(index).center();
    QVERIFY(table->viewport()->rect().contains(at));
    QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, at);
    QTest::mouseDClick(table->viewport(), Qt::LeftButton, {}, at);
    QCOMPARE(activated.count(), 1);
    const InsertedCollective& c = out.result->collectives.front();
    QVERIFY2(stepper.hasPlan(), qPrintable(stepper.captionText()));
    QCOMPARE(std::string(CollectiveKindName(stepper.plan().walk.kind)), std::string(OpcodeName(c.kind)));
    QVERIFY(stepper.titleText().contains(QString::fromStdString(c.instruction)));
    QCOMPARE(stepper.plan().request.mesh, doc.document()->mesh());
    QCOMPARE(stepper.plan().request.chip, pipeline::DefaultChip());
    QCOMPARE(stepper.plan().request.operand_bytes, static_cast<double>(c.bytes_per_device));
    // The groups are the collective's participants (XLA's group modes), as the table has them.
    QCOMPARE(stepper.plan().request.groups, partitioned.collectives()->participants(0));
    QVERIFY(stepper.stepCount() >= 1);
    stepper.next();
    QVERIFY(!stepper.currentTransfers().empty());
    QVERIFY(stepper.formulaText().contains("T = "));
  }

  void screenshotShowsTheTeachingPanel() {
    if (!QFileInfo::exists(SHARDSCOPE_GUI_PATH)) QSKIP("the shardscope binary is not built (ninja shardscope)");
    QTemporaryDir dir;
    const QString png = dir.filePath("teaching.png");
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QT_QPA_PLATFORM", "offscreen");
    p.setProcessEnvironment(env);
    p.start(SHARDSCOPE_GUI_PATH, {"--screenshot", png, "--view", "teaching", "--size", "1400x900"});
    QVERIFY(p.waitForFinished(300000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    const QImage image(png);
    QCOMPARE(image.size(), QSize(1400, 900));
    // Arrow colours are saturated; many distinct colours were painted.
    int saturated = 0;
    for (int y = 0; y < image.height(); y += 4) {
      for (int x = 0; x < image.width(); x += 4) saturated += QColor(image.pixel(x, y)).hsvSaturation() > 120;
    }
    QVERIFY2(saturated > 200, qPrintable(QString::number(saturated)));
  }
};

QTEST_MAIN(TestGuiTeaching)
#include "test_gui_teaching.moc"
