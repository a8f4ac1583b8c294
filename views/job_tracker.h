// The one tracker of the GUI's background jobs (hotspot's pattern): loading, propagation, graph
// layout, partitioning with its numerical check, simulation, run-store I/O, exports and the strategy search all run
// through it.
//
// A job is a function of a CancellationToken run on a worker lane; its result is handed back by a
// queued call on the GUI thread. Every job gets an id (a generation number: ids only grow). A job
// started with a supersede key cancels every older job with that key: one still queued never
// starts, one running gets its token cancelled (the engine stops at its next check) and its result
// is dropped, so a result that arrives after the user changed something is never shown. cancel()
// does the same for one job or a key; the job's `cancelled` callback then runs at once (the panel is
// given back without waiting for the worker).
//
// Lanes run their jobs one at a time, in order, and one lane never waits for another: Graphviz (not
// thread-safe) has a lane of its own, so a long layout never delays a propagation; the document's
// propagation session has one (it keeps state between runs); the analyses (partitioning,
// verification, simulation), the SQLite store and file reading have one each. A job that cannot
// stop mid-stage (an engine checks its token only between stages) would hold its lane after it was
// cancelled or superseded: on the lanes whose jobs share no state (analysis, files) it is
// abandoned instead — it finishes on its thread, its result is dropped, and the lane's next job
// starts at once on another thread. So a cancelled or superseded job never delays the next one.
//
// QtCore only (no widgets): the session in app/gui submits the analysis jobs, the graph view its
// layouts, the job indicator lists them.
#pragma once

#include <cstdint>
#include <deque>
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
  // kEngine: the document's propagation session (ordered, keeps state between runs).
  // kAnalysis: partitioning with its numerical check, simulation (abandoned when cancelled).
  // kLayout: Graphviz. kStore: the SQLite run store. kFiles: reading and writing files (abandoned
  // when cancelled). kSearch: the strategy search (long; abandoned when cancelled), so the
  // document's own partitioning and simulation never wait behind it.
  enum class Lane { kEngine, kAnalysis, kLayout, kStore, kFiles, kSearch };
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
    qint64 running_ms = -1; // when its work started on a thread (-1: still queued)
    std::function<void()> on_cancel;
    std::function<void()> body;  // the work and the hand-back, run on a worker thread
    bool has_context = false;    // spec.context was given (its results need it alive)
  };

  explicit JobTracker(QObject* parent = nullptr);
  // Cancels every job and waits for the workers to finish what they started (abandoned ones too).
  ~JobTracker() override;

  // Whether a lane abandons a cancelled running job (see above).
  static bool abandons(Lane lane) { return lane == Lane::kAnalysis || lane == Lane::kFiles || lane == Lane::kSearch; }

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
  // Active and its work has started (not waiting for its lane).
  bool isRunning(JobId id) const;
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
  // Running jobs given up after a cancel, whose threads have not finished yet (for tests).
  int abandonedRunning() const { return abandoned_running_; }

 signals:
  void jobsChanged();       // a job was added, started, finished, cancelled or superseded
  void idleChanged(bool idle);

 private:
  struct LaneState {
    std::deque<JobId> queue;  // waiting, in order
    JobId running = 0;        // whose work runs now (0: none)
  };
  JobId add(Spec spec, std::function<void()> on_cancel, CancellationToken* token);
  void setBody(JobId id, std::function<void()> body);
  // Starts the lane's next job when it is free.
  void dispatch(Lane lane);
  // A job's work returned (or was skipped): its lane is free for the next one.
  void workFinished(JobId id, Lane lane, bool ran);
  void remove(JobId id, bool cancelled);
  // Active, and its context (when it has one) still alive; a job whose context died is dropped.
  bool deliverable(JobId id);

  std::map<JobId, Job> jobs_;
  std::map<Lane, LaneState> lanes_;
  JobId next_id_ = 0;
  QElapsedTimer clock_;
  QThreadPool* pool_;
  int work_run_ = 0;
  int abandoned_running_ = 0;
};

template <typename R>
JobTracker::JobId JobTracker::run(Spec spec, std::function<R(const CancellationToken&)> work,
                                  std::function<void(R)> done, std::function<void()> cancelled) {
  CancellationToken token;
  const Lane lane = spec.lane;
  const JobId id = add(std::move(spec), std::move(cancelled), &token);
  // The tracker outlives every body (its destructor waits for the workers); a hand-back queued after
  // it is gone is discarded by Qt (the tracker is the call's context).
  JobTracker* self = this;
  setBody(id, [self, id, lane, token, work = std::move(work), done = std::move(done)]() mutable {
    std::shared_ptr<R> result;
    if (!token.cancelled()) result = std::make_shared<R>(work(token));
    QMetaObject::invokeMethod(
        self,
        [self, id, lane, token, result, done]() mutable {
          self->workFinished(id, lane, result != nullptr);
          if (!result || token.cancelled() || !self->deliverable(id)) return;  // cancelled: its callback already ran
          self->remove(id, false);
          done(std::move(*result));
        },
        Qt::QueuedConnection);
  });
  return id;
}

}  // namespace shardscope::views
