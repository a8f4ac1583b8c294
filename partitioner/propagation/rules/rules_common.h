// Helpers shared by the per-family rule files (internal to the partitioner library).
#pragma once

#include <optional>

#include "partitioner/propagation/rules.h"
#include "partitioner/hlo_sharding_util.h"

namespace shardscope::prop::rules {

// Forward rule used by ops without a dedicated one: elementwise ops merge every operand's sharding
// (when partial shardings may combine), others copy the representative operand's sharding.
bool DefaultForward(Instruction& inst, RuleContext& ctx);
// Backward rule used by ops without a dedicated one: same-shaped operands take the user's sharding.
std::optional<HloSharding> DefaultBackward(const Instruction& operand, const Instruction& user,
                                           const HloSharding& user_sharding, RuleContext& ctx);
// The sharding of `inst` replicated per tuple element when `inst` is tuple-shaped.
HloSharding MaybeTuple(const Instruction& inst, const HloSharding& s);
// Index of the first use of `operand` by `user`, -1 if none.
int64_t OperandIndex(const Instruction& user, const Instruction& operand);

}  // namespace shardscope::prop::rules
