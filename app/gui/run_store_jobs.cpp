#include "app/gui/run_store_jobs.h"

#include <optional>
#include <utility>
#include <vector>

#include <QDir>
#include <QStandardPaths>
#include <QTimer>

#include "app/pipeline/simulate.h"
#include "views/run_history.h"

namespace shardscope::gui {

using namespace ::shardscope::sim;

namespace {

using Lane = views::JobTracker::Lane;

QString Q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

// The store as the store's lane sees it.
struct RunStoreJobs::Slot {
  std::shared_ptr<pipeline::RunDatabase> db;  // null when the store could not be opened
  std::string path;
  std::string error;
};

RunStoreJobs::RunStoreJobs(views::RunHistory* history, views::JobTracker* jobs, QObject* parent)
    : QObject(parent), history_(history), jobs_(jobs), slot_(std::make_shared<Slot>()) {
  connect(history_, &views::RunHistory::openRequested, this, &RunStoreJobs::open);
  connect(history_, &views::RunHistory::runRequested, this, [this](qint64 id) { load(id); });
  connect(history_, &views::RunHistory::labelWriteRequested, this, &RunStoreJobs::writeLabel);
  connect(history_, &views::RunHistory::deleteWriteRequested, this, [this](qint64 id) { deleteRun(id); });
  connect(history_, &views::RunHistory::comparisonRequested, this, [this](qint64 a, qint64 b) { compare(a, b); });
}

RunStoreJobs::~RunStoreJobs() = default;

QString RunStoreJobs::chooseStorePath(const QString& project_file) {
  const QString env = qEnvironmentVariable("SHARDSCOPE_RUN_DB");
  if (!env.isEmpty()) return env;
  if (!project_file.isEmpty()) return Q(pipeline::RunDatabase::ProjectStorePath(project_file.toStdString()));
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
  return QDir(dir.isEmpty() ? QDir::homePath() + "/.shardscope" : dir).filePath("runs.sqlite");
}

template <typename R>
void RunStoreJobs::onStore(const QString& label, std::function<R(Slot&, const CancellationToken&)> work,
                           std::function<void(R)> done) {
  const quint64 gen = generation_;
  auto slot = slot_;
  ++pending_;
  updateBusy();
  const views::JobTracker::Spec spec{.label = label, .lane = Lane::kStore, .context = this};
  jobs_->run<R>(
      spec, [slot, work = std::move(work)](const CancellationToken& token) { return work(*slot, token); },
      [this, gen, done = std::move(done)](R r) {
        --pending_;
        updateBusy();
        if (gen == generation_) done(std::move(r));
      },
      [this] {
        --pending_;
        updateBusy();
      });
}

void RunStoreJobs::updateBusy() { history_->setBusy(pending_ > 0 || refresh_scheduled_); }

void RunStoreJobs::open() {
  if (enabled_) return;
  enabled_ = true;
  refresh();
}

void RunStoreJobs::scheduleRefresh() {
  if (refresh_scheduled_) return;
  refresh_scheduled_ = true;
  updateBusy();
  QTimer::singleShot(0, this, [this] {
    refresh_scheduled_ = false;
    refresh();
    updateBusy();
  });
}

void RunStoreJobs::setProject(const QString& project_file, bool carry_session_runs) {
  project_file_ = project_file;
  carry_on_refresh_ = carry_on_refresh_ || carry_session_runs;
  if (enabled_) scheduleRefresh();
}

namespace {

struct Opened {
  bool ok = false;
  std::string path, error;
  std::vector<RunOverview> runs;
  std::vector<std::pair<int64_t, int64_t>> carried;  // session run id -> id in the new store
};

}  // namespace

void RunStoreJobs::refresh() {
  if (!enabled_) return;
  const QString path = chooseStorePath(project_file_);
  const bool carry = carry_on_refresh_;
  carry_on_refresh_ = false;
  if (path == requested_path_) {
    relist();
    return;
  }
  requested_path_ = path;
  ++generation_;
  // Runs of this session go along into a newly saved project's store, so saving a project does not
  // empty the history: the ones in memory as they are, the others read from the old store.
  std::vector<std::pair<int64_t, std::shared_ptr<const RunResult>>> carried;
  if (carry) {
    for (int64_t id : history_->sessionRuns()) carried.emplace_back(id, history_->loadedRun(id));
  }
  const std::string p = path.toStdString();
  onStore<Opened>(
      "opening the run store",
      [p, carried](Slot& slot, const CancellationToken&) {
        Opened r;
        std::shared_ptr<pipeline::RunDatabase> old = slot.db;
        slot.db.reset();
        slot.path = p;
        auto db = pipeline::RunDatabase::Open(p);
        if (!db.ok()) {
          slot.error = db.error().message;
          r.error = slot.error;
          return r;
        }
        slot.db = *db;
        slot.error.clear();
        r.path = p;
        for (const auto& [id, in_memory] : carried) {
          std::optional<RunResult> run;
          if (in_memory) run = *in_memory;
          else if (old && id > 0) {
            auto loaded = old->Load(id);
            if (loaded.ok()) run = std::move(*loaded);
          }
          if (!run) continue;
          auto new_id = slot.db->Save(*run);
          if (new_id.ok()) r.carried.emplace_back(id, *new_id);
        }
        auto runs = slot.db->List();
        if (!runs.ok()) {
          r.error = runs.error().message;
          return r;
        }
        r.runs = std::move(*runs);
        r.ok = true;
        return r;
      },
      [this](Opened r) {
        history_->setStore(Q(r.path), r.ok ? QString() : Q(r.error), std::move(r.runs), r.carried);
      });
}

void RunStoreJobs::relist() {
  if (!enabled_) return;
  onStore<Result<std::vector<RunOverview>>>(
      "listing runs",
      [](Slot& slot, const CancellationToken&) -> Result<std::vector<RunOverview>> {
        if (!slot.db) return Error("");
        return slot.db->List();
      },
      [this](Result<std::vector<RunOverview>> runs) {
        if (!runs.ok()) {
          if (!runs.error().message.empty()) history_->setMessage(Q(runs.error().message));
          return;
        }
        history_->setStoredRuns(std::move(runs).value());
      });
}

void RunStoreJobs::load(int64_t run_id) {
  onStore<Result<std::shared_ptr<const RunResult>>>(
      "loading a run",
      [run_id](Slot& slot, const CancellationToken&) -> Result<std::shared_ptr<const RunResult>> {
        if (!slot.db) return Error("no run store is open");
        auto run = slot.db->Load(run_id);
        if (!run.ok()) return run.error();
        return std::shared_ptr<const RunResult>(std::make_shared<RunResult>(std::move(run).value()));
      },
      [this, run_id](Result<std::shared_ptr<const RunResult>> r) {
        if (!r.ok()) {
          history_->setMessage(QString("Cannot load run %1: %2").arg(run_id).arg(Q(r.error().message)));
          return;
        }
        history_->setLoaded(*r);
      });
}

void RunStoreJobs::writeLabel(int64_t run_id, const QString& label) {
  const std::string text = label.toStdString();
  onStore<Status>(
      "writing to the run store",
      [run_id, text](Slot& slot, const CancellationToken&) -> Status {
        return slot.db ? slot.db->SetLabel(run_id, text) : Status(Error("no run store is open"));
      },
      [this, run_id](Status st) {
        if (st.ok()) return;
        // Say why, and list the store again so the history shows what is really there.
        history_->setMessage(QString("Cannot relabel run %1: %2").arg(run_id).arg(Q(st.error().message)));
        relist();
      });
}

void RunStoreJobs::deleteRun(int64_t run_id) {
  onStore<Status>(
      "writing to the run store",
      [run_id](Slot& slot, const CancellationToken&) -> Status {
        return slot.db ? slot.db->Delete(run_id) : Status(Error("no run store is open"));
      },
      [this, run_id](Status st) {
        if (st.ok()) return;
        history_->setMessage(QString("Cannot delete run %1: %2").arg(run_id).arg(Q(st.error().message)));
        relist();
      });
}

void RunStoreJobs::compare(int64_t run_a, int64_t run_b) {
  const RunOverview* a = history_->overview(run_a);
  const RunOverview* b = history_->overview(run_b);
  if (!a || !b) return;
  const RunOverview fa = *a, fb = *b;
  onStore<Result<RunComparison>>(
      "comparing runs",
      [run_a, run_b](Slot& slot, const CancellationToken&) -> Result<RunComparison> {
        if (!slot.db) return Error("no run store is open");
        return slot.db->Compare(run_a, run_b);
      },
      [this, run_a, run_b, fa, fb](Result<RunComparison> c) {
        if (!c.ok()) {
          history_->setMessage(
              QString("Cannot compare runs %1 and %2 in the store: %3").arg(run_a).arg(run_b).arg(Q(c.error().message)));
          history_->setComparison(run_a, run_b, CompareRunOverviews(fa, fb));
          return;
        }
        history_->setComparison(run_a, run_b, std::move(c).value());
      });
}

void RunStoreJobs::save(std::shared_ptr<const RunResult> run, const QString& key, const QString& label,
                        std::function<void(Result<int64_t>)> done, std::function<void()> cancelled) {
  open();
  auto slot = slot_;
  ++pending_;
  updateBusy();
  const views::JobTracker::Spec spec{
      .label = label, .lane = Lane::kStore, .key = key, .cancellable = true, .context = this};
  jobs_->run<Result<int64_t>>(
      spec,
      [slot, run](const CancellationToken& token) -> Result<int64_t> {
        if (!slot->db) return Error(slot->error.empty() ? "no run store is open" : slot->error);
        return slot->db->Save(*run, token);
      },
      [this, done = std::move(done)](Result<int64_t> id) {
        --pending_;
        updateBusy();
        done(std::move(id));
      },
      [this, cancelled = std::move(cancelled)] {
        --pending_;
        updateBusy();
        if (cancelled) cancelled();
      });
}

}  // namespace shardscope::gui
