// The status-bar indicator of background jobs: what the job tracker is running (loading a file,
// propagation, graph layout, partitioning with its numerical check, simulation, run-store I/O), a
// busy bar while anything runs, and Cancel (Esc) for the jobs the user may cancel.
#pragma once

#include <QPointer>
#include <QStringList>
#include <QWidget>

class QLabel;
class QProgressBar;
class QToolButton;

namespace shardscope::views {

class JobTracker;

class JobIndicator : public QWidget {
  Q_OBJECT
 public:
  explicit JobIndicator(QWidget* parent = nullptr);
  void setJobTracker(JobTracker* jobs);
  // The jobs running now, in words ("propagating", "laying out", ...); empty when idle.
  QStringList runningJobs() const;
  // Cancels every job that can be cancelled; true when something was.
  bool cancelJobs();
  QToolButton* cancelButton() const { return cancel_; }

 public slots:
  void refresh();

 private:
  QPointer<JobTracker> jobs_;
  QLabel* label_;
  QProgressBar* bar_;
  QToolButton* cancel_;
};

}  // namespace shardscope::views
