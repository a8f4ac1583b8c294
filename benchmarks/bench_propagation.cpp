// Sharding propagation speed: a full run and an incremental re-propagation after one annotation
// change, on a Transformer training step from the model zoo (forward, loss, backward, Adam;
// GSPMD Table 1 "2D finalized" annotations on a 2-D mesh): 64 layers (tens of thousands of
// instructions) and a ~2k-instruction model, then the same models forward-only (there one weight
// annotation reaches only its own layer, so the incremental region is small). Prints medians of wall-clock and thread CPU time
// (the CPU figure is the one to compare on a loaded machine).
//
//   bench_propagation [--layers 64] [--small-layers 6] [--repeats 7] [--mesh 4x4]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "app/pipeline/propagate.h"
#include "core/sharding/mesh.h"
#include "core/zoo/model_zoo.h"
#include "benchmarks/bench_support.h"

using namespace shardscope;

using shardscope::bench::Median;

namespace {

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double WallMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double wall = 0, cpu = 0;
};

int Bench(int64_t layers, int repeats, int64_t mesh_x, int64_t mesh_y, bool training) {
  TransformerConfig config;
  config.layers = layers;
  config.backward = training;
  config.optimizer = training ? Optimizer::kAdam : Optimizer::kNone;
  config.annotations = AnnotationSet::kFinalized;
  config.mesh_x = mesh_x;
  config.mesh_y = mesh_y;
  auto built = BuildTransformer(config);
  if (!built.ok()) {
    std::fprintf(stderr, "bench_propagation: %s\n", built.error().message.c_str());
    return 2;
  }
  const Module& original = **built;
  const int64_t instructions = original.instruction_count();

  // XLA's pass defaults (entry parameters and outputs keep what they have), as measured so far.
  const PropagationOptions options = pipeline::StandardPropagationOptions(pipeline::EntryIo::kKeep);
  // Full runs on fresh copies of the annotated module.
  std::vector<double> full_wall, full_cpu;
  PropagationReport last{};
  for (int r = 0; r < repeats; ++r) {
    auto m = original.Clone();
    const double w0 = WallMs(), c0 = ThreadCpuMs();
    auto run = pipeline::Propagate(*m, options);
    const double c1 = ThreadCpuMs(), w1 = WallMs();
    if (!run.ok()) {
      std::fprintf(stderr, "bench_propagation: %s\n", run.error().message.c_str());
      return 2;
    }
    last = run->report;
    full_wall.push_back(w1 - w0);
    full_cpu.push_back(c1 - c0);
  }

  // Incremental, as the GUI runs it (pipeline::PropagationSession, given the whole set of
  // annotations each time): change one weight annotation in the middle layer (swap its mesh axes),
  // then change it back, re-propagating after each edit.
  auto copy = original.Clone();
  std::map<int64_t, HloSharding> annotations = pipeline::TakeAnnotations(*copy);
  pipeline::PropagationSession session(std::move(copy), options);
  if (!session.Run(annotations).ok()) return 2;
  const std::string name = "layer" + std::to_string(layers / 2) + "_wi";
  const Instruction* w = original.FindInstruction(name);
  if (w == nullptr || !w->has_sharding()) {
    std::fprintf(stderr, "bench_propagation: no annotated %s\n", name.c_str());
    return 2;
  }
  auto mesh = DeviceMesh::Parse("X=" + std::to_string(mesh_x) + ",Y=" + std::to_string(mesh_y));
  if (!mesh.ok()) return 2;
  const HloSharding original_sharding = *w->sharding();
  const HloSharding swapped = *MeshSplit(2, *mesh, {1, 0});
  std::vector<double> inc_wall, inc_cpu;
  int64_t region = 0;
  for (int r = 0; r < 2 * repeats; ++r) {
    annotations[w->id()] = r % 2 == 0 ? swapped : original_sharding;
    const double w0 = WallMs(), c0 = ThreadCpuMs();
    auto report = session.Run(annotations);
    const double c1 = ThreadCpuMs(), w1 = WallMs();
    if (!report.ok()) {
      std::fprintf(stderr, "bench_propagation: %s\n", report.error().message.c_str());
      return 2;
    }
    region = report->instructions;
    inc_wall.push_back(w1 - w0);
    inc_cpu.push_back(c1 - c0);
  }

  std::printf("transformer %s, %lld layers, mesh %lldx%lld: %lld instructions, %lld annotated, "
              "%lld sweeps\n",
              training ? "training step" : "forward only", static_cast<long long>(layers),
              static_cast<long long>(mesh_x), static_cast<long long>(mesh_y), static_cast<long long>(instructions), static_cast<long long>(last.annotated),
              static_cast<long long>(last.iterations));
  std::printf("  full propagation:        median %8.2f ms wall, %8.2f ms CPU   (%d runs)\n", Median(full_wall),
              Median(full_cpu), repeats);
  std::printf("  incremental (1 change):  median %8.2f ms wall, %8.2f ms CPU   (%d updates, region %lld "
              "instructions)\n",
              Median(inc_wall), Median(inc_cpu), 2 * repeats, static_cast<long long>(region));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 64, small_layers = 6, mesh_x = 4, mesh_y = 4;
  int repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--layers") layers = std::atoll(v);
    else if (a == "--small-layers") small_layers = std::atoll(v);
    else if (a == "--repeats") repeats = std::max(1, std::atoi(v));
    else if (a == "--mesh") std::sscanf(v, "%lldx%lld", reinterpret_cast<long long*>(&mesh_x),
                                        reinterpret_cast<long long*>(&mesh_y));
    else {
      std::fprintf(stderr, "usage: bench_propagation [--layers N] [--small-layers N] [--repeats N] [--mesh XxY]\n");
      return 2;
    }
  }
  std::printf("bench_propagation (targets: full < 300 ms on the large model, incremental < 20 ms on ~2k "
              "instructions)\n");
  // Training steps (the targets); then forward-only models, where one weight annotation reaches only
  // its own layer, so the incremental region is a small part of the module.
  for (bool training : {true, false}) {
    if (int rc = Bench(layers, repeats, mesh_x, mesh_y, training)) return rc;
    if (int rc = Bench(small_layers, repeats, mesh_x, mesh_y, training)) return rc;
  }
  return 0;
}
