#include "partitioner/weight_update_sharding/redundancy.h"

#include <algorithm>

#include "core/collectives/participants.h"

namespace shardscope::wus {

namespace {

int64_t Leaves(const Shape& s) { return s.IsTuple() ? s.LeafCount() : 1; }

bool AllSet(const std::vector<uint8_t>& b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t v) { return v != 0; });
}

// Ops whose result may differ between replicas even from equal inputs.
bool DeviceDependent(const Instruction& inst) {
  switch (inst.opcode()) {
    case Opcode::kPartitionId: case Opcode::kReplicaId: case Opcode::kRng: case Opcode::kInfeed:
    case Opcode::kOutfeed: case Opcode::kRecv: case Opcode::kRecvDone: case Opcode::kSend: case Opcode::kSendDone:
    case Opcode::kCustomCall: case Opcode::kReduceScatter: case Opcode::kAllToAll:
    case Opcode::kCollectivePermute: case Opcode::kCollectivePermuteStart: case Opcode::kCollectivePermuteDone:
    case Opcode::kGeneric:
      return true;
    default:
      return false;
  }
}

}  // namespace

Result<RedundancyAnalysis> RedundancyAnalysis::Run(const Module& module, const std::vector<bool>& redundant_parameters) {
  if (!module.entry()) return Error("module has no entry computation");
  RedundancyAnalysis a;
  int64_t max_id = 0;
  for (const auto& c : module.computations())
    for (const auto& i : c->instructions()) max_id = std::max(max_id, i->id());
  a.array_bits_.assign(static_cast<size_t>(max_id + 1), 2);
  a.replicas_ = std::max<int64_t>(1, module.num_replicas);
  a.partitions_ = std::max<int64_t>(1, module.num_partitions);
  a.devices_ = a.replicas_ * a.partitions_;
  a.entry_params_ = redundant_parameters;
  Bits params;
  const Computation* entry = module.entry();
  for (size_t i = 0; i < entry->parameters().size(); ++i) {
    const Instruction* p = entry->parameters()[i];
    const bool r = i < redundant_parameters.size() && redundant_parameters[i];
    for (int64_t k = 0; k < (p ? Leaves(p->shape()) : 0); ++k) params.push_back(r ? 1 : 0);
  }
  a.Analyze(entry, params);
  if (!a.status_.ok()) return a.status_.error();
  return a;
}

RedundancyAnalysis::Bits RedundancyAnalysis::Analyze(const Computation* comp, const Bits& params) {
  CompState& st = comps_[comp];
  Bits meet = params;
  if (st.analyzed) {
    for (size_t i = 0; i < meet.size() && i < st.params.size(); ++i) meet[i] = meet[i] && st.params[i];
    if (meet == st.params) return st.root;
  }
  st.params = meet;
  if (!st.analyzed) {
    // Each parameter's first leaf, once (looking it up per parameter walked all those before it:
    // quadratic in the entry's parameters, thousands in a large training step).
    size_t off = 0;
    for (const Instruction* p : comp->parameters()) {
      st.param_offset.push_back(off);
      if (p) off += p->shape().IsTuple() ? static_cast<size_t>(Leaves(p->shape())) : 1;
    }
  }
  st.analyzed = true;
  RunComputation(comp);
  CompState& after = comps_[comp];  // (the map may have grown)
  after.root = comp->root() ? Get(comp->root()) : Bits{};
  return after.root;
}

void RedundancyAnalysis::RunComputation(const Computation* comp) {
  // Definition order is topological (the IR's contract). Arrays from ordinary ops take the fast
  // path: one byte, no vector.
  for (const auto& holder : comp->instructions()) {
    const Instruction* inst = holder.get();
    const Opcode op = inst->opcode();
    const bool simple = !inst->shape().IsTuple() && op != Opcode::kParameter && op != Opcode::kGetTupleElement &&
                        op != Opcode::kWhile && op != Opcode::kConditional && op != Opcode::kCall &&
                        op != Opcode::kAllReduce && op != Opcode::kAllReduceStart && op != Opcode::kAllGather &&
                        op != Opcode::kAllGatherStart && op != Opcode::kConstant && op != Opcode::kIota &&
                        inst->id() >= 0 && static_cast<size_t>(inst->id()) < array_bits_.size();
    if (simple) {
      bool r = !DeviceDependent(*inst);
      for (const Instruction* o : inst->operands()) r = r && AllOf(o);
      array_bits_[static_cast<size_t>(inst->id())] = r ? 1 : 0;
      continue;
    }
    Set(inst, Compute(inst));
  }
}

void RedundancyAnalysis::Set(const Instruction* inst, Bits bits) {
  if (!inst->shape().IsTuple() && inst->id() >= 0 && static_cast<size_t>(inst->id()) < array_bits_.size()) {
    array_bits_[static_cast<size_t>(inst->id())] = bits.empty() ? 0 : bits[0];
    return;
  }
  tuple_bits_[inst] = std::move(bits);
}

RedundancyAnalysis::Bits RedundancyAnalysis::Get(const Instruction* inst) const {
  if (!inst->shape().IsTuple() && inst->id() >= 0 && static_cast<size_t>(inst->id()) < array_bits_.size()) {
    const uint8_t b = array_bits_[static_cast<size_t>(inst->id())];
    return b == 2 ? Bits{} : Bits{b};
  }
  auto it = tuple_bits_.find(inst);
  return it == tuple_bits_.end() ? Bits{} : it->second;
}

bool RedundancyAnalysis::AllOf(const Instruction* inst) const {
  if (!inst->shape().IsTuple() && inst->id() >= 0 && static_cast<size_t>(inst->id()) < array_bits_.size())
    return array_bits_[static_cast<size_t>(inst->id())] == 1;
  auto it = tuple_bits_.find(inst);
  return it != tuple_bits_.end() && !it->second.empty() && AllSet(it->second);
}

RedundancyAnalysis::Bits RedundancyAnalysis::Compute(const Instruction* inst) {
  const int64_t n = Leaves(inst->shape());
  auto uniform = [&](bool v) { return Bits(static_cast<size_t>(n), v ? 1 : 0); };
  auto operands_redundant = [&]() {
    for (const Instruction* o : inst->operands())
      if (!AllOf(o)) return false;
    return true;
  };
  switch (inst->opcode()) {
    case Opcode::kParameter: {
      const CompState& st = comps_[inst->parent()];
      // Offset of this parameter's leaves in the flattened parameter bits.
      const size_t number = static_cast<size_t>(std::max<int64_t>(0, inst->parameter_number));
      const size_t off = number < st.param_offset.size() ? st.param_offset[number] : st.params.size();
      Bits b = uniform(false);
      for (int64_t k = 0; k < n && off + static_cast<size_t>(k) < st.params.size(); ++k)
        b[static_cast<size_t>(k)] = st.params[off + static_cast<size_t>(k)];
      return b;
    }
    case Opcode::kConstant: case Opcode::kIota:
      return uniform(true);
    case Opcode::kAllReduce: case Opcode::kAllReduceStart: case Opcode::kAllGather: case Opcode::kAllGatherStart: {
      auto groups = CollectiveParticipantGroups(*inst, replicas_, partitions_);
      const bool full = groups.ok() && groups->size() == 1 && static_cast<int64_t>(groups->front().size()) == devices_;
      full_collective_[inst] = full;
      // Over subgroups of one size, equal inputs still give equal results everywhere.
      bool same_sizes = groups.ok() && !groups->empty();
      if (same_sizes)
        for (const auto& g : *groups) same_sizes = same_sizes && g.size() == groups->front().size();
      return uniform(full || (same_sizes && operands_redundant()));
    }
    case Opcode::kTuple: {
      Bits b;
      for (const Instruction* o : inst->operands()) {
        const Bits ob = Get(o);
        b.insert(b.end(), ob.begin(), ob.end());
      }
      return b;
    }
    case Opcode::kGetTupleElement: {
      const Instruction* t = inst->operand(0);
      // The tuple's leaves, read in place (copying them per element was quadratic too).
      const Bits* tb = nullptr;
      Bits array_bits;
      if (auto it = tuple_bits_.find(t); t->shape().IsTuple() && it != tuple_bits_.end()) {
        tb = &it->second;
      } else {
        array_bits = Get(t);
        tb = &array_bits;
      }
      const size_t off = LeafOffset(t, inst->tuple_index);
      Bits b = uniform(false);
      for (int64_t k = 0; k < n && off + static_cast<size_t>(k) < tb->size(); ++k) b[static_cast<size_t>(k)] = (*tb)[off + static_cast<size_t>(k)];
      return b;
    }
    case Opcode::kWhile: {
      const Computation* body = inst->while_body();
      const Computation* cond = inst->while_condition();
      if (!body || !cond || inst->operand_count() != 1) return uniform(false);
      Bits state = Get(inst->operand(0));
      for (int iter = 0; iter < 64; ++iter) {
        Bits root = Analyze(body, state);
        Bits next = state;
        for (size_t i = 0; i < next.size(); ++i) next[i] = next[i] && i < root.size() && root[i];
        if (next == state) break;
        state = next;
      }
      Bits c = Analyze(cond, state);
      if (!AllSet(c)) {
        // The replicas may not agree on the trip count: nothing in the loop is redundant.
        Bits none(state.size(), 0);
        Analyze(body, none);
        Analyze(cond, none);
        return uniform(false);
      }
      return state;
    }
    case Opcode::kConditional: {
      const auto& branches = inst->called_computations();
      if (inst->operand_count() != static_cast<int64_t>(branches.size()) + 1) return uniform(false);
      const bool pred = AllOf(inst->operand(0));
      Bits out = uniform(pred);
      for (size_t k = 0; k < branches.size(); ++k) {
        Bits in = Get(inst->operand(static_cast<int64_t>(k + 1)));
        if (!pred) std::fill(in.begin(), in.end(), 0);
        Bits r = Analyze(branches[k], in);
        for (size_t i = 0; i < out.size(); ++i) out[i] = out[i] && i < r.size() && r[i];
      }
      return out;
    }
    case Opcode::kCall: {
      if (!inst->to_apply()) return uniform(false);
      Bits in;
      for (const Instruction* o : inst->operands()) {
        const Bits ob = Get(o);
        in.insert(in.end(), ob.begin(), ob.end());
      }
      Bits r = Analyze(inst->to_apply(), in);
      r.resize(static_cast<size_t>(n), 0);
      return r;
    }
    default:
      break;
  }
  if (DeviceDependent(*inst)) return uniform(false);
  return uniform(operands_redundant());
}

size_t RedundancyAnalysis::LeafOffset(const Instruction* tuple, int64_t index) {
  auto [it, inserted] = leaf_offsets_.try_emplace(tuple);
  std::vector<size_t>& prefix = it->second;
  if (inserted) {
    const std::vector<Shape>& elements = tuple->shape().tuple;
    prefix.reserve(elements.size() + 1);
    prefix.push_back(0);
    for (const Shape& e : elements) prefix.push_back(prefix.back() + static_cast<size_t>(Leaves(e)));
  }
  if (index <= 0) return 0;
  return prefix[std::min(static_cast<size_t>(index), prefix.size() - 1)];
}

bool RedundancyAnalysis::IsRedundant(const Instruction* inst) const { return AllOf(inst); }

bool RedundancyAnalysis::IsLeafRedundant(const Instruction* inst, int64_t leaf) const {
  const Bits b = Get(inst);
  return leaf >= 0 && leaf < static_cast<int64_t>(b.size()) && b[static_cast<size_t>(leaf)];
}

bool RedundancyAnalysis::IsFullCollective(const Instruction* inst) const {
  auto it = full_collective_.find(inst);
  return it != full_collective_.end() && it->second;
}

int64_t RedundancyAnalysis::redundant_instructions() const {
  int64_t n = 0;
  for (uint8_t b : array_bits_) n += b == 1;
  for (const auto& [inst, b] : tuple_bits_)
    if (!b.empty() && AllSet(b)) ++n;
  return n;
}

}  // namespace shardscope::wus
