// The status-bar indicator of long jobs: which ones are running (loading a file, propagation,
// graph layout, partitioning with its numerical check, simulation), a busy bar while any is, and
// Cancel for the ones that can be dropped (loading, partitioning, simulation).
#pragma once

#include <QPointer>
#include <QStringList>
#include <QWidget>

class QLabel;
class QProgressBar;
class QTimer;
class QToolButton;

namespace shardscope::views {

class Document;
class GraphView;

class JobIndicator : public QWidget {
  Q_OBJECT
 public:
  explicit JobIndicator(QWidget* parent = nullptr);
  void setDocument(Document* doc);
  void setGraphView(GraphView* view);
  // The jobs running now, in words ("propagating", "laying out", ...); empty when idle.
  QStringList runningJobs() const;
  // Cancels every job that can be cancelled; true when something was.
  bool cancelJobs();
  QToolButton* cancelButton() const { return cancel_; }

 public slots:
  void refresh();

 private:
  QPointer<Document> doc_;
  QPointer<GraphView> graph_;
  QLabel* label_;
  QProgressBar* bar_;
  QToolButton* cancel_;
  QTimer* poll_;
};

}  // namespace shardscope::views
