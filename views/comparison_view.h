// Two simulation runs side by side, with the room of a whole view: the two runs chosen from the
// history (A and B), their figures (RunStore::CompareRuns: step time, peak memory per device, bytes
// communicated, compute, communication, idle, exposed communication, MFU) with the difference
// B − A, the ratio B / A and the better run marked (none on a tie), both timelines on one time
// scale (zooming one zooms the other) and both memory curves overlaid with their peaks. Clicking an
// event selects the instruction it came from in the document.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include <QPointer>
#include <QWidget>

class QComboBox;
class QLabel;
class QSplitter;
class QTableWidget;

namespace shardscope::views {

class AnalysisModel;
class DocumentModel;
class MemoryChart;
class RunHistory;
class TimelineWidget;

class ComparisonView : public QWidget {
  Q_OBJECT
 public:
  explicit ComparisonView(QWidget* parent = nullptr);
  void setModels(DocumentModel* doc, AnalysisModel* analysis, RunHistory* runs);

  // Compares two runs of the history (A = run_a); false when either is missing or they are one run.
  bool compareRuns(int64_t run_a, int64_t run_b);
  // Nothing compared: the choosers, figures, timelines and chart are emptied.
  void clear();
  std::optional<std::pair<int64_t, int64_t>> comparedRuns() const { return compared_; }

  // The figures: one row per figure; columns figure, run A, run B, difference, ratio, better.
  // Item data Qt::UserRole holds the raw numbers (A, B, difference, ratio).
  QTableWidget* comparisonTable() const { return table_; }
  TimelineWidget* timelineA() const { return timeline_a_; }
  TimelineWidget* timelineB() const { return timeline_b_; }
  MemoryChart* memoryChart() const { return chart_; }
  QLabel* statusLabel() const { return status_; }
  QComboBox* runChooserA() const { return run_a_; }
  QComboBox* runChooserB() const { return run_b_; }

  enum Column { kFigure, kRunA, kRunB, kDifference, kRatio, kBetter, kColumnCount };

 signals:
  // The comparison shown changed (a pair, or nothing).
  void comparisonChanged();

 private:
  void refreshChoosers();
  void onChosen();
  void onRunLoaded(qint64 run_id);
  void displayFigures();
  void highlightSelection();
  void onEventClicked(int64_t run_id, const QString& instruction);

  QPointer<DocumentModel> doc_;
  QPointer<AnalysisModel> analysis_;
  QPointer<RunHistory> runs_;
  QComboBox* run_a_;
  QComboBox* run_b_;
  QLabel* status_;
  QLabel* title_;
  TimelineWidget* timeline_a_;
  TimelineWidget* timeline_b_;
  MemoryChart* chart_;
  QTableWidget* table_;
  std::optional<std::pair<int64_t, int64_t>> compared_;
  bool updating_ = false;
};

}  // namespace shardscope::views
