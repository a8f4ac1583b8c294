// Pipelining benchmark: the 64-layer pipelined Transformer training step (forward and backward
// loops, Adam) of the model zoo at GSPMD Table 4's sizes — M=4096, H=16384, N=64, D=128 on the
// (L, X, Y) = (4, 16, 4) mesh, 16 microbatches of 64 — propagated, then partitioned. Prints the
// median partitioning time over several runs (target: < 500 ms on this 2-core machine), the
// program's size and the collective-permutes of the loop bodies (one shift each), for the GPipe
// and the circular schedule. Then XLA's WhileLoopAllReduceCodeMotion on the partitioned program:
// its median time, the all-reduces one step executes before and after it (loop bodies counted
// once per iteration), and the simulated step time of both programs on a TPU v3 slice of the mesh
// (pass "nosim" as the third argument to skip the simulations).
//   bench_pipelining [layers=64] [runs=5] [sim|nosim]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "app/pipeline/partition.h"
#include "app/pipeline/simulate.h"
#include "core/zoo/pipelined_transformer.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "partitioner/while_loop_all_reduce_code_motion.h"
#include "benchmarks/bench_support.h"

using namespace shardscope;

using shardscope::bench::Median;

namespace {

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// This thread's CPU time: on a loaded machine, wall time also counts waiting for a core.
double ThreadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// All-reduces one step executes: the entry's plus each loop body's times the trip count.
int64_t AllReducesPerStep(const Module& spmd, int64_t iterations) {
  int64_t n = 0;
  for (const auto& c : spmd.computations()) {
    int64_t k = 0;
    for (const auto& i : c->instructions()) k += i->opcode() == Opcode::kAllReduce;
    if (c.get() == spmd.entry()) n += k;
    else if (c->name() == "forward_body.spmd" || c->name() == "backward_body.spmd") n += k * iterations;
  }
  return n;
}

// Simulated step time in seconds on a TPU v3 slice shaped like the (4, 16, 4) mesh.
double SimulatedStep(const PartitionResult& p, double model_flops) {
  auto topology = pipeline::SliceForMesh("tpu-v3", DeviceMesh({{"L", 4}, {"X", 16}, {"Y", 4}}));
  if (!topology.ok()) return -1;
  pipeline::SimulationOptions o;
  o.model_flops = model_flops;
  auto sim = pipeline::SimulateStep(*p.module, *topology, o, pipeline::SpmdOrigins(p));
  if (!sim.ok()) {
    std::fprintf(stderr, "simulation failed: %s\n", sim.error().message.c_str());
    return -1;
  }
  return sim->run.summary.step_time_s;
}

int Run(PipelineSchedule schedule, int layers, int runs, bool simulate) {
  PipelinedTransformerConfig c;
  c.layers = layers;
  c.stages = 4;
  c.mesh_x = 16;
  c.mesh_y = 4;
  c.microbatches = 16;
  c.microbatch = 64;
  c.seq = 1024;
  c.model = 4096;
  c.heads = 64;
  c.head_dim = 128;
  c.hidden = 16384;
  c.schedule = schedule;
  c.remat = true;
  c.optimizer = Optimizer::kAdam;
  c.annotations = AnnotationSet::kFinalized;
  auto m = BuildPipelinedTransformer(c);
  if (!m.ok()) {
    std::fprintf(stderr, "build failed: %s\n", m.error().message.c_str());
    return 1;
  }
  const auto p0 = std::chrono::steady_clock::now();
  auto p = PropagateShardings(**m);
  const auto p1 = std::chrono::steady_clock::now();
  if (!p.ok()) {
    std::fprintf(stderr, "propagation failed: %s\n", p.error().message.c_str());
    return 1;
  }
  std::printf("%s, %d layers, %lld instructions, mesh (L,X,Y) = (4,16,4), %lld loop iterations; propagation %.1f ms\n",
              std::string(PipelineScheduleName(schedule)).c_str(), layers,
              static_cast<long long>((*m)->instruction_count()), static_cast<long long>(PipelineIterations(c)),
              Ms(p0, p1));
  std::vector<double> times, cpu;
  for (int r = 0; r < runs; ++r) {
    const double c0 = ThreadCpuMs();
    const auto t0 = std::chrono::steady_clock::now();
    auto res = PartitionModule(**m);
    const auto t1 = std::chrono::steady_clock::now();
    cpu.push_back(ThreadCpuMs() - c0);
    if (!res.ok()) {
      std::fprintf(stderr, "partition failed: %s\n", res.error().message.c_str());
      return 1;
    }
    times.push_back(Ms(t0, t1));
    if (r + 1 < runs) continue;
    int64_t shifts[2] = {0, 0};
    const char* bodies[2] = {"forward_body.spmd", "backward_body.spmd"};
    for (int b = 0; b < 2; ++b)
      if (const Computation* body = res->module->FindComputation(bodies[b]))
        for (const auto& i : body->instructions()) shifts[b] += i->opcode() == Opcode::kCollectivePermute;
    std::printf("  SPMD program: %lld instructions, %lld collectives; collective-permutes per iteration: "
                "forward %lld, backward %lld\n",
                static_cast<long long>(res->module->instruction_count()),
                static_cast<long long>(res->collectives.size()), static_cast<long long>(shifts[0]),
                static_cast<long long>(shifts[1]));
  }
  std::printf("  partition time: median %.1f ms wall, %.1f ms CPU over %d runs (wall min %.1f, max %.1f)   target < 500 ms\n",
              Median(times), Median(cpu), runs, *std::min_element(times.begin(), times.end()),
              *std::max_element(times.begin(), times.end()));

  // WhileLoopAllReduceCodeMotion on fresh partitions (the pass rewrites in place).
  std::vector<double> motion, motion_cpu;
  std::optional<PartitionResult> before, after;
  std::optional<WhileLoopAllReduceCodeMotionResult> moved;
  for (int r = 0; r < runs; ++r) {
    auto res = PartitionModule(**m);
    if (!res.ok()) return 1;
    if (r == 0) before = PartitionModule(**m).value();
    const double c0 = ThreadCpuMs();
    const auto t0 = std::chrono::steady_clock::now();
    auto mr = WhileLoopAllReduceCodeMotionOf(*res);
    const auto t1 = std::chrono::steady_clock::now();
    motion_cpu.push_back(ThreadCpuMs() - c0);
    if (!mr.ok()) {
      std::fprintf(stderr, "code motion failed: %s\n", mr.error().message.c_str());
      return 1;
    }
    motion.push_back(Ms(t0, t1));
    moved = std::move(mr).value();
    after = std::move(res).value();
  }
  const int64_t T = PipelineIterations(c);
  std::printf("  %s: %s; median %.1f ms wall, %.1f ms CPU\n", kWhileLoopAllReduceCodeMotionName, moved->Summary().c_str(),
              Median(motion), Median(motion_cpu));
  std::printf("  all-reduces per step: %lld before, %lld after\n", static_cast<long long>(AllReducesPerStep(*before->module, T)),
              static_cast<long long>(AllReducesPerStep(*after->module, T)));
  if (simulate) {
    const double flops = sim::CountModuleFlops(**m);
    const double t_before = SimulatedStep(*before, flops), t_after = SimulatedStep(*after, flops);
    std::printf("  simulated step on TPU v3 (4,16,4): %.3f s before, %.3f s after (%.1f%%)\n", t_before, t_after,
                t_before > 0 ? 100.0 * (t_after - t_before) / t_before : 0.0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 64;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  const bool simulate = !(argc > 3 && std::string(argv[3]) == "nosim");
  if (int rc = Run(PipelineSchedule::kGPipe, layers, runs, simulate)) return rc;
  return Run(PipelineSchedule::kCircular, layers, runs, simulate);
}
