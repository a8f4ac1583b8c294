#include "app/pipeline/slice_options.h"

namespace shardscope::pipeline {

using namespace ::shardscope::sim;

TopologyOptions SliceOptions::ToTopologyOptions() const {
  TopologyOptions o;
  if (wraparound) o.wraparound = *wraparound ? TopologyOptions::Wraparound::kAll : TopologyOptions::Wraparound::kNone;
  if (placement) o.placement = *placement;
  o.mesh_order = mesh_order;
  return o;
}

std::string SliceOptions::ToString() const {
  if (empty()) return "the generation's slice";
  std::string s;
  auto part = [&s](const std::string& p) { s += (s.empty() ? "" : ", ") + p; };
  if (!mesh_order.empty()) part("mesh order " + mesh_order + " (minor first)");
  if (placement) part(std::string(MeshPlacementName(*placement)));
  if (wraparound) part(*wraparound ? "wraparound on every axis" : "no wraparound");
  if (!shape.empty()) part("slice " + SliceShapeString(shape));
  if (cores_per_chip) part(std::to_string(*cores_per_chip) + (*cores_per_chip == 1 ? " core" : " cores") + " per chip");
  return s;
}

Result<SliceOptions> SliceOptionsFromProject(const ProjectSliceOverride& saved) {
  SliceOptions o;
  if (!saved.placement.empty()) {
    auto p = MeshPlacementFromName(saved.placement);
    if (!p.ok()) return Error("slice placement: " + p.error().message);
    o.placement = *p;
  }
  o.wraparound = saved.wraparound;
  o.shape = saved.shape;
  if (saved.cores_per_chip && *saved.cores_per_chip != 1 && *saved.cores_per_chip != 2)
    return Error("slice cores per chip: " + std::to_string(*saved.cores_per_chip) + " (1 or 2)");
  o.cores_per_chip = saved.cores_per_chip;
  o.mesh_order = saved.mesh_order;
  return o;
}

ProjectSliceOverride ProjectSliceFromOptions(const SliceOptions& options) {
  ProjectSliceOverride p;
  if (options.placement) p.placement = std::string(MeshPlacementName(*options.placement));
  p.wraparound = options.wraparound;
  p.shape = options.shape;
  p.cores_per_chip = options.cores_per_chip;
  p.mesh_order = options.mesh_order;
  return p;
}

}  // namespace shardscope::pipeline
