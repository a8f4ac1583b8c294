// What a reduction computes: the reduction kind of a to_apply computation (all-reduce,
// reduce-scatter, reduce, reduce-window, scatter combiners) and its identity for every element
// type — one definition for the evaluator, the partitioner (masking padding, starting partial
// reductions) and the simulator.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/ir/ir.h"

namespace shardscope {

enum class ReductionKind : uint8_t { kSum, kProduct, kMin, kMax, kAnd, kOr, kXor };

// `c` is `p0 OP p1` (or `p1 OP p0`) over two scalar parameters for OP in add, multiply, minimum,
// maximum, and, or, xor: that kind, else nullopt.
std::optional<ReductionKind> MatchReduction(const Computation* c);
Opcode ReductionOpcode(ReductionKind kind);
std::string_view ReductionKindName(ReductionKind kind);  // "sum", "product", "min", ...

// The identity of `kind` over element type `t` as a scalar constant (exact text, so the s64/u64
// extremes are exact): 0 for sum/or/xor, 1 for product/and, the type's lowest value for max and
// its highest for min (±inf for floating types that have infinities; pred: false/true). nullopt
// where the type has none (sum or product over pred, min/max over a float type without infinity,
// any kind over a non-numeric type).
std::optional<Literal> ReductionIdentity(ReductionKind kind, PrimitiveType t);

}  // namespace shardscope
