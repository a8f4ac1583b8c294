// The run store's I/O for the GUI: every operation on the SQLite store (pipeline::RunDatabase) —
// open, list, save, load, relabel, delete, compare — runs as a job on the store's lane of the job
// tracker, never blocking the window and never waiting behind a propagation. Answers go to the
// views' RunHistory; a store that changes (a project saved or opened) drops the answers meant for
// the old one.
//
// Which store: $SHARDSCOPE_RUN_DB when set; else the project's ("dir/name.runs.sqlite" next to a
// saved or opened "dir/name.shardscope"); else runs.sqlite in the per-user data folder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <QObject>
#include <QString>

#include "core/base/status.h"
#include "simulator/run_result.h"
#include "views/job_tracker.h"

namespace shardscope::views {
class RunHistory;
}

namespace shardscope::gui {

using sim::RunResult;

class RunStoreJobs : public QObject {
  Q_OBJECT

 public:
  RunStoreJobs(views::RunHistory* history, views::JobTracker* jobs, QObject* parent = nullptr);
  ~RunStoreJobs() override;

  static QString chooseStorePath(const QString& project_file);

  // Opens the store on first use (the history's open(), or the first save) and lists its runs.
  void open();
  bool isOpen() const { return enabled_; }
  // The document now belongs to `project_file` ("" : none): its store is used from now on. With
  // `carry_session_runs` (a project just saved) the runs of this session are copied into it.
  void setProject(const QString& project_file, bool carry_session_runs);
  // Opens the store again when its path changed, else lists its runs again.
  void refresh();
  bool refreshScheduled() const { return refresh_scheduled_; }

  // Saves `run` (a job with `key`, so cancelling that key cancels the save; nothing is stored then).
  // `done` gets the new id, or the error when the store cannot be used.
  void save(std::shared_ptr<const RunResult> run, const QString& key, const QString& label,
            std::function<void(Result<int64_t>)> done, std::function<void()> cancelled);

 private:
  struct Slot;
  void scheduleRefresh();
  void relist();
  void load(int64_t run_id);
  void writeLabel(int64_t run_id, const QString& label);
  void deleteRun(int64_t run_id);
  void compare(int64_t run_a, int64_t run_b);
  // Runs `work` on the store's lane; `done` on the GUI thread unless the store changed meanwhile.
  template <typename R>
  void onStore(const QString& label, std::function<R(Slot&, const CancellationToken&)> work, std::function<void(R)> done);
  void updateBusy();

  views::RunHistory* history_;
  views::JobTracker* jobs_;
  std::shared_ptr<Slot> slot_;  // touched only on the store's lane
  bool enabled_ = false;
  bool refresh_scheduled_ = false;
  bool carry_on_refresh_ = false;
  QString project_file_;   // the project whose store is used ("" for the per-user store)
  QString requested_path_;  // the store asked for last
  quint64 generation_ = 0;  // of the store in use: answers of older stores are dropped
  int pending_ = 0;
};

}  // namespace shardscope::gui
