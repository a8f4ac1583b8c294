// The simulated slice's placement in the GUI (issue 12, "the placement is shown and can be
// overridden"): the simulation panel's slice row names the placement a run was simulated with; an
// override (placement, wraparound, torus shape) re-simulates and gives the same step time as the
// CLI's --placement/--wraparound/--topology (one pipeline::SliceOptions for both); the override is
// saved with the project and read back; an override that cannot hold the mesh is a clear message.
#include <QAction>
#include <QComboBox>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextDocument>
#include <QTextLayout>
#include <QUndoStack>
#include <QtTest>

#include "app/gui/main_window.h"
#include "app/gui/project_file.h"
#include "app/gui/session.h"
#include "app/pipeline/reproduce.h"
#include "cli_test_support.h"
#include "gui_test_support.h"
#include "simulator/hardware.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/simulation_view.h"
#include "views/slice_placement_bar.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

// 16 devices; the contracted dimension is split, so the step ends in an all-reduce of y over all
// 16 — a ring whose cost depends on how the mesh lies on the slice. y's sharding is given so the
// CLI and the GUI partition the same program.
const char* kModule = R"(HloModule place, num_partitions=16

ENTRY main {
  x = f32[512,4096] parameter(0), sharding={devices=[1,16]<=[16]}
  w = f32[4096,2048] parameter(1), sharding={devices=[16,1]<=[16]}
  ROOT y = f32[512,2048] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
}
)";

ProjectSliceOverride RowMajorTorus() {
  ProjectSliceOverride o;
  o.placement = "row-major";
  o.wraparound = true;
  o.shape = {4, 4};
  return o;
}

}  // namespace

class TestGuiSlicePlacement : public QObject {
  Q_OBJECT

  QTemporaryDir runs_dir_;

 private slots:
  void initTestCase() { QVERIFY(shardscope::gui::UseTestRunStore(runs_dir_)); }

  // The same override in the GUI and on the command line: the same slice, placement and step time.
  void overrideMatchesTheCli() {
    if (sim::ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    Session session;
    SimulationView view;
    view.setModels(session.document(), session.analysis(), session.runs());
    QVERIFY(session.loadHloText(kModule, "place.hlo").ok());
    QVERIFY(WaitUntilIdle(session, 60000));
    const QString mesh = QString::fromStdString(session.document()->mesh().ToString());
    QCOMPARE(session.document()->mesh().num_devices(), int64_t{16});

    // The generation's slice first: the row names it.
    session.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(session, 120000));
    const SimulatedStep& first = session.analysis()->simulation();
    QVERIFY2(first.ok(), first.message.c_str());
    const auto first_run = first.run;
    const std::string default_placement = first.run->inputs.placement;
    QVERIFY(!default_placement.empty());
    QVERIFY2(view.slicePlacementBar()->placementLabel()->text().contains(QString::fromStdString(default_placement).toHtmlEscaped()),
             qPrintable(view.slicePlacementBar()->placementLabel()->text()));

    // The override re-simulates by itself (the panel's chip: tpu-v4, the default).
    session.document()->setSliceOverride(RowMajorTorus());
    QVERIFY(WaitUntilIdle(session, 120000));
    const SimulatedStep& step = session.analysis()->simulation();
    QVERIFY2(step.ok(), step.message.c_str());
    QVERIFY(step.run != first_run);
    const std::string placement = step.run->inputs.placement;
    QVERIFY2(placement.find("row-major") != std::string::npos, placement.c_str());
    QVERIFY2(step.run->inputs.topology_options.find("4x4") != std::string::npos, step.run->inputs.topology_options.c_str());
    // The line names the placement actually used.
    const QString line = view.slicePlacementBar()->placementLabel()->text();
    QVERIFY2(line.contains(QString::fromStdString(placement).toHtmlEscaped()), qPrintable(line));
    QCOMPARE(view.slicePlacementBar()->placementCombo()->currentText(), QString("row-major"));
    QCOMPARE(view.slicePlacementBar()->shapeEdit()->text(), QString("4x4"));

    // The CLI with the same options.
    QTemporaryDir dir;
    const QString file = dir.filePath("place.hlo");
    {
      QFile f(file);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(kModule);
    }
    const auto cli = shardscope::testing::RunCli({"simulate", file, "--chip", "tpu-v4", "--mesh", mesh, "--placement", "row-major",
                                                  "--wraparound", "--topology", "4x4", "--json", "--db", dir.filePath("cli.sqlite")});
    QVERIFY2(cli.code == 0, qPrintable(cli.err));
    // One JSON object on the first line, then the "step_time_us: ..." line.
    const QJsonObject json = QJsonDocument::fromJson(cli.out.section('\n', 0, 0).toUtf8()).object();
    QVERIFY2(!json.isEmpty(), qPrintable(cli.out));
    QCOMPARE(json["placement"].toString().toStdString(), placement);
    QCOMPARE(json["topology"].toString().toStdString(), step.run->inputs.topology_options);
    const double cli_step = json["step_time_s"].toDouble();
    QVERIFY(cli_step > 0);
    QVERIFY2(std::abs(cli_step - step.run->summary.step_time_s) <= 1e-9 * cli_step,
             qPrintable(QString("CLI %1 s, GUI %2 s").arg(cli_step, 0, 'g', 12).arg(step.run->summary.step_time_s, 0, 'g', 12)));
  }

  // File ▸ Examples ▸ Paper configurations: GSPMD Table 2's 64B on 128 TPU v3 cores opens at the
  // paper's sizes on its slice (two cores per chip, the override's devices-per-chip control says
  // so) and simulates one step on tpu-v3: the same step time, peak and slice as `reproduce` gives
  // that column (validation.md G4), so the GUI and the CLI agree on a published configuration.
  void paperConfigurationMatchesReproduce() {
    if (sim::ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    shardscope::gui::MainWindow w;
    w.setBatchMode(true);
    w.resize(1600, 1000);
    w.show();
    QAction* entry = nullptr;
    for (QAction* a : w.findChildren<QAction*>())
      if (a->text() == "64B, 128 devices" && a->toolTip().contains("reproduce gspmd-table2")) entry = a;
    QVERIFY2(entry, "File > Examples > Paper configurations > gspmd-table2 > 64B, 128 devices");
    entry->trigger();
    shardscope::gui::Session& session = *w.session();
    QVERIFY(WaitUntilIdle(session, 300000));
    const DocumentModel* doc = session.document();
    QCOMPARE(QString::fromStdString(doc->mesh().ToString()), QString("X=8,Y=16"));
    QCOMPARE(doc->sliceOverride().cores_per_chip, std::optional<int64_t>(2));
    const SimulatedStep& step = session.analysis()->simulation();
    QVERIFY2(step.ok(), step.message.c_str());
    const auto& col = [] {
      auto c = pipeline::FindReproduceCase("gspmd-table2");
      for (const pipeline::ReproduceColumn& x : (*c)->columns)
        if (x.label == "64B, 128 devices") return x;
      return pipeline::ReproduceColumn{};
    }();
    QCOMPARE(QString::fromStdString(col.label), QString("64B, 128 devices"));
    auto cli = pipeline::SimulateZooConfiguration(col, {});
    QVERIFY2(cli.ok(), cli.ok() ? "" : cli.error().message.c_str());
    const double gui_step = step.run->summary.step_time_s, cli_step = cli->summary.step_time_s;
    QVERIFY2(std::abs(gui_step - cli_step) <= 1e-9 * cli_step,
             qPrintable(QString("reproduce %1 s, GUI %2 s").arg(cli_step, 0, 'g', 12).arg(gui_step, 0, 'g', 12)));
    QCOMPARE(step.run->summary.peak_memory_bytes, cli->summary.peak_memory_bytes);
    QCOMPARE(step.run->inputs.topology_options, cli->inputs.topology_options);
    // The paper's 5.74 s within the issue's 15% (what `reproduce gspmd-table2` checks too).
    QVERIFY2(std::abs(gui_step - 5.74) <= 0.15 * 5.74, qPrintable(QString::number(gui_step)));
    // The simulation panel shows the paper's figures beside the simulated ones, as the CLI's table.
    views::SimulationView* panel = w.simulationView();
    QVERIFY(panel->publishedComparisonTitle().startsWith("gspmd-table2, 64B, 128 devices; GSPMD paper, Table 2"));
    const pipeline::ReproducedColumn compared = pipeline::CompareWithPublished(col, *step.run);
    QCOMPARE(compared.values.size(), size_t{3});
    QCOMPARE(compared.values[0].simulated, gui_step);
    const QString summary = panel->summaryText();
    QVERIFY2(summary.contains("Published"), qPrintable(summary));
    QVERIFY2(summary.contains("5.74 s"), qPrintable(summary));  // Table 2's step
    QVERIFY2(summary.contains("62.7%"), qPrintable(summary));   // and MFU
    QVERIFY2(summary.contains(QString::fromStdString(pipeline::ReproduceDifferenceText(compared.values[0]))),
             qPrintable(summary));
    // In a narrow panel (a 1024x700 window gives it under 200 px) no figure's name is broken
    // mid-word: the step's figures are lines, not a table that squeezed its first column.
    QTextBrowser* browser = nullptr;
    for (QTextBrowser* b : panel->findChildren<QTextBrowser*>())
      if (b->toPlainText() == summary) browser = b;
    QVERIFY(browser);
    for (const int width : {170, 240, 600}) {
      std::unique_ptr<QTextDocument> narrow(browser->document()->clone());
      narrow->setTextWidth(width);
      (void)narrow->size();  // lays the document out
      QStringList lines;
      for (QTextBlock b = narrow->begin(); b.isValid(); b = b.next()) {
        QTextLayout* layout = b.layout();
        for (int i = 0; i < layout->lineCount(); ++i)
          lines << b.text().mid(layout->lineAt(i).textStart(), layout->lineAt(i).textLength()).trimmed();
      }
      for (const QString figure : {"step time", "communication", "exposed communication", "peak memory / device",
                                   "bytes communicated", "device classes"}) {
        const QString word = figure.split(' ').last();
        bool whole = false;
        for (const QString& line : lines) whole = whole || line.contains(word);
        QVERIFY2(whole, qPrintable(QString("at %1 px \"%2\" is broken: %3").arg(width).arg(figure, lines.join(" | "))));
      }
    }
    // Simulated at other sizes (a shorter sequence, the panel's Sizes): not the paper's
    // configuration, no published figures beside it; back at the document's, they are again.
    DocumentModel* sized = session.document();
    ProjectSimulatedSizes shorter;
    shorter.zoo_settings["seq"] = "512";
    sized->setSimulatedSizes(shorter);
    QVERIFY(WaitUntilIdle(session, 300000));
    QVERIFY2(session.analysis()->simulation().ok(), session.analysis()->simulation().message.c_str());
    QVERIFY(!session.analysis()->simulation().sizes.empty());
    QVERIFY(!panel->summaryText().contains("Published"));
    sized->undoStack()->undo();
    QVERIFY(WaitUntilIdle(session, 300000));
    QVERIFY(session.analysis()->simulation().ok());
    QCOMPARE(session.analysis()->simulation().run->summary.step_time_s, gui_step);
    QVERIFY(panel->summaryText().contains("Published"));
    auto* bar = w.findChild<SlicePlacementBar*>();
    QVERIFY(bar);
    QCOMPARE(bar->coresCombo()->currentText(), QString("2 per chip"));
    // Back to the chip's own devices: one device per chip re-simulates on a slice of 128 chips.
    bar->coresCombo()->setCurrentIndex(0);
    emit bar->coresCombo()->activated(0);
    QVERIFY(!doc->sliceOverride().cores_per_chip.has_value());
    QVERIFY(WaitUntilIdle(session, 300000));
    QVERIFY(session.analysis()->simulation().ok());
    QVERIFY(session.analysis()->simulation().run->summary.step_time_s != gui_step);
    // That run is not the paper's configuration: no published figures beside it.
    QVERIFY(!panel->summaryText().contains("Published"));
  }

  // An override that cannot hold the mesh: a message that says so, in the status and on the
  // slice row; nothing crashes, and a bad shape typed in the row is refused there.
  void invalidOverrideIsAClearMessage() {
    if (sim::ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    Session session;
    SimulationView view;
    view.setModels(session.document(), session.analysis(), session.runs());
    QVERIFY(session.loadHloText(kModule, "place.hlo").ok());
    QVERIFY(WaitUntilIdle(session, 60000));
    ProjectSliceOverride small;
    small.shape = {3, 3};  // 9 chips for 16 devices
    session.document()->applySliceOverride(small);
    session.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(session, 120000));
    const SimulatedStep& step = session.analysis()->simulation();
    QVERIFY(!step.ok());
    QVERIFY(step.slice_failed);
    QVERIFY2(step.message.find("cannot place mesh") != std::string::npos && step.message.find("3x3") != std::string::npos,
             step.message.c_str());
    QVERIFY2(view.slicePlacementBar()->placementLabel()->text().contains("cannot place mesh"),
             qPrintable(view.slicePlacementBar()->placementLabel()->text()));

    // Typed text that is no shape: refused on the row, the saved override kept.
    QLineEdit* edit = view.slicePlacementBar()->shapeEdit();
    edit->setText("4x");
    emit edit->editingFinished();
    QVERIFY2(view.slicePlacementBar()->placementLabel()->text().contains("not a slice shape"),
             qPrintable(view.slicePlacementBar()->placementLabel()->text()));
    QCOMPARE(session.document()->sliceOverride(), small);
    // An unknown placement name (a hand-edited project): the simulation says so.
    ProjectSliceOverride bad;
    bad.placement = "diagonal";
    session.document()->applySliceOverride(bad);
    session.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(session, 120000));
    QVERIFY(!session.analysis()->simulation().ok());
    QVERIFY2(session.analysis()->simulation().message.find("unknown placement 'diagonal'") != std::string::npos,
             session.analysis()->simulation().message.c_str());
  }

  // The override is part of the project: saved, read back, undoable; a project written before it
  // existed opens with the generation's slice.
  void projectKeepsTheOverride() {
    Session session;
    QVERIFY(session.loadHloText(kModule, "place.hlo").ok());
    QVERIFY(WaitUntilIdle(session, 60000));
    QVERIFY(session.document()->sliceOverride().empty());
    session.document()->setSliceOverride(RowMajorTorus());
    QCOMPARE(session.document()->sliceOverride(), RowMajorTorus());
    QVERIFY(session.document()->isModified());
    session.document()->undoStack()->undo();
    QVERIFY(session.document()->sliceOverride().empty());
    session.document()->undoStack()->redo();
    QCOMPARE(session.document()->sliceOverride(), RowMajorTorus());

    QTemporaryDir dir;
    const QString path = dir.filePath("place.shardscope");
    QVERIFY(session.saveProject(path).ok());
    Session again;
    QVERIFY(again.loadProject(path).ok());
    QVERIFY(WaitUntilIdle(again, 60000));
    QCOMPARE(again.document()->sliceOverride(), RowMajorTorus());

    // The same project without the "slice" member (as earlier versions wrote it).
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QJsonObject root = QJsonDocument::fromJson(f.readAll()).object();
    f.close();
    QVERIFY(root.contains("analysis"));
    root.remove("analysis");
    Session old;
    QVERIFY(old.loadProjectJson(QJsonDocument(root).toJson(), "old.shardscope").ok());
    QVERIFY(WaitUntilIdle(old, 60000));
    QVERIFY(old.document()->sliceOverride().empty());
  }
};

QTEST_MAIN(TestGuiSlicePlacement)
#include "test_gui_slice_placement.moc"
