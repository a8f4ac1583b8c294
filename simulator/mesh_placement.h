// Placing a logical mesh on a slice so that each of its axes lies on a box of chips: the one
// placement rule `Topology::ForMesh` (when the mesh's own order leaves an axis strided) and the
// strategy search (app/search/mesh_space.h) share.
//
// Devices are numbered row-major over the mesh axes; the slice's chips row-major over the physical
// axes, and a chip's cores (v2/v3 run as two devices per chip) are its minor-most "dimension". A
// placement order lists the mesh axes minor first; each axis in turn takes the next factors of the
// physical dimensions, minor first (cores, then the last physical axis, ...). The canonical order
// is the mesh's own (its last axis minor). An axis lies on a box when the chips of its group
// through device 0 fill a box of the slice (every coordinate between their least and greatest);
// otherwise it is strided: its collectives hop over chips of other groups.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/sharding/mesh.h"
#include "simulator/hardware.h"

namespace shardscope::sim {

struct OrderedMeshPlacement {
  std::string order;                   // mesh axis names, minor first ("Y,X")
  bool canonical = true;               // the order is the mesh's own
  bool boxes = true;                   // every axis on a box of chips
  std::vector<int64_t> device_to_chip; // for TopologyOptions::device_to_chip
  std::vector<std::string> axis_text;  // per mesh axis: "2 cores x 32 (all) of axis 1 (ring)", "(strided)" marked
};

// Places `mesh` (devices 0..N-1, N = chips x chip.cores_per_chip) on a slice of `slice` chips in the
// given order (empty: canonical). Error when the axis sizes do not divide the physical dimensions in
// that order, or (with require_boxes) when an axis ends up strided. `wraps`: the slice's wraparound
// per axis, for the texts' "(ring)" (null: the generation's rule).
Result<OrderedMeshPlacement> PlaceMeshInOrder(const ChipSpec& chip, const std::vector<int64_t>& slice,
                                              const DeviceMesh& mesh, std::string_view order = {},
                                              bool require_boxes = true, const std::vector<bool>* wraps = nullptr);

// The canonical placement when every axis lies on a box; else the first other order that puts every
// axis on a box (axis permutations in lexicographic order); else the canonical one with its strided
// axes marked. Error only when no order divides the slice.
Result<OrderedMeshPlacement> PlaceMeshOnBoxes(const ChipSpec& chip, const std::vector<int64_t>& slice,
                                              const DeviceMesh& mesh, const std::vector<bool>* wraps = nullptr);

// Whether every mesh axis's group through device 0 lies on a box of a `slice` under `device_to_chip`
// (device id -> chip id, devices row-major over the mesh axes).
bool EveryAxisOnABox(const std::vector<int64_t>& slice, const DeviceMesh& mesh, const std::vector<int64_t>& device_to_chip);

}  // namespace shardscope::sim
