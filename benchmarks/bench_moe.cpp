// Benchmark of propagation + partitioning at GShard scale: the MoE Transformer training step of
// GSPMD Table 6's largest column (577B parameters: 2048 experts per MoE layer, one per device on
// a 1-D mesh of 2048 devices, batch 8192), with GShard's 600B model dimensions (36 layers, every
// other one MoE; M=1024, H=8192, 16 heads of 64, 1024 tokens per sequence; f32 weights, bf16
// activations, Adam), the paper's annotations (E split in the MoE layers, the batch elsewhere).
//
// Prints the medians of propagation, partitioning and their sum (target under 2 s at 2048
// devices), then the same for Table 6's other columns (32, 128, 512 experts and devices).
//
//   bench_moe [repetitions=5] [layers=36]

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/zoo/model_zoo.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "benchmarks/bench_support.h"

using namespace shardscope;

using shardscope::bench::Median;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of this process: on a machine shared with other jobs the wall time also counts the
// time others ran; both are printed.
double Cpu() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Sample {
  double propagate_s = 0, partition_s = 0, cpu_s = 0;
  int64_t instructions = 0, spmd_instructions = 0, all_to_alls = 0;
};

Result<Sample> RunOnce(int64_t devices, int64_t layers) {
  // Table 6: one expert per device, batch = 4 sequences per device.
  const ZooOverrides o{{"layers", std::to_string(layers)}, {"model", "1024"},      {"hidden", "8192"},
                       {"heads", "16"},                    {"head_dim", "64"},     {"seq", "1024"},
                       {"experts", std::to_string(devices)}, {"batch", std::to_string(4 * devices)},
                       {"mesh_x", std::to_string(devices)}, {"dtype", "f32"},      {"act_dtype", "bf16"},
                       {"optimizer", "adam"},              {"annotations", "gshard"}};
  auto m = ZooBuild("moe-transformer", o);
  if (!m.ok()) return m.error();
  Sample s;
  s.instructions = (*m)->instruction_count();
  double t0 = Now();
  const double c0 = Cpu();
  PropagationOptions po;
  po.propagate_to_output = {true};
  auto r = PropagateShardings(**m, po);
  if (!r.ok()) return Error("propagation: " + r.error().message);
  s.propagate_s = Now() - t0;
  t0 = Now();
  auto part = PartitionModule(**m);
  if (!part.ok()) return Error("partitioning: " + part.error().message);
  s.partition_s = Now() - t0;
  s.cpu_s = Cpu() - c0;
  s.spmd_instructions = part->module->instruction_count();
  for (const auto& c : part->collectives) s.all_to_alls += c.kind == Opcode::kAllToAll;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int64_t layers = argc > 2 ? std::max(1, std::atoi(argv[2])) : 36;
  std::printf("bench_moe: %lld-layer GShard MoE Transformer training step (every other layer MoE, M=1024 H=8192 "
              "N=16 D=64 S=1024, one expert per device, batch 4 per device), gshard annotations; %d runs, medians\n",
              static_cast<long long>(layers), reps);
  std::printf("%8s %13s %14s %15s %9s %11s %11s %12s\n", "devices", "instructions", "propagation_s", "partitioning_s",
              "total_s", "total_cpu_s", "spmd_instr", "all-to-alls");
  for (int64_t devices : {32, 128, 512, 2048}) {
    std::vector<double> prop, part, total, cpu;
    Sample last;
    for (int r = 0; r < reps; ++r) {
      auto s = RunOnce(devices, layers);
      if (!s.ok()) {
        std::fprintf(stderr, "%lld devices: %s\n", static_cast<long long>(devices), s.error().message.c_str());
        return 1;
      }
      prop.push_back(s->propagate_s);
      part.push_back(s->partition_s);
      total.push_back(s->propagate_s + s->partition_s);
      cpu.push_back(s->cpu_s);
      last = s.value();
    }
    std::printf("%8lld %13lld %14.3f %15.3f %9.3f %11.3f %11lld %12lld\n", static_cast<long long>(devices),
                static_cast<long long>(last.instructions), Median(prop), Median(part), Median(total), Median(cpu),
                static_cast<long long>(last.spmd_instructions), static_cast<long long>(last.all_to_alls));
    if (devices == 2048)
      std::printf("\n2048 experts on 2048 devices: propagation + partitioning %.3f s wall, %.3f s CPU (target < 2 s)\n",
                  Median(total), Median(cpu));
  }
  return 0;
}
