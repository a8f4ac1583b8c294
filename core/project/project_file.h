// The project file (.shardscope): what a person saved of a session, as JSON (core/base/json.h):
//
//   { "format": "shardscope-project", "version": 1,
//     "source": { "kind": "zoo", "source": "transformer-layer" },
//     "mesh": "X=4,Y=4", "mesh_devices": [0, 1, ...],          (device order, optional)
//     "module": "HloModule ...",                                (HLO text, without the annotations)
//     "annotations": [ { "instruction": "comp/name", "sharding": "{devices=[4,1]...}",
//                        "named": "[I_X, J]" }, ... ],          ("named" is for people; not read)
//     "selected": "name",                                       (optional)
//     "analysis": { "weight_update_sharding": true,             (optional; the analysis options)
//                   "slice": { "placement": "row-major",        (optional; how the simulated slice
//                              "wraparound": false,               departs from the generation's
//                              "shape": [4, 8] },                 default; each member optional)
//                   "simulated_sizes": { "zoo_settings": {"batch": "1024"},  (optional; the sizes
//                                        "scale": 4, "dimensions": {"x:0": 8} } } }  the simulation
//                                                                runs at, when not the module's)
//
// Plain C++ (no Qt): the GUI's session reads and writes it through here, and so can any tool.
// Reading never aborts: every error is "WHERE:LINE:COLUMN: error: ..." pointing into the JSON, or
// names the member whose content (module text, mesh, sharding) is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"

namespace shardscope {

inline constexpr std::string_view kProjectFormat = "shardscope-project";
inline constexpr int kProjectVersion = 1;

struct ProjectAnnotation {
  std::string instruction;  // name, "computation/name" outside the entry
  HloSharding sharding;
};

// The user's override of the simulated slice, as the file keeps it: plain values that
// app/pipeline/slice_options.h turns into a pipeline::SliceOptions (and says there what is wrong
// with them, e.g. a shape that does not hold the mesh). Empty: the generation's slice for the mesh.
struct ProjectSliceOverride {
  std::string placement;           // "snake" | "row-major"; empty: the default (snake)
  std::optional<bool> wraparound;  // true: every axis wraps; false: none; unset: the generation's rule
  std::vector<int64_t> shape;      // chips per physical axis (e.g. {4, 8}); empty: chosen for the mesh
  std::optional<int64_t> cores_per_chip;  // 1 or 2 (TPU v2/v3 cores as devices); unset: the chip preset's
  std::string mesh_order;  // mesh axes minor first ("Y,X,L"), as the strategy search places a candidate; empty: none
  bool empty() const { return placement.empty() && !wraparound && shape.empty() && !cores_per_chip && mesh_order.empty(); }
  bool operator==(const ProjectSliceOverride&) const = default;
};

// The sizes the simulation runs the model at when they are not the document's (the whole-model
// issue's "real sizes": the document stays the instance the numerical check proves). For a module
// the zoo built, the settings that differ from those it was built with; for any module, every
// dimension scaled by `scale` (core/ir/scale_dims.h). Empty: the document's own sizes.
struct ProjectSimulatedSizes {
  std::map<std::string, std::string, std::less<>> zoo_settings;
  int64_t scale = 1;
  // Single dimensions' factors, by entry parameter and dimension ("x:0" -> 8; each applies to its
  // dimension's class, core/ir/scale_dims.h); the others take `scale`.
  std::map<std::string, int64_t, std::less<>> dimension_factors;
  bool empty() const { return zoo_settings.empty() && scale == 1 && dimension_factors.empty(); }
  // One line: "batch=1024, model=8192; x:0 x8; every other dimension x2" ("" when empty).
  std::string Describe() const;
  bool operator==(const ProjectSimulatedSizes&) const = default;
};

// Everything a project file holds besides the module.
struct ProjectContents {
  DeviceMesh mesh;
  std::vector<ProjectAnnotation> annotations;  // in file order
  std::string source_kind, source;             // where the module came from ("zoo", "hlo", ...)
  // The zoo settings it was built with, when the zoo built it ("source": {"zoo_settings": {...}}):
  // its small twin (app/pipeline/small_twin.h) is built from them.
  std::optional<std::map<std::string, std::string, std::less<>>> zoo_settings;
  std::string selected;                        // the selected instruction (qualified name), or empty
  // Analysis options: weight-update sharding (paper 000) of the partitioned program.
  bool weight_update_sharding = false;
  // The simulated slice (placement on the physical torus) when the user overrode it.
  ProjectSliceOverride slice;
  // The sizes the simulation runs at, when the user set other ones.
  ProjectSimulatedSizes simulated_sizes;
};

struct Project {
  std::unique_ptr<Module> module;  // read: the annotations are set on its instructions
  ProjectContents contents;
};

// Reads a project. `where` prefixes messages (usually the path). The module text must parse and
// verify, the mesh must parse, mesh_devices must be a permutation of the mesh's devices, and every
// annotation must name an instruction and fit its shape and the mesh.
Result<Project> ReadProjectFile(std::string_view json_text, std::string_view where);

// The JSON of a project (indented). The module is written as it is (a session keeps the
// annotations apart from it, so usually without shardings); null writes only the format and
// version.
std::string WriteProjectFile(const Module* module, const ProjectContents& contents);

// The name a project file uses for an instruction: "name" in the entry, "computation/name" elsewhere.
std::string QualifiedInstructionName(const Module& module, const Instruction& inst);

}  // namespace shardscope
