#include "views/job_tracker.h"

#include <algorithm>

#include <QThreadPool>

namespace shardscope::views {

JobTracker::JobTracker(QObject* parent) : QObject(parent), pool_(new QThreadPool(this)) {
  clock_.start();
  for (Lane lane : {Lane::kEngine, Lane::kAnalysis, Lane::kLayout, Lane::kStore, Lane::kFiles, Lane::kSearch}) lanes_[lane];
  // One running job per lane plus the abandoned ones still finishing their stage.
  pool_->setMaxThreadCount(16);
}

JobTracker::~JobTracker() {
  for (auto& [id, job] : jobs_) job.token.Cancel();
  jobs_.clear();
  for (auto& [lane, state] : lanes_) state.queue.clear();
  pool_->waitForDone();
}

JobTracker::JobId JobTracker::add(Spec spec, std::function<void()> on_cancel, CancellationToken* token) {
  // A newer job with the same key supersedes the older ones: queued ones never start, a running one
  // finishes its stage (or is abandoned) and its result is dropped.
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

void JobTracker::setBody(JobId id, std::function<void()> body) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second.body = std::move(body);
  const Lane lane = it->second.spec.lane;
  lanes_[lane].queue.push_back(id);
  dispatch(lane);
}

void JobTracker::dispatch(Lane lane) {
  LaneState& state = lanes_[lane];
  while (state.running == 0 && !state.queue.empty()) {
    const JobId id = state.queue.front();
    state.queue.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;  // superseded or cancelled while it waited
    state.running = id;
    it->second.running_ms = clock_.elapsed();
    std::function<void()> body = std::move(it->second.body);
    it->second.body = nullptr;
    pool_->start(std::move(body));
    emit jobsChanged();
  }
}

void JobTracker::workFinished(JobId id, Lane lane, bool ran) {
  if (ran) ++work_run_;
  LaneState& state = lanes_[lane];
  if (state.running == id) {
    state.running = 0;
    dispatch(lane);
  } else {
    // An abandoned job's thread has finished: the lane went on without it.
    abandoned_running_ = std::max(0, abandoned_running_ - 1);
  }
}

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
  LaneState& state = lanes_[job.spec.lane];
  if (auto q = std::find(state.queue.begin(), state.queue.end(), id); q != state.queue.end()) state.queue.erase(q);
  if (state.running == id && abandons(job.spec.lane)) {
    // It cannot be stopped mid-stage; the lane does not wait for it.
    state.running = 0;
    ++abandoned_running_;
    dispatch(job.spec.lane);
  }
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

bool JobTracker::isRunning(JobId id) const {
  auto it = jobs_.find(id);
  return it != jobs_.end() && it->second.running_ms >= 0;
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
