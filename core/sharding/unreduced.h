// Unreduced subgroups (XLA's last_tile_dims={unreduced}): the devices along such a subgroup hold
// partial sums of their tile, which is the sum over each group. What the partitioner's resharder
// and the numerical verifier need to know of them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/sharding/sharding.h"

namespace shardscope {

bool HasUnreducedSubgroup(const HloSharding& s);
// The same tiling with the unreduced subgroups replicated (what summing each group gives).
HloSharding WithUnreducedReplicated(const HloSharding& s);
// Groups of devices that differ only along the unreduced subgroups (each sums to one tile copy).
std::vector<std::vector<int64_t>> UnreducedGroups(const HloSharding& s);
// True for the device at index 0 along every unreduced subgroup (the one that holds a value made
// unreduced; the others hold zeros); true for every device of a sharding without such subgroups.
bool IsFirstUnreducedCopy(const HloSharding& s, int64_t device);

}  // namespace shardscope
