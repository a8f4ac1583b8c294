// GSPMD Table 1's in-layer sharding of the dense Transformer (and the MLP's feed-forward columns) on
// every 2-D mesh (X, Y) of the pod: 2D Attempt 1 (M on X, H and N on Y), 2D Attempt 2 (the batch on
// X instead), 2D finalized (Attempt 2 with the activations' M also on Y: every long-lived tensor
// fully sharded).
#include "app/search/family.h"

namespace shardscope::search {

namespace {

class InLayer final : public StrategyFamily {
 public:
  std::string_view name() const override { return "in-layer"; }
  std::string_view summary() const override {
    return "GSPMD Table 1: 2D Attempt 1, 2D Attempt 2 and 2D finalized on every (X, Y) mesh";
  }
  void Generate(const SearchSpace& space, std::vector<Candidate>& out, std::vector<std::string>& notes) const override {
    struct Variant {
      const char* set;
      const char* label;
    };
    static const Variant kVariants[] = {{"attempt1", "2D Attempt 1"}, {"attempt2", "2D Attempt 2"}, {"finalized", "2D finalized"}};
    std::vector<const Variant*> variants;
    for (const Variant& v : kVariants)
      if (space.AcceptsAnnotations(v.set)) variants.push_back(&v);
    if (variants.empty()) return;  // not a model with Table 1's annotation sets
    if (!space.HasParameter("mesh_x") || !space.HasParameter("mesh_y")) {
      notes.push_back("in-layer: " + space.model() + " has no mesh_x/mesh_y settings");
      return;
    }
    for (const MeshChoice& m : EnumerateMeshes(space.pod(), {"X", "Y"})) {
      for (const Variant* v : variants) {
        Candidate c = space.Base(std::string(name()), v->label, m);
        c.settings["annotations"] = std::string(v->set);
        c.settings["mesh_x"] = std::to_string(m.mesh.axis_size(0));
        c.settings["mesh_y"] = std::to_string(m.mesh.axis_size(1));
        out.push_back(std::move(c));
      }
    }
  }
};

}  // namespace

const StrategyFamily& InLayerFamily() {
  static const InLayer family;
  return family;
}

}  // namespace shardscope::search
