#include "views/job_indicator.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QToolButton>

#include "views/job_tracker.h"

namespace shardscope::views {


JobIndicator::JobIndicator(QWidget* parent)
    : QWidget(parent), label_(new QLabel(this)), bar_(new QProgressBar(this)), cancel_(new QToolButton(this)) {
  setObjectName("jobIndicator");
  bar_->setRange(0, 0);  // busy: the engines report no fraction done
  bar_->setMaximumWidth(90);
  bar_->setMaximumHeight(14);
  bar_->setTextVisible(false);
  cancel_->setText("Cancel");
  cancel_->setToolTip("Cancel the running loading, partitioning or simulation (Esc)");
  cancel_->setShortcut(Qt::Key_Escape);
  cancel_->setAutoRaise(true);
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(label_);
  row->addWidget(bar_);
  row->addWidget(cancel_);
  connect(cancel_, &QToolButton::clicked, this, &JobIndicator::cancelJobs);
  refresh();
}

void JobIndicator::setJobTracker(JobTracker* jobs) {
  if (jobs_) jobs_->disconnect(this);
  jobs_ = jobs;
  if (jobs_) connect(jobs_, &JobTracker::jobsChanged, this, &JobIndicator::refresh);
  refresh();
}

QStringList JobIndicator::runningJobs() const { return jobs_ ? jobs_->labels() : QStringList(); }

bool JobIndicator::cancelJobs() {
  const bool any = jobs_ && jobs_->cancelUserJobs();
  refresh();
  return any;
}

void JobIndicator::refresh() {
  const QStringList jobs = runningJobs();
  label_->setText(jobs.isEmpty() ? QString() : jobs.join(", ") + QString::fromUtf8("\u2026"));
  bar_->setVisible(!jobs.isEmpty());
  const bool cancellable = jobs_ && jobs_->hasCancellable();
  cancel_->setVisible(cancellable);
  cancel_->setEnabled(cancellable);
}

}  // namespace shardscope::views
