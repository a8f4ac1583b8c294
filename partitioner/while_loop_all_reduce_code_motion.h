// WhileLoopAllReduceCodeMotion (XLA's pass of that name): sinks out of a while loop the all-reduces
// whose results the loop only accumulates into a carried buffer. A post-partitioning pass on the
// SPMD program (app/pipeline runs it right after the partitioner).
//
// Before (the pipelined model's backward loop: each iteration's weight gradient is summed over the
// data-parallel axis, then added to the gradient accumulator):
//
//   while:  g = all-reduce(partial)          acc' = acc + reshape(g)     (every iteration)
//
// After: the loop accumulates the partial gradient and the sum over the devices runs once:
//
//   acc0' = 0
//   while:  acc' = acc + reshape(partial)
//   acc_final = acc0 + all-reduce(acc_final')
//
// Since the all-reduce is linear, sum_t T(all-reduce(p_t)) = all-reduce(sum_t T(p_t)) for the
// structural ops T between it and the accumulation, so the result is the same (up to the order of
// floating-point additions).
//
// A carried element k is rewritten when, in the body:
//   - the root tuple's operand k is a chain of accumulations ending in the body parameter's
//     element k (the buffer): add(chain, contribution), or scatter(chain, indices, contribution)
//     whose combiner adds and whose indices hold the same value on every device of the reduction's
//     groups (a small per-device analysis of partition-id; XLA asks its replication analysis the
//     same question of dynamic-update-slice indices);
//   - each contribution is a tree of reshape, transpose, bitcast, copy, slice, broadcast,
//     concatenate and add over sum all-reduces with the same participant groups, used by nothing
//     else;
//   - the buffer is read by nothing but the chain, and the loop condition does not read element k.
// The new all-reduce takes the first removed one's attributes (groups, reducer) and a fresh
// channel id. An initial value other than zero is added after the reduction (the loop then starts
// from zero). Loops whose body another instruction also calls, or whose result is used other than
// through get-tuple-element, are left alone. What is left in loops is reported with the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope {

// One accumulation buffer whose all-reduces were moved out of its loop.
struct SunkAllReduce {
  std::string while_loop;            // the while instruction
  std::string computation;           // where the while is
  int64_t tuple_index = 0;           // the buffer's index in the carried tuple
  std::string accumulation;          // "add" or "scatter-add"
  std::vector<std::string> removed;  // the all-reduces taken out of the body
  std::string all_reduce;            // the one inserted after the loop ("" when the result is unused)
  int64_t bytes_per_device = 0;      // of the buffer
  std::string replica_groups;        // text form
};

// An all-reduce left inside a loop body, and why.
struct KeptAllReduce {
  std::string all_reduce;
  std::string while_loop;
  std::string reason;
};

struct WhileLoopAllReduceCodeMotionResult {
  bool changed = false;
  std::vector<SunkAllReduce> sunk;
  std::vector<KeptAllReduce> kept;
  // "moved 12 all-reduces out of 1 loop (6 buffers); 20 stay in loops"
  std::string Summary() const;
};

// XLA's pass name.
inline constexpr const char* kWhileLoopAllReduceCodeMotionName = "while-loop-all-reduce-code-motion";

// Rewrites `module` (an SPMD program) in place.
Result<WhileLoopAllReduceCodeMotionResult> WhileLoopAllReduceCodeMotion(Module& module);

// Runs the pass on a partitioner result and keeps its record consistent: the removed all-reduces
// leave partition.collectives and origin_map, the inserted ones join them (origin: the original
// while loop, reason "while-loop all-reduce code motion: ...").
Result<WhileLoopAllReduceCodeMotionResult> WhileLoopAllReduceCodeMotionOf(PartitionResult& partition);

}  // namespace shardscope
