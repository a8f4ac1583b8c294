// Neural collaborative filtering (He et al. 2017, "NeuMF"), the recommendation model of MLPerf 0.6
// that the weight-update-sharding paper evaluates with Adam (its Table 1): large embedding tables,
// small activations — the case where keeping Adam's auxiliaries sharded saves the most memory.
//
//   users, items: s32[B] ids; label: f32[B] (0 / 1)
//   GMF:  gmf = P_gmf[users] * Q_gmf[items]                 P_gmf: [U,k], Q_gmf: [I,k]
//   MLP:  h0  = concat(P_mlp[users], Q_mlp[items])          P_mlp: [U,e], Q_mlp: [I,e], 2e = widths[0]
//         h_l = relu(h_{l-1} W_l + b_l)                     W_l: [widths[l-1], widths[l]]
//   z    = concat(gmf, h_L) w_out + b_out                   logit per example
//   loss = mean(binary cross-entropy(sigmoid(z), label))
// Backward is hand-derived; embedding gradients are scatter-adds into zero tables (dense, as a
// data-parallel step all-reduces them). MLPerf 0.6's sizes (ml-20m: 138,493 users, 26,744 items,
// k = 64, widths 256-256-128-64, batch 98,304 on 32 cores) are settings; the defaults are small.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/zoo/annotations.h"
#include "core/zoo/training.h"
#include "core/zoo/zoo.h"

namespace shardscope {

struct NcfConfig {
  int64_t batch = 64;
  int64_t users = 64;
  int64_t items = 32;
  int64_t factors = 8;                         // k: GMF embedding width
  std::vector<int64_t> widths = {16, 16, 8};  // MLP tower; widths[0] = 2 x its embedding width
  Optimizer optimizer = Optimizer::kAdam;
  double learning_rate = 1e-3;
  PrimitiveType param_type = PrimitiveType::kF32;
  AnnotationSet annotations = AnnotationSet::kDataParallel;  // none | data-parallel
  int64_t mesh_x = 4, mesh_y = 1;
};
Result<std::unique_ptr<Module>> BuildNcf(const NcfConfig& config);

// The zoo entry of this family: "ncf".
void AddNcfModels(std::vector<ZooModel>& models);

}  // namespace shardscope
