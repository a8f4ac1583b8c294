// One dense Transformer layer (GSPMD §5.1; the layer transformer.h documents), forward and
// hand-derived backward, written once for the models that stack it: the plain Transformer
// (transformer.cpp) and the pipelined one (pipelined_transformer.cpp), whose layers carry a leading
// stage dimension L in front of every tensor and weight (GSPMD §3.3: the layer "vectorised" over
// L, every dot batched over it).
//
// With `prefix` leading dims P (0 or more), the tensors are
//   x, residuals   [P..., B, S, M]       ln scales  [P..., M]
//   W_qkv          [P..., 3, M, N, D]    qkv        [P..., B, S, 3, N, D]
//   W_o            [P..., N, D, M]       scores     [P..., B, N, S, T]
//   W_in           [P..., M, H]          W_out      [P..., H, M]
// Instructions are created in the same order and with the same names for every prefix, in the
// builder's current scope (the caller opens "layer<i>" / "backward/layer<i>").
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/zoo/annotations.h"
#include "core/zoo/training.h"

namespace shardscope::zoo {

struct TransformerBlockConfig {
  int64_t heads = 8;     // N
  int64_t head_dim = 16; // D
  bool layernorm = true;
  int64_t prefix = 0;    // leading batch dims in front of every tensor and weight
};

// The weights of one layer (values in the activation type; gradients accumulate into `grad`).
struct TransformerBlockWeights {
  Weight* ln1 = nullptr;  // only with layernorm
  Weight* wqkv = nullptr;
  Weight* wo = nullptr;
  Weight* ln2 = nullptr;  // only with layernorm
  Weight* wi = nullptr;
  Weight* wout = nullptr;
};

// What backward needs from forward, and the layer's output.
struct TransformerBlockSaved {
  Instruction* x = nullptr;
  LayerNormSaved ln1, ln2;
  Instruction *h1 = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *p = nullptr, *ctx = nullptr;
  Instruction *x1 = nullptr, *h2 = nullptr, *hid = nullptr, *relu = nullptr;
  Instruction* out = nullptr;
};

// Annotates an activation with a Table 1 column; `expand` maps the column's logical dims mapping
// onto the instruction's dims after the prefix (nullptr: as written).
using Table1Hook =
    std::function<void(Instruction* inst, Table1Tensor tensor, const std::function<Dims(const Dims&)>& expand)>;

TransformerBlockSaved TransformerBlockForward(Net& net, Instruction* x, const TransformerBlockWeights& w,
                                              const TransformerBlockConfig& c, const Table1Hook& annotate);
// Returns the gradient with respect to the layer's input; accumulates every weight's gradient.
Instruction* TransformerBlockBackward(Net& net, const TransformerBlockSaved& s, TransformerBlockWeights& w,
                                      Instruction* dy, const TransformerBlockConfig& c);

}  // namespace shardscope::zoo
