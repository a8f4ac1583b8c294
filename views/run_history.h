// The history of simulation runs as the views show it: every run of the SQLite run store
// (simulator/run_store.h) plus the runs kept in memory only (negative ids: made while no store could
// be used), a few full runs in memory, the last comparison, and the store's path or why it cannot be
// used. Requests that need the store (open, load, relabel, delete, compare) are signals the session
// (app/gui) serves on the store's lane of the job tracker; their answers come back through the
// setters. No I/O here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <QObject>
#include <QString>

#include "simulator/run_result.h"
#include "simulator/run_store.h"

namespace shardscope::views {

// The simulator's value types (RunResult, CollectiveCost, ...) are used as they are.
using namespace ::shardscope::sim;

// The module a run was made from: RunInputs::module_name without the partitioner's ".spmd" suffix
// (the simulator records the name of the SPMD program it ran).
std::string RunModuleName(const RunInputs& inputs);
// For every figure of a comparison: true when a smaller value is better (times, bytes), false when
// a larger one is (MFU).
bool SmallerIsBetter(const ComparedFigure& figure);

class RunHistory : public QObject {
  Q_OBJECT

 public:
  explicit RunHistory(QObject* parent = nullptr);

  // ---- State ----
  // Every run of the store, then the runs kept in memory only; oldest first.
  const std::vector<RunOverview>& runs() const { return runs_; }
  const RunOverview* overview(int64_t run_id) const;
  // The full run when it is in memory (made in this session or loaded recently), else nullptr.
  std::shared_ptr<const RunResult> loadedRun(int64_t run_id) const;
  const std::optional<RunComparison>& comparison() const { return comparison_; }
  QString storePath() const { return store_path_; }    // the store in use; "" when none
  QString storeError() const { return store_error_; }  // why runs are not stored; "" when fine
  bool busy() const { return busy_; }
  // Runs made in this session (carried into a newly saved project's store).
  const std::vector<int64_t>& sessionRuns() const { return session_runs_; }

  // ---- Requests ----
  // Opens the store (once) and lists its runs.
  void open() { emit openRequested(); }
  // runLoaded(run_id) follows (at once when it is in memory) or storeMessage() with the reason.
  void requestRun(int64_t run_id);
  // Changed here at once (runLabelChanged / runRemoved), then written to the store. False: no such run.
  bool setLabel(int64_t run_id, const QString& label);
  bool deleteRun(int64_t run_id);
  // comparisonReady(a, b) follows.
  void requestComparison(int64_t run_a, int64_t run_b);

  // ---- Answers (set by the session) ----
  // A store was opened (`error` empty) or could not be (then runs live in memory only); `runs` is
  // its list; `carried` maps the ids of session runs copied into it to their new ids.
  void setStore(const QString& path, const QString& error, std::vector<RunOverview> runs,
                const std::vector<std::pair<int64_t, int64_t>>& carried);
  // The store was listed again.
  void setStoredRuns(std::vector<RunOverview> runs);
  // A new run of this session: stored (positive id) or kept in memory (id 0: one is given).
  int64_t addRun(std::shared_ptr<RunResult> run, const QString& store_error = QString());
  void setLoaded(std::shared_ptr<const RunResult> run);
  void setComparison(int64_t run_a, int64_t run_b, RunComparison comparison);
  void setBusy(bool busy);
  void setMessage(const QString& message) { emit storeMessage(message); }

 signals:
  void openRequested();
  void runRequested(qint64 run_id);
  void labelWriteRequested(qint64 run_id, const QString& label);
  void deleteWriteRequested(qint64 run_id);
  void comparisonRequested(qint64 run_a, qint64 run_b);

  void runAdded(qint64 run_id);
  void historyReset();          // the list was replaced (store opened, or listed again)
  void runRemoved(qint64 run_id);
  void runLabelChanged(qint64 run_id);
  void runLoaded(qint64 run_id);
  void comparisonReady(qint64 run_a, qint64 run_b);
  void storeChanged();          // storePath() or storeError() changed
  void storeMessage(const QString& message);  // a store operation failed
  void busyChanged(bool busy);

 private:
  void cache(std::shared_ptr<const RunResult> run);

  std::vector<RunOverview> runs_;
  std::vector<std::shared_ptr<const RunResult>> cache_;  // most recently used last
  std::vector<int64_t> session_runs_;
  std::optional<RunComparison> comparison_;
  QString store_path_, store_error_;
  int64_t next_memory_id_ = -1;
  bool busy_ = false;
};

}  // namespace shardscope::views
