#include "views/job_tracker.h"

#include <QThreadPool>

namespace shardscope::views {


JobTracker::JobTracker(QObject* parent) : QObject(parent) {
  clock_.start();
  for (Lane lane : {Lane::kEngine, Lane::kLayout, Lane::kStore, Lane::kFiles}) {
    auto* pool = new QThreadPool(this);
    pool->setMaxThreadCount(1);  // one worker per lane: its jobs run in order
    pool->setExpiryTimeout(-1);
    lanes_[lane] = pool;
  }
}

JobTracker::~JobTracker() {
  for (auto& [id, job] : jobs_) job.token.Cancel();
  jobs_.clear();
  for (auto& [lane, pool] : lanes_) pool->waitForDone();
}

JobTracker::JobId JobTracker::add(Spec spec, std::function<void()> on_cancel, CancellationToken* token) {
  // A newer job with the same key supersedes the older ones: queued ones never start, a running one
  // finishes its stage and its result is dropped.
  if (!spec.key.isEmpty()) {
    std::vector<JobId> older;
    for (const auto& [id, job] : jobs_) {
      if (job.spec.key == spec.key) older.push_back(id);
    }
    for (JobId id : older) remove(id, /*cancelled=*/false);
  }
  const bool was_idle = jobs_.empty();
  Job job;
  job.id = ++next_id_;
  job.has_context = !spec.context.isNull();
  job.spec = std::move(spec);
  job.token = *token;
  job.started_ms = clock_.elapsed();
  job.on_cancel = std::move(on_cancel);
  const JobId id = job.id;
  jobs_.emplace(id, std::move(job));
  emit jobsChanged();
  if (was_idle) emit idleChanged(false);
  return id;
}

void JobTracker::start(Lane lane, std::function<void()> work) { lanes_.at(lane)->start(std::move(work)); }

bool JobTracker::deliverable(JobId id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  if (it->second.has_context && it->second.spec.context.isNull()) {
    remove(id, /*cancelled=*/false);  // its receiver is gone: nobody to tell
    return false;
  }
  return true;
}

void JobTracker::remove(JobId id, bool cancelled) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Job job = std::move(it->second);
  jobs_.erase(it);
  job.token.Cancel();  // (a finished job's token is no longer read)
  if (cancelled && job.on_cancel && (!job.has_context || !job.spec.context.isNull())) job.on_cancel();
  emit jobsChanged();
  if (jobs_.empty()) emit idleChanged(true);
}

bool JobTracker::cancel(JobId id) {
  if (!jobs_.count(id)) return false;
  remove(id, /*cancelled=*/true);
  return true;
}

bool JobTracker::cancelKey(const QString& key) {
  std::vector<JobId> ids;
  for (const auto& [id, job] : jobs_) {
    if (job.spec.key == key) ids.push_back(id);
  }
  for (JobId id : ids) remove(id, /*cancelled=*/true);
  return !ids.empty();
}

bool JobTracker::cancelUserJobs() {
  std::vector<JobId> ids;
  for (const auto& [id, job] : jobs_) {
    if (job.spec.cancellable) ids.push_back(id);
  }
  for (JobId id : ids) remove(id, /*cancelled=*/true);
  return !ids.empty();
}

bool JobTracker::hasKey(const QString& key) const {
  for (const auto& [id, job] : jobs_) {
    if (job.spec.key == key) return true;
  }
  return false;
}

bool JobTracker::hasCancellable() const {
  for (const auto& [id, job] : jobs_) {
    if (job.spec.cancellable) return true;
  }
  return false;
}

QList<const JobTracker::Job*> JobTracker::jobs() const {
  QList<const Job*> out;
  for (const auto& [id, job] : jobs_) out.append(&job);
  return out;
}

QStringList JobTracker::labels() const {
  QStringList out;
  for (const auto& [id, job] : jobs_) {
    if (!job.spec.label.isEmpty() && !out.contains(job.spec.label)) out << job.spec.label;
  }
  return out;
}

qint64 JobTracker::elapsedMs(JobId id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? -1 : clock_.elapsed() - it->second.started_ms;
}

}  // namespace shardscope::views
