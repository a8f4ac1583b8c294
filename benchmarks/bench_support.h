// What the benchmark executables share: the median of their timings and the 64-layer Transformer
// training step several of them time.
#pragma once

#include <algorithm>
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

}  // namespace shardscope::bench
