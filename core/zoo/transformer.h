// The dense Transformer of GSPMD §5.1, forward and (hand-derived) backward, optional optimizer
// step, N stacked layers, with the annotation sets of GSPMD Table 1 applied through MeshSplit on a
// 2-D mesh (X, Y).
//
// Transformer layer (pre-norm; GSPMD §5.1 names: B batch, S sequence, M model, N heads, D head
// dim, H feed-forward hidden):
//   h1  = LayerNorm(x)                          x: [B,S,M]            (annotated: Table 1 "BSM")
//   qkv = einsum(h1, W_qkv)                     W_qkv: [3,M,N,D]      (annotated: "MND")
//                                               qkv: [B,S,3,N,D]      (annotated: "BSND")
//   q,k,v = qkv[:,:,0|1|2]                      [B,S,N,D] each
//   p   = softmax(q·k / sqrt(D)) over keys      [B,N,S,S]
//   ctx = p·v                                   [B,N,S,D]
//   x1  = x + einsum(ctx, W_o)                  W_o: [N,D,M]          (annotated: "NDM")
//   h2  = LayerNorm(x1)
//   hid = einsum(h2, W_in)                      W_in: [M,H], hid: [B,S,H] (annotated: "MH", "BSH")
//   x2  = x1 + einsum(relu(hid), W_out)         W_out: [H,M]          (annotated: "HM")
// W_Q, W_K and W_V are stored as one fused weight W_qkv (the leading 3 is never sharded), so the
// Table 1 column "W_Q, W_K, W_V" is one annotation and a layer carries exactly the 7 annotations
// the paper counts: W_qkv, W_o, W_in, W_out, BSM (the layer input), BSND (qkv), BSH (hid).
// The loss is 0.5 * mean((out - target)^2); backward gives the exact gradient of that loss for
// every weight (LayerNorm scales included); an optimizer step returns the updated weights. The
// layer's forward and backward are transformer_block.h, shared with the pipelined Transformer.
//
// Names: parameters are "x", "target", "layer<i>_<weight>" ("layer0_wqkv", "layer0_wi", ...);
// instructions carry metadata op_name scopes ("layer0/attention/qkv", "layer0/ffn/wi",
// "backward/layer0/ffn/wi", "optimizer/layer0/wi", "loss/...") and are named after them
// ("layer0_ffn_wi").
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

struct TransformerConfig {
  int64_t batch = 8;      // B
  int64_t seq = 16;       // S
  int64_t model = 64;     // M
  int64_t heads = 8;      // N
  int64_t head_dim = 16;  // D
  int64_t hidden = 256;   // H
  int64_t layers = 1;
  bool layernorm = true;
  bool backward = false;
  Optimizer optimizer = Optimizer::kNone;  // needs backward
  double learning_rate = 1e-3;
  PrimitiveType param_type = PrimitiveType::kF32;  // weights and optimizer state
  PrimitiveType act_type = PrimitiveType::kF32;    // activations (weights are converted when it differs)
  AnnotationSet annotations = AnnotationSet::kFinalized;
  int64_t mesh_x = 4, mesh_y = 4;
};
Result<std::unique_ptr<Module>> BuildTransformer(const TransformerConfig& config);

// The zoo entries of this family: "transformer-layer" and "transformer".
void AddTransformerModels(std::vector<ZooModel>& models);

}  // namespace shardscope
