#include "partitioner/collective_combiner.h"

#include <algorithm>
#include <unordered_map>

#include "core/collectives/reduction.h"
#include "core/ir/replica_groups.h"

namespace shardscope {

namespace {

// What must agree for two collectives to be one: kind, groups, element type, dimensions,
// reduction, and how the groups are read (channel id present, global device ids).
std::string KeyOf(const Instruction& i) {
  std::string k = std::string(OpcodeName(i.opcode())) + "|" + ReplicaGroupsText(i.replica_groups) + "|" +
                  std::string(PrimitiveTypeName(i.operand(0)->shape().type)) + "|" + (i.channel_id ? "c" : "-") +
                  (i.use_global_device_ids ? "g" : "-");
  for (int64_t d : i.dimensions) k += "|" + std::to_string(d);
  if (i.to_apply()) {
    auto kind = MatchReduction(i.to_apply());
    k += "|" + (kind ? std::string(ReductionKindName(*kind)) : i.to_apply()->name());
  }
  return k;
}

struct Bucket {
  std::vector<Instruction*> members;
  int64_t bytes = 0;
};

bool IsCandidate(const Instruction& inst, const CollectiveCombinerOptions& options) {
  if (std::find(options.kinds.begin(), options.kinds.end(), inst.opcode()) == options.kinds.end()) return false;
  if (inst.operand_count() != 1 || !inst.shape().IsArray() || !inst.operand(0)->shape().IsArray()) return false;
  if (inst.operand(0)->shape().ByteSize() > options.threshold_bytes) return false;
  return !options.candidate || options.candidate(inst);
}

// The buckets of one computation (program order; see the header for the rule).
std::vector<Bucket> Buckets(Computation* comp, const CollectiveCombinerOptions& options) {
  std::unordered_map<const Instruction*, size_t> key_of;
  std::unordered_map<std::string, size_t> keys;
  for (const auto& i : comp->instructions())
    if (IsCandidate(*i, options)) key_of[i.get()] = keys.try_emplace(KeyOf(*i), keys.size()).first->second;
  if (key_of.size() < 2) return {};
  // Each key has one open bucket, numbered by a generation; depends[x * K + k] is the newest
  // generation of key k's bucket that x depends on (0: none). A candidate whose operand depends on
  // its key's open bucket closes it. O(instructions x keys).
  const size_t K = keys.size();
  size_t ids = 0;
  for (const auto& i : comp->instructions()) ids = std::max(ids, static_cast<size_t>(i->id() + 1));
  std::vector<uint32_t> depends(ids * K, 0);
  std::vector<uint32_t> generation(K, 1);
  std::vector<Bucket> open(K), done;
  for (const auto& holder : comp->instructions()) {
    Instruction* inst = holder.get();
    uint32_t* mine = &depends[static_cast<size_t>(inst->id()) * K];
    auto merge = [&](const Instruction* o) {
      const uint32_t* theirs = &depends[static_cast<size_t>(o->id()) * K];
      for (size_t k = 0; k < K; ++k) mine[k] = std::max(mine[k], theirs[k]);
    };
    for (const Instruction* o : inst->operands()) merge(o);
    for (const Instruction* o : inst->control_predecessors) merge(o);
    auto it = key_of.find(inst);
    if (it == key_of.end()) continue;
    const size_t k = it->second;
    const int64_t bytes = inst->operand(0)->shape().ByteSize();
    Bucket& b = open[k];
    const bool conflict = mine[k] == generation[k];
    if (!b.members.empty() && (b.bytes + bytes > options.threshold_bytes || conflict)) {
      done.push_back(std::move(b));
      b = Bucket{};
      ++generation[k];
    }
    b.members.push_back(inst);
    b.bytes += bytes;
    mine[k] = generation[k];
  }
  for (Bucket& b : open) done.push_back(std::move(b));
  done.erase(std::remove_if(done.begin(), done.end(), [](const Bucket& b) { return b.members.size() < 2; }), done.end());
  return done;
}

}  // namespace

std::vector<CombinedCollective> CombineCollectives(Module& module, const CollectiveCombinerOptions& options) {
  std::vector<CombinedCollective> out;
  if (options.threshold_bytes <= 0) return out;
  for (const auto& comp_holder : module.computations()) {
    Computation* comp = comp_holder.get();
    std::vector<Bucket> buckets = Buckets(comp, options);
    if (buckets.empty()) continue;
    // Program positions before any change: each combined op goes where the last of its operands is
    // defined, i.e. before the instruction that followed that operand (users of earlier members
    // placed above it are moved below by the topological sort at the end).
    std::unordered_map<const Instruction*, size_t> position;
    const auto& list = comp->instructions();
    for (size_t k = 0; k < list.size(); ++k) position[list[k].get()] = k;
    std::vector<const Instruction*> original;
    for (const auto& i : list) original.push_back(i.get());
    std::vector<Instruction*> dead;
    std::unordered_map<const Instruction*, Instruction*> combined_into;  // member -> combined op
    for (Bucket& b : buckets) {
      Instruction* first = b.members.front();
      std::vector<Instruction*> operands;
      std::vector<Shape> shapes;
      for (Instruction* m : b.members) {
        operands.push_back(m->operand(0));
        shapes.push_back(m->shape());
      }
      Instruction* c = comp->AddInstruction(first->opcode(), Shape::Tuple(shapes), operands,
                                            std::string(OpcodeName(first->opcode())) + ".combined");
      CopyAttributes(*first, c);
      c->mutable_called_computations() = first->called_computations();
      size_t last = 0;
      for (const Instruction* o : operands) last = std::max(last, position.at(o));
      const Instruction* before = last + 1 < original.size() ? original[last + 1] : nullptr;
      if (before) comp->MoveBefore(c, before);
      position[c] = last;  // an operand of a later bucket may be this one's result
      CombinedCollective rec;
      rec.computation = comp->name();
      rec.instruction = c->name();
      rec.kind = c->opcode();
      rec.bytes_per_device = b.bytes;
      rec.replica_groups = ReplicaGroupsText(first->replica_groups, 200);
      for (size_t k = 0; k < b.members.size(); ++k) {
        Instruction* m = b.members[k];
        Instruction* g = comp->AddInstruction(Opcode::kGetTupleElement, m->shape(), {c}, m->name());
        g->tuple_index = static_cast<int64_t>(k);
        g->metadata = m->metadata;
        if (before) comp->MoveBefore(g, before);
        position[g] = last;
        m->ReplaceAllUsesWith(g);
        dead.push_back(m);
        rec.members.push_back(m->name());
      }
      // Control edges move to the combined op: it runs after what each member ran after, and what
      // ran after a member runs after it (no cycle: a member ordered after another by a control
      // edge depends on it, and so is never in its bucket).
      for (Instruction* m : b.members)
        for (Instruction* p : m->control_predecessors)
          if (std::find(b.members.begin(), b.members.end(), p) == b.members.end() &&
              std::find(c->control_predecessors.begin(), c->control_predecessors.end(), p) == c->control_predecessors.end())
            c->control_predecessors.push_back(p);
      for (Instruction* m : b.members) combined_into[m] = c;
      out.push_back(std::move(rec));
    }
    for (const auto& other : comp->instructions()) {
      auto& cp = other->control_predecessors;
      if (cp.empty() || combined_into.count(other.get())) continue;
      bool moved = false;
      for (Instruction*& p : cp)
        if (auto it = combined_into.find(p); it != combined_into.end()) {
          p = it->second;
          moved = true;
        }
      if (moved) {  // each combined op once, where its first member was
        std::vector<Instruction*> kept;
        for (Instruction* p : cp)
          if (std::find(kept.begin(), kept.end(), p) == kept.end() && p != other.get()) kept.push_back(p);
        cp = std::move(kept);
      }
    }
    (void)comp->RemoveInstructions(dead);
    comp->SortInstructionsTopologically();
  }
  return out;
}

void RecordCombinedCollectives(
    const std::vector<CombinedCollective>& combined,
    const std::function<std::string(const CombinedCollective&, const std::vector<const InsertedCollective*>&)>& reason,
    std::vector<InsertedCollective>* records) {
  if (combined.empty()) return;
  std::unordered_map<std::string, size_t> record_of;
  for (size_t k = 0; k < records->size(); ++k) record_of.emplace((*records)[k].instruction, k);
  std::vector<bool> drop(records->size(), false);
  std::vector<InsertedCollective> added;
  for (const CombinedCollective& c : combined) {
    std::vector<const InsertedCollective*> members;
    InsertedCollective rec;
    rec.instruction = c.instruction;
    rec.kind = c.kind;
    rec.bytes_per_device = c.bytes_per_device;
    rec.replica_groups = c.replica_groups;
    size_t named = 0;
    for (const std::string& m : c.members) {
      auto it = record_of.find(m);
      if (it == record_of.end()) continue;
      drop[it->second] = true;
      members.push_back(&(*records)[it->second]);
      if (named++ < 3) rec.origin += (rec.origin.empty() ? "" : ", ") + (*records)[it->second].origin;
    }
    if (c.members.size() > 3) rec.origin += ", ... (" + std::to_string(c.members.size()) + " in all)";
    rec.reason = reason(c, members);
    added.push_back(std::move(rec));
  }
  std::vector<InsertedCollective> kept;
  for (size_t k = 0; k < records->size(); ++k)
    if (!drop[k]) kept.push_back(std::move((*records)[k]));
  for (auto& a : added) kept.push_back(std::move(a));
  *records = std::move(kept);
}

}  // namespace shardscope
