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
// every weight (LayerNorm scales included); an optimizer step returns the updated weights.
//
// With a vocabulary (vocab = V > 0; GSPMD §5.1: "the vocabulary size is 32000") the model is the
// paper's language model: token ids and labels [B,S] s32 instead of x and target, and
//   onehot = (iota over V == ids)            [B,S,V]  act type   (annotated: VocabularyTensor BSV)
//   x      = einsum(onehot, E)               E: [V,M] (annotated: kEmbedding; a weight like the others)
//   h      = the layers above
//   logits = f32(einsum(h, W_s))             W_s: [M,V] (annotated: kSoftmaxWeight), logits BSV
//   loss   = softmax cross-entropy against onehot(labels), mean over the B*S tokens (f32)
// and backward from dlogits = (softmax - onehot(labels)) / (B*S), in the activation type: dW_s,
// dh, the layers, and dE = onehot^T . dx. Without backward the root is the f32 logits.
//
// Names: parameters are "x", "target" (vocab: "ids", "labels", "embedding_table" first and
// "softmax_weight" after the layers), "layer<i>_<weight>" ("layer0_wqkv", "layer0_wi", ...);
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
  int64_t vocab = 0;      // V: 0 = MSE on [B,S,M] inputs; > 0 = embedding, softmax, cross-entropy
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

namespace zoo {

// ---- the Transformer layer's blocks, shared with the MoE Transformer (moe_transformer.h) and the
// pipelined Transformer (pipelined_transformer.h) ----
// Each forward keeps in its block what the backward needs; scopes and names are those above
// ("ln1", "attention", "residual1"; "ln2", "ffn", "residual2"; backward "attention", "ffn").
// The tensors may carry leading dims P in front of the layer's own (x [P..., B, S, M], W_qkv
// [P..., 3, M, N, D], ...): layers stacked along P run "vectorised" over them, every dot batched
// over P (GSPMD §3.3, the pipeline's stage dim); the same instructions and names for any P.

struct AttentionBlock {
  Weight* ln = nullptr;  // pre-norm scale (nullptr without LayerNorm)
  Weight* wqkv = nullptr;
  Weight* wo = nullptr;
  NormSaved norm;
  Instruction *x = nullptr, *h = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *p = nullptr, *ctx = nullptr;
};
struct FfnBlock {
  Weight* ln = nullptr;
  Weight* wi = nullptr;
  Weight* wout = nullptr;
  NormSaved norm;
  Instruction *x = nullptr, *h = nullptr, *hid = nullptr, *relu = nullptr;
};

// Weights "ln1_scale" [M], "wqkv" [3,M,N,D], "wo" [N,D,M]; annotated per the Table 1 policy.
void AddAttentionWeights(const WeightAdder& add, PrimitiveType P, int64_t M, int64_t N, int64_t D, bool layernorm,
                         AttentionBlock* a);
void AnnotateAttentionWeights(Annotator& ann, const AttentionBlock& a);
// Weights "ln2_scale" [M], "wi" [M,H], "wout" [H,M].
void AddFfnWeights(const WeightAdder& add, PrimitiveType P, int64_t M, int64_t H, bool layernorm, FfnBlock* f);
void AnnotateFfnWeights(Annotator& ann, const FfnBlock& f);

// LayerNorm before a block (the input itself when `ln` is null), and its backward (accumulating
// the scale's gradient).
Instruction* PreNorm(Net& net, Weight* ln, Instruction* x, NormSaved* saved);
Instruction* PreNormBackward(Net& net, Weight* ln, const NormSaved& saved, Instruction* dy);

// x + attention(LN(x)) for x [B,S,M] (annotates qkv as BSND).
Instruction* AttentionForward(Net& net, Annotator& ann, AttentionBlock& a, Instruction* x);
// The gradient with respect to the block's input, given the gradient of its output.
Instruction* AttentionBackward(Net& net, AttentionBlock& a, Instruction* dy);
// x + W_out relu(W_in LN(x)) (annotates the hidden activation as BSH).
Instruction* FfnForward(Net& net, Annotator& ann, FfnBlock& f, Instruction* x);
Instruction* FfnBackward(Net& net, FfnBlock& f, Instruction* dy);

}  // namespace zoo

}  // namespace shardscope
