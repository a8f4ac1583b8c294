#include "partitioner/spmd/partition_memo.h"

namespace shardscope::spmd {

int64_t PartitionTables::entries() const { return maps.size() + static_cast<int64_t>(plans.size() + joints.size()); }

PartitionTables& PartitionMemo::TablesFor(int64_t num_devices, const std::string& options_key) {
  ++runs_;
  int64_t total = 0;
  for (const auto& [key, t] : tables_) total += t->entries();
  if (total > max_entries_) tables_.clear();
  auto& slot = tables_[{num_devices, options_key}];
  if (!slot) slot = std::make_unique<PartitionTables>(num_devices);
  return *slot;
}

}  // namespace shardscope::spmd
