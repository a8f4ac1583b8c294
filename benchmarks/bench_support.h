// What the benchmark executables share: the median of their timings and the 64-layer Transformer
// training step several of them time.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "core/zoo/model_zoo.h"

namespace shardscope::bench {

// The median (the mean of the two middle values for an even count; 0 for none).
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The Transformer training step (forward, backward, Adam) at GSPMD-like sizes on a 4x4 mesh:
// batch 16 x 128 tokens, model 1024, 16 heads of 64, feed-forward 4096.
inline TransformerConfig BenchTransformer(int layers, AnnotationSet annotations) {
  TransformerConfig c;
  c.layers = layers;
  c.batch = 16;
  c.seq = 128;
  c.model = 1024;
  c.heads = 16;
  c.head_dim = 64;
  c.hidden = 4096;
  c.backward = true;
  c.optimizer = Optimizer::kAdam;
  c.annotations = annotations;
  c.mesh_x = 4;
  c.mesh_y = 4;
  return c;
}

// Profiles one phase of a benchmark with perf, when asked: with SHARDSCOPE_PERF_CTL naming the
// control FIFO of a `perf record -D -1 --control=fifo:FIFO ...` that started this benchmark, perf
// samples only while a ProfiledPhase lives. Without the variable it does nothing.
//   mkfifo /tmp/ctl && SHARDSCOPE_PERF_CTL=/tmp/ctl perf record -D -1 --control=fifo:/tmp/ctl
//     --call-graph dwarf -o jump.data -- build/release/benchmarks/bench_gui_open --one 64
class ProfiledPhase {
 public:
  ProfiledPhase() { Send("enable"); }
  ~ProfiledPhase() { Send("disable"); }
  ProfiledPhase(const ProfiledPhase&) = delete;
  ProfiledPhase& operator=(const ProfiledPhase&) = delete;

 private:
  static void Send(const char* command) {
    static const char* fifo = std::getenv("SHARDSCOPE_PERF_CTL");
    if (!fifo || !*fifo) return;
    std::ofstream ctl(fifo);
    ctl << command << '\n' << std::flush;
  }
};

}  // namespace shardscope::bench
