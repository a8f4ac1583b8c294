// Data parallelism: the batch split over every device of the pod, every weight replicated (the
// program the weight-update-sharding paper starts from). The model's own data-parallel annotation
// set when it has one ("data" of the image models, "data-parallel"), else the search's
// "data-parallel" annotation rule on the unannotated model.
#include "app/search/family.h"

namespace shardscope::search {

namespace {

class DataParallel final : public StrategyFamily {
 public:
  std::string_view name() const override { return "data-parallel"; }
  std::string_view summary() const override { return "the batch over every device, weights replicated"; }
  void Generate(const SearchSpace& space, std::vector<Candidate>& out, std::vector<std::string>& notes) const override {
    if (!space.HasParameter("mesh_x")) {
      notes.push_back("data-parallel: " + space.model() + " has no mesh_x setting");
      return;
    }
    const std::vector<MeshChoice> meshes = EnumerateMeshes(space.pod(), {"X"});
    if (meshes.empty()) return;
    Candidate c = space.Base(std::string(name()), "data parallel", meshes.front());
    c.settings["mesh_x"] = std::to_string(space.pod().devices);
    if (space.HasParameter("mesh_y")) c.settings["mesh_y"] = std::string("1");
    if (space.AcceptsAnnotations("data-parallel")) {
      c.settings["annotations"] = std::string("data-parallel");
    } else if (space.AcceptsAnnotations("data")) {
      c.settings["annotations"] = std::string("data");
    } else {
      if (space.HasParameter("annotations")) {
        if (!space.AcceptsAnnotations("none")) {
          notes.push_back("data-parallel: " + space.model() + " has neither a data-parallel annotation set nor 'none'");
          return;
        }
        c.settings["annotations"] = std::string("none");
      }
      c.annotate = "data-parallel";
    }
    out.push_back(std::move(c));
  }
};

}  // namespace

const StrategyFamily& DataParallelFamily() {
  static const DataParallel family;
  return family;
}

}  // namespace shardscope::search
