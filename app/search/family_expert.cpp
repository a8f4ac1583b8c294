// Expert parallelism for the MoE Transformer: GShard's 1-D sharding (the experts E over every
// device in the MoE layers, the batch elsewhere: GSPMD Figure 8a) when the experts divide over the
// pod, and GSPMD §5.5's hybrid (E on X, the experts' H and the dense layers as Table 1 "2D
// finalized" on Y: Figure 8b) on every (X, Y) mesh whose X divides the experts.
#include "app/search/family.h"

namespace shardscope::search {

namespace {

class ExpertParallel final : public StrategyFamily {
 public:
  std::string_view name() const override { return "expert-parallel"; }
  std::string_view summary() const override {
    return "MoE: GShard's experts over every device; hybrid E on X, H on Y (GSPMD Figure 8)";
  }
  void Generate(const SearchSpace& space, std::vector<Candidate>& out, std::vector<std::string>& notes) const override {
    if (!space.HasParameter("experts")) return;  // not an MoE model
    const int64_t experts = space.IntSetting("experts");
    const int64_t groups = space.IntSetting("groups");
    const int64_t n = space.pod().devices;
    if (space.AcceptsAnnotations("gshard")) {
      if (experts % n == 0 && (groups == 0 || groups % n == 0)) {
        for (const MeshChoice& m : EnumerateMeshes(space.pod(), {"X"})) {
          Candidate c = space.Base(std::string(name()), "GShard experts over all devices", m);
          c.settings["annotations"] = std::string("gshard");
          c.settings["mesh_x"] = std::to_string(n);
          c.settings["mesh_y"] = std::string("1");
          out.push_back(std::move(c));
        }
      } else {
        notes.push_back("expert-parallel: GShard's 1-D sharding needs the experts (" + std::to_string(experts) +
                        ") and groups to be multiples of the devices (" + std::to_string(n) + ")");
      }
    }
    if (space.AcceptsAnnotations("hybrid")) {
      int64_t kept = 0;
      for (const MeshChoice& m : EnumerateMeshes(space.pod(), {"X", "Y"})) {
        const int64_t x = m.mesh.axis_size(0);
        if (x < 2 || experts % x != 0 || (groups != 0 && groups % x != 0)) continue;
        Candidate c = space.Base(std::string(name()), "hybrid: experts on X, H on Y", m);
        c.settings["annotations"] = std::string("hybrid");
        c.settings["mesh_x"] = std::to_string(x);
        c.settings["mesh_y"] = std::to_string(m.mesh.axis_size(1));
        out.push_back(std::move(c));
        ++kept;
      }
      if (kept == 0) notes.push_back("expert-parallel: no mesh X of at least 2 divides the " + std::to_string(experts) + " experts");
    }
  }
};

}  // namespace

const StrategyFamily& ExpertParallelFamily() {
  static const ExpertParallel family;
  return family;
}

}  // namespace shardscope::search
