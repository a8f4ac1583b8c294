// Benchmark of the strategy search (app/search): the 32-layer dense Transformer of GSPMD Table 2
// (M=8192, H=65536, N=128, D=256, S=1024; f32 weights, bf16 activations, Adam) on TPU v3 cores (two
// devices per chip, as Table 2 counts them), 128 devices (batch 64) and 2048 devices (batch 1024),
// every strategy family, runs stored in SQLite.
//
// Prints per pod: the candidates generated, simulated, pruned and invalid; the wall time with
// 1 and 2 worker threads; the CPU time; fully simulated candidates per second per core (simulated
// candidates / CPU seconds of the search at 1 thread); the time spent in each pipeline stage; the
// winner. Targets: >= 50 fully simulated candidates per second per core; the 2048-device search
// under 60 s on a 2-core machine. Medians of `repetitions` runs.
//
//   bench_search [repetitions=3] [layers=32]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "app/search/report.h"
#include "app/search/search.h"
#include "core/base/units.h"
#include "benchmarks/bench_support.h"

using namespace shardscope;

using shardscope::bench::Median;

namespace {

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  const int64_t layers = argc > 2 ? std::max(1, std::atoi(argv[2])) : 32;
  char tmpl[] = "/tmp/bench_search_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  std::printf("bench_search: %lld-layer Transformer of GSPMD Table 2 (M=8192 H=65536 N=128 D=256 S=1024, f32 weights, "
              "bf16 activations, Adam) on TPU v3 cores, every strategy family, runs stored; %d runs, medians\n",
              static_cast<long long>(layers), reps);
  struct Pod {
    int64_t devices, batch;
  };
  for (const Pod pod : {Pod{128, 64}, Pod{2048, 1024}}) {
    search::SearchOptions o;
    o.model = "transformer";
    o.settings = {{"layers", std::to_string(layers)}, {"batch", std::to_string(pod.batch)}, {"seq", "1024"}, {"model", "8192"},
                  {"heads", "128"}, {"head_dim", "256"}, {"hidden", "65536"}, {"dtype", "f32"}, {"act_dtype", "bf16"},
                  {"optimizer", "adam"}};
    o.chip = "tpu-v3";
    o.devices = pod.devices;
    o.cores_per_chip = 2;
    std::map<int, std::vector<double>> wall;
    std::vector<double> cpu1, rate;
    search::SearchResult last;
    for (int jobs : {1, 2}) {
      for (int r = 0; r < reps; ++r) {
        const std::string db = std::string(dir) + "/search_" + std::to_string(pod.devices) + "_" + std::to_string(jobs) + "_" +
                               std::to_string(r) + ".sqlite";
        auto store = pipeline::RunDatabase::Open(db);
        if (!store.ok()) {
          std::fprintf(stderr, "%s\n", store.error().message.c_str());
          return 1;
        }
        o.store = store.value();
        o.jobs = jobs;
        auto s = search::RunSearch(o);
        if (!s.ok()) {
          std::fprintf(stderr, "%lld devices: %s\n", static_cast<long long>(pod.devices), s.error().message.c_str());
          return 1;
        }
        wall[jobs].push_back(s->stats.wall_s);
        if (jobs == 1) {
          cpu1.push_back(s->stats.cpu_s);
          rate.push_back(s->stats.cpu_s > 0 ? static_cast<double>(s->stats.simulated) / s->stats.cpu_s : 0);
        }
        o.store.reset();
        std::filesystem::remove(db);
        std::filesystem::remove(db + "-wal");
        std::filesystem::remove(db + "-shm");
        last = std::move(s).value();
      }
    }
    const auto& st = last.stats;
    std::printf("\n%lld devices, batch %lld: %s\n", static_cast<long long>(pod.devices), static_cast<long long>(pod.batch),
                last.pod.Describe().c_str());
    std::printf("  candidates: %lld generated, %lld simulated (%lld confirmed at full depth), %lld pruned by memory, %lld by the "
                "step-time bound, %lld invalid, %lld failed\n",
                static_cast<long long>(st.generated), static_cast<long long>(st.simulated), static_cast<long long>(st.confirmed),
                static_cast<long long>(st.pruned_memory), static_cast<long long>(st.pruned_bound),
                static_cast<long long>(st.invalid), static_cast<long long>(st.failed));
    std::printf("  wall time: %.2f s with 1 thread, %.2f s with 2 threads (target for 2048 devices: < 60 s on 2 cores)\n",
                Median(wall[1]), Median(wall[2]));
    std::printf("  CPU time (1 thread): %.2f s -> %.1f fully simulated candidates per second per core (target >= 50)\n",
                Median(cpu1), Median(rate));
    std::map<std::string, double> stages;
    double prepare_ms = 0;
    for (const auto& r : last.ranked) {
      for (const auto& [k, v] : r.stage_millis) stages[k] += v;
      (void)prepare_ms;
    }
    std::printf("  time in the pipeline's stages (last run, 2 threads, summed over candidates):");
    for (const auto& [k, v] : stages) std::printf(" %s %.0f ms;", k.c_str(), v);
    std::printf(" prepare (build + bounds) %.0f ms wall\n", st.prepare_s * 1e3);
    // Where the evaluation time goes, by family: simulated candidates and their summed wall time.
    std::map<std::string, std::pair<int, double>> by_family;
    for (const auto& r : last.ranked)
      if (r.simulated()) {
        by_family[r.candidate.family].first += 1;
        by_family[r.candidate.family].second += r.millis;
      }
    std::printf("  evaluation by family (last run):");
    for (const auto& [f, cm] : by_family) std::printf(" %s %d in %.0f ms;", f.c_str(), cm.first, cm.second);
    std::printf("\n");
    if (!last.ranked.empty() && last.ranked.front().simulated()) {
      const auto& b = last.ranked.front();
      std::printf("  best: %s: %s per step, MFU %s, peak %s of %s (%s)\n", b.candidate.Label().c_str(),
                  FormatSeconds(b.summary.step_time_s).c_str(), FormatPercent(b.summary.mfu).c_str(),
                  FormatBytes(static_cast<double>(b.summary.peak_memory_bytes)).c_str(), FormatBytes(b.hbm_bytes).c_str(),
                  b.evaluation.c_str());
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
