// How one replica group lies on the network: the plan its collective's step schedule
// (collectives/schedule.h) follows, and so the plan the cost model times and the teaching
// walkthrough animates. A function of the group alone: never of the other groups of the call, nor
// of where the group comes in the list.
//
//  * The group's chips are exactly a physical ring, a segment of one axis (also one that crosses a
//    wraparound link) or a full sub-grid: the physical ring / line / multi-axis plan, whatever the
//    members' order (the order only says which shard ends up where, not which links carry it: an
//    all-gather round a physical ring can place the shards in any order at no cost).
//  * When every chip of the group holds the same number k of its devices (two cores per chip), the
//    group is planned over its chips: devices of one chip exchange data on-chip for free and a
//    chip's shard is k device shards.
//  * Otherwise the members' order, read as a cycle, is the ring: all of its hops physical
//    neighbours -> a ring without routing; all but one -> a line, cut at the one hop that is not;
//    more -> the logical ring in that order with routed hops. Rotating or reversing the order gives
//    the same plan.
//  * A switch (NVSwitch): direct sends through each chip's up- and down-link.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/topology.h"

namespace shardscope::sim {

struct GroupLayout {
  enum class Kind : uint8_t {
    kTrivial,   // one device, or all devices on one chip (exchanged on-chip, free)
    kSequence,  // a ring (closed) or a line, in stop order
    kGrid,      // a full sub-grid over several physical axes (`axes`, `lo`, `size`, `ring`)
    kSwitch,    // direct sends through a switch
  };
  Kind kind = Kind::kTrivial;
  // The stops data moves between. A product layout has one stop per chip (per_chip members each),
  // any other layout one stop per member. kSequence: in ring/line order; kGrid: row-major over the
  // offsets along `axes`; kSwitch: group order.
  std::vector<int64_t> chips;                      // the chip of each stop
  std::vector<std::vector<int64_t>> stop_members;  // the group positions at each stop, in group order
  bool closed = false;   // kSequence: a ring
  bool routed = false;   // some logical hop spans several physical links
  // The group is exactly the chips of a sub-grid (also for a single-axis kSequence): every chip
  // holds per_chip of its members (a chip's shard is per_chip device shards).
  bool product = false;
  int64_t per_chip = 1;
  // Product layouts: the spanned physical axes, the first coordinate and extent along each (a
  // segment may cross the wraparound: coordinates are lo + offset modulo the axis), whether each
  // closes a ring, and the coordinates of a member chip (for the axes not spanned).
  std::vector<int64_t> axes, lo, size;
  std::vector<bool> ring;
  std::vector<int64_t> base;
  std::string description;

  int64_t num_stops() const { return static_cast<int64_t>(chips.size()); }
  // Product layouts: the chip at `offsets` (one per spanned axis, 0 <= offsets[i] < size[i]).
  int64_t ChipAtOffsets(const Topology& topology, const std::vector<int64_t>& offsets) const;
  // kGrid: the stop at `offsets`, and the offsets of a stop (row-major over `axes`).
  int64_t StopAtOffsets(const std::vector<int64_t>& offsets) const;
  std::vector<int64_t> StopOffsets(int64_t stop) const;
};
GroupLayout LayOutReplicaGroup(const Topology& topology, const std::vector<int64_t>& group);

// The split of a multi-axis all-gather over a sub-grid of sizes[a] chips per axis (ring[a]: that
// axis closes into a ring): part j of every shard gathers along the axes in the order j, j+1, ...
// (rotated); the returned fraction of the shard in each part balances the busiest link of every
// axis (equal parts for equal axes).
std::vector<double> GridAllGatherFractions(const std::vector<int64_t>& sizes, const std::vector<bool>& ring,
                                           bool bidirectional);

}  // namespace shardscope::sim
