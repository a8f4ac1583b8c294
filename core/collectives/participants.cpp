#include "core/collectives/participants.h"

#include <string>
#include <algorithm>

namespace shardscope {

namespace {

// Callers say which instruction (the virtual cluster and the simulator name it their way).
Error CollError(const Instruction&, const std::string& msg) { return Error(msg); }

bool AnyIdAtLeast(const std::vector<std::vector<int64_t>>& groups, int64_t limit) {
  for (const auto& g : groups)
    for (int64_t id : g)
      if (id >= limit) return true;
  return false;
}


}  // namespace


CollectiveGroupMode CollectiveGroupModeOf(const Instruction& inst) {
  const bool channel = inst.channel_id.has_value();
  const Opcode op = CollectiveOpcodeOf(inst).value_or(inst.opcode());  // async forms: the collective
  if (op == Opcode::kAllToAll || op == Opcode::kCollectivePermute || op == Opcode::kCollectivePermuteStart)
    return channel ? CollectiveGroupMode::kCrossPartition : CollectiveGroupMode::kCrossReplica;
  if (inst.use_global_device_ids) return CollectiveGroupMode::kFlattenedId;
  return channel ? CollectiveGroupMode::kCrossReplicaAndPartition : CollectiveGroupMode::kCrossReplica;
}

Result<std::vector<std::vector<int64_t>>> CollectiveParticipantGroups(const Instruction& inst, int64_t R, int64_t P) {
  const int64_t N = R * P;
  CollectiveGroupMode mode = CollectiveGroupModeOf(inst);
  const auto& raw = inst.replica_groups.groups;
  // Pure partition mode (one replica): ids that cannot be replica ids are read as partition ids
  // (XLA would reject them). Empty groups keep XLA's meaning: all replicas, i.e. without a
  // channel_id every partition alone.
  if (R == 1 && (mode == CollectiveGroupMode::kCrossReplica || mode == CollectiveGroupMode::kCrossReplicaAndPartition) && AnyIdAtLeast(raw, 1))
    mode = CollectiveGroupMode::kCrossPartition;
  std::vector<std::vector<int64_t>> out;
  auto all = [](int64_t n) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
    return v;
  };
  // The listed groups, or XLA's default for none (read in place: at thousands of devices a copy
  // of the groups was a good part of the cost).
  std::vector<std::vector<int64_t>> default_groups;
  auto groups_or = [&](int64_t n) -> const std::vector<std::vector<int64_t>>& {
    if (!raw.empty()) return raw;
    default_groups = {all(n)};
    return default_groups;
  };
  switch (mode) {
    case CollectiveGroupMode::kCrossReplica: {
      const auto& groups = groups_or(R);
      out.reserve(static_cast<size_t>(P) * groups.size());
      for (int64_t p = 0; p < P; ++p)
        for (const auto& g : groups) {
          std::vector<int64_t> devs;
          devs.reserve(g.size());
          for (int64_t r : g) {
            if (r < 0 || r >= R) return CollError(inst, "replica id " + std::to_string(r) + " out of range (" + std::to_string(R) + " replicas)");
            devs.push_back(r * P + p);
          }
          out.push_back(std::move(devs));
        }
      break;
    }
    case CollectiveGroupMode::kCrossPartition: {
      const auto& groups = groups_or(P);
      out.reserve(static_cast<size_t>(R) * groups.size());
      for (int64_t r = 0; r < R; ++r)
        for (const auto& g : groups) {
          std::vector<int64_t> devs;
          devs.reserve(g.size());
          for (int64_t p : g) {
            if (p < 0 || p >= P) return CollError(inst, "partition id " + std::to_string(p) + " out of range (" + std::to_string(P) + " partitions)");
            devs.push_back(r * P + p);
          }
          out.push_back(std::move(devs));
        }
      break;
    }
    case CollectiveGroupMode::kCrossReplicaAndPartition: {
      const auto& groups = groups_or(R);
      out.reserve(groups.size());
      for (const auto& g : groups) {
        std::vector<int64_t> devs;
        devs.reserve(g.size() * static_cast<size_t>(P));
        for (int64_t r : g) {
          if (r < 0 || r >= R) return CollError(inst, "replica id " + std::to_string(r) + " out of range (" + std::to_string(R) + " replicas)");
          for (int64_t p = 0; p < P; ++p) devs.push_back(r * P + p);
        }
        out.push_back(std::move(devs));
      }
      break;
    }
    case CollectiveGroupMode::kFlattenedId: {
      const auto& groups = groups_or(N);
      out.reserve(groups.size());
      for (const auto& g : groups) {
        for (int64_t d : g)
          if (d < 0 || d >= N) return CollError(inst, "device id " + std::to_string(d) + " out of range (" + std::to_string(N) + " devices)");
        out.push_back(g);
      }
      break;
    }
  }
  std::vector<int> seen(static_cast<size_t>(N), 0);
  for (const auto& g : out) {
    if (g.empty()) return CollError(inst, "empty replica group");
    for (int64_t d : g)
      if (seen[static_cast<size_t>(d)]++) return CollError(inst, "device " + std::to_string(d) + " appears in more than one replica group");
  }
  return out;
}

Result<std::vector<std::pair<int64_t, int64_t>>> CollectivePermutePairs(const Instruction& inst, int64_t R, int64_t P) {
  CollectiveGroupMode mode = CollectiveGroupModeOf(inst);
  bool by_partition = mode == CollectiveGroupMode::kCrossPartition;
  if (!by_partition && R == 1) {
    for (const auto& [s, t] : inst.source_target_pairs)
      if (s >= 1 || t >= 1) by_partition = true;
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t limit = by_partition ? P : R;
  std::vector<char> is_target(static_cast<size_t>(std::max<int64_t>(limit, 0)), 0), is_source(is_target.size(), 0);
  for (const auto& [s, t] : inst.source_target_pairs) {
    if (s < 0 || s >= limit || t < 0 || t >= limit)
      return CollError(inst, "source_target_pair {" + std::to_string(s) + "," + std::to_string(t) + "} out of range (" +
                                 std::to_string(limit) + (by_partition ? " partitions)" : " replicas)"));
    if (is_target[static_cast<size_t>(t)]++) return CollError(inst, "device " + std::to_string(t) + " is the target of more than one pair");
    if (is_source[static_cast<size_t>(s)]++) return CollError(inst, "device " + std::to_string(s) + " is the source of more than one pair");
  }
  out.reserve(inst.source_target_pairs.size() * static_cast<size_t>(by_partition ? R : P));
  if (by_partition) {
    for (int64_t r = 0; r < R; ++r)
      for (const auto& [s, t] : inst.source_target_pairs) out.emplace_back(r * P + s, r * P + t);
  } else {
    for (int64_t p = 0; p < P; ++p)
      for (const auto& [s, t] : inst.source_target_pairs) out.emplace_back(s * P + p, t * P + p);
  }
  return out;
}


}  // namespace shardscope
