// The timing of one distinct collective of a simulated program on a topology (what the engine
// needs of it: who takes part in which group, each group's time alone and beside the others, the
// cost breakdown), and a memo of timings shared between simulations.
//
// A timing is a pure function of the collective (kind, operand bytes, replica groups or
// source-target pairs), the topology (its chip figures, slice, links and device placement) and the
// CollectiveOptions. Programs simulated one after another on one pod — the strategy search's
// candidates, each at two depths — meet the same collectives again (a weight's gradient
// reduce-scatter is the same at every depth and microbatch count), and estimating them (routing
// every hop of every group over 2048 devices) was a quarter of the search's time at 2048 devices.
// CollectiveTimingMemo keeps the timings keyed by all of the above, so a simulation that uses it
// computes exactly what it would without it. A collective over replica groups is kept at one
// operand byte, keyed without its size: its timing at B bytes is that one scaled (every link load
// grows with B, the latencies do not: EstimateCollectivePerByte and CollectiveCostAt in
// collectives/cost.h), which is also how the engine times it without the memo. One entry then
// serves every size of it (a gradient's all-reduce at each depth and microbatch count: three of
// four timings the 2048-device search computed were such repeats). Collective-permutes are kept
// at their size. Thread-safe; bounded by an approximate byte budget (when a new timing would
// exceed it, the memo is emptied first).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "simulator/collectives/cost.h"

namespace shardscope::sim {

class Topology;

struct CollectiveTiming {
  std::vector<int32_t> group_of;     // device -> group (-1: not a member)
  std::vector<int32_t> group_size;
  std::vector<double> group_time;    // seconds, per group
  double max_time = 0;
  double alone_time = 0;             // the whole collective alone on the network
  CollectiveCost cost;               // over all groups
  int64_t members = 0;
  CollectiveRequest request;
  // A timing at one operand byte whose groups are not congruent: each group's latency and its
  // data-done time beside the others (group_time at B bytes combines the latency with B x data).
  std::vector<double> per_byte_group_latency, per_byte_group_data;
};

class CollectiveTimingMemo {
 public:
  explicit CollectiveTimingMemo(int64_t max_bytes = int64_t{256} << 20) : max_bytes_(max_bytes) {}

  // The key of everything a timing depends on besides the collective itself: the topology and
  // the options (built once per simulation).
  static std::string ContextKey(const Topology& topology, const CollectiveOptions& options);
  // The key of one collective.
  static std::string CollectiveKey(CollectiveKind kind, double operand_bytes, const std::vector<std::vector<int64_t>>& groups,
                                   const std::vector<std::pair<int64_t, int64_t>>& pairs);

  // The timing stored under (context, collective), or null.
  std::shared_ptr<const CollectiveTiming> Find(const std::string& context, const std::string& collective) const;
  // Stores a timing (unless one is there already) and returns the one stored.
  std::shared_ptr<const CollectiveTiming> Store(const std::string& context, const std::string& collective, CollectiveTiming timing);

  int64_t hits() const;
  int64_t misses() const;
  int64_t bytes() const;

 private:
  int64_t max_bytes_;
  mutable std::mutex mu_;
  // Per context (few: one per placement of the pod), per collective.
  std::unordered_map<std::string, std::unordered_map<std::string, std::shared_ptr<const CollectiveTiming>>> tables_;
  int64_t bytes_ = 0;
  mutable int64_t hits_ = 0, misses_ = 0;
};

}  // namespace shardscope::sim
