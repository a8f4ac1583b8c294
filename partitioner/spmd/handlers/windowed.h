// What the windowed handlers (windowed.cpp) share with the shift patterns (shift.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"

namespace shardscope::spmd {

class SpmdContext;

// Partitions `op`, whose result is `operand` padded by `padding` (low and high may be negative:
// rows dropped; interior padding as base dilation) with the scalar `pad_value`, as a windowed op:
// the output keeps its sharding on every dimension, windowed dimensions get their rows by halo
// exchange. The pad handler and the merged slice(pad(x)) of the shift patterns. `fallback` runs
// when the shardings cannot be partitioned this way (before anything is emitted).
Status PartitionPadded(SpmdContext& ctx, const Instruction& op, const Instruction& operand,
                       const std::vector<PaddingDim>& padding, const Instruction& pad_value, const std::string& what,
                       const std::function<Status()>& fallback);

}  // namespace shardscope::spmd
