// Windowed einsum (XLA's SpmdPartitionerOptions::threshold_for_windowed_einsum_mib; the
// "collective matmul" of TPU compilers): a dot whose plan all-gathers one operand along one
// dimension runs instead as a loop over the all-gather's group. Each device starts with its own
// window (shard) of that operand, multiplies it with the matching part of the other operand, and
// passes the window on to its ring neighbour with a collective-permute; after n steps it has seen
// every window. The transfer of the next window is independent of this step's product, so the two
// overlap (the simulator runs the permute on the communication stream beside the dot), and no
// device ever holds the whole gathered operand.
//
// The windowed dimension's label (dot.cpp's joint labels) decides what a step does with its result:
//   - a non-contracting dim of the windowed operand: the step's result is the output's window at
//     that dim, written in place (dynamic-update-slice) into the output;
//   - a contracting dim: the other operand is sliced to the window along its contracting dim and
//     the step's partial product is added to the output (windows that are padding are zero);
//   - a batch dim: both, the other operand sliced and the output written at the window.
// The loop runs n - 1 iterations (product, then permute) and the last window's product follows it,
// so n - 1 windows move, as many as the all-gather's pieces. Uneven shards: the windowed operand's
// padding is zeroed where it is contracted, the other operand is padded with zeros to n windows,
// and the output's padded windows are sliced off.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/ir/ir.h"
#include "partitioner/spmd/reshard.h"

namespace shardscope::spmd {

class SpmdContext;

struct WindowedDotInput {
  PartitionedHlo lhs, rhs;            // the dot's operands as they are
  HloSharding lhs_target, rhs_target;  // the shardings the chosen plan multiplies them in
  std::vector<int64_t> lhs_label, rhs_label;  // operand dim -> joint label (output dims are labels 0..out_rank-1)
  int64_t out_rank = 0;
  Shape local;  // the per-device dot result of the plan (before any reduction of sharded contracting dims)
};

// The loop TryWindowedDot would build for this plan: which operand travels, in how many windows,
// and its all-gathered size per device. nullopt when it would not build one.
struct WindowedChoice {
  bool is_rhs = false;
  int64_t windows = 0;
  int64_t gathered_bytes = 0;
};
std::optional<WindowedChoice> PlanWindowedDot(SpmdContext& ctx, const WindowedDotInput& in);

// The per-device dot result (shape `in.local`) computed as a windowed loop, or nullopt when the
// windowed form does not apply: windowed einsum off (threshold < 0), neither operand's plan is one
// all-gather of one whole dimension, the gathered operand is under the threshold, or its windows
// are more than SpmdOptions::windowed_einsum_max_iterations. Errors are
// reshard failures of the other operand.
std::optional<Result<Instruction*>> TryWindowedDot(SpmdContext& ctx, const Instruction& dot, const WindowedDotInput& in);

// The windowed reduce-scatter (XLA's windowed einsum over the output): a dot whose plan
// reduce-scatters its partial sums (both operands sharded along the contracting dims over the
// groups that then split one output dim) runs as a ring loop over the output's windows. At step
// t a device multiplies the operands' slices for window (position + t + 1) mod n, adds the
// product to the partial sums it received, and passes them on to its ring predecessor; after n
// steps it holds its own window, summed over the group. The transfers overlap the next products.
// Applies when windowed einsum is on, the groups have 2..max_iterations devices and the partial
// result is at least the threshold.
bool WindowedReduceScatterApplies(const SpmdContext& ctx, int64_t partial_bytes, int64_t windows);

struct WindowedReduceScatterInput {
  Instruction* lhs = nullptr;  // the operands as the plan multiplies them
  Instruction* rhs = nullptr;
  int64_t lhs_dim = -1, rhs_dim = -1;  // the operands' dims of the scattered output dim (-1: none)
  int64_t out_dim = 0;                 // the scattered output dim
  std::vector<std::vector<int64_t>> groups;  // the reduce-scatter's groups, device k ending with piece k
  Shape local;                         // the per-device partial result (whole along out_dim)
};
// The per-device result after the scatter: `local` with out_dim divided by the group size.
Instruction* WindowedReduceScatterDot(SpmdContext& ctx, const Instruction& dot, const WindowedReduceScatterInput& in);

}  // namespace shardscope::spmd
