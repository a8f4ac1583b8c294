#include "partitioner/weight_update_sharding/weight_update_sharding.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_map>

#include "partitioner/weight_update_sharding/plan.h"

namespace shardscope {

namespace {


}  // namespace

Result<WeightUpdateShardingResult> ShardWeightUpdates(const Module& spmd_program, const WeightUpdateShardingOptions& options) {
  auto plan = wus::MakePlan(spmd_program, options);
  if (!plan.ok()) return Error("weight-update sharding: " + plan.error().message);
  WeightUpdateShardingResult result;
  result.redundant_instructions = (*plan)->redundancy->redundant_instructions();
  for (const wus::Cluster& cl : (*plan)->clusters)
    if (!cl.seeds.empty()) result.decisions.push_back(cl.decision);
  // One record per all-reduce: a rejected cluster appears once for each of its seeds; keep the
  // sharded ones and the last word on the others.
  std::stable_sort(result.decisions.begin(), result.decisions.end(),
                   [](const WeightUpdateDecision& a, const WeightUpdateDecision& b) { return a.all_reduce < b.all_reduce; });
  std::vector<WeightUpdateDecision> unique;
  for (auto& d : result.decisions) {
    if (!unique.empty() && unique.back().all_reduce == d.all_reduce) {
      if (d.sharded || !unique.back().sharded) unique.back() = std::move(d);
      continue;
    }
    unique.push_back(std::move(d));
  }
  result.decisions = std::move(unique);
  if (Status s = wus::EmitPlan(**plan, &result); !s.ok()) return Error("weight-update sharding: " + s.error().message);
  int64_t sharded = 0;
  for (const auto& d : result.decisions) sharded += d.sharded ? 1 : 0;
  std::ostringstream os;
  os << "weight-update sharding: " << sharded << " of " << result.decisions.size() << " gradient all-reduces sharded, "
     << result.redundant_instructions << " redundant instructions, " << result.collectives.size()
     << " collectives inserted (" << result.combined_collectives << " merged by batching)";
  if (result.split) os << "; the step is split into sharding, main and unsharding programs";
  result.summary = os.str();
  return result;
}

Result<WeightUpdateShardingResult> ShardWeightUpdatesOf(PartitionResult& partition, const WeightUpdateShardingOptions& options) {
  if (!partition.module) return Error("weight-update sharding: the partition result has no module");
  auto r = ShardWeightUpdates(*partition.module, options);
  if (!r.ok()) return r;
  std::vector<InsertedCollective> kept;
  for (auto& c : partition.collectives)
    if (std::find(r->replaced_all_reduces.begin(), r->replaced_all_reduces.end(), c.instruction) == r->replaced_all_reduces.end())
      kept.push_back(std::move(c));
  kept.insert(kept.end(), r->collectives.begin(), r->collectives.end());
  partition.collectives = std::move(kept);
  r->input = std::move(partition.module);
  partition.module = std::move(r->module);
  return r;
}

namespace {

// Copies `src` and what it calls into `dst`, computations renamed `prefix` + name.
Computation* CopyInto(const Computation* src, Module* dst, const std::string& prefix,
                      std::unordered_map<const Computation*, Computation*>& done) {
  if (auto it = done.find(src); it != done.end()) return it->second;
  for (const auto& inst : src->instructions())
    for (const Computation* callee : inst->called_computations()) CopyInto(callee, dst, prefix, done);
  Computation* c = dst->AddComputation(prefix + src->name());
  done[src] = c;
  std::unordered_map<const Instruction*, Instruction*> map;
  for (const auto& holder : src->instructions()) {
    const Instruction* inst = holder.get();
    std::vector<Instruction*> ops;
    for (const Instruction* o : inst->operands()) ops.push_back(map.at(o));
    Instruction* n = inst->opcode() == Opcode::kGeneric ? c->AddGeneric(inst->opcode_text(), inst->shape(), ops, inst->name())
                                                         : c->AddInstruction(inst->opcode(), inst->shape(), ops, inst->name());
    CopyAttributes(*inst, n);
    if (inst->has_sharding()) n->set_sharding(*inst->sharding());
    for (const Computation* callee : inst->called_computations()) n->mutable_called_computations().push_back(done.at(callee));
    map[inst] = n;
  }
  c->set_root(map.at(src->root()));
  return c;
}

}  // namespace

Result<std::unique_ptr<Module>> ComposeStepPrograms(const WeightUpdateShardingResult& r) {
  if (!r.module) return Error("weight-update sharding: the result holds no main program (ShardWeightUpdatesOf moved it to the partition)");
  return ComposeStepPrograms(r, *r.module);
}

Result<std::unique_ptr<Module>> ComposeStepPrograms(const WeightUpdateShardingResult& r, const Module& main_program) {
  if (!r.split || !r.sharding_program || !r.unsharding_program)
    return Error("weight-update sharding did not split the step: the rewritten module is the whole program");
  auto m = std::make_unique<Module>(main_program.name() + ".composed");
  m->num_partitions = main_program.num_partitions;
  m->num_replicas = main_program.num_replicas;
  const Computation* sharding_in = r.sharding_program->entry();
  std::unordered_map<const Computation*, Computation*> a, b, c;
  Computation* entry = m->AddComputation("composed", /*is_entry=*/true);
  std::vector<Instruction*> params;
  for (const Instruction* p : sharding_in->parameters()) {
    Instruction* np = entry->AddInstruction(Opcode::kParameter, p->shape(), {}, p->name());
    np->parameter_number = p->parameter_number;
    if (p->has_sharding()) np->set_sharding(*p->sharding());
    params.push_back(np);
  }
  Computation* sharding = CopyInto(sharding_in, m.get(), "sharding.", a);
  Computation* main = CopyInto(main_program.entry(), m.get(), "main.", b);
  Computation* unsharding = CopyInto(r.unsharding_program->entry(), m.get(), "unsharding.", c);
  auto call = [&](Computation* callee, std::vector<Instruction*> args, const std::string& name) {
    Instruction* i = entry->AddInstruction(Opcode::kCall, callee->root()->shape(), std::move(args), name);
    i->mutable_called_computations() = {callee};
    return i;
  };
  auto elements = [&](Instruction* t) {
    std::vector<Instruction*> out;
    if (!t->shape().IsTuple()) return std::vector<Instruction*>{t};
    for (int64_t k = 0; k < static_cast<int64_t>(t->shape().tuple.size()); ++k) {
      Instruction* g = entry->AddInstruction(Opcode::kGetTupleElement, t->shape().tuple[static_cast<size_t>(k)], {t});
      g->tuple_index = k;
      out.push_back(g);
    }
    return out;
  };
  Instruction* sharded = call(sharding, params, "sharding");
  Instruction* stepped = call(main, elements(sharded), "main");
  entry->set_root(call(unsharding, elements(stepped), "unsharding"));
  return m;
}

std::string DescribeWeightUpdateSharding(const WeightUpdateShardingResult& r) {
  std::ostringstream os;
  os << r.summary << "\n";
  for (const auto& d : r.decisions) {
    os << "  " << d.weight << " (all-reduce " << d.all_reduce << (d.computation.empty() ? "" : " in " + d.computation) << "): ";
    os << (d.sharded ? "sharded" : "replicated") << "\n";
    if (!d.format.empty()) os << "      format  " << d.format << "\n";
    if (!d.scheme.empty() && d.sharded) os << "      scheme  " << d.scheme << "\n";
    for (const auto& n : d.non_elementwise) os << "      reduce  " << n << "\n";
    if (!d.sharded_state.empty()) {
      os << "      kept sharded across steps:";
      for (const auto& s : d.sharded_state) os << " " << s;
      os << "\n";
    }
    os << "      why     " << d.reason << "\n";
  }
  std::map<std::string, int64_t> kinds;
  for (const auto& c : r.collectives) ++kinds[std::string(OpcodeName(c.kind))];
  os << "collectives inserted:";
  for (const auto& [k, n] : kinds) os << " " << n << " " << k;
  os << "\n";
  for (const auto& c : r.collectives)
    os << "  " << c.instruction << " = " << OpcodeName(c.kind) << " (" << c.bytes_per_device << " bytes/device, groups "
       << c.replica_groups << ")" << (c.origin.empty() ? "" : " from " + c.origin) << ": " << c.reason << "\n";
  if (!r.replaced_all_reduces.empty()) {
    os << "all-reduces replaced:";
    for (const auto& a : r.replaced_all_reduces) os << " " << a;
    os << "\n";
  }
  return os.str();
}

}  // namespace shardscope
