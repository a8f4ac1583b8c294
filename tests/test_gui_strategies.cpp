// The Strategies panel in the main window (offscreen): a strategy search of the 2-layer
// Transformer on 8 TPU v4 devices runs in the background with its progress; its table is ranked by
// step time, its chart has a series per family, the HBM line and the Pareto front; choosing a row
// makes the candidate the document (its annotations, its mesh, a simulated step); two rows are
// compared in words; Cancel stops a running search; documents the search does not cover and bad
// settings are said so.
#include <QAbstractItemModel>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QUndoStack>
#include <QLabel>
#include <QLineEdit>
#include <QChart>
#include <QLineSeries>
#include <QMenu>
#include <QProgressBar>
#include <QPushButton>
#include <QScatterSeries>
#include <QSignalSpy>
#include <QTableView>
#include <QTextBrowser>
#include <QtTest>

#include <set>

#include "app/gui/main_window.h"
#include "app/gui/search_jobs.h"
#include "app/gui/session.h"
#include "app/search/candidate.h"
#include "app/search/report.h"
#include "core/base/units.h"
#include "core/sharding/mesh.h"
#include "gui_test_support.h"
#include "simulator/topology.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/job_tracker.h"
#include "views/narrow_layout.h"
#include "views/strategies_panel.h"

using namespace shardscope;
using namespace shardscope::gui;

namespace {

search::Settings DocumentAnnotations(const views::DocumentModel& doc) {
  return search::AnnotationList(*doc.annotatedClone(/*with_inferred=*/false));
}

QStringList SeriesNames(const QChart& chart) {
  QStringList names;
  for (QAbstractSeries* s : chart.series()) names << s->name();
  return names;
}

// The main window at 1600x1000 with the zoo Transformer example open and the Strategies panel shown.
bool OpenTransformerStrategies(MainWindow& w) {
  w.setBatchMode(true);
  w.resize(1600, 1000);
  w.show();
  QString error;
  if (!w.openExample("transformer", &error)) {
    qWarning("%s", qPrintable(error));
    return false;
  }
  return WaitUntilIdle(*w.session()) && w.showView("strategies");
}

}  // namespace

class TestGuiStrategies : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase();
  void searchRankChartOpenCompare();
  void cancelStopsARunningSearch();
  void unsupportedDocumentAndBadSettings();
  void hloModuleSearchesItsShardings();
  void familyFilterLimitsTheSearch();
  void tooSmallModelSaysWhereItSplits();
  void paperConfigurationOffersItsSearch();
  void simulatedSizesOfferTheSearch();

 private:
  QTemporaryDir runs_;
};

void TestGuiStrategies::initTestCase() { QVERIFY(UseTestRunStore(runs_)); }

void TestGuiStrategies::searchRankChartOpenCompare() {
  MainWindow w;
  QVERIFY(OpenTransformerStrategies(w));
  views::StrategiesPanel* panel = w.strategiesPanel();
  SearchJobs* jobs = w.searchJobs();
  QCOMPARE(jobs->documentModel(), QString("transformer"));
  QVERIFY(panel->searchButton()->isEnabled());
  QVERIFY(!panel->cancelButton()->isEnabled());

  panel->setChip("tpu-v4");
  QCOMPARE(panel->chip(), QString("tpu-v4"));
  panel->setDevices(8);
  panel->setSettingsText("layers=2");
  int max_seen = 0;  // the progress bar's range while it counted candidates
  connect(panel->progressBar(), &QProgressBar::valueChanged, this,
          [&max_seen, panel](int v) { if (v > 0 && panel->isRunning()) max_seen = std::max(max_seen, panel->progressBar()->maximum()); });
  QTest::mouseClick(panel->searchButton(), Qt::LeftButton);
  // In the background: the window answers, Cancel is offered, the progress bar moves.
  QVERIFY(jobs->busy());
  QVERIFY(panel->isRunning());
  QVERIFY(panel->cancelButton()->isEnabled());
  QVERIFY(!panel->searchButton()->isEnabled());
  QVERIFY(QTest::qWaitFor([&] { return !jobs->busy(); }, 300000));
  QVERIFY(!panel->isRunning());
  QVERIFY2(max_seen > 1, "the progress bar counted the candidates");

  // The ranked table: rows as the search ranked them, those that fit by ascending step time.
  const search::StrategyPanelModel* results = jobs->results();
  QVERIFY(results);
  const views::StrategyResults& shown = panel->results();
  QVERIFY2(shown.rows.size() >= 10, qPrintable(QString::number(shown.rows.size())));
  QCOMPARE(shown.rows.size(), results->rows.size());
  QAbstractItemModel* table = panel->table()->model();
  QCOMPARE(table->rowCount(), static_cast<int>(shown.rows.size()));
  double last = 0;
  size_t fitting = 0;
  for (size_t i = 0; i < shown.rows.size(); ++i) {
    const views::StrategyEntry& r = shown.rows[i];
    QCOMPARE(r.label.toStdString(), results->rows[i].label);
    QVERIFY(table->index(static_cast<int>(i), 0).data().toString().startsWith(QString::number(i + 1)));
    if (!(r.simulated && r.fits)) continue;
    QCOMPARE(fitting, i);  // every one that fits before every other
    ++fitting;
    QVERIFY2(r.step_time_s >= last, qPrintable(r.label));
    last = r.step_time_s;
    const QString step = table->index(static_cast<int>(i), 3).data().toString();
    QVERIFY2(step.endsWith(QString::fromStdString(FormatSeconds(r.step_time_s))), qPrintable(step));
  }
  QVERIFY(fitting >= 2);
  QVERIFY(panel->table()->model()->index(0, 0).data().toString() == "1*");  // the fastest is on the front

  // The chart: one scatter series per family, the Pareto front, the HBM capacity as a flat line.
  const QStringList names = SeriesNames(*panel->chart());
  const std::set<QString> families(shown.families.begin(), shown.families.end());
  QVERIFY(families.count("in-layer") && families.count("data-parallel") && families.count("pipelining"));
  for (const QString& f : shown.families) {
    QVERIFY2(names.contains(f), qPrintable(names.join(", ")));
    auto* s = qobject_cast<QScatterSeries*>(panel->chart()->series().at(names.indexOf(f)));
    QVERIFY(s && s->count() > 0);
  }
  QVERIFY(names.contains("Pareto front"));
  QCOMPARE(shown.hbm_bytes, 32.0 * (1 << 30));
  int hbm_index = -1;
  for (int i = 0; i < names.size(); ++i)
    if (names[i].startsWith("HBM ")) hbm_index = i;
  QVERIFY2(hbm_index >= 0, qPrintable(names.join(", ")));
  auto* hbm = qobject_cast<QLineSeries*>(panel->chart()->series().at(hbm_index));
  QVERIFY(hbm && hbm->count() == 2);
  QCOMPARE(hbm->at(0).y(), hbm->at(1).y());
  QVERIFY(hbm->at(0).y() > 0);
  // The legend names every series but the selection ring.
  const QString legend = panel->legend()->text();
  for (const QString& f : shown.families) QVERIFY2(legend.contains(f), qPrintable(legend));
  QVERIFY(legend.contains("HBM 34.4 GB") && legend.contains("Pareto front") && !legend.contains("selected"));

  // Choosing a candidate makes it the document: its annotations, its mesh, a simulated step.
  const search::Settings before = DocumentAnnotations(*w.document());
  int pick = -1;
  search::Settings expected;
  for (size_t i = 0; i < results->results.size() && pick < 0; ++i) {
    const search::CandidateResult& r = results->results[i];
    if (!r.simulated()) continue;
    auto m = search::BuildCandidateModule(r.candidate);
    QVERIFY(m.ok());
    expected = search::AnnotationList(**m);
    if (expected != before) pick = static_cast<int>(i);
  }
  QVERIFY2(pick >= 0, "some candidate is annotated unlike the example");
  // The simulation panel's chip was another one: it follows the candidate's.
  auto sim_chip = w.findChild<QComboBox*>("simulationChip");
  QVERIFY(sim_chip);
  sim_chip->setCurrentText("tpu-v5e");
  panel->selectRows({pick});
  QVERIFY(QTest::qWaitFor([&] { return jobs->chosenRow() == pick; }, 60000));
  QVERIFY(!panel->comparisonView()->isVisible());
  QCOMPARE(DocumentAnnotations(*w.document()), expected);
  QVERIFY(DocumentAnnotations(*w.document()) != before);
  QCOMPARE(w.document()->mesh().num_devices(), int64_t{8});
  QCOMPARE(w.document()->source(), QString("transformer"));
  QVERIFY(WaitUntilIdle(*w.session(), 300000));
  QVERIFY2(w.session()->analysis()->simulation().ok(), w.session()->analysis()->simulation().message.c_str());
  // On the candidate's chip (TPU v4: 32 GiB per device) and mesh.
  QCOMPARE(w.session()->analysis()->simulation().run->summary.device_hbm_bytes, int64_t{32} << 30);
  QCOMPARE(w.session()->analysis()->simulation().run->summary.num_devices, int64_t{8});
  QCOMPARE(sim_chip->currentText(), QString("tpu-v4"));
  // On the pod it was ranked on: the search's slice, cores per chip and mesh order are the
  // document's slice (not an edit), and the simulated step is the table's (at layers=2 every
  // candidate is simulated exactly, not extrapolated).
  {
    const search::CandidateResult& chosen = results->results[static_cast<size_t>(pick)];
    const ProjectSliceOverride slice = w.document()->sliceOverride();
    QCOMPARE(sim::SliceShapeString(slice.shape), chosen.candidate.slice);
    QCOMPARE(slice.cores_per_chip.value_or(0), chosen.candidate.cores_per_chip);
    QCOMPARE(slice.mesh_order, chosen.candidate.placement);
    QVERIFY(!chosen.extrapolated);
    const sim::RunResult& run = *w.session()->analysis()->simulation().run;
    QVERIFY2(run.inputs.placement.find("in order " + chosen.candidate.placement) == 0, run.inputs.placement.c_str());
    QVERIFY2(std::abs(run.summary.step_time_s - chosen.summary.step_time_s) <= 1e-9 * chosen.summary.step_time_s,
             qPrintable(QString("%1: GUI %2 s, search %3 s")
                            .arg(QString::fromStdString(chosen.candidate.Label()))
                            .arg(run.summary.step_time_s, 0, 'g', 12)
                            .arg(chosen.summary.step_time_s, 0, 'g', 12)));
    QCOMPARE(run.summary.peak_memory_bytes, chosen.summary.peak_memory_bytes);
    // Every other candidate simulated at full depth, opened, runs at its ranked figures too (the
    // pipelined ones partition propagation's result, which refines the stage weights' partially
    // replicated LayerNorm scales, as the search does).
    QStringList mismatches;
    int opened = 0;
    for (size_t i = 0; i < results->results.size(); ++i) {
      const search::CandidateResult& c = results->results[i];
      if (!c.simulated() || c.extrapolated || c.candidate.OptionOn("weight_update_sharding")) continue;
      panel->selectRows({static_cast<int>(i)});
      QVERIFY(QTest::qWaitFor([&] { return jobs->chosenRow() == static_cast<int>(i); }, 60000));
      QVERIFY(WaitUntilIdle(*w.session(), 300000));
      const auto& sim = w.session()->analysis()->simulation();
      QVERIFY2(sim.ok(), sim.message.c_str());
      ++opened;
      if (std::abs(sim.run->summary.step_time_s - c.summary.step_time_s) > 1e-9 * c.summary.step_time_s ||
          sim.run->summary.peak_memory_bytes != c.summary.peak_memory_bytes)
        mismatches << QString("%1: GUI %2 s %3 B, search %4 s %5 B")
                          .arg(QString::fromStdString(c.candidate.Label()))
                          .arg(sim.run->summary.step_time_s, 0, 'g', 10)
                          .arg(sim.run->summary.peak_memory_bytes)
                          .arg(c.summary.step_time_s, 0, 'g', 10)
                          .arg(c.summary.peak_memory_bytes);
    }
    QVERIFY2(mismatches.isEmpty(), qPrintable(mismatches.join("\n")));
    QVERIFY(opened >= 10);
    panel->selectRows({pick});
    QVERIFY(QTest::qWaitFor([&] { return jobs->chosenRow() == pick; }, 60000));
    QVERIFY(WaitUntilIdle(*w.session(), 300000));
    auto order = w.findChild<QComboBox*>("slicePlacementMode");
    QVERIFY(order);
    QCOMPARE(order->currentText(), "order " + QString::fromStdString(chosen.candidate.placement));
  }
  // The document stays searchable as the model it came from, with the search's settings.
  QCOMPARE(jobs->documentModel(), QString("transformer"));
  QCOMPARE(panel->settingsText(), QString("layers=2"));
  QVERIFY(panel->searchButton()->isEnabled());

  // A weight-update-sharding candidate switches the partitioned view's toggle on (the document's
  // option, as the search evaluated it); a candidate of another family switches it off again.
  auto wus_toggle = w.findChild<QCheckBox*>("weightUpdateSharding");
  QVERIFY(wus_toggle);
  int wus_row = -1, other_row = -1;
  for (size_t i = 0; i < results->results.size(); ++i) {
    const search::Candidate& c = results->results[i].candidate;
    if (c.family == "weight-update-sharding" && wus_row < 0 && static_cast<int>(i) != pick) wus_row = static_cast<int>(i);
    if (c.family != "weight-update-sharding" && !c.OptionOn("weight_update_sharding") && other_row < 0 &&
        static_cast<int>(i) != pick)
      other_row = static_cast<int>(i);
  }
  QVERIFY2(wus_row >= 0 && other_row >= 0, "the search has weight-update-sharding candidates and others");
  QVERIFY(!w.document()->weightUpdateSharding());
  panel->selectRows({wus_row});
  QVERIFY(QTest::qWaitFor([&] { return jobs->chosenRow() == wus_row; }, 60000));
  QVERIFY(w.document()->weightUpdateSharding());
  QVERIFY(wus_toggle->isChecked());
  QVERIFY(WaitUntilIdle(*w.session(), 300000));
  QVERIFY2(w.session()->analysis()->simulation().ok(), w.session()->analysis()->simulation().message.c_str());
  QVERIFY(wus_toggle->isChecked());
  // Opening is not an edit: nothing to undo.
  QVERIFY(!w.document()->undoStack()->canUndo());
  panel->selectRows({other_row});
  QVERIFY(QTest::qWaitFor([&] { return jobs->chosenRow() == other_row; }, 60000));
  QVERIFY(!w.document()->weightUpdateSharding());
  QVERIFY(!wus_toggle->isChecked());
  QVERIFY(WaitUntilIdle(*w.session(), 300000));

  // Two rows: compared side by side, the difference in words (the first selected is opened).
  panel->selectRows({0, 1});
  QCOMPARE(panel->selectedRows(), (std::vector<int>{0, 1}));
  QVERIFY(panel->comparisonView()->isVisible());
  const QString text = panel->comparisonView()->toPlainText();
  const std::string expected_words = results->Compare(0, 1);
  QVERIFY2(text.contains(QString::fromStdString(expected_words.substr(0, expected_words.find('\n')))), qPrintable(text));
  QVERIFY2(text.contains("faster than A") || text.contains("slower than A") || text.contains("same time"), qPrintable(text));
  QVERIFY(text.contains("peak memory / HBM"));
  QVERIFY(text.contains("A: " + QString::fromStdString(results->rows[0].label)));
  QVERIFY(QTest::qWaitFor([&] { return jobs->chosenRow() == 0; }, 60000));
  QCOMPARE(panel->selectedRows(), (std::vector<int>{0, 1}));
  QVERIFY(WaitUntilIdle(*w.session(), 300000));
}

void TestGuiStrategies::cancelStopsARunningSearch() {
  MainWindow w;
  w.setBatchMode(true);
  w.resize(1024, 700);
  w.show();
  QString error;
  QVERIFY2(w.openExample("transformer", &error), qPrintable(error));
  QVERIFY(WaitUntilIdle(*w.session()));
  views::StrategiesPanel* panel = w.strategiesPanel();
  SearchJobs* jobs = w.searchJobs();
  views::JobTracker* tracker = w.session()->jobs();
  // Large enough to be running when cancelled: 8 layers on 256 devices.
  panel->setChip("tpu-v4");
  panel->setDevices(256);
  panel->setSettingsText("layers=8 batch=256");
  panel->startSearch();
  QVERIFY(jobs->busy());
  QVERIFY(tracker->hasCancellable());
  QVERIFY(QTest::qWaitFor([&] { return panel->progressBar()->value() > 0 || !jobs->busy(); }, 120000));
  QVERIFY2(jobs->busy(), "the search was still running when cancelled");
  QTest::mouseClick(panel->cancelButton(), Qt::LeftButton);
  // Given back at once; the search's thread stops at its next check.
  QVERIFY(!jobs->busy());
  QVERIFY(!panel->isRunning());
  QVERIFY(panel->searchButton()->isEnabled());
  QVERIFY(!panel->cancelButton()->isEnabled());
  QVERIFY(panel->statusLabel()->fullText().contains("cancelled"));
  QVERIFY(!jobs->results());
  QVERIFY(panel->results().rows.empty());
  QVERIFY(QTest::qWaitFor([&] { return tracker->abandonedRunning() == 0; }, 120000));
  QVERIFY(WaitUntilIdle(*w.session()));
}

void TestGuiStrategies::unsupportedDocumentAndBadSettings() {
  MainWindow w;
  w.setBatchMode(true);
  w.show();
  views::StrategiesPanel* panel = w.strategiesPanel();
  QString error;
  QVERIFY2(w.openExample("transformer", &error), qPrintable(error));
  QVERIFY(WaitUntilIdle(*w.session()));
  // Settings that do not parse, or that the model does not have: a clear message, no search.
  panel->setSettingsText("layers");
  panel->startSearch();
  QVERIFY(!w.searchJobs()->busy());
  QVERIFY2(panel->statusLabel()->fullText().contains("\"layers\" is not NAME=VALUE"), qPrintable(panel->statusLabel()->fullText()));
  panel->setSettingsText("no_such_setting=3");
  panel->startSearch();
  QVERIFY(QTest::qWaitFor([&] { return !w.searchJobs()->busy(); }, 60000));
  QVERIFY2(panel->statusLabel()->fullText().startsWith("The search failed:"), qPrintable(panel->statusLabel()->fullText()));
  QVERIFY2(panel->statusLabel()->fullText().contains("no_such_setting"), qPrintable(panel->statusLabel()->fullText()));
  // An HLO module: the panel says what the search does for it (method 2; no settings).
  QVERIFY(w.session()->loadHloText(kHandConvModule, "handconv.hlo").ok());
  QVERIFY(panel->searchButton()->isEnabled());
  QVERIFY(w.searchJobs()->documentModel().isEmpty());
  QVERIFY(w.searchJobs()->searchesModule());
  const QString subject = panel->statusLabel()->fullText();
  QVERIFY2(subject.contains("integer program") && subject.contains("this module"), qPrintable(subject));
  QVERIFY(WaitUntilIdle(*w.session()));
}

// An HLO module of its own (two matmuls with large weights, a small batch) is searched with method
// 2 on 8 TPU v4 devices: every mesh's integer program solved, each solution simulated and ranked;
// the best splits both weights (Megatron-style: W1 on its output dim, W2 on its input dim) instead
// of replicating them; choosing the row makes its annotated module the document, and searching
// again still searches the module.
void TestGuiStrategies::hloModuleSearchesItsShardings() {
  MainWindow w;
  w.setBatchMode(true);
  w.resize(1600, 1000);
  w.show();
  const char* kMlp = R"(HloModule mlp, num_partitions=1
ENTRY %main (x: f32[16,4096], w1: f32[4096,16384], w2: f32[16384,4096]) -> f32[16,4096] {
  %x = f32[16,4096] parameter(0)
  %w1 = f32[4096,16384] parameter(1)
  %w2 = f32[16384,4096] parameter(2)
  %h = f32[16,16384] dot(%x, %w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r = f32[16,16384] tanh(%h)
  ROOT %y = f32[16,4096] dot(%r, %w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";
  QVERIFY(w.session()->loadHloText(kMlp, "mlp.hlo").ok());
  QVERIFY(WaitUntilIdle(*w.session()));
  QVERIFY(w.showView("strategies"));
  views::StrategiesPanel* panel = w.strategiesPanel();
  SearchJobs* jobs = w.searchJobs();
  QVERIFY(jobs->searchesModule());
  panel->setChip("tpu-v4");
  panel->setDevices(8);
  QTest::mouseClick(panel->searchButton(), Qt::LeftButton);
  QVERIFY(jobs->busy());
  QVERIFY(panel->cancelButton()->isEnabled());
  QVERIFY(QTest::qWaitFor([&] { return !jobs->busy(); }, 300000));
  const search::StrategyPanelModel* results = jobs->results();
  QVERIFY2(results, qPrintable(panel->statusLabel()->fullText()));
  // X=8 and the 2-D meshes 2x4, 4x2: one solved program each.
  QVERIFY2(results->rows.size() >= 3, qPrintable(QString::number(results->rows.size())));
  QVERIFY2(panel->results().summary.contains("Method 2"), qPrintable(panel->results().summary));
  // At 1024 px the one-line summary ends in "…" (it was cut mid-word), the whole of it in the tooltip.
  {
    views::ElidingLabel* status = panel->statusLabel();
    QVERIFY(!status->wordWrap());
    QCOMPARE(status->fullText(), panel->results().summary);
    w.resize(1024, 700);
    const QFontMetrics fm(status->font());
    QTRY_VERIFY2_WITH_TIMEOUT(fm.horizontalAdvance(status->fullText()) > status->contentsRect().width(),
                              qPrintable(QString::number(status->contentsRect().width())), 10000);  // else this checks nothing
    QTRY_VERIFY2_WITH_TIMEOUT(status->text().endsWith(QChar(0x2026)), qPrintable(status->text()), 10000);
    QVERIFY(status->fullText().startsWith(status->text().chopped(1)));
    QCOMPARE(status->toolTip(), status->fullText());
    w.resize(1600, 1000);
  }
  for (const search::CandidateResult& r : results->results) QCOMPARE(r.candidate.family, std::string("auto-sharding"));
  QVERIFY(results->results.front().simulated());
  // Open the best: its annotations become the document's, both weights split 8 ways or over both axes.
  const std::string mesh = results->results.front().candidate.mesh;
  QSignalSpy opened(jobs, &SearchJobs::candidateOpened);
  panel->selectRows({0});
  QVERIFY(QTest::qWaitFor([&] { return opened.count() == 1; }, 60000));
  QVERIFY(WaitUntilIdle(*w.session(), 300000));
  QCOMPARE(w.session()->document()->mesh().ToString(), DeviceMesh::Parse(mesh)->ToString());
  QVERIFY(w.session()->document()->module());
  const search::Settings ann = DocumentAnnotations(*w.session()->document());
  auto sharding_of = [&](const std::string& name) -> std::string {
    for (const auto& [k, v] : ann)
      if (k == name) return v;
    return "";
  };
  const std::string w1 = sharding_of("w1"), w2 = sharding_of("w2");
  QVERIFY2(!w1.empty() && w1.find("replicated") == std::string::npos, w1.c_str());
  QVERIFY2(!w2.empty() && w2.find("replicated") == std::string::npos, w2.c_str());
  QCOMPARE(jobs->chosenRow(), 0);
  QVERIFY(jobs->searchesModule());
  QVERIFY(panel->searchButton()->isEnabled());
  QVERIFY(!panel->familiesButton()->isEnabled());  // method 2 has no strategy families
}

// The Families menu: every family of the search, all checked ("Families: all"); with only
// data-parallel checked the search generates that family's candidates alone; the last checked
// family cannot be unchecked.
void TestGuiStrategies::familyFilterLimitsTheSearch() {
  MainWindow w;
  QVERIFY(OpenTransformerStrategies(w));
  views::StrategiesPanel* panel = w.strategiesPanel();
  SearchJobs* jobs = w.searchJobs();
  QPushButton* button = panel->familiesButton();
  QVERIFY(button->isEnabled());
  QCOMPARE(button->text(), QString("Families: all"));
  const QList<QAction*> actions = button->menu()->actions();
  QStringList names;
  for (const QAction* a : actions) names << a->text();
  for (const char* f : {"in-layer", "data-parallel", "weight-update-sharding", "pipelining", "expert-parallel", "spatial"})
    QVERIFY2(names.contains(f), qPrintable(names.join(", ")));
  QVERIFY(panel->selectedFamilies().isEmpty());
  for (QAction* a : actions)
    if (a->text() != "data-parallel") a->trigger();
  QCOMPARE(panel->selectedFamilies(), QStringList{"data-parallel"});
  QCOMPARE(button->text(), QString("data-parallel"));
  for (QAction* a : actions)
    if (a->text() == "data-parallel") a->trigger();  // the last one stays checked
  QCOMPARE(panel->selectedFamilies(), QStringList{"data-parallel"});

  panel->setChip("tpu-v4");
  panel->setDevices(8);
  panel->setSettingsText("layers=2");
  QTest::mouseClick(panel->searchButton(), Qt::LeftButton);
  QVERIFY(jobs->busy());
  QVERIFY(!button->isEnabled());  // fixed while the search runs
  QVERIFY(QTest::qWaitFor([&] { return !jobs->busy(); }, 300000));
  const search::StrategyPanelModel* results = jobs->results();
  QVERIFY2(results, qPrintable(panel->statusLabel()->fullText()));
  QVERIFY(!results->results.empty());
  for (const search::CandidateResult& r : results->results) QCOMPARE(r.candidate.family, std::string("data-parallel"));
  QCOMPARE(panel->results().families, QStringList{"data-parallel"});
  QVERIFY(button->isEnabled());

  panel->setSelectedFamilies({});
  QCOMPARE(button->text(), QString("Families: all"));
  QVERIFY(panel->selectedFamilies().isEmpty());
}

// NCF at its default sizes (batch 64) on 256 TPU v4 chips: every candidate is invalid; the summary
// says why (not "no candidate fits") and at which device count the model splits (64).
void TestGuiStrategies::tooSmallModelSaysWhereItSplits() {
  MainWindow w;
  w.setBatchMode(true);
  w.resize(1024, 700);
  w.show();
  QString error;
  QVERIFY2(w.openExample("ncf", &error), qPrintable(error));
  QVERIFY(WaitUntilIdle(*w.session()));
  QVERIFY(w.showView("strategies"));
  views::StrategiesPanel* panel = w.strategiesPanel();
  SearchJobs* jobs = w.searchJobs();
  panel->setChip("tpu-v4");
  panel->setDevices(256);
  panel->startSearch();
  QVERIFY(QTest::qWaitFor([&] { return !jobs->busy(); }, 120000));
  const QString summary = panel->results().summary;
  QVERIFY2(summary.contains("No candidate is valid: the annotation of input_users splits its dim 0 (64) 256 ways"),
           qPrintable(summary));
  QVERIFY2(summary.contains("On 64 devices 2 of 2 candidates are valid"), qPrintable(summary));
  QVERIFY2(!summary.contains("fits in HBM"), qPrintable(summary));
  QVERIFY(panel->statusLabel()->wordWrap());  // nothing simulated: the summary is the message, read whole
  QCOMPARE(panel->chart()->title(), QString("Step time vs peak memory (no candidate simulated)"));
  panel->grab().save(QDir(QCoreApplication::applicationDirPath()).filePath("strategies_too_small.png"));
}

// A paper configuration opened (File ▸ Examples ▸ Paper configurations, --paper) offers its own
// search: GSPMD Table 5's 6.47B GPipe column (8 stages, 16 microbatches of 1, 16 TPU v3 cores)
// sets the chip, the device count and the column's model settings, not the default search of the
// model; the annotations, mesh axes, stages and schedule are left to the search, and the paper's
// configuration is among what it ranks. Another example clears the settings again.
void TestGuiStrategies::paperConfigurationOffersItsSearch() {
  MainWindow w;
  w.setBatchMode(true);
  w.resize(1600, 1000);
  w.show();
  views::StrategiesPanel* panel = w.strategiesPanel();
  SearchJobs* jobs = w.searchJobs();
  panel->setChip("tpu-v4");
  panel->setDevices(8);
  QString error;
  QVERIFY2(w.openPaperConfiguration("gspmd-table5", "6.47B (8,1,2) 16x1", &error), qPrintable(error));
  QVERIFY(WaitUntilIdle(*w.session(), 300000));
  QCOMPARE(jobs->documentModel(), QString("pipelined-transformer"));
  QCOMPARE(panel->chip(), QString("tpu-v3"));
  QCOMPARE(panel->devices(), 16);
  const QString settings = panel->settingsText();
  for (const char* kept : {"layers=32", "model=3072", "hidden=24576", "microbatches=16", "microbatch=1", "optimizer=adafactor"})
    QVERIFY2(settings.split(' ').contains(kept), qPrintable(settings));
  for (const char* chosen : {"annotations=", "mesh_x=", "mesh_y=", "stages=", "schedule="})
    QVERIFY2(!settings.contains(chosen), qPrintable(settings));
  // The field is narrower than the text: its tooltip lists every setting.
  auto* field = panel->findChild<QLineEdit*>("strategiesSettings");
  QVERIFY(field);
  QVERIFY2(field->toolTip().contains("\nmicrobatches=16\n") && field->toolTip().contains("\nlayers=32\n"),
           qPrintable(field->toolTip()));
  const QString status = panel->statusLabel()->fullText();
  QVERIFY2(status.contains("at the sizes of gspmd-table5, 6.47B (8,1,2) 16x1") && status.contains("16 tpu-v3 devices"),
           qPrintable(status));
  // Searched as offered (pipelining only, to keep it short): the paper's GPipe on (8,1,2) is a row.
  QVERIFY(w.showView("strategies"));
  panel->setSelectedFamilies({"pipelining"});
  panel->startSearch();
  QVERIFY(QTest::qWaitFor([&] { return !jobs->busy(); }, 300000));
  const search::StrategyPanelModel* results = jobs->results();
  QVERIFY2(results, qPrintable(panel->statusLabel()->fullText()));
  bool published = false;
  for (const search::CandidateResult& r : results->results) {
    QCOMPARE(r.candidate.chip, std::string("tpu-v3"));
    published = published || (r.candidate.mesh == "L=8,X=1,Y=2" && r.candidate.settings.at("schedule") == "gpipe" &&
                              r.candidate.settings.at("microbatches") == "16" && r.simulated());
  }
  QVERIFY2(published, qPrintable(panel->results().summary));
  // Another example: its own search again, no settings carried over.
  QVERIFY2(w.openExample("transformer", &error), qPrintable(error));
  QVERIFY(WaitUntilIdle(*w.session()));
  QCOMPARE(jobs->documentModel(), QString("transformer"));
  QVERIFY(panel->settingsText().isEmpty());
}

// The simulation's sizes (the panel's Sizes dialog) set on the example: the search is offered at
// them — the settings field says so — until the user writes settings of their own.
void TestGuiStrategies::simulatedSizesOfferTheSearch() {
  MainWindow w;
  QVERIFY(OpenTransformerStrategies(w));
  views::StrategiesPanel* panel = w.strategiesPanel();
  views::DocumentModel* doc = w.session()->document();
  QVERIFY(panel->settingsText().isEmpty());
  ProjectSimulatedSizes sizes;
  sizes.zoo_settings = {{"batch", "64"}, {"model", "128"}};
  doc->setSimulatedSizes(sizes);
  QCOMPARE(panel->settingsText(), QString("batch=64 model=128"));
  sizes.zoo_settings["layers"] = "8";
  doc->setSimulatedSizes(sizes);
  QCOMPARE(panel->settingsText(), QString("batch=64 layers=8 model=128"));
  doc->setSimulatedSizes({});
  QVERIFY(panel->settingsText().isEmpty());
  // The user's own settings stay.
  panel->setSettingsText("layers=4");
  doc->setSimulatedSizes(sizes);
  QCOMPARE(panel->settingsText(), QString("layers=4"));
}

QTEST_MAIN(TestGuiStrategies)
#include "test_gui_strategies.moc"
