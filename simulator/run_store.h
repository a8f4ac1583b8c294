// SQLite store of simulation runs (the sqlite3 C library; no Qt).
//
// One database file per project by default (DefaultStorePath). The schema is versioned with
// PRAGMA user_version and mirrored in a `schema` table; opening a database written by a newer
// ShardScope, or a SQLite file that is not a run store, fails with a clear message; older versions
// are migrated in place, step by step (2 added instruction origins, 3 the device's HBM, 4 run keys
// and annotations, 5 pipeline bubbles, recompute and the raw FLOPS utilisation).
// The journal is WAL.
//
// Every run is written in ONE transaction with prepared statements and bound parameters, so a
// crash or kill while a run is being stored leaves the database readable with every earlier run
// intact and no trace of the partial one. (synchronous=NORMAL: safe against a process crash; a
// power cut may lose the most recent commits but never corrupts the file.)
//
// Run identity: a run saved with a key (RunResult::key) replaces the stored run with that key, in
// the same transaction and under the same id. MergeFrom copies every run of another store this
// way (a run without a key is given its content key, RunContentKey), so merging the same inputs
// again, or a re-run task's file, changes nothing and duplicates nothing.
//
// A RunStore is a connection: use it from one thread at a time. Several processes or threads may
// each open their own RunStore on the same file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "simulator/run_result.h"

struct sqlite3;

namespace shardscope::sim {

// A closed-open time window [start_s, end_s).
struct TimeRange {
  double start_s = 0;
  double end_s = 0;
};

enum class LoadDetail {
  kSummaryOnly,  // id, time, label, inputs, summary; no classes, map or collectives
  kFull,
};

struct SaveOptions {
  // Called about every 4096 rows with (rows written, rows in total). Return false to cancel: the
  // transaction is rolled back and SaveRun returns an error. May be empty.
  std::function<bool(int64_t done, int64_t total)> progress;
};

struct MergeReport {
  int64_t runs_read = 0;  // runs copied from the other store
  int64_t added = 0;      // of which new here
  int64_t replaced = 0;   // of which replaced a run with the same key
};

struct ComparedFigure {
  std::string name;  // "step time", "peak memory", ...
  std::string unit;  // "s", "bytes", "FLOP/s fraction"
  double a = 0;
  double b = 0;
  double difference() const { return b - a; }
  // b / a; 0 when a is 0.
  double ratio() const { return a != 0 ? b / a : 0; }
};

struct RunComparison {
  RunOverview a;
  RunOverview b;
  ComparedFigure step_time;
  ComparedFigure peak_memory;
  ComparedFigure bytes_communicated;
  // The three above followed by compute, communication, idle, exposed communication and MFU.
  std::vector<ComparedFigure> figures;
};

// The figures of two runs side by side (RunStore::CompareRuns for stored runs; also usable on
// runs that are only in memory).
RunComparison CompareRunOverviews(const RunOverview& a, const RunOverview& b);

class RunStore {
 public:
  // 2: instruction origins; 3: device HBM; 4: run keys, annotations; 5: bubbles, recompute, raw utilisation
  static constexpr int kSchemaVersion = 6;

  enum class OpenMode {
    kCreate,        // create the file (and schema) when missing
    kOpenExisting,  // fail when the file does not exist
  };

  // Opens or creates the store at `path`, checks/creates/migrates the schema, enables WAL.
  static Result<RunStore> Open(const std::string& path, OpenMode mode = OpenMode::kCreate);
  // The default store of a project file: "dir/model.shardscope" -> "dir/model.runs.sqlite".
  static std::string DefaultStorePath(std::string_view project_file);

  RunStore(RunStore&& other) noexcept;
  RunStore& operator=(RunStore&& other) noexcept;
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;
  ~RunStore();

  const std::string& path() const { return path_; }

  // Stores `run` (validated first) in one transaction and returns its new id. run.id is ignored;
  // run.created_unix_ms of 0 is stamped with the current time.
  Result<int64_t> SaveRun(const RunResult& run, const SaveOptions& options = {});
  // All runs, oldest first.
  Result<std::vector<RunOverview>> ListRuns();
  Result<RunResult> LoadRun(int64_t run_id, LoadDetail detail = LoadDetail::kFull);
  // `device`'s events (device ids filled in), in stored order. With a range: only the events that
  // overlap [start_s, end_s) — start < end_s and end > start_s, or a zero-length event starting in
  // the range. An empty range (end_s <= start_s) gives no events.
  Result<std::vector<TimelineEvent>> LoadDeviceTimeline(int64_t run_id, int64_t device,
                                                        std::optional<TimeRange> range = {});
  Result<std::vector<MemorySample>> LoadMemory(int64_t run_id, int64_t device);
  Result<std::vector<PeakBuffer>> LoadPeakBuffers(int64_t run_id, int64_t device);
  Result<std::vector<int32_t>> LoadDeviceClassMap(int64_t run_id);
  Status SetLabel(int64_t run_id, std::string_view label);
  // The id of the run stored under `key`, if any.
  Result<std::optional<int64_t>> FindRunByKey(std::string_view key);
  // Copies every run of the store at `other_path` (opened, migrated if older) into this one, each
  // in its own transaction, replacing runs with the same key. `keep_going` (may be empty) is asked
  // before each run; false stops with an error (runs copied so far stay).
  Result<MergeReport> MergeFrom(const std::string& other_path, const std::function<bool()>& keep_going = {});
  Status DeleteRun(int64_t run_id);
  Result<RunComparison> CompareRuns(int64_t run_a, int64_t run_b);

 private:
  RunStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Error DbError(std::string_view what) const;
  Status Exec(const char* sql, std::string_view what);
  Status InitSchema();
  Status EnableWal();
  Result<int32_t> ClassOfDevice(int64_t run_id, int64_t device);
  Result<RunOverview> LoadOverview(int64_t run_id);
  Status DeleteRunRows(int64_t run_id);  // inside a transaction
  Result<std::vector<std::string>> LoadStrings(int64_t run_id);

  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace shardscope::sim
