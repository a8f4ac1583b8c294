#include "views/job_indicator.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QTimer>
#include <QToolButton>

#include "views/document.h"
#include "views/graph_view.h"

namespace shardscope::views {

JobIndicator::JobIndicator(QWidget* parent)
    : QWidget(parent), label_(new QLabel(this)), bar_(new QProgressBar(this)), cancel_(new QToolButton(this)),
      poll_(new QTimer(this)) {
  setObjectName("jobIndicator");
  bar_->setRange(0, 0);  // busy: the engines report no fraction done
  bar_->setMaximumWidth(90);
  bar_->setMaximumHeight(14);
  bar_->setTextVisible(false);
  cancel_->setText("Cancel");
  cancel_->setToolTip("Drop the running partitioning or simulation (Esc)");
  cancel_->setShortcut(Qt::Key_Escape);
  cancel_->setAutoRaise(true);
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(label_);
  row->addWidget(bar_);
  row->addWidget(cancel_);
  connect(cancel_, &QToolButton::clicked, this, &JobIndicator::cancelJobs);
  // The jobs run on worker threads and report through several signals; one light poll keeps
  // the indicator in step with all of them.
  poll_->setInterval(150);
  connect(poll_, &QTimer::timeout, this, &JobIndicator::refresh);
  poll_->start();
  refresh();
}

void JobIndicator::setDocument(Document* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (doc_) {
    // Finishing is shown at once; starting within one poll.
    connect(doc_, &Document::busyChanged, this, &JobIndicator::refresh);
    connect(doc_, &Document::loadFinished, this, &JobIndicator::refresh);
    connect(doc_, &Document::partitionUpdated, this, &JobIndicator::refresh);
    connect(doc_, &Document::partitionCancelled, this, &JobIndicator::refresh);
    connect(doc_, &Document::simulationUpdated, this, &JobIndicator::refresh);
    connect(doc_, &Document::simulationCancelled, this, &JobIndicator::refresh);
  }
  refresh();
}

void JobIndicator::setGraphView(GraphView* view) {
  if (graph_) graph_->disconnect(this);
  graph_ = view;
  if (graph_) connect(graph_, &GraphView::layoutFinished, this, &JobIndicator::refresh);
  refresh();
}

QStringList JobIndicator::runningJobs() const {
  QStringList jobs;
  if (doc_) {
    if (doc_->loadBusy()) jobs << "loading";
    if (doc_->isBusy()) jobs << "propagating";
    if (doc_->partitionBusy()) jobs << "partitioning and verifying";
    if (doc_->simulationBusy()) jobs << "simulating";
  }
  if (graph_ && graph_->isLayoutPending()) jobs << "laying out";
  return jobs;
}

bool JobIndicator::cancelJobs() {
  if (!doc_) return false;
  bool any = false;
  if (doc_->loadBusy()) doc_->cancelLoad(), any = true;
  if (doc_->partitionBusy()) doc_->cancelPartition(), any = true;
  if (doc_->simulationBusy()) doc_->cancelSimulation(), any = true;
  refresh();
  return any;
}

void JobIndicator::refresh() {
  const QStringList jobs = runningJobs();
  label_->setText(jobs.isEmpty() ? QString() : jobs.join(", ") + QString::fromUtf8("\u2026"));
  bar_->setVisible(!jobs.isEmpty());
  const bool cancellable = doc_ && (doc_->loadBusy() || doc_->partitionBusy() || doc_->simulationBusy());
  cancel_->setVisible(cancellable);
  cancel_->setEnabled(cancellable);
}

}  // namespace shardscope::views
