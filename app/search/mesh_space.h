// The hardware side of a strategy search: the pod (a chip, a device count and the physical slice
// the devices form) and the logical meshes a search may use on it — every factorisation of the
// device count into named axes, each placed on the slice so that the devices along any one mesh
// axis occupy a box of chips (a segment or ring of one physical axis, or a sub-grid of several):
// "respecting the physical torus". A factorisation with no such placement is left out.
//
// Placement (the rule lives in simulator/mesh_placement.h, which Topology::ForMesh shares when a
// mesh's own order strides an axis). Devices are numbered row-major over the mesh axes (the order the zoo's meshes and
// their annotations use); the slice's chips row-major over the physical axes, and a chip's cores
// (v2/v3 run as two devices per chip) are its minor-most "dimension". A placement order lists the
// mesh axes minor first; each axis in turn takes the next factors of the physical dimensions,
// minor first (cores, then the last physical axis, ...). The canonical order is the mesh's own
// (its last axis minor: identical to the simulator's default placement); other orders are tried
// only when the canonical one leaves an axis strided over the chips (and a strided axis is kept
// only when no order avoids it). Example: 2048 v3 cores
// (32x32 chips, 2 cores) as X=64,Y=32: in the canonical order Y takes both cores and half of
// physical axis 1, leaving X strided; the order "X,Y" gives X the cores and axis 1 (a ring of
// 32 chips, two devices each) and Y axis 0 (a ring of 32).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/sharding/mesh.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

namespace shardscope::search {

using namespace ::shardscope::sim;  // the simulator's types are the search's, as the pipeline's

struct Pod {
  ChipSpec chip;               // cores_per_chip set
  std::string chip_name;       // as given: a preset name or a chip .json path
  std::vector<int64_t> slice;  // chips per physical axis
  int64_t devices = 0;

  int64_t chips() const;
  std::string SliceText() const;  // "4x8x8"
  // "tpu-v4: 256 devices, slice 4x8x8 (wraparound on every axis), 32 GiB HBM per device"
  std::string Describe() const;
};

// The pod of `devices` devices of `chip` (a preset name or a chip .json file). `slice`: the
// physical shape ("4x8x8"); empty: the most cubic shape whose axes the generation wraps most
// (v4: 256 chips -> 4x8x8; v5e: 256 -> 16x16; v3: 1024 chips -> 32x32). cores_per_chip 0: the
// chip's maximum (GSPMD's tables count a v2/v3 core as a device).
Result<Pod> MakePod(const std::string& chip, int64_t devices, const std::string& slice = "", int64_t cores_per_chip = 0);

// "4x8x8" -> {4, 8, 8}.
Result<std::vector<int64_t>> ParseSliceShape(std::string_view text);

// A logical mesh placed on a pod.
struct MeshChoice {
  DeviceMesh mesh;                     // devices 0..N-1 row-major over the axes
  std::string order;                   // placement order, minor axis first ("Y,X")
  std::vector<int64_t> device_to_chip; // for TopologyOptions::device_to_chip
  std::vector<std::string> axis_text;  // per mesh axis: "ring of 32 on physical axis 1", ...
  bool canonical = true;               // the order is the mesh's own (last axis minor)

  // "X=32,Y=64 (X: 32 chips on physical axis 0, ring; Y: 2 cores x 32 chips on axis 1, ring)"
  std::string Describe() const;
};

// Places `mesh` on `pod` in the given order (mesh axis names, minor first; empty: canonical).
// Error when the axis sizes do not divide the physical dimensions in that order, or (with
// require_boxes) when some axis ends up strided over the chips.
Result<MeshChoice> PlaceMesh(const Pod& pod, const DeviceMesh& mesh, std::string_view order = {}, bool require_boxes = true);

// The simulated slice of a placed mesh.
Result<Topology> TopologyFor(const Pod& pod, const MeshChoice& choice);

// Every ordered factorisation of pod.devices into axes named `axis_names` (sizes >= 1), in
// lexicographic order of the sizes, placed so that each axis lies on a box of chips (the canonical
// order when it does, else the first other order that does); when no order does, the canonical
// placement with the strided axis marked "(strided)" in its axis_text (its collectives hop over
// chips that belong to other groups, which the simulator routes and prices).
std::vector<MeshChoice> EnumerateMeshes(const Pod& pod, const std::vector<std::string>& axis_names);

}  // namespace shardscope::search
