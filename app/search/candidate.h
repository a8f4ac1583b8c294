// One point of a strategy search: a model of the zoo with its settings (the annotation set and the
// mesh sizes among them), an annotation rule the search applies on top of the model's own, the
// pipeline options (strategy passes), and the pod with the mesh's placement on it.
//
// A candidate is written as an ordered list of key/value settings — the identity of the candidate,
// stored with its run (RunInputs::settings), one JSON object per line in a sweep's plan file, and
// hashed into the run key that makes a re-run replace its earlier run instead of adding a second:
//
//   search.model=transformer  search.family=in-layer  search.strategy=2D finalized
//   search.chip=tpu-v3  search.cores_per_chip=2  search.slice=32x32
//   search.mesh=X=32,Y=64  search.placement=Y,X
//   model.layers=32 model.batch=1024 ... model.annotations=finalized model.mesh_x=32 model.mesh_y=64
//   option.weight_update_sharding=1          (pipeline options, when the family sets any)
//   annotate=data-parallel                   (an annotation rule, when the family uses one)
//
// Reopening a candidate (ReopenCandidate) builds the model from these settings at full depth and
// puts its annotations back: the module the GUI and `partition`/`simulate` take.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "app/search/mesh_space.h"
#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/zoo/zoo.h"

namespace shardscope::search {

using Settings = std::vector<std::pair<std::string, std::string>>;

struct Candidate {
  std::string family;    // the generator that made it: "in-layer", "data-parallel", ...
  std::string strategy;  // what it is, for people: "2D finalized", "GPipe, 4 stages, 16 microbatches"
  std::string model;     // zoo model
  ZooOverrides settings; // the model's settings that differ from its defaults (the user's and the family's)
  Settings options;      // pipeline options: "weight_update_sharding" = "1"
  std::string annotate;  // annotation rule applied after the build ("" | "data-parallel"; AnnotationRules())
  // The pod and the placement of the mesh on it.
  std::string chip;
  int64_t cores_per_chip = 1;
  std::string slice;     // "32x32"
  std::string mesh;      // "X=32,Y=64": the mesh the model's annotations refer to
  std::string placement; // minor-first placement order ("Y,X")
  // A module read from a file instead of a zoo model (method 2, auto_sharding.h): the file's path
  // and the FNV-1a hash of its text (HloTextHash); `model` then names the module. Re-opening reads
  // the file again and refuses it when its text changed.
  std::string hlo_file;
  std::string hlo_hash;
  // Not part of the identity: what the family knows analytically.
  double bubble_fraction = 0;  // pipeline bubble share of the step (GPipe: (L-1)/(N+L-1))

  // The identity, in a fixed order (search.*, model.* sorted, option.* sorted, annotate).
  Settings ToSettings() const;
  // Reads ToSettings' keys back; unrelated keys (a run's other settings) are ignored. Error when
  // search.model is missing (a run that no search made) or a value is malformed.
  static Result<Candidate> FromSettings(const Settings& settings);
  // "search:" + 16 hex digits of a 64-bit FNV-1a hash over ToSettings().
  std::string Key() const;
  // One line of JSON: {"search.model":"transformer",...} (ToSettings in order) and back.
  std::string ToJson() const;
  static Result<Candidate> FromJson(std::string_view line);

  // "2D finalized on X=32,Y=64" (+ ", weight-update sharding" and the like).
  std::string Label() const;
  const std::string* Option(std::string_view key) const;
  bool OptionOn(std::string_view key) const;  // "1"/"true"/"on"
  int64_t devices() const;
};

// "fnv1a:" + 16 hex digits of the text: what Candidate::hlo_hash holds.
std::string HloTextHash(std::string_view text);

// The pod of a candidate (its chip, cores and slice; the device count of its mesh).
Result<Pod> PodOf(const Candidate& candidate);
// The candidate's mesh placed on its pod.
Result<MeshChoice> MeshOf(const Candidate& candidate, const Pod& pod);

// ---- annotation rules ---------------------------------------------------------------------------
// A rule annotates a built module the search's way (where the model has no annotation set of its
// own for a strategy): "data-parallel" — the batch inputs (entry parameters the simulator's memory
// model calls activations: x, target, labels, ...) split along dim 0 over every device, every other
// entry parameter (weights, optimizer state) replicated, every other annotation removed.
const std::vector<std::string>& AnnotationRules();
Status ApplyAnnotationRule(Module& module, std::string_view rule);

// Builds the candidate's model (the zoo model with its settings; `overrides` on top, e.g. a reduced
// depth) and applies its annotation rule: the annotated module before propagation. A candidate of
// an HLO file (hlo_file) reads and parses the file (an error when it is gone or its text no longer
// has hlo_hash). An auto-sharding candidate's module is set to the candidate's device count.
Result<std::unique_ptr<Module>> BuildCandidateModule(const Candidate& candidate, const ZooOverrides& overrides = {},
                                                     const ZooBuildOptions& options = {});

// The user annotations of a module as (instruction name, sharding text), in instruction order of
// the entry computation then the others: what a run stores so the candidate re-opens.
Settings AnnotationList(const Module& module);

// The module of a stored candidate: built from the run's settings at full depth, with the stored
// annotations (when given) replacing the built ones. Error for a run that no search made.
Result<std::unique_ptr<Module>> ReopenCandidate(const Settings& run_settings, const Settings& annotations = {});

}  // namespace shardscope::search
