// Depth extrapolation: a model made of identical blocks repeated along a depth setting (the
// Transformer's layers) is evaluated at two small depths and its figures extended linearly to the
// full depth. Step time, compute, communication and idle time, bytes, FLOPs and peak memory of a
// training step all grow by the same amount per block once the blocks are identical (the forward
// activations kept for the backward pass, the weights and their optimizer state, each layer's
// collectives), so two points fix the line; the search's tests check the extrapolation against a
// full-depth simulation. Which setting is the depth, and the smallest step that repeats the
// structure (the MoE Transformer alternates dense and MoE layers: 2), is known per zoo model here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace shardscope::search {

struct DepthRule {
  std::string parameter;  // "layers"
  int64_t unit = 1;       // depths are multiples of this
  // The smallest depth, in units, from which each added unit adds the same figures: the two
  // evaluated depths are `linear_from` and `linear_from + 1` units. 1 where the first block's
  // extra work (the embedding, the loss) does not change with the depth; 2 where one block alone
  // is a special case (the pipelined Transformer with one layer per stage).
  int64_t linear_from = 2;
};

// The depth rule of a zoo model given its settings (`setting` returns a setting's value), or
// nullopt when the model has no repeated blocks the search knows of.
std::optional<DepthRule> DepthRuleOf(std::string_view model, const std::function<std::string(std::string_view)>& setting);

}  // namespace shardscope::search
