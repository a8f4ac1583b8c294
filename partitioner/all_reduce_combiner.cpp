#include "partitioner/all_reduce_combiner.h"

#include <cstdio>
#include <map>
#include <set>

namespace shardscope {

namespace {

std::string BytesText(int64_t bytes) {
  char t[32];
  if (bytes >= 1024 * 1024) std::snprintf(t, sizeof t, "%.4g MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  else if (bytes >= 1024) std::snprintf(t, sizeof t, "%.4g KiB", static_cast<double>(bytes) / 1024.0);
  else std::snprintf(t, sizeof t, "%lld bytes", static_cast<long long>(bytes));
  return t;
}

int64_t CountArrayAllReduces(const Module& module) {
  int64_t n = 0;
  for (const auto& c : module.computations())
    for (const auto& i : c->instructions())
      if (i->opcode() == Opcode::kAllReduce && i->shape().IsArray()) ++n;
  return n;
}

}  // namespace

std::string AllReduceCombinerResult::Summary() const {
  int64_t members = 0;
  for (const auto& c : combined) members += static_cast<int64_t>(c.members.size());
  return "combined " + std::to_string(members) + " of " + std::to_string(all_reduces_before) + " all-reduce(s) into " +
         std::to_string(combined.size()) + "; " + std::to_string(all_reduces_before - members) + " left as they were";
}

std::string CombinedAllReduceReason(const CombinedCollective& combined, int64_t threshold_bytes) {
  std::string names;
  for (const std::string& m : combined.members) names += (names.empty() ? "" : ", ") + m;
  return std::string(kAllReduceCombinerName) + ": " + std::to_string(combined.members.size()) +
         " independent all-reduces of the same reduction, groups and type (" + BytesText(combined.bytes_per_device) +
         " together, threshold " + BytesText(threshold_bytes) + ") combined into one, paying one latency: " + names;
}

Result<AllReduceCombinerResult> CombineAllReduces(Module& module, const AllReduceCombinerOptions& options) {
  if (options.threshold_bytes < 0) return Error(std::string(kAllReduceCombinerName) + ": negative threshold");
  AllReduceCombinerResult r;
  r.all_reduces_before = CountArrayAllReduces(module);
  CollectiveCombinerOptions o;
  o.threshold_bytes = options.threshold_bytes;
  o.kinds = {Opcode::kAllReduce};
  r.combined = CombineCollectives(module, o);
  return r;
}

Result<AllReduceCombinerResult> CombineAllReducesOf(PartitionResult& partition, const AllReduceCombinerOptions& options) {
  if (!partition.module) return Error(std::string(kAllReduceCombinerName) + ": no partitioned program");
  auto r = CombineAllReduces(*partition.module, options);
  if (!r.ok() || !r->changed()) return r;
  RecordCombinedCollectives(
      r->combined,
      [&](const CombinedCollective& c, const std::vector<const InsertedCollective*>&) {
        return CombinedAllReduceReason(c, options.threshold_bytes);
      },
      &partition.collectives);
  std::map<std::string, std::string> combined_of;
  for (const auto& c : r->combined)
    for (const auto& m : c.members) combined_of.emplace(m, c.instruction);
  for (auto& [original, names] : partition.origin_map) {
    std::vector<std::string> renamed;
    std::set<std::string> seen;
    for (const std::string& n : names) {
      auto it = combined_of.find(n);
      const std::string& now = it == combined_of.end() ? n : it->second;
      if (seen.insert(now).second) renamed.push_back(now);
    }
    names = std::move(renamed);
  }
  return r;
}

}  // namespace shardscope
