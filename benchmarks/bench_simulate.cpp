// Benchmark of the execution engine: a 32-layer Transformer training step at the GSPMD §5.1 sizes
// (M=8192, H=65536, N=128, D=256, S=1024; f32 weights, bf16 activations, Adam; 2D finalized
// annotations of Table 1) from the model zoo, partitioned for a (X, Y) mesh of TPU v3 cores (two
// devices per chip, as GSPMD's Table 2 counts them), simulated and stored in SQLite.
//
// Prints, for 2048 devices (mesh 32x64, batch 1024 as in Table 2): partitioning time (separately),
// the wall time of simulate + store (target under 3 s) and the peak RSS (VmHWM, target under 2 GB);
// then a scaling table over 16, 64, 256, 1024 and 2048 devices (batch = devices / 2, as Table 2
// scales it). Times are medians of several runs.
//
//   bench_simulate [repetitions=5] [layers=32]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/pipeline/pipeline.h"
#include "core/zoo/model_zoo.h"
#include "simulator/schedule.h"
#include "benchmarks/bench_support.h"

using namespace shardscope;
using namespace shardscope::sim;

using shardscope::bench::Median;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Peak resident set size so far (VmHWM), bytes.
int64_t PeakRss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  }
  return -1;
}

struct Case {
  int64_t x, y;
};

struct Prepared {
  std::unique_ptr<Module> spmd;
  Topology topology;
  DeviceMesh mesh;
  double model_flops = 0;
  double build_s = 0, propagate_s = 0, partition_s = 0;
};

Result<Prepared> Prepare(const Case& c, int64_t layers) {
  Prepared p;
  const int64_t devices = c.x * c.y;
  ZooOverrides o{{"layers", std::to_string(layers)}, {"batch", std::to_string(devices / 2)}, {"seq", "1024"},
                 {"model", "8192"}, {"heads", "128"}, {"head_dim", "256"}, {"hidden", "65536"},
                 {"mesh_x", std::to_string(c.x)}, {"mesh_y", std::to_string(c.y)}, {"dtype", "f32"},
                 {"act_dtype", "bf16"}, {"optimizer", "adam"}, {"annotations", "finalized"}};
  double t0 = Now();
  auto m = ZooBuild("transformer", o);
  if (!m.ok()) return m.error();
  p.build_s = Now() - t0;
  p.model_flops = CountModuleFlops(**m);
  t0 = Now();
  if (auto r = pipeline::Propagate(**m, pipeline::StandardPropagationOptions()); !r.ok()) {
    return Error("propagation: " + r.error().message);
  }  // (the propagation engine is released here, before partitioning)
  p.propagate_s = Now() - t0;
  t0 = Now();
  SpmdOptions so;
  so.num_partitions = devices;
  auto part = pipeline::Partition(**m, so);
  if (!part.ok()) return Error("partitioning: " + part.error().message);
  p.partition_s = Now() - t0;
  p.spmd = std::move(part->module);
  auto mesh = ZooMesh("transformer", o);
  if (!mesh.ok()) return mesh.error();
  p.mesh = mesh.value();
  auto chip = ChipPreset("tpu-v3");
  if (!chip.ok()) return chip.error();
  auto two = WithCoresPerChip(chip.value(), 2);
  if (!two.ok()) return two.error();
  auto topo = Topology::ForMesh(two.value(), p.mesh);
  if (!topo.ok()) return topo.error();
  p.topology = std::move(topo).value();
  return p;
}

struct Timed {
  double simulate_s = 0, store_s = 0;
  Simulation sim;
};

Result<Timed> SimulateAndStore(const Prepared& p, const std::string& db) {
  Timed t;
  SimulationOptions so;
  so.mesh_text = p.mesh.ToString();
  so.model_flops = p.model_flops;
  so.label = "bench_simulate";
  double t0 = Now();
  auto sim = pipeline::SimulateStep(*p.spmd, p.topology, so);
  if (!sim.ok()) return sim.error();
  t.simulate_s = Now() - t0;
  t0 = Now();
  auto store = pipeline::RunDatabase::Open(db);
  if (!store.ok()) return store.error();
  auto id = (*store)->Save(sim->run);
  if (!id.ok()) return id.error();
  t.store_s = Now() - t0;
  t.sim = std::move(sim).value();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int64_t layers = argc > 2 ? std::max(1, std::atoi(argv[2])) : 32;
  char tmpl[] = "/tmp/bench_simulate_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  std::printf("bench_simulate: %lld-layer Transformer training step (GSPMD 5.1 sizes: M=8192 H=65536 N=128 D=256 "
              "S=1024, f32 weights, bf16 activations, Adam, 2D finalized), TPU v3, 2 devices per chip; %d runs, medians\n",
              static_cast<long long>(layers), reps);
  const std::vector<Case> cases = {{4, 4}, {8, 8}, {16, 16}, {32, 32}, {32, 64}};
  struct Row {
    Case c;
    double partition_s, simulate_s, store_s, total_s;
    int64_t classes, ops, events;
    double step_s, mfu;
    int64_t peak;
  };
  std::vector<Row> rows;
  for (const Case& c : cases) {
    auto p = Prepare(c, layers);
    if (!p.ok()) {
      std::fprintf(stderr, "%lldx%lld: %s\n", static_cast<long long>(c.x), static_cast<long long>(c.y),
                   p.error().message.c_str());
      return 1;
    }
    std::vector<double> sim_s, store_s, total_s;
    Timed last;
    for (int r = 0; r < reps; ++r) {
      const std::string db = std::string(dir) + "/run_" + std::to_string(c.x * c.y) + "_" + std::to_string(r) + ".sqlite";
      auto t = SimulateAndStore(p.value(), db);
      if (!t.ok()) {
        std::fprintf(stderr, "%lld devices: %s\n", static_cast<long long>(c.x * c.y), t.error().message.c_str());
        return 1;
      }
      sim_s.push_back(t->simulate_s);
      store_s.push_back(t->store_s);
      total_s.push_back(t->simulate_s + t->store_s);
      std::filesystem::remove(db);
      std::filesystem::remove(db + "-wal");
      std::filesystem::remove(db + "-shm");
      last = std::move(t).value();
    }
    int64_t events = 0;
    for (const auto& cl : last.sim.run.classes) events += static_cast<int64_t>(cl.events.size());
    rows.push_back({c, p->propagate_s + p->partition_s, Median(sim_s), Median(store_s), Median(total_s),
                    static_cast<int64_t>(last.sim.run.classes.size()), last.sim.stats.exec_ops, events,
                    last.sim.run.summary.step_time_s, last.sim.run.summary.mfu, last.sim.run.summary.peak_memory_bytes});
    if (c.x * c.y == 2048) {
      std::printf("\n2048 devices (mesh X=32,Y=64, batch 1024, %s):\n", p->topology.Describe().c_str());
      std::printf("  model build %.3f s, propagation %.3f s, partitioning %.3f s (%lld SPMD instructions) [not in the target]\n",
                  p->build_s, p->propagate_s, p->partition_s, static_cast<long long>(p->spmd->instruction_count()));
      std::printf("  simulate %.3f s (program %.0f ms, collective costs %.0f ms, engine %.0f ms, memory/results %.0f ms)\n",
                  Median(sim_s), last.sim.stats.build_ms, last.sim.stats.collective_cost_ms, last.sim.stats.engine_ms,
                  last.sim.stats.memory_ms);
      std::printf("  store %.3f s\n", Median(store_s));
      std::printf("  simulate + store: %.3f s (target < 3 s)\n", Median(total_s));
      std::printf("  %s", DescribeSimulation(last.sim).c_str());
    }
  }
  std::printf("\nscaling (wall time, medians):\n");
  std::printf("%8s %8s %12s %11s %9s %15s %8s %8s %9s %12s %7s %12s\n", "devices", "mesh", "partition_s", "simulate_s",
              "store_s", "sim+store_s", "classes", "ops", "events", "step_time_s", "mfu", "peak_GB");
  for (const Row& r : rows) {
    char mesh[32];
    std::snprintf(mesh, sizeof mesh, "%lldx%lld", static_cast<long long>(r.c.x), static_cast<long long>(r.c.y));
    std::printf("%8lld %8s %12.3f %11.3f %9.3f %15.3f %8lld %8lld %9lld %12.4f %6.1f%% %12.3f\n",
                static_cast<long long>(r.c.x * r.c.y), mesh, r.partition_s, r.simulate_s, r.store_s, r.total_s,
                static_cast<long long>(r.classes), static_cast<long long>(r.ops), static_cast<long long>(r.events),
                r.step_s, 100 * r.mfu, static_cast<double>(r.peak) / 1e9);
  }
  std::printf("\npeak RSS (VmHWM): %.1f MB (target < 2048 MB; includes the model builds and partitioning)\n",
              static_cast<double>(PeakRss()) / (1024.0 * 1024.0));
  std::filesystem::remove_all(dir);
  return 0;
}
