// Pipelining (GSPMD §3.3, §5.2): the dense Transformer's layers split into L stages over the mesh
// axis L of a 3-D mesh (L, X, Y), X data parallelism over each microbatch, Y Table 1's in-layer
// sharding ("2D finalized" behind the stage axis). The candidates are the zoo's
// `pipelined-transformer` built from the searched model's settings: a search of `transformer`
// translates its batch into microbatches x microbatch; a search of `pipelined-transformer` itself
// keeps its own sizes and varies the same choices.
//
// Per mesh with L >= 2 stages dividing the layers: GPipe with N = L, 2L, 4L and 8L microbatches
// (powers of two times L up to 8L, while each microbatch still splits over X; the bubble
// (L-1)/(N+L-1) shrinks as N grows, the per-microbatch work and collectives grow), and the
// circular schedule at the smallest N (its point: a GPipe-like bubble with few microbatches,
// GSPMD Table 5). Rematerialisation is on (GPipe's choice, which the paper's Tables 4 and 5 use);
// `--set remat=0` searches without it. A user's `microbatches` setting fixes N.
#include <algorithm>

#include "app/search/family.h"
#include "core/zoo/pipelined_transformer.h"
#include "simulator/pipeline_accounting.h"

namespace shardscope::search {

namespace {

// The settings the unpipelined Transformer and the pipelined one share.
constexpr const char* kShared[] = {"seq",       "model",    "heads",         "head_dim", "hidden", "layers",
                                   "layernorm", "backward", "optimizer",     "dtype",    "act_dtype",
                                   "learning_rate", "remat"};

class Pipelining final : public StrategyFamily {
 public:
  std::string_view name() const override { return "pipelining"; }
  std::string_view summary() const override {
    return "GSPMD §3.3: L stages on mesh (L, X, Y), GPipe (N = L..8L microbatches) and circular, remat";
  }
  void Generate(const SearchSpace& space, std::vector<Candidate>& out, std::vector<std::string>& notes) const override {
    const bool pipelined = space.model() == "pipelined-transformer";
    if (!pipelined && space.model() != "transformer") return;
    if (!pipelined && space.IntSetting("vocab") > 0) {
      // Its candidates would drop the embedding and softmax: a different model to compare.
      notes.push_back("pipelining: the pipelined Transformer has no vocabulary layers (vocab=" + space.Setting("vocab") +
                      "); no pipelined candidates");
      return;
    }
    const int64_t layers = space.IntSetting("layers");
    int64_t batch = 0, fixed_n = 0;
    if (pipelined) {
      batch = space.IntSetting("microbatches") * space.IntSetting("microbatch");
      if (space.settings().count("microbatches")) fixed_n = space.IntSetting("microbatches");
    } else {
      batch = space.IntSetting("batch");
      if (space.settings().count("microbatches")) fixed_n = space.IntSetting("microbatches");
    }
    if (layers < 2 || batch < 1) {
      notes.push_back("pipelining: needs at least 2 layers and a batch");
      return;
    }
    int64_t meshes = 0;
    for (const MeshChoice& m : EnumerateMeshes(space.pod(), {"L", "X", "Y"})) {
      const int64_t l = m.mesh.axis_size(0), x = m.mesh.axis_size(1), y = m.mesh.axis_size(2);
      if (l < 2 || layers % l != 0) continue;
      ++meshes;
      std::vector<int64_t> counts;
      if (fixed_n > 0) {
        counts = {fixed_n};
      } else {
        for (int64_t n = l; n <= 8 * l; n *= 2) counts.push_back(n);
      }
      bool first = true;
      for (int64_t n : counts) {
        if (batch % n != 0 || (batch / n) % x != 0) continue;
        const int64_t mb = batch / n;
        for (const char* schedule : {"gpipe", "circular"}) {
          const bool circular = std::string_view(schedule) == "circular";
          // Circular only at the smallest N (and with more than one layer per stage).
          if (circular && (!first || layers == l || n < l)) continue;
          PipelinedTransformerConfig shape;
          shape.stages = l;
          shape.microbatches = n;
          shape.layers = layers;
          shape.schedule = circular ? PipelineSchedule::kCircular : PipelineSchedule::kGPipe;
          Candidate c = space.Base(std::string(name()), "", m);
          c.model = "pipelined-transformer";
          if (!pipelined) {
            c.settings.clear();
            for (const char* k : kShared) {
              const std::string v = space.Setting(k);
              if (!v.empty()) c.settings[k] = v;
            }
          }
          c.settings["annotations"] = std::string("finalized");
          c.settings["stages"] = std::to_string(l);
          c.settings["mesh_x"] = std::to_string(x);
          c.settings["mesh_y"] = std::to_string(y);
          c.settings["microbatches"] = std::to_string(n);
          c.settings["microbatch"] = std::to_string(mb);
          c.settings["schedule"] = std::string(schedule);
          if (!c.settings.count("remat")) c.settings["remat"] = std::string("1");
          const bool remat = c.settings["remat"] != "0";
          c.strategy = std::string(circular ? "circular" : "GPipe") + ", " + std::to_string(l) + " stages, " + std::to_string(n) +
                       "x" + std::to_string(mb) + (remat ? ", remat" : "");
          // Before simulating: the accounting's closed form (simulator/pipeline_accounting.h).
          c.bubble_fraction = sim::BubbleShareEstimate(l, PipelineIterations(shape));
          out.push_back(std::move(c));
        }
        first = false;
      }
    }
    if (meshes == 0) notes.push_back("pipelining: no mesh (L, X, Y) of the pod has L >= 2 stages dividing " + std::to_string(layers) + " layers");
  }
};

}  // namespace

const StrategyFamily& PipeliningFamily() {
  static const Pipelining family;
  return family;
}

}  // namespace shardscope::search
