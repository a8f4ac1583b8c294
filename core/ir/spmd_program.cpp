// The "already partitioned" rule (spmd_program.h).
#include "core/ir/spmd_program.h"

#include <unordered_set>

namespace shardscope {

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsManualSharding(const HloSharding& s) {
  if (s.IsTuple()) {
    for (const auto& e : s.tuple_elements())
      if (IsManualSharding(e)) return true;
    return false;
  }
  return s.IsManual() || s.HasManualSubgroup();
}

bool HasPartitionableSharding(const HloSharding& s) {
  if (s.IsTuple()) {
    for (const auto& e : s.tuple_elements())
      if (HasPartitionableSharding(e)) return true;
    return false;
  }
  return (s.IsTiled() && !s.HasManualSubgroup()) || s.IsMaximal();
}

bool IsCustomCall(const Instruction& i, std::string_view target) {
  return i.opcode() == Opcode::kCustomCall && i.custom_call_target == target;
}

std::string Describe(const Instruction& i) {
  const std::string op = i.opcode() == Opcode::kGeneric ? i.opcode_text() : std::string(OpcodeName(i.opcode()));
  return op + " '" + i.name() + "'";
}

// Instructions inside manual regions: marked manual, or reached from a SPMDFullToShardShape
// (through users, until SPMDShardToFullShape), and everything in computations they call.
std::unordered_set<const Instruction*> ManualInstructions(const Module& m) {
  std::unordered_set<const Instruction*> manual;
  std::vector<const Instruction*> work;
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if ((i->has_sharding() && IsManualSharding(*i->sharding())) || IsCustomCall(*i, "SPMDFullToShardShape"))
        if (manual.insert(i.get()).second) work.push_back(i.get());
  std::unordered_set<const Computation*> comps;
  while (!work.empty()) {
    const Instruction* i = work.back();
    work.pop_back();
    if (IsCustomCall(*i, "SPMDShardToFullShape")) continue;
    for (const Instruction* u : i->users())
      if (manual.insert(u).second) work.push_back(u);
    for (const Computation* c : i->called_computations()) {
      if (!c || !comps.insert(c).second) continue;
      for (const auto& x : c->instructions())
        if (manual.insert(x.get()).second) work.push_back(x.get());
    }
  }
  return manual;
}

}  // namespace

bool IsBackendOptimized(const Module& m) {
  if (m.is_scheduled) return true;
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if (IsFusion(*i)) return true;
  return false;
}

std::optional<std::string> AlreadyPartitioned(const Module& m) {
  if (m.entry() && EndsWith(m.entry()->name(), "_spmd"))
    return "entry computation '" + m.entry()->name() + "' has the _spmd suffix XLA's SPMD partitioner gives it";
  if (m.is_scheduled) return std::string("the module is scheduled (is_scheduled=true); XLA schedules after partitioning");
  const Instruction* communicating = nullptr;
  bool partitionable = false;
  for (const auto& c : m.computations()) {
    for (const auto& i : c->instructions()) {
      if (IsFusion(*i) || AsyncPartOf(*i) != AsyncPart::kNone) {
        if (i->opcode() != Opcode::kSend && i->opcode() != Opcode::kRecv && i->opcode() != Opcode::kSendDone &&
            i->opcode() != Opcode::kRecvDone)
          return "it contains " + Describe(*i) + ", which XLA's backend creates after partitioning";
      }
      const Opcode op = i->opcode();
      if (!communicating && (IsCollective(op) || op == Opcode::kPartitionId || op == Opcode::kReplicaId ||
                             CollectiveOpcodeOf(*i)))
        communicating = i.get();
      if (i->has_sharding() && HasPartitionableSharding(*i->sharding())) partitionable = true;
    }
  }
  if (!communicating) return std::nullopt;
  const auto manual = ManualInstructions(m);
  for (const auto& c : m.computations()) {
    for (const auto& i : c->instructions()) {
      const bool cross_partition = (IsCollective(i->opcode()) && i->channel_id.has_value()) ||
                                   i->opcode() == Opcode::kPartitionId;
      if (cross_partition && !manual.count(i.get()))
        return "it contains " + Describe(*i) +
               " outside every manual region; a global program communicates only inside manual regions";
    }
  }
  if (!partitionable)
    return "it contains " + Describe(*communicating) + " and no tiled or maximal sharding to partition";
  return std::nullopt;
}

}  // namespace shardscope
