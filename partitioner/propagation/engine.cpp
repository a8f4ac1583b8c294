// The propagation engine, part 1: indexing a module, turning its annotations into the starting
// state, the region an incremental update re-propagates, and the two entry points. See engine.h.
#include "partitioner/propagation/engine.h"

#include <algorithm>
#include <set>
#include <unordered_set>

namespace shardscope::prop {

namespace {

bool IsCsePreventionSharding(const HloSharding& s) {
  return s.metadata().size() == 1 && s.metadata()[0].text.find("_sharding_propagation_cse_prevention") != std::string::npos;
}

template <typename A, typename B>
bool SameOptional(const A& a, const B& b) {  // std::optional<HloSharding> or ShardingSlot
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return *a == *b && a->kind() == b->kind();
}

}  // namespace

PropagationEngine::PropagationEngine(PropagationOptions opts) : options(std::move(opts)) {
  if (!options.dot_memo) options.dot_memo = std::make_shared<hlo_sharding_util::DotShardingMemo>();
  dot_memo = options.dot_memo.get();
  Configure();
}

Status PropagationEngine::Run(Module& m, bool* changed) {
  Status st = Index(m);
  if (!st.ok()) return st;
  const size_t n = by_id.size();
  annotation.assign(n, std::nullopt);
  for (size_t i = 0; i < n; ++i) {
    if (by_id[i] && by_id[i]->has_sharding()) annotation[i] = by_id[i]->sharding();
  }
  setup = BuildSetup(annotation);
  origin.assign(n, ShardingOrigin{});
  in_region.assign(n, 0);
  for (size_t i = 0; i < n; ++i) in_region[i] = by_id[i] != nullptr;
  ApplySetupToRegion();
  *changed = Propagate();
  return Status::Ok();
}

Status PropagationEngine::Update(const std::vector<Instruction*>& edited, bool* changed,
                                 std::vector<const Instruction*>* repaint) {
  iteration = 0;
  rule_evaluations = 0;
  inferred = 0;
  std::vector<size_t> seeds;
  for (Instruction* inst : edited) {
    if (!inst || !Known(inst)) return Error("Update: instruction is not part of the propagated module");
    if (inst->has_sharding()) {
      const HloSharding& sh = *inst->sharding();
      const Shape& shape = inst->shape();
      const bool fits = shape.IsTuple()
                            ? (!sh.IsTuple() || static_cast<int64_t>(sh.tuple_elements().size()) == shape.LeafCount())
                            : (!sh.IsTuple() && (!sh.IsTiled() || sh.TiledDataRank() == shape.rank()));
      if (!fits) {
        return Error("Update: sharding " + sh.ToString() + " does not fit " + inst->name() + " " + shape.ToString());
      }
    }
    const size_t id = Id(inst);
    annotation[id] = inst->sharding();
    seeds.push_back(id);
  }
  Setup old_setup = std::move(setup);
  setup = BuildSetup(annotation);
  for (size_t i = 0; i < by_id.size(); ++i) {
    if (!by_id[i]) continue;
    const bool same = SameOptional(old_setup.initial[i], setup.initial[i]) &&
                      old_setup.provided[i] == setup.provided[i] &&
                      old_setup.unspecified.count(static_cast<int64_t>(i)) ==
                          setup.unspecified.count(static_cast<int64_t>(i)) &&
                      (old_setup.group_of[i] >= 0) == (setup.group_of[i] >= 0);
    if (!same) seeds.push_back(i);
  }
  in_region = Region(seeds, old_setup);
  std::vector<std::pair<const Instruction*, std::optional<HloSharding>>> before;
  for (size_t i = 0; i < by_id.size(); ++i) {
    if (by_id[i] && in_region[i]) before.emplace_back(by_id[i], by_id[i]->sharding());
  }
  // The edited annotations themselves were changed in place; compare against what they were.
  for (auto& [inst, s] : before) {
    if (std::find(edited.begin(), edited.end(), inst) != edited.end()) s = old_setup.initial[Id(inst)];
  }
  ApplySetupToRegion();
  *changed = Propagate();
  for (const auto& [inst, s] : before) {
    if (!SameOptional(s, inst->sharding())) repaint->push_back(inst);
  }
  return Status::Ok();
}

std::unordered_map<const Instruction*, std::optional<HloSharding>> PropagationEngine::Annotations() const {
  std::unordered_map<const Instruction*, std::optional<HloSharding>> known;
  for (size_t i = 0; i < by_id.size(); ++i) {
    if (by_id[i]) known[by_id[i]] = annotation[i];
  }
  return known;
}

const ShardingOrigin* PropagationEngine::OriginOf(const Instruction& inst) const {
  return Known(&inst) ? &origin[Id(&inst)] : nullptr;
}

bool PropagationEngine::IsUserAnnotation(const Instruction& inst) const {
  return Known(&inst) && annotation[Id(&inst)].has_value();
}

void PropagationEngine::PostOrder(const Computation& comp, std::vector<Instruction*>* out) {
  // XLA's MakeInstructionPostOrder: a depth-first post order from every instruction without
  // users, in definition order; operands first-to-last, then control predecessors.
  std::unordered_map<const Instruction*, uint8_t> state;  // 1 visiting, 2 done
  state.reserve(comp.instructions().size() * 2);
  std::vector<Instruction*> stack;
  for (const auto& up : comp.instructions()) {
    Instruction* root = up.get();
    if (!root->users().empty()) continue;
    stack.push_back(root);
    while (!stack.empty()) {
      Instruction* cur = stack.back();
      auto [it, inserted] = state.emplace(cur, 1);
      if (!inserted) {
        stack.pop_back();
        if (it->second != 2) {
          out->push_back(cur);
          it->second = 2;
        }
        continue;
      }
      const auto& ops = cur->operands();
      for (auto r = ops.rbegin(); r != ops.rend(); ++r) {
        if ((*r)->parent() == &comp) stack.push_back(*r);
      }
      for (Instruction* p : cur->control_predecessors) {
        if (p->parent() == &comp) stack.push_back(p);
      }
    }
  }
  // Instructions only reachable through cycles (malformed input) still get a position.
  if (out->size() < comp.instructions().size()) {
    for (const auto& up : comp.instructions()) {
      if (!state.count(up.get())) out->push_back(up.get());
    }
  }
}

Status PropagationEngine::Index(Module& m) {
  module = &m;
  if (m.entry() == nullptr) return Error("module has no entry computation");
  int64_t max_id = -1;
  instruction_count = 0;
  for (const auto& c : m.computations()) {
    for (const auto& i : c->instructions()) {
      if (i->id() < 0) return Error("instruction '" + i->name() + "' has no id; build it with Computation::AddInstruction");
      max_id = std::max(max_id, i->id());
      ++instruction_count;
    }
  }
  if (max_id > 64 * (instruction_count + 1024)) return Error("instruction ids are too sparse to index");
  const size_t n = static_cast<size_t>(max_id + 1);
  by_id.assign(n, nullptr);
  comp_of.assign(n, -1);
  pos_of.assign(n, -1);
  rule_of.assign(n, nullptr);
  version.assign(n, 0);
  change_time.assign(n, 1);
  fwd_time.assign(n, 0);
  bwd_time.assign(n, 0);
  fwd_class.assign(n, -1);
  bwd_class.assign(n, -1);
  dot_dims.clear();
  dot_dims.resize(n);
  dot_forward_memo.clear();
  backward_memo.clear();
  comps.clear();
  caller.clear();
  unsupported.clear();
  std::set<std::string> unsupported_set;
  for (const auto& c : m.computations()) {
    CompInfo info;
    info.comp = c.get();
    PostOrder(*c, &info.post);
    const int32_t ci = static_cast<int32_t>(comps.size());
    for (size_t p = 0; p < info.post.size(); ++p) {
      Instruction* inst = info.post[p];
      const size_t id = static_cast<size_t>(inst->id());
      if (by_id[id] != nullptr) return Error("duplicate instruction id " + std::to_string(id));
      by_id[id] = inst;
      comp_of[id] = ci;
      pos_of[id] = static_cast<int32_t>(p);
      rule_of[id] = &RuleFor(*inst);
      if (inst->opcode() == Opcode::kGeneric && rule_of[id]->family == "elementwise" &&
          inst->opcode_text() != "topk") {
        unsupported_set.insert(inst->opcode_text());
      }
    }
    info.fwd.Reset(info.post.size());
    info.bwd.Reset(info.post.size());
    info.group.Reset(info.post.size());
    comps.push_back(std::move(info));
  }
  for (const auto& c : m.computations()) {
    for (const auto& up : c->instructions()) {
      Instruction* inst = up.get();
      if (inst->opcode() == Opcode::kWhile) {
        if (inst->while_body()) caller[inst->while_body()] = inst;
        if (inst->while_condition()) caller[inst->while_condition()] = inst;
      } else if (inst->opcode() == Opcode::kConditional || inst->opcode() == Opcode::kCall) {
        for (Computation* called : inst->called_computations()) caller[called] = inst;
      }
    }
  }
  unsupported.assign(unsupported_set.begin(), unsupported_set.end());
  return Status::Ok();
}

bool PropagationEngine::SameStructure(Module& m) const {
  if (module != &m) return false;
  int64_t count = 0;
  for (const auto& c : m.computations()) {
    for (const auto& i : c->instructions()) {
      const int64_t id = i->id();
      if (id < 0 || id >= static_cast<int64_t>(by_id.size()) || by_id[static_cast<size_t>(id)] != i.get()) return false;
      ++count;
    }
  }
  return count == instruction_count;
}

std::vector<Instruction*> PropagationEngine::Related(Instruction* inst) const {
  std::vector<Instruction*> r;
  switch (inst->opcode()) {
    case Opcode::kWhile:
      r.push_back(inst);
      if (inst->while_body() && inst->while_body()->root()) r.push_back(inst->while_body()->root());
      if (inst->while_body() && !inst->while_body()->parameters().empty()) r.push_back(inst->while_body()->parameter(0));
      if (inst->while_condition() && !inst->while_condition()->parameters().empty()) {
        r.push_back(inst->while_condition()->parameter(0));
      }
      return r;
    case Opcode::kConditional:
      r.push_back(inst);
      for (Computation* c : inst->called_computations()) {
        if (c->root()) r.push_back(c->root());
      }
      return r;
    case Opcode::kCall:
      r.push_back(inst);
      if (!inst->called_computations().empty() && inst->called_computations()[0]->root()) {
        r.push_back(inst->called_computations()[0]->root());
      }
      return r;
    case Opcode::kParameter: {
      auto it = caller.find(inst->parent());
      if (it == caller.end()) return r;
      Instruction* c = it->second;
      if (c->opcode() == Opcode::kConditional) {
        const auto& branches = c->called_computations();
        for (size_t b = 0; b < branches.size(); ++b) {
          if (branches[b] == inst->parent() && static_cast<int64_t>(b) + 1 < c->operand_count()) {
            return {inst, c->operand(static_cast<int64_t>(b) + 1)};
          }
        }
      }
      if (c->opcode() == Opcode::kCall && inst->parameter_number >= 0 &&
          inst->parameter_number < c->operand_count()) {
        return {inst, c->operand(inst->parameter_number)};
      }
      return r;
    }
    default:
      return r;
  }
}

PropagationEngine::Setup PropagationEngine::BuildSetup(const std::vector<ShardingSlot>& ann) const {
  Setup s;
  const size_t n = by_id.size();
  s.initial.assign(n, std::nullopt);
  s.origin.assign(n, ShardingOrigin{});
  s.provided.assign(n, 0);
  s.group_of.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (!by_id[i] || !ann[i]) continue;
    if (!options.cse_prevention_only && IsCsePreventionSharding(*ann[i])) continue;
    s.initial[i] = ann[i];
    s.origin[i] = ShardingOrigin{Direction::kAnnotation, nullptr, nullptr, "user annotation", -1, -1};
  }
  const bool replace = !options.cse_prevention_only;
  std::unordered_map<int64_t, int32_t> group_index;
  auto register_group = [&](Instruction* inst) {
    HloSharding& sh = *s.initial[Id(inst)];
    const int64_t gid = *sh.shard_group_id();
    auto [it, inserted] = group_index.emplace(gid, static_cast<int32_t>(s.groups.size()));
    if (inserted) s.groups.push_back(Group{gid, sh.shard_as(), {}});
    s.groups[static_cast<size_t>(it->second)].members.push_back(inst);
    s.group_of[Id(inst)] = it->second;
    sh.set_shard_group(std::nullopt, false);
  };
  Instruction* entry_root = module->entry()->root();
  for (const CompInfo& ci : comps) {
    for (auto it = ci.post.rbegin(); it != ci.post.rend(); ++it) {
      Instruction* inst = *it;
      auto& sh = s.initial[Id(inst)];
      if (IsCustomCall(*inst, "Sharding") && inst->operand_count() == 1) {
        if (!sh) continue;
        Instruction* operand = inst->operand(0);
        std::vector<int64_t> unspec = SortedUnspecifiedDims(*inst);
        const bool replaced = replace && (!sh->IsUnknown() || operand->opcode() == Opcode::kParameter);
        if (replace && sh->shard_group_id()) {
          if (!replaced) {
            // XLA drops the annotation op and hands its group to the operand.
            auto& os = s.initial[Id(operand)];
            HloSharding next = os ? *os : HloSharding::Unknown();
            next.set_shard_group(sh->shard_group_id(), sh->shard_as());
            os = std::move(next);
            if (s.origin[Id(operand)].direction != Direction::kAnnotation || !ann[Id(operand)]) {
              s.origin[Id(operand)] = ShardingOrigin{Direction::kPreprocess, inst, nullptr, "shard group of annotation", -1, -1};
            }
            sh.reset();
            s.origin[Id(inst)] = ShardingOrigin{};
            continue;
          }
          register_group(inst);
        }
        if (!unspec.empty()) {
          s.unspecified[static_cast<int64_t>(Id(inst))] = std::move(unspec);
        } else if (!s.initial[Id(operand)]) {
          s.initial[Id(operand)] = *sh;
          s.origin[Id(operand)] = ShardingOrigin{Direction::kPreprocess, inst, nullptr, "Sharding custom-call operand", -1, -1};
        }
      } else if (replace && sh && sh->shard_group_id()) {
        register_group(inst);
      }
    }
  }
  if (options.propagate_to_output.size() > 0 && allow_output && entry_root && entry_root->shape().IsTuple() &&
      s.initial[Id(entry_root)]) {
    s.saved_root = hlo_sharding_util::ToTupleForm(*s.initial[Id(entry_root)], entry_root->shape()).tuple_elements();
  }
  if (allow_params) {
    for (Instruction* p : module->entry()->parameters()) {
      if (s.initial[Id(p)]) s.saved_params[p->parameter_number] = *s.initial[Id(p)];
    }
  }
  // While loops with a channel instruction pinned to one device keep the whole loop there.
  for (const CompInfo& ci : comps) {
    for (Instruction* inst : ci.post) {
      if (inst->opcode() != Opcode::kWhile || inst->while_body() == nullptr) continue;
      std::optional<int64_t> device;
      const Instruction* channel = nullptr;
      for (const auto& up : inst->while_body()->instructions()) {
        const auto& bs = s.initial[Id(up.get())];
        if (!bs) continue;
        auto d = hlo_sharding_util::UniqueDevice(*bs);
        if (!d) continue;
        const Opcode op = up->opcode();
        bool host_transfer = false;
        for (const auto& a : up->raw_attributes) host_transfer |= a.key == "is_host_transfer" && a.value == "true";
        const bool is_channel = ((op == Opcode::kSend || op == Opcode::kRecv) && !host_transfer) ||
                                ((op == Opcode::kAllReduce || op == Opcode::kReduceScatter) && up->channel_id);
        if (is_channel && !device) {
          device = d;
          channel = up.get();
        }
      }
      Instruction* body_root = inst->while_body()->root();
      if (device && body_root) {
        auto& rs = s.initial[Id(body_root)];
        if (!rs || !hlo_sharding_util::UniqueDevice(*rs)) {
          rs = HloSharding::AssignDevice(*device);
          s.origin[Id(body_root)] = ShardingOrigin{Direction::kPreprocess, channel, nullptr, "while body channel device", -1, -1};
        }
      }
    }
  }
  // Loop-carried values, conditional branches and calls start with one sharding.
  for (const auto& c : module->computations()) {
    for (const auto& up : c->instructions()) {
      Instruction* inst = up.get();
      if (inst->opcode() != Opcode::kWhile && inst->opcode() != Opcode::kConditional &&
          inst->opcode() != Opcode::kCall) {
        continue;
      }
      auto related = Related(inst);
      Instruction* sharded = nullptr;
      for (Instruction* r : related) {
        if (s.initial[Id(r)]) {
          sharded = r;
          break;
        }
      }
      if (sharded == nullptr) continue;
      const HloSharding value = *s.initial[Id(sharded)];
      for (Instruction* r : related) {
        if (r == sharded) continue;
        s.initial[Id(r)] = value;
        s.origin[Id(r)] = ShardingOrigin{Direction::kPreprocess, sharded, nullptr, "loop/call consistency", -1, -1};
      }
    }
  }
  // The provided (kept) shardings.
  for (size_t i = 0; i < n; ++i) {
    Instruction* inst = by_id[i];
    if (!inst || !s.initial[i]) continue;
    if (inst == entry_root || inst->opcode() == Opcode::kParameter || s.initial[i]->IsUnknown()) continue;
    s.provided[i] = 1;
  }
  s.root_is_while = entry_root && entry_root->opcode() == Opcode::kWhile;
  if (entry_root && !allow_output && (!s.initial[Id(entry_root)] || !s.initial[Id(entry_root)]->IsUnknown())) {
    // XLA inserts a copy after a while root so the loop itself stays free; the copy is kept.
    if (!s.root_is_while) s.provided[Id(entry_root)] = 1;
  }
  if (!allow_params) {
    for (Instruction* p : module->entry()->parameters()) {
      if (s.initial[Id(p)] && !s.initial[Id(p)]->IsUnknown()) s.provided[Id(p)] = 1;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (s.initial[i] && s.initial[i]->IsUnknown()) {
      HloSharding r = HloSharding::Replicate();
      r.set_metadata(s.initial[i]->metadata());
      s.initial[i] = std::move(r);
    }
  }
  return s;
}

// Nodes whose sharding cannot change during propagation: they bound an incremental region.
bool PropagationEngine::IsFixed(const Setup& s, const Instruction* inst) const {
  const size_t i = Id(inst);
  if (!s.provided[i]) return false;
  if (s.unspecified.count(static_cast<int64_t>(i))) return false;
  if (s.group_of[i] >= 0) return false;
  if (IsConversionCustomCall(*inst)) return false;
  return true;
}

// Instructions whose shardings can depend on the seeds: connected through operands, users,
// co-operands of a user, computation boundaries and shard groups, stopping at fixed shardings.
std::vector<uint8_t> PropagationEngine::Region(const std::vector<size_t>& seeds, const Setup& old_setup) const {
  std::vector<uint8_t> region(by_id.size(), 0);
  std::vector<const Instruction*> work;
  auto add = [&](const Instruction* i) {
    if (!Known(i) || region[Id(i)]) return;
    region[Id(i)] = 1;
    work.push_back(i);
  };
  for (size_t s : seeds) {
    if (by_id[s]) add(by_id[s]);
  }
  std::vector<uint8_t> expanded(by_id.size(), 0);
  std::unordered_set<size_t> seed_set(seeds.begin(), seeds.end());
  while (!work.empty()) {
    const Instruction* i = work.back();
    work.pop_back();
    const size_t id = Id(i);
    if (expanded[id]) continue;
    if (!seed_set.count(id) && IsFixed(old_setup, i) && IsFixed(setup, i)) continue;  // boundary
    expanded[id] = 1;
    for (const Instruction* op : i->operands()) add(op);
    for (const Instruction* u : i->users()) {
      add(u);
      // Backward rules of these users read their other operands too (dot: the other operand,
      // reduce: the other inputs, scatter: indices and updates).
      const Opcode uo = u->opcode();
      if (uo == Opcode::kDot || uo == Opcode::kConvolution || uo == Opcode::kReduce || uo == Opcode::kScatter) {
        for (const Instruction* sib : u->operands()) add(sib);
      }
      for (const Computation* c : u->called_computations()) {
        for (const Instruction* p : c->parameters()) add(p);
        if (c->root()) add(c->root());
      }
    }
    Instruction* mi = by_id[id];
    for (Instruction* r : Related(mi)) add(r);
    if (mi->parent()) {
      auto it = caller.find(mi->parent());
      if (it != caller.end() && (mi->opcode() == Opcode::kParameter || mi->parent()->root() == mi)) {
        add(it->second);
        for (Instruction* r : Related(it->second)) add(r);
      }
    }
    for (const Computation* c : i->called_computations()) {
      for (const Instruction* p : c->parameters()) add(p);
      if (c->root()) add(c->root());
    }
    for (const Setup* s : {&old_setup, &setup}) {
      const int32_t g = s->group_of[id];
      if (g >= 0) {
        for (const Instruction* m : s->groups[static_cast<size_t>(g)].members) add(m);
      }
    }
  }
  return region;
}

void PropagationEngine::ApplySetupToRegion() {
  for (size_t i = 0; i < by_id.size(); ++i) {
    Instruction* inst = by_id[i];
    if (!inst || !in_region[i]) continue;
    fwd_class[i] = -1;
    bwd_class[i] = -1;
    if (setup.initial[i]) {
      inst->set_sharding(*setup.initial[i]);
      Bump(inst);
    } else {
      inst->clear_sharding();
      Bump(inst);
    }
    origin[i] = setup.origin[i];
  }
}

void PropagationEngine::Configure() {
  is_spmd = options.is_spmd;
  replace_sharding_with_copy = !options.cse_prevention_only;
  allow_output = std::any_of(options.propagate_to_output.begin(), options.propagate_to_output.end(),
                             [](bool b) { return b; });
  allow_params = std::any_of(options.propagate_to_parameters.begin(), options.propagate_to_parameters.end(),
                             [](bool b) { return b; });
}

PropagationReport PropagationEngine::Report(double ms, bool incremental, bool changed) const {
  PropagationReport r;
  r.incremental = incremental;
  r.changed = changed;
  r.elapsed_ms = ms;
  r.iterations = iteration;
  r.rule_evaluations = rule_evaluations;
  r.inferred = inferred;
  r.unsupported_ops = unsupported;
  for (size_t i = 0; i < by_id.size(); ++i) {
    if (!by_id[i] || !in_region[i]) continue;
    ++r.instructions;
    if (annotation[i]) ++r.annotated;
    if (!by_id[i]->has_sharding()) ++r.unsharded;
  }
  return r;
}

}  // namespace shardscope::prop
