// The one tracker of the GUI's background jobs (hotspot's pattern): loading, propagation, graph
// layout, partitioning with its numerical check, simulation and run-store I/O all run through it.
//
// A job is a function of a CancellationToken run on a worker lane; its result is handed back by a
// queued call on the GUI thread. Every job gets an id (a generation number: ids only grow). A job
// started with a supersede key cancels every older job with that key: one still queued never
// starts, one running gets its token cancelled (the engine stops at its next check) and its result
// is dropped, so a result that arrives after the user changed something is never shown. cancel()
// does the same for one job or a key; the job's `cancelled` callback then runs at once (the panel is
// given back without waiting for the worker).
//
// Lanes are single worker threads, so the jobs of a lane run in order and one lane never waits for
// another: Graphviz (not thread-safe) has a lane of its own and a long layout never delays a
// propagation; the SQLite store has its own; files are read on a fourth.
//
// QtCore only (no widgets): the session in app/gui submits the analysis jobs, the graph view its
// layouts, the job indicator lists them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include <QElapsedTimer>
#include <QList>
#include <QObject>
#include <QPointer>
#include <QString>

#include "core/base/cancellation.h"

class QThreadPool;

namespace shardscope::views {

class JobTracker : public QObject {
  Q_OBJECT

 public:
  enum class Lane { kEngine, kLayout, kStore, kFiles };
  using JobId = quint64;

  struct Spec {
    QString label{};             // what the job indicator says while it runs ("propagating")
    Lane lane = Lane::kEngine;
    QString key{};               // supersede key ("" : none)
    bool cancellable = false;    // offered to the user (Cancel, Esc)
    QPointer<QObject> context{};  // results are dropped once it is destroyed (may be null)
  };

  struct Job {
    JobId id = 0;
    Spec spec;
    CancellationToken token;
    qint64 started_ms = 0;  // when it was submitted (QElapsedTimer of the tracker)
    std::function<void()> on_cancel;
    bool has_context = false;  // spec.context was given (its results need it alive)
  };

  explicit JobTracker(QObject* parent = nullptr);
  // Cancels every job and waits for the workers to finish what they started.
  ~JobTracker() override;

  // Runs `work(token)` on spec.lane. `done(result)` runs on the GUI thread unless the job was
  // cancelled or superseded first; then `cancelled()` (may be empty) runs instead, at once.
  template <typename R>
  JobId run(Spec spec, std::function<R(const CancellationToken&)> work, std::function<void(R)> done,
            std::function<void()> cancelled = {});

  // Cancels one job / every job with `key`; true when there was one.
  bool cancel(JobId id);
  bool cancelKey(const QString& key);
  // Cancels every job the user may cancel; true when there was one.
  bool cancelUserJobs();

  bool isActive(JobId id) const { return jobs_.count(id) != 0; }
  bool hasKey(const QString& key) const;
  bool hasCancellable() const;
  // The jobs not yet finished, cancelled or superseded, oldest first.
  QList<const Job*> jobs() const;
  QStringList labels() const;
  bool idle() const { return jobs_.empty(); }
  // Milliseconds since job `id` was submitted (-1 when it is not active).
  qint64 elapsedMs(JobId id) const;
  // Jobs whose work has run (for tests: a superseded job that never started does not count).
  int workRun() const { return work_run_; }

 signals:
  void jobsChanged();       // a job was added, finished, cancelled or superseded
  void idleChanged(bool idle);

 private:
  JobId add(Spec spec, std::function<void()> on_cancel, CancellationToken* token);
  // Posts `work` to the lane; `finish(id)` runs on the GUI thread when it returns.
  void start(Lane lane, std::function<void()> work);
  void remove(JobId id, bool cancelled);
  // Active, and its context (when it has one) still alive; a job whose context died is dropped.
  bool deliverable(JobId id);
  void noteWorkRun() { ++work_run_; }

  std::map<JobId, Job> jobs_;
  JobId next_id_ = 0;
  QElapsedTimer clock_;
  std::map<Lane, QThreadPool*> lanes_;
  int work_run_ = 0;
};

template <typename R>
JobTracker::JobId JobTracker::run(Spec spec, std::function<R(const CancellationToken&)> work,
                                  std::function<void(R)> done, std::function<void()> cancelled) {
  CancellationToken token;
  const Lane lane = spec.lane;
  const JobId id = add(std::move(spec), std::move(cancelled), &token);
  QPointer<JobTracker> self(this);
  start(lane, [self, id, token, work = std::move(work), done = std::move(done)]() mutable {
    if (token.cancelled()) return;  // superseded or cancelled before it started
    auto result = std::make_shared<R>(work(token));
    if (self.isNull()) return;
    QMetaObject::invokeMethod(
        self.data(),
        [self, id, token, result, done = std::move(done)]() mutable {
          if (self.isNull()) return;
          self->noteWorkRun();
          if (token.cancelled() || !self->deliverable(id)) return;  // cancelled: its callback already ran
          self->remove(id, false);
          done(std::move(*result));
        },
        Qt::QueuedConnection);
  });
  return id;
}

}  // namespace shardscope::views
