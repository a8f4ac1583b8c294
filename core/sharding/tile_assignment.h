// Helpers shared by core/sharding.cpp and core/mesh.cpp: iota tile-assignment recognition,
// overflow-safe products and subgroup-type names. Standard library only.
#pragma once

#include <cstdint>
#include <memory>
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

// True when `form` is already in that canonical form (CanonicalIota would return it unchanged).
bool IsCanonicalIota(const IotaForm& form);

// Recognises a row-major device list that is an iota reshape+transpose; returns the canonical form.
std::optional<IotaForm> DetectIota(const std::vector<int64_t>& devices);

// Device id -> first flat index, or empty when ids are negative or too sparse to index densely.
std::vector<int64_t> BuildDeviceIndex(const std::vector<int64_t>& devices);

// The devices of a canonical iota form and their index, shared by every tile assignment with that
// form: shardings over thousands of devices use a few forms again and again (propagation builds
// them at every instruction it visits; the partitioner's tile maps turn back into them), and
// materialising and indexing them each time was 3% of the 2048-core strategy search. Per thread,
// emptied past 256 forms or 2^22 device ids; the tables stay valid as long as a holder keeps them.
struct IotaTables {
  std::shared_ptr<const std::vector<int64_t>> devices, index;
};
IotaTables SharedIotaTables(const IotaForm& canonical);

// "replicated", "manual", "unreduced", "maximal".
std::string_view SubgroupTypeName(HloSharding::SubgroupType t);

// XLA's order of subgroup dimensions after normalisation: maximal, manual, unreduced, replicated.
int SubgroupTypeRank(HloSharding::SubgroupType t);

}  // namespace shardscope
