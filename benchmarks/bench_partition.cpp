// Partitioner benchmark: the 64-layer Transformer training step (forward, backward, Adam update)
// annotated as GSPMD Table 1 "2D finalized" on a 2-D mesh, propagated, then partitioned.
// Prints the median partitioning time over several runs and the process's peak memory.
// Target (issue): partitioning under 500 ms on this 2-core machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "app/pipeline/partition.h"
#include "app/pipeline/propagate.h"
#include "benchmarks/bench_support.h"
#include "core/zoo/model_zoo.h"

using namespace shardscope;

namespace {
long PeakRssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 64;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  const TransformerConfig c = bench::BenchTransformer(layers, AnnotationSet::kFinalized);
  auto m = BuildTransformer(c);
  if (!m.ok()) {
    std::fprintf(stderr, "build failed: %s\n", m.error().message.c_str());
    return 1;
  }
  // XLA's pass defaults (entry parameters and outputs keep what they have), as measured so far.
  if (auto p = pipeline::Propagate(**m, pipeline::StandardPropagationOptions(pipeline::EntryIo::kKeep)); !p.ok()) {
    std::fprintf(stderr, "propagation failed: %s\n", p.error().message.c_str());
    return 1;
  }  // (the propagation engine, with its provenance, is released here)
  std::printf("module: %d-layer Transformer training step (Adam), %lld instructions, mesh 4x4 (16 devices)\n",
              layers, static_cast<long long>((*m)->instruction_count()));
  std::vector<double> times;
  int64_t out_instructions = 0, collectives = 0;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto res = pipeline::Partition(**m);
    auto t1 = std::chrono::steady_clock::now();
    if (!res.ok()) {
      std::fprintf(stderr, "partition failed: %s\n", res.error().message.c_str());
      return 1;
    }
    times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    out_instructions = res->module->instruction_count();
    collectives = static_cast<int64_t>(res->collectives.size());
  }
  std::printf("SPMD program: %lld instructions, %lld collectives inserted\n", static_cast<long long>(out_instructions),
              static_cast<long long>(collectives));
  std::printf("partition time: median %.1f ms over %d runs (min %.1f, max %.1f)   target < 500 ms\n",
              bench::Median(times), runs, *std::min_element(times.begin(), times.end()),
              *std::max_element(times.begin(), times.end()));
  std::printf("peak RSS of the process: %.1f MiB\n", static_cast<double>(PeakRssKiB()) / 1024.0);
  return 0;
}
