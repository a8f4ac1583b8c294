// Batching of the pass's collectives (paper section 5.2): reduce-scatters, all-gathers and
// all-reduces the pass inserted, over the same device groups, are combined into one variadic
// collective while their operands stay within a size threshold — the same replica groups and shard
// assignment hold for every tensor, so one collective (costed once: one latency) moves them all.
// The mechanism is the partitioner's collective combiner (partitioner/collective_combiner.h),
// restricted to what the pass inserted.
#include <unordered_map>
#include <unordered_set>

#include "partitioner/collective_combiner.h"
#include "partitioner/weight_update_sharding/plan.h"

namespace shardscope::wus {

int64_t CombineCollectives(Module* module, int64_t threshold, const std::unordered_set<std::string>& once,
                           std::vector<InsertedCollective>* records) {
  if (threshold <= 0) return 0;
  std::unordered_set<std::string> inserted;
  for (const auto& r : *records) inserted.insert(r.instruction);
  CollectiveCombinerOptions o;
  o.threshold_bytes = threshold;
  o.kinds = {Opcode::kAllGather, Opcode::kReduceScatter, Opcode::kAllReduce};
  o.candidate = [&](const Instruction& i) { return inserted.count(i.name()) > 0 && !once.count(i.name()); };
  const std::vector<CombinedCollective> combined = shardscope::CombineCollectives(*module, o);
  RecordCombinedCollectives(
      combined,
      [](const CombinedCollective& c, const std::vector<const InsertedCollective*>& members) {
        std::string reasons;
        for (size_t k = 0; k < members.size() && k < 3; ++k) reasons += (reasons.empty() ? "" : "; ") + members[k]->reason;
        if (members.size() > 3) reasons += "; ...";
        return "weight-update sharding: " + std::to_string(c.members.size()) + " " + std::string(OpcodeName(c.kind)) +
               "s over the same groups batched into one (section 5.2): " + reasons;
      },
      records);
  int64_t merged = 0;
  for (const auto& c : combined) merged += static_cast<int64_t>(c.members.size()) - 1;
  return merged;
}

}  // namespace shardscope::wus
