// The Transformer of transformer.h pipelined the GSPMD way (§3.3): pipelining reduced to sharding.
//
// The layers are stacked: every weight gets two leading dims [L, R, ...] — L pipeline stages and R
// layers per stage — and each layer's computation is "vectorised" over L (the attention and FFN
// blocks of transformer.h with one leading dim: every dot batched over L). Microbatches flow through a *shifting buffer*
// state[L, mb, S, M] inside a while loop: each iteration shifts the buffer one stage along L,
// stage 0 takes the next microbatch, every stage runs its layers, and the last stage's result is
// written to the output buffer. Annotating L as sharded over the mesh axis "L" puts one stage on
// each group of devices; the shift is then a single collective-permute per iteration. The other
// mesh axes shard as GSPMD Table 1's X / Y annotations do, except that weights are not sharded over
// X (§5.2: X is data parallelism over the microbatch).
//
// Schedules (setting "schedule"):
//   gpipe     stage l holds layers l*R .. l*R + R - 1 and applies all R per iteration; the shift is
//             pad + slice (state padded by one row in front of L, the last row dropped);
//             N + L - 1 iterations (L - 1 of them the bubble).
//   circular  layers are assigned round-robin (stage l holds layers l, l + L, l + 2L, ...; the R
//             dim is "the layers within a device"); a microbatch circulates R times through the
//             stages, one layer per visit; the shift is a rotation, concatenate(state[L-1:],
//             state[:L-1]), so the last stage's result reaches stage 0, which keeps it in a small
//             buffer until that microbatch's next round. N*R + L - 1 iterations; needs N >= L.
//             Each stage picks its round's weights with a gather over R (batched over L).
// Training: the loss is computed on all outputs after the loop; a backward loop runs the
// iterations in reverse with the gradient shifted the other way (slice + pad, or the reverse
// rotation) and accumulates the stacked weights' gradients; the optimizer step follows.
// Rematerialisation (setting "remat", GPipe's choice): forward keeps only every stage's input per
// iteration and backward recomputes the layers from it; off, forward keeps every activation
// backward needs, per iteration.
//
// The model computes exactly what BuildTransformer (transformer.h) computes for the same layers
// on the concatenated batch (layer PipelinedLayerIndex(l, r) at weight slot [l, r]; microbatch n
// holding batch rows n*mb .. n*mb + mb - 1), which the tests check numerically.
//
// Names: parameters "x" [N, mb, S, M], "target", "stacked_<weight>" [L, R, ...] (and "_m", "_v"
// for Adam); the loops are "forward" and "backward" (computations forward_body / forward_cond,
// backward_body / backward_cond); the shift is named "shift" (pad "shift_pad", or the rotation's
// slices "rotate_last" / "rotate_rest").
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/zoo/annotations.h"
#include "core/zoo/training.h"
#include "core/zoo/zoo.h"

namespace shardscope {

enum class PipelineSchedule : uint8_t { kGPipe, kCircular };
std::string_view PipelineScheduleName(PipelineSchedule s);  // "gpipe", "circular"

struct PipelinedTransformerConfig {
  int64_t stages = 4;        // L
  int64_t microbatches = 4;  // N
  int64_t microbatch = 2;    // mb: rows of the batch per microbatch
  int64_t seq = 8;           // S
  int64_t model = 32;        // M
  int64_t heads = 4;         // N (heads)
  int64_t head_dim = 8;      // D
  int64_t hidden = 64;       // H
  int64_t layers = 8;        // a multiple of stages
  PipelineSchedule schedule = PipelineSchedule::kGPipe;
  bool remat = true;
  bool layernorm = true;
  bool backward = true;
  Optimizer optimizer = Optimizer::kSgd;  // needs backward
  double learning_rate = 1e-3;
  PrimitiveType param_type = PrimitiveType::kF32;
  PrimitiveType act_type = PrimitiveType::kF32;
  AnnotationSet annotations = AnnotationSet::kFinalized;  // Table 1 on X / Y; none: no annotation at all
  int64_t mesh_x = 1, mesh_y = 1;                          // the mesh is (L = stages, X, Y)
};

Result<std::unique_ptr<Module>> BuildPipelinedTransformer(const PipelinedTransformerConfig& config);

// The layer of the unpipelined stack whose weights sit at stage `stage`, slot `slot` of the
// stacked weights: stage * R + slot (gpipe) or slot * L + stage (circular).
int64_t PipelinedLayerIndex(const PipelinedTransformerConfig& config, int64_t stage, int64_t slot);
// Loop iterations of the forward (and of the backward) pass: N + L - 1 or N * R + L - 1.
int64_t PipelineIterations(const PipelinedTransformerConfig& config);

// The zoo entry of this family: "pipelined-transformer".
void AddPipelinedTransformerModels(std::vector<ZooModel>& models);

}  // namespace shardscope
