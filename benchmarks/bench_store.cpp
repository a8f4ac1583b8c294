// Benchmark of the SQLite run store and the exports on a synthetic large SPMD run:
// 2048 devices in 4 device classes, 20,000 timeline events and 20,000 memory samples per class.
// Prints medians over several repetitions and the database size.
//
//   bench_store [devices] [classes] [events_per_class] [repetitions]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "simulator/run_result.h"
#include "simulator/run_store.h"
#include "simulator/trace_export.h"
#include "benchmarks/bench_support.h"

using namespace shardscope;
using namespace shardscope::sim;

using shardscope::bench::Median;

namespace {

double Seconds(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Per-device detail of class `c`: alternating compute and communication spans of a transformer-like
// step, memory sampled at every event, a few hundred live buffers at the peak.
DeviceClass MakeClassDetail(int c, int events) {
  static const char* kKinds[] = {"dot", "fusion", "convolution", "reduce", "add"};
  static const char* kComm[] = {"all-reduce", "all-gather", "reduce-scatter", "collective-permute"};
  DeviceClass d;
  d.label = "stage " + std::to_string(c);
  double t = 0;
  int64_t live = 1'000'000'000 + c * 1'000'000;
  for (int i = 0; i < events; ++i) {
    TimelineEvent e;
    bool comm = i % 5 == 4;
    e.stream = comm ? Stream::kCommunication : Stream::kCompute;
    e.start_s = t;
    e.duration_s = 1e-6 * (3 + (i * 7 + c) % 40);
    e.kind = comm ? kComm[i % 4] : kKinds[i % 5];
    e.instruction = e.kind + "." + std::to_string(i);
    e.bytes = 4096 * (1 + i % 97);
    e.flops = comm ? 0 : 2.0 * 1024 * 1024 * (1 + i % 13);
    if (!comm) t += e.duration_s;
    d.events.push_back(std::move(e));

    MemorySample m;
    m.time_s = t;
    m.at(MemoryCategory::kParameters) = 500'000'000;
    m.at(MemoryCategory::kOptimizerState) = 1'000'000'000;
    m.at(MemoryCategory::kActivations) = live + (i % 1000) * 100'000;
    m.at(MemoryCategory::kGradients) = (i > events / 2) ? 500'000'000 : 0;
    m.at(MemoryCategory::kTemporaries) = (i % 17) * 1'000'000;
    d.memory.push_back(m);
  }
  for (int i = 0; i < 300; ++i)
    d.peak_buffers.push_back({"buffer." + std::to_string(i), 1'000'000 + i, static_cast<MemoryCategory>(i % 5)});
  d.peak_memory_bytes = 3'200'000'000 + c;
  d.peak_memory_time_s = t / 2;
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const int devices = argc > 1 ? std::atoi(argv[1]) : 2048;
  const int classes = argc > 2 ? std::atoi(argv[2]) : 4;
  const int events = argc > 3 ? std::atoi(argv[3]) : 20000;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 5;
  if (devices <= 0 || classes <= 0 || classes > devices || events <= 0 || reps <= 0) {
    std::fprintf(stderr, "usage: bench_store [devices] [classes] [events_per_class] [repetitions]\n");
    return 2;
  }

  // Build the run the way an engine would: per-device detail grouped by DeviceClassBuilder.
  std::vector<DeviceClass> details;
  for (int c = 0; c < classes; ++c) details.push_back(MakeClassDetail(c, events));
  RunResult run;
  std::vector<double> group_times, copy_times;
  for (int r = 0; r < reps; ++r) {
    // The copies stand in for the engine producing each device's detail; timed alone for reference.
    copy_times.push_back(Seconds([&] {
      for (int d = 0; d < devices; ++d) {
        DeviceClass copy = details[static_cast<size_t>(d % classes)];
        if (copy.events.size() != static_cast<size_t>(events)) std::abort();
      }
    }));
    RunResult candidate;
    group_times.push_back(Seconds([&] {
      DeviceClassBuilder builder;
      for (int d = 0; d < devices; ++d) {
        Result<int32_t> c = builder.Add(d, details[static_cast<size_t>(d % classes)]);
        if (!c.ok()) std::abort();
      }
      if (!builder.Finish(candidate).ok()) std::abort();
    }));
    if (r == 0) run = std::move(candidate);
  }
  run.label = "synthetic";
  run.inputs = {"synthetic_transformer", "0123456789abcdef", "TPU v4", "X=16,Y=16,Z=8",
                "torus 16x16x8 wraparound=xyz", "X=2048 over physical axes 0,1,2 (16x16x8, snake: a closed ring)", {{"microbatches", "8"}, {"overlap", "on"}}};
  run.summary.step_time_s = run.classes[0].events.back().end_s();
  run.summary.compute_time_s = run.summary.step_time_s * 0.8;
  run.summary.communication_time_s = run.summary.step_time_s * 0.25;
  run.summary.exposed_communication_s = run.summary.step_time_s * 0.05;
  run.summary.idle_time_s = run.summary.step_time_s * 0.15;
  run.summary.mfu = 0.52;
  run.summary.peak_memory_bytes = 3'200'000'003;
  run.summary.bytes_communicated = int64_t{1} << 40;
  for (int i = 0; i < 2000; ++i)
    run.collectives.push_back({"all-reduce." + std::to_string(i), "all-reduce", "[256,8]<=[2048]",
                               1 << 20, 1e-5, i % 2 ? "bandwidth-bound" : "latency-bound"});

  const std::string path = (std::filesystem::temp_directory_path() /
                            ("shardscope_bench_store_" + std::to_string(getpid()) + ".sqlite")).string();
  auto remove_db = [&] {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
  };
  remove_db();

  std::vector<double> save_times, load_times, timeline_times, range_times, list_times;
  std::vector<int64_t> ids;
  int64_t one_run_db_bytes = 0;
  {
    Result<RunStore> store = RunStore::Open(path);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.error().message.c_str());
      return 1;
    }
    for (int r = 0; r < reps; ++r) {
      Result<int64_t> id = Error("not run");
      save_times.push_back(Seconds([&] { id = store->SaveRun(run); }));
      if (!id.ok()) {
        std::fprintf(stderr, "%s\n", id.error().message.c_str());
        return 1;
      }
      ids.push_back(*id);
      if (r == 0) {
        std::error_code ec;
        one_run_db_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec) +
                                                std::filesystem::file_size(path + "-wal", ec));
      }
    }
    for (int r = 0; r < reps; ++r) {
      int64_t id = ids[static_cast<size_t>(r)];
      load_times.push_back(Seconds([&] {
        Result<RunResult> loaded = store->LoadRun(id);
        if (!loaded.ok() || loaded->classes.size() != run.classes.size()) std::abort();
      }));
      timeline_times.push_back(Seconds([&] {
        auto tl = store->LoadDeviceTimeline(id, devices - 1);
        if (!tl.ok() || tl->size() != static_cast<size_t>(events)) std::abort();
      }));
      const double mid = run.summary.step_time_s / 2;
      range_times.push_back(Seconds([&] {
        auto tl = store->LoadDeviceTimeline(id, devices / 2, TimeRange{mid, mid + run.summary.step_time_s / 100});
        if (!tl.ok() || tl->empty()) std::abort();
      }));
      list_times.push_back(Seconds([&] {
        auto l = store->ListRuns();
        if (!l.ok() || l->size() != ids.size()) std::abort();
      }));
    }
  }
  std::error_code ec;
  // The connection checkpointed the WAL into the main file when it closed.
  const int64_t db_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));

  std::vector<double> trace_times;
  size_t trace_bytes = 0;
  TraceExportOptions topts;
  topts.selection.one_device_per_class = true;
  for (int r = 0; r < reps; ++r) {
    trace_times.push_back(Seconds([&] {
      std::ostringstream os;
      if (!WriteChromeTrace(run, os, topts).ok()) std::abort();
      trace_bytes = os.str().size();
    }));
  }
  remove_db();

  std::printf("synthetic run: %d devices, %d classes, %d events + %d memory samples per class, %zu collectives\n",
              devices, classes, events, events, run.collectives.size());
  std::printf("repetitions: %d (medians below)\n", reps);
  std::printf("copy per-device detail:     %8.3f s   (stand-in for the engine producing it)\n", Median(copy_times));
  std::printf("copy + group into classes:  %8.3f s   (DeviceClassBuilder, %d Add calls)\n", Median(group_times), devices);
  std::printf("SaveRun:                    %8.3f s   (budget 2 s)\n", Median(save_times));
  std::printf("LoadRun (full):             %8.3f s\n", Median(load_times));
  std::printf("LoadDeviceTimeline (all):   %8.3f s\n", Median(timeline_times));
  std::printf("LoadDeviceTimeline (1%%):    %8.4f s\n", Median(range_times));
  std::printf("ListRuns (%d runs):          %8.4f s\n", reps, Median(list_times));
  std::printf("Chrome trace, 1 dev/class:  %8.3f s   (%.1f MB)\n", Median(trace_times), trace_bytes / 1e6);
  std::printf("db size: %.2f MB for 1 run (db + wal), %.2f MB for %d runs\n", one_run_db_bytes / 1e6,
              db_bytes / 1e6, reps);
  return 0;
}
