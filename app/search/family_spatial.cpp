// Spatial partitioning of the image models (GSPMD §5.6, Table 8): the batch on X and the first
// spatial dimension on Y, only the inputs annotated; propagation carries the split through every
// convolution, which the partitioner runs with halo exchanges. Every (X, Y) mesh with Y >= 2 (Y = 1
// is data parallelism, its own family).
#include "app/search/family.h"

namespace shardscope::search {

namespace {

class Spatial final : public StrategyFamily {
 public:
  std::string_view name() const override { return "spatial"; }
  std::string_view summary() const override { return "image models: the batch on X, the first spatial dim on Y"; }
  void Generate(const SearchSpace& space, std::vector<Candidate>& out, std::vector<std::string>&) const override {
    if (!space.AcceptsAnnotations("spatial")) return;
    for (const MeshChoice& m : EnumerateMeshes(space.pod(), {"X", "Y"})) {
      if (m.mesh.axis_size(1) < 2) continue;
      Candidate c = space.Base(std::string(name()), "spatial: batch on X, depth/height on Y", m);
      c.settings["annotations"] = std::string("spatial");
      c.settings["mesh_x"] = std::to_string(m.mesh.axis_size(0));
      c.settings["mesh_y"] = std::to_string(m.mesh.axis_size(1));
      out.push_back(std::move(c));
    }
  }
};

}  // namespace

const StrategyFamily& SpatialFamily() {
  static const Spatial family;
  return family;
}

}  // namespace shardscope::search
