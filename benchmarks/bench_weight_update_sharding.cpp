// Weight-update-sharding benchmark: the 64-layer Transformer training step (forward, backward,
// Adam) of bench_partition, annotated for plain data parallelism (weights replicated, batch split
// over 16 devices), propagated and partitioned once; then the pass (redundancy analysis,
// clusters, formats, profitability, rewrite, step split, batching) is timed on the SPMD program.
// Prints the median over several runs. Target (issue 13): under 100 ms on this 2-core machine.
// Usage: bench_weight_update_sharding [layers] [runs] [OUT]: with OUT, the last run's programs
// (main, sharding, unsharding), report and inserted formatting are written there, so a change to
// the pass's speed can be checked to leave its output byte-identical (diff two such files).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "app/pipeline/pipeline.h"
#include "benchmarks/bench_support.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/model_zoo.h"
#include "partitioner/weight_update_sharding/weight_update_sharding.h"

using namespace shardscope;

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 64;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  const TransformerConfig c = bench::BenchTransformer(layers, AnnotationSet::kDataParallel);
  auto m = BuildTransformer(c);
  if (!m.ok()) {
    std::fprintf(stderr, "build failed: %s\n", m.error().message.c_str());
    return 1;
  }
  if (auto p = pipeline::Propagate(**m, pipeline::StandardPropagationOptions(pipeline::EntryIo::kShard)); !p.ok()) {
    std::fprintf(stderr, "propagation failed: %s\n", p.error().message.c_str());
    return 1;
  }
  auto part = pipeline::Partition(**m);
  if (!part.ok()) {
    std::fprintf(stderr, "partition failed: %s\n", part.error().message.c_str());
    return 1;
  }
  std::printf("module: %d-layer Transformer training step (Adam), data-parallel on 16 devices; SPMD program %lld instructions\n",
              layers, static_cast<long long>(part->module->instruction_count()));
  std::vector<double> times, cpu;
  WeightUpdateShardingResult last;
  for (int r = 0; r < runs; ++r) {
    const std::clock_t c0 = std::clock();
    auto t0 = std::chrono::steady_clock::now();
    auto res = ShardWeightUpdates(*part->module);
    auto t1 = std::chrono::steady_clock::now();
    cpu.push_back(1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
    if (!res.ok()) {
      std::fprintf(stderr, "weight-update sharding failed: %s\n", res.error().message.c_str());
      return 1;
    }
    times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    last = std::move(res).value();
  }
  int64_t sharded = 0;
  for (const auto& d : last.decisions) sharded += d.sharded ? 1 : 0;
  std::printf("%s\n", last.summary.c_str());
  std::printf("rewritten main program: %lld instructions; %lld of %zu gradient all-reduces sharded\n",
              static_cast<long long>(last.module->instruction_count()), static_cast<long long>(sharded), last.decisions.size());
  std::printf("weight-update sharding time: median %.1f ms over %d runs (min %.1f, max %.1f)   target < 100 ms\n",
              bench::Median(times), runs, *std::min_element(times.begin(), times.end()), *std::max_element(times.begin(), times.end()));
  // CPU time: what the pass costs when the machine is shared (wall time counts the waits too).
  std::printf("weight-update sharding CPU time: median %.1f ms\n", bench::Median(cpu));
  if (argc > 3) {
    std::ofstream out(argv[3], std::ios::binary);
    for (const Module* p : {last.module.get(), last.sharding_program.get(), last.unsharding_program.get()})
      if (p) out << PrintHloModule(*p) << "\n";
    out << DescribeWeightUpdateSharding(last);
    for (const auto& f : last.formatting) out << f.instruction << ": " << f.reason << "\n";
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", argv[3]);
      return 1;
    }
  }
  return 0;
}
