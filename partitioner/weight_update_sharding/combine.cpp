// Batching of the pass's collectives (paper section 5.2): reduce-scatters, all-gathers and
// all-reduces the pass inserted, over the same device groups, are combined into one variadic
// collective while their operands stay within a size threshold — the same replica groups and shard
// assignment hold for every tensor, so one collective (costed once: one latency) moves them all.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/collectives/reduction.h"
#include "core/ir/replica_groups.h"
#include "partitioner/weight_update_sharding/plan.h"

namespace shardscope::wus {

namespace {

std::string KeyOf(const Instruction& i) {
  std::string k = std::string(OpcodeName(i.opcode())) + "|" + ReplicaGroupsText(i.replica_groups) + "|" +
                  std::string(PrimitiveTypeName(i.operand(0)->shape().type));
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

}  // namespace

int64_t CombineCollectives(Module* module, int64_t threshold, const std::unordered_set<std::string>& once,
                           std::vector<InsertedCollective>* records) {
  if (threshold <= 0) return 0;
  std::unordered_map<std::string, size_t> record_of;
  for (size_t k = 0; k < records->size(); ++k) record_of[(*records)[k].instruction] = k;
  int64_t merged = 0;
  std::vector<bool> drop(records->size(), false);
  std::vector<InsertedCollective> added;
  for (const auto& comp_holder : module->computations()) {
    Computation* comp = comp_holder.get();
    // The candidates and their keys (same opcode, groups, type, dims and reduction combine).
    std::unordered_map<const Instruction*, size_t> key_of;
    std::unordered_map<std::string, size_t> keys;
    for (const auto& i : comp->instructions()) {
      const Instruction* inst = i.get();
      const Opcode op = inst->opcode();
      if (op != Opcode::kAllGather && op != Opcode::kReduceScatter && op != Opcode::kAllReduce) continue;
      if (inst->operand_count() != 1 || !inst->shape().IsArray() || !record_of.count(inst->name()) || once.count(inst->name()))
        continue;
      if (inst->operand(0)->shape().ByteSize() > threshold) continue;
      key_of[inst] = keys.try_emplace(KeyOf(*inst), keys.size()).first->second;
    }
    if (key_of.size() < 2) continue;
    // One pass in definition order (topological: the IR's contract). Each key has one open bucket,
    // numbered by a generation; depends[x * K + k] is the newest generation of key k's bucket that x
    // depends on (0: none). A collective whose operand depends on its key's open bucket cannot join
    // it (the combined op would feed its own operand): the bucket closes. O(instructions x keys),
    // where marking each bucket's downstream cost a walk of the rest of the graph per bucket.
    const size_t K = keys.size();
    size_t ids = 0;
    for (const auto& i : comp->instructions()) ids = std::max(ids, static_cast<size_t>(i->id() + 1));
    std::vector<uint32_t> depends(ids * K, 0);
    std::vector<uint32_t> generation(K, 1);
    std::vector<Bucket> open(K);
    std::vector<Bucket> done;
    std::vector<Instruction*> order;
    for (const auto& i : comp->instructions()) order.push_back(i.get());
    for (Instruction* inst : order) {
      uint32_t* mine = &depends[static_cast<size_t>(inst->id()) * K];
      for (const Instruction* o : inst->operands()) {
        const uint32_t* theirs = &depends[static_cast<size_t>(o->id()) * K];
        for (size_t k = 0; k < K; ++k) mine[k] = std::max(mine[k], theirs[k]);
      }
      for (const Instruction* o : inst->control_predecessors) {
        const uint32_t* theirs = &depends[static_cast<size_t>(o->id()) * K];
        for (size_t k = 0; k < K; ++k) mine[k] = std::max(mine[k], theirs[k]);
      }
      auto it = key_of.find(inst);
      if (it == key_of.end()) continue;
      const size_t k = it->second;
      const int64_t bytes = inst->operand(0)->shape().ByteSize();
      Bucket& b = open[k];
      const bool conflict = mine[k] == generation[k];
      if (!b.members.empty() && (b.bytes + bytes > threshold || conflict)) {
        done.push_back(std::move(b));
        b = Bucket{};
        ++generation[k];
      }
      b.members.push_back(inst);
      b.bytes += bytes;
      mine[k] = generation[k];
    }
    for (Bucket& b : open) done.push_back(std::move(b));
    std::vector<Instruction*> dead;
    for (Bucket& b : done) {
      if (b.members.size() < 2) continue;
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
      InsertedCollective rec;
      rec.instruction = c->name();
      rec.kind = c->opcode();
      rec.replica_groups = ReplicaGroupsText(first->replica_groups, 200);
      std::string reasons;
      for (size_t k = 0; k < b.members.size(); ++k) {
        Instruction* m = b.members[k];
        Instruction* g = comp->AddInstruction(Opcode::kGetTupleElement, m->shape(), {c}, m->name());
        g->tuple_index = static_cast<int64_t>(k);
        g->metadata = m->metadata;
        m->ReplaceAllUsesWith(g);
        dead.push_back(m);
        const size_t r = record_of[m->name()];
        drop[r] = true;
        rec.bytes_per_device += (*records)[r].bytes_per_device;
        if (k < 3) {
          rec.origin += (rec.origin.empty() ? "" : ", ") + (*records)[r].origin;
          reasons += (reasons.empty() ? "" : "; ") + (*records)[r].reason;
        }
      }
      if (b.members.size() > 3) {
        rec.origin += ", ... (" + std::to_string(b.members.size()) + " in all)";
        reasons += "; ...";
      }
      rec.reason = "weight-update sharding: " + std::to_string(b.members.size()) + " " +
                   std::string(OpcodeName(first->opcode())) + "s over the same groups batched into one (section 5.2): " +
                   reasons;
      added.push_back(std::move(rec));
      merged += static_cast<int64_t>(b.members.size()) - 1;
    }
    if (!dead.empty()) {
      (void)comp->RemoveInstructions(dead);
      comp->SortInstructionsTopologically();  // the combined collectives were added last
    }
  }
  std::vector<InsertedCollective> kept;
  for (size_t k = 0; k < records->size(); ++k)
    if (!drop[k]) kept.push_back(std::move((*records)[k]));
  for (auto& a : added) kept.push_back(std::move(a));
  *records = std::move(kept);
  return merged;
}

}  // namespace shardscope::wus
