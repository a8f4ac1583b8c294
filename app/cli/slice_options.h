// The simulated slice that `collective` and `simulate` both describe on the command line: a chip
// (preset name or chip .json), optionally its cores per chip, the device mesh, optionally the slice
// shape (--topology 4x4x4), how the mesh is laid on it (--placement, or --mesh-order as the search lays a candidate), the wraparound rule and how collectives are timed. One place turns those texts into a Topology, so
// both subcommands accept and reject the same things with the same messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/sharding/mesh.h"
#include "core/base/status.h"
#include "simulator/collectives/cost.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

namespace shardscope::cli {

struct SliceOptionTexts {
  std::optional<std::string> chip;           // --chip
  std::optional<std::string> cores;          // --cores-per-chip
  std::optional<std::string> mesh;           // --mesh
  std::optional<std::string> topology;       // --topology
  std::optional<std::string> placement;      // --placement snake|row-major
  std::optional<std::string> mesh_order;     // --mesh-order Y,X (the search's placement of a candidate)
  bool wraparound = false;                   // --wraparound
  bool no_wraparound = false;                // --no-wraparound
  std::optional<std::string> latency_model;  // --latency-model overlapped|additive
  bool one_direction = false;                // --one-direction
};

// Takes the options above out of `args` (the subcommand says which of them it requires).
SliceOptionTexts TakeSliceOptions(std::vector<std::string>& args);

struct Slice {
  sim::ChipSpec chip;
  DeviceMesh mesh;
  sim::Topology topology;
  sim::CollectiveOptions collectives;  // --latency-model, --one-direction
};

// The error's message is the usage text to print (it names the option). --chip and --mesh must
// be present.
Result<Slice> ResolveSlice(const SliceOptionTexts& texts);

// A whole decimal integer >= lo.
bool ParseInt(const std::string& text, int64_t lo, int64_t* out);

}  // namespace shardscope::cli
