// The propagation engine, part 3: the worklists and the priority-ordered fixed point, shard_as
// alignment, post-processing of outputs and parameters, and the whole pass over a region. See
// engine.h.
#include <algorithm>

#include "partitioner/propagation/engine.h"

namespace shardscope::prop {

int PropagationEngine::ForwardClass(const Instruction& inst, int aggr) {
  return inst.opcode() == Opcode::kBroadcast ? aggr : std::min(aggr, 1);
}

bool PropagationEngine::ForwardInputsUnchanged(const Instruction& inst) const {
  const size_t id = Id(&inst);
  const uint64_t t = fwd_time[id];
  if (change_time[id] > t) return false;
  for (const Instruction* op : inst.operands()) {
    if (Known(op) && change_time[Id(op)] > t) return false;
  }
  return true;
}

bool PropagationEngine::BackwardInputsUnchanged(const Instruction& inst) const {
  const size_t id = Id(&inst);
  const uint64_t t = bwd_time[id];
  if (change_time[id] > t) return false;
  for (const Instruction* u : inst.users()) {
    if (Known(u) && change_time[Id(u)] > t) return false;
    const Opcode uo = u->opcode();
    if (uo == Opcode::kDot || uo == Opcode::kConvolution || uo == Opcode::kReduce || uo == Opcode::kScatter) {
      for (const Instruction* sib : u->operands()) {
        if (Known(sib) && change_time[Id(sib)] > t) return false;
      }
    }
  }
  return true;
}

// Ops whose forward rule reads more than their operands (dot lookahead, parameters of called
// computations) are always evaluated.
bool PropagationEngine::ForwardReadsOnlyOperands(const Instruction& inst) {
  const Opcode op = inst.opcode();
  return op != Opcode::kDot && op != Opcode::kConvolution && op != Opcode::kParameter;
}

void PropagationEngine::MarkFwd(const Instruction* i) {
  if (Known(i) && in_region[Id(i)]) comps[static_cast<size_t>(comp_of[Id(i)])].fwd.Set(static_cast<size_t>(pos_of[Id(i)]));
}

void PropagationEngine::MarkBwd(const Instruction* i) {
  if (Known(i) && in_region[Id(i)]) comps[static_cast<size_t>(comp_of[Id(i)])].bwd.Set(static_cast<size_t>(pos_of[Id(i)]));
}

void PropagationEngine::MarkGroup(const Instruction* i) {
  if (Known(i) && in_region[Id(i)]) comps[static_cast<size_t>(comp_of[Id(i)])].group.Set(static_cast<size_t>(pos_of[Id(i)]));
}

void PropagationEngine::ClearCache(const Instruction* hlo, const Instruction* hlo_for_users) {
  for (const Instruction* op : hlo->operands()) MarkBwd(op);
  const Instruction* u = hlo_for_users ? hlo_for_users : hlo;
  for (const Instruction* user : u->users()) {
    MarkFwd(user);
    for (const Computation* c : user->called_computations()) {
      for (const Instruction* p : c->parameters()) MarkFwd(p);
    }
  }
  const int32_t g = setup.group_of[Id(hlo)];
  if (g >= 0) {
    for (const Instruction* m : setup.groups[static_cast<size_t>(g)].members) {
      if (m != hlo) MarkGroup(m);
    }
  }
}

void PropagationEngine::AfterChange(Instruction* inst) {
  std::vector<Instruction*> changed;
  ComputationPropagation(inst, &changed);
  ClearCache(inst);
  for (Instruction* c : changed) ClearCache(c);
}

const std::vector<int64_t>* PropagationEngine::Unspecified(const Instruction* inst) const {
  auto it = setup.unspecified.find(static_cast<int64_t>(Id(inst)));
  return it == setup.unspecified.end() ? nullptr : &it->second;
}

bool PropagationEngine::RunToFixPoint(int aggr, bool propagate_shard_group) {
  aggressiveness = aggr;
  may_combine_partial = is_spmd && aggr > 0;
  const bool may_merge_partial = may_combine_partial;
  for (CompInfo& ci : comps) {
    ci.fwd.Reset(ci.post.size());
    ci.bwd.Reset(ci.post.size());
    ci.group.Reset(ci.post.size());
    for (size_t p = 0; p < ci.post.size(); ++p) {
      const Instruction* inst = ci.post[p];
      if (!in_region[Id(inst)]) continue;
      ci.fwd.Set(p);
      ci.bwd.Set(p);
      if (setup.group_of[Id(inst)] >= 0) ci.group.Set(p);
    }
  }
  bool changed_any = false;
  bool changed_last = true;
  while (changed_last) {
    changed_last = false;
    ++iteration;
    for (CompInfo& ci : comps) {
      // 1. Shard groups.
      if (propagate_shard_group) {
        direction = Direction::kShardGroup;
        for (size_t p = ci.group.NextFrom(0); p != PendingSet::npos; p = ci.group.NextFrom(p + 1)) {
          Instruction* inst = ci.post[p];
          const Group& group = setup.groups[static_cast<size_t>(setup.group_of[Id(inst)])];
          if (setup.provided[Id(inst)]) {
            const auto* unspec = Unspecified(inst);
            if (!may_merge_partial || unspec == nullptr) {
              ci.group.Clear(p);
              continue;
            }
            if (InferUnspecifiedFromShardGroup(*inst, *unspec, group)) {
              ClearCache(inst);
              ci.group.Clear(p);
              changed_last = true;
            }
            continue;
          }
          ci.group.Clear(p);
          if (InferFromShardGroup(*inst, group)) {
            changed_any = true;
            AfterChange(inst);
            changed_last = true;
          }
        }
      }
      // 2. Forward: post order, shardings from operands.
      direction = Direction::kForward;
      for (size_t p = ci.fwd.NextFrom(0); p != PendingSet::npos; p = ci.fwd.NextFrom(p + 1)) {
        Instruction* inst = ci.post[p];
        if (setup.provided[Id(inst)]) {
          const auto* unspec = Unspecified(inst);
          if (!may_merge_partial || unspec == nullptr) {
            if (unspec == nullptr) ci.fwd.Clear(p);
            continue;
          }
          Instruction* conv = nullptr;
          if (InferUnspecifiedFromOperand(*inst, *unspec, &conv)) {
            ClearCache(inst, conv);
            ci.fwd.Clear(p);
            changed_last = true;
          }
          continue;
        }
        ci.fwd.Clear(p);
        const size_t id = Id(inst);
        const int fclass = ForwardClass(*inst, aggr);
        if (fwd_class[id] == fclass && ForwardReadsOnlyOperands(*inst) && ForwardInputsUnchanged(*inst)) {
          continue;
        }
        const bool fchanged = InferFromOperands(*inst);
        fwd_class[id] = static_cast<int8_t>(fclass);
        fwd_time[id] = ++clock;
        if (fchanged) {
          changed_any = true;
          AfterChange(inst);
          changed_last = true;
        }
      }
      // 3. Backward: reverse post order, shardings from users.
      direction = Direction::kBackward;
      for (size_t p = ci.bwd.PrevFrom(ci.post.size()); p != PendingSet::npos;
           p = p == 0 ? PendingSet::npos : ci.bwd.PrevFrom(p - 1)) {
        Instruction* inst = ci.post[p];
        if (!ci.bwd.Test(p)) continue;
        if (IsConversionCustomCall(*inst) && inst->operand_count() == 1) {
          // Processed together with the partial annotation feeding it.
          MarkBwd(inst->operand(0));
        }
        if (setup.provided[Id(inst)]) {
          const auto* unspec = Unspecified(inst);
          if (!may_merge_partial || unspec == nullptr) {
            if (unspec == nullptr) ci.bwd.Clear(p);
            continue;
          }
          Instruction* conv = nullptr;
          if (InferUnspecifiedFromUsers(*inst, *unspec, &conv)) {
            ClearCache(inst, conv);
            ci.bwd.Clear(p);
            if (conv != nullptr && Known(conv)) {
              comps[static_cast<size_t>(comp_of[Id(conv)])].bwd.Clear(static_cast<size_t>(pos_of[Id(conv)]));
            }
            changed_last = true;
          }
          continue;
        }
        ci.bwd.Clear(p);
        const size_t id = Id(inst);
        const int bclass = BackwardClass(aggr);
        if (bwd_class[id] == bclass && BackwardInputsUnchanged(*inst)) continue;
        const bool bchanged = InferFromUsers(*inst);
        bwd_class[id] = static_cast<int8_t>(bclass);
        bwd_time[id] = ++clock;
        if (bchanged) {
          changed_any = true;
          AfterChange(inst);
          changed_last = true;
        }
      }
    }
    if (iteration > 100000) break;  // safety net: refinement guarantees termination
  }
  return changed_any;
}

void PropagationEngine::AlignShardAsGroups() {
  for (const Group& g : setup.groups) {
    if (!g.shard_as) continue;
    bool touched = false;
    for (const Instruction* m : g.members) touched |= in_region[Id(m)] != 0;
    if (!touched) continue;
    HloSharding default_sharding = HloSharding::Replicate();
    std::vector<HloSharding> shardings;
    for (const Instruction* m : g.members) {
      if (!m->has_sharding()) continue;
      shardings.push_back(*m->sharding());
      if (!IsCustomCall(*m, "ShardBarrierFrom") && default_sharding.IsReplicated()) default_sharding = *m->sharding();
    }
    HloSharding common = shardings.empty() ? default_sharding
                                           : hlo_sharding_util::FindCommonSharding(shardings, default_sharding);
    for (Instruction* m : g.members) {
      if (IsCustomCall(*m, "ShardBarrierTo")) continue;
      if (!m->has_sharding() || !(*m->sharding() == common)) {
        Assign(m, common, Direction::kShardGroup, nullptr, "shard_as alignment");
      }
    }
  }
}

void PropagationEngine::PostProcess() {
  const Instruction* root = module->entry()->root();
  if (options.cse_prevention_only) {
    for (Instruction* inst : by_id) {
      if (!inst || !in_region[Id(inst)] || !inst->has_sharding()) continue;
      const bool target = inst->opcode() == Opcode::kBroadcast && inst->operand_count() == 1 &&
                          inst->operand(0)->shape().rank() == 0;
      const auto& original = annotation[Id(inst)];
      if (target) {
        if (!original) {
          HloSharding s = *inst->sharding();
          s.set_metadata({ShardingMetadata{"op_name=\"_sharding_propagation_cse_prevention\""}});
          inst->set_sharding(std::move(s));
          Bump(inst);
        }
        continue;
      }
      if (original) {
        inst->set_sharding(*original);
        Bump(inst);
        origin[Id(inst)] = ShardingOrigin{Direction::kAnnotation, nullptr, nullptr, "user annotation", -1, -1};
      } else {
        inst->clear_sharding();
        Bump(inst);
        origin[Id(inst)] = ShardingOrigin{};
      }
    }
  }
  Instruction* root_mut = module->entry()->root();
  const auto& out_vec = options.propagate_to_output;
  if (root && in_region[Id(root)] && setup.saved_root.size() == out_vec.size() && root_mut->has_sharding() &&
      root->shape().IsTuple()) {
    HloSharding rs = hlo_sharding_util::ToTupleForm(*root_mut->sharding(), root->shape());
    auto& leaves = rs.mutable_tuple_elements();
    for (size_t i = 0; i < setup.saved_root.size() && i < leaves.size(); ++i) {
      if (!out_vec[i] && !setup.saved_root[i].IsUnknown()) leaves[i] = setup.saved_root[i];
    }
    root_mut->set_sharding(std::move(rs));
    Bump(root_mut);
  }
  const auto& params = module->entry()->parameters();
  const auto& par_vec = options.propagate_to_parameters;
  if (allow_params) {
    if (par_vec.size() == params.size()) {
      for (size_t i = 0; i < params.size(); ++i) {
        Instruction* p = params[i];
        if (!in_region[Id(p)] || par_vec[i]) continue;
        auto it = setup.saved_params.find(static_cast<int64_t>(i));
        if (it != setup.saved_params.end() && !it->second.IsUnknown()) {
          p->set_sharding(it->second);
          Bump(p);
          origin[Id(p)] = ShardingOrigin{Direction::kAnnotation, nullptr, nullptr, "user annotation", -1, -1};
        } else {
          p->clear_sharding();
          Bump(p);
          origin[Id(p)] = ShardingOrigin{};
        }
      }
    } else if (params.size() == 1 && setup.saved_params.size() == 1 && params[0]->shape().IsTuple() &&
               params[0]->shape().tuple.size() == par_vec.size() && params[0]->has_sharding() &&
               in_region[Id(params[0])]) {
      const Shape& shape = params[0]->shape();
      HloSharding ps = hlo_sharding_util::ToTupleForm(*params[0]->sharding(), shape);
      for (size_t i = 0; i < par_vec.size(); ++i) {
        HloSharding saved = hlo_sharding_util::TupleElementSharding(setup.saved_params.begin()->second, shape, static_cast<int64_t>(i));
        if (!par_vec[i] && !saved.IsUnknown()) ps = hlo_sharding_util::SetTupleElementSharding(ps, shape, static_cast<int64_t>(i), saved);
      }
      params[0]->set_sharding(std::move(ps));
      Bump(params[0]);
    }
  }
  // An output or parameter sharding that does not split its shape evenly is replicated.
  if (allow_output && root && in_region[Id(root)] && root_mut->has_sharding()) {
    const Shape& shape = root->shape();
    if (shape.IsTuple() && out_vec.size() == shape.tuple.size()) {
      HloSharding rs = hlo_sharding_util::ToTupleForm(*root_mut->sharding(), shape);
      bool changed = false;
      for (size_t i = 0; i < shape.tuple.size(); ++i) {
        HloSharding e = hlo_sharding_util::TupleElementSharding(rs, shape, static_cast<int64_t>(i));
        if (out_vec[i] && !hlo_sharding_util::EvenlyPartitions(shape.tuple[i], e)) {
          rs = hlo_sharding_util::SetTupleElementSharding(rs, shape, static_cast<int64_t>(i), HloSharding::Replicate());
          changed = true;
        }
      }
      if (changed) Assign(root_mut, std::move(rs), Direction::kPostProcess, nullptr, "uneven output replicated");
    } else if (!shape.IsTuple() && !hlo_sharding_util::EvenlyPartitions(shape, *root_mut->sharding())) {
      Assign(root_mut, HloSharding::Replicate(), Direction::kPostProcess, nullptr, "uneven output replicated");
    }
  }
  if (allow_params) {
    if (par_vec.size() == params.size()) {
      for (size_t i = 0; i < params.size(); ++i) {
        Instruction* p = params[i];
        if (!in_region[Id(p)] || !p->has_sharding() || !par_vec[i]) continue;
        if (!hlo_sharding_util::EvenlyPartitions(p->shape(), *p->sharding())) {
          Assign(p, HloSharding::Replicate(), Direction::kPostProcess, nullptr, "uneven parameter replicated");
        }
      }
    } else if (params.size() == 1 && params[0]->shape().IsTuple() && params[0]->has_sharding() &&
               params[0]->shape().tuple.size() == par_vec.size() && in_region[Id(params[0])]) {
      const Shape& shape = params[0]->shape();
      HloSharding ps = hlo_sharding_util::ToTupleForm(*params[0]->sharding(), shape);
      bool changed = false;
      for (size_t i = 0; i < par_vec.size(); ++i) {
        HloSharding e = hlo_sharding_util::TupleElementSharding(ps, shape, static_cast<int64_t>(i));
        if (par_vec[i] && !hlo_sharding_util::EvenlyPartitions(shape.tuple[i], e)) {
          ps = hlo_sharding_util::SetTupleElementSharding(ps, shape, static_cast<int64_t>(i), HloSharding::Replicate());
          changed = true;
        }
      }
      if (changed) Assign(params[0], std::move(ps), Direction::kPostProcess, nullptr, "uneven parameter replicated");
    }
  }
}

bool PropagationEngine::Propagate() {
  bool changed = false;
  for (int aggr = options.use_priorities ? 0 : 3; aggr < 4; ++aggr) changed |= RunToFixPoint(aggr, true);
  AlignShardAsGroups();
  changed |= RunToFixPoint(3, true);
  PostProcess();
  // Write tile assignments the way XLA prints them (iota forms), once per distinct device list.
  hlo_sharding_util::IotaCache cache;
  for (size_t i = 0; i < by_id.size(); ++i) {
    Instruction* inst = by_id[i];
    if (!inst || !in_region[i] || !inst->has_sharding()) continue;
    const HloSharding& s = *inst->sharding();
    if (s.IsTuple() || (s.IsTiled() && !s.tile_assignment().is_iota())) {
      HloSharding canonical = hlo_sharding_util::WithIotaForm(s, &cache);
      if (canonical.IsTuple() || canonical.tile_assignment().is_iota()) inst->set_sharding(std::move(canonical));
    }
  }
  return changed;
}

}  // namespace shardscope::prop
