// The simulation panel: pick a chip, simulate one step of the partitioned program, and see the
// per-device timelines, memory over time (with the peak marked) and the history of runs.
#pragma once

#include <cstdint>
#include <memory>

#include <QPointer>
#include <QWidget>

class QComboBox;
class QLabel;
class QPushButton;
class QTableView;
class QTextBrowser;

namespace shardscope {
struct RunResult;
}

namespace shardscope::views {

class Document;
class MemoryChart;
class RunHistoryModel;
class TimelineWidget;

class SimulationView : public QWidget {
  Q_OBJECT
 public:
  explicit SimulationView(QWidget* parent = nullptr);
  void setDocument(Document* doc);
  TimelineWidget* timeline() const { return timeline_; }
  MemoryChart* memoryChart() const { return chart_; }
  RunHistoryModel* history() const { return history_; }
  // Shows run `run_id` of the document's history.
  bool showRun(int64_t run_id);

 public slots:
  void simulate();

 private:
  void onSimulationUpdated();
  void show(std::shared_ptr<const RunResult> run);

  QPointer<Document> doc_;
  QComboBox* chip_;
  QPushButton* button_;
  QLabel* status_;
  TimelineWidget* timeline_;
  MemoryChart* chart_;
  RunHistoryModel* history_;
  QTableView* table_;
  QTextBrowser* summary_;
};

}  // namespace shardscope::views
