// What the pieces of a resharding all-to-all carry, in the tensor's own terms: an all-to-all that
// moves a tensor's sharding from dim `from` (sharded before: the pieces are concatenated along it)
// to dim `to` (sharded after: the buffer is split along it) sends, from the group member holding
// tile i of `from` to the member that will hold tile j of `to`, the block [tile i of `from`] x
// [tile j of `to`] (reshard.cpp: members ordered by their tile along `from`, chunk j to member j).
//
// Named dims make this readable: a tensor whose dims carry one letter each in the frontend
// attribute shardscope.dims="GECM" (the model zoo's MoE tensors use GShard's letters: G groups,
// E experts, C capacity, M model, ...) gets "tokens of group 3 for expert 5" for an MoE dispatch
// (G -> E), "outputs of expert 3 for group 5" for the combine (E -> G), and "G 3, E 5" style
// labels otherwise; unnamed dims are called "dim 0", "dim 1".
//
// The teaching panel puts these labels on the all-to-all's arrows (WalkthroughOptions::piece_names).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/sharding.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope {

// The frontend attribute naming a tensor's dims, one letter per dim ("GECM").
inline constexpr std::string_view kDimsAttribute = "shardscope.dims";
// The letters of `inst`'s dims from kDimsAttribute; "" when absent or not one letter per dim.
std::string DimensionLetters(const Instruction& inst);

struct AllToAllPieces {
  std::string tensor;        // the original tensor resharded
  std::string letters;       // its dims' letters ("" when unnamed)
  int64_t from_dim = -1;     // sharded before (pieces concatenated along it)
  int64_t to_dim = -1;       // sharded after (buffer split along it)
  int64_t members = 0;       // group size
  std::string role;          // "dispatch" (groups -> experts), "combine" (experts -> groups), or ""
  std::string summary;       // one sentence: what moves where
  // pieces[i][j]: what the member at group position i sends to the member at position j
  // (i == j: the block it keeps).
  std::vector<std::vector<std::string>> pieces;
};

// The sharding a tensor of the original module has (after propagation).
using ShardingLookup = std::function<std::optional<HloSharding>(const Instruction&)>;

// For an all-to-all the partitioner inserted to reshard (reason "reshard A -> B"): which tensor of
// `original` it moves (an operand of the collective's origin whose sharding is A, or the origin
// itself when its sharding is B) and what each piece carries. An error for any other collective,
// and for groups larger than `max_members` (members² names).
Result<AllToAllPieces> DescribeAllToAllPieces(const InsertedCollective& collective, const Module& original,
                                              const ShardingLookup& sharding_of, int64_t max_members = 128);

}  // namespace shardscope
