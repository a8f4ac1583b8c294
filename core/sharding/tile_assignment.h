// Helpers shared by core/sharding.cpp and core/mesh.cpp: iota tile-assignment recognition,
// overflow-safe products and subgroup-type names. Standard library only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/sharding/sharding.h"

namespace shardscope {

// Largest tile assignment the parsers accept (and the constructors materialise). Bigger inputs are
// rejected with an Error instead of exhausting memory.
inline constexpr int64_t kMaxShardingDevices = int64_t{1} << 20;

// Product of `dims`; nullopt when a dim is negative or the product exceeds `limit`.
std::optional<int64_t> CheckedProduct(const std::vector<int64_t>& dims,
                                      int64_t limit = kMaxShardingDevices);

// True when `perm` is a permutation of 0..perm.size()-1.
bool IsPermutation(const std::vector<int64_t>& perm);

// An iota description: the devices are iota(product(reshape_dims)) reshaped to reshape_dims and
// transposed by perm (perm empty = identity).
struct IotaForm {
  std::vector<int64_t> reshape_dims;
  std::vector<int64_t> perm;
};

// Row-major device list of an iota description (empty if the description is invalid).
std::vector<int64_t> MaterializeIota(const IotaForm& form);

// Canonical form of an iota description, as XLA prints it: size-1 reshape dims dropped, dims that
// stay adjacent after the transpose merged, identity perm cleared (so "<=[8]" not "<=[2,4]T(0,1)").
IotaForm CanonicalIota(const IotaForm& form);

// Recognises a row-major device list that is an iota reshape+transpose; returns the canonical form.
std::optional<IotaForm> DetectIota(const std::vector<int64_t>& devices);

// "replicated", "manual", "unreduced", "maximal".
std::string_view SubgroupTypeName(HloSharding::SubgroupType t);

// XLA's order of subgroup dimensions after normalisation: maximal, manual, unreduced, replicated.
int SubgroupTypeRank(HloSharding::SubgroupType t);

}  // namespace shardscope
