// Where the pipeline's modules come from: a model of the zoo built with settings (core/zoo/zoo.h),
// or HLO text (core/ir/hlo_text.h) with a mesh guessed from its shardings.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "core/zoo/zoo.h"

namespace shardscope::pipeline {

// A module with the mesh its shardings refer to. Its instructions' shardings are the user's
// annotations (propagation completes the rest).
struct LoadedModel {
  std::unique_ptr<Module> module;
  DeviceMesh mesh;
  std::string description;  // one line (zoo models)
};

// The zoo's models, the default example (the one the GUI opens on) first.
std::vector<ZooModel> Examples();
std::string DefaultExample();
// A zoo model built with `overrides`, with the mesh its annotations refer to.
Result<LoadedModel> BuildZooModel(const std::string& name, const ZooOverrides& overrides = {});

// HLO text; errors read "FILE:LINE:COLUMN: error: ...". The mesh is GuessMesh's.
Result<LoadedModel> ParseModel(const std::string& text, const std::string& filename);

// A mesh that fits a module read from a file: the shape of its first tiled sharding whose tile
// assignment spans every device (num_partitions, or the devices its shardings name when that is
// missing, as in many of XLA's own tests), else a near-square 2-D mesh over them.
DeviceMesh GuessMesh(const Module& module);

}  // namespace shardscope::pipeline
