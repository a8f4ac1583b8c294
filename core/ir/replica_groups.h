// Replica groups and source-target pairs as HLO text writes them — the one codec every layer
// uses (the HLO parser and printer, the simulator's reports, the teaching panel's typed groups).
//   replica_groups={{0,1},{2,3}} | {} | [2,2]<=[4] | [2,4]<=[4,2]T(1,0)   (iota form)
//   source_target_pairs={{0,1},{1,2}}
// Who actually takes part in a collective (XLA's group modes) is core/collectives/participants.h.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"

namespace shardscope {

// Parses a replica-groups value (the text after `replica_groups=`): explicit or iota form, groups
// materialised. Also checks what a standalone value must satisfy: no empty group, no negative or
// repeated device id. Errors read "column N: expected ..." with Error::offset set. Defined in
// hlo_parser.cpp (the module parser's own code).
Result<ReplicaGroups> ParseReplicaGroupsText(std::string_view text);
// Parses a source-target-pairs value ("{{0,1},{1,2}}").
Result<std::vector<std::pair<int64_t, int64_t>>> ParseSourceTargetPairsText(std::string_view text);

// As the HLO printer writes them (the iota form when the groups were given so). With `max_chars`,
// a long explicit list is abbreviated for display: "{{0,1,2,3,...},...} (256 groups of 8)".
std::string ReplicaGroupsText(const ReplicaGroups& groups, size_t max_chars = std::string::npos);
std::string ReplicaGroupsText(const std::vector<std::vector<int64_t>>& groups, size_t max_chars = std::string::npos);
std::string SourceTargetPairsText(const std::vector<std::pair<int64_t, int64_t>>& pairs);

// ReplicaGroupsText of the groups seen last, kept: a partitioned program names the same few groups
// in hundreds of collectives, kilobytes of text each at 2048 devices. The reference stays valid
// until `capacity` other groups have been asked for.
class ReplicaGroupsTextMemo {
 public:
  explicit ReplicaGroupsTextMemo(size_t max_chars = std::string::npos, size_t capacity = 8)
      : max_chars_(max_chars), capacity_(capacity) {}
  const std::string& operator()(const std::vector<std::vector<int64_t>>& groups);

 private:
  size_t max_chars_, capacity_;
  std::deque<std::pair<std::vector<std::vector<int64_t>>, std::string>> entries_;  // the newest last
};

}  // namespace shardscope
