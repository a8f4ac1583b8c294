// GSPMD sharding propagation driver: preprocessing of annotations, the priority-ordered fixed-point
// iteration over worklists, computation-boundary consistency, shard groups, post-processing,
// provenance and incremental re-propagation. See propagation.h.
#include "partitioner/propagation.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/ir/verifier.h"
#include "partitioner/rules/rules_common.h"
#include "partitioner/sharding_util.h"

namespace shardscope {

using prop::Direction;
using prop::IsCustomCall;
using prop::RuleFor;

namespace {

// A set of positions (post-order indices within one computation), scanned in order.
class PendingSet {
 public:
  void Reset(size_t n) {
    n_ = n;
    words_.assign((n + 63) / 64, 0);
  }
  void Set(size_t i) { words_[i >> 6] |= (uint64_t{1} << (i & 63)); }
  void Clear(size_t i) { words_[i >> 6] &= ~(uint64_t{1} << (i & 63)); }
  bool Test(size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  // Smallest set position >= i, or npos.
  size_t NextFrom(size_t i) const {
    if (i >= n_) return npos;
    size_t w = i >> 6;
    uint64_t bits = words_[w] & (~uint64_t{0} << (i & 63));
    while (true) {
      if (bits) {
        const size_t r = (w << 6) + static_cast<size_t>(__builtin_ctzll(bits));
        return r < n_ ? r : npos;
      }
      if (++w >= words_.size()) return npos;
      bits = words_[w];
    }
  }
  // Largest set position <= i, or npos.
  size_t PrevFrom(size_t i) const {
    if (n_ == 0) return npos;
    if (i >= n_) i = n_ - 1;
    size_t w = i >> 6;
    const unsigned shift = 63 - static_cast<unsigned>(i & 63);
    uint64_t bits = words_[w] & (~uint64_t{0} >> shift);
    while (true) {
      if (bits) return (w << 6) + 63 - static_cast<size_t>(__builtin_clzll(bits));
      if (w == 0) return npos;
      bits = words_[--w];
    }
  }
  static constexpr size_t npos = std::numeric_limits<size_t>::max();

 private:
  size_t n_ = 0;
  std::vector<uint64_t> words_;
};

bool IsConversionCustomCall(const Instruction& inst) {
  return IsCustomCall(inst, "SPMDFullToShardShape") || IsCustomCall(inst, "SPMDShardToFullShape");
}

bool IsCsePreventionSharding(const HloSharding& s) {
  return s.metadata().size() == 1 && s.metadata()[0].text.find("_sharding_propagation_cse_prevention") != std::string::npos;
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

bool SameOptional(const std::optional<HloSharding>& a, const std::optional<HloSharding>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return *a == *b && a->kind() == b->kind();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

struct ShardingPropagation::Engine : public prop::RuleContext {
  // ---- structure (rebuilt when the module changes shape) ----
  struct CompInfo {
    Computation* comp = nullptr;
    std::vector<Instruction*> post;  // XLA post order
    PendingSet fwd, bwd, group;
  };
  Module* module = nullptr;
  int64_t instruction_count = 0;
  std::vector<Instruction*> by_id;
  std::vector<CompInfo> comps;
  std::vector<int32_t> comp_of, pos_of;
  std::vector<const prop::OpRule*> rule_of;
  std::unordered_map<const Computation*, Instruction*> caller;  // partitionable sub-computations
  std::vector<std::string> unsupported;

  // ---- annotations and preprocessing ----
  struct Group {
    int64_t id = 0;
    bool shard_as = true;
    std::vector<Instruction*> members;
  };
  struct Setup {
    std::vector<std::optional<HloSharding>> initial;
    std::vector<ShardingOrigin> origin;
    std::vector<uint8_t> provided;
    std::unordered_map<int64_t, std::vector<int64_t>> unspecified;
    std::vector<int32_t> group_of;
    std::vector<Group> groups;
    std::vector<HloSharding> saved_root;
    std::unordered_map<int64_t, HloSharding> saved_params;
    bool root_is_while = false;
  };
  std::vector<std::optional<HloSharding>> annotation;  // by id: user input
  Setup setup;

  // ---- propagation state ----
  PropagationOptions options;
  std::vector<ShardingOrigin> origin;
  std::vector<uint8_t> in_region;
  Direction direction = Direction::kForward;
  int64_t iteration = 0;
  int64_t rule_evaluations = 0;
  int64_t inferred = 0;
  bool allow_output = false, allow_params = false;

  // Every change of an instruction's sharding bumps its version; memoised rule results are keyed
  // by the versions they read.
  std::vector<uint32_t> version;
  std::vector<std::unique_ptr<shard_util::DotDims>> dot_dims;
  struct ForwardMemo {
    uint32_t operand_version = 0;
    HloSharding result;
  };
  std::unordered_map<uint64_t, ForwardMemo> dot_forward_memo;  // key: dot id * 2 + operand
  struct BackwardMemo {
    uint32_t user_version = 0, other_version = 0;
    bool combine = false, early = false;
    std::optional<HloSharding> result;
  };
  std::unordered_map<uint64_t, BackwardMemo> backward_memo;  // key: user id << 24 | operand index

  void Bump(const Instruction* inst) {
    if (!Known(inst)) return;
    ++version[Id(inst)];
    change_time[Id(inst)] = ++clock;
  }

  // ---- skipping evaluations that cannot change anything ----
  // An evaluation is a pure function of the shardings it reads and of the priority level's
  // settings; refinement is idempotent. So when an op was last evaluated at an equivalent level
  // and none of its inputs changed since, evaluating again would change nothing.
  uint64_t clock = 1;
  std::vector<uint64_t> change_time, fwd_time, bwd_time;
  std::vector<int8_t> fwd_class, bwd_class;

  static int ForwardClass(const Instruction& inst, int aggr) {
    return inst.opcode() == Opcode::kBroadcast ? aggr : std::min(aggr, 1);
  }
  static int BackwardClass(int aggr) { return std::min(aggr, 2); }

  bool ForwardInputsUnchanged(const Instruction& inst) const {
    const size_t id = Id(&inst);
    const uint64_t t = fwd_time[id];
    if (change_time[id] > t) return false;
    for (const Instruction* op : inst.operands()) {
      if (Known(op) && change_time[Id(op)] > t) return false;
    }
    return true;
  }

  bool BackwardInputsUnchanged(const Instruction& inst) const {
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
  static bool ForwardReadsOnlyOperands(const Instruction& inst) {
    const Opcode op = inst.opcode();
    return op != Opcode::kDot && op != Opcode::kConvolution && op != Opcode::kParameter;
  }

  const shard_util::DotDims& DotDimsOf(const Instruction& dot) override {
    auto& slot = dot_dims[Id(&dot)];
    if (!slot) {
      slot = std::make_unique<shard_util::DotDims>(dot.opcode() == Opcode::kDot ? shard_util::ParseDotDims(dot)
                                                                                : shard_util::ParseConvolutionDims(dot));
    }
    return *slot;
  }

  const HloSharding& OutputShardingFromDotOperand(const Instruction& dot, int operand_index) override {
    const Instruction* op = dot.operand(operand_index);
    const uint64_t key = static_cast<uint64_t>(Id(&dot)) * 2 + static_cast<uint64_t>(operand_index);
    const uint32_t v = version[Id(op)];
    auto it = dot_forward_memo.find(key);
    if (it != dot_forward_memo.end() && it->second.operand_version == v) return it->second.result;
    ForwardMemo memo{v, shard_util::DotShardingFromOperand(*op->sharding(), DotDimsOf(dot), operand_index)};
    auto [pos, inserted] = dot_forward_memo.insert_or_assign(key, std::move(memo));
    return pos->second.result;
  }

  // ================================================================================================
  // Indexing

  static void PostOrder(const Computation& comp, std::vector<Instruction*>* out) {
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

  Status Index(Module& m) {
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

  bool SameStructure(Module& m) const {
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

  size_t Id(const Instruction* inst) const { return static_cast<size_t>(inst->id()); }
  bool Known(const Instruction* inst) const {
    return inst->id() >= 0 && inst->id() < static_cast<int64_t>(by_id.size()) && by_id[Id(inst)] == inst;
  }

  // ================================================================================================
  // Related instructions across computation boundaries (XLA GetRelatedInstructions).

  std::vector<Instruction*> Related(Instruction* inst) const {
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

  // ================================================================================================
  // Preprocessing (XLA ProcessShardingInstruction + loop consistency + provided set).

  Setup BuildSetup(const std::vector<std::optional<HloSharding>>& ann) const {
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
          std::vector<int64_t> unspec = Sorted(inst->UnspecifiedDims());
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
      s.saved_root = shard_util::ToTupleForm(*s.initial[Id(entry_root)], entry_root->shape()).tuple_elements();
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
          auto d = shard_util::UniqueDevice(*bs);
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
          if (!rs || !shard_util::UniqueDevice(*rs)) {
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
  bool IsFixed(const Setup& s, const Instruction* inst) const {
    const size_t i = Id(inst);
    if (!s.provided[i]) return false;
    if (s.unspecified.count(static_cast<int64_t>(i))) return false;
    if (s.group_of[i] >= 0) return false;
    if (IsConversionCustomCall(*inst)) return false;
    return true;
  }

  // ================================================================================================
  // RuleContext

  bool Improve(Instruction* inst, const HloSharding& candidate, bool allow_aggressive_resharding,
               const Instruction* source, std::string_view rule) override {
    const HloSharding* cur = inst->has_sharding() ? &*inst->sharding() : nullptr;
    // Offering the sharding an instruction already has never changes it (the common case).
    if (cur != nullptr && candidate.kind() == cur->kind() && candidate == *cur) return false;
    auto next = shard_util::ReturnImprovedSharding(candidate, cur, inst->shape(), may_combine_partial,
                                                   allow_aggressive_resharding);
    if (!next) return false;
    Assign(inst, std::move(*next), direction, source, rule);
    return true;
  }

  bool ImproveElement(Instruction* inst, const HloSharding& candidate, int64_t index, bool allow_aggressive_resharding,
                      const Instruction* source, std::string_view rule) override {
    const Shape& shape = inst->shape();
    if (!shape.IsTuple()) {
      if (index != 0) return false;
      return Improve(inst, candidate, allow_aggressive_resharding, source, rule);
    }
    if (index < 0 || index >= static_cast<int64_t>(shape.tuple.size())) return false;
    std::optional<HloSharding> cur_sub;
    if (inst->has_sharding()) cur_sub = shard_util::TupleElementSharding(*inst->sharding(), shape, index);
    auto next = shard_util::ReturnImprovedSharding(candidate, cur_sub ? &*cur_sub : nullptr,
                                                   shape.tuple[static_cast<size_t>(index)], may_combine_partial,
                                                   allow_aggressive_resharding);
    if (!next) return false;
    HloSharding base = inst->has_sharding() ? *inst->sharding() : HloSharding::Replicate();
    Assign(inst, shard_util::SetTupleElementSharding(base, shape, index, *next), direction, source, rule);
    return true;
  }

  void Set(Instruction* inst, HloSharding sharding, const Instruction* source, std::string_view rule) override {
    Assign(inst, std::move(sharding), direction, source, rule);
  }

  const Instruction* CallerOf(const Computation* computation) const override {
    auto it = caller.find(computation);
    return it == caller.end() ? nullptr : it->second;
  }

  void NoteSecondSource(const Instruction* inst, const Instruction* other) override {
    if (options.record_provenance && Known(inst)) origin[Id(inst)].second_source = other;
  }

  std::optional<HloSharding> LookaheadUserSharding(const Instruction* inst) override {
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

  void Assign(Instruction* inst, HloSharding sharding, Direction dir, const Instruction* source, std::string_view rule) {
    inst->set_sharding(std::move(sharding));
    Bump(inst);
    ++inferred;
    if (options.record_provenance && Known(inst)) {
      origin[Id(inst)] = ShardingOrigin{dir, source, nullptr, rule, aggressiveness == INT_MAX ? 3 : aggressiveness, iteration};
    }
  }

  // ================================================================================================
  // Priorities and support (XLA CanPropagateThroughAtAggressiveLevel / SupportSpatialPartitioning)

  bool IsElementwiseLike(const Instruction& inst) const {
    return prop::IsElementwiseOp(inst) || (replace_sharding_with_copy && IsCustomCall(inst, "Sharding"));
  }

  bool CanPropagateThrough(const Instruction& inst, int aggr) const {
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

  bool SupportsSpatialPartitioning(const Instruction& inst, bool allow_output_here, bool allow_params_here) const {
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

  // ================================================================================================
  // Forward / backward / shard-group inference (XLA InferShardingFromOperands / Users / ShardGroup)

  bool InferFromOperands(Instruction& inst) {
    if (!CanPropagateThrough(inst, aggressiveness)) return false;
    if (inst.has_sharding() && inst.sharding()->IsManual()) return false;
    const bool tuple_cc = inst.opcode() == Opcode::kCustomCall && inst.shape().IsTuple();
    if ((!inst.has_sharding() || shard_util::IsTileMaximal(*inst.sharding())) &&
        (inst.shape().IsArray() || inst.opcode() == Opcode::kReduce || inst.opcode() == Opcode::kSort ||
         inst.opcode() == Opcode::kReduceWindow || tuple_cc)) {
      for (const Instruction* op : inst.operands()) {
        if (!op->has_sharding() || !op->sharding()->IsManual()) continue;
        if (IsCustomCall(inst, "SPMDShardToFullShape")) return false;
        if (aggressiveness == 0 &&
            (inst.opcode() == Opcode::kConcatenate || inst.opcode() == Opcode::kDynamicSlice)) {
          return false;
        }
        Set(&inst, shard_util::ToTupleForm(HloSharding::Manual(), inst.shape()), op, "manual");
        return true;
      }
    }
    if (!SupportsSpatialPartitioning(inst, allow_output, false)) {
      if (inst.shape().IsTuple() || inst.operand_count() == 0 || &inst == inst.parent()->root() ||
          prop::HasSideEffect(inst)) {
        return false;
      }
      for (const Instruction* op : inst.operands()) {
        if (op->has_sharding() && shard_util::IsTileMaximal(*op->sharding()) && !shard_util::UniqueDevice(*op->sharding())) {
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
  const HloSharding* CandidateFromUser(const Instruction& inst, const Instruction& user,
                                       std::optional<HloSharding>* scratch) {
    if (!CanPropagateThrough(user, aggressiveness)) return nullptr;
    const HloSharding* us = ShardingOf(&user);
    if (us == nullptr || !shard_util::IsSpatiallyPartitioned(*us)) return nullptr;
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

  std::optional<HloSharding> ShardingFromUser(const Instruction& inst, const Instruction& user) {
    std::optional<HloSharding> scratch;
    const HloSharding* s = CandidateFromUser(inst, user, &scratch);
    if (s == nullptr) return std::nullopt;
    if (s == &*scratch) return scratch;
    return *s;
  }

  bool InferFromUsers(Instruction& inst) {
    if (aggressiveness < 2 && inst.opcode() == Opcode::kBroadcast) return false;
    if (inst.has_sharding() && inst.sharding()->IsManual()) return false;
    if (!inst.has_sharding() || shard_util::IsTileMaximal(*inst.sharding())) {
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
        if (!shard_util::IsSpatiallyPartitioned(us)) continue;
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

  bool InferFromShardGroup(Instruction& inst, const Group& group) {
    if (!CanPropagateThrough(inst, aggressiveness)) return false;
    if (inst.has_sharding() && inst.sharding()->IsManual()) return false;
    if (IsCustomCall(inst, "ShardBarrierTo")) return false;
    if (!inst.has_sharding() || shard_util::IsTileMaximal(*inst.sharding())) {
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

  // ---- partial annotations (Sharding custom-call with unspecified dims) and manual conversions ----

  bool RefineFromAuto(const HloSharding& to_merge, const std::vector<int64_t>& unspec, HloSharding* auto_s,
                      HloSharding* manual_s) {
    using namespace shard_util;
    if (!IsManualSubgroup(*manual_s) || IsManualSubgroup(*auto_s) || !manual_s->HasPartialReplication() ||
        manual_s->subgroup_types().size() != 2) {
      return false;
    }
    HloSharding partial = PartiallyReplicateTiledShardingOnAllDimsExcept(to_merge, unspec);
    if (shard_util::IsTileMaximal(partial)) return false;
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
      man = shard_util::Plain(man).Transpose(perm);
    }
    HloSharding tmp = MakePartialTile(man);
    if (!MergeShardingIfCompatible(partial_for_manual, tmp.NumTiles() + 1, &tmp)) return false;
    std::vector<SubgroupType> types = {SubgroupType::kManual};
    if (tmp.HasPartialReplication()) types.push_back(SubgroupType::kReplicated);
    *auto_s = std::move(a);
    *manual_s = MakeSubgroup(tmp.tile_assignment(), types);
    return true;
  }

  bool RefineFromManual(const HloSharding& to_merge, const std::vector<int64_t>& unspec, HloSharding* auto_s,
                        HloSharding* manual_s) {
    using namespace shard_util;
    if (!IsManualSubgroup(to_merge) || !IsManualSubgroup(*manual_s) || !manual_s->HasPartialReplication() ||
        IsManualSubgroup(*auto_s) || manual_s->subgroup_types().size() != 2) {
      return false;
    }
    HloSharding partial = PartiallyReplicateTiledShardingOnAllDimsExcept(to_merge, unspec);
    if (shard_util::IsTileMaximal(partial)) return false;
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
  bool ConversionAfter(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv) {
    *conv = nullptr;
    if (annotate.users().size() != 1) return true;
    Instruction* user = annotate.users()[0];
    if (!IsConversionCustomCall(*user)) return true;
    if (Sorted(user->UnspecifiedDims()) != unspec) return false;
    *conv = user;
    return true;
  }

  bool InferUnspecifiedFromOperand(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv_after) {
    using namespace shard_util;
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

  bool InferUnspecifiedFromUsers(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv_after) {
    using namespace shard_util;
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
      if (!us || shard_util::IsTileMaximal(*us)) continue;
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

  bool InferUnspecifiedFromShardGroup(Instruction& annotate, const std::vector<int64_t>& unspec, const Group& group) {
    using namespace shard_util;
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

  // ================================================================================================
  // Computation-boundary consistency (XLA MaybeComputationPropagation)

  void ComputationPropagation(Instruction* inst, std::vector<Instruction*>* changed) {
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

  // ================================================================================================
  // The fixed-point iteration

  void MarkFwd(const Instruction* i) {
    if (Known(i) && in_region[Id(i)]) comps[static_cast<size_t>(comp_of[Id(i)])].fwd.Set(static_cast<size_t>(pos_of[Id(i)]));
  }
  void MarkBwd(const Instruction* i) {
    if (Known(i) && in_region[Id(i)]) comps[static_cast<size_t>(comp_of[Id(i)])].bwd.Set(static_cast<size_t>(pos_of[Id(i)]));
  }
  void MarkGroup(const Instruction* i) {
    if (Known(i) && in_region[Id(i)]) comps[static_cast<size_t>(comp_of[Id(i)])].group.Set(static_cast<size_t>(pos_of[Id(i)]));
  }

  void ClearCache(const Instruction* hlo, const Instruction* hlo_for_users = nullptr) {
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

  void AfterChange(Instruction* inst) {
    std::vector<Instruction*> changed;
    ComputationPropagation(inst, &changed);
    ClearCache(inst);
    for (Instruction* c : changed) ClearCache(c);
  }

  const std::vector<int64_t>* Unspecified(const Instruction* inst) const {
    auto it = setup.unspecified.find(static_cast<int64_t>(Id(inst)));
    return it == setup.unspecified.end() ? nullptr : &it->second;
  }

  bool RunToFixPoint(int aggr, bool propagate_shard_group) {
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

  // ================================================================================================
  // Whole pass over a region (every instruction for Run, the affected region for Update)

  void AlignShardAsGroups() {
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
                                             : shard_util::FindCommonSharding(shardings, default_sharding);
      for (Instruction* m : g.members) {
        if (IsCustomCall(*m, "ShardBarrierTo")) continue;
        if (!m->has_sharding() || !(*m->sharding() == common)) {
          Assign(m, common, Direction::kShardGroup, nullptr, "shard_as alignment");
        }
      }
    }
  }

  void PostProcess() {
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
      HloSharding rs = shard_util::ToTupleForm(*root_mut->sharding(), root->shape());
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
        HloSharding ps = shard_util::ToTupleForm(*params[0]->sharding(), shape);
        for (size_t i = 0; i < par_vec.size(); ++i) {
          HloSharding saved = shard_util::TupleElementSharding(setup.saved_params.begin()->second, shape, static_cast<int64_t>(i));
          if (!par_vec[i] && !saved.IsUnknown()) ps = shard_util::SetTupleElementSharding(ps, shape, static_cast<int64_t>(i), saved);
        }
        params[0]->set_sharding(std::move(ps));
        Bump(params[0]);
      }
    }
    // An output or parameter sharding that does not split its shape evenly is replicated.
    if (allow_output && root && in_region[Id(root)] && root_mut->has_sharding()) {
      const Shape& shape = root->shape();
      if (shape.IsTuple() && out_vec.size() == shape.tuple.size()) {
        HloSharding rs = shard_util::ToTupleForm(*root_mut->sharding(), shape);
        bool changed = false;
        for (size_t i = 0; i < shape.tuple.size(); ++i) {
          HloSharding e = shard_util::TupleElementSharding(rs, shape, static_cast<int64_t>(i));
          if (out_vec[i] && !shard_util::EvenlyPartitions(shape.tuple[i], e)) {
            rs = shard_util::SetTupleElementSharding(rs, shape, static_cast<int64_t>(i), HloSharding::Replicate());
            changed = true;
          }
        }
        if (changed) Assign(root_mut, std::move(rs), Direction::kPostProcess, nullptr, "uneven output replicated");
      } else if (!shape.IsTuple() && !shard_util::EvenlyPartitions(shape, *root_mut->sharding())) {
        Assign(root_mut, HloSharding::Replicate(), Direction::kPostProcess, nullptr, "uneven output replicated");
      }
    }
    if (allow_params) {
      if (par_vec.size() == params.size()) {
        for (size_t i = 0; i < params.size(); ++i) {
          Instruction* p = params[i];
          if (!in_region[Id(p)] || !p->has_sharding() || !par_vec[i]) continue;
          if (!shard_util::EvenlyPartitions(p->shape(), *p->sharding())) {
            Assign(p, HloSharding::Replicate(), Direction::kPostProcess, nullptr, "uneven parameter replicated");
          }
        }
      } else if (params.size() == 1 && params[0]->shape().IsTuple() && params[0]->has_sharding() &&
                 params[0]->shape().tuple.size() == par_vec.size() && in_region[Id(params[0])]) {
        const Shape& shape = params[0]->shape();
        HloSharding ps = shard_util::ToTupleForm(*params[0]->sharding(), shape);
        bool changed = false;
        for (size_t i = 0; i < par_vec.size(); ++i) {
          HloSharding e = shard_util::TupleElementSharding(ps, shape, static_cast<int64_t>(i));
          if (par_vec[i] && !shard_util::EvenlyPartitions(shape.tuple[i], e)) {
            ps = shard_util::SetTupleElementSharding(ps, shape, static_cast<int64_t>(i), HloSharding::Replicate());
            changed = true;
          }
        }
        if (changed) Assign(params[0], std::move(ps), Direction::kPostProcess, nullptr, "uneven parameter replicated");
      }
    }
  }

  bool Propagate() {
    bool changed = false;
    for (int aggr = options.use_priorities ? 0 : 3; aggr < 4; ++aggr) changed |= RunToFixPoint(aggr, true);
    AlignShardAsGroups();
    changed |= RunToFixPoint(3, true);
    PostProcess();
    // Write tile assignments the way XLA prints them (iota forms), once per distinct device list.
    shard_util::IotaCache cache;
    for (size_t i = 0; i < by_id.size(); ++i) {
      Instruction* inst = by_id[i];
      if (!inst || !in_region[i] || !inst->has_sharding()) continue;
      const HloSharding& s = *inst->sharding();
      if (s.IsTuple() || (s.IsTiled() && !s.tile_assignment().is_iota())) {
        HloSharding canonical = shard_util::WithIotaForm(s, &cache);
        if (canonical.IsTuple() || canonical.tile_assignment().is_iota()) inst->set_sharding(std::move(canonical));
      }
    }
    return changed;
  }

  void ApplySetupToRegion() {
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

  void Configure() {
    is_spmd = options.is_spmd;
    replace_sharding_with_copy = !options.cse_prevention_only;
    allow_output = std::any_of(options.propagate_to_output.begin(), options.propagate_to_output.end(),
                               [](bool b) { return b; });
    allow_params = std::any_of(options.propagate_to_parameters.begin(), options.propagate_to_parameters.end(),
                               [](bool b) { return b; });
  }

  // Instructions whose shardings can depend on the seeds: connected through operands, users,
  // co-operands of a user, computation boundaries and shard groups, stopping at fixed shardings.
  std::vector<uint8_t> Region(const std::vector<size_t>& seeds, const Setup& old_setup) const {
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

  PropagationReport Report(double ms, bool incremental, bool changed) const {
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
};

// ---------------------------------------------------------------------------------------------------

ShardingPropagation::ShardingPropagation(PropagationOptions options) : options_(std::move(options)) {
  if (options_.propagate_to_output.empty()) options_.propagate_to_output = {false};
  if (options_.propagate_to_parameters.empty()) options_.propagate_to_parameters = {false};
}

ShardingPropagation::~ShardingPropagation() = default;

Result<PropagationReport> ShardingPropagation::Run(Module& module) {
  const auto start = std::chrono::steady_clock::now();
  if (options_.verify) {
    Status verified = VerifyModule(module);
    if (!verified.ok()) return Error("cannot propagate shardings: " + verified.error().message);
  }
  auto engine = std::make_unique<Engine>();
  engine->options = options_;
  engine->Configure();
  Status st = engine->Index(module);
  if (!st.ok()) return st.error();
  const size_t n = engine->by_id.size();
  engine->annotation.assign(n, std::nullopt);
  for (size_t i = 0; i < n; ++i) {
    if (engine->by_id[i] && engine->by_id[i]->has_sharding()) engine->annotation[i] = engine->by_id[i]->sharding();
  }
  engine->setup = engine->BuildSetup(engine->annotation);
  engine->origin.assign(n, ShardingOrigin{});
  engine->in_region.assign(n, 0);
  for (size_t i = 0; i < n; ++i) engine->in_region[i] = engine->by_id[i] != nullptr;
  engine->ApplySetupToRegion();
  const bool changed = engine->Propagate();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  engine_ = std::move(engine);
  return engine_->Report(ms, false, changed);
}

Result<PropagationReport> ShardingPropagation::Update(Module& module, const std::vector<Instruction*>& changed) {
  if (!engine_ || !engine_->SameStructure(module)) {
    // Structure changed (or no prior run): annotations of instructions we knew stay, the changed
    // ones take their current sharding, everything else counts as unannotated.
    std::unordered_map<const Instruction*, std::optional<HloSharding>> known;
    if (engine_) {
      for (size_t i = 0; i < engine_->by_id.size(); ++i) {
        if (engine_->by_id[i]) known[engine_->by_id[i]] = engine_->annotation[i];
      }
    }
    std::unordered_set<const Instruction*> changed_set(changed.begin(), changed.end());
    if (engine_) {
      for (const auto& c : module.computations()) {
        for (const auto& i : c->instructions()) {
          if (changed_set.count(i.get())) continue;
          auto it = known.find(i.get());
          if (it != known.end() && it->second) {
            i->set_sharding(*it->second);
          } else {
            i->clear_sharding();
          }
        }
      }
    }
    auto r = Run(module);
    if (r.ok()) r->incremental = false;
    return r;
  }
  const auto start = std::chrono::steady_clock::now();
  Engine& e = *engine_;
  e.iteration = 0;
  e.rule_evaluations = 0;
  e.inferred = 0;
  std::vector<size_t> seeds;
  for (Instruction* inst : changed) {
    if (!inst || !e.Known(inst)) return Error("Update: instruction is not part of the propagated module");
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
    const size_t id = e.Id(inst);
    e.annotation[id] = inst->sharding();
    seeds.push_back(id);
  }
  Engine::Setup old_setup = std::move(e.setup);
  e.setup = e.BuildSetup(e.annotation);
  for (size_t i = 0; i < e.by_id.size(); ++i) {
    if (!e.by_id[i]) continue;
    const bool same = SameOptional(old_setup.initial[i], e.setup.initial[i]) &&
                      old_setup.provided[i] == e.setup.provided[i] &&
                      old_setup.unspecified.count(static_cast<int64_t>(i)) ==
                          e.setup.unspecified.count(static_cast<int64_t>(i)) &&
                      (old_setup.group_of[i] >= 0) == (e.setup.group_of[i] >= 0);
    if (!same) seeds.push_back(i);
  }
  e.in_region = e.Region(seeds, old_setup);
  std::vector<std::pair<const Instruction*, std::optional<HloSharding>>> before;
  for (size_t i = 0; i < e.by_id.size(); ++i) {
    if (e.by_id[i] && e.in_region[i]) before.emplace_back(e.by_id[i], e.by_id[i]->sharding());
  }
  // The changed annotations themselves were edited in place; compare against what they were.
  for (auto& [inst, s] : before) {
    if (std::find(changed.begin(), changed.end(), inst) != changed.end()) s = old_setup.initial[e.Id(inst)];
  }
  e.ApplySetupToRegion();
  const bool changed_any = e.Propagate();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  PropagationReport report = e.Report(ms, true, changed_any);
  for (const auto& [inst, s] : before) {
    if (!SameOptional(s, inst->sharding())) report.changed_instructions.push_back(inst);
  }
  return report;
}

const ShardingOrigin* ShardingPropagation::OriginOf(const Instruction& inst) const {
  if (!engine_ || !engine_->Known(&inst)) return nullptr;
  return &engine_->origin[engine_->Id(&inst)];
}

bool ShardingPropagation::IsUserAnnotation(const Instruction& inst) const {
  if (!engine_ || !engine_->Known(&inst)) return false;
  return engine_->annotation[engine_->Id(&inst)].has_value();
}

namespace {
std::string OriginLine(const Instruction& inst, const ShardingOrigin& o) {
  std::string s = inst.name() + " " + (inst.has_sharding() ? inst.sharding()->ToString() : std::string("(no sharding)"));
  switch (o.direction) {
    case Direction::kAnnotation:
      s += o.rule.empty() ? std::string(" (not set by propagation)") : std::string(" (user annotation)");
      return s;
    default:
      break;
  }
  s += " <- ";
  s += std::string(prop::DirectionName(o.direction));
  if (o.source) s += " from " + o.source->name();
  if (o.second_source) s += " (merged with " + o.second_source->name() + ")";
  if (!o.rule.empty()) s += " via " + std::string(o.rule);
  if (o.aggressiveness >= 0) s += ", priority level " + std::to_string(o.aggressiveness);
  if (o.iteration >= 0) s += ", sweep " + std::to_string(o.iteration);
  return s;
}
}  // namespace

std::vector<ExplainStep> ShardingPropagation::Explain(const Instruction& inst) const {
  std::vector<ExplainStep> steps;
  if (!engine_) return steps;
  std::unordered_set<const Instruction*> seen;
  const Instruction* cur = &inst;
  while (cur != nullptr && engine_->Known(cur) && seen.insert(cur).second) {
    const ShardingOrigin& o = engine_->origin[engine_->Id(cur)];
    ExplainStep step;
    step.instruction = cur;
    step.sharding = cur->has_sharding() ? cur->sharding()->ToString() : "none";
    step.origin = o;
    step.text = OriginLine(*cur, o);
    steps.push_back(std::move(step));
    if (o.direction == Direction::kAnnotation) break;
    cur = o.source;
  }
  return steps;
}

std::string ShardingPropagation::ExplainText(const Instruction& inst) const {
  std::string out;
  const auto steps = Explain(inst);
  for (size_t i = 0; i < steps.size(); ++i) {
    out += std::string(2 * i, ' ') + steps[i].text + "\n";
  }
  if (steps.empty()) out = inst.name() + ": no propagation has run\n";
  return out;
}

Result<PropagationReport> PropagateShardings(Module& module, const PropagationOptions& options) {
  ShardingPropagation p(options);
  return p.Run(module);
}

}  // namespace shardscope
