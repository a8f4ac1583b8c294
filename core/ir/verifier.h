// The verifier: a module whose shapes or attributes don't agree is rejected with a message naming
// the instruction ("computation/instruction: expected shape f32[8,16] for dot, found f32[8,8]").
#pragma once

#include "core/ir/ir.h"
#include "core/base/status.h"

namespace shardscope {

struct VerifyOptions {
  // Check shardings against shapes (tile rank matches, device ids in range of num_partitions when
  // known, tuple shardings match tuple shapes).
  bool check_shardings = true;
};

// Checks: an entry exists; every computation has a root; operand counts per opcode; called
// computations present with the right arity; parameter numbers dense; inferred shape == declared
// shape (layouts ignored); attributes in range (dimension indices, slice bounds, ...); shardings
// consistent with shapes.
Status VerifyModule(const Module& module, const VerifyOptions& options = {});

// Checks one sharding against a shape as VerifyModule checks an instruction's: tile rank matches
// the shape, device ids lie within num_partitions (when > 1), tuple shardings match tuple shapes.
// `where` begins the message.
Status VerifySharding(const HloSharding& sharding, const Shape& shape, int64_t num_partitions, const std::string& where);

}  // namespace shardscope
