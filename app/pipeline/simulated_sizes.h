// The module the simulation runs when the user asks for other sizes than the document's (the
// whole-model issue's "real sizes in the GUI": the simulation at real size, the numerical check on
// the document, small). Two ways, combinable:
//   - a module the zoo built: the same model at other settings (batch, widths, layers ...), sharded
//     as the document is, instruction by instruction (BuildShardedAs, app/pipeline/small_twin.h);
//   - any module: every dimension scaled by k (core/ir/scale_dims.h), shardings kept.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/project/project_file.h"
#include "core/zoo/zoo.h"

namespace shardscope::pipeline {

struct SizedModule {
  std::unique_ptr<Module> module;  // complete shardings, ready to partition
  // What changed, for people: "batch 8 -> 1024, model 64 -> 8192; every dimension x4 (2 kept)".
  std::string description;
};

// `annotated`: the document's module with complete shardings (its annotations and what
// propagation inferred). `zoo_model` / `built_with`: the zoo model and settings it was built with
// (empty / nullopt: not built by the zoo; then `sizes` may only scale). Settings that would change
// the model's mesh (the document's mesh is the one simulated) are refused, as are settings the zoo
// does not know.
Result<SizedModule> ModuleAtSimulatedSizes(const Module& annotated, std::string_view zoo_model,
                                           const std::optional<ZooOverrides>& built_with,
                                           const ProjectSimulatedSizes& sizes, const CancellationToken& cancel = {});

}  // namespace shardscope::pipeline
