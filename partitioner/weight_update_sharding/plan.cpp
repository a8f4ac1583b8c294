// Planning of weight-update sharding: clusters around gradient all-reduces, their formats and
// layouts (sections 3.2 and 4.1), placement of sharded state (4.2) and profitability (3.2).
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <set>
#include <unordered_set>

#include "core/collectives/reduction.h"
#include "partitioner/weight_update_sharding/plan.h"

namespace shardscope::wus {

int32_t Plan::Intern(const Layout& l) {
  std::string key = std::to_string(l.scheme) + ":" + DimsText(l.format.dims) + ":" + std::to_string(l.format.merge) + ":" +
                    (l.format.bitcast ? "b" : "m") + std::to_string(l.format.tile_rows) + "x" +
                    std::to_string(l.format.tile_cols) + ":" + std::to_string(l.format.rows) + ":" +
                    std::to_string(l.format.padded) + ":" + std::to_string(l.format.shards);
  auto it = layout_ids.find(key);
  if (it != layout_ids.end()) return it->second;
  const int32_t id = static_cast<int32_t>(layouts.size());
  layouts.push_back(l);
  layout_ids.emplace(std::move(key), id);
  return id;
}

const ValuePlan* Plan::Find(const Instruction* inst) const {
  if (!inst) return nullptr;
  auto c = comps.find(inst->parent());
  if (c == comps.end()) return nullptr;
  auto it = c->second.values.find(inst);
  return it == c->second.values.end() ? nullptr : &it->second;
}

const std::vector<int64_t>& Plan::SlotsOf(const Instruction* tuple, const Instruction* v) const {
  auto [it, inserted] = slots_.try_emplace(tuple);
  if (inserted)
    for (int64_t i = 0; i < tuple->operand_count(); ++i) it->second[tuple->operand(i)].push_back(i);
  static const std::vector<int64_t> kNone;
  auto s = it->second.find(v);
  return s == it->second.end() ? kNone : s->second;
}

bool IsScalarOperand(const Instruction& inst, int64_t i) {
  const Instruction* o = inst.operand(i);
  return o->shape().IsArray() && o->shape().rank() == 0 && inst.shape().IsArray() && inst.shape().rank() > 0;
}

bool ConsumesShard(const Plan& plan, const Instruction* user, const Instruction* v, int32_t layout) {
  // A root (or a tuple handing values to a branch) that keeps the slots holding v sharded.
  auto slots_keep = [&](auto keeps) {
    const std::vector<int64_t>& slots = plan.SlotsOf(user, v);
    for (int64_t i : slots)
      if (!keeps(i)) return false;
    return !slots.empty();
  };
  if (user->opcode() == Opcode::kTuple) {
    const Computation* c = user->parent();
    if (user == c->root()) {
      auto io = plan.io.find(c);
      if (io == plan.io.end()) return false;
      return slots_keep([&](int64_t i) {
        auto it = io->second.outputs.find(i);
        return it != io->second.outputs.end() && it->second == layout;
      });
    }
    return slots_keep([&](int64_t i) {
      auto it = plan.shard_tuple_slots.find({user, i});
      return it != plan.shard_tuple_slots.end() && it->second == layout;
    });
  }
  const ValuePlan* up = plan.Find(user);
  if (!up) return false;
  switch (up->kind) {
    case ValueKind::kElementwise:
      if (up->layout != layout) return false;
      for (int64_t i = 0; i < user->operand_count(); ++i)
        if (user->operand(i) == v && IsScalarOperand(*user, i)) return false;
      return true;
    case ValueKind::kBroadcast: case ValueKind::kReduceKeep: case ValueKind::kReduceMasked: {
      if (user->operand(0) != v) return false;
      const ValuePlan* vp = plan.Find(v);
      const int32_t have = vp && vp->layout >= 0 ? vp->layout : up->operand_layout;
      return have == layout;
    }
    default:
      return false;
  }
}


namespace {

bool Sharded(const ValuePlan* v) { return v && v->layout >= 0; }


// Ops that must not be re-run on shards although elementwise in XLA's sense.
bool ShardableElementwise(const Instruction& inst) {
  const Opcode op = inst.opcode();
  if (!IsElementwise(op) || op == Opcode::kMap || op == Opcode::kRng || op == Opcode::kStochasticConvert) return false;
  return inst.shape().IsArray();
}

int64_t LeafOffset(const Shape& tuple, int64_t index) {
  int64_t off = 0;
  for (int64_t i = 0; i < index && i < static_cast<int64_t>(tuple.tuple.size()); ++i)
    off += tuple.tuple[static_cast<size_t>(i)].IsTuple() ? tuple.tuple[static_cast<size_t>(i)].LeafCount() : 1;
  return off;
}

// Synchronous steps of a bidirectional ring over n devices: each shard travels both ways, n/2
// steps (the simulator's ring, simulator/collectives).
double RingSteps(int64_t n) { return n <= 1 ? 0.0 : static_cast<double>((n + 1) / 2); }

// Hops of latency of one all-gather (or reduce-scatter) of a scheme: a ring per phase.
double SchemeSteps(const ShardingScheme& s) {
  switch (s.kind) {
    case ShardingScheme::Kind::kTwoPhase: return RingSteps(s.rows) + RingSteps(s.cols);
    case ShardingScheme::Kind::kPartial: return RingSteps(s.shards);
    case ShardingScheme::Kind::kOnePhase: break;
  }
  return RingSteps(s.shards);
}

// An all-gather of `bytes` (the whole value) into shards of the scheme: the bandwidth term of a
// ring, (G-1)/G x bytes over a link, and a hop's latency per ring step.
double AllGatherSeconds(const WeightUpdateShardingOptions& o, double bytes, int64_t g, double steps) {
  if (g <= 1) return 0;
  const double gd = static_cast<double>(g);
  return (gd - 1) / gd * bytes / o.link_bytes_per_second + steps * o.hop_latency_seconds;
}

std::string Bytes(double b) {
  char buf[64];
  if (b >= 1024.0 * 1024.0) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string Micros(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

// ---- the planner -----------------------------------------------------------------------------

class Planner {
 public:
  Planner(Plan& plan) : p_(plan), o_(plan.options) {}

  Status Run();

 private:
  // Computations reached from the entry through while / conditional / call, callers first.
  void CollectComputations();
  bool IsSeedCandidate(const Instruction* inst) const;
  // The layout of a seed's shards; *small: too small to shard alone, left to a batch (section 5.2).
  std::optional<int32_t> SeedLayout(const Instruction* seed, std::string* why_not, bool* small);
  std::vector<ReduceConstraint> ReduceConstraintsOf(const Instruction* seed) const;
  void PlanComputation(const Computation* c);
  ValuePlan Propagate(ComputationPlan& cp, const Instruction* inst);
  bool PullReduces(const Computation* c);
  bool PullElementwise(const Computation* c);
  int32_t PinnedCluster(const Instruction* inst) {
    auto s = pinned_seed_.find(inst);
    if (s == pinned_seed_.end()) return -1;
    auto c = seed_cluster_.find(s->second);
    return c == seed_cluster_.end() ? -1 : c->second;
  }
  std::string NameOf(const Instruction* inst) const;
  int32_t Find(int32_t c) {
    while (parent_[static_cast<size_t>(c)] != c) c = parent_[static_cast<size_t>(c)] = parent_[static_cast<size_t>(parent_[static_cast<size_t>(c)])];
    return c;
  }
  int32_t NewCluster(const Instruction* seed, const Computation* c, int32_t layout) {
    Cluster cl;
    cl.seeds = {seed};
    cl.comp = c;
    cl.layout = layout;
    p_.clusters.push_back(std::move(cl));
    parent_.push_back(static_cast<int32_t>(p_.clusters.size() - 1));
    return static_cast<int32_t>(p_.clusters.size() - 1);
  }
  int32_t Union(int32_t a, int32_t b) {
    if (a < 0) return b < 0 ? -1 : Find(b);
    if (b < 0) return Find(a);
    a = Find(a);
    b = Find(b);
    if (a != b) parent_[static_cast<size_t>(b)] = a;
    return a;
  }
  bool ConsumesShard(const Instruction* user, const Instruction* v, int32_t layout) const {
    return wus::ConsumesShard(p_, user, v, layout);
  }
  void Place();
  void PlaceLoop(const Instruction* w);
  void PlaceBranches(const Instruction* cond_inst);
  void PlaceEntry();
  std::optional<double> BranchFrequency(const Instruction* cond_inst, int64_t branch) const;
  // Profitability: returns the seeds newly rejected.
  std::vector<const Instruction*> Evaluate();

  Plan& p_;
  const WeightUpdateShardingOptions& o_;
  std::vector<const Computation*> order_;            // computations to plan
  std::unordered_map<const Computation*, int> call_count_;
  std::unordered_map<const Computation*, double> frequency_;
  std::unordered_map<const Computation*, bool> loop_body_;
  std::set<const Instruction*> rejected_;
  std::unordered_map<const Instruction*, WeightUpdateDecision> reject_decision_;
  std::unordered_map<const Instruction*, std::string> not_candidate_reason_;
  std::unordered_map<const Instruction*, int32_t> pinned_;          // elementwise ops sharded by a pull
  std::unordered_map<const Instruction*, int32_t> pinned_reduce_;   // reduces whose operand is sliced
  std::unordered_map<const Instruction*, const Instruction*> pinned_seed_;  // -> the seed whose cluster it joins
  std::unordered_map<const Instruction*, int32_t> seed_cluster_;           // seed -> its cluster id
  std::unordered_map<const Computation*, const Instruction*> caller_;      // while body -> while
  std::vector<int32_t> parent_;
  std::unordered_map<const Instruction*, std::optional<int32_t>> seed_layout_cache_;
  std::unordered_set<const Instruction*> small_seeds_;  // decided in batches (section 5.2)
};

void Planner::CollectComputations() {
  std::unordered_set<const Computation*> seen;
  std::vector<const Computation*> stack = {p_.module->entry()};
  frequency_[p_.module->entry()] = 1;
  for (const auto& c : p_.module->computations())
    for (const auto& inst : c->instructions())
      for (const Computation* callee : inst->called_computations()) ++call_count_[callee];
  while (!stack.empty()) {
    const Computation* c = stack.back();
    stack.pop_back();
    if (!c || !seen.insert(c).second) continue;
    order_.push_back(c);
    for (const auto& inst : c->instructions()) {
      const Opcode op = inst->opcode();
      if (op == Opcode::kWhile) {
        loop_body_[inst->while_body()] = true;
        frequency_[inst->while_body()] = frequency_[inst->while_condition()] = 1;
      }
      if (op == Opcode::kWhile || op == Opcode::kConditional || op == Opcode::kCall)
        for (const Computation* callee : inst->called_computations()) {
          if (!frequency_.count(callee)) frequency_[callee] = 1;
          stack.push_back(callee);
        }
    }
  }
}

bool Planner::IsSeedCandidate(const Instruction* inst) const {
  if (inst->opcode() != Opcode::kAllReduce || inst->operand_count() != 1) return false;
  const Shape& s = inst->shape();
  if (!s.IsArray() || s.rank() == 0 || s.ElementCount() < 1) return false;
  if (!p_.redundancy->IsFullCollective(inst)) return false;
  auto kind = MatchReduction(inst->to_apply());
  return kind && ReductionIdentity(*kind, s.type).has_value();
}

// The reduces the update applies to values of the seed's shape: a walk over the redundant
// elementwise ops of that shape connected to the seed (through the weights and auxiliaries they
// read), collecting their reduce users.
std::vector<ReduceConstraint> Planner::ReduceConstraintsOf(const Instruction* seed) const {
  const std::vector<int64_t>& dims = seed->shape().dims;
  std::vector<ReduceConstraint> out;
  std::unordered_set<const Instruction*> seen = {seed};
  std::vector<const Instruction*> work = {seed};
  auto same = [&](const Instruction* x) { return x->shape().IsArray() && x->shape().dims == dims; };
  auto redundant = [&](const Instruction* x) { return p_.redundancy->IsRedundant(x); };
  while (!work.empty() && seen.size() < 4096) {
    const Instruction* x = work.back();
    work.pop_back();
    for (const Instruction* u : x->users()) {
      if (!redundant(u)) continue;
      if (u->opcode() == Opcode::kReduce && u->operand(0) == x) {
        out.push_back({u->dimensions});
        continue;
      }
      if (ShardableElementwise(*u) && same(u) && seen.insert(u).second) work.push_back(u);
    }
    if (x != seed && ShardableElementwise(*x))
      for (const Instruction* o : x->operands())
        if (redundant(o) && same(o) && seen.insert(o).second) work.push_back(o);
  }
  return out;
}

std::optional<int32_t> Planner::SeedLayout(const Instruction* seed, std::string* why_not, bool* small) {
  const double bytes = static_cast<double>(seed->shape().ByteSize());
  const ShardingScheme& primary = p_.schemes[0];
  int32_t scheme = -1;
  *small = false;
  if (o_.force || bytes / static_cast<double>(primary.shards) >= static_cast<double>(o_.min_shard_bytes)) {
    scheme = 0;
  } else if (p_.schemes.size() > 1 && bytes / static_cast<double>(p_.schemes[1].shards) >= static_cast<double>(o_.min_shard_bytes)) {
    scheme = 1;
  } else if (o_.batch_small_updates && o_.combine_threshold_bytes > 0 && bytes <= static_cast<double>(o_.combine_threshold_bytes)) {
    // Section 5.2: too small alone; sharded within rows (partial sharding) where the mesh has them,
    // so the combined reduce-scatters and all-gathers run in one phase, and judged with its batch.
    scheme = static_cast<int32_t>(p_.schemes.size()) - 1;
    *small = true;
  } else {
    *why_not = "kept replicated: latency-bound, a shard would hold " + Bytes(bytes / static_cast<double>(primary.shards)) +
               " (< " + Bytes(static_cast<double>(o_.min_shard_bytes)) + ")" +
               (p_.schemes.size() > 1 ? ", a row's shard " + Bytes(bytes / static_cast<double>(p_.schemes[1].shards)) : "") +
               " (section 5.2)";
    return std::nullopt;
  }
  const int64_t g = p_.schemes[static_cast<size_t>(scheme)].shards;
  auto f = ChooseShardFormat(seed->shape().dims, g, ReduceConstraintsOf(seed), o_.tile_rows, o_.tile_cols);
  if (!f) {
    *why_not = "kept replicated: no shard format of " + DimsText(seed->shape().dims) +
               " suits the reduces of its update (section 4.1)";
    return std::nullopt;
  }
  return p_.Intern({*f, scheme});
}

ValuePlan Planner::Propagate(ComputationPlan& cp, const Instruction* inst) {
  ValuePlan v;
  auto plan_of = [&](const Instruction* x) -> const ValuePlan* {
    auto it = cp.values.find(x);
    return it == cp.values.end() ? nullptr : &it->second;
  };
  const Opcode op = inst->opcode();
  if (ShardableElementwise(*inst)) {
    int32_t layout = -1, cluster = -1;
    for (int64_t i = 0; i < inst->operand_count(); ++i) {
      if (IsScalarOperand(*inst, i)) continue;
      const Instruction* o = inst->operand(i);
      if (!o->shape().IsArray() || o->shape().dims != inst->shape().dims) return v;
      const ValuePlan* ov = plan_of(o);
      if (!Sharded(ov)) continue;
      if (layout >= 0 && ov->layout != layout) return v;  // two formats meet: computed whole
      layout = ov->layout;
      cluster = Union(cluster, ov->cluster);
    }
    if (layout < 0) {
      auto pin = pinned_.find(inst);
      if (pin == pinned_.end()) return v;
      layout = pin->second;
      cluster = Union(cluster, PinnedCluster(inst));
    }
    v.kind = ValueKind::kElementwise;
    v.layout = layout;
    v.cluster = cluster;
    return v;
  }
  if (op == Opcode::kBroadcast && inst->operand_count() == 1) {
    const ValuePlan* ov = plan_of(inst->operand(0));
    if (!Sharded(ov)) return v;
    const Layout& l = p_.layout(ov->layout);
    if (l.format.bitcast) return v;
    for (int64_t i = 0; i < l.format.merge; ++i)
      if (static_cast<int64_t>(inst->dimensions.size()) <= i || inst->dimensions[static_cast<size_t>(i)] != i) return v;
    v.kind = ValueKind::kBroadcast;
    v.layout = p_.Intern({l.format.Derived(inst->shape().dims), l.scheme});
    v.cluster = Union(-1, ov->cluster);
    return v;
  }
  if (op == Opcode::kReduce && inst->operand_count() == 2 && inst->shape().IsArray()) {
    const Instruction* x = inst->operand(0);
    const ValuePlan* xv = plan_of(x);
    int32_t layout = -1, cluster = -1;
    if (Sharded(xv)) {
      layout = xv->layout;
      cluster = xv->cluster;
    } else if (auto pin = pinned_reduce_.find(inst); pin != pinned_reduce_.end()) {
      layout = pin->second;
      cluster = PinnedCluster(inst);
      v.operand_layout = layout;
    }
    if (layout < 0 || Sharded(plan_of(inst->operand(1)))) return ValuePlan{};
    auto kind = MatchReduction(inst->to_apply());
    if (!kind || !ReductionIdentity(*kind, x->shape().type)) return ValuePlan{};
    const ShardFormat& f = p_.layout(layout).format;
    int64_t in = 0;
    for (int64_t d : inst->dimensions)
      if (d < f.merge) ++in;
    if (f.bitcast) {
      if (static_cast<int64_t>(inst->dimensions.size()) != x->shape().rank()) return ValuePlan{};
      v.kind = ValueKind::kReduceMasked;
    } else if (in == 0) {
      v.kind = ValueKind::kReduceKeep;
      v.layout = p_.Intern({f.Derived(inst->shape().dims), p_.layout(layout).scheme});
    } else if (in == f.merge) {
      v.kind = ValueKind::kReduceMasked;
    } else {
      return ValuePlan{};
    }
    v.cluster = Union(-1, cluster);
    if (v.kind == ValueKind::kReduceMasked) v.layout = -1;
    return v;
  }
  return v;
}

void Planner::PlanComputation(const Computation* c) {
  ComputationPlan& cp = p_.comps[c];
  cp.comp = c;
  cp.values.clear();
  cp.frequency = frequency_.count(c) ? frequency_[c] : 1;
  cp.is_loop_body = loop_body_.count(c) != 0;
  std::unordered_map<const Instruction*, std::pair<const Instruction*, int32_t>> pending;  // chain end -> source, layout
  for (const auto& holder : c->instructions()) {  // definition order: topological (the IR's contract)
    const Instruction* inst = holder.get();
    ValuePlan v;
    if (auto pend = pending.find(inst); pend != pending.end()) {
      const Instruction* source = pend->second.first;
      v.kind = ValueKind::kSeed;
      v.layout = pend->second.second;
      v.cluster = NewCluster(source, c, v.layout);
      seed_cluster_[source] = v.cluster;
      p_.seed_source[inst] = source;
    } else if (IsSeedCandidate(inst) && !rejected_.count(inst)) {
      // Data movement that only this all-reduce feeds runs before the reduce-scatter.
      const Instruction* end = inst;
      std::vector<const Instruction*> chain;
      while (end->users().size() == 1 && end != c->root()) {
        const Instruction* u = end->users().front();
        const Opcode op = u->opcode();
        if ((op != Opcode::kTranspose && op != Opcode::kReshape && op != Opcode::kCopy && op != Opcode::kBitcast) ||
            u->operand_count() != 1 || !u->shape().IsArray() || u->shape().rank() == 0)
          break;
        chain.push_back(u);
        end = u;
      }
      auto cached = seed_layout_cache_.find(inst);
      std::optional<int32_t> layout;
      if (cached != seed_layout_cache_.end()) {
        layout = cached->second;
      } else {
        std::string why;
        bool small = false;
        layout = SeedLayout(end, &why, &small);
        seed_layout_cache_[inst] = layout;
        if (!layout) not_candidate_reason_[inst] = why;
        if (layout && small) small_seeds_.insert(inst);
      }
      if (layout && end != inst) {
        v.kind = ValueKind::kAbsorbed;
        for (const Instruction* x : chain)
          if (x != end) cp.values[x].kind = ValueKind::kAbsorbed;
        pending[end] = {inst, *layout};
      } else if (layout) {
        v.kind = ValueKind::kSeed;
        v.layout = *layout;
        v.cluster = NewCluster(inst, c, *layout);
        seed_cluster_[inst] = v.cluster;
        p_.seed_source[inst] = inst;
      }
    } else if (p_.redundancy->IsRedundant(inst) && inst->shape().IsArray()) {
      v = Propagate(cp, inst);
    }
    if (v.kind != ValueKind::kFull || v.layout >= 0) {
      if (auto it = cp.values.find(inst); it != cp.values.end() && it->second.kind == ValueKind::kAbsorbed) continue;
      cp.values[inst] = v;
    }
  }
}

// Section 4.1's reduces on shards of weights (the norm of a weight in LARS): a reduce of a full
// redundant value of a cluster's shape whose result feeds that cluster's sharded update is run on
// the weight's shard, with the elementwise ops between them.
bool Planner::PullReduces(const Computation* c) {
  ComputationPlan& cp = p_.comps[c];
  bool changed = false;
  for (const auto& holder : c->instructions()) {
    const Instruction* r = holder.get();
    if (r->opcode() != Opcode::kReduce || r->operand_count() != 2 || pinned_reduce_.count(r)) continue;
    if (cp.values.count(r) || !p_.redundancy->IsRedundant(r)) continue;
    const Instruction* x = r->operand(0);
    if (!x->shape().IsArray() || x->shape().rank() == 0 || cp.values.count(x)) continue;
    // Walk forward from r to a sharded op whose layout covers x's dims.
    std::unordered_set<const Instruction*> seen = {r};
    std::vector<const Instruction*> work = {r};
    int32_t layout = -1, cluster = -1;
    while (!work.empty() && layout < 0 && seen.size() < 256) {
      const Instruction* y = work.back();
      work.pop_back();
      for (const Instruction* u : y->users()) {
        if (!p_.redundancy->IsRedundant(u) || !seen.insert(u).second) continue;
        auto it = cp.values.find(u);
        if (it != cp.values.end() && it->second.layout >= 0) {
          const int32_t l = it->second.layout;
          if (p_.layout(l).format.dims == x->shape().dims) {
            layout = l;
            cluster = it->second.cluster;
            break;
          }
          const int32_t seed_layout = p_.clusters[static_cast<size_t>(Find(it->second.cluster))].layout;
          if (p_.layout(seed_layout).format.dims == x->shape().dims) {
            layout = seed_layout;
            cluster = it->second.cluster;
            break;
          }
          continue;
        }
        work.push_back(u);
      }
    }
    if (layout < 0) continue;
    // Check the format allows this reduce.
    const ShardFormat& f = p_.layout(layout).format;
    int64_t in = 0;
    for (int64_t d : r->dimensions)
      if (d < f.merge) ++in;
    if (f.bitcast ? static_cast<int64_t>(r->dimensions.size()) != x->shape().rank() : (in != 0 && in != f.merge)) continue;
    const Instruction* seed = p_.clusters[static_cast<size_t>(Find(cluster))].seeds.front();
    pinned_reduce_[r] = layout;
    pinned_seed_[r] = seed;
    changed = true;
    // The elementwise chain feeding the reduce, used by nothing else, runs on shards too.
    std::vector<const Instruction*> chain = {x};
    std::unordered_set<const Instruction*> members = {r};
    while (!chain.empty()) {
      const Instruction* y = chain.back();
      chain.pop_back();
      if (!ShardableElementwise(*y) || y->shape().dims != x->shape().dims || !p_.redundancy->IsRedundant(y)) continue;
      bool private_use = true;
      for (const Instruction* u : y->users()) private_use = private_use && members.count(u);
      if (!private_use || pinned_.count(y)) continue;
      pinned_[y] = layout;
      pinned_seed_[y] = seed;
      members.insert(y);
      for (int64_t i = 0; i < y->operand_count(); ++i)
        if (!IsScalarOperand(*y, i)) chain.push_back(y->operand(i));
    }
  }
  return changed;
}

// The elementwise ops that only feed update ops on shards run on shards too (the decay of an
// auxiliary, m * beta1, before it meets the gradient): users first, so whole chains follow.
bool Planner::PullElementwise(const Computation* c) {
  ComputationPlan& cp = p_.comps[c];
  bool changed = false;
  const auto& order = c->instructions();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Instruction* x = it->get();
    if (!ShardableElementwise(*x) || x->shape().rank() == 0 || cp.values.count(x) || pinned_.count(x) ||
        !p_.redundancy->IsRedundant(x) || x->users().empty() || x == c->root())
      continue;
    int32_t layout = -1;
    const Instruction* seed = nullptr;
    bool ok = true;
    for (const Instruction* u : x->users()) {
      int32_t want = -1;
      const Instruction* useed = nullptr;
      if (auto v = cp.values.find(u); v != cp.values.end() && v->second.kind == ValueKind::kElementwise) {
        want = v->second.layout;
        const int32_t cl = v->second.cluster >= 0 ? Find(v->second.cluster) : -1;
        useed = cl >= 0 && !p_.clusters[static_cast<size_t>(cl)].seeds.empty() ? p_.clusters[static_cast<size_t>(cl)].seeds.front() : nullptr;
      } else if (auto pin = pinned_.find(u); pin != pinned_.end()) {
        want = pin->second;
        useed = pinned_seed_.count(u) ? pinned_seed_[u] : nullptr;
      }
      for (int64_t i = 0; i < u->operand_count(); ++i)
        if (u->operand(i) == x && IsScalarOperand(*u, i)) want = -1;
      if (want < 0 || (layout >= 0 && want != layout)) {
        ok = false;
        break;
      }
      layout = want;
      if (!seed) seed = useed;
    }
    if (!ok || layout < 0 || p_.layout(layout).format.dims != x->shape().dims) continue;
    pinned_[x] = layout;
    if (seed) pinned_seed_[x] = seed;
    changed = true;
  }
  return changed;
}

std::optional<double> Planner::BranchFrequency(const Instruction* cond, int64_t branch) const {
  // Predicate compare(remainder(counter, k), c) with a constant k >= 2: the EQ branch (true:
  // branch 0) runs every k-th step, the other k-1 of k.
  const Instruction* pred = cond->operand(0);
  if (cond->called_computations().size() != 2 || !pred->shape().IsArray() || pred->shape().type != PrimitiveType::kPred)
    return std::nullopt;
  if (pred->opcode() != Opcode::kCompare) return std::nullopt;
  if (pred->comparison != ComparisonDirection::kEq && pred->comparison != ComparisonDirection::kNe) return std::nullopt;
  const Instruction* rem = pred->operand(0);
  if (rem->opcode() != Opcode::kRemainder) rem = pred->operand(1);
  if (rem->opcode() != Opcode::kRemainder) return std::nullopt;
  const Instruction* k = rem->operand(1);
  if (k->opcode() != Opcode::kConstant || k->literal.values.size() != 1 || k->literal.values[0] < 2) return std::nullopt;
  if (!p_.redundancy->IsRedundant(pred)) return std::nullopt;
  const double rare = 1.0 / k->literal.values[0];
  const bool eq = pred->comparison == ComparisonDirection::kEq;
  return (branch == 0) == eq ? rare : 1.0 - rare;
}


std::string Planner::NameOf(const Instruction* inst) const {
  // An element of a loop state: the name of what the loop was started with.
  if (inst->opcode() == Opcode::kGetTupleElement && inst->operand(0)->opcode() == Opcode::kParameter) {
    auto w = caller_.find(inst->parent());
    if (w != caller_.end()) {
      const Instruction* init = w->second->operand(0);
      if (init->opcode() == Opcode::kTuple && inst->tuple_index < init->operand_count())
        return NameOf(init->operand(inst->tuple_index));
    }
  }
  return inst->name();
}

void Planner::PlaceLoop(const Instruction* w) {
  const Computation* body = w->while_body();
  const Computation* cond = w->while_condition();
  if (!body || !cond || call_count_[body] != 1 || call_count_[cond] != 1) return;
  const Instruction* root = body->root();
  if (!root || root->opcode() != Opcode::kTuple || body->parameters().size() != 1 || cond->parameters().size() != 1) return;
  const Instruction* param = body->parameter(0);
  if (!param || !param->shape().IsTuple() || root->operand_count() != static_cast<int64_t>(param->shape().tuple.size())) return;
  for (const Instruction* u : param->users())
    if (u->opcode() != Opcode::kGetTupleElement) return;
  std::set<int64_t> cond_uses;
  if (const Instruction* cp = cond->parameter(0))
    for (const Instruction* u : cp->users()) {
      if (u->opcode() != Opcode::kGetTupleElement) return;  // the condition reads the whole state
      cond_uses.insert(u->tuple_index);
    }
  for (int64_t i = 0; i < root->operand_count(); ++i) {
    const ValuePlan* rv = p_.Find(root->operand(i));
    if (!Sharded(rv)) continue;
    const int32_t layout = rv->layout;
    if (!param->shape().tuple[static_cast<size_t>(i)].IsArray() || cond_uses.count(i)) continue;
    if (!p_.redundancy->IsLeafRedundant(w->operand(0), LeafOffset(w->operand(0)->shape(), i))) continue;
    bool shard_use = false, full_use = false;
    for (const Instruction* g : param->users()) {
      if (g->tuple_index != i) continue;
      for (const Instruction* u : g->users()) {
        if (u == root) full_use = true;
        else if (ConsumesShard(u, g, layout)) shard_use = true;
        else full_use = true;
      }
    }
    if (full_use && !shard_use) continue;
    if (full_use && !o_.keep_weights_sharded) continue;
    p_.io[body].inputs[i] = layout;
    p_.io[body].outputs[i] = layout;
    p_.io[cond].inputs[i] = layout;
    p_.call_shards[w][i] = layout;
  }
}

void Planner::PlaceBranches(const Instruction* c) {
  const auto& branches = c->called_computations();
  for (size_t b = 0; b < branches.size(); ++b) {
    auto freq = BranchFrequency(c, static_cast<int64_t>(b));
    if (!freq) continue;
    const Computation* comp = branches[b];
    p_.comps[comp].frequency = *freq;
    if (*freq > 0.5 || !o_.gather_in_rare_branch || call_count_[comp] != 1) continue;
    const Instruction* arg = c->operand(static_cast<int64_t>(b) + 1);
    if (arg->opcode() != Opcode::kTuple || arg->users().size() != 1 || comp->parameters().size() != 1) continue;
    bool all_gte = true;
    for (const Instruction* u : comp->parameter(0)->users()) all_gte = all_gte && u->opcode() == Opcode::kGetTupleElement;
    if (!all_gte) continue;
    for (int64_t j = 0; j < arg->operand_count(); ++j) {
      const ValuePlan* ev = p_.Find(arg->operand(j));
      if (!Sharded(ev)) continue;
      p_.io[comp].inputs[j] = ev->layout;
      p_.call_shards[c][static_cast<int64_t>(b) * kBranchStride + j] = ev->layout;
      p_.shard_tuple_slots[{arg, j}] = ev->layout;
    }
  }
}

void Planner::PlaceEntry() {
  if (!o_.split_step_program) return;
  const Computation* entry = p_.module->entry();
  const ComputationPlan& cp = p_.comps[entry];
  bool any = false;
  for (const auto& [inst, v] : cp.values) any = any || v.layout >= 0 || v.kind == ValueKind::kReduceMasked;
  if (!any) return;
  ShardedIo io;
  const Instruction* root = entry->root();
  if (root->opcode() == Opcode::kTuple) {
    for (int64_t k = 0; k < root->operand_count(); ++k) {
      const ValuePlan* rv = p_.Find(root->operand(k));
      if (Sharded(rv)) io.outputs[k] = rv->layout;
    }
  } else if (const ValuePlan* rv = p_.Find(root); Sharded(rv)) {
    io.outputs[0] = rv->layout;
  }
  p_.io[entry] = io;  // outputs first: ConsumesShard of the root reads them
  for (size_t i = 0; i < entry->parameters().size(); ++i) {
    const Instruction* prm = entry->parameters()[i];
    if (!prm || !prm->shape().IsArray() || i >= p_.redundant_entry_parameters.size() || !p_.redundant_entry_parameters[i])
      continue;
    // The layout its sharded users read it in.
    int32_t layout = -1;
    bool conflict = false;
    for (const Instruction* u : prm->users()) {
      const ValuePlan* up = p_.Find(u);
      if (!up) continue;
      int32_t want = -1;
      if (up->kind == ValueKind::kElementwise) want = up->layout;
      else if ((up->kind == ValueKind::kReduceKeep || up->kind == ValueKind::kReduceMasked) && u->operand(0) == prm)
        want = up->operand_layout;
      if (want < 0 || !ConsumesShard(u, prm, want)) continue;
      if (layout >= 0 && layout != want) conflict = true;
      layout = want;
    }
    if (layout < 0 || conflict) continue;
    bool full_use = false;
    for (const Instruction* u : prm->users()) full_use = full_use || !ConsumesShard(u, prm, layout);
    if (full_use && !o_.keep_weights_sharded) continue;
    io.inputs[static_cast<int64_t>(i)] = layout;
  }
  p_.io[entry] = io;
  p_.split = !io.empty();
}

void Planner::Place() {
  for (const Computation* c : order_)
    for (const auto& inst : c->instructions()) {
      if (inst->opcode() == Opcode::kWhile) PlaceLoop(inst.get());
      if (inst->opcode() == Opcode::kConditional) PlaceBranches(inst.get());
    }
  PlaceEntry();
}

std::vector<const Instruction*> Planner::Evaluate() {
  struct Stats {
    double seed_bytes = 0, update_bytes = 0;
    std::unordered_set<const Instruction*> inputs;
    std::vector<std::pair<double, double>> gathers;  // bytes, frequency
    int64_t masked = 0;
    std::vector<std::string> non_elementwise, state;
    std::string weight;
    bool weight_is_used_whole = false;
  };
  std::map<int32_t, Stats> stats;
  auto bytes_of = [](const Instruction* x) { return static_cast<double>(x->shape().ByteSize()); };
  auto is_kept_input = [&](const Instruction* x) {
    if (x->opcode() == Opcode::kGetTupleElement && x->operand(0)->opcode() == Opcode::kParameter) {
      auto io = p_.io.find(x->parent());
      return io != p_.io.end() && io->second.inputs.count(x->tuple_index) != 0;
    }
    if (x->opcode() == Opcode::kParameter && x->parent() == p_.module->entry()) {
      auto io = p_.io.find(x->parent());
      return io != p_.io.end() && io->second.inputs.count(x->parameter_number) != 0;
    }
    return false;
  };
  auto note_input = [&](Stats& st, const Instruction* x, int32_t layout) {
    if (!st.inputs.insert(x).second) return;
    st.update_bytes += bytes_of(x);
    bool whole = false;
    for (const Instruction* u : x->users()) whole = whole || !ConsumesShard(u, x, layout);
    const bool param_like = x->opcode() == Opcode::kParameter ||
                            (x->opcode() == Opcode::kGetTupleElement && x->operand(0)->opcode() == Opcode::kParameter);
    if (param_like && (st.weight.empty() || (whole && !st.weight_is_used_whole))) {
      st.weight = NameOf(x);
      st.weight_is_used_whole = whole;
    }
    if (is_kept_input(x)) {
      if (whole) {
        double b = bytes_of(x);
        // Figure 7: gathered after the cast when every whole use is one narrower cast.
        PrimitiveType cast = PrimitiveType::kInvalid;
        bool all_casts = true;
        for (const Instruction* u : x->users()) {
          if (ConsumesShard(u, x, layout)) continue;
          if (u->opcode() != Opcode::kConvert || (cast != PrimitiveType::kInvalid && u->shape().type != cast)) all_casts = false;
          else cast = u->shape().type;
        }
        if (o_.gather_in_compute_type && all_casts && cast != PrimitiveType::kInvalid &&
            PrimitiveTypeBytes(cast) < PrimitiveTypeBytes(x->shape().type))
          b = b * static_cast<double>(PrimitiveTypeBytes(cast)) / static_cast<double>(PrimitiveTypeBytes(x->shape().type));
        st.gathers.push_back({b, p_.comps[x->parent()].frequency});
      }
      st.state.push_back(NameOf(x));
    }
  };
  for (auto& [comp, cp] : p_.comps) {
    for (const auto& [inst, v] : cp.values) {
      if (v.cluster < 0) continue;
      Stats& st = stats[Find(v.cluster)];
      switch (v.kind) {
        case ValueKind::kSeed:
          st.seed_bytes += bytes_of(inst);
          st.update_bytes += bytes_of(inst);
          break;
        case ValueKind::kElementwise:
          for (int64_t i = 0; i < inst->operand_count(); ++i) {
            const Instruction* o = inst->operand(i);
            if (!IsScalarOperand(*inst, i) && !Sharded(p_.Find(o)) && !p_.redundancy->IsFullCollective(o))
              note_input(st, o, v.layout);
          }
          break;
        case ValueKind::kReduceMasked:
          ++st.masked;
          st.non_elementwise.push_back(inst->name() + ": reduce over the shard dims on each shard, padding masked, then all-reduced");
          if (v.operand_layout >= 0) note_input(st, inst->operand(0), v.operand_layout);
          break;
        case ValueKind::kReduceKeep:
          st.non_elementwise.push_back(inst->name() + ": reduce keeping the shard dims, on each shard");
          if (v.operand_layout >= 0) note_input(st, inst->operand(0), v.operand_layout);
          break;
        default:
          break;
      }
      if (v.layout < 0) continue;
      // Whole uses of a shard: an all-gather where the value is next used.
      bool whole = false;
      for (const Instruction* u : inst->users()) whole = whole || !ConsumesShard(u, inst, v.layout);
      const bool root = inst == comp->root();
      const auto io = p_.io.find(comp);
      bool kept_out = false;
      if (root || inst->users().empty()) {
        kept_out = io != p_.io.end() && io->second.outputs.count(0) && !comp->root()->shape().IsTuple();
        whole = whole || (root && !kept_out);
      }
      for (const Instruction* u : inst->users())
        if (u == comp->root() && u->opcode() == Opcode::kTuple && ConsumesShard(u, inst, v.layout)) kept_out = true;
      if (whole || kept_out) st.update_bytes += bytes_of(inst);
      if (whole) st.gathers.push_back({bytes_of(inst), cp.frequency});
      if (kept_out) {
        st.gathers.push_back({bytes_of(inst), 0.0});
        st.state.push_back(inst->name());
      }
    }
  }
  // Each cluster's figures: the saving, and the added communication split into its bandwidth term
  // and its latency term (hops x hop latency), which batching shares.
  struct Figures {
    int32_t id = -1;
    const Stats* st = nullptr;
    double saved = 0, bandwidth = 0, latency = 0;
    double batch_latency = 0;  // the latency of the same collectives when combined with others
    bool small = false;
  };
  auto bandwidth_of = [&](double bytes, int64_t g) { return AllGatherSeconds(o_, bytes, g, 0); };
  std::vector<Figures> figures;
  for (auto& [id, st] : stats) {
    Cluster& cl = p_.clusters[static_cast<size_t>(id)];
    if (cl.seeds.empty()) continue;
    const ShardingScheme& sch = p_.scheme_of(cl.layout);
    const int64_t g = sch.shards;
    const double gd = static_cast<double>(g);
    const double hop = SchemeSteps(sch) * o_.hop_latency_seconds;
    Figures f;
    f.id = id;
    f.st = &st;
    f.saved = st.update_bytes * (1 - 1 / gd) / o_.hbm_bytes_per_second;
    f.bandwidth = g > 1 ? -bandwidth_of(st.seed_bytes, g) : 0;
    f.latency = g > 1 ? -hop : 0;
    std::set<double> frequencies;
    for (const auto& [b, fr] : st.gathers) {
      if (g <= 1) break;
      f.bandwidth += fr * bandwidth_of(b, g);
      f.latency += fr * hop;
      if (fr > 0) frequencies.insert(fr);
    }
    f.batch_latency = g > 1 ? -hop : 0;
    for (double fr : frequencies) f.batch_latency += fr * hop;
    f.latency += static_cast<double>(st.masked) * 2.0 * hop;
    if (st.masked > 0) f.batch_latency += 2.0 * hop;
    if (sch.kind == ShardingScheme::Kind::kPartial) {
      f.bandwidth += 2 * bandwidth_of(st.seed_bytes / gd, sch.rows);
      const double cross = 2 * RingSteps(sch.rows) * o_.hop_latency_seconds;
      f.latency += cross;
      f.batch_latency += cross;
    }
    f.small = true;
    for (const Instruction* s : cl.seeds) f.small = f.small && small_seeds_.count(s) != 0;
    figures.push_back(f);
  }
  // Section 5.2: small updates in batches, as the combiner will batch their collectives: same
  // computation, scheme and gradient type, in program order, gradients within the threshold.
  std::vector<std::vector<size_t>> batches;
  {
    std::vector<size_t> small;
    for (size_t k = 0; k < figures.size(); ++k)
      if (figures[k].small) small.push_back(k);
    auto first_seed = [&](size_t k) { return p_.clusters[static_cast<size_t>(figures[k].id)].seeds.front(); };
    std::sort(small.begin(), small.end(), [&](size_t a, size_t b) {
      const Instruction *x = first_seed(a), *y = first_seed(b);
      if (x->parent() != y->parent()) return x->parent()->name() < y->parent()->name();
      return x->id() < y->id();
    });
    // Only independent updates combine (the combiner's rule): a gradient all-reduce downstream of
    // one already in the batch (the batch statistics of successive BatchNorm layers in the
    // forward pass) starts a new batch. `downstream` marks what the batch's seeds reach.
    struct Open {
      size_t batch = 0;
      double bytes = 0;
      std::vector<uint8_t> downstream;
    };
    std::map<std::string, Open> open;
    std::unordered_map<const Computation*, size_t> ids;
    for (size_t k : small) {
      const Cluster& cl = p_.clusters[static_cast<size_t>(figures[k].id)];
      const std::string key = cl.comp->name() + "|" + std::to_string(p_.layout(cl.layout).scheme) + "|" +
                              std::string(PrimitiveTypeName(cl.seeds.front()->shape().type));
      const double bytes = figures[k].st->seed_bytes;
      auto it = open.find(key);
      bool dependent = false;
      if (it != open.end())
        for (const Instruction* seed : cl.seeds) dependent = dependent || it->second.downstream[static_cast<size_t>(seed->id())];
      if (it == open.end() || dependent || it->second.bytes + bytes > static_cast<double>(o_.combine_threshold_bytes)) {
        auto [n, fresh] = ids.try_emplace(cl.comp, 0);
        if (fresh)
          for (const auto& i : cl.comp->instructions()) n->second = std::max(n->second, static_cast<size_t>(i->id() + 1));
        batches.emplace_back();
        Open o;
        o.batch = batches.size() - 1;
        o.downstream.assign(n->second, 0);
        it = open.insert_or_assign(key, std::move(o)).first;
      }
      batches[it->second.batch].push_back(k);
      it->second.bytes += bytes;
      std::vector<const Instruction*> work(cl.seeds.begin(), cl.seeds.end());
      std::vector<uint8_t>& reached = it->second.downstream;
      while (!work.empty()) {
        const Instruction* x = work.back();
        work.pop_back();
        for (const Instruction* u : x->users()) {
          uint8_t& seen = reached[static_cast<size_t>(u->id())];
          if (seen) continue;
          seen = 1;
          work.push_back(u);
        }
      }
    }
  }
  std::vector<const Instruction*> rejected;
  auto decide = [&](const Figures& f, bool sharded, double added, const std::string& reason, int64_t batch) {
    const Stats& st = *f.st;
    Cluster& cl = p_.clusters[static_cast<size_t>(f.id)];
    const Layout& l = p_.layout(cl.layout);
    const ShardingScheme& sch = p_.schemes[static_cast<size_t>(l.scheme)];
    WeightUpdateDecision& d = cl.decision;
    d = WeightUpdateDecision{};
    for (const Instruction* s : cl.seeds) d.all_reduce += (d.all_reduce.empty() ? "" : ", ") + s->name();
    d.weight = st.weight.empty() ? cl.seeds.front()->name() : st.weight;
    d.computation = cl.comp->name();
    d.format = l.format.Describe();
    d.scheme = sch.Describe();
    d.shard_of_device = sch.shard_index;
    d.shards = sch.shards;
    d.shard_dims = l.format.ShardDims();
    d.non_elementwise = st.non_elementwise;
    d.sharded_state = st.state;
    std::sort(d.sharded_state.begin(), d.sharded_state.end());
    d.sharded_state.erase(std::unique(d.sharded_state.begin(), d.sharded_state.end()), d.sharded_state.end());
    d.update_bytes = static_cast<int64_t>(st.update_bytes);
    d.saved_seconds = f.saved;
    d.added_seconds = added;
    d.sharded = sharded;
    d.reason = reason;
    d.batch = batch;
    if (!sharded)
      for (const Instruction* s : cl.seeds) {
        rejected.push_back(s);
        reject_decision_[s] = d;
      }
  };
  for (const Figures& f : figures) {
    if (f.small) continue;
    const double added = f.bandwidth + f.latency;
    const bool sharded = o_.force || f.saved > added;
    const std::string text = "update " + Bytes(f.st->update_bytes) + " saves " + Micros(f.saved) + ", communication adds " +
                             Micros(std::max(0.0, added)) + " (section 3.2)";
    decide(f, sharded, added, sharded ? (o_.force ? "sharded (forced): " : "sharded: ") + text : "kept replicated: " + text, 0);
  }
  for (const std::vector<size_t>& batch : batches) {
    double saved = 0, bandwidth = 0, latency = 0, seed_bytes = 0, update_bytes = 0;
    for (size_t k : batch) {
      saved += figures[k].saved;
      bandwidth += figures[k].bandwidth;
      latency = std::max(latency, figures[k].batch_latency);
      seed_bytes += figures[k].st->seed_bytes;
      update_bytes += figures[k].st->update_bytes;
    }
    const Cluster& first = p_.clusters[static_cast<size_t>(figures[batch.front()].id)];
    const ShardingScheme& sch = p_.scheme_of(first.layout);
    const double shard = seed_bytes / static_cast<double>(sch.shards);
    const double added = bandwidth + latency;
    const std::string n = std::to_string(batch.size());
    std::string reason;
    bool sharded = false;
    if (shard < static_cast<double>(o_.min_shard_bytes)) {
      reason = "kept replicated: latency-bound even batched: " + n + " small updates, a combined shard of " + Bytes(shard) +
               " (< " + Bytes(static_cast<double>(o_.min_shard_bytes)) + ") (section 5.2)";
    } else {
      sharded = saved > added;
      reason = std::string(sharded ? "sharded" : "kept replicated") + " with a batch of " + n + " small updates (section 5.2): " +
               "together update " + Bytes(update_bytes) + " saves " + Micros(saved) +
               ", their combined communication adds " + Micros(std::max(0.0, added)) + " (section 3.2)";
    }
    for (size_t k : batch) {
      const Figures& f = figures[k];
      decide(f, sharded, f.bandwidth + latency / static_cast<double>(batch.size()), reason, static_cast<int64_t>(batch.size()));
    }
  }
  return rejected;
}

Status Planner::Run() {
  CollectComputations();
  for (const auto& c : p_.module->computations())
    for (const auto& inst : c->instructions())
      if (inst->opcode() == Opcode::kWhile && inst->while_body()) caller_[inst->while_body()] = inst.get();
  for (const auto& [body, w] : caller_) {
    const Instruction* init = w->operand(0);
    if (init->opcode() != Opcode::kTuple) continue;
    std::vector<std::string> names;
    for (const Instruction* e : init->operands()) names.push_back(e->name());
    p_.state_names[body] = names;
    p_.state_names[w->while_condition()] = names;
  }
  for (int iter = 0; iter < 16; ++iter) {
    p_.clusters.clear();
    parent_.clear();
    p_.io.clear();
    p_.call_shards.clear();
    p_.shard_tuple_slots.clear();
    pinned_.clear();
    pinned_reduce_.clear();
    pinned_seed_.clear();
    seed_cluster_.clear();
    p_.split = false;
    p_.seed_source.clear();
    for (const Computation* c : order_) {
      PlanComputation(c);
      for (int k = 0; k < 4; ++k) {
        const bool reduces = PullReduces(c);
        const bool elementwise = PullElementwise(c);
        if (!reduces && !elementwise) break;
        PlanComputation(c);
      }
    }
    // Canonical cluster ids, seeds gathered in their root.
    for (auto& [comp, cp] : p_.comps)
      for (auto& [inst, v] : cp.values)
        if (v.cluster >= 0) v.cluster = Find(v.cluster);
    std::vector<std::vector<const Instruction*>> seeds(p_.clusters.size());
    for (auto& [comp, cp] : p_.comps)
      for (auto& [inst, v] : cp.values)
        if (v.kind == ValueKind::kSeed) seeds[static_cast<size_t>(v.cluster)].push_back(p_.seed_source.at(inst));
    for (size_t k = 0; k < p_.clusters.size(); ++k) {
      std::sort(seeds[k].begin(), seeds[k].end(), [](const Instruction* a, const Instruction* b) { return a->id() < b->id(); });
      p_.clusters[k].seeds = seeds[k];
    }
    Place();
    std::vector<const Instruction*> rejected = Evaluate();
    if (rejected.empty()) break;
    rejected_.insert(rejected.begin(), rejected.end());
  }
  // Records of the all-reduces left alone.
  for (const auto& [seed, why] : not_candidate_reason_) {
    Cluster cl;
    cl.seeds = {seed};
    cl.comp = seed->parent();
    cl.rejected = true;
    cl.decision.all_reduce = seed->name();
    cl.decision.weight = seed->name();
    cl.decision.computation = seed->parent()->name();
    cl.decision.reason = why;
    p_.clusters.push_back(std::move(cl));
  }
  for (const Instruction* seed : rejected_) {
    Cluster cl;
    cl.seeds = {seed};
    cl.comp = seed->parent();
    cl.rejected = true;
    cl.decision = reject_decision_[seed];
    cl.decision.all_reduce = seed->name();
    p_.clusters.push_back(std::move(cl));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Plan>> MakePlan(const Module& module, const WeightUpdateShardingOptions& options) {
  if (!module.entry()) return Error("module has no entry computation");
  auto plan = std::make_unique<Plan>();
  plan->module = &module;
  plan->options = options;
  const int64_t devices = std::max<int64_t>(1, module.num_replicas) * std::max<int64_t>(1, module.num_partitions);
  int64_t rows = 1, cols = devices;
  if (options.replica_mesh.size() == 1) {
    cols = options.replica_mesh[0];
  } else if (options.replica_mesh.size() == 2) {
    rows = options.replica_mesh[0];
    cols = options.replica_mesh[1];
  } else if (options.replica_mesh.size() > 2) {
    return Error("the replica mesh has at most two dims (rows x cols), found " + DimsText(options.replica_mesh));
  }
  if (rows < 1 || cols < 1 || rows * cols != devices)
    return Error("the replica mesh " + std::to_string(rows) + "x" + std::to_string(cols) + " does not cover the program's " +
                 std::to_string(devices) + " devices (num_replicas x num_partitions)");
  if (options.min_shard_bytes < 0 || !(options.hbm_bytes_per_second > 0) || !(options.link_bytes_per_second > 0) ||
      options.hop_latency_seconds < 0 || options.tile_rows < 0 || options.tile_cols < 0 || options.combine_threshold_bytes < 0)
    return Error("weight-update sharding options: bandwidths must be positive, sizes and latencies non-negative");
  const bool mesh2d = rows > 1 && cols > 1;
  plan->schemes.push_back(options.two_phase && mesh2d ? TwoPhaseScheme(rows, cols) : OnePhaseScheme(devices));
  if (options.partial_sharding && mesh2d) plan->schemes.push_back(PartialScheme(rows, cols));
  // Annotated parameters: replicated shardings, and the names given.
  const Computation* entry = module.entry();
  for (const Instruction* p : entry->parameters()) {
    bool r = false;
    if (p) {
      r = p->has_sharding() && p->sharding()->IsReplicated();
      r = r || std::find(options.redundant_parameters.begin(), options.redundant_parameters.end(), p->name()) !=
                   options.redundant_parameters.end();
    }
    plan->redundant_entry_parameters.push_back(r);
  }
  for (const std::string& n : options.redundant_parameters) {
    bool found = false;
    for (const Instruction* p : entry->parameters()) found = found || (p && p->name() == n);
    if (!found) return Error("redundant parameter '" + n + "' is not a parameter of the entry computation " + entry->name());
  }
  auto red = RedundancyAnalysis::Run(module, plan->redundant_entry_parameters);
  if (!red.ok()) return red.error();
  plan->redundancy = std::make_unique<RedundancyAnalysis>(std::move(red).value());
  Planner planner(*plan);
  if (Status s = planner.Run(); !s.ok()) return s.error();
  return plan;
}

}  // namespace shardscope::wus
