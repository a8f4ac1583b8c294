// The partitioned (SPMD) program: what every device runs after GSPMD partitioning — the graph with
// per-device shapes and the inserted collectives highlighted, the list of collectives with the
// reason for each (click one to select the instruction that caused it), and the HLO text.
#pragma once

#include <QPointer>
#include <QWidget>

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QTabWidget;
class QTableView;
class QTimer;

namespace shardscope::views {

class CollectiveTableModel;
class Document;
class GraphPane;

class PartitionedView : public QWidget {
  Q_OBJECT
 public:
  explicit PartitionedView(QWidget* parent = nullptr);
  void setDocument(Document* doc);
  // Re-partition automatically (debounced) whenever the shardings change.
  void setAutoUpdate(bool on);
  Document* spmdDocument() const { return spmd_doc_; }
  GraphPane* graphPane() const { return graph_; }
  CollectiveTableModel* collectives() const { return collectives_; }

 public slots:
  void partitionNow();

 private:
  void onPartitionUpdated();
  void followSelection();

  QPointer<Document> doc_;
  Document* spmd_doc_;
  GraphPane* graph_;
  CollectiveTableModel* collectives_;
  QTableView* table_;
  QPlainTextEdit* text_;
  QTabWidget* tabs_;
  QLabel* status_;
  QPushButton* button_;
  QTimer* debounce_;
  bool auto_update_ = false;
};

}  // namespace shardscope::views
