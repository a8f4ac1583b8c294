// The simulation panel: pick a chip, simulate one step of the partitioned program (with progress
// and Cancel), and see the per-device timelines, memory over time (with the peak marked and the
// buffers live at the peak) and the history of runs from the SQLite run store. Select one run in
// the history to show it; select two (Ctrl-click) to compare them: compareRequested asks the window
// to show them side by side (ComparisonView). Clicking an event in the timeline selects the
// instruction it came from in the document.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include <QPointer>
#include <QList>
#include <QStringList>
#include <QWidget>

class QComboBox;
class QElapsedTimer;
class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QSplitter;
class QTableView;
class QTextBrowser;
class QTimer;

#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope::sim {
struct RunResult;
}

namespace shardscope::views {

using sim::RunResult;

class AnalysisModel;
class DocumentModel;
class MemoryChart;
class PipelineFigures;
class RunHistory;
class RunHistoryModel;
class SimulatedSizesControl;
class SlicePlacementBar;
class TimelineWidget;
class WeightUpdatePanel;

class SimulationView : public QWidget {
  Q_OBJECT
 public:
  explicit SimulationView(QWidget* parent = nullptr);
  ~SimulationView() override;
  // The document (selection, instructions), the analysis that simulates it and the history of runs
  // (whose store it opens).
  void setModels(DocumentModel* doc, AnalysisModel* analysis, RunHistory* runs);
  // The instruction of the document a timeline event of run `run_id` came from, by the SPMD
  // instruction name the event carries (loop suffixes "[i]" ignored): through the partitioner's map
  // kept with the run, else the last partitioned program, else the same name. -1 when none
  // (another module's run, or an instruction the partitioner inserted).
  int64_t instructionForEvent(int64_t run_id, const QString& spmd_instruction) const;

  TimelineWidget* timeline() const { return timeline_; }
  MemoryChart* memoryChart() const { return chart_; }
  RunHistoryModel* history() const { return history_; }
  QTableView* historyTable() const { return table_; }
  QLabel* statusLabel() const { return status_; }
  // The store's path, or the reason runs are only kept in memory.
  QLabel* storeLabel() const { return store_label_; }
  QPushButton* cancelButton() const { return cancel_; }
  QPushButton* simulateButton() const { return button_; }
  // The step before and after weight-update sharding, shown when the last simulation ran the pass.
  WeightUpdatePanel* weightUpdatePanel() const { return wus_panel_; }
  // Bubble, recompute, raw utilisation and MFU of the run shown (hidden when it is not pipelined).
  PipelineFigures* pipelineFigures() const { return pipeline_figures_; }
  // How the mesh is placed on the physical slice, and the user's override of it.
  SlicePlacementBar* slicePlacementBar() const { return slice_bar_; }
  SimulatedSizesControl* simulatedSizes() const { return sizes_; }

  // Shows run `run_id` of the history (loaded from the store on the worker when it is not in
  // memory). False when the history has no such run.
  bool showRun(int64_t run_id);
  // The run shown (0 when none).
  int64_t shownRun() const { return shown_id_; }
  // The runs selected in the history, oldest first.
  std::vector<int64_t> selectedRunIds() const;
  // Selects runs in the history (without showing or comparing them).
  void selectRuns(const std::vector<int64_t>& ids);
  // Deletes the runs selected in the history, after asking (unless confirmations are off).
  void deleteSelectedRuns();
  void setConfirmDeletes(bool on) { confirm_deletes_ = on; }
  // One simulation of a queue: a chip and whether the module runs replicated (no shardings).
  struct Configuration {
    QString chip;
    bool replicated = false;
  };
  // Simulates each configuration in turn, then asks to compare the last two runs (A = the first).
  void simulateAndCompare(const QList<Configuration>& configurations);
  // Forgets what was shown (a new module): the run, the status, the queue; the history stays.
  void reset();

  // The chip the Simulate button uses (a name of AnalysisModel::chips(); others are ignored).
  void setChip(const QString& chip);

  // A paper's published figures beside a run's simulated ones (a paper configuration opened from
  // File > Examples; the comparison is computed by the application, app/pipeline/reproduce.h):
  // shown under that run's summary whenever it is the run shown. The run is the one created at
  // `created_unix_ms` (RunResult::created_unix_ms); a new module forgets it.
  struct PublishedRow {
    QString figure, published, simulated, difference;
    bool within = false;  // within the tolerance the reproduction uses
  };
  void setPublishedComparison(int64_t created_unix_ms, const QString& title, const QList<PublishedRow>& rows);
  // The comparison's title ("" when none) and the summary shown (HTML), for tests.
  QString publishedComparisonTitle() const { return published_title_; }
  QString summaryText() const;

 signals:
  // Two runs were selected in the history (or a simulateAndCompare finished): show them side by side.
  void compareRequested(qint64 run_a, qint64 run_b);

 public slots:
  void simulate();
  void cancel();

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void onSimulationUpdated();
  void onRunLoaded(qint64 run_id);
  void onHistorySelectionChanged();
  void onEventClicked(int64_t run_id, const QString& instruction);
  void onRangeSelected(double start_s, double end_s);
  void updateStoreLabel();
  void updateBusy();
  void resetHistory();
  void display(std::shared_ptr<const RunResult> run);
  void showPipelineBubble(const RunResult& run);
  void showHistoryMenu(const QPoint& pos);
  void highlightSelection();
  QString summaryHtml(const RunResult& run) const;

  QPointer<DocumentModel> doc_;
  QPointer<AnalysisModel> analysis_;
  QPointer<RunHistory> runs_;
  QComboBox* chip_;
  QPushButton* button_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* status_;
  QLabel* store_label_;
  TimelineWidget* timeline_;
  MemoryChart* chart_;
  RunHistoryModel* history_;
  QSortFilterProxyModel* proxy_;
  QTableView* table_;
  QTextBrowser* summary_;
  WeightUpdatePanel* wus_panel_;
  PipelineFigures* pipeline_figures_;
  SlicePlacementBar* slice_bar_;
  SimulatedSizesControl* sizes_;  // the sizes the simulation runs at (the document's, or others)
  QTimer* tick_;
  std::unique_ptr<QElapsedTimer> elapsed_;
  std::shared_ptr<const RunResult> shown_run_;  // the run displayed
  int64_t published_run_ms_ = 0;                // setPublishedComparison
  QString published_title_;
  QList<PublishedRow> published_rows_;
  int64_t shown_id_ = 0;    // the run displayed
  int64_t wanted_id_ = 0;   // the run asked for (displayed once loaded)
  bool confirm_deletes_ = true;
  bool updating_selection_ = false;
  QList<Configuration> queue_;
  bool compare_after_queue_ = false;
  int queue_runs_ = 0;
};

}  // namespace shardscope::views
