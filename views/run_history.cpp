#include "views/run_history.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace shardscope::views {

using namespace ::shardscope::sim;

std::string RunModuleName(const RunInputs& inputs) {
  const std::string& n = inputs.module_name;
  constexpr std::string_view kSuffix = ".spmd";
  if (n.size() > kSuffix.size() && n.compare(n.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
    return n.substr(0, n.size() - kSuffix.size());
  }
  return n;
}

bool SmallerIsBetter(const ComparedFigure& figure) {
  std::string name = figure.name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return name.find("mfu") == std::string::npos && name.find("utili") == std::string::npos;
}

RunHistory::RunHistory(QObject* parent) : QObject(parent) {}

const RunOverview* RunHistory::overview(int64_t run_id) const {
  for (const auto& h : runs_) {
    if (h.id == run_id) return &h;
  }
  return nullptr;
}

std::shared_ptr<const RunResult> RunHistory::loadedRun(int64_t run_id) const {
  for (const auto& r : cache_) {
    if (r->id == run_id) return r;
  }
  return nullptr;
}

void RunHistory::cache(std::shared_ptr<const RunResult> run) {
  const int64_t id = run->id;
  cache_.erase(std::remove_if(cache_.begin(), cache_.end(), [id](const auto& r) { return r->id == id; }), cache_.end());
  cache_.push_back(std::move(run));
  // A few stored runs stay in memory (they can be read again); runs kept in memory only always do,
  // and so does the newest run of this session.
  constexpr size_t kCachedStoredRuns = 6;
  size_t stored = 0;
  for (const auto& r : cache_) stored += r->id > 0;
  for (auto it = cache_.begin(); stored > kCachedStoredRuns && it != cache_.end();) {
    const int64_t rid = (*it)->id;
    const bool newest = !session_runs_.empty() && session_runs_.back() == rid;
    if (rid > 0 && !newest) {
      it = cache_.erase(it);
      --stored;
    } else {
      ++it;
    }
  }
}

// ---- Requests ---------------------------------------------------------------------------------------

void RunHistory::requestRun(int64_t run_id) {
  if (auto cached = loadedRun(run_id)) {
    cache(cached);  // most recently used
    emit runLoaded(run_id);
    return;
  }
  if (run_id <= 0) {
    emit storeMessage(QString("run %1 is not in memory").arg(run_id));
    return;
  }
  emit runRequested(run_id);
}

bool RunHistory::setLabel(int64_t run_id, const QString& label) {
  RunOverview* entry = nullptr;
  for (auto& h : runs_) {
    if (h.id == run_id) entry = &h;
  }
  if (!entry) return false;
  const std::string text = label.toStdString();
  if (entry->label == text) return true;
  entry->label = text;
  for (auto& cached : cache_) {
    if (cached->id != run_id) continue;
    auto copy = std::make_shared<RunResult>(*cached);
    copy->label = text;
    cached = copy;
  }
  emit runLabelChanged(run_id);
  if (run_id > 0) emit labelWriteRequested(run_id, label);
  return true;
}

bool RunHistory::deleteRun(int64_t run_id) {
  auto it = std::find_if(runs_.begin(), runs_.end(), [run_id](const RunOverview& h) { return h.id == run_id; });
  if (it == runs_.end()) return false;
  runs_.erase(it);
  cache_.erase(std::remove_if(cache_.begin(), cache_.end(), [run_id](const auto& r) { return r->id == run_id; }),
               cache_.end());
  session_runs_.erase(std::remove(session_runs_.begin(), session_runs_.end(), run_id), session_runs_.end());
  if (comparison_ && (comparison_->a.id == run_id || comparison_->b.id == run_id)) comparison_.reset();
  emit runRemoved(run_id);
  if (run_id > 0) emit deleteWriteRequested(run_id);
  return true;
}

void RunHistory::requestComparison(int64_t run_a, int64_t run_b) {
  const RunOverview* a = overview(run_a);
  const RunOverview* b = overview(run_b);
  if (!a || !b) {
    emit storeMessage(QString("Cannot compare runs %1 and %2: not in the history").arg(run_a).arg(run_b));
    return;
  }
  if (run_a < 0 || run_b < 0) {  // not both stored: the same figures from the summaries
    setComparison(run_a, run_b, CompareRunOverviews(*a, *b));
    return;
  }
  emit comparisonRequested(run_a, run_b);
}

// ---- Answers ---------------------------------------------------------------------------------------

void RunHistory::setStore(const QString& path, const QString& error, std::vector<RunOverview> runs,
                          const std::vector<std::pair<int64_t, int64_t>>& carried) {
  // Runs kept in memory stay in the history whatever the store.
  std::vector<RunOverview> memory_only;
  for (const auto& h : runs_) {
    if (h.id < 0) memory_only.push_back(h);
  }
  // Carried runs have new ids: move what is known about them.
  for (const auto& [from, to] : carried) {
    for (auto& id : session_runs_) {
      if (id == from) id = to;
    }
    for (auto& cached : cache_) {
      if (cached->id != from) continue;
      auto copy = std::make_shared<RunResult>(*cached);
      copy->id = to;
      cached = copy;
    }
    memory_only.erase(std::remove_if(memory_only.begin(), memory_only.end(),
                                     [from = from](const RunOverview& o) { return o.id == from; }),
                      memory_only.end());
  }
  // Cached runs of the old store are not runs of this one.
  cache_.erase(std::remove_if(cache_.begin(), cache_.end(),
                              [&](const std::shared_ptr<const RunResult>& c) {
                                if (c->id < 0) return false;
                                for (const auto& [from, to] : carried) {
                                  if (c->id == to) return false;
                                }
                                return true;
                              }),
               cache_.end());
  comparison_.reset();
  store_path_ = error.isEmpty() ? path : QString();
  store_error_ = error.isEmpty() ? QString() : "Runs are kept in memory only (lost when ShardScope closes): " + error;
  runs_ = error.isEmpty() ? std::move(runs) : std::vector<RunOverview>{};
  runs_.insert(runs_.end(), memory_only.begin(), memory_only.end());
  emit storeChanged();
  emit historyReset();
}

void RunHistory::setStoredRuns(std::vector<RunOverview> runs) {
  std::vector<RunOverview> memory_only;
  for (const auto& h : runs_) {
    if (h.id < 0) memory_only.push_back(h);
  }
  runs_ = std::move(runs);
  runs_.insert(runs_.end(), memory_only.begin(), memory_only.end());
  emit historyReset();
}

int64_t RunHistory::addRun(std::shared_ptr<RunResult> run, const QString& store_error) {
  if (run->id <= 0) {
    run->id = next_memory_id_--;
    const QString msg = "Runs are kept in memory only (lost when ShardScope closes): " + store_error;
    if (store_error_ != msg) {
      store_error_ = msg;
      emit storeChanged();
    }
  }
  const int64_t id = run->id;
  runs_.push_back(OverviewOf(*run));
  session_runs_.push_back(id);
  cache(std::move(run));
  emit runAdded(id);
  return id;
}

void RunHistory::setLoaded(std::shared_ptr<const RunResult> run) {
  const int64_t id = run->id;
  cache(std::move(run));
  emit runLoaded(id);
}

void RunHistory::setComparison(int64_t run_a, int64_t run_b, RunComparison comparison) {
  comparison_ = std::move(comparison);
  emit comparisonReady(run_a, run_b);
}

void RunHistory::setBusy(bool busy) {
  if (busy_ == busy) return;
  busy_ = busy;
  emit busyChanged(busy);
}

}  // namespace shardscope::views
