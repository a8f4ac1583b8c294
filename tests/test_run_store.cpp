// Tests of the run data model (simulator/run_result.h) and the SQLite run store
// (simulator/run_store.h): round trips, device classes, time-range queries, schema versioning,
// errors, cancellation, WAL snapshot reads, and a SIGKILL in the middle of a save.

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QTemporaryDir>
#include <QtTest>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "simulator/run_result.h"
#include "simulator/run_store.h"

using namespace shardscope;
using namespace shardscope::sim;

namespace {

// One device class with `n` events alternating compute/communication; distinct per `seed`.
DeviceClass MakeClass(int seed, int n, int samples) {
  DeviceClass c;
  c.label = "class seed " + std::to_string(seed);
  double t = 0;
  for (int i = 0; i < n; ++i) {
    TimelineEvent e;
    e.stream = (i % 3 == 2) ? Stream::kCommunication : Stream::kCompute;
    e.start_s = t;
    e.duration_s = 1e-6 * (1 + (i + seed) % 7);
    e.kind = e.stream == Stream::kCommunication ? "all-reduce" : (i % 2 ? "dot" : "fusion");
    e.instruction = e.kind + "." + std::to_string(i) + "." + std::to_string(seed);
    e.bytes = 1024 * (i + 1) + seed;
    e.flops = e.stream == Stream::kCompute ? 1e9 * (i + 1) + seed : 0;
    t += e.duration_s * 0.75;  // overlapping spans, like compute/communication overlap
    c.events.push_back(e);
  }
  for (int i = 0; i < samples; ++i) {
    MemorySample m;
    m.time_s = i * 1e-5;
    for (int k = 0; k < kNumMemoryCategories; ++k)
      m.bytes[static_cast<size_t>(k)] = (int64_t{1} << 30) * (k + 1) + i * 1000 + seed;
    c.memory.push_back(m);
  }
  c.peak_buffers = {{"param.w1", int64_t{3} << 30, MemoryCategory::kParameters},
                    {"adam.m", int64_t{6} << 30, MemoryCategory::kOptimizerState},
                    {"act \"quoted\" é", 12345 + seed, MemoryCategory::kActivations}};
  c.peak_memory_bytes = (int64_t{20} << 30) + seed;
  c.peak_memory_time_s = 3.5e-4;
  return c;
}

// A run of `devices` devices in `classes` classes (device d -> class d % classes).
RunResult MakeRun(int devices, int classes, int events, int samples, int seed) {
  RunResult r;
  r.label = "run " + std::to_string(seed) + ", with comma";
  r.created_unix_ms = 1714564800123 + seed;
  r.inputs.module_name = "mlp_" + std::to_string(seed);
  r.inputs.module_hash = "deadbeef" + std::to_string(seed);
  r.inputs.chip_preset = "TPU v4";
  r.inputs.mesh_text = "X=" + std::to_string(devices);
  r.inputs.topology_options = "torus wraparound=x";
  r.inputs.settings = {{"microbatches", "4"}, {"overlap", "true"}, {"zeta", "é ü"}};
  for (int c = 0; c < classes; ++c) r.classes.push_back(MakeClass(seed * 10 + c, events, samples));
  for (int d = 0; d < devices; ++d) r.device_class.push_back(d % classes);
  r.summary.num_devices = devices;
  r.summary.step_time_s = 0.125 + seed * 1e-3;
  r.summary.compute_time_s = 0.1;
  r.summary.communication_time_s = 0.04;
  r.summary.idle_time_s = 0.01;
  r.summary.exposed_communication_s = 0.015;
  r.summary.mfu = 0.4375;
  r.summary.peak_memory_bytes = (int64_t{20} << 30) + seed;
  r.summary.bytes_communicated = (int64_t{5} << 40) + seed;
  r.summary.total_flops = 3.25e15;
  r.summary.pipeline_stages = 4;
  r.summary.bubble_time_s = 0.015625;
  r.summary.recompute_time_s = 0.0234375;
  r.summary.bubble_flops = 4.0e14;
  r.summary.recompute_flops = 6.5e14;
  r.summary.raw_flops_utilization = 0.6875;
  r.collectives = {{"all-reduce.1", "all-reduce", "{{0,1},{2,3}}", 1 << 20, 2.5e-5, "bandwidth-bound"},
                   {"all-gather.2", "all-gather", "[2,2]<=[4]", 4096, 1e-6, "latency-bound"}};
  r.origins = {{"all-reduce.1", "dot.3"}, {"all-gather.2", "w"}, {"body.spmd/add.4", "body/add"}};
  return r;
}

std::string Tmp(const QTemporaryDir& dir, const char* name) {
  return (std::filesystem::path(dir.path().toStdString()) / name).string();
}

// Runs a single-value query on a raw connection (independent of RunStore).
int64_t RawInt(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t v = std::numeric_limits<int64_t>::min();
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return v;
}

std::string RawText(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string v = "<error>";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      v = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return v;
}

bool RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  bool ok = sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
            sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_close(db);
  return ok;
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// What turns a current store back into exactly what version 5 wrote (no placement).
#define SHARDSCOPE_DOWNGRADE_TO_5 "ALTER TABLE runs DROP COLUMN placement; "
constexpr const char* kDowngradeTo5 = SHARDSCOPE_DOWNGRADE_TO_5;
// And into what version 4 wrote (no pipeline bubbles, recompute or raw utilisation either).
#define SHARDSCOPE_DOWNGRADE_TO_4                                                                           \
  SHARDSCOPE_DOWNGRADE_TO_5                                                                                 \
  "ALTER TABLE runs DROP COLUMN pipeline_stages; ALTER TABLE runs DROP COLUMN bubble_time_s; "               \
  "ALTER TABLE runs DROP COLUMN recompute_time_s; ALTER TABLE runs DROP COLUMN bubble_flops; "               \
  "ALTER TABLE runs DROP COLUMN recompute_flops; ALTER TABLE runs DROP COLUMN raw_flops_utilization; "
constexpr const char* kDowngradeTo4 = SHARDSCOPE_DOWNGRADE_TO_4;
// And into exactly what version 2 wrote (no HBM, no run keys, no annotations either).
constexpr const char* kDowngradeTo2 =
    SHARDSCOPE_DOWNGRADE_TO_4
    "DROP TABLE run_annotations; DROP INDEX runs_by_key; ALTER TABLE runs DROP COLUMN run_key; "
    "ALTER TABLE runs DROP COLUMN device_hbm_bytes; ";
#undef SHARDSCOPE_DOWNGRADE_TO_4
#undef SHARDSCOPE_DOWNGRADE_TO_5

// The columns of a table, in order.
std::string Columns(const std::string& path, const std::string& table) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* s = nullptr;
    const std::string sql = "SELECT name, type FROM pragma_table_info('" + table + "')";
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK)
      while (sqlite3_step(s) == SQLITE_ROW)
        out += std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, 0))) + " " +
               reinterpret_cast<const char*>(sqlite3_column_text(s, 1)) + ";";
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return out;
}

// Reference for the range query: overlaps [a, b), or zero-length starting inside.
std::vector<TimelineEvent> BruteRange(const RunResult& run, int64_t device, double a, double b) {
  std::vector<TimelineEvent> out;
  if (!(a < b)) return out;  // an empty range
  for (const TimelineEvent& e : run.DeviceTimeline(device))
    if (e.start_s < b && (e.end_s() > a || e.start_s >= a)) out.push_back(e);
  return out;
}

}  // namespace

class TestRunStore : public QObject {
  Q_OBJECT

 private slots:
  void dataModelDeviceTimeline();
  void dataModelValidate();
  void deviceClassBuilderGroupsIdenticalDevices();
  void deviceClassBuilderErrors();
  void createsVersionedWalSchema();
  void roundTripFullRun();
  void stampsCreationTime();
  void summaryOnlyLoad();
  void listRunsInOrder();
  void deviceTimelineAndRanges();
  void memoryAndPeakBuffersPerDevice();
  void deleteRun();
  void setLabel();
  void compareRuns();
  void errorsForMissingThings();
  void refusesInvalidRun();
  void schemaVersionChecks();
  void migratesVersion1Store();
  void migratesVersion2Store();
  void migratesVersion4Store();
  void migratesVersion5Store();
  void keyedRunReplacesStoredRun();
  void mergeIsIdempotent();
  void cancelRollsBack();
  void readerSeesSnapshotDuringSave();
  void killDuringSaveLeavesEarlierRunsIntact_data();
  void killDuringSaveLeavesEarlierRunsIntact();
  void defaultStorePath();
};

void TestRunStore::dataModelDeviceTimeline() {
  RunResult r = MakeRun(5, 2, 4, 2, 1);
  QCOMPARE(r.num_devices(), int64_t{5});
  QVERIFY(r.has_detail());
  // Device 3 is in class 1: its timeline is class 1's events with device = 3.
  std::vector<TimelineEvent> tl = r.DeviceTimeline(3);
  QCOMPARE(tl.size(), size_t{4});
  for (size_t i = 0; i < tl.size(); ++i) {
    QCOMPARE(tl[i].device, int64_t{3});
    TimelineEvent e = tl[i];
    e.device = -1;
    QVERIFY(e == r.classes[1].events[i]);
  }
  QCOMPARE(tl[0].instruction, std::string("fusion.0.11"));
  QVERIFY(r.DeviceTimeline(5).empty());
  QVERIFY(r.DeviceTimeline(-1).empty());
  QVERIFY(r.ClassOf(4) == &r.classes[0]);
  QCOMPARE(r.DevicesOfClass(1), (std::vector<int64_t>{1, 3}));
  QCOMPARE(r.RepresentativeDevices(), (std::vector<int64_t>{0, 1}));
  MemorySample m = r.classes[0].memory[1];
  QCOMPARE(m.total(), (int64_t{1} << 30) * 15 + 5 * (1000 + 10));
  QCOMPARE(m.at(MemoryCategory::kGradients), (int64_t{1} << 30) * 4 + 1000 + 10);
  QCOMPARE(std::string(MemoryCategoryName(MemoryCategory::kOptimizerState)), std::string("optimizer_state"));
  QCOMPARE(MemoryCategoryFromName("gradients").value(), MemoryCategory::kGradients);
  QVERIFY(!MemoryCategoryFromName("weights").has_value());
  QCOMPARE(StreamFromName("communication").value(), Stream::kCommunication);
}

void TestRunStore::dataModelValidate() {
  RunResult ok = MakeRun(4, 2, 3, 2, 1);
  QVERIFY(ok.Validate().ok());

  RunResult bad = ok;
  bad.device_class[2] = 7;
  QVERIFY(!bad.Validate().ok());
  QVERIFY(Contains(bad.Validate().error().message, "device 2 maps to class 7"));

  bad = ok;
  bad.summary.num_devices = 8;
  QVERIFY(Contains(bad.Validate().error().message, "8 devices"));

  bad = ok;
  bad.classes[1].events[2].duration_s = std::nan("");
  QVERIFY(Contains(bad.Validate().error().message, "device class 1, event 2"));

  bad = ok;
  bad.classes[0].memory[0].bytes[3] = -1;
  QVERIFY(!bad.Validate().ok());

  bad = ok;
  bad.summary.mfu = std::numeric_limits<double>::infinity();
  QVERIFY(Contains(bad.Validate().error().message, "MFU"));

  // Summary-only results (no detail) are valid.
  RunResult summary_only;
  summary_only.summary.num_devices = 2048;
  QVERIFY(summary_only.Validate().ok());
}

void TestRunStore::deviceClassBuilderGroupsIdenticalDevices() {
  // 8 devices; even devices share detail A, odd devices share detail B, device 5 differs from B in
  // one event byte count: 3 classes.
  DeviceClass a = MakeClass(1, 50, 10), b = MakeClass(2, 50, 10);
  DeviceClass b_prime = b;
  b_prime.events[17].bytes += 1;
  DeviceClassBuilder builder;
  std::vector<int32_t> got;
  for (int64_t d : {7, 6, 5, 4, 3, 2, 1, 0}) {  // any order
    DeviceClass detail = (d % 2 == 0) ? a : (d == 5 ? b_prime : b);
    for (auto& e : detail.events) e.device = d;  // device ids in events are ignored
    Result<int32_t> c = builder.Add(d, std::move(detail));
    QVERIFY(c.ok());
    got.push_back(*c);
  }
  QCOMPARE(builder.num_classes(), int64_t{3});
  RunResult run;
  QVERIFY(builder.Finish(run).ok());
  QCOMPARE(run.summary.num_devices, int64_t{8});
  QCOMPARE(run.classes.size(), size_t{3});
  // Device 7 was added first (class 0 = B), 6 next (class 1 = A), 5 (class 2 = B').
  QCOMPARE(run.device_class, (std::vector<int32_t>{1, 0, 1, 0, 1, 2, 1, 0}));
  QVERIFY(run.classes[0] == b);
  QVERIFY(run.classes[1] == a);
  QVERIFY(run.classes[2] == b_prime);
  QCOMPARE(run.classes[0].events[0].device, int64_t{-1});
  QCOMPARE(run.DeviceTimeline(5)[17].bytes, b.events[17].bytes + 1);
  QVERIFY(run.Validate().ok());
  QCOMPARE(HashDeviceDetail(a), HashDeviceDetail(MakeClass(1, 50, 10)));
  QVERIFY(HashDeviceDetail(b) != HashDeviceDetail(b_prime));

  DeviceClassBuilder by_symmetry;
  QCOMPARE(by_symmetry.Add(0, a).value(), 0);
  QVERIFY(by_symmetry.AddToClass(1, 0).ok());
  QVERIFY(!by_symmetry.AddToClass(2, 1).ok());
  RunResult r2;
  QVERIFY(by_symmetry.Finish(r2).ok());
  QCOMPARE(r2.device_class, (std::vector<int32_t>{0, 0}));
}

void TestRunStore::deviceClassBuilderErrors() {
  DeviceClassBuilder builder;
  QVERIFY(builder.Add(0, MakeClass(1, 3, 1)).ok());
  Result<int32_t> twice = builder.Add(0, MakeClass(1, 3, 1));
  QVERIFY(!twice.ok());
  QVERIFY(Contains(twice.error().message, "device 0 was added twice"));
  QVERIFY(!builder.Add(-2, MakeClass(1, 3, 1)).ok());
  QVERIFY(builder.Add(2, MakeClass(1, 3, 1)).ok());
  RunResult run;
  Status s = builder.Finish(run);
  QVERIFY(!s.ok());
  QVERIFY(Contains(s.error().message, "device 1 was never added"));
}

void TestRunStore::createsVersionedWalSchema() {
  QTemporaryDir dir;
  const std::string path = Tmp(dir, "runs.sqlite");
  {
    Result<RunStore> store = RunStore::Open(path);
    QVERIFY2(store.ok(), store.ok() ? "" : store.error().message.c_str());
    QCOMPARE(store->path(), path);
    QVERIFY(store->ListRuns().ok());
    QVERIFY(store->ListRuns()->empty());
    QCOMPARE(RawText(path, "PRAGMA journal_mode"), std::string("wal"));
  }
  QCOMPARE(RawInt(path, "PRAGMA user_version"), int64_t{RunStore::kSchemaVersion});
  QCOMPARE(RawText(path, "SELECT value FROM schema WHERE key = 'version'"), std::to_string(RunStore::kSchemaVersion));
  QCOMPARE(RawText(path, "SELECT value FROM schema WHERE key = 'application'"),
           std::string("ShardScope run store"));
  // Reopening an existing store keeps it.
  Result<RunStore> again = RunStore::Open(path, RunStore::OpenMode::kOpenExisting);
  QVERIFY(again.ok());
}

void TestRunStore::roundTripFullRun() {
  QTemporaryDir dir;
  const std::string path = Tmp(dir, "runs.sqlite");
  RunResult run = MakeRun(6, 3, 40, 12, 7);
  run.classes[2].events[5].instruction = "weird \"name\", with\nnewline\tand é";
  run.classes[1].events[0].duration_s = 0;  // zero-length event
  int64_t id = 0;
  {
    Result<RunStore> store = RunStore::Open(path);
    QVERIFY(store.ok());
    Result<int64_t> saved = store->SaveRun(run);
    QVERIFY2(saved.ok(), saved.ok() ? "" : saved.error().message.c_str());
    id = *saved;
    QVERIFY(id > 0);
  }
  Result<RunStore> store = RunStore::Open(path);
  QVERIFY(store.ok());
  Result<RunResult> loaded = store->LoadRun(id);
  QVERIFY2(loaded.ok(), loaded.ok() ? "" : loaded.error().message.c_str());
  RunResult expected = run;
  expected.id = id;
  QCOMPARE(loaded->id, id);
  QCOMPARE(loaded->created_unix_ms, int64_t{1714564800123 + 7});
  QVERIFY(loaded->inputs == expected.inputs);
  QVERIFY(loaded->summary == expected.summary);
  QCOMPARE(loaded->device_class, expected.device_class);
  QCOMPARE(loaded->classes.size(), size_t{3});
  for (size_t c = 0; c < 3; ++c) {
    QCOMPARE(loaded->classes[c].events.size(), size_t{40});
    QVERIFY(loaded->classes[c] == expected.classes[c]);
  }
  QVERIFY(loaded->collectives == expected.collectives);
  QCOMPARE(loaded->origins.at("body.spmd/add.4"), std::string("body/add"));
  QCOMPARE(loaded->origins.size(), size_t{3});
  QVERIFY(*loaded == expected);  // every field, bit-exact doubles
  QCOMPARE(loaded->classes[2].events[5].instruction, std::string("weird \"name\", with\nnewline\tand é"));
  QCOMPARE(loaded->summary.bytes_communicated, (int64_t{5} << 40) + 7);
  QCOMPARE(loaded->classes[0].memory[3].at(MemoryCategory::kTemporaries), (int64_t{5} << 30) + 3000 + 70);

  // Detail is stored once per class, not per device: 3 classes x 40 events rows for 6 devices.
  QCOMPARE(RawInt(path, "SELECT count(*) FROM events WHERE run_id = " + std::to_string(id)), int64_t{120});
  QCOMPARE(RawInt(path, "SELECT count(*) FROM device_map WHERE run_id = " + std::to_string(id)), int64_t{6});
}

void TestRunStore::stampsCreationTime() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  RunResult run = MakeRun(2, 1, 2, 1, 1);
  run.created_unix_ms = 0;
  using namespace std::chrono;
  const int64_t before = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  Result<int64_t> id = store->SaveRun(run);
  const int64_t after = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  QVERIFY(id.ok());
  Result<RunResult> loaded = store->LoadRun(*id, LoadDetail::kSummaryOnly);
  QVERIFY(loaded.ok());
  QVERIFY(loaded->created_unix_ms >= before && loaded->created_unix_ms <= after);
}

void TestRunStore::summaryOnlyLoad() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  RunResult run = MakeRun(8, 2, 30, 5, 3);
  Result<int64_t> id = store->SaveRun(run);
  QVERIFY(id.ok());
  Result<RunResult> s = store->LoadRun(*id, LoadDetail::kSummaryOnly);
  QVERIFY(s.ok());
  QVERIFY(!s->has_detail());
  QVERIFY(s->classes.empty());
  QVERIFY(s->collectives.empty());
  QCOMPARE(s->label, run.label);
  QVERIFY(s->inputs == run.inputs);
  QVERIFY(s->summary == run.summary);
  QCOMPARE(s->summary.num_devices, int64_t{8});

  // A summary-only result can itself be stored (e.g. an analytic estimate).
  Result<int64_t> id2 = store->SaveRun(*s);
  QVERIFY(id2.ok());
  Result<RunResult> back = store->LoadRun(*id2);
  QVERIFY(back.ok());
  QVERIFY(back->summary == run.summary);
  QVERIFY(!back->has_detail());
}

void TestRunStore::listRunsInOrder() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  std::vector<int64_t> ids;
  for (int i = 1; i <= 4; ++i) {
    RunResult r = MakeRun(2 * i, i, 5, 2, i);
    r.label = "label " + std::to_string(i);
    Result<int64_t> id = store->SaveRun(r);
    QVERIFY(id.ok());
    ids.push_back(*id);
  }
  Result<std::vector<RunOverview>> list = store->ListRuns();
  QVERIFY(list.ok());
  QCOMPARE(list->size(), size_t{4});
  for (int i = 1; i <= 4; ++i) {
    const RunOverview& o = (*list)[static_cast<size_t>(i - 1)];
    QCOMPARE(o.id, ids[static_cast<size_t>(i - 1)]);
    QCOMPARE(o.label, "label " + std::to_string(i));
    QCOMPARE(o.summary.num_devices, int64_t{2 * i});
    QCOMPARE(o.num_classes, int64_t{i});
    QCOMPARE(o.summary.step_time_s, 0.125 + i * 1e-3);
    QCOMPARE(o.inputs.module_name, "mlp_" + std::to_string(i));
    QCOMPARE(o.inputs.settings.size(), size_t{3});
    QCOMPARE(o.inputs.settings[2].second, std::string("é ü"));
    QCOMPARE(o.created_unix_ms, int64_t{1714564800123 + i});
  }
  QVERIFY(ids[0] < ids[1] && ids[1] < ids[2] && ids[2] < ids[3]);
}

void TestRunStore::deviceTimelineAndRanges() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  RunResult run = MakeRun(16, 4, 200, 3, 2);
  run.classes[3].events[10].duration_s = 0;  // zero-length event inside class 3
  Result<int64_t> id = store->SaveRun(run);
  QVERIFY(id.ok());

  for (int64_t d : {0, 5, 11, 15}) {
    Result<std::vector<TimelineEvent>> tl = store->LoadDeviceTimeline(*id, d);
    QVERIFY(tl.ok());
    QCOMPARE(tl->size(), size_t{200});
    QVERIFY(*tl == run.DeviceTimeline(d));
    QCOMPARE((*tl)[7].device, d);
  }

  // Ranges: compare with brute force, including exact event boundaries.
  const std::vector<TimelineEvent> all = run.DeviceTimeline(7);  // class 3
  const double e10 = all[10].start_s;
  std::vector<std::pair<double, double>> ranges = {
      {0, 1},                            // everything
      {all[50].start_s, all[60].start_s},  // starts exactly on event boundaries
      {all[50].end_s(), all[51].end_s()},  // begins exactly where event 50 ends (excluded)
      {e10, e10},                        // empty range
      {e10, e10 + 1e-9},                 // catches the zero-length event at its start
      {all[199].end_s(), 1},             // after the end: nothing
      {all[120].start_s + 1e-7, all[120].start_s + 2e-7},
  };
  for (auto [a, b] : ranges) {
    Result<std::vector<TimelineEvent>> got = store->LoadDeviceTimeline(*id, 7, TimeRange{a, b});
    QVERIFY(got.ok());
    std::vector<TimelineEvent> want = BruteRange(run, 7, a, b);
    QCOMPARE(got->size(), want.size());
    QVERIFY(*got == want);
  }
  QCOMPARE(store->LoadDeviceTimeline(*id, 7, TimeRange{0, 1})->size(), size_t{200});
  QCOMPARE(store->LoadDeviceTimeline(*id, 7, TimeRange{e10, e10})->size(), size_t{0});
  QCOMPARE(store->LoadDeviceTimeline(*id, 7, TimeRange{all[199].end_s(), 1})->size(), size_t{0});
  // The zero-length event 10 is returned for a range starting at its time.
  {
    auto got = store->LoadDeviceTimeline(*id, 7, TimeRange{e10, e10 + 1e-9}).value();
    bool has10 = false;
    for (const auto& e : got) has10 |= e.instruction == all[10].instruction;
    QVERIFY(has10);
  }
  // A window in the middle returns fewer events than the whole timeline.
  auto mid = store->LoadDeviceTimeline(*id, 7, TimeRange{all[50].start_s, all[60].start_s}).value();
  QVERIFY(mid.size() >= 10 && mid.size() < 20);
}

void TestRunStore::memoryAndPeakBuffersPerDevice() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  RunResult run = MakeRun(6, 3, 4, 9, 4);
  Result<int64_t> id = store->SaveRun(run);
  QVERIFY(id.ok());
  for (int64_t d = 0; d < 6; ++d) {
    Result<std::vector<MemorySample>> mem = store->LoadMemory(*id, d);
    QVERIFY(mem.ok());
    QCOMPARE(mem->size(), size_t{9});
    QVERIFY(*mem == run.ClassOf(d)->memory);
    Result<std::vector<PeakBuffer>> bufs = store->LoadPeakBuffers(*id, d);
    QVERIFY(bufs.ok());
    QVERIFY(*bufs == run.ClassOf(d)->peak_buffers);
  }
  // Device 4 -> class 1 (seed 41): activations at sample 2 = 3 GiB + 2000 + 41.
  QCOMPARE(store->LoadMemory(*id, 4)->at(2).at(MemoryCategory::kActivations), (int64_t{3} << 30) + 2041);
  QCOMPARE(store->LoadPeakBuffers(*id, 4)->at(1).category, MemoryCategory::kOptimizerState);
  QCOMPARE(store->LoadDeviceClassMap(*id).value(), (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
}

void TestRunStore::deleteRun() {
  QTemporaryDir dir;
  const std::string path = Tmp(dir, "runs.sqlite");
  std::vector<int64_t> ids;
  {
    Result<RunStore> store = RunStore::Open(path);
    QVERIFY(store.ok());
    for (int i = 0; i < 3; ++i) ids.push_back(store->SaveRun(MakeRun(4, 2, 20, 4, i)).value());
    QVERIFY(store->DeleteRun(ids[1]).ok());
    Result<RunResult> gone = store->LoadRun(ids[1]);
    QVERIFY(!gone.ok());
    QVERIFY(Contains(gone.error().message, "no run with id"));
    Status again = store->DeleteRun(ids[1]);
    QVERIFY(!again.ok());
    QVERIFY(Contains(again.error().message, "no run with id " + std::to_string(ids[1])));
    QCOMPARE(store->ListRuns()->size(), size_t{2});
    QVERIFY(store->LoadRun(ids[0]).value() == [&] { RunResult r = MakeRun(4, 2, 20, 4, 0); r.id = ids[0]; return r; }());
    QVERIFY(store->LoadRun(ids[2]).value() == [&] { RunResult r = MakeRun(4, 2, 20, 4, 2); r.id = ids[2]; return r; }());
    // Ids are never reused.
    int64_t next = store->SaveRun(MakeRun(2, 1, 2, 1, 9)).value();
    QVERIFY(next > ids[2]);
  }
  // Every table is free of the deleted run's rows.
  for (const char* table : {"run_settings", "run_strings", "device_classes", "device_map", "events",
                            "memory_samples", "peak_buffers", "collectives", "instruction_origins"}) {
    QCOMPARE(RawInt(path, std::string("SELECT count(*) FROM ") + table + " WHERE run_id = " + std::to_string(ids[1])),
             int64_t{0});
    QVERIFY(RawInt(path, std::string("SELECT count(*) FROM ") + table + " WHERE run_id = " + std::to_string(ids[0])) > 0);
  }
}

void TestRunStore::setLabel() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  int64_t id = store->SaveRun(MakeRun(2, 1, 2, 1, 1)).value();
  QVERIFY(store->SetLabel(id, "baseline, 2D").ok());
  QCOMPARE(store->ListRuns()->at(0).label, std::string("baseline, 2D"));
  QVERIFY(!store->SetLabel(id + 100, "x").ok());
}

void TestRunStore::compareRuns() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  RunResult a = MakeRun(4, 1, 3, 1, 1), b = MakeRun(4, 1, 3, 1, 2);
  a.summary.step_time_s = 0.2;
  b.summary.step_time_s = 0.15;
  a.summary.peak_memory_bytes = int64_t{16} << 30;
  b.summary.peak_memory_bytes = int64_t{8} << 30;
  a.summary.bytes_communicated = 1000;
  b.summary.bytes_communicated = 4000;
  a.summary.mfu = 0.3;
  b.summary.mfu = 0.4;
  int64_t ia = store->SaveRun(a).value(), ib = store->SaveRun(b).value();
  Result<RunComparison> c = store->CompareRuns(ia, ib);
  QVERIFY(c.ok());
  QCOMPARE(c->a.id, ia);
  QCOMPARE(c->b.id, ib);
  QCOMPARE(c->step_time.a, 0.2);
  QCOMPARE(c->step_time.b, 0.15);
  QVERIFY(std::abs(c->step_time.difference() - (-0.05)) < 1e-15);
  QCOMPARE(c->step_time.ratio(), 0.75);
  QCOMPARE(c->peak_memory.a, 17179869184.0);
  QCOMPARE(c->peak_memory.b, 8589934592.0);
  QCOMPARE(c->peak_memory.ratio(), 0.5);
  QCOMPARE(c->bytes_communicated.difference(), 3000.0);
  QCOMPARE(c->bytes_communicated.ratio(), 4.0);
  QCOMPARE(c->figures.size(), size_t{8});
  QCOMPARE(c->figures[0].name, std::string("step time"));
  QCOMPARE(c->figures[7].name, std::string("MFU"));
  QCOMPARE(c->figures[7].b, 0.4);
  Result<RunComparison> missing = store->CompareRuns(ia, 999);
  QVERIFY(!missing.ok());
  QVERIFY(Contains(missing.error().message, "no run with id 999"));
}

void TestRunStore::errorsForMissingThings() {
  QTemporaryDir dir;
  const std::string path = Tmp(dir, "runs.sqlite");
  Result<RunStore> absent = RunStore::Open(Tmp(dir, "nope.sqlite"), RunStore::OpenMode::kOpenExisting);
  QVERIFY(!absent.ok());
  QVERIFY(Contains(absent.error().message, "no such file"));
  QVERIFY(!std::filesystem::exists(Tmp(dir, "nope.sqlite")));

  Result<RunStore> in_missing_dir = RunStore::Open(Tmp(dir, "no/such/dir/runs.sqlite"));
  QVERIFY(!in_missing_dir.ok());
  QVERIFY(Contains(in_missing_dir.error().message, "cannot open"));

  Result<RunStore> store = RunStore::Open(path);
  QVERIFY(store.ok());
  int64_t id = store->SaveRun(MakeRun(4, 2, 5, 2, 1)).value();
  auto tl = store->LoadDeviceTimeline(id, 4);
  QVERIFY(!tl.ok());
  QVERIFY2(Contains(tl.error().message, "run " + std::to_string(id) + " has 4 devices") &&
               Contains(tl.error().message, "device 4 is not one of them"),
           tl.error().message.c_str());
  auto tl2 = store->LoadDeviceTimeline(id + 5, 0);
  QVERIFY(!tl2.ok());
  QVERIFY(Contains(tl2.error().message, "no run with id " + std::to_string(id + 5)));
  QVERIFY(!store->LoadMemory(id, -1).ok());
  QVERIFY(!store->LoadPeakBuffers(id + 5, 0).ok());
  QVERIFY(!store->LoadDeviceClassMap(id + 5).ok());
  QVERIFY(Contains(store->LoadRun(id + 5).error().message, path));  // messages name the file
}

void TestRunStore::refusesInvalidRun() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  RunResult bad = MakeRun(4, 2, 5, 2, 1);
  bad.classes[0].events[1].start_s = -1;
  Result<int64_t> id = store->SaveRun(bad);
  QVERIFY(!id.ok());
  QVERIFY2(Contains(id.error().message, "invalid run") && Contains(id.error().message, "event 1"),
           id.error().message.c_str());
  QVERIFY(store->ListRuns()->empty());
}

void TestRunStore::schemaVersionChecks() {
  QTemporaryDir dir;
  // A file that is not a database at all.
  const std::string junk = Tmp(dir, "junk.sqlite");
  {
    std::ofstream f(junk, std::ios::binary);
    f << std::string(4096, 'x');
  }
  Result<RunStore> j = RunStore::Open(junk);
  QVERIFY(!j.ok());
  QVERIFY2(Contains(j.error().message, "not a database"), j.error().message.c_str());

  // A SQLite database of something else.
  const std::string foreign = Tmp(dir, "foreign.sqlite");
  QVERIFY(RawExec(foreign, "CREATE TABLE contacts(name TEXT)"));
  Result<RunStore> f = RunStore::Open(foreign);
  QVERIFY(!f.ok());
  QVERIFY2(Contains(f.error().message, "not a ShardScope run store"), f.error().message.c_str());
  QCOMPARE(RawText(foreign, "PRAGMA journal_mode"), std::string("delete"));  // left untouched

  // A store written by a newer ShardScope.
  const std::string newer = Tmp(dir, "newer.sqlite");
  { QVERIFY(RunStore::Open(newer).ok()); }
  QVERIFY(RawExec(newer, "PRAGMA user_version = 7"));
  Result<RunStore> n = RunStore::Open(newer);
  QVERIFY(!n.ok());
  QVERIFY2(Contains(n.error().message, "schema version 7") && Contains(n.error().message, "newer ShardScope") &&
               Contains(n.error().message, "up to " + std::to_string(RunStore::kSchemaVersion)),
           n.error().message.c_str());

  // A version number but no schema table: some other application's database.
  const std::string versioned = Tmp(dir, "versioned.sqlite");
  QVERIFY(RawExec(versioned, "CREATE TABLE t(x); PRAGMA user_version = 1"));
  Result<RunStore> v = RunStore::Open(versioned);
  QVERIFY(!v.ok());
  QVERIFY2(Contains(v.error().message, "not a ShardScope run store"), v.error().message.c_str());

  // A corrupted version number.
  const std::string negative = Tmp(dir, "negative.sqlite");
  { QVERIFY(RunStore::Open(negative).ok()); }
  QVERIFY(RawExec(negative, "PRAGMA user_version = -3"));
  Result<RunStore> neg = RunStore::Open(negative);
  QVERIFY(!neg.ok());
  QVERIFY(Contains(neg.error().message, "invalid schema version -3"));

  // Our layout, but the schema table names another application.
  const std::string wrong_app = Tmp(dir, "wrong_app.sqlite");
  { QVERIFY(RunStore::Open(wrong_app).ok()); }
  QVERIFY(RawExec(wrong_app, "UPDATE schema SET value = 'Other app' WHERE key = 'application'"));
  Result<RunStore> w = RunStore::Open(wrong_app);
  QVERIFY(!w.ok());
  QVERIFY(Contains(w.error().message, "not a ShardScope run store"));
}

// A store written by the first version (no instruction origins) is migrated in place on open: its
// runs stay readable (without origins) and new runs keep theirs.
void TestRunStore::migratesVersion1Store() {
  QTemporaryDir dir;
  const std::string path = Tmp(dir, "v1.sqlite");
  int64_t old_id = 0;
  {
    Result<RunStore> store = RunStore::Open(path);
    QVERIFY(store.ok());
    RunResult run = MakeRun(4, 2, 10, 3, 1);
    run.origins.clear();
    old_id = store->SaveRun(run).value();
  }
  // Turn it back into exactly what version 1 wrote.
  QVERIFY(RawExec(path, std::string(kDowngradeTo2) + "DROP TABLE instruction_origins; PRAGMA user_version = 1; "
                        "UPDATE schema SET value = '1' WHERE key = 'version';"));
  QCOMPARE(RawInt(path, "PRAGMA user_version"), int64_t{1});
  Result<RunStore> store = RunStore::Open(path, RunStore::OpenMode::kOpenExisting);
  QVERIFY2(store.ok(), store.ok() ? "" : store.error().message.c_str());
  QCOMPARE(RawInt(path, "PRAGMA user_version"), int64_t{RunStore::kSchemaVersion});
  QCOMPARE(RawText(path, "SELECT value FROM schema WHERE key = 'version'"), std::to_string(RunStore::kSchemaVersion));
  Result<RunResult> old_run = store->LoadRun(old_id);
  QVERIFY2(old_run.ok(), old_run.ok() ? "" : old_run.error().message.c_str());
  QVERIFY(old_run->origins.empty());
  // Version 3 adds the device's HBM: unknown (0) for an old run, which therefore counts as fitting.
  QCOMPARE(old_run->summary.device_hbm_bytes, int64_t{0});
  QVERIFY(old_run->summary.fits());
  QCOMPARE(old_run->classes.size(), size_t{2});
  const int64_t new_id = store->SaveRun(MakeRun(4, 2, 10, 3, 2)).value();
  QCOMPARE(store->LoadRun(new_id)->origins.at("all-reduce.1"), std::string("dot.3"));
}

// A store written by version 2 (no run keys, no annotations), with runs in it, is migrated in
// place on open: the runs keep their ids and figures (no key, no annotations), the schema becomes
// the one a new store gets, and keyed saves and merges work on it.
void TestRunStore::migratesVersion2Store() {
  QTemporaryDir dir;
  const std::string fresh = Tmp(dir, "fresh.sqlite");
  QVERIFY(RunStore::Open(fresh).ok());
  const std::string path = Tmp(dir, "v2.sqlite");
  int64_t a = 0, b = 0;
  {
    Result<RunStore> store = RunStore::Open(path);
    QVERIFY(store.ok());
    a = store->SaveRun(MakeRun(4, 2, 10, 3, 1)).value();
    b = store->SaveRun(MakeRun(8, 1, 5, 2, 2)).value();
  }
  QVERIFY(RawExec(path, std::string(kDowngradeTo2) + "PRAGMA user_version = 2; UPDATE schema SET value = '2' WHERE key = 'version';"));
  QCOMPARE(RawInt(path, "PRAGMA user_version"), int64_t{2});
  QVERIFY(!Contains(Columns(path, "runs"), "run_key"));
  QCOMPARE(Columns(path, "run_annotations"), std::string());

  Result<RunStore> store = RunStore::Open(path, RunStore::OpenMode::kOpenExisting);
  QVERIFY2(store.ok(), store.ok() ? "" : store.error().message.c_str());
  QCOMPARE(RawInt(path, "PRAGMA user_version"), int64_t{RunStore::kSchemaVersion});
  QCOMPARE(RawText(path, "SELECT value FROM schema WHERE key = 'version'"), std::to_string(RunStore::kSchemaVersion));
  for (const char* table : {"runs", "run_annotations", "instruction_origins"}) QCOMPARE(Columns(path, table), Columns(fresh, table));
  Result<RunResult> old = store->LoadRun(a);
  QVERIFY(old.ok());
  QCOMPARE(old->key, std::string());
  QVERIFY(old->annotations.empty());
  RunResult expect = MakeRun(4, 2, 10, 3, 1);
  expect.id = a;
  // Version 5's figures: no bubbles or recompute known; the old MFU is the raw reading.
  expect.summary.pipeline_stages = 0;
  expect.summary.bubble_time_s = expect.summary.recompute_time_s = 0;
  expect.summary.bubble_flops = expect.summary.recompute_flops = 0;
  expect.summary.raw_flops_utilization = expect.summary.mfu;
  QCOMPARE(old->summary, expect.summary);
  QCOMPARE(old->classes.size(), size_t{2});
  QCOMPARE(store->LoadRun(b)->summary.num_devices, int64_t{8});
  // Keyed saves on the migrated store.
  RunResult keyed = MakeRun(2, 1, 3, 1, 3);
  keyed.key = "search:0123456789abcdef";
  keyed.annotations = {{"x", "{devices=[2,1]<=[2]}"}, {"w", "{replicated}"}};
  const int64_t k1 = store->SaveRun(keyed).value();
  const int64_t k2 = store->SaveRun(keyed).value();
  QCOMPARE(k2, k1);
  QCOMPARE(store->ListRuns()->size(), size_t{3});
  QCOMPARE(store->LoadRun(k1)->annotations, keyed.annotations);
}

// A store written by version 4 (before the pipeline accounting) is migrated in place on open: its
// runs keep ids, keys and figures, their MFU (which then counted every executed FLOP) becomes the raw
// FLOPS utilisation, bubbles and recompute are 0 (unknown); new runs store all six figures.
void TestRunStore::migratesVersion4Store() {
  QTemporaryDir dir;
  const std::string fresh = Tmp(dir, "fresh.sqlite");
  QVERIFY(RunStore::Open(fresh).ok());
  const std::string path = Tmp(dir, "v4.sqlite");
  int64_t a = 0;
  RunResult keyed = MakeRun(4, 2, 10, 3, 1);
  keyed.key = "search:00000000000000aa";
  {
    Result<RunStore> store = RunStore::Open(path);
    QVERIFY(store.ok());
    a = store->SaveRun(keyed).value();
  }
  QVERIFY(RawExec(path, std::string(kDowngradeTo4) + "PRAGMA user_version = 4; UPDATE schema SET value = '4' WHERE key = 'version';"));
  QCOMPARE(RawInt(path, "PRAGMA user_version"), int64_t{4});
  QVERIFY(!Contains(Columns(path, "runs"), "bubble_time_s"));

  Result<RunStore> store = RunStore::Open(path, RunStore::OpenMode::kOpenExisting);
  QVERIFY2(store.ok(), store.ok() ? "" : store.error().message.c_str());
  QCOMPARE(RawInt(path, "PRAGMA user_version"), int64_t{RunStore::kSchemaVersion});
  QCOMPARE(RawText(path, "SELECT value FROM schema WHERE key = 'version'"), std::to_string(RunStore::kSchemaVersion));
  QCOMPARE(Columns(path, "runs"), Columns(fresh, "runs"));
  Result<RunResult> old = store->LoadRun(a);
  QVERIFY(old.ok());
  QCOMPARE(old->key, keyed.key);
  QCOMPARE(old->summary.pipeline_stages, int64_t{0});
  QCOMPARE(old->summary.bubble_time_s, 0.0);
  QCOMPARE(old->summary.recompute_time_s, 0.0);
  QCOMPARE(old->summary.bubble_flops, 0.0);
  QCOMPARE(old->summary.recompute_flops, 0.0);
  QCOMPARE(old->summary.raw_flops_utilization, 0.4375);  // the old MFU
  QCOMPARE(old->summary.mfu, 0.4375);
  QCOMPARE(old->summary.step_time_s, keyed.summary.step_time_s);
  QCOMPARE(old->classes.size(), size_t{2});
  // A new run keeps its pipeline figures, exactly.
  RunResult fresh_run = MakeRun(8, 1, 5, 2, 2);
  const int64_t b = store->SaveRun(fresh_run).value();
  Result<RunResult> back = store->LoadRun(b);
  QVERIFY(back.ok());
  fresh_run.id = b;
  QCOMPARE(back->summary, fresh_run.summary);
  QCOMPARE(back->summary.bubble_share(), 0.015625 / fresh_run.summary.step_time_s);
  // Saving the old run again under its key replaces it, now with the figures.
  const int64_t again = store->SaveRun(keyed).value();
  QCOMPARE(again, a);
  QCOMPARE(store->LoadRun(a)->summary.raw_flops_utilization, 0.6875);
}

// Saving a run whose key is stored replaces that run under the same id, detail and all.
void TestRunStore::keyedRunReplacesStoredRun() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  const int64_t other = store->SaveRun(MakeRun(2, 1, 4, 2, 9)).value();
  RunResult first = MakeRun(4, 2, 20, 3, 1);
  first.key = "search:aaaa";
  first.annotations = {{"x", "{devices=[4,1]<=[4]}"}};
  const int64_t id = store->SaveRun(first).value();
  QCOMPARE(store->FindRunByKey("search:aaaa").value(), std::optional<int64_t>(id));
  QCOMPARE(store->FindRunByKey("search:bbbb").value(), std::optional<int64_t>());
  RunResult second = MakeRun(8, 1, 7, 2, 2);  // different detail, same key
  second.key = first.key;
  QCOMPARE(store->SaveRun(second).value(), id);
  auto runs = store->ListRuns().value();
  QCOMPARE(runs.size(), size_t{2});
  QCOMPARE(runs[0].id, other);
  QCOMPARE(runs[1].id, id);
  Result<RunResult> back = store->LoadRun(id);
  QVERIFY(back.ok());
  QCOMPARE(back->summary.num_devices, int64_t{8});
  QCOMPARE(back->classes.size(), size_t{1});
  QCOMPARE(back->classes[0].events.size(), size_t{7});
  QVERIFY(back->annotations.empty());  // the second run's (none), not the first's
  QCOMPARE(back->key, first.key);
  // No rows of the replaced run are left behind.
  QCOMPARE(RawInt(store->path(), "SELECT count(*) FROM device_map WHERE run_id = " + std::to_string(id)), int64_t{8});
  QCOMPARE(RawInt(store->path(), "SELECT count(*) FROM run_annotations"), int64_t{0});
}

// Merging stores: every run arrives once; merging again (or after a task's file was rewritten by
// a re-run) adds nothing; a keyless run gets its content key; a store cannot be merged into itself.
void TestRunStore::mergeIsIdempotent() {
  QTemporaryDir dir;
  const std::string in1 = Tmp(dir, "task1.sqlite"), in2 = Tmp(dir, "task2.sqlite"), out = Tmp(dir, "all.sqlite");
  {
    RunStore s1 = RunStore::Open(in1).value();
    RunResult r = MakeRun(4, 2, 10, 3, 1);
    r.key = "search:1";
    r.annotations = {{"x", "{devices=[4,1]<=[4]}"}};
    QVERIFY(s1.SaveRun(r).ok());
    QVERIFY(s1.SaveRun(MakeRun(2, 1, 5, 2, 7)).ok());  // no key
    RunStore s2 = RunStore::Open(in2).value();
    RunResult q = MakeRun(8, 1, 6, 2, 2);
    q.key = "search:2";
    QVERIFY(s2.SaveRun(q).ok());
  }
  RunStore merged = RunStore::Open(out).value();
  MergeReport m1 = merged.MergeFrom(in1).value();
  QCOMPARE(m1.runs_read, int64_t{2});
  QCOMPARE(m1.added, int64_t{2});
  QCOMPARE(merged.MergeFrom(in2).value().added, int64_t{1});
  QCOMPARE(merged.ListRuns()->size(), size_t{3});
  // Again: nothing new.
  MergeReport m2 = merged.MergeFrom(in1).value();
  QCOMPARE(m2.added, int64_t{0});
  QCOMPARE(m2.replaced, int64_t{2});
  QCOMPARE(merged.ListRuns()->size(), size_t{3});
  // A task re-run rewrites its file with a new result for the same candidate: the merge replaces.
  {
    RunStore s2 = RunStore::Open(in2).value();
    RunResult q = MakeRun(8, 1, 6, 2, 5);
    q.key = "search:2";
    QVERIFY(s2.SaveRun(q).ok());
    QCOMPARE(s2.ListRuns()->size(), size_t{1});
  }
  QCOMPARE(merged.MergeFrom(in2).value().replaced, int64_t{1});
  auto runs = merged.ListRuns().value();
  QCOMPARE(runs.size(), size_t{3});
  std::set<std::string> keys;
  for (const auto& r : runs) keys.insert(r.key);
  QCOMPARE(keys.size(), size_t{3});
  QVERIFY(keys.count("search:1") && keys.count("search:2"));
  int content = 0;
  for (const auto& k : keys) content += k.rfind("content:", 0) == 0 ? 1 : 0;
  QCOMPARE(content, 1);
  for (const auto& r : runs)
    if (r.key == "search:2") QCOMPARE(r.summary.step_time_s, MakeRun(8, 1, 6, 2, 5).summary.step_time_s);
  RunResult with_annotations = merged.LoadRun(merged.FindRunByKey("search:1").value().value()).value();
  QCOMPARE(with_annotations.annotations.size(), size_t{1});
  QCOMPARE(with_annotations.classes.size(), size_t{2});
  // Errors.
  Result<MergeReport> self = merged.MergeFrom(out);
  QVERIFY(!self.ok());
  QVERIFY(Contains(self.error().message, "into itself"));
  Result<MergeReport> missing = merged.MergeFrom(Tmp(dir, "nope.sqlite"));
  QVERIFY(!missing.ok());
  QVERIFY(Contains(missing.error().message, "no such file"));
}

void TestRunStore::cancelRollsBack() {
  QTemporaryDir dir;
  Result<RunStore> store = RunStore::Open(Tmp(dir, "runs.sqlite"));
  QVERIFY(store.ok());
  int64_t first = store->SaveRun(MakeRun(2, 1, 10, 2, 1)).value();
  int64_t calls = 0, last_total = 0;
  SaveOptions cancel;
  cancel.progress = [&](int64_t done, int64_t total) {
    ++calls;
    last_total = total;
    return done < 8192;  // cancel at the second report
  };
  Result<int64_t> id = store->SaveRun(MakeRun(8, 2, 10000, 100, 2), cancel);
  QVERIFY(!id.ok());
  QVERIFY2(Contains(id.error().message, "cancelled"), id.error().message.c_str());
  QCOMPARE(calls, int64_t{2});
  // 1 run row + 3 settings + strings + 2 classes + 8 map rows + 20000 events + 200 samples + 6 buffers
  // + 2 collectives + 3 origins; strings: 10000 instruction names x 2 classes + 3 kinds.
  QCOMPARE(last_total, int64_t{1 + 3 + 20003 + 2 + 8 + 20000 + 200 + 6 + 2 + 3});
  QCOMPARE(store->ListRuns()->size(), size_t{1});
  QCOMPARE(store->ListRuns()->at(0).id, first);

  // A callback that throws cancels too, and leaves no transaction open.
  SaveOptions throwing;
  throwing.progress = [](int64_t, int64_t) -> bool { throw std::runtime_error("boom"); };
  Result<int64_t> thrown = store->SaveRun(MakeRun(8, 2, 10000, 100, 2), throwing);
  QVERIFY(!thrown.ok());
  QVERIFY(Contains(thrown.error().message, "cancelled"));
  QCOMPARE(store->ListRuns()->size(), size_t{1});

  // Progress reaches the total on a completed save.
  int64_t final_done = 0, final_total = -1;
  SaveOptions watch;
  watch.progress = [&](int64_t done, int64_t total) {
    final_done = done;
    final_total = total;
    return true;
  };
  QVERIFY(store->SaveRun(MakeRun(2, 1, 10, 2, 3), watch).ok());
  QCOMPARE(final_done, final_total);
  QVERIFY(final_total > 10);
}

void TestRunStore::readerSeesSnapshotDuringSave() {
  // WAL: while one connection is in the middle of saving, another connection can read and sees
  // only the committed runs, without waiting.
  QTemporaryDir dir;
  const std::string path = Tmp(dir, "runs.sqlite");
  Result<RunStore> writer = RunStore::Open(path);
  QVERIFY(writer.ok());
  int64_t first = writer->SaveRun(MakeRun(4, 2, 10, 2, 1)).value();
  Result<RunStore> reader = RunStore::Open(path);
  QVERIFY(reader.ok());
  size_t seen_during = 99;
  bool reader_loaded_first = false;
  SaveOptions opts;
  opts.progress = [&](int64_t done, int64_t) {
    if (done == 4096) {
      auto auto_list = reader->ListRuns();
      seen_during = auto_list.ok() ? auto_list->size() : 98;
      auto r = reader->LoadRun(first);
      reader_loaded_first = r.ok() && r->classes.size() == 2;
    }
    return true;
  };
  Result<int64_t> second = writer->SaveRun(MakeRun(4, 2, 5000, 10, 2), opts);
  QVERIFY(second.ok());
  QCOMPARE(seen_during, size_t{1});
  QVERIFY(reader_loaded_first);
  QCOMPARE(reader->ListRuns()->size(), size_t{2});
}

void TestRunStore::killDuringSaveLeavesEarlierRunsIntact_data() {
  QTest::addColumn<double>("kill_fraction");
  QTest::newRow("half way") << 0.5;
  QTest::newRow("last row, before commit") << 1.0;
}

void TestRunStore::killDuringSaveLeavesEarlierRunsIntact() {
  QFETCH(double, kill_fraction);
  QTemporaryDir dir;
  const std::string path = Tmp(dir, "runs.sqlite");
  std::vector<RunResult> earlier;
  {
    Result<RunStore> store = RunStore::Open(path);
    QVERIFY(store.ok());
    for (int i = 0; i < 3; ++i) {
      RunResult r = MakeRun(8 + i, 2 + i, 300, 50, i);
      Result<int64_t> id = store->SaveRun(r);
      QVERIFY(id.ok());
      r.id = *id;
      earlier.push_back(std::move(r));
    }
  }  // closed before fork: a SQLite connection must not cross fork()

  // Large enough (~25 MB of pages) that by its last row the writer's page cache (16 MiB) has
  // spilled uncommitted pages into the WAL: 2 classes x 150k events + 2 x 100k memory samples.
  const RunResult big = MakeRun(64, 2, 150000, 100000, 50);

  pid_t child = fork();
  QVERIFY(child >= 0);
  if (child == 0) {
    Result<RunStore> store = RunStore::Open(path);
    if (!store.ok()) _exit(4);
    SaveOptions opts;
    opts.progress = [&](int64_t done, int64_t total) {
      if (static_cast<double>(done) >= kill_fraction * static_cast<double>(total)) kill(getpid(), SIGKILL);
      return true;
    };
    (void)store->SaveRun(big, opts);
    _exit(3);  // not reached: killed above
  }
  int status = 0;
  QCOMPARE(waitpid(child, &status, 0), child);
  QVERIFY2(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
           qPrintable(QString("child exit status %1").arg(status)));
  // The killed writer left its WAL behind. Half way, its pages may all still be in its cache; at the
  // last row they have spilled, so recovery must ignore uncommitted frames in the WAL.
  std::error_code ec;
  const auto wal_bytes = std::filesystem::file_size(path + "-wal", ec);
  QVERIFY(!ec);
  qInfo("WAL left by the killed writer: %llu bytes", static_cast<unsigned long long>(wal_bytes));
  if (kill_fraction >= 1.0) QVERIFY(wal_bytes > (4u << 20));

  // Reopen: readable, every earlier run intact, the partial run absent.
  Result<RunStore> store = RunStore::Open(path);
  QVERIFY2(store.ok(), store.ok() ? "" : store.error().message.c_str());
  Result<std::vector<RunOverview>> list = store->ListRuns();
  QVERIFY(list.ok());
  QCOMPARE(list->size(), size_t{3});
  for (size_t i = 0; i < earlier.size(); ++i) {
    QCOMPARE((*list)[i].id, earlier[i].id);
    Result<RunResult> loaded = store->LoadRun(earlier[i].id);
    QVERIFY(loaded.ok());
    QVERIFY(*loaded == earlier[i]);
  }
  const std::string last = std::to_string(earlier.back().id);
  for (const char* table : {"run_settings", "run_strings", "device_classes", "device_map", "events",
                            "memory_samples", "peak_buffers", "collectives"})
    QCOMPARE(RawInt(path, std::string("SELECT count(*) FROM ") + table + " WHERE run_id > " + last), int64_t{0});
  QCOMPARE(RawText(path, "PRAGMA integrity_check"), std::string("ok"));
  // And the store keeps working.
  Result<int64_t> after = store->SaveRun(MakeRun(4, 2, 10, 2, 60));
  QVERIFY(after.ok());
  QVERIFY(*after > earlier.back().id);
  QCOMPARE(store->ListRuns()->size(), size_t{4});
}

void TestRunStore::defaultStorePath() {
  QCOMPARE(RunStore::DefaultStorePath("/home/me/models/mlp.shardscope"),
           std::string("/home/me/models/mlp.runs.sqlite"));
  QCOMPARE(RunStore::DefaultStorePath("project"), std::string("project.runs.sqlite"));
}


// A store written by version 5 (no placement) is migrated in place on open: its runs read with an
// unknown placement (empty), new runs keep the placement they were simulated with.
void TestRunStore::migratesVersion5Store() {
  QTemporaryDir dir;
  const std::string fresh = Tmp(dir, "fresh.sqlite");
  QVERIFY(RunStore::Open(fresh).ok());
  const std::string path = Tmp(dir, "v5.sqlite");
  int64_t a = 0;
  RunResult old_run = MakeRun(4, 2, 10, 3, 1);
  old_run.inputs.placement = "X=4 over physical axis 0 (4, a ring)";
  {
    Result<RunStore> store = RunStore::Open(path);
    QVERIFY(store.ok());
    a = store->SaveRun(old_run).value();
    QCOMPARE(store->LoadRun(a)->inputs.placement, old_run.inputs.placement);  // the current schema keeps it
  }
  QVERIFY(RawExec(path, std::string(kDowngradeTo5) + "PRAGMA user_version = 5; UPDATE schema SET value = '5' WHERE key = 'version';"));
  QVERIFY(!Contains(Columns(path, "runs"), "placement"));

  Result<RunStore> store = RunStore::Open(path, RunStore::OpenMode::kOpenExisting);
  QVERIFY2(store.ok(), store.ok() ? "" : store.error().message.c_str());
  QCOMPARE(RawInt(path, "PRAGMA user_version"), int64_t{6});
  QCOMPARE(RawText(path, "SELECT value FROM schema WHERE key = 'version'"), std::string("6"));
  QCOMPARE(Columns(path, "runs"), Columns(fresh, "runs"));
  Result<RunResult> old = store->LoadRun(a);
  QVERIFY(old.ok());
  QCOMPARE(old->inputs.placement, std::string());  // unknown
  QCOMPARE(old->summary.step_time_s, old_run.summary.step_time_s);
  auto listed = store->ListRuns();
  QVERIFY(listed.ok() && listed->size() == 1);
  QCOMPARE(listed->front().inputs.placement, std::string());
  RunResult fresh_run = MakeRun(8, 1, 5, 2, 2);
  fresh_run.inputs.placement = "X=8 over physical axes 0,1 (2x4, snake: a closed ring)";
  const int64_t b = store->SaveRun(fresh_run).value();
  QCOMPARE(store->LoadRun(b)->inputs.placement, fresh_run.inputs.placement);
}

QTEST_APPLESS_MAIN(TestRunStore)
#include "test_run_store.moc"
