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

// The per-device dot result (shape `in.local`) computed as a windowed loop, or nullopt when the
// windowed form does not apply: windowed einsum off (threshold < 0), neither operand's plan is one
// all-gather of one whole dimension, or the gathered operand is under the threshold. Errors are
// reshard failures of the other operand.
std::optional<Result<Instruction*>> TryWindowedDot(SpmdContext& ctx, const Instruction& dot, const WindowedDotInput& in);

}  // namespace shardscope::spmd
