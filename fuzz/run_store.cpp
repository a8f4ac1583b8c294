// Target: the run store (simulator/run_store.h) on a mutated SQLite file. The bytes are written
// to a private file, opened as an existing store and queried (list, load in full, timelines,
// memory, peak buffers, class map, comparison, relabel); every answer is a value or an error,
// never a crash, a hang or an allocation out of proportion to the file.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/fuzz_target.h"
#include "simulator/run_store.h"

using namespace shardscope;
using namespace shardscope::sim;
using shardscope::fuzz::Reach;

namespace {

std::string StorePath() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("shardscope-fuzz-store-" + std::to_string(::getpid()) + ".sqlite")).string();
  return path;
}

void RemoveStore(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(path + suffix, ec);
}

void Query(RunStore& store) {
  auto runs = store.ListRuns();
  if (!runs.ok()) return Reach("list: error");
  Reach("listed");
  int64_t queried = 0;
  for (const RunOverview& o : *runs) {
    if (++queried > 4) break;
    auto run = store.LoadRun(o.id, LoadDetail::kFull);
    if (!run.ok()) {
      Reach("load: error");
      continue;
    }
    Reach("run loaded");
    const int64_t devices = run->num_devices();
    for (int64_t device : {int64_t{0}, devices - 1, devices}) {
      (void)store.LoadDeviceTimeline(o.id, device);
      (void)store.LoadDeviceTimeline(o.id, device, TimeRange{0.0, 1e-3});
      (void)store.LoadMemory(o.id, device);
      (void)store.LoadPeakBuffers(o.id, device);
    }
    (void)store.LoadDeviceClassMap(o.id);
    (void)store.CompareRuns(o.id, runs->front().id);
    (void)store.SetLabel(o.id, "relabelled");
  }
}

}  // namespace

void fuzz::TestOneInput(std::string_view bytes) {
  const std::string path = StorePath();
  RemoveStore(path);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  {
    auto store = RunStore::Open(path, RunStore::OpenMode::kOpenExisting);
    if (store.ok()) {
      Reach("opened");
      Query(*store);
    } else {
      Reach("open: error");
    }
  }
  RemoveStore(path);
}
