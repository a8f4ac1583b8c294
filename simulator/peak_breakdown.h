// What the buffers live at a run's peak are, grouped by kind: the breakdown that says which value
// of which layer dominates (the category sums alone do not).
//
// A group is every buffer whose name is the same once each run of decimal digits is replaced by
// '#' and a rematerialised copy's ".remat" suffix is dropped: "layer3_attention_softmax_probs" and
// "layer17_attention_softmax_probs" are the group "layer#_attention_softmax_probs", an unrolled
// loop's "body/y[3]" and "body/y[4]" the group "body/y[#]". Buffers of one name pattern but
// different categories are separate groups.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "simulator/run_result.h"

namespace shardscope::sim {

struct PeakBufferGroup {
  std::string pattern;  // the name with digit runs replaced by '#'
  MemoryCategory category = MemoryCategory::kTemporaries;
  int64_t count = 0;    // buffers in the group
  int64_t bytes = 0;    // their total
  int64_t largest = 0;  // the largest one
  bool operator==(const PeakBufferGroup&) const = default;
};

// The group pattern of a buffer name (rule above).
std::string PeakBufferPattern(std::string_view name);

// `buffers` grouped, largest total first (ties: pattern order).
std::vector<PeakBufferGroup> GroupPeakBuffers(const std::vector<PeakBuffer>& buffers);

// The groups as text, one per line ("  14 x layer#_attention_softmax_probs (activations): 1.88 GB,
// 134 MB each"), the largest `limit` groups (0 = all), then one line for the rest.
std::string DescribePeakBufferGroups(const std::vector<PeakBufferGroup>& groups, size_t limit);

}  // namespace shardscope::sim
