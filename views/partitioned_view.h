// The partitioned (SPMD) program: what every device runs after GSPMD partitioning — the graph with
// per-device shapes and the inserted collectives highlighted, the list of collectives with the
// reason for each (click one to select the instruction that caused it), and the HLO text.
#pragma once

#include <cstdint>
#include <vector>

#include <QPointer>
#include <QWidget>

#include "partitioner/spmd/spmd_partitioner.h"

class QCheckBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTableView;
class QTimer;

namespace shardscope::views {

class AnalysisModel;
class CollectiveTableModel;
class DocumentModel;
class GraphPane;
class JobTracker;

class PartitionedView : public QWidget {
  Q_OBJECT
 public:
  explicit PartitionedView(QWidget* parent = nullptr);
  // The document, the analysis that partitions it, and the tracker the SPMD graph's layouts run on.
  void setModels(DocumentModel* doc, AnalysisModel* analysis, JobTracker* jobs);
  // Re-partition automatically (debounced) whenever the shardings change.
  void setAutoUpdate(bool on);
  DocumentModel* spmdDocument() const { return spmd_doc_; }
  GraphPane* graphPane() const { return graph_; }
  CollectiveTableModel* collectives() const { return collectives_; }
  QTableView* collectiveTable() const { return table_; }
  // The numerical verification badge ("verified", "mismatch", "not verified", ...).
  QLabel* verificationBadge() const { return badge_; }
  // The device the program is seen from (-1: all devices).
  void setDevice(int64_t device);
  // Brings the Collectives tab to the front.
  void showCollectives();
  int64_t device() const;
  // The status line ("partitioned into 16 devices with 20 collectives ...") and the HLO text.
  QLabel* statusLabel() const { return status_; }
  // "Weight-update sharding": the document's option (undoable, saved with the project); toggling
  // it partitions again with the pass (paper 000) on or off.
  QCheckBox* weightUpdateToggle() const { return wus_; }
  QPlainTextEdit* hloText() const { return text_; }

 signals:
  // The user asked to step through a collective (double-click on its row): the collective and who
  // takes part (CollectiveTableModel::participants).
  void collectiveActivated(const shardscope::InsertedCollective& collective,
                           const std::vector<std::vector<int64_t>>& participants);
  // The user asked for the original and the partitioned graph side by side / to export the HLO text.
  void sideBySideRequested();
  void exportRequested();

 public slots:
  void partitionNow();

 private:
  void onPartitionUpdated();
  void onAnalysisReset();
  void followSelection();
  void showVerdict();
  // Fills the HLO tab from the analysis's text when it is shown (a 100k-instruction program's text
  // in a QPlainTextEdit takes over a hundred megabytes: only a user who looks at it pays for it).
  void fillHloTextIfShown();

  QPointer<DocumentModel> doc_;
  QPointer<AnalysisModel> analysis_;
  DocumentModel* spmd_doc_;
  GraphPane* graph_;
  CollectiveTableModel* collectives_;
  QTableView* table_;
  QPlainTextEdit* text_;
  QTabWidget* tabs_;
  QLabel* status_;
  QLabel* badge_;
  QSpinBox* device_;
  QPushButton* button_;
  QCheckBox* wus_;
  QTimer* debounce_;
  bool auto_update_ = false;
  bool text_stale_ = false;  // the HLO tab does not show the current program's text yet
};

}  // namespace shardscope::views
