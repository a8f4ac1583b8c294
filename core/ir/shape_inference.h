// Shape inference for every modelled opcode: the result shape an instruction must have given its
// operands and attributes. Used by the verifier and by the builders.
#pragma once

#include <vector>

#include "core/ir/ir.h"
#include "core/base/status.h"

namespace shardscope {

// Infers the shape of `inst` from its operands' shapes and its typed attributes. Returns an Error
// naming the problem (not the instruction; the verifier prefixes that). For kGeneric and ops whose
// result cannot be inferred from operands alone (parameter, constant, iota, custom-call, rng,
// infeed, recv, ...), returns the instruction's own shape.
Result<Shape> InferShape(const Instruction& inst);

}  // namespace shardscope
