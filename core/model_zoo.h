// The model zoo: modules built in code — an MLP and the dense Transformer layer of GSPMD §5.1,
// forward and (hand-derived) backward, optional SGD/Adam weight update, N stacked layers, with the
// annotation sets of GSPMD Table 1 applied through MeshSplit on a 2-D mesh (X, Y).
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
// Names: parameters are "x", "target", "layer<i>_<weight>" ("layer0_wqkv", "layer0_wi", ...);
// instructions carry metadata op_name scopes ("layer0/attention/qkv", "layer0/ffn/wi",
// "backward/layer0/ffn/wi", "optimizer/layer0/wi", "loss/...") and are named after them
// ("layer0_ffn_wi").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir.h"
#include "core/mesh.h"
#include "core/status.h"

namespace shardscope {

enum class AnnotationSet : uint8_t { kNone, kAttempt1, kAttempt2, kFinalized };
std::string_view AnnotationSetName(AnnotationSet s);                  // "none", "attempt1", ...
std::optional<AnnotationSet> AnnotationSetFromName(std::string_view s);  // also "2d-attempt-1" etc.

enum class Optimizer : uint8_t { kNone, kSgd, kAdam };
std::string_view OptimizerName(Optimizer o);
std::optional<Optimizer> OptimizerFromName(std::string_view s);

// The tensors (columns) of GSPMD Table 1.
enum class Table1Tensor : uint8_t { kWqkv, kWo, kWin, kWout, kBSM, kBSND, kBSH };
std::string_view Table1TensorName(Table1Tensor t);  // "W_QKV (MND)", "BSM", ...
// The dims mapping (mesh axis per logical tensor dim: 0 = X, 1 = Y, -1 = not split) of a Table 1
// cell, over the tensor's logical dims as Table 1 writes them (MND, NDM, MH, HM, BSM, BSND, BSH).
// Empty for AnnotationSet::kNone.
std::vector<int64_t> Table1DimsMapping(AnnotationSet set, Table1Tensor tensor);

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

// ---- registry ------------------------------------------------------------------------------------------

struct ZooParameter {
  std::string name;           // "batch"
  std::string default_value;  // "8"
  std::string description;
};
struct ZooModel {
  std::string name;  // "transformer-layer"
  std::string description;
  std::vector<ZooParameter> parameters;
};
using ZooOverrides = std::map<std::string, std::string, std::less<>>;

// "mlp", "transformer-layer" (one layer, forward by default), "transformer" (stacked training step).
std::vector<ZooModel> ZooList();
// Builds a model with parameter overrides ({"layers", "64"}, {"annotations", "attempt2"}, ...).
// Unknown models or parameters and malformed values give an Error listing what is accepted.
Result<std::unique_ptr<Module>> ZooBuild(std::string_view name, const ZooOverrides& overrides = {});
// The mesh (X = mesh_x, Y = mesh_y) a zoo model's annotations refer to.
Result<DeviceMesh> ZooMesh(std::string_view name, const ZooOverrides& overrides = {});
// The example the GUI opens on: "transformer-layer" (4x4 mesh, 2D finalized annotations).
inline constexpr std::string_view kZooDefaultExample = "transformer-layer";

}  // namespace shardscope
