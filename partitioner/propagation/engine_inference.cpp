// The propagation engine, part 2: the RuleContext the rules run in (what they may offer and
// where it lands), priorities and spatial-partitioning support, forward / backward / shard-group
// inference, partial annotations and manual conversions, computation-boundary consistency. See
// engine.h.
#include <algorithm>
#include <climits>
#include <numeric>

#include "partitioner/propagation/engine.h"
#include "partitioner/propagation/rules/rules_common.h"

namespace shardscope::prop {

const hlo_sharding_util::DotDims& PropagationEngine::DotDimsOf(const Instruction& dot) {
  auto& slot = dot_dims[Id(&dot)];
  if (!slot) {
    slot = std::make_unique<hlo_sharding_util::DotDims>(dot.opcode() == Opcode::kDot ? hlo_sharding_util::ParseDotDims(dot)
                                                                              : hlo_sharding_util::ParseConvolutionDims(dot));
  }
  return *slot;
}

const HloSharding& PropagationEngine::OutputShardingFromDotOperand(const Instruction& dot, int operand_index) {
  const Instruction* op = dot.operand(operand_index);
  const uint64_t key = static_cast<uint64_t>(Id(&dot)) * 2 + static_cast<uint64_t>(operand_index);
  const uint32_t v = version[Id(op)];
  auto it = dot_forward_memo.find(key);
  if (it != dot_forward_memo.end() && it->second.operand_version == v) return it->second.result;
  ForwardMemo memo{v, dot_memo->FromOperand(*op->sharding(), DotDimsOf(dot), operand_index)};
  auto [pos, inserted] = dot_forward_memo.insert_or_assign(key, std::move(memo));
  return pos->second.result;
}

bool PropagationEngine::Improve(Instruction* inst, const HloSharding& candidate, bool allow_aggressive_resharding,
    const Instruction* source, std::string_view rule) {
  const HloSharding* cur = inst->has_sharding() ? &*inst->sharding() : nullptr;
  // Offering the sharding an instruction already has never changes it (the common case).
  if (cur != nullptr && candidate.kind() == cur->kind() && candidate == *cur) return false;
  auto next = hlo_sharding_util::ReturnImprovedSharding(candidate, cur, inst->shape(), may_combine_partial,
                                                 allow_aggressive_resharding);
  if (!next) return false;
  Assign(inst, std::move(*next), direction, source, rule);
  return true;
}

bool PropagationEngine::ImproveElement(Instruction* inst, const HloSharding& candidate, int64_t index, bool allow_aggressive_resharding,
    const Instruction* source, std::string_view rule) {
  const Shape& shape = inst->shape();
  if (!shape.IsTuple()) {
    if (index != 0) return false;
    return Improve(inst, candidate, allow_aggressive_resharding, source, rule);
  }
  if (index < 0 || index >= static_cast<int64_t>(shape.tuple.size())) return false;
  std::optional<HloSharding> cur_sub;
  if (inst->has_sharding()) cur_sub = hlo_sharding_util::TupleElementSharding(*inst->sharding(), shape, index);
  auto next = hlo_sharding_util::ReturnImprovedSharding(candidate, cur_sub ? &*cur_sub : nullptr,
                                                 shape.tuple[static_cast<size_t>(index)], may_combine_partial,
                                                 allow_aggressive_resharding);
  if (!next) return false;
  HloSharding base = inst->has_sharding() ? *inst->sharding() : HloSharding::Replicate();
  Assign(inst, hlo_sharding_util::SetTupleElementSharding(base, shape, index, *next), direction, source, rule);
  return true;
}

void PropagationEngine::Set(Instruction* inst, HloSharding sharding, const Instruction* source, std::string_view rule) {
  Assign(inst, std::move(sharding), direction, source, rule);
}

const Instruction* PropagationEngine::CallerOf(const Computation* computation) const {
  auto it = caller.find(computation);
  return it == caller.end() ? nullptr : it->second;
}

void PropagationEngine::NoteSecondSource(const Instruction* inst, const Instruction* other) {
  if (options.record_provenance && Known(inst)) origin[Id(inst)].second_source = other;
}

std::optional<HloSharding> PropagationEngine::LookaheadUserSharding(const Instruction* inst) {
  if (inst->users().size() != 1) return std::nullopt;
  std::vector<const Instruction*> chain = {inst, inst->users()[0]};
  const Instruction* cur = inst->users()[0];
  while (!HasSharding(cur)) {
    if (cur->users().size() != 1) return std::nullopt;
    cur = cur->users()[0];
    chain.push_back(cur);
  }
  const int saved_aggr = aggressiveness;
  const bool saved_combine = may_combine_partial;
  aggressiveness = INT_MAX;
  may_combine_partial = is_spmd;
  std::optional<HloSharding> sharding;
  for (size_t i = chain.size() - 1; i >= 1; --i) {
    sharding = ShardingFromUser(*chain[i - 1], *chain[i]);
    if (sharding && i != 1) {
      overrides_[chain[i - 1]] = sharding;
      continue;
    }
    break;
  }
  overrides_.clear();
  aggressiveness = saved_aggr;
  may_combine_partial = saved_combine;
  return sharding;
}

void PropagationEngine::Assign(Instruction* inst, HloSharding sharding, Direction dir, const Instruction* source, std::string_view rule) {
  inst->set_sharding(std::move(sharding));
  Bump(inst);
  ++inferred;
  if (options.record_provenance && Known(inst)) {
    origin[Id(inst)] = ShardingOrigin{dir, source, nullptr, rule, aggressiveness == INT_MAX ? 3 : aggressiveness, iteration};
  }
}

bool PropagationEngine::IsElementwiseLike(const Instruction& inst) const {
  return prop::IsElementwiseOp(inst) || (replace_sharding_with_copy && IsCustomCall(inst, "Sharding"));
}

bool PropagationEngine::CanPropagateThrough(const Instruction& inst, int aggr) const {
  switch (inst.opcode()) {
    case Opcode::kCall: case Opcode::kConcatenate: case Opcode::kCopy: case Opcode::kDynamicSlice:
    case Opcode::kDynamicUpdateSlice: case Opcode::kGetTupleElement: case Opcode::kOptimizationBarrier:
    case Opcode::kReshape: case Opcode::kTuple: case Opcode::kTranspose: case Opcode::kWhile:
      return true;
    case Opcode::kBroadcast:
      return aggr >= 2;
    default:
      break;
  }
  if (IsElementwiseLike(inst) || IsCustomCall(inst, "Sharding")) return true;
  return aggr >= 1;
}

bool PropagationEngine::SupportsSpatialPartitioning(const Instruction& inst, bool allow_output_here, bool allow_params_here) const {
  const Computation* comp = inst.parent();
  const bool is_entry_root = &inst == module->entry()->root();
  if (comp && comp->root() == &inst && CallerOf(comp) == nullptr && !(is_entry_root && allow_output_here) &&
      !(is_entry_root && setup.root_is_while && !allow_output)) {
    return false;
  }
  if (IsElementwiseLike(inst) && (inst.opcode() != Opcode::kRng || is_spmd)) return true;
  switch (inst.opcode()) {
    case Opcode::kBroadcast: case Opcode::kConcatenate: case Opcode::kConditional: case Opcode::kConstant:
    case Opcode::kConvolution: case Opcode::kOptimizationBarrier: case Opcode::kDot: case Opcode::kDynamicSlice:
    case Opcode::kDynamicUpdateSlice: case Opcode::kGather: case Opcode::kGetTupleElement: case Opcode::kInfeed:
    case Opcode::kIota: case Opcode::kPad: case Opcode::kReduceWindow: case Opcode::kReshape: case Opcode::kScatter:
    case Opcode::kSelectAndScatter: case Opcode::kSlice: case Opcode::kSort: case Opcode::kTranspose:
    case Opcode::kTuple: case Opcode::kWhile: case Opcode::kReduce: case Opcode::kAllReduce:
    case Opcode::kCollectivePermute: case Opcode::kReduceScatter:
      return true;
    case Opcode::kParameter:
      return allow_params_here || CallerOf(comp) != nullptr;
    case Opcode::kReverse:
      return is_spmd;
    case Opcode::kCustomCall:
      if (!is_spmd) return false;
      if (IsCustomCall(inst, "ShardBarrierFrom") || IsCustomCall(inst, "ShardBarrierTo")) return true;
      return prop::IsPassthroughCustomCall(inst);
    case Opcode::kGeneric:
      return inst.opcode_text() == "rng-bit-generator";
    default:
      return false;
  }
}

bool PropagationEngine::InferFromOperands(Instruction& inst) {
  if (!CanPropagateThrough(inst, aggressiveness)) return false;
  if (inst.has_sharding() && inst.sharding()->IsManual()) return false;
  const bool tuple_cc = inst.opcode() == Opcode::kCustomCall && inst.shape().IsTuple();
  if ((!inst.has_sharding() || hlo_sharding_util::IsTileMaximal(*inst.sharding())) &&
      (inst.shape().IsArray() || inst.opcode() == Opcode::kReduce || inst.opcode() == Opcode::kSort ||
       inst.opcode() == Opcode::kReduceWindow || tuple_cc)) {
    for (const Instruction* op : inst.operands()) {
      if (!op->has_sharding() || !op->sharding()->IsManual()) continue;
      if (IsCustomCall(inst, "SPMDShardToFullShape")) return false;
      if (aggressiveness == 0 &&
          (inst.opcode() == Opcode::kConcatenate || inst.opcode() == Opcode::kDynamicSlice)) {
        return false;
      }
      Set(&inst, hlo_sharding_util::ToTupleForm(HloSharding::Manual(), inst.shape()), op, "manual");
      return true;
    }
  }
  if (!SupportsSpatialPartitioning(inst, allow_output, false)) {
    if (inst.shape().IsTuple() || inst.operand_count() == 0 || &inst == inst.parent()->root() ||
        prop::HasSideEffect(inst)) {
      return false;
    }
    for (const Instruction* op : inst.operands()) {
      if (op->has_sharding() && hlo_sharding_util::IsTileMaximal(*op->sharding()) && !hlo_sharding_util::UniqueDevice(*op->sharding())) {
        return Improve(&inst, *op->sharding(), false, op, "replicated operand");
      }
    }
    return false;
  }
  const prop::OpRule& rule = *rule_of[Id(&inst)];
  ++rule_evaluations;
  return rule.forward ? rule.forward(inst, *this) : false;
}

// The sharding `user` offers its operand `inst` (XLA GetShardingFromUser). Points into a memo or
// into *scratch; nullptr when the user offers nothing.
const HloSharding* PropagationEngine::CandidateFromUser(const Instruction& inst, const Instruction& user,
    std::optional<HloSharding>* scratch) {
  if (!CanPropagateThrough(user, aggressiveness)) return nullptr;
  const HloSharding* us = ShardingOf(&user);
  if (us == nullptr || !hlo_sharding_util::IsSpatiallyPartitioned(*us)) return nullptr;
  const prop::OpRule& rule = Known(&user) ? *rule_of[Id(&user)] : RuleFor(user);
  if (rule.backward == nullptr) return nullptr;
  ++rule_evaluations;
  if (rule.backward_inputs != prop::BackwardInputs::kAny && overrides_.empty() && Known(&user)) {
    const int64_t idx = prop::rules::OperandIndex(user, inst);
    const Instruction* other = nullptr;
    if (rule.backward_inputs == prop::BackwardInputs::kUserAndOtherOperand) {
      if (user.operand_count() != 2 || user.operand(0) == user.operand(1) || idx < 0) {
        *scratch = rule.backward(inst, user, *us, *this);
        return scratch->has_value() ? &**scratch : nullptr;
      }
      other = user.operand(1 - idx);
    }
    const uint64_t key = (static_cast<uint64_t>(Id(&user)) << 24) | static_cast<uint64_t>(idx & 0xffffff);
    const uint32_t other_version = other ? version[Id(other)] : 0;
    const bool early = aggressiveness == 0;
    auto it = backward_memo.find(key);
    if (it == backward_memo.end() || it->second.user_version != version[Id(&user)] ||
        it->second.other_version != other_version || it->second.combine != may_combine_partial ||
        it->second.early != early) {
      BackwardMemo memo{version[Id(&user)], other_version, may_combine_partial, early,
                        rule.backward(inst, user, *us, *this)};
      it = backward_memo.insert_or_assign(key, std::move(memo)).first;
    }
    return it->second.result.has_value() ? &*it->second.result : nullptr;
  }
  *scratch = rule.backward(inst, user, *us, *this);
  return scratch->has_value() ? &**scratch : nullptr;
}

std::optional<HloSharding> PropagationEngine::ShardingFromUser(const Instruction& inst, const Instruction& user) {
  std::optional<HloSharding> scratch;
  const HloSharding* s = CandidateFromUser(inst, user, &scratch);
  if (s == nullptr) return std::nullopt;
  if (s == &*scratch) return scratch;
  return *s;
}

bool PropagationEngine::InferFromUsers(Instruction& inst) {
  if (aggressiveness < 2 && inst.opcode() == Opcode::kBroadcast) return false;
  if (inst.has_sharding() && inst.sharding()->IsManual()) return false;
  if (!inst.has_sharding() || hlo_sharding_util::IsTileMaximal(*inst.sharding())) {
    for (const Instruction* user : inst.users()) {
      if (!user->has_sharding() || IsCustomCall(*user, "SPMDFullToShardShape")) continue;
      if (inst.shape().IsArray() && user->sharding()->IsManual()) {
        Set(&inst, HloSharding::Manual(), user, "manual");
        return true;
      }
      auto us = ShardingFromUser(inst, *user);
      if (us && us->IsManual()) {
        Set(&inst, std::move(*us), user, "manual");
        return true;
      }
    }
  }
  if (!SupportsSpatialPartitioning(inst, false, allow_params)) return false;
  bool changed = false;
  for (const Instruction* user : inst.users()) {
    if (prop::IsGeneric(*user, "rng-bit-generator")) {
      Set(&inst, HloSharding::Replicate(), user, "rng-bit-generator seed");
      return true;
    }
    const prop::OpRule& urule = *rule_of[Id(user)];
    if (urule.backward == &prop::rules::DefaultBackward && !IsCustomCall(inst, "ShardBarrierTo")) {
      // Same-shape users hand their sharding over as is: compare in place, copy only on change.
      if (!CanPropagateThrough(*user, aggressiveness) || !user->has_sharding()) continue;
      const HloSharding& us = *user->sharding();
      if (!hlo_sharding_util::IsSpatiallyPartitioned(us)) continue;
      ++rule_evaluations;
      if (!prop::CompatibleIgnoringElementType(inst.shape(), user->shape())) continue;
      changed |= Improve(&inst, us, false, user, urule.family);
      continue;
    }
    std::optional<HloSharding> scratch;
    const HloSharding* us = CandidateFromUser(inst, *user, &scratch);
    if (us == nullptr) continue;
    // Nothing flows backward through a ShardBarrierTo: it only accepts "replicated".
    if (IsCustomCall(inst, "ShardBarrierTo")) {
      scratch = HloSharding::Replicate();
      us = &*scratch;
    }
    changed |= Improve(&inst, *us, false, user, urule.family);
  }
  return changed;
}

bool PropagationEngine::InferFromShardGroup(Instruction& inst, const Group& group) {
  if (!CanPropagateThrough(inst, aggressiveness)) return false;
  if (inst.has_sharding() && inst.sharding()->IsManual()) return false;
  if (IsCustomCall(inst, "ShardBarrierTo")) return false;
  if (!inst.has_sharding() || hlo_sharding_util::IsTileMaximal(*inst.sharding())) {
    for (const Instruction* m : group.members) {
      if (m == &inst || !m->has_sharding() || !m->sharding()->IsManual()) continue;
      Set(&inst, *m->sharding(), m, group.shard_as ? "shard_as" : "shard_like");
      return true;
    }
  }
  bool changed = false;
  for (const Instruction* m : group.members) {
    if (m == &inst || IsCustomCall(*m, "ShardBarrierFrom") || !m->has_sharding()) continue;
    changed |= Improve(&inst, *m->sharding(), false, m, group.shard_as ? "shard_as" : "shard_like");
  }
  return changed;
}

bool PropagationEngine::RefineFromAuto(const HloSharding& to_merge, const std::vector<int64_t>& unspec, HloSharding* auto_s,
    HloSharding* manual_s) {
  using namespace hlo_sharding_util;
  if (!IsManualSubgroup(*manual_s) || IsManualSubgroup(*auto_s) || !manual_s->HasPartialReplication() ||
      manual_s->subgroup_types().size() != 2) {
    return false;
  }
  HloSharding partial = PartiallyReplicateTiledShardingOnAllDimsExcept(to_merge, unspec);
  if (hlo_sharding_util::IsTileMaximal(partial)) return false;
  HloSharding a = *auto_s;
  if (!MergeShardingIfCompatible(partial, a.NumTiles() + 1, &a)) return false;
  const int64_t data_rank = partial.TiledDataRank();
  std::vector<int64_t> shape = partial.tile_assignment().dims();
  shape.insert(shape.begin() + data_rank, 1);
  HloSharding partial_for_manual = MakePartialTile(partial.tile_assignment().Reshape(shape));
  TileAssignment man = manual_s->tile_assignment();
  if (manual_s->subgroup_types().back() != SubgroupType::kReplicated) {
    std::vector<int64_t> perm(static_cast<size_t>(man.num_dimensions()));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm.back(), perm[static_cast<size_t>(data_rank)]);
    man = hlo_sharding_util::Plain(man).Transpose(perm);
  }
  HloSharding tmp = MakePartialTile(man);
  if (!MergeShardingIfCompatible(partial_for_manual, tmp.NumTiles() + 1, &tmp)) return false;
  std::vector<SubgroupType> types = {SubgroupType::kManual};
  if (tmp.HasPartialReplication()) types.push_back(SubgroupType::kReplicated);
  *auto_s = std::move(a);
  *manual_s = MakeSubgroup(tmp.tile_assignment(), types);
  return true;
}

bool PropagationEngine::RefineFromManual(const HloSharding& to_merge, const std::vector<int64_t>& unspec, HloSharding* auto_s,
    HloSharding* manual_s) {
  using namespace hlo_sharding_util;
  if (!IsManualSubgroup(to_merge) || !IsManualSubgroup(*manual_s) || !manual_s->HasPartialReplication() ||
      IsManualSubgroup(*auto_s) || manual_s->subgroup_types().size() != 2) {
    return false;
  }
  HloSharding partial = PartiallyReplicateTiledShardingOnAllDimsExcept(to_merge, unspec);
  if (hlo_sharding_util::IsTileMaximal(partial)) return false;
  HloSharding m = *manual_s;
  if (!MergeShardingIfCompatible(partial, m.NumTiles() + 1, &m)) return false;
  HloSharding partial_for_auto = MakeSubgroup(
      partial.tile_assignment(), std::vector<SubgroupType>(partial.subgroup_types().size(), SubgroupType::kReplicated));
  HloSharding a = *auto_s;
  if (!MergeShardingIfCompatible(partial_for_auto, a.NumTiles() + 1, &a)) return false;
  *auto_s = std::move(a);
  *manual_s = std::move(m);
  return true;
}

// The manual-conversion custom-call right after a partial annotation, when it agrees on the
// unspecified dims. Returns false when there is one that disagrees.
bool PropagationEngine::ConversionAfter(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv) {
  *conv = nullptr;
  if (annotate.users().size() != 1) return true;
  Instruction* user = annotate.users()[0];
  if (!IsConversionCustomCall(*user)) return true;
  if (SortedUnspecifiedDims(*user) != unspec) return false;
  *conv = user;
  return true;
}

bool PropagationEngine::InferUnspecifiedFromOperand(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv_after) {
  using namespace hlo_sharding_util;
  *conv_after = nullptr;
  const Instruction* op = annotate.operand(0);
  if (!RuleContext::IsSpatiallyPartitioned(op)) return false;
  const HloSharding& os = *op->sharding();
  if (!os.IsTiled()) return false;
  Instruction* conv = nullptr;
  if (!ConversionAfter(annotate, unspec, &conv)) return false;
  *conv_after = conv;
  const std::string_view rule = "partial annotation (unspecified dims)";
  if (conv == nullptr) {
    HloSharding partial = PartiallyReplicateTiledShardingOnAllDimsExcept(os, unspec);
    HloSharding s = *annotate.sharding();
    if (!MergeShardingIfCompatible(partial, s.NumTiles() + 1, &s)) return false;
    Assign(&annotate, std::move(s), Direction::kForward, op, rule);
    return true;
  }
  if (!annotate.has_sharding() || !conv->has_sharding()) return false;
  if (IsCustomCall(*conv, "SPMDFullToShardShape")) {
    HloSharding a = *annotate.sharding(), m = *conv->sharding();
    if (!RefineFromAuto(os, unspec, &a, &m)) return false;
    Assign(&annotate, std::move(a), Direction::kForward, op, rule);
    Assign(conv, std::move(m), Direction::kForward, &annotate, rule);
    return true;
  }
  HloSharding m = *annotate.sharding(), a = *conv->sharding();
  if (!RefineFromManual(os, unspec, &a, &m)) return false;
  Assign(&annotate, std::move(m), Direction::kForward, op, rule);
  Assign(conv, std::move(a), Direction::kForward, &annotate, rule);
  return true;
}

bool PropagationEngine::InferUnspecifiedFromUsers(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv_after) {
  using namespace hlo_sharding_util;
  *conv_after = nullptr;
  Instruction* conv = nullptr;
  if (!ConversionAfter(annotate, unspec, &conv)) return false;
  *conv_after = conv;
  Instruction* op_for_users = conv ? conv : &annotate;
  const std::string_view rule = "partial annotation (unspecified dims)";
  bool changed = false;
  for (Instruction* user : op_for_users->users()) {
    if (!user->has_sharding() || !user->sharding()->IsTiled()) continue;
    auto us = ShardingFromUser(*op_for_users, *user);
    if (!us || hlo_sharding_util::IsTileMaximal(*us)) continue;
    if (!annotate.has_sharding()) continue;
    if (conv == nullptr) {
      HloSharding partial = PartiallyReplicateTiledShardingOnAllDimsExcept(*us, unspec);
      HloSharding s = *annotate.sharding();
      if (!MergeShardingIfCompatible(partial, s.NumTiles() + 1, &s)) continue;
      Assign(&annotate, std::move(s), Direction::kBackward, user, rule);
      changed = true;
      continue;
    }
    if (!conv->has_sharding()) continue;
    if (IsCustomCall(*conv, "SPMDFullToShardShape")) {
      HloSharding a = *annotate.sharding(), m = *conv->sharding();
      if (!RefineFromManual(*us, unspec, &a, &m)) continue;
      Assign(&annotate, std::move(a), Direction::kBackward, user, rule);
      Assign(conv, std::move(m), Direction::kBackward, user, rule);
      changed = true;
      continue;
    }
    HloSharding m = *annotate.sharding(), a = *conv->sharding();
    if (!RefineFromAuto(*us, unspec, &a, &m)) continue;
    Assign(&annotate, std::move(m), Direction::kBackward, user, rule);
    Assign(conv, std::move(a), Direction::kBackward, user, rule);
    changed = true;
  }
  return changed;
}

bool PropagationEngine::InferUnspecifiedFromShardGroup(Instruction& annotate, const std::vector<int64_t>& unspec, const Group& group) {
  using namespace hlo_sharding_util;
  if (IsCustomCall(annotate, "ShardBarrierTo")) return false;
  bool changed = false;
  for (const Instruction* m : group.members) {
    if (m == &annotate || IsCustomCall(*m, "ShardBarrierFrom")) continue;
    if (!RuleContext::IsSpatiallyPartitioned(m) || !m->sharding()->IsTiled() || !annotate.has_sharding()) continue;
    HloSharding partial = PartiallyReplicateTiledShardingOnAllDimsExcept(*m->sharding(), unspec);
    HloSharding s = *annotate.sharding();
    if (!MergeShardingIfCompatible(partial, s.NumTiles() + 1, &s)) continue;
    Assign(&annotate, std::move(s), Direction::kShardGroup, m, "partial annotation (shard group)");
    changed = true;
  }
  return changed;
}

void PropagationEngine::ComputationPropagation(Instruction* inst, std::vector<Instruction*>* changed) {
  auto propagate_to = [&](Instruction* search) {
    auto related = Related(search);
    if (std::find(related.begin(), related.end(), inst) == related.end()) return;
    for (Instruction* r : related) {
      if (!Known(r) || !in_region[Id(r)] || setup.provided[Id(r)]) continue;
      const bool same = r->has_sharding() == inst->has_sharding() &&
                        (!inst->has_sharding() || (*r->sharding() == *inst->sharding()));
      if (same) continue;
      if (inst->has_sharding()) {
        Assign(r, *inst->sharding(), Direction::kComputation, inst, "loop/call boundary");
      } else {
        r->clear_sharding();
        Bump(r);
      }
      changed->push_back(r);
      ComputationPropagation(r, changed);
    }
  };
  const Opcode op = inst->opcode();
  if (op == Opcode::kConditional || op == Opcode::kWhile || op == Opcode::kCall) propagate_to(inst);
  if (op == Opcode::kParameter || (inst->parent() && inst->parent()->root() == inst)) {
    auto it = caller.find(inst->parent());
    if (it != caller.end()) {
      propagate_to(it->second);
      if (op == Opcode::kParameter &&
          (it->second->opcode() == Opcode::kConditional || it->second->opcode() == Opcode::kCall)) {
        propagate_to(inst);
      }
    }
  }
}

}  // namespace shardscope::prop
