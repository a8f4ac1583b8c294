// The simulated slice's options: how a logical mesh is put on the chip generation's physical torus
// when the user does not take the generation's default. One struct for every shell: the CLI's
// --topology/--placement/--wraparound/--no-wraparound/--cores-per-chip fill it
// (app/cli/slice_options.cpp), the GUI's placement control and the project file
// (core/project: ProjectSliceOverride) hold it, and SliceForMesh (app/pipeline/simulate.h) builds
// the Topology from it, so the same override gives the same slice — and the same step time — in both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/project/project_file.h"
#include "simulator/topology.h"

namespace shardscope::pipeline {

struct SliceOptions {
  // Chips per physical axis ("torus shape", e.g. {32, 32}); empty: the mesh's own shape when it is
  // a slice of the pod, else the generation's slice for that many chips (Topology::ForMesh).
  std::vector<int64_t> shape;
  // true: every axis wraps; false: none; unset: the generation's rule (v3: only the whole pod, ...).
  std::optional<bool> wraparound;
  // How a mesh axis spanning several physical axes is laid out; unset: snake.
  std::optional<sim::MeshPlacement> placement;
  // 1 or 2 cores per chip (TPU v2/v3 cores as devices); unset: the preset's.
  std::optional<int64_t> cores_per_chip;
  // The mesh axes minor first ("Y,X,L"): the mesh laid in that order, as the strategy search places
  // a candidate (sim::TopologyOptions::mesh_order); wins over `placement`. Empty: the mesh's own layout.
  std::string mesh_order;

  bool empty() const { return shape.empty() && !wraparound && !placement && !cores_per_chip && mesh_order.empty(); }
  bool operator==(const SliceOptions&) const = default;
  // The Topology::ForMesh options this stands for.
  sim::TopologyOptions ToTopologyOptions() const;
  // "row-major, no wraparound, slice 4x8"; "the generation's slice" when empty.
  std::string ToString() const;
};

// The project file's override <-> options. Reading checks the placement's name.
Result<SliceOptions> SliceOptionsFromProject(const ProjectSliceOverride& saved);
ProjectSliceOverride ProjectSliceFromOptions(const SliceOptions& options);

}  // namespace shardscope::pipeline
