#include "simulator/run_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>

namespace shardscope::sim {

namespace {

constexpr const char* kApplicationId = "ShardScope run store";

// Schema version 1. Every detail table is keyed by run id first, so a run's rows are contiguous
// (fast range deletes and loads); WITHOUT ROWID keeps the small rows compact.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE schema(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE runs(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created_ms INTEGER NOT NULL,
  label TEXT NOT NULL,
  module_name TEXT NOT NULL,
  module_hash TEXT NOT NULL,
  chip_preset TEXT NOT NULL,
  mesh_text TEXT NOT NULL,
  topology_options TEXT NOT NULL,
  num_devices INTEGER NOT NULL,
  num_classes INTEGER NOT NULL,
  step_time_s REAL NOT NULL,
  compute_time_s REAL NOT NULL,
  communication_time_s REAL NOT NULL,
  idle_time_s REAL NOT NULL,
  exposed_communication_s REAL NOT NULL,
  mfu REAL NOT NULL,
  peak_memory_bytes INTEGER NOT NULL,
  bytes_communicated INTEGER NOT NULL,
  total_flops REAL NOT NULL);
CREATE TABLE run_settings(
  run_id INTEGER NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY(run_id, seq)) WITHOUT ROWID;
CREATE TABLE run_strings(
  run_id INTEGER NOT NULL, idx INTEGER NOT NULL, text TEXT NOT NULL,
  PRIMARY KEY(run_id, idx)) WITHOUT ROWID;
CREATE TABLE device_classes(
  run_id INTEGER NOT NULL, class_idx INTEGER NOT NULL, label TEXT NOT NULL,
  peak_memory_bytes INTEGER NOT NULL, peak_memory_time_s REAL NOT NULL,
  max_event_duration_s REAL NOT NULL,
  PRIMARY KEY(run_id, class_idx)) WITHOUT ROWID;
CREATE TABLE device_map(
  run_id INTEGER NOT NULL, device INTEGER NOT NULL, class_idx INTEGER NOT NULL,
  PRIMARY KEY(run_id, device)) WITHOUT ROWID;
CREATE TABLE events(
  run_id INTEGER NOT NULL, class_idx INTEGER NOT NULL, seq INTEGER NOT NULL,
  stream INTEGER NOT NULL, start_s REAL NOT NULL, duration_s REAL NOT NULL,
  instruction_id INTEGER NOT NULL, kind_id INTEGER NOT NULL, bytes INTEGER NOT NULL,
  flops REAL NOT NULL,
  PRIMARY KEY(run_id, class_idx, seq)) WITHOUT ROWID;
CREATE INDEX events_by_start ON events(run_id, class_idx, start_s);
CREATE TABLE memory_samples(
  run_id INTEGER NOT NULL, class_idx INTEGER NOT NULL, seq INTEGER NOT NULL,
  time_s REAL NOT NULL, parameters INTEGER NOT NULL, optimizer_state INTEGER NOT NULL,
  activations INTEGER NOT NULL, gradients INTEGER NOT NULL, temporaries INTEGER NOT NULL,
  PRIMARY KEY(run_id, class_idx, seq)) WITHOUT ROWID;
CREATE TABLE peak_buffers(
  run_id INTEGER NOT NULL, class_idx INTEGER NOT NULL, seq INTEGER NOT NULL,
  name TEXT NOT NULL, bytes INTEGER NOT NULL, category INTEGER NOT NULL,
  PRIMARY KEY(run_id, class_idx, seq)) WITHOUT ROWID;
CREATE TABLE collectives(
  run_id INTEGER NOT NULL, seq INTEGER NOT NULL, instruction TEXT NOT NULL, kind TEXT NOT NULL,
  replica_groups TEXT NOT NULL, bytes INTEGER NOT NULL, time_s REAL NOT NULL,
  regime TEXT NOT NULL,
  PRIMARY KEY(run_id, seq)) WITHOUT ROWID;
)sql";

// Tables holding a run's rows (deleted with it).
constexpr const char* kRunTables[] = {"run_settings",   "run_strings",  "device_classes",
                                      "device_map",     "events",       "memory_samples",
                                      "peak_buffers",   "collectives",  "instruction_origins",
                                      "run_annotations"};

// Migrations: kMigrations[v - 1] upgrades schema version v to v + 1; a new store is created at
// version 1 and migrated like an old one, so every store reaches the same schema the same way.
struct Migration {
  int from_version;
  const char* sql;
};
constexpr std::array<Migration, 5> kMigrations{{
    // 2: the original instruction behind each instruction of the partitioned program.
    {1, "CREATE TABLE instruction_origins(run_id INTEGER NOT NULL, instruction TEXT NOT NULL, "
        "origin TEXT NOT NULL, PRIMARY KEY(run_id, instruction)) WITHOUT ROWID"},
    // 3: the chip's HBM per device, so a run that does not fit says so (0 for older runs: unknown).
    {2, "ALTER TABLE runs ADD COLUMN device_hbm_bytes INTEGER NOT NULL DEFAULT 0"},
    // 4: a run's identity key (a run saved with a stored key replaces it) and the annotations of
    // the module it was made from. Runs stored before have no key and no annotations.
    {3, "ALTER TABLE runs ADD COLUMN run_key TEXT NOT NULL DEFAULT ''; "
        "CREATE INDEX runs_by_key ON runs(run_key); "
        "CREATE TABLE run_annotations(run_id INTEGER NOT NULL, seq INTEGER NOT NULL, instruction TEXT NOT NULL, "
        "sharding TEXT NOT NULL, PRIMARY KEY(run_id, seq)) WITHOUT ROWID"},
    // 5: pipelining and rematerialisation (GSPMD Tables 4-5): bubble and recompute time and FLOPs,
    // and the raw FLOPS utilisation beside MFU. Older runs were simulated without this accounting:
    // their MFU counted every executed FLOP as useful, which is the raw reading, so it moves there;
    // their bubbles and recompute are unknown (0).
    {4, "ALTER TABLE runs ADD COLUMN pipeline_stages INTEGER NOT NULL DEFAULT 0; "
        "ALTER TABLE runs ADD COLUMN bubble_time_s REAL NOT NULL DEFAULT 0; "
        "ALTER TABLE runs ADD COLUMN recompute_time_s REAL NOT NULL DEFAULT 0; "
        "ALTER TABLE runs ADD COLUMN bubble_flops REAL NOT NULL DEFAULT 0; "
        "ALTER TABLE runs ADD COLUMN recompute_flops REAL NOT NULL DEFAULT 0; "
        "ALTER TABLE runs ADD COLUMN raw_flops_utilization REAL NOT NULL DEFAULT 0; "
        "UPDATE runs SET raw_flops_utilization = mfu"},
    // 6: how the logical mesh was placed on the physical slice (Topology::DescribePlacement, e.g.
    // "X=1024 over physical axes 0,1 (32x32, snake: a closed ring)"). Older runs: unknown ('').
    {5, "ALTER TABLE runs ADD COLUMN placement TEXT NOT NULL DEFAULT ''"},
}};

// RAII prepared statement.
class Stmt {
 public:
  Stmt() = default;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }

  bool Prepare(sqlite3* db, const char* sql) {
    sqlite3_finalize(s_);
    s_ = nullptr;
    return sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s_, nullptr) == SQLITE_OK;
  }
  sqlite3_stmt* get() const { return s_; }

  void Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void BindNull(int i) { sqlite3_bind_null(s_, i); }
  void Bind(int i, double v) { sqlite3_bind_double(s_, i, v); }
  void Bind(int i, std::string_view v) {
    // SQLITE_STATIC: the caller keeps the text alive until the statement is stepped.
    sqlite3_bind_text64(s_, i, v.data() ? v.data() : "", v.size(), SQLITE_STATIC, SQLITE_UTF8);
  }
  // Steps a statement that returns no rows, then resets it for the next use.
  bool Run() {
    rc_ = sqlite3_step(s_);
    sqlite3_reset(s_);
    return rc_ == SQLITE_DONE;
  }
  // Steps a query; true while a row is available.
  bool Row() {
    rc_ = sqlite3_step(s_);
    return rc_ == SQLITE_ROW;
  }
  // After Row() returned false: whether the query ended normally rather than failed.
  bool Done() const { return rc_ == SQLITE_DONE; }
  int rc() const { return rc_; }

  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  double Real(int col) const { return sqlite3_column_double(s_, col); }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(s_, col);
    int n = sqlite3_column_bytes(s_, col);
    return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(n)) : std::string();
  }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_OK;
};

int64_t NowUnixMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Steps a query once: SQLITE_ROW, SQLITE_DONE (no row) or an error code.
int StepQuery(Stmt& s) {
  s.Row();
  return s.rc();
}

}  // namespace

// ---- Lifetime ------------------------------------------------------------------------------------

RunStore::RunStore(RunStore&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

RunStore& RunStore::operator=(RunStore&& other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

RunStore::~RunStore() {
  if (db_) sqlite3_close_v2(db_);
}

std::string RunStore::DefaultStorePath(std::string_view project_file) {
  std::filesystem::path p{std::string(project_file)};
  p.replace_extension(".runs.sqlite");
  return p.string();
}

Error RunStore::DbError(std::string_view what) const {
  std::string msg = "run store '" + path_ + "': " + std::string(what);
  if (db_) {
    msg += ": ";
    msg += sqlite3_errmsg(db_);
  }
  return Error(std::move(msg));
}

Status RunStore::Exec(const char* sql, std::string_view what) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = "run store '" + path_ + "': " + std::string(what) + ": " +
                      (err ? err : sqlite3_errmsg(db_));
    sqlite3_free(err);
    return Error(std::move(msg));
  }
  return Status::Ok();
}

Status RunStore::EnableWal() {
  Stmt s;
  if (!s.Prepare(db_, "PRAGMA journal_mode=WAL") || !s.Row())
    return DbError("cannot enable the WAL journal");
  std::string mode = s.Text(0);
  if (mode != "wal" && path_ != ":memory:")
    return Error("run store '" + path_ + "': cannot enable the WAL journal (journal mode is '" + mode +
                 "'); the file system may not support it, store the runs on a local disk");
  return Status::Ok();
}

Result<RunStore> RunStore::Open(const std::string& path, OpenMode mode) {
  if (path.empty()) return Error("run store: empty database path");
  if (mode == OpenMode::kOpenExisting) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return Error("run store '" + path + "': no such file (nothing has been stored there yet)");
  }
  int flags = SQLITE_OPEN_READWRITE | (mode == OpenMode::kCreate ? SQLITE_OPEN_CREATE : 0);
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = "run store '" + path + "': cannot open: " +
                      (raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
    sqlite3_close_v2(raw);
    return Error(std::move(msg));
  }
  RunStore store(raw, path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 5000);
  if (Status s = store.InitSchema(); !s.ok()) return s.error();
  return store;
}

Status RunStore::InitSchema() {
  auto read_version = [&](int& version) -> Status {
    Stmt s;
    if (!s.Prepare(db_, "PRAGMA user_version")) return DbError("cannot read the schema version");
    if (!s.Row()) return DbError("cannot read the schema version");
    version = static_cast<int>(s.Int(0));
    return Status::Ok();
  };
  auto count_tables = [&](int64_t& n) -> Status {
    Stmt s;
    if (!s.Prepare(db_, "SELECT count(*) FROM sqlite_schema") || !s.Row())
      return DbError("cannot read the database schema");
    n = s.Int(0);
    return Status::Ok();
  };

  int version = 0;
  if (Status s = read_version(version); !s.ok()) return s;  // also catches "not a database"
  if (version > kSchemaVersion)
    return Error("run store '" + path_ + "' has schema version " + std::to_string(version) +
                 ", written by a newer ShardScope; this build understands versions up to " +
                 std::to_string(kSchemaVersion) + ". Open it with a newer ShardScope or use another file.");
  if (version < 0)
    return Error("run store '" + path_ + "': invalid schema version " + std::to_string(version));

  if (version == 0) {
    int64_t tables = 0;
    if (Status s = count_tables(tables); !s.ok()) return s;
    if (tables > 0)
      return Error("run store '" + path_ +
                   "' is a SQLite database but not a ShardScope run store (it has " +
                   std::to_string(tables) + " schema objects and no schema version)");
    // Fresh file. WAL first (it cannot change inside a transaction), then create the version-1
    // schema under a write lock, re-checking in case another process created it meanwhile; later
    // versions are reached by the migrations below.
    if (Status s = EnableWal(); !s.ok()) return s;
    if (Status s = Exec("BEGIN IMMEDIATE", "cannot lock the new database"); !s.ok()) return s;
    int v2 = 0;
    int64_t t2 = 0;
    Status s = read_version(v2);
    if (s.ok()) s = count_tables(t2);
    if (s.ok() && v2 == 0 && t2 == 0) {
      s = Exec(kSchemaV1, "cannot create the schema");
      if (s.ok()) {
        std::string meta = std::string("INSERT INTO schema(key, value) VALUES('application', '") +
                           kApplicationId + "'), ('version', '1'); PRAGMA user_version = 1;";
        s = Exec(meta.c_str(), "cannot record the schema version");
      }
    }
    if (!s.ok()) {
      (void)Exec("ROLLBACK", "rollback");
      return s;
    }
    if (Status c = Exec("COMMIT", "cannot create the schema"); !c.ok()) {
      (void)Exec("ROLLBACK", "rollback");
      return c;
    }
    return InitSchema();  // now version >= 1 or foreign tables: checked below
  }

  // An existing store: check it is ours.
  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT value FROM schema WHERE key = 'application'"))
      return Error("run store '" + path_ + "' has schema version " + std::to_string(version) +
                   " but no schema table; it is not a ShardScope run store (" + sqlite3_errmsg(db_) + ")");
    if (!s.Row() || s.Text(0) != kApplicationId)
      return Error("run store '" + path_ + "' is a SQLite database but not a ShardScope run store");
  }

  // Migrate older versions step by step, each in its own transaction.
  while (version < kSchemaVersion) {
    const Migration* step = nullptr;
    for (const Migration& m : kMigrations)
      if (m.from_version == version) step = &m;
    if (!step)
      return Error("run store '" + path_ + "' has schema version " + std::to_string(version) +
                   ", which this build cannot migrate to version " + std::to_string(kSchemaVersion) +
                   "; export the runs with the ShardScope that wrote them or start a new store");
    if (Status s = Exec("BEGIN IMMEDIATE", "cannot lock the database for migration"); !s.ok()) return s;
    std::string sql = std::string(step->sql) + "; PRAGMA user_version = " +
                      std::to_string(version + 1) + "; UPDATE schema SET value = '" +
                      std::to_string(version + 1) + "' WHERE key = 'version';";
    Status s = Exec(sql.c_str(), "cannot migrate the schema");
    if (s.ok()) s = Exec("COMMIT", "cannot migrate the schema");
    if (!s.ok()) {
      (void)Exec("ROLLBACK", "rollback");
      return s;
    }
    ++version;
  }

  if (Status s = EnableWal(); !s.ok()) return s;
  return Exec("PRAGMA synchronous=NORMAL; PRAGMA cache_size=-16384", "cannot configure the connection");
}

// ---- Saving --------------------------------------------------------------------------------------

Result<int64_t> RunStore::SaveRun(const RunResult& run, const SaveOptions& options) {
  if (Status v = run.Validate(); !v.ok())
    return Error("run store '" + path_ + "': cannot save an invalid run: " + v.error().message);

  // Intern event instruction names and kinds: they repeat across classes and events.
  std::unordered_map<std::string_view, int64_t> string_ids;
  std::vector<std::string_view> strings;
  auto intern = [&](const std::string& s) -> int64_t {
    auto [it, inserted] = string_ids.emplace(s, static_cast<int64_t>(strings.size()));
    if (inserted) strings.push_back(s);
    return it->second;
  };
  size_t num_events = 0, num_samples = 0, num_buffers = 0;
  for (const auto& c : run.classes) {
    num_events += c.events.size();
    num_samples += c.memory.size();
    num_buffers += c.peak_buffers.size();
  }
  std::vector<std::pair<int64_t, int64_t>> event_ids;
  event_ids.reserve(num_events);
  for (const auto& c : run.classes)
    for (const auto& e : c.events) event_ids.emplace_back(intern(e.instruction), intern(e.kind));

  const int64_t total = static_cast<int64_t>(1 + run.inputs.settings.size() + strings.size() +
                                             run.classes.size() + run.device_class.size() +
                                             num_events + num_samples + num_buffers +
                                             run.collectives.size() + run.origins.size() +
                                             run.annotations.size());
  int64_t done = 0;
  bool cancelled = false;
  auto tick = [&]() -> bool {
    ++done;
    if (options.progress && (done % 4096 == 0 || done == total)) {
      bool go_on = false;
      try {
        go_on = options.progress(done, total);
      } catch (...) {  // a throwing callback cancels; nothing escapes the library
        go_on = false;
      }
      if (!go_on) {
        cancelled = true;
        return false;
      }
    }
    return true;
  };

  if (Status s = Exec("BEGIN IMMEDIATE", "cannot start the transaction to save a run"); !s.ok())
    return s.error();

  // Everything below runs inside the transaction; any failure rolls it back.
  auto body = [&]() -> Result<int64_t> {
    auto fail = [&](const char* what) -> Error {
      if (cancelled) return Error("run store '" + path_ + "': saving the run was cancelled");
      return DbError(what);
    };
    const int64_t created = run.created_unix_ms != 0 ? run.created_unix_ms : NowUnixMs();
    int64_t id = 0;
    // A run with a key that is already stored replaces that run, keeping its id.
    int64_t replaced = 0;
    if (!run.key.empty()) {
      Stmt q;
      if (!q.Prepare(db_, "SELECT id FROM runs WHERE run_key = ? ORDER BY id")) return fail("cannot prepare the key query");
      q.Bind(1, std::string_view(run.key));
      std::vector<int64_t> old;
      while (q.Row()) old.push_back(q.Int(0));
      if (!q.Done()) return fail("cannot look the run's key up");
      for (int64_t o : old)
        if (Status d = DeleteRunRows(o); !d.ok()) return d.error();
      if (!old.empty()) replaced = old.front();
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO runs(created_ms, label, module_name, module_hash, chip_preset, "
                          "mesh_text, topology_options, num_devices, num_classes, step_time_s, "
                          "compute_time_s, communication_time_s, idle_time_s, exposed_communication_s, "
                          "mfu, peak_memory_bytes, bytes_communicated, total_flops, device_hbm_bytes, run_key, id, "
                          "pipeline_stages, bubble_time_s, recompute_time_s, bubble_flops, recompute_flops, "
                          "raw_flops_utilization, placement) "
                          "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"))
        return fail("cannot prepare the run insert");
      const RunInputs& in = run.inputs;
      const RunSummary& sm = run.summary;
      s.Bind(1, created);
      s.Bind(2, run.label);
      s.Bind(3, in.module_name);
      s.Bind(4, in.module_hash);
      s.Bind(5, in.chip_preset);
      s.Bind(6, in.mesh_text);
      s.Bind(7, in.topology_options);
      s.Bind(8, sm.num_devices);
      s.Bind(9, static_cast<int64_t>(run.classes.size()));
      s.Bind(10, sm.step_time_s);
      s.Bind(11, sm.compute_time_s);
      s.Bind(12, sm.communication_time_s);
      s.Bind(13, sm.idle_time_s);
      s.Bind(14, sm.exposed_communication_s);
      s.Bind(15, sm.mfu);
      s.Bind(16, sm.peak_memory_bytes);
      s.Bind(17, sm.bytes_communicated);
      s.Bind(18, sm.total_flops);
      s.Bind(19, sm.device_hbm_bytes);
      s.Bind(20, std::string_view(run.key));
      if (replaced > 0) s.Bind(21, replaced);
      else s.BindNull(21);
      s.Bind(22, sm.pipeline_stages);
      s.Bind(23, sm.bubble_time_s);
      s.Bind(24, sm.recompute_time_s);
      s.Bind(25, sm.bubble_flops);
      s.Bind(26, sm.recompute_flops);
      s.Bind(27, sm.raw_flops_utilization);
      s.Bind(28, in.placement);
      if (!s.Run()) return fail("cannot insert the run");
      id = sqlite3_last_insert_rowid(db_);
      if (!tick()) return fail("");
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO run_settings(run_id, seq, key, value) VALUES(?,?,?,?)"))
        return fail("cannot prepare the settings insert");
      int64_t seq = 0;
      for (const auto& [k, v] : run.inputs.settings) {
        s.Bind(1, id);
        s.Bind(2, seq++);
        s.Bind(3, k);
        s.Bind(4, v);
        if (!s.Run()) return fail("cannot insert a setting");
        if (!tick()) return fail("");
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO run_strings(run_id, idx, text) VALUES(?,?,?)"))
        return fail("cannot prepare the string insert");
      for (size_t i = 0; i < strings.size(); ++i) {
        s.Bind(1, id);
        s.Bind(2, static_cast<int64_t>(i));
        s.Bind(3, strings[i]);
        if (!s.Run()) return fail("cannot insert a string");
        if (!tick()) return fail("");
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO device_classes(run_id, class_idx, label, peak_memory_bytes, "
                          "peak_memory_time_s, max_event_duration_s) VALUES(?,?,?,?,?,?)"))
        return fail("cannot prepare the device class insert");
      for (size_t ci = 0; ci < run.classes.size(); ++ci) {
        const DeviceClass& c = run.classes[ci];
        double max_dur = 0;
        for (const auto& e : c.events) max_dur = std::max(max_dur, e.duration_s);
        s.Bind(1, id);
        s.Bind(2, static_cast<int64_t>(ci));
        s.Bind(3, c.label);
        s.Bind(4, c.peak_memory_bytes);
        s.Bind(5, c.peak_memory_time_s);
        s.Bind(6, max_dur);
        if (!s.Run()) return fail("cannot insert a device class");
        if (!tick()) return fail("");
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO device_map(run_id, device, class_idx) VALUES(?,?,?)"))
        return fail("cannot prepare the device map insert");
      for (size_t d = 0; d < run.device_class.size(); ++d) {
        s.Bind(1, id);
        s.Bind(2, static_cast<int64_t>(d));
        s.Bind(3, static_cast<int64_t>(run.device_class[d]));
        if (!s.Run()) return fail("cannot insert the device map");
        if (!tick()) return fail("");
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO events(run_id, class_idx, seq, stream, start_s, duration_s, "
                          "instruction_id, kind_id, bytes, flops) VALUES(?,?,?,?,?,?,?,?,?,?)"))
        return fail("cannot prepare the event insert");
      size_t k = 0;
      for (size_t ci = 0; ci < run.classes.size(); ++ci) {
        const auto& events = run.classes[ci].events;
        for (size_t i = 0; i < events.size(); ++i, ++k) {
          const TimelineEvent& e = events[i];
          s.Bind(1, id);
          s.Bind(2, static_cast<int64_t>(ci));
          s.Bind(3, static_cast<int64_t>(i));
          s.Bind(4, static_cast<int64_t>(e.stream));
          s.Bind(5, e.start_s);
          s.Bind(6, e.duration_s);
          s.Bind(7, event_ids[k].first);
          s.Bind(8, event_ids[k].second);
          s.Bind(9, e.bytes);
          s.Bind(10, e.flops);
          if (!s.Run()) return fail("cannot insert a timeline event");
          if (!tick()) return fail("");
        }
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO memory_samples(run_id, class_idx, seq, time_s, parameters, "
                          "optimizer_state, activations, gradients, temporaries) "
                          "VALUES(?,?,?,?,?,?,?,?,?)"))
        return fail("cannot prepare the memory sample insert");
      for (size_t ci = 0; ci < run.classes.size(); ++ci) {
        const auto& samples = run.classes[ci].memory;
        for (size_t i = 0; i < samples.size(); ++i) {
          const MemorySample& m = samples[i];
          s.Bind(1, id);
          s.Bind(2, static_cast<int64_t>(ci));
          s.Bind(3, static_cast<int64_t>(i));
          s.Bind(4, m.time_s);
          for (int c = 0; c < kNumMemoryCategories; ++c) s.Bind(5 + c, m.bytes[static_cast<size_t>(c)]);
          if (!s.Run()) return fail("cannot insert a memory sample");
          if (!tick()) return fail("");
        }
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO peak_buffers(run_id, class_idx, seq, name, bytes, category) "
                          "VALUES(?,?,?,?,?,?)"))
        return fail("cannot prepare the peak buffer insert");
      for (size_t ci = 0; ci < run.classes.size(); ++ci) {
        const auto& buffers = run.classes[ci].peak_buffers;
        for (size_t i = 0; i < buffers.size(); ++i) {
          const PeakBuffer& b = buffers[i];
          s.Bind(1, id);
          s.Bind(2, static_cast<int64_t>(ci));
          s.Bind(3, static_cast<int64_t>(i));
          s.Bind(4, b.name);
          s.Bind(5, b.bytes);
          s.Bind(6, static_cast<int64_t>(b.category));
          if (!s.Run()) return fail("cannot insert a peak buffer");
          if (!tick()) return fail("");
        }
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO collectives(run_id, seq, instruction, kind, replica_groups, "
                          "bytes, time_s, regime) VALUES(?,?,?,?,?,?,?,?)"))
        return fail("cannot prepare the collective insert");
      for (size_t i = 0; i < run.collectives.size(); ++i) {
        const CollectiveRecord& r = run.collectives[i];
        s.Bind(1, id);
        s.Bind(2, static_cast<int64_t>(i));
        s.Bind(3, r.instruction);
        s.Bind(4, r.kind);
        s.Bind(5, r.replica_groups);
        s.Bind(6, r.bytes);
        s.Bind(7, r.time_s);
        s.Bind(8, r.regime);
        if (!s.Run()) return fail("cannot insert a collective");
        if (!tick()) return fail("");
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO instruction_origins(run_id, instruction, origin) VALUES(?,?,?)"))
        return fail("cannot prepare the origin insert");
      for (const auto& [instruction, origin] : run.origins) {
        s.Bind(1, id);
        s.Bind(2, instruction);
        s.Bind(3, origin);
        if (!s.Run()) return fail("cannot insert an instruction origin");
        if (!tick()) return fail("");
      }
    }
    {
      Stmt s;
      if (!s.Prepare(db_, "INSERT INTO run_annotations(run_id, seq, instruction, sharding) VALUES(?,?,?,?)"))
        return fail("cannot prepare the annotation insert");
      for (size_t i = 0; i < run.annotations.size(); ++i) {
        s.Bind(1, id);
        s.Bind(2, static_cast<int64_t>(i));
        s.Bind(3, std::string_view(run.annotations[i].first));
        s.Bind(4, std::string_view(run.annotations[i].second));
        if (!s.Run()) return fail("cannot insert an annotation");
        if (!tick()) return fail("");
      }
    }
    return id;
  };

  Result<int64_t> id = Error("");
  try {
    id = body();
  } catch (const std::exception& e) {  // e.g. out of memory: roll back, never leave it open
    id = Error("run store '" + path_ + "': cannot save the run: " + e.what());
  }
  if (!id.ok()) {
    (void)Exec("ROLLBACK", "rollback");
    return id.error();
  }
  if (Status c = Exec("COMMIT", "cannot commit the run"); !c.ok()) {
    (void)Exec("ROLLBACK", "rollback");
    return c.error();
  }
  return id;
}

// ---- Loading -------------------------------------------------------------------------------------

namespace {
constexpr const char* kOverviewColumns =
    "id, created_ms, label, module_name, module_hash, chip_preset, mesh_text, topology_options, "
    "num_devices, num_classes, step_time_s, compute_time_s, communication_time_s, idle_time_s, "
    "exposed_communication_s, mfu, peak_memory_bytes, bytes_communicated, total_flops, device_hbm_bytes, run_key, "
    "pipeline_stages, bubble_time_s, recompute_time_s, bubble_flops, recompute_flops, raw_flops_utilization, placement";

RunOverview ReadOverview(const Stmt& s) {
  RunOverview o;
  o.id = s.Int(0);
  o.created_unix_ms = s.Int(1);
  o.label = s.Text(2);
  o.inputs.module_name = s.Text(3);
  o.inputs.module_hash = s.Text(4);
  o.inputs.chip_preset = s.Text(5);
  o.inputs.mesh_text = s.Text(6);
  o.inputs.topology_options = s.Text(7);
  o.summary.num_devices = s.Int(8);
  o.num_classes = s.Int(9);
  o.summary.step_time_s = s.Real(10);
  o.summary.compute_time_s = s.Real(11);
  o.summary.communication_time_s = s.Real(12);
  o.summary.idle_time_s = s.Real(13);
  o.summary.exposed_communication_s = s.Real(14);
  o.summary.mfu = s.Real(15);
  o.summary.peak_memory_bytes = s.Int(16);
  o.summary.bytes_communicated = s.Int(17);
  o.summary.total_flops = s.Real(18);
  o.summary.device_hbm_bytes = s.Int(19);
  o.key = s.Text(20);
  o.summary.pipeline_stages = s.Int(21);
  o.summary.bubble_time_s = s.Real(22);
  o.summary.recompute_time_s = s.Real(23);
  o.summary.bubble_flops = s.Real(24);
  o.summary.recompute_flops = s.Real(25);
  o.summary.raw_flops_utilization = s.Real(26);
  o.inputs.placement = s.Text(27);
  return o;
}
}  // namespace

Result<RunOverview> RunStore::LoadOverview(int64_t run_id) {
  RunOverview o;
  {
    Stmt s;
    std::string sql = std::string("SELECT ") + kOverviewColumns + " FROM runs WHERE id = ?";
    if (!s.Prepare(db_, sql.c_str())) return DbError("cannot prepare the run query");
    s.Bind(1, run_id);
    int rc = StepQuery(s);
    if (rc == SQLITE_DONE)
      return Error("run store '" + path_ + "': no run with id " + std::to_string(run_id));
    if (rc != SQLITE_ROW) return DbError("cannot read run " + std::to_string(run_id));
    o = ReadOverview(s);
  }
  Stmt s;
  if (!s.Prepare(db_, "SELECT key, value FROM run_settings WHERE run_id = ? ORDER BY seq"))
    return DbError("cannot prepare the settings query");
  s.Bind(1, run_id);
  while (s.Row()) o.inputs.settings.emplace_back(s.Text(0), s.Text(1));
  if (!s.Done()) return DbError("cannot read the settings of run " + std::to_string(run_id));
  return o;
}

Result<std::vector<RunOverview>> RunStore::ListRuns() {
  std::vector<RunOverview> out;
  {
    Stmt s;
    std::string sql = std::string("SELECT ") + kOverviewColumns + " FROM runs ORDER BY id";
    if (!s.Prepare(db_, sql.c_str())) return DbError("cannot prepare the run list query");
    while (s.Row()) out.push_back(ReadOverview(s));
    if (!s.Done()) return DbError("cannot list runs");
  }
  Stmt s;
  if (!s.Prepare(db_, "SELECT run_id, key, value FROM run_settings ORDER BY run_id, seq"))
    return DbError("cannot prepare the settings query");
  std::unordered_map<int64_t, size_t> index;
  for (size_t i = 0; i < out.size(); ++i) index[out[i].id] = i;
  while (s.Row()) {
    auto it = index.find(s.Int(0));
    if (it != index.end()) out[it->second].inputs.settings.emplace_back(s.Text(1), s.Text(2));
  }
  if (!s.Done()) return DbError("cannot read run settings");
  return out;
}

Result<std::vector<std::string>> RunStore::LoadStrings(int64_t run_id) {
  std::vector<std::string> out;
  Stmt s;
  if (!s.Prepare(db_, "SELECT idx, text FROM run_strings WHERE run_id = ? ORDER BY idx"))
    return DbError("cannot prepare the string query");
  s.Bind(1, run_id);
  while (s.Row()) {
    int64_t idx = s.Int(0);
    if (idx != static_cast<int64_t>(out.size()))
      return Error("run store '" + path_ + "': run " + std::to_string(run_id) +
                   " has a damaged string table");
    out.push_back(s.Text(1));
  }
  if (!s.Done()) return DbError("cannot read the strings of run " + std::to_string(run_id));
  return out;
}

namespace {

// Reads events columns (stream, start_s, duration_s, instruction_id, kind_id, bytes, flops)
// starting at column `c0`.
bool ReadEvent(const Stmt& s, int c0, const std::vector<std::string>& strings, TimelineEvent& e) {
  int64_t stream = s.Int(c0);
  int64_t name = s.Int(c0 + 3), kind = s.Int(c0 + 4);
  if (stream < 0 || stream >= kNumStreams || name < 0 || kind < 0 ||
      name >= static_cast<int64_t>(strings.size()) || kind >= static_cast<int64_t>(strings.size()))
    return false;
  e.stream = static_cast<Stream>(stream);
  e.start_s = s.Real(c0 + 1);
  e.duration_s = s.Real(c0 + 2);
  e.instruction = strings[static_cast<size_t>(name)];
  e.kind = strings[static_cast<size_t>(kind)];
  e.bytes = s.Int(c0 + 5);
  e.flops = s.Real(c0 + 6);
  return true;
}

MemorySample ReadSample(const Stmt& s, int c0) {
  MemorySample m;
  m.time_s = s.Real(c0);
  for (int c = 0; c < kNumMemoryCategories; ++c) m.bytes[static_cast<size_t>(c)] = s.Int(c0 + 1 + c);
  return m;
}

bool ReadBuffer(const Stmt& s, int c0, PeakBuffer& b) {
  int64_t cat = s.Int(c0 + 2);
  if (cat < 0 || cat >= kNumMemoryCategories) return false;
  b.name = s.Text(c0);
  b.bytes = s.Int(c0 + 1);
  b.category = static_cast<MemoryCategory>(cat);
  return true;
}

}  // namespace

Result<RunResult> RunStore::LoadRun(int64_t run_id, LoadDetail detail) {
  Result<RunOverview> ov = LoadOverview(run_id);
  if (!ov.ok()) return ov.error();
  RunResult run;
  run.id = ov->id;
  run.created_unix_ms = ov->created_unix_ms;
  run.label = std::move(ov->label);
  run.key = std::move(ov->key);
  run.inputs = std::move(ov->inputs);
  run.summary = ov->summary;
  if (detail == LoadDetail::kSummaryOnly) return run;

  const std::string which = "run " + std::to_string(run_id);
  auto damaged = [&](const char* what) {
    return Error("run store '" + path_ + "': " + which + " is damaged: " + what);
  };
  if (ov->num_classes < 0 || ov->num_classes > (int64_t{1} << 31)) return damaged("bad class count");
  run.classes.resize(static_cast<size_t>(ov->num_classes));
  auto class_at = [&](int64_t ci) -> DeviceClass* {
    if (ci < 0 || ci >= static_cast<int64_t>(run.classes.size())) return nullptr;
    return &run.classes[static_cast<size_t>(ci)];
  };

  Result<std::vector<std::string>> strings = LoadStrings(run_id);
  if (!strings.ok()) return strings.error();

  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT class_idx, label, peak_memory_bytes, peak_memory_time_s "
                        "FROM device_classes WHERE run_id = ? ORDER BY class_idx"))
      return DbError("cannot prepare the device class query");
    s.Bind(1, run_id);
    while (s.Row()) {
      DeviceClass* c = class_at(s.Int(0));
      if (!c) return damaged("device class index out of range");
      c->label = s.Text(1);
      c->peak_memory_bytes = s.Int(2);
      c->peak_memory_time_s = s.Real(3);
    }
    if (!s.Done()) return DbError("cannot read the device classes of " + which);
  }
  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT device, class_idx FROM device_map WHERE run_id = ? ORDER BY device"))
      return DbError("cannot prepare the device map query");
    s.Bind(1, run_id);
    run.device_class.reserve(static_cast<size_t>(std::max<int64_t>(0, run.summary.num_devices)));
    while (s.Row()) {
      if (s.Int(0) != static_cast<int64_t>(run.device_class.size()) || !class_at(s.Int(1)))
        return damaged("bad device map");
      run.device_class.push_back(static_cast<int32_t>(s.Int(1)));
    }
    if (!s.Done()) return DbError("cannot read the device map of " + which);
  }
  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT class_idx, stream, start_s, duration_s, instruction_id, kind_id, bytes, "
                        "flops FROM events WHERE run_id = ? ORDER BY class_idx, seq"))
      return DbError("cannot prepare the event query");
    s.Bind(1, run_id);
    while (s.Row()) {
      DeviceClass* c = class_at(s.Int(0));
      TimelineEvent e;
      if (!c || !ReadEvent(s, 1, *strings, e)) return damaged("bad timeline event");
      c->events.push_back(std::move(e));
    }
    if (!s.Done()) return DbError("cannot read the timeline events of " + which);
  }
  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT class_idx, time_s, parameters, optimizer_state, activations, "
                        "gradients, temporaries FROM memory_samples WHERE run_id = ? "
                        "ORDER BY class_idx, seq"))
      return DbError("cannot prepare the memory query");
    s.Bind(1, run_id);
    while (s.Row()) {
      DeviceClass* c = class_at(s.Int(0));
      if (!c) return damaged("bad memory sample");
      c->memory.push_back(ReadSample(s, 1));
    }
    if (!s.Done()) return DbError("cannot read the memory samples of " + which);
  }
  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT class_idx, name, bytes, category FROM peak_buffers WHERE run_id = ? "
                        "ORDER BY class_idx, seq"))
      return DbError("cannot prepare the peak buffer query");
    s.Bind(1, run_id);
    while (s.Row()) {
      DeviceClass* c = class_at(s.Int(0));
      PeakBuffer b;
      if (!c || !ReadBuffer(s, 1, b)) return damaged("bad peak buffer");
      c->peak_buffers.push_back(std::move(b));
    }
    if (!s.Done()) return DbError("cannot read the peak buffers of " + which);
  }
  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT instruction, kind, replica_groups, bytes, time_s, regime "
                        "FROM collectives WHERE run_id = ? ORDER BY seq"))
      return DbError("cannot prepare the collective query");
    s.Bind(1, run_id);
    while (s.Row()) {
      CollectiveRecord r;
      r.instruction = s.Text(0);
      r.kind = s.Text(1);
      r.replica_groups = s.Text(2);
      r.bytes = s.Int(3);
      r.time_s = s.Real(4);
      r.regime = s.Text(5);
      run.collectives.push_back(std::move(r));
    }
    if (!s.Done()) return DbError("cannot read the collectives of " + which);
  }
  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT instruction, origin FROM instruction_origins WHERE run_id = ?"))
      return DbError("cannot prepare the origin query");
    s.Bind(1, run_id);
    while (s.Row()) run.origins.emplace(s.Text(0), s.Text(1));
    if (!s.Done()) return DbError("cannot read the instruction origins of " + which);
  }
  {
    Stmt s;
    if (!s.Prepare(db_, "SELECT instruction, sharding FROM run_annotations WHERE run_id = ? ORDER BY seq"))
      return DbError("cannot prepare the annotation query");
    s.Bind(1, run_id);
    while (s.Row()) run.annotations.emplace_back(s.Text(0), s.Text(1));
    if (!s.Done()) return DbError("cannot read the annotations of " + which);
  }
  return run;
}

Result<int32_t> RunStore::ClassOfDevice(int64_t run_id, int64_t device) {
  Stmt s;
  if (!s.Prepare(db_, "SELECT class_idx FROM device_map WHERE run_id = ? AND device = ?"))
    return DbError("cannot prepare the device map query");
  s.Bind(1, run_id);
  s.Bind(2, device);
  int rc = StepQuery(s);
  if (rc == SQLITE_ROW) return static_cast<int32_t>(s.Int(0));
  if (rc != SQLITE_DONE) return DbError("cannot read the device map of run " + std::to_string(run_id));
  // No row: tell a missing run from a device out of range.
  Result<RunOverview> ov = LoadOverview(run_id);
  if (!ov.ok()) return ov.error();
  return Error("run store '" + path_ + "': run " + std::to_string(run_id) + " has " +
               std::to_string(ov->summary.num_devices) + " devices with detail; device " +
               std::to_string(device) + " is not one of them");
}

Result<std::vector<TimelineEvent>> RunStore::LoadDeviceTimeline(int64_t run_id, int64_t device,
                                                                std::optional<TimeRange> range) {
  Result<int32_t> cls = ClassOfDevice(run_id, device);
  if (!cls.ok()) return cls.error();
  if (range && !(range->start_s < range->end_s)) return std::vector<TimelineEvent>{};  // empty range
  Result<std::vector<std::string>> strings = LoadStrings(run_id);
  if (!strings.ok()) return strings.error();

  Stmt s;
  if (!range) {
    if (!s.Prepare(db_, "SELECT stream, start_s, duration_s, instruction_id, kind_id, bytes, flops "
                        "FROM events WHERE run_id = ? AND class_idx = ? ORDER BY seq"))
      return DbError("cannot prepare the timeline query");
  } else {
    // The start index bounds the scan: an overlapping event starts no earlier than
    // range.start - (longest event of the class).
    double max_dur = 0;
    {
      Stmt m;
      if (!m.Prepare(db_, "SELECT max_event_duration_s FROM device_classes WHERE run_id = ? AND class_idx = ?"))
        return DbError("cannot prepare the device class query");
      m.Bind(1, run_id);
      m.Bind(2, static_cast<int64_t>(*cls));
      if (m.Row()) max_dur = m.Real(0);
    }
    if (!s.Prepare(db_, "SELECT stream, start_s, duration_s, instruction_id, kind_id, bytes, flops "
                        "FROM events WHERE run_id = ?1 AND class_idx = ?2 AND start_s >= ?3 "
                        "AND start_s < ?5 AND (start_s + duration_s > ?4 OR start_s >= ?4) ORDER BY seq"))
      return DbError("cannot prepare the timeline query");
    s.Bind(3, range->start_s - max_dur);
    s.Bind(4, range->start_s);
    s.Bind(5, range->end_s);
  }
  s.Bind(1, run_id);
  s.Bind(2, static_cast<int64_t>(*cls));
  std::vector<TimelineEvent> out;
  while (s.Row()) {
    TimelineEvent e;
    if (!ReadEvent(s, 0, *strings, e))
      return Error("run store '" + path_ + "': run " + std::to_string(run_id) + " has a damaged timeline");
    e.device = device;
    out.push_back(std::move(e));
  }
  if (!s.Done()) return DbError("cannot read the timeline of device " + std::to_string(device));
  return out;
}

Result<std::vector<MemorySample>> RunStore::LoadMemory(int64_t run_id, int64_t device) {
  Result<int32_t> cls = ClassOfDevice(run_id, device);
  if (!cls.ok()) return cls.error();
  Stmt s;
  if (!s.Prepare(db_, "SELECT time_s, parameters, optimizer_state, activations, gradients, temporaries "
                      "FROM memory_samples WHERE run_id = ? AND class_idx = ? ORDER BY seq"))
    return DbError("cannot prepare the memory query");
  s.Bind(1, run_id);
  s.Bind(2, static_cast<int64_t>(*cls));
  std::vector<MemorySample> out;
  while (s.Row()) out.push_back(ReadSample(s, 0));
  if (!s.Done()) return DbError("cannot read the memory of device " + std::to_string(device));
  return out;
}

Result<std::vector<PeakBuffer>> RunStore::LoadPeakBuffers(int64_t run_id, int64_t device) {
  Result<int32_t> cls = ClassOfDevice(run_id, device);
  if (!cls.ok()) return cls.error();
  Stmt s;
  if (!s.Prepare(db_, "SELECT name, bytes, category FROM peak_buffers WHERE run_id = ? AND class_idx = ? "
                      "ORDER BY seq"))
    return DbError("cannot prepare the peak buffer query");
  s.Bind(1, run_id);
  s.Bind(2, static_cast<int64_t>(*cls));
  std::vector<PeakBuffer> out;
  while (s.Row()) {
    PeakBuffer b;
    if (!ReadBuffer(s, 0, b))
      return Error("run store '" + path_ + "': run " + std::to_string(run_id) + " has a damaged peak buffer");
    out.push_back(std::move(b));
  }
  if (!s.Done()) return DbError("cannot read the peak buffers of device " + std::to_string(device));
  return out;
}

Result<std::vector<int32_t>> RunStore::LoadDeviceClassMap(int64_t run_id) {
  Result<RunOverview> ov = LoadOverview(run_id);
  if (!ov.ok()) return ov.error();
  Stmt s;
  if (!s.Prepare(db_, "SELECT class_idx FROM device_map WHERE run_id = ? ORDER BY device"))
    return DbError("cannot prepare the device map query");
  s.Bind(1, run_id);
  std::vector<int32_t> out;
  while (s.Row()) out.push_back(static_cast<int32_t>(s.Int(0)));
  if (!s.Done()) return DbError("cannot read the device map of run " + std::to_string(run_id));
  return out;
}

Status RunStore::SetLabel(int64_t run_id, std::string_view label) {
  Stmt s;
  if (!s.Prepare(db_, "UPDATE runs SET label = ? WHERE id = ?")) return DbError("cannot prepare the label update");
  s.Bind(1, label);
  s.Bind(2, run_id);
  if (!s.Run()) return DbError("cannot set the label of run " + std::to_string(run_id));
  if (sqlite3_changes(db_) == 0)
    return Error("run store '" + path_ + "': no run with id " + std::to_string(run_id));
  return Status::Ok();
}

Status RunStore::DeleteRun(int64_t run_id) {
  if (Status s = Exec("BEGIN IMMEDIATE", "cannot start the transaction to delete a run"); !s.ok()) return s;
  Status st = DeleteRunRows(run_id);
  if (!st.ok()) {
    (void)Exec("ROLLBACK", "rollback");
    return st;
  }
  if (Status c = Exec("COMMIT", "cannot commit the delete"); !c.ok()) {
    (void)Exec("ROLLBACK", "rollback");
    return c;
  }
  return Status::Ok();
}

Status RunStore::DeleteRunRows(int64_t run_id) {
  Stmt s;
  if (!s.Prepare(db_, "DELETE FROM runs WHERE id = ?")) return DbError("cannot prepare the delete");
  s.Bind(1, run_id);
  if (!s.Run()) return DbError("cannot delete run " + std::to_string(run_id));
  if (sqlite3_changes(db_) == 0) return Error("run store '" + path_ + "': no run with id " + std::to_string(run_id));
  for (const char* table : kRunTables) {
    Stmt d;
    std::string sql = std::string("DELETE FROM ") + table + " WHERE run_id = ?";
    if (!d.Prepare(db_, sql.c_str())) return DbError("cannot prepare the delete");
    d.Bind(1, run_id);
    if (!d.Run()) return DbError("cannot delete run " + std::to_string(run_id));
  }
  return Status::Ok();
}

Result<std::optional<int64_t>> RunStore::FindRunByKey(std::string_view key) {
  Stmt s;
  if (!s.Prepare(db_, "SELECT id FROM runs WHERE run_key = ? ORDER BY id LIMIT 1")) return DbError("cannot prepare the key query");
  s.Bind(1, key);
  const int rc = StepQuery(s);
  if (rc == SQLITE_ROW) return std::optional<int64_t>(s.Int(0));
  if (rc != SQLITE_DONE) return DbError("cannot look a run key up");
  return std::optional<int64_t>();
}

Result<MergeReport> RunStore::MergeFrom(const std::string& other_path, const std::function<bool()>& keep_going) {
  std::error_code ec;
  if (std::filesystem::equivalent(other_path, path_, ec))
    return Error("run store '" + path_ + "': cannot merge a store into itself");
  Result<RunStore> other = Open(other_path, OpenMode::kOpenExisting);
  if (!other.ok()) return other.error();
  Result<std::vector<RunOverview>> runs = other->ListRuns();
  if (!runs.ok()) return runs.error();
  MergeReport report;
  for (const RunOverview& ov : *runs) {
    if (keep_going && !keep_going()) return Error("run store '" + path_ + "': merging '" + other_path + "' was cancelled");
    Result<RunResult> run = other->LoadRun(ov.id, LoadDetail::kFull);
    if (!run.ok()) return run.error();
    if (run->key.empty()) run->key = RunContentKey(*run);
    Result<std::optional<int64_t>> existing = FindRunByKey(run->key);
    if (!existing.ok()) return existing.error();
    Result<int64_t> id = SaveRun(*run);
    if (!id.ok()) return Error("merging run " + std::to_string(ov.id) + " of '" + other_path + "': " + id.error().message);
    ++report.runs_read;
    if (existing->has_value()) ++report.replaced;
    else ++report.added;
  }
  return report;
}

RunComparison CompareRunOverviews(const RunOverview& a, const RunOverview& b) {
  RunComparison c;
  c.a = a;
  c.b = b;
  const RunSummary& x = a.summary;
  const RunSummary& y = b.summary;
  c.step_time = {"step time", "s", x.step_time_s, y.step_time_s};
  c.peak_memory = {"peak memory per device", "bytes", static_cast<double>(x.peak_memory_bytes),
                   static_cast<double>(y.peak_memory_bytes)};
  c.bytes_communicated = {"bytes communicated", "bytes", static_cast<double>(x.bytes_communicated),
                          static_cast<double>(y.bytes_communicated)};
  c.figures = {c.step_time,
               c.peak_memory,
               c.bytes_communicated,
               {"compute time", "s", x.compute_time_s, y.compute_time_s},
               {"communication time", "s", x.communication_time_s, y.communication_time_s},
               {"idle time", "s", x.idle_time_s, y.idle_time_s},
               {"exposed communication", "s", x.exposed_communication_s, y.exposed_communication_s},
               {"MFU", "fraction", x.mfu, y.mfu}};
  return c;
}

Result<RunComparison> RunStore::CompareRuns(int64_t run_a, int64_t run_b) {
  Result<RunOverview> a = LoadOverview(run_a);
  if (!a.ok()) return a.error();
  Result<RunOverview> b = LoadOverview(run_b);
  if (!b.ok()) return b.error();
  return CompareRunOverviews(*a, *b);
}

}  // namespace shardscope::sim
