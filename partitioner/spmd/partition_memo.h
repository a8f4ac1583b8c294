// PartitionMemo: the partitioner's memo tables kept across partitioning runs.
//
// One run already memoises what recurs on every layer of a model (tile_map.h's maps, the
// resharder's plans, the handlers' decisions). Every one of these answers is a pure function of its
// key, the device count and the SpmdOptions — never of the module being partitioned (no instruction
// is referenced). A caller that partitions many modules with the same shardings on the same
// devices (the strategy search: each candidate at two depths, several candidates per mesh) passes
// one PartitionMemo in SpmdOptions::memo, and later runs start with the earlier runs' answers.
// Tables are kept per (device count, options), so a memo may serve runs with different ones.
//
// Not thread-safe: one memo per thread (the tile maps' own memos are filled as they are asked).
// The tables only grow; Trim() drops them when they hold more than `max_entries` answers (it runs
// at the start of each run that uses the memo).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>
#include <memory>
#include <string>
#include <typeindex>
#include <unordered_map>

#include "core/base/status.h"
#include "partitioner/spmd/reshard.h"
#include "partitioner/spmd/tile_map.h"

namespace shardscope::spmd {

// The memo tables of runs with one device count and one set of options.
struct PartitionTables {
  explicit PartitionTables(int64_t num_devices) : maps(num_devices) {}
  TileMapCache maps;
  std::unordered_map<std::string, Result<ReshardPlan>> plans;   // Resharder::Plan
  std::unordered_map<std::type_index, std::shared_ptr<void>> decisions;  // SpmdContext::Decisions<T>
  // SpmdContext::JointTiling, keyed by the sources' map identities and labels; each entry keeps
  // its source maps alive so that no other map takes their identity.
  struct Joint {
    std::vector<TileMap> sources;
    std::optional<TileMap> joint;
  };
  std::unordered_map<std::string, Joint> joints;
  int64_t entries() const;
};

class PartitionMemo {
 public:
  explicit PartitionMemo(int64_t max_entries = 200000) : max_entries_(max_entries) {}
  // The tables for runs on `num_devices` devices with options written as `options_key`.
  PartitionTables& TablesFor(int64_t num_devices, const std::string& options_key);
  int64_t runs() const { return runs_; }

 private:
  int64_t max_entries_;
  int64_t runs_ = 0;
  std::map<std::pair<int64_t, std::string>, std::unique_ptr<PartitionTables>> tables_;
};

}  // namespace shardscope::spmd
