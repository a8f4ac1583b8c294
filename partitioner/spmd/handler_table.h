// The SPMD handlers, one per op family, in one explicit table keyed by opcode (as propagation's
// rules are in propagation/rules.h). Each family's file has a Register...Handlers function that
// adds its handlers; SpmdHandlers() builds the table once from all of them. An op without a
// handler is partitioned by the replicated fallback.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"

namespace shardscope::spmd {

class SpmdContext;

// Partitions one original instruction: reshards its operands as the op needs, emits the
// per-device op and records the result's PartitionedHlo in the context.
using Handler = Status (*)(SpmdContext& ctx, const Instruction& inst);

// A pattern of several instructions partitioned as one (GSPMD §4.6 pre-processing: Pad + Slice
// merged, the rotation Concat(a[k:], a[:k]) recognised). The driver asks `absorbs` of every
// instruction: true for an inner part of a pattern rooted at its (only) user, which then gets no
// value of its own; it asks `partition` of every other instruction before its op family's
// handler: nullopt when the instruction roots no such pattern.
struct PatternHandler {
  const char* name;
  bool (*absorbs)(const Instruction& inner);
  std::optional<Status> (*partition)(SpmdContext& ctx, const Instruction& root);
};

class HandlerTable {
 public:
  void Add(std::initializer_list<Opcode> ops, Handler handler);
  // Ops the IR keeps as opcode text (Opcode::kGeneric: cholesky, triangular-solve, ...).
  void AddGeneric(std::initializer_list<const char*> opcode_texts, Handler handler);
  void AddPattern(PatternHandler pattern) { patterns_.push_back(pattern); }
  // nullptr: no dedicated handler (the replicated fallback applies).
  Handler Find(Opcode op) const;
  // The handler of `inst`'s op, by its opcode text for generic ops.
  Handler Find(const Instruction& inst) const;
  const std::vector<PatternHandler>& patterns() const { return patterns_; }
  // Some pattern absorbs `inst` into the pattern its user roots.
  bool Absorbed(const Instruction& inst) const;

 private:
  std::unordered_map<Opcode, Handler> by_opcode_;
  std::unordered_map<std::string, Handler> by_generic_text_;
  std::vector<PatternHandler> patterns_;
};

// The op families (handlers/*.cpp).
void RegisterElementwiseHandlers(HandlerTable& table);    // parameter, constant, iota, elementwise ops
void RegisterShapeHandlers(HandlerTable& table);          // broadcast, transpose, reshape
void RegisterReduceHandlers(HandlerTable& table);         // reduce
void RegisterControlFlowHandlers(HandlerTable& table);    // tuple, get-tuple-element, custom-call, while, call, conditional
void RegisterFormattingHandlers(HandlerTable& table);     // concatenate, reverse, dynamic-(update-)slice, sort,
                                                          // cholesky, triangular-solve
void RegisterDotHandlers(HandlerTable& table);            // dot
void RegisterWindowedHandlers(HandlerTable& table);       // convolution, reduce-window, pad, slice
void RegisterGatherScatterHandlers(HandlerTable& table);  // gather, scatter
void RegisterShiftPatterns(HandlerTable& table);          // slice(pad(x)), concatenate(a[k:], a[:k])
void RegisterTopKPattern(HandlerTable& table);            // sort then the first k along a sharded dim
void RegisterIoAndTokenHandlers(HandlerTable& table);    // after-all, infeed, outfeed, partition-id,
                                                          // collective-permute (manual code)

// Every family's handlers, built on first use.
const HandlerTable& SpmdHandlers();

// A block-scaled dot (custom-call "__op$block_scaled_dot": lhs, rhs, lhs_scale, rhs_scale; the
// contracting dim the last of each operand, a leading batch dim at rank 3), partitioned by the dot
// handler with each scale split like its operand (handlers/dot.cpp).
Status PartitionBlockScaledDot(SpmdContext& ctx, const Instruction& cc);

// The handler for ops without a dedicated one: replicate the operands, run the op whole, reshard
// the result to its sharding. Always correct; the cost shows up as all-gathers. Handlers fall
// back to it for configurations they do not cover.
Status PartitionWithFallback(SpmdContext& ctx, const Instruction& orig);

}  // namespace shardscope::spmd
