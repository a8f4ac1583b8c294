// Benchmark of method 2 of the strategy search (app/search/auto_sharding.h): building and solving
// the auto-sharding integer program for the 32-layer dense Transformer of GSPMD Table 2 (M=8192,
// H=65536, N=128, D=256, S=1024, batch 64; f32 weights, bf16 activations, Adam; its training step
// as one HLO module without annotations) on 128 TPU v3 cores (64 chips, two devices each), on the
// 1-D mesh X=128 and the 2-D mesh X=8,Y=16. Prints the program's size and the median of
// `repetitions` build + solve times (the simulation of the solution is not included).
//
//   bench_auto_sharding [repetitions=5] [layers=32] [max_variables=1000000]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/search/auto_sharding.h"
#include "benchmarks/bench_support.h"
#include "core/zoo/zoo.h"

using namespace shardscope;
using shardscope::bench::Median;

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int64_t layers = argc > 2 ? std::max(1, std::atoi(argv[2])) : 32;
  const int64_t max_variables = argc > 3 ? std::max(1, std::atoi(argv[3])) : 1000000;
  auto module = ZooBuild("transformer", {{"layers", std::to_string(layers)}, {"batch", "64"}, {"seq", "1024"}, {"model", "8192"},
                                         {"heads", "128"}, {"head_dim", "256"}, {"hidden", "65536"}, {"dtype", "f32"},
                                         {"act_dtype", "bf16"}, {"optimizer", "adam"}, {"annotations", "none"}});
  if (!module.ok()) {
    std::fprintf(stderr, "%s\n", module.error().message.c_str());
    return 1;
  }
  auto pod = search::MakePod("tpu-v3", 128, "", 2);
  if (!pod.ok()) {
    std::fprintf(stderr, "%s\n", pod.error().message.c_str());
    return 1;
  }
  std::printf("bench_auto_sharding: %lld-layer Transformer of GSPMD Table 2 (batch 64), %lld instructions, on %s; "
              "%d runs, medians\n",
              static_cast<long long>(layers), static_cast<long long>((*module)->instruction_count()), pod->Describe().c_str(), reps);
  for (const char* mesh_text : {"X=128", "X=8,Y=16"}) {
    auto mesh = search::PlaceMesh(*pod, DeviceMesh::Parse(mesh_text).value(), "", false);
    if (!mesh.ok()) {
      std::fprintf(stderr, "%s: %s\n", mesh_text, mesh.error().message.c_str());
      return 1;
    }
    search::AutoShardingOptions o;
    o.max_variables = max_variables;
    std::vector<double> build, solve, total;
    search::AutoShardingPlan last;
    bool refused = false;
    for (int r = 0; r < reps && !refused; ++r) {
      auto plan = search::SolveAutoSharding(**module, *pod, *mesh, o);
      if (!plan.ok()) {
        std::printf("\n%s: %s\n", mesh_text, plan.error().message.c_str());
        refused = true;
        break;
      }
      build.push_back(plan->build_s);
      solve.push_back(plan->solve_s);
      total.push_back(plan->build_s + plan->solve_s);
      last = std::move(plan).value();
    }
    if (refused) continue;
    const std::string text = search::DescribePlan(last);
    std::printf("\n%s\n", text.substr(0, text.find("\n  ", text.find("objective"))).c_str());
    std::printf("  build + solve: %.3f s median (build %.3f s, solve %.3f s)\n", Median(total), Median(build), Median(solve));
  }
  return 0;
}
