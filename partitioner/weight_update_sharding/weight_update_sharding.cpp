#include "partitioner/weight_update_sharding/weight_update_sharding.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "partitioner/weight_update_sharding/plan.h"

namespace shardscope {

namespace {


}  // namespace

Result<WeightUpdateShardingResult> ShardWeightUpdates(const Module& spmd_program, const WeightUpdateShardingOptions& options) {
  auto plan = wus::MakePlan(spmd_program, options);
  if (!plan.ok()) return Error("weight-update sharding: " + plan.error().message);
  WeightUpdateShardingResult result;
  result.redundant_instructions = (*plan)->redundancy->redundant_instructions();
  for (const wus::Cluster& cl : (*plan)->clusters)
    if (!cl.seeds.empty()) result.decisions.push_back(cl.decision);
  // One record per all-reduce: a rejected cluster appears once for each of its seeds; keep the
  // sharded ones and the last word on the others.
  std::stable_sort(result.decisions.begin(), result.decisions.end(),
                   [](const WeightUpdateDecision& a, const WeightUpdateDecision& b) { return a.all_reduce < b.all_reduce; });
  std::vector<WeightUpdateDecision> unique;
  for (auto& d : result.decisions) {
    if (!unique.empty() && unique.back().all_reduce == d.all_reduce) {
      if (d.sharded || !unique.back().sharded) unique.back() = std::move(d);
      continue;
    }
    unique.push_back(std::move(d));
  }
  result.decisions = std::move(unique);
  if (Status s = wus::EmitPlan(**plan, &result); !s.ok()) return Error("weight-update sharding: " + s.error().message);
  int64_t sharded = 0;
  for (const auto& d : result.decisions) sharded += d.sharded ? 1 : 0;
  std::ostringstream os;
  os << "weight-update sharding: " << sharded << " of " << result.decisions.size() << " gradient all-reduces sharded, "
     << result.redundant_instructions << " redundant instructions, " << result.collectives.size()
     << " collectives inserted (" << result.combined_collectives << " merged by batching)";
  if (result.split) os << "; the step is split into sharding, main and unsharding programs";
  result.summary = os.str();
  return result;
}

Result<WeightUpdateShardingResult> ShardWeightUpdatesOf(PartitionResult& partition, const WeightUpdateShardingOptions& options) {
  if (!partition.module) return Error("weight-update sharding: the partition result has no module");
  auto r = ShardWeightUpdates(*partition.module, options);
  if (!r.ok()) return r;
  std::vector<InsertedCollective> kept;
  for (auto& c : partition.collectives)
    if (std::find(r->replaced_all_reduces.begin(), r->replaced_all_reduces.end(), c.instruction) == r->replaced_all_reduces.end())
      kept.push_back(std::move(c));
  kept.insert(kept.end(), r->collectives.begin(), r->collectives.end());
  partition.collectives = std::move(kept);
  r->input = std::move(partition.module);
  partition.module = std::move(r->module);
  return r;
}

std::string DescribeWeightUpdateSharding(const WeightUpdateShardingResult& r) {
  std::ostringstream os;
  os << r.summary << "\n";
  for (const auto& d : r.decisions) {
    os << "  " << d.weight << " (all-reduce " << d.all_reduce << (d.computation.empty() ? "" : " in " + d.computation) << "): ";
    os << (d.sharded ? "sharded" : "replicated") << "\n";
    if (!d.format.empty()) os << "      format  " << d.format << "\n";
    if (!d.scheme.empty() && d.sharded) os << "      scheme  " << d.scheme << "\n";
    for (const auto& n : d.non_elementwise) os << "      reduce  " << n << "\n";
    if (!d.sharded_state.empty()) {
      os << "      kept sharded across steps:";
      for (const auto& s : d.sharded_state) os << " " << s;
      os << "\n";
    }
    os << "      why     " << d.reason << "\n";
  }
  std::map<std::string, int64_t> kinds;
  for (const auto& c : r.collectives) ++kinds[std::string(OpcodeName(c.kind))];
  os << "collectives inserted:";
  for (const auto& [k, n] : kinds) os << " " << n << " " << k;
  os << "\n";
  for (const auto& c : r.collectives)
    os << "  " << c.instruction << " = " << OpcodeName(c.kind) << " (" << c.bytes_per_device << " bytes/device, groups "
       << c.replica_groups << ")" << (c.origin.empty() ? "" : " from " + c.origin) << ": " << c.reason << "\n";
  if (!r.replaced_all_reduces.empty()) {
    os << "all-reduces replaced:";
    for (const auto& a : r.replaced_all_reduces) os << " " << a;
    os << "\n";
  }
  return os.str();
}

}  // namespace shardscope
