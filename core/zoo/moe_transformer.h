// GShard's sparse mixture-of-experts Transformer (../shared/papers/002_*.txt; GSPMD §5.4 and §5.5,
// Tables 6 and 7, Figure 8): Transformer layers whose feed-forward block is, every other layer (or
// in every layer), a mixture of E experts with top-2 gating.
//
// MoE feed-forward block (GShard names: G groups, S tokens per group, E experts, C capacity,
// M model, H hidden):
//   inputs   = reshape(LN(x), [G, S, M])                  the batch's N = B*seq tokens in G groups
//   gates    = softmax(einsum("GSM,ME->GSE", inputs, wg))  gating computed in f32
//   top-2    each token's two largest gates; a token goes to an expert only while the expert has
//            room in the token's group: capacity C = 2N/(G*E) (rounded up; "capacity" overrides),
//            positions counted in token order (first choices first, then second choices); a token
//            over capacity is dropped for that expert (it skips the layer if both are dropped)
//   combine  [G,S,E,C]: the kept gates, normalised by gate1 + gate2, at (expert, position);
//            dispatch: 1 at the same places
//   aux loss l_aux = (1/E) sum_e (c_e/S) m_e per group (c_e: tokens whose first choice is e, m_e:
//            mean gate of e), averaged over groups; the loss adds aux_loss_weight * l_aux per layer
//   dispatched = einsum("GSEC,GSM->EGCM", dispatch, inputs)
//   h        = relu(einsum("EGCM,EMH->EGCH", dispatched, wi))
//   out      = einsum("EGCH,EHM->EGCM", h, wo)
//   y        = einsum("GSEC,EGCM->GSM", combine, out); x + reshape(y, [B, seq, M])
// GShard's random routing of the second expert is left out, so the model is deterministic.
//
// Annotation sets ("annotations"):
//   gshard  the paper's: a 1-D mesh (mesh_y = 1); the groups (batch) split over it in the dense
//           layers and the gating, the experts E in the expert FFNs (wi, wo, dispatched, h, out),
//           the gating weights replicated. The partitioner switches the sharded dim from G to E
//           (all-to-all) before the experts and back after them (Figure 8a).
//   hybrid  §5.5: a 2-D mesh (X, Y); dense layers as Table 1 "2D finalized"; in MoE layers E on X
//           and H on Y (N on Y in attention, as Table 1): all-to-all on X, all-gather of M along Y
//           before the experts and reduce-scatter after them (Figure 8b).
//   none
// The backward pass annotates each cotangent where its forward value is annotated (what
// differentiating a sharding constraint gives), so it switches back with all-to-alls too.
//
// Names: "layer<i>_wg" [M,E], "layer<i>_expert_wi" [E,M,H], "layer<i>_expert_wo" [E,H,M] beside
// the Transformer's attention and dense FFN weights; scopes "layer<i>/moe/gating", "layer<i>/moe/
// experts" ("layer1_moe_dispatched", "layer1_moe_expert_outputs_by_group", ...).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/zoo/training.h"
#include "core/zoo/zoo.h"

namespace shardscope {

enum class MoeAnnotations : uint8_t { kNone, kGShard, kHybrid };
std::string_view MoeAnnotationsName(MoeAnnotations a);

struct MoeTransformerConfig {
  int64_t batch = 8;      // B
  int64_t seq = 16;       // tokens per sequence
  int64_t model = 32;     // M
  int64_t heads = 4;      // N
  int64_t head_dim = 8;   // D
  int64_t hidden = 64;    // H (per expert, and of the dense FFNs)
  int64_t experts = 4;    // E
  int64_t layers = 2;
  bool all_moe = false;   // every layer MoE (else every other: dense, MoE, dense, ...)
  int64_t groups = 0;     // G; 0: the number of devices along X
  int64_t capacity = 0;   // C; 0: 2N/(G*E) rounded up
  double aux_loss_weight = 0.01;
  // Rematerialisation: the backward pass recomputes each layer's forward from the layer's input
  // (kept by the forward pass) instead of reading the forward's activations, which then die with
  // the forward pass: peak memory about one layer's activations instead of all of them, for one
  // more forward of compute. The recomputed ops sit in scopes "backward/layer<i>/remat".
  bool remat = false;
  bool layernorm = true;
  bool backward = true;
  Optimizer optimizer = Optimizer::kAdam;
  double learning_rate = 1e-3;
  PrimitiveType param_type = PrimitiveType::kF32;
  PrimitiveType act_type = PrimitiveType::kF32;
  MoeAnnotations annotations = MoeAnnotations::kGShard;
  int64_t mesh_x = 4, mesh_y = 1;
};
Result<std::unique_ptr<Module>> BuildMoeTransformer(const MoeTransformerConfig& config);
// The mesh the annotations refer to: 1-D (X) for gshard, (X, Y) otherwise.
Result<DeviceMesh> MoeMesh(const MoeTransformerConfig& config);

// The zoo entries of this family: "moe-layer" (one MoE layer, forward) and "moe-transformer".
void AddMoeTransformerModels(std::vector<ZooModel>& models);

}  // namespace shardscope
