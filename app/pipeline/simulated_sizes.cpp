#include "app/pipeline/simulated_sizes.h"

#include "app/pipeline/small_twin.h"
#include "core/ir/scale_dims.h"

namespace shardscope::pipeline {

Result<SizedModule> ModuleAtSimulatedSizes(const Module& annotated, std::string_view zoo_model,
                                           const std::optional<ZooOverrides>& built_with,
                                           const ProjectSimulatedSizes& sizes, const CancellationToken& cancel) {
  SizedModule out;
  if (!sizes.zoo_settings.empty()) {
    if (zoo_model.empty() || !built_with)
      return Error("zoo settings apply to a module the model zoo built; this one was not (scale its dimensions instead)");
    const ZooModel* entry = nullptr;
    static const std::vector<ZooModel> models = ZooList();
    for (const ZooModel& m : models)
      if (m.name == zoo_model) entry = &m;
    if (!entry) return Error("unknown zoo model '" + std::string(zoo_model) + "'");
    ZooOverrides settings = *built_with;
    std::string changes;
    for (const auto& [k, v] : sizes.zoo_settings) {
      bool known = false;
      std::string was;
      for (const ZooParameter& p : entry->parameters)
        if (p.name == k) known = true, was = p.default_value;
      if (!known) return Error("the zoo model " + std::string(zoo_model) + " has no setting '" + k + "'");
      if (auto it = built_with->find(k); it != built_with->end()) was = it->second;
      if (was == v) continue;
      settings[k] = v;
      changes += (changes.empty() ? "" : ", ") + k + " " + was + " -> " + v;
    }
    auto mesh_then = ZooMesh(zoo_model, *built_with), mesh_now = ZooMesh(zoo_model, settings);
    if (!mesh_now.ok()) return Error("at these sizes: " + mesh_now.error().message);
    if (mesh_then.ok() && !(mesh_then.value() == mesh_now.value()))
      return Error("these settings change the model's mesh (" + mesh_then->ToString() + " -> " + mesh_now->ToString() +
                   "): the simulation runs the document's mesh; change the mesh on the document instead");
    auto built = BuildShardedAs(zoo_model, settings, annotated, cancel);
    if (!built.ok()) return Error("building " + std::string(zoo_model) + " at these sizes: " + built.error().message);
    out.module = std::move(built->module);
    out.description = changes.empty() ? std::string("the document's settings") : changes;
  } else {
    out.module = annotated.Clone();
  }
  if (sizes.scale != 1 || !sizes.dimension_factors.empty()) {
    ScaleDimsOptions options;
    options.factors = sizes.dimension_factors;
    auto scaled = ScaleModuleDims(*out.module, sizes.scale, options);
    if (!scaled.ok()) return scaled.error();
    out.module = std::move(scaled->module);
    ProjectSimulatedSizes scaling = sizes;
    scaling.zoo_settings.clear();
    out.description += (out.description.empty() ? "" : "; ") + scaling.Describe();
    if (sizes.scale != 1 && scaled->kept_parameter_dims > 0)
      out.description += " (" + std::to_string(scaled->kept_parameter_dims) + " parameter dimensions kept their size)";
  }
  return out;
}

}  // namespace shardscope::pipeline
