// The MLP of the model zoo.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/status.h"
#include "core/zoo/annotations.h"
#include "core/zoo/training.h"
#include "core/zoo/zoo.h"

namespace shardscope {

// A stack of feed-forward blocks: x_{i+1} = relu(x_i W1_i + b1_i) W2_i + b2_i, x: [B,M],
// W1: [M,H], W2: [H,M]. Annotations follow the feed-forward columns of Table 1 with S dropped
// (x "BM", W1 "MH", W2 "HM", the hidden "BH"): 4 per layer.
struct MlpConfig {
  int64_t batch = 16;
  int64_t model = 64;
  int64_t hidden = 256;
  int64_t layers = 2;
  bool backward = true;
  Optimizer optimizer = Optimizer::kSgd;
  double learning_rate = 1e-2;
  PrimitiveType param_type = PrimitiveType::kF32;
  PrimitiveType act_type = PrimitiveType::kF32;
  AnnotationSet annotations = AnnotationSet::kFinalized;
  int64_t mesh_x = 4, mesh_y = 4;
};
Result<std::unique_ptr<Module>> BuildMlp(const MlpConfig& config);

// The zoo entry of this family: "mlp".
void AddMlpModels(std::vector<ZooModel>& models);

}  // namespace shardscope
