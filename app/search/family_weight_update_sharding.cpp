// Weight-update sharding (paper 000: Xu et al., "Automatic Cross-Replica Sharding of Weight Update
// in Data-Parallel Training"): the data-parallel candidate with the pipeline option
// weight_update_sharding=1. The evaluation runs the pass on its partitioned program (each gradient
// all-reduce becomes a reduce-scatter, the update runs on the replica's shard, the updated weight
// is all-gathered), with the pod's figures and replica mesh (evaluate.cpp).
#include "app/search/family.h"

namespace shardscope::search {

namespace {

class WeightUpdateSharding final : public StrategyFamily {
 public:
  std::string_view name() const override { return "weight-update-sharding"; }
  std::string_view summary() const override {
    return "data parallel with the weight update sharded across the replicas (reduce-scatter, update on shards, all-gather)";
  }
  void Generate(const SearchSpace& space, std::vector<Candidate>& out, std::vector<std::string>& notes) const override {
    std::vector<Candidate> data_parallel;
    std::vector<std::string> dp_notes;
    DataParallelFamily().Generate(space, data_parallel, dp_notes);
    if (data_parallel.empty()) {
      notes.push_back(std::string(name()) + ": " + space.model() + " has no data-parallel candidate to shard the update of");
      return;
    }
    for (Candidate& c : data_parallel) {
      c.family = std::string(name());
      c.strategy = "data parallel, weight-update sharding";
      c.options.emplace_back("weight_update_sharding", "1");
      out.push_back(std::move(c));
    }
  }
};

}  // namespace

const StrategyFamily& WeightUpdateShardingFamily() {
  static const WeightUpdateSharding family;
  return family;
}

}  // namespace shardscope::search
