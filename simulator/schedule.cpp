#include "simulator/schedule.h"
#include "simulator/rematerialize.h"

#include "simulator/buffer_layout.h"

#include "core/collectives/participants.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "simulator/compute_cost.h"
#include "simulator/memory_model.h"

namespace shardscope::sim {

std::string_view ScheduleKindName(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kCollectivesEarly: return "collectives-early";
    case ScheduleKind::kMemoryList: return "memory-list";
    case ScheduleKind::kMemoryLimit: return "memory-limit";
    case ScheduleKind::kProgramOrder: break;
  }
  return "program-order";
}

Result<ScheduleKind> ScheduleKindFromName(std::string_view name) {
  std::string n;
  for (char c : name) n += (c == '_' || c == ' ') ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "program-order" || n == "program" || n == "in-order") return ScheduleKind::kProgramOrder;
  if (n == "collectives-early" || n == "list" || n == "early" || n == "list-scheduler") return ScheduleKind::kCollectivesEarly;
  if (n == "memory-list" || n == "list-memory") return ScheduleKind::kMemoryList;
  if (n == "memory-limit" || n == "memory" || n == "default") return ScheduleKind::kMemoryLimit;
  return Error("unknown schedule '" + std::string(name) +
               "' (use memory-limit, program-order, memory-list or collectives-early)");
}

namespace {


// ---- instruction roles -------------------------------------------------------------------------------

enum class Role : uint8_t {
  kParameter,
  kConstant,
  kAlias,       // no memory, no time: value of its operands
  kInline,      // broadcast / iota / partition-id fused into every consumer
  kCompute,
  kCollective,  // a collective (or the -start half of an async pair)
  kWhile,
  kCall,
  kConditional,
};

bool IsGenericNamed(const Instruction& i, std::string_view text) {
  return i.opcode() == Opcode::kGeneric && i.opcode_text() == text;
}

bool IsAnnotationCustomCall(const Instruction& i) {
  if (i.opcode() != Opcode::kCustomCall) return false;
  const std::string& t = i.custom_call_target;
  return t == "Sharding" || t == "SPMDFullToShardShape" || t == "SPMDShardToFullShape" || t == "ShardBarrierFrom" ||
         t == "ShardBarrierTo" || t == "X64Combine";
}

bool IsCollectiveOp(Opcode op) {
  switch (op) {
    case Opcode::kAllGather: case Opcode::kAllGatherStart: case Opcode::kAllReduce: case Opcode::kAllReduceStart:
    case Opcode::kReduceScatter: case Opcode::kAllToAll: case Opcode::kCollectivePermute:
    case Opcode::kCollectivePermuteStart:
      return true;
    default:
      return false;
  }
}

bool IsAsyncDone(const Instruction& i) {
  const Opcode op = i.opcode();
  if (op == Opcode::kGeneric) return AsyncPartOf(i) == AsyncPart::kDone;  // reduce-scatter-done, async-done, ...
  return op == Opcode::kAllGatherDone || op == Opcode::kAllReduceDone || op == Opcode::kCollectivePermuteDone ||
         op == Opcode::kCopyDone;
}

Role BaseRole(const Instruction& i) {
  switch (i.opcode()) {
    case Opcode::kParameter: return Role::kParameter;
    case Opcode::kConstant: return Role::kConstant;
    case Opcode::kTuple: case Opcode::kGetTupleElement: case Opcode::kBitcast: case Opcode::kReshape:
    case Opcode::kOptimizationBarrier: case Opcode::kDomain: case Opcode::kAfterAll:
      return Role::kAlias;
    case Opcode::kWhile: return Role::kWhile;
    case Opcode::kCall: return Role::kCall;
    case Opcode::kConditional: return Role::kConditional;
    default: break;
  }
  if (IsAsyncDone(i)) return Role::kAlias;
  if (IsCollectiveOp(i.opcode()) || (i.opcode() == Opcode::kGeneric && CollectiveOpcodeOf(i))) return Role::kCollective;
  if (IsAnnotationCustomCall(i) || IsGenericNamed(i, "add-dependency")) return Role::kAlias;
  return Role::kCompute;
}

bool IsInlineCandidate(Opcode op) {
  return op == Opcode::kBroadcast || op == Opcode::kIota || op == Opcode::kPartitionId || op == Opcode::kReplicaId;
}

bool IsHeavy(const Instruction& i) {
  return i.opcode() == Opcode::kDot || i.opcode() == Opcode::kConvolution || IsGenericNamed(i, "fusion");
}

// Elementwise ops cheap enough that XLA's instruction fusion duplicates them into every consumer
// (InstructionFusion::IsExpensive: transcendental functions are not duplicated; nor are copies,
// which exist to change a layout, or maps, which call a computation).
bool IsCheapElementwise(Opcode op) {
  if (!IsElementwise(op)) return false;
  switch (op) {
    case Opcode::kAtan2: case Opcode::kCbrt: case Opcode::kCos: case Opcode::kErf: case Opcode::kExp:
    case Opcode::kExpm1: case Opcode::kLog: case Opcode::kLog1p: case Opcode::kLogistic: case Opcode::kPower:
    case Opcode::kRemainder: case Opcode::kRsqrt: case Opcode::kSin: case Opcode::kSqrt: case Opcode::kTan:
    case Opcode::kTanh: case Opcode::kCopy: case Opcode::kMap:
      return false;
    default:
      return true;
  }
}

bool IsSliceLike(Opcode op) { return op == Opcode::kSlice || op == Opcode::kDynamicSlice || op == Opcode::kGather; }

// A slice, dynamic-slice, or gather of a single slice (its indices, without the index vector
// dimension, hold one start: XLA's GatherExpander rewrites such a gather into a dynamic-slice):
// one contiguous window of its operand, read in place by whatever consumes it.
bool IsSingleWindow(const Instruction& i) {
  if (i.opcode() == Opcode::kSlice || i.opcode() == Opcode::kDynamicSlice) return i.shape().IsArray();
  if (i.opcode() != Opcode::kGather || i.operand_count() != 2 || !i.shape().IsArray()) return false;
  const Shape& idx = i.operand(1)->shape();
  if (!idx.IsArray()) return false;
  int64_t starts = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(idx.dims.size()); ++d)
    if (d != i.gather_dims.index_vector_dim) starts *= idx.dims[static_cast<size_t>(d)];
  return starts == 1;
}

// An update in place of operand 0: dynamic-update-slice, and a scatter of one operand (XLA runs both
// in place on a buffer whose last use they are, touching only the updated region). Returns the
// operand holding the update (nullptr for other ops).
const Instruction* InPlaceUpdate(const Instruction& m) {
  if (m.opcode() == Opcode::kDynamicUpdateSlice && m.operand_count() > 1) return m.operand(1);
  if (m.opcode() == Opcode::kScatter && m.operand_count() == 3 && m.shape().IsArray()) return m.operand(2);
  return nullptr;
}

// Ops a loop fusion holds beside elementwise ones: data movement computed per output element
// (slices read only what they keep), broadcasts and iotas that were not inlined.
bool IsLoopFusible(Opcode op) {
  return IsElementwise(op) || op == Opcode::kSlice || op == Opcode::kDynamicSlice || op == Opcode::kTranspose ||
         op == Opcode::kBroadcast || op == Opcode::kIota;
}

int64_t Elements(const Instruction& i) { return i.shape().IsArray() ? i.shape().ElementCount() : -1; }

int64_t LeafCount(const Shape& s) {
  if (!s.IsTuple()) return 1;
  int64_t n = 0;
  for (const auto& e : s.tuple) n += LeafCount(e);
  return n;
}

void CollectLeaves(const Shape& s, std::vector<const Shape*>* out) {
  if (!s.IsTuple()) {
    out->push_back(&s);
    return;
  }
  for (const auto& e : s.tuple) CollectLeaves(e, out);
}

int64_t LeafBytes(const Shape& s) { return s.IsArray() ? s.ByteSize() : 0; }


// ---- FLOPs ------------------------------------------------------------------------------------------

double InstructionFlops(const Instruction& i, std::unordered_map<const Computation*, double>* memo);

double ComputationFlops(const Computation* c, std::unordered_map<const Computation*, double>* memo) {
  if (!c) return 0;
  auto it = memo->find(c);
  if (it != memo->end()) return it->second;
  (*memo)[c] = 0;  // recursion guard
  double f = 0;
  for (const auto& inst : c->instructions()) f += InstructionFlops(*inst, memo);
  (*memo)[c] = f;
  return f;
}

double InstructionFlops(const Instruction& i, std::unordered_map<const Computation*, double>* memo) {
  if (i.opcode() == Opcode::kDot || i.opcode() == Opcode::kConvolution) {
    auto f = CountFlops(i);
    return f.ok() ? *f : 0.0;
  }
  if (IsGenericNamed(i, "fusion") && !i.called_computations().empty()) {
    return ComputationFlops(i.called_computations()[0], memo);
  }
  return 0;
}

// ---- trip counts ------------------------------------------------------------------------------------

std::optional<int64_t> KnownTripCountFromConfig(const std::string& config) {
  auto p = config.find("known_trip_count");
  if (p == std::string::npos) return std::nullopt;
  auto n = config.find("\"n\"", p);
  if (n == std::string::npos) return std::nullopt;
  size_t i = n + 3;
  while (i < config.size() && (config[i] == ':' || config[i] == ' ' || config[i] == '"')) ++i;
  int64_t v = 0;
  bool any = false;
  while (i < config.size() && std::isdigit(static_cast<unsigned char>(config[i]))) {
    v = v * 10 + (config[i] - '0');
    any = true;
    if (v > (int64_t{1} << 40)) return std::nullopt;
    ++i;
  }
  if (!any) return std::nullopt;
  return v;
}

const Instruction* SkipConverts(const Instruction* i) {
  while (i && (i->opcode() == Opcode::kConvert || i->opcode() == Opcode::kReshape || i->opcode() == Opcode::kBitcast) &&
         i->operand_count() == 1) {
    i = i->operand(0);
  }
  return i;
}

std::optional<double> ScalarConstant(const Instruction* i) {
  i = SkipConverts(i);
  if (i && i->opcode() == Opcode::kBroadcast && i->operand_count() == 1) i = SkipConverts(i->operand(0));
  if (!i || i->opcode() != Opcode::kConstant || i->literal.values.size() != 1) return std::nullopt;
  return i->literal.values[0];
}

// tuple index k when `i` is get-tuple-element(parameter(0), k)
std::optional<int64_t> CounterIndex(const Instruction* i) {
  i = SkipConverts(i);
  if (!i || i->opcode() != Opcode::kGetTupleElement || i->operand_count() != 1) return std::nullopt;
  if (i->operand(0)->opcode() != Opcode::kParameter) return std::nullopt;
  return i->tuple_index;
}

}  // namespace

std::optional<int64_t> WhileTripCount(const Instruction& w) {
  if (w.opcode() != Opcode::kWhile) return std::nullopt;
  if (auto n = KnownTripCountFromConfig(w.backend_config)) return n;
  const Computation* cond = w.while_condition();
  const Computation* body = w.while_body();
  if (!cond || !body || !cond->root()) return std::nullopt;
  const Instruction* root = cond->root();
  if (root->opcode() != Opcode::kCompare || root->operand_count() != 2) return std::nullopt;
  ComparisonDirection dir = root->comparison;
  std::optional<int64_t> k = CounterIndex(root->operand(0));
  std::optional<double> limit = ScalarConstant(root->operand(1));
  if (!k || !limit) {
    k = CounterIndex(root->operand(1));
    limit = ScalarConstant(root->operand(0));
    if (!k || !limit) return std::nullopt;
    switch (dir) {  // constant OP counter  ->  counter OP' constant
      case ComparisonDirection::kLt: dir = ComparisonDirection::kGt; break;
      case ComparisonDirection::kLe: dir = ComparisonDirection::kGe; break;
      case ComparisonDirection::kGt: dir = ComparisonDirection::kLt; break;
      case ComparisonDirection::kGe: dir = ComparisonDirection::kLe; break;
      default: break;
    }
  }
  // Initial value: the while operand's tuple element k when it is a constant (else 0).
  double init = 0;
  if (w.operand_count() == 1 && w.operand(0)->opcode() == Opcode::kTuple && *k >= 0 &&
      *k < w.operand(0)->operand_count()) {
    if (auto c = ScalarConstant(w.operand(0)->operand(*k))) init = *c;
  }
  // Step: body root tuple element k = add(counter, constant) / subtract(counter, constant) (else 1).
  double step = 1;
  const Instruction* broot = body->root();
  if (broot && broot->opcode() == Opcode::kTuple && *k >= 0 && *k < broot->operand_count()) {
    const Instruction* upd = SkipConverts(broot->operand(*k));
    if (upd && (upd->opcode() == Opcode::kAdd || upd->opcode() == Opcode::kSubtract) && upd->operand_count() == 2) {
      std::optional<double> s;
      if (CounterIndex(upd->operand(0)) == k) s = ScalarConstant(upd->operand(1));
      else if (upd->opcode() == Opcode::kAdd && CounterIndex(upd->operand(1)) == k) s = ScalarConstant(upd->operand(0));
      if (s) step = upd->opcode() == Opcode::kSubtract ? -*s : *s;
    }
  }
  if (step == 0) return std::nullopt;
  const double c = *limit;
  double n = 0;
  bool counts = true;  // false: the counter never reaches the limit this way
  switch (dir) {
    case ComparisonDirection::kLt: counts = step > 0; n = std::ceil((c - init) / step); break;
    case ComparisonDirection::kLe: counts = step > 0; n = std::floor((c - init) / step) + 1; break;
    case ComparisonDirection::kGt: counts = step < 0; n = std::ceil((init - c) / -step); break;
    case ComparisonDirection::kGe: counts = step < 0; n = std::floor((init - c) / -step) + 1; break;
    case ComparisonDirection::kNe: {
      n = (c - init) / step;
      counts = n >= 0 && n == std::floor(n);
      break;
    }
    case ComparisonDirection::kEq: return std::nullopt;
  }
  if (!counts || !std::isfinite(n) || n > 1e12) return std::nullopt;
  return static_cast<int64_t>(std::max(0.0, n));
}

double CountModuleFlops(const Module& module) {
  std::unordered_map<const Computation*, double> memo;
  // Per computation: its own flops plus callees (while bodies x trip count).
  std::unordered_map<const Computation*, double> total;
  for (Computation* c : module.MakeComputationPostOrder()) {
    double f = 0;
    for (const auto& inst : c->instructions()) {
      const Instruction& i = *inst;
      f += InstructionFlops(i, &memo);
      if (i.opcode() == Opcode::kWhile) {
        const int64_t trips = WhileTripCount(i).value_or(1);
        f += static_cast<double>(trips) * total[i.while_body()] + static_cast<double>(trips + 1) * total[i.while_condition()];
      } else if (i.opcode() == Opcode::kCall) {
        f += total[i.to_apply()];
      } else if (i.opcode() == Opcode::kConditional && !i.called_computations().empty()) {
        f += total[i.called_computations()[0]];
      }
    }
    total[c] = f;
  }
  return module.entry() ? total[module.entry()] : 0.0;
}


namespace {

// ---- per-computation plan: order, roles, fusion groups -------------------------------------------------

struct Group {
  std::vector<const Instruction*> members;  // in position order once the plan is made
  int first_pos = 0;
  bool heavy = false;
  bool has_reduce = false;
  // Every member an op a loop fusion holds (elementwise, slice, dynamic-slice): the group may be
  // merged into an elementwise consumer's group of the same element count (multi-output fusion).
  bool loop = true;
  int64_t max_elements = 0;  // the largest member's element count
  const Instruction* main = nullptr;
};

struct Step {
  enum class Kind : uint8_t { kInstruction, kGroup } kind = Kind::kInstruction;
  int pos = 0;
  const Instruction* inst = nullptr;
  int group = -1;
};

struct CompPlan {
  std::vector<const Instruction*> order;
  std::unordered_map<const Instruction*, int> pos;
  std::unordered_map<const Instruction*, Role> role;
  std::unordered_map<const Instruction*, int> group_of;
  std::vector<Group> groups;
  std::vector<Step> steps;
  // group members whose value is read outside their group (or is the root)
  std::unordered_set<const Instruction*> group_outputs;
  // Inlined windows, and inlined values, bitcasts and reshapes that read one: what a group reads
  // through them is capped at the window's bytes (Expander::WindowedSources).
  std::unordered_set<const Instruction*> windowed;
};

std::vector<const Instruction*> ListSchedule(const Computation& comp) {
  std::vector<const Instruction*> order0;
  std::unordered_map<const Instruction*, int> pos;
  for (const auto& i : comp.instructions()) {
    pos[i.get()] = static_cast<int>(order0.size());
    order0.push_back(i.get());
  }
  const int n = static_cast<int>(order0.size());
  constexpr int kInf = std::numeric_limits<int>::max();
  std::vector<int> rank(static_cast<size_t>(n), kInf);
  for (int p = n - 1; p >= 0; --p) {
    const Instruction* i = order0[static_cast<size_t>(p)];
    int r = IsCollectiveOp(i->opcode()) ? p : kInf;
    for (const Instruction* u : i->users()) {
      auto it = pos.find(u);
      if (it != pos.end() && it->second > p) r = std::min(r, rank[static_cast<size_t>(it->second)]);
    }
    rank[static_cast<size_t>(p)] = r;
  }
  std::vector<int> indeg(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> succ(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    const Instruction* i = order0[static_cast<size_t>(p)];
    std::set<int> preds;
    for (const Instruction* o : i->operands()) {
      auto it = pos.find(o);
      if (it != pos.end()) preds.insert(it->second);
    }
    for (const Instruction* o : i->control_predecessors) {
      auto it = pos.find(o);
      if (it != pos.end()) preds.insert(it->second);
    }
    for (int q : preds) {
      succ[static_cast<size_t>(q)].push_back(p);
      ++indeg[static_cast<size_t>(p)];
    }
  }
  using Key = std::tuple<int, int, int>;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  auto push = [&](int p) {
    const Instruction* i = order0[static_cast<size_t>(p)];
    ready.emplace(IsCollectiveOp(i->opcode()) ? 0 : 1, rank[static_cast<size_t>(p)], p);
  };
  for (int p = 0; p < n; ++p)
    if (indeg[static_cast<size_t>(p)] == 0) push(p);
  std::vector<const Instruction*> out;
  while (!ready.empty()) {
    const int p = std::get<2>(ready.top());
    ready.pop();
    out.push_back(order0[static_cast<size_t>(p)]);
    for (int s : succ[static_cast<size_t>(p)])
      if (--indeg[static_cast<size_t>(s)] == 0) push(s);
  }
  if (static_cast<int>(out.size()) != n) return order0;  // a cycle would be a malformed module: keep order
  return out;
}

// True when the value of `i` is read by something outside group `g` (through inlined ops and
// aliases), or is the computation's root.
bool UsedOutside(const CompPlan& plan, const Computation& comp, const Instruction* i, int g, int depth) {
  if (i == comp.root() || depth > 32) return true;
  for (const Instruction* u : i->users()) {
    auto gi = plan.group_of.find(u);
    if (gi != plan.group_of.end() && gi->second == g) continue;
    auto r = plan.role.find(u);
    if (r != plan.role.end() && (r->second == Role::kInline || r->second == Role::kAlias)) {
      if (UsedOutside(plan, comp, u, g, depth + 1)) return true;
      continue;
    }
    return true;
  }
  return false;
}

CompPlan MakePlan(const Computation& comp, const ExecProgramOptions& opt) {
  CompPlan plan;
  plan.order = opt.schedule == ScheduleKind::kCollectivesEarly ? ListSchedule(comp) : [&] {
    std::vector<const Instruction*> o;
    for (const auto& i : comp.instructions()) o.push_back(i.get());
    return o;
  }();
  // Every map below gets one entry per instruction (or per compute instruction): sized once
  // instead of rehashed as they grow.
  const size_t count = plan.order.size();
  plan.pos.reserve(count);
  plan.role.reserve(count);
  plan.group_of.reserve(count);
  for (size_t p = 0; p < plan.order.size(); ++p) plan.pos[plan.order[p]] = static_cast<int>(p);
  const bool fuse = opt.fuse_elementwise;
  for (const Instruction* i : plan.order) plan.role[i] = BaseRole(*i);
  // Inline broadcasts/iotas whose users are all compute ops of this computation.
  if (fuse) {
    // Reverse order so that a broadcast feeding an inlined broadcast sees its final role.
    for (auto it = plan.order.rbegin(); it != plan.order.rend(); ++it) {
      const Instruction* i = *it;
      if (plan.role[i] != Role::kCompute || !IsInlineCandidate(i->opcode()) || i == comp.root()) continue;
      if (i->users().empty()) continue;
      bool all_compute = true;
      for (const Instruction* u : i->users()) {
        auto r = plan.role.find(u);
        if (r == plan.role.end() || (r->second != Role::kCompute && r->second != Role::kInline)) all_compute = false;
      }
      if (all_compute) plan.role[i] = Role::kInline;
    }
    // Producer fusion into dots: a cheap elementwise value read only by dots and convolutions (or
    // by other such values) is computed inside each reader, as XLA's TPU fusion puts elementwise
    // producers into a convolution fusion's operands and duplicates a cheap producer into every
    // consumer; the value is then never materialised. Only when it reads no more memory than it
    // writes (XLA's rule for duplicating: operands no larger than the output; what it reads
    // through a broadcast or iota, and constants, do not count): relu(h) kept for the backward pass
    // beside h, or LayerNorm's scaled output beside its normalised input, are one array, not two.
    if (opt.fuse_producers_into_dots) {
      std::unordered_set<const Instruction*> duplicated;
      // Bytes the consumers read instead of the value: distinct non-inlined sources.
      auto source_bytes = [&](const Instruction* i) {
        std::vector<const Instruction*> work(i->operands().begin(), i->operands().end()), seen;
        int64_t bytes = 0;
        while (!work.empty()) {
          const Instruction* o = work.back();
          work.pop_back();
          if (std::find(seen.begin(), seen.end(), o) != seen.end()) continue;
          seen.push_back(o);
          if (duplicated.count(o)) {
            if (IsSingleWindow(*o)) bytes += o->shape().ByteSize();  // reads its window, not the operand
            else work.insert(work.end(), o->operands().begin(), o->operands().end());
            continue;
          }
          auto r = plan.role.find(o);
          if (r != plan.role.end() && r->second == Role::kInline) continue;  // a broadcast, iota, ...
          if (o->opcode() == Opcode::kConstant || !o->shape().IsArray()) continue;
          bytes += o->shape().ByteSize();
        }
        return bytes;
      };
      // Every reader of `i` is a dot, a convolution or an already duplicated value, also through
      // bitcasts and reshapes (which XLA's fusion looks through).
      std::function<bool(const Instruction*, int)> read_only_by_dots = [&](const Instruction* i, int depth) {
        if (i->users().empty() || i == comp.root() || depth > 8) return false;
        for (const Instruction* u : i->users()) {
          auto r = plan.role.find(u);
          if (r == plan.role.end()) return false;
          if (r->second == Role::kCompute) {
            if (!IsHeavy(*u)) return false;
          } else if (r->second == Role::kAlias && (u->opcode() == Opcode::kBitcast || u->opcode() == Opcode::kReshape)) {
            if (!read_only_by_dots(u, depth + 1)) return false;
          } else if (!duplicated.count(u)) {
            return false;
          }
        }
        return true;
      };
      for (auto it = plan.order.rbegin(); it != plan.order.rend(); ++it) {
        const Instruction* i = *it;
        if (plan.role[i] != Role::kCompute || i == comp.root() || !i->shape().IsArray()) continue;
        // A window of an array (a weight's layer taken from the stacked weights in a loop): the
        // dot reads the window where it lies, as XLA's TPU fusion puts a slice or dynamic-slice
        // producer into the convolution fusion's operand; it reads no more than it would write.
        const bool window = IsSingleWindow(*i);
        if (!window && !IsCheapElementwise(i->opcode())) continue;
        if (!read_only_by_dots(i, 0)) continue;
        // Decided before its operands (reverse order): count the sources as they are now, with
        // this value's own elementwise operands not yet duplicated (their operands would only be
        // smaller when they are).
        if (!window && source_bytes(i) > i->shape().ByteSize()) continue;
        duplicated.insert(i);
        plan.role[i] = Role::kInline;
      }
      for (const Instruction* i : plan.order) {
        const Role r = plan.role[i];
        bool w = false;
        if (r == Role::kInline) {
          w = IsSingleWindow(*i);
          for (const Instruction* o : i->operands()) w = w || plan.windowed.count(o);
        } else if (r == Role::kAlias && (i->opcode() == Opcode::kBitcast || i->opcode() == Opcode::kReshape) &&
                   i->operand_count() >= 1) {
          w = plan.windowed.count(i->operand(0)) > 0;
        }
        if (w) plan.windowed.insert(i);
      }
    }
  }
  // Effective sources: the instructions that produce the memory an instruction reads — through
  // bitcast/reshape-like aliases and inlined ops, and through get-tuple-element of a tuple to the
  // element it selects. Other aliases (tuples, opt-barrier, async -done, ...) are opaque: they are
  // their own source, which no fusion group contains.
  std::unordered_map<const Instruction*, std::vector<const Instruction*>> sources;
  sources.reserve(count);
  auto src_of = [&](const Instruction* i) -> const std::vector<const Instruction*>& {
    return sources[i];
  };
  for (const Instruction* i : plan.order) {
    const Role r = plan.role[i];
    std::vector<const Instruction*> s;
    const Opcode op = i->opcode();
    const bool transparent = r == Role::kInline ||
                             (r == Role::kAlias && i->operand_count() >= 1 &&
                              (op == Opcode::kBitcast || op == Opcode::kReshape || op == Opcode::kCustomCall ||
                               op == Opcode::kGeneric || op == Opcode::kDomain));
    if (transparent) {
      const int64_t n = r == Role::kInline ? i->operand_count() : 1;
      for (int64_t k = 0; k < n; ++k) {
        auto it = sources.find(i->operand(k));
        if (it != sources.end()) s.insert(s.end(), it->second.begin(), it->second.end());
      }
      std::sort(s.begin(), s.end());
      s.erase(std::unique(s.begin(), s.end()), s.end());
    } else if (op == Opcode::kGetTupleElement && i->operand_count() == 1 && i->operand(0)->opcode() == Opcode::kTuple &&
               i->tuple_index >= 0 && i->tuple_index < i->operand(0)->operand_count()) {
      auto it = sources.find(i->operand(0)->operand(i->tuple_index));
      if (it != sources.end()) s = it->second;
    } else {
      s.push_back(i);
    }
    sources[i] = std::move(s);
  }
  // Constants and parameters exist before any step runs (their steps go first, below).
  auto exists_first = [&](const Instruction* s) {
    const Role r = plan.role[s];
    return r == Role::kConstant || r == Role::kParameter;
  };
  // `sole_reader`: `i` joins through a value only it reads (XLA's output fusion: the group then
  // writes i's result instead of that value, nothing is computed earlier than it would be). Then
  // where the text declares a constant or parameter `i` reads does not keep it out of the group:
  // `scores * broadcast(c)` with `c` written after the dot is still the dot's output fusion.
  // Otherwise (a consumer joining the group of a value others read too, which moves it to the
  // group's place) every other operand must be written before the group's first member.
  auto joinable = [&](int g, const Instruction* i, bool sole_reader) {
    const Group& G = plan.groups[static_cast<size_t>(g)];
    for (const Instruction* o : i->operands()) {
      for (const Instruction* s : src_of(o)) {
        auto gi = plan.group_of.find(s);
        if (gi != plan.group_of.end() && gi->second == g) continue;
        if (sole_reader && exists_first(s)) continue;
        if (plan.pos[s] >= G.first_pos) return false;
      }
    }
    return true;
  };
  auto new_group = [&](const Instruction* i) {
    Group g;
    g.members.push_back(i);
    g.first_pos = plan.pos[i];
    g.heavy = IsHeavy(*i);
    g.has_reduce = i->opcode() == Opcode::kReduce;
    g.loop = IsLoopFusible(i->opcode());
    g.max_elements = Elements(*i);
    plan.group_of[i] = static_cast<int>(plan.groups.size());
    plan.groups.push_back(std::move(g));
  };
  auto add_member = [&](int target, const Instruction* i) {
    Group& G = plan.groups[static_cast<size_t>(target)];
    G.members.push_back(i);
    G.has_reduce = G.has_reduce || i->opcode() == Opcode::kReduce;
    G.loop = G.loop && IsLoopFusible(i->opcode());
    G.max_elements = std::max(G.max_elements, Elements(*i));
    plan.group_of[i] = target;
  };
  // Moves every member of group `from` into group `into` (`from` is left empty).
  auto merge_groups = [&](int into, int from) {
    Group& F = plan.groups[static_cast<size_t>(from)];
    Group& T = plan.groups[static_cast<size_t>(into)];
    for (const Instruction* m : F.members) plan.group_of[m] = into;
    T.members.insert(T.members.end(), F.members.begin(), F.members.end());
    T.first_pos = std::min(T.first_pos, F.first_pos);
    T.heavy = T.heavy || F.heavy;
    T.has_reduce = T.has_reduce || F.has_reduce;
    T.loop = T.loop && F.loop;
    T.max_elements = std::max(T.max_elements, F.max_elements);
    F.members.clear();
  };
  for (const Instruction* i : plan.order) {
    if (plan.role[i] != Role::kCompute) continue;
    int target = -1;
    if (fuse && IsElementwise(i->opcode())) {
      for (const Instruction* o : i->operands()) {
        for (const Instruction* s : src_of(o)) {
          auto gi = plan.group_of.find(s);
          if (gi == plan.group_of.end()) continue;
          if (joinable(gi->second, i, o == s && s->users().size() == 1)) {
            target = gi->second;
            break;
          }
        }
        if (target >= 0) break;
      }
    } else if (fuse && i->opcode() == Opcode::kReduce && i->operand_count() >= 1) {
      for (const Instruction* s : src_of(i->operand(0))) {
        auto gi = plan.group_of.find(s);
        if (gi == plan.group_of.end()) continue;
        const Group& G = plan.groups[static_cast<size_t>(gi->second)];
        if (!G.heavy && !G.has_reduce && joinable(gi->second, i, i->operand(0) == s && s->users().size() == 1)) {
          target = gi->second;
          break;
        }
      }
    }
    if (target < 0) {
      new_group(i);
    } else {
      add_member(target, i);
    }
  }
  // Steps: groups (at their first member) and the other instructions in position order, a
  // topological order of the groups as units. Aliases and inlined ops are steps too: resolving
  // their values in order keeps alias chains from nesting deeply.
  std::vector<Step> nodes;
  std::unordered_map<const Instruction*, int> node_of;
  node_of.reserve(count);
  for (const Instruction* i : plan.order) {
    if (plan.role[i] == Role::kCompute) {
      const int g = plan.group_of[i];
      const Group& G = plan.groups[static_cast<size_t>(g)];
      if (G.members.front() == i) {
        node_of[i] = static_cast<int>(nodes.size());
        nodes.push_back({Step::Kind::kGroup, plan.pos[i], i, g});
      } else {
        node_of[i] = node_of[G.members.front()];
      }
    } else {
      node_of[i] = static_cast<int>(nodes.size());
      nodes.push_back({Step::Kind::kInstruction, plan.pos[i], i, -1});
    }
  }
  std::vector<int> seq(nodes.size()), idx(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k) seq[k] = idx[k] = static_cast<int>(k);
  // Multi-input loop fusion: an elementwise op's group takes in the groups of its other operands
  // that a loop fusion holds (elementwise ops and slices, no dot, convolution or reduce) of the
  // op's element count — one pass that reads each input once and writes each value used outside
  // once (XLA's loop fusion with multi-output fusion of the values used elsewhere) — unless a path
  // leads from the earlier of the two groups to the later one through another step (merging them
  // would make a cycle). The steps between them that depend on the earlier one move after the
  // merged group, so the sequence stays a topological order.
  if (fuse) {
    std::unordered_map<const Instruction*, std::vector<const Instruction*>> control_successors;
    for (const Instruction* i : plan.order)
      for (const Instruction* p : i->control_predecessors) control_successors[p].push_back(i);
    std::vector<int> work, visited;
    std::vector<int> seen(nodes.size(), -1);  // the check that last reached a node
    int check = 0;
    // Aliases and inlined ops order nothing: the engine resolves their values when read.
    auto free_node = [&](int nd) {
      const Step& st = nodes[static_cast<size_t>(nd)];
      if (st.kind == Step::Kind::kGroup) return false;
      const Role r = plan.role[st.inst];
      return r == Role::kAlias || r == Role::kInline;
    };
    auto push_successors = [&](int nd, int skip) {
      const Step& st = nodes[static_cast<size_t>(nd)];
      auto add_users = [&](const Instruction* m) {
        for (const Instruction* u : m->users()) {
          auto it = node_of.find(u);
          if (it != node_of.end() && it->second != nd && it->second != skip) work.push_back(it->second);
        }
        auto cs = control_successors.find(m);
        if (cs == control_successors.end()) return;
        for (const Instruction* u : cs->second) {
          auto it = node_of.find(u);
          if (it != node_of.end() && it->second != nd) work.push_back(it->second);
        }
      };
      if (st.kind == Step::Kind::kGroup) {
        for (const Instruction* m : plan.groups[static_cast<size_t>(st.group)].members) add_users(m);
      } else {
        add_users(st.inst);
      }
    };
    for (const Instruction* i : plan.order) {
      if (plan.role[i] != Role::kCompute || !IsElementwise(i->opcode()) || !i->shape().IsArray()) continue;
      const int64_t n = Elements(*i);
      auto loop_group = [&](int g) {
        const Group& G = plan.groups[static_cast<size_t>(g)];
        return !G.heavy && !G.has_reduce && G.loop && G.max_elements == n;
      };
      for (const Instruction* o : i->operands()) {
        if (!loop_group(plan.group_of[i])) break;  // an output fusion into a dot or reduce takes no producers
        for (const Instruction* src : src_of(o)) {
          auto gi = plan.group_of.find(src);
          if (gi == plan.group_of.end() || gi->second == plan.group_of[i]) continue;
          if (!loop_group(gi->second)) continue;
          const Group& G = plan.groups[static_cast<size_t>(gi->second)];
          int na = node_of[G.members.front()], nb = node_of[i];
          if (idx[static_cast<size_t>(na)] > idx[static_cast<size_t>(nb)]) std::swap(na, nb);
          const int limit = idx[static_cast<size_t>(nb)];
          // Steps reachable from the earlier group before the later one.
          work.clear();
          visited.clear();
          ++check;
          push_successors(na, nb);
          bool cycle = false;
          int64_t budget = 20000;
          while (!work.empty() && !cycle) {
            const int x = work.back();
            work.pop_back();
            if (x == nb) {
              cycle = true;
              break;
            }
            const bool free = free_node(x);
            if ((!free && idx[static_cast<size_t>(x)] > limit) || seen[static_cast<size_t>(x)] == check) continue;
            seen[static_cast<size_t>(x)] = check;
            if (--budget < 0) cycle = true;
            const int ix = idx[static_cast<size_t>(x)];
            if (ix > idx[static_cast<size_t>(na)] && ix < limit) {
              // An op between the two that needs the earlier group would have to wait for the
              // merged one: the merge would defer work the program order runs earlier (and keep
              // what it reads alive longer). Only aliases may move.
              if (!free) cycle = true;
              visited.push_back(x);
            }
            push_successors(x, free ? nb : -1);
          }
          if (cycle) continue;
          // Merge: the later step's group takes the earlier one's members.
          const int ga = nodes[static_cast<size_t>(na)].group, gb = nodes[static_cast<size_t>(nb)].group;
          for (const Instruction* m : plan.groups[static_cast<size_t>(ga)].members) node_of[m] = nb;
          merge_groups(gb, ga);
          nodes[static_cast<size_t>(nb)].pos = plan.groups[static_cast<size_t>(gb)].first_pos;
          // Reorder the window [idx(na), idx(nb)]: the steps that do not depend on the earlier group,
          // the merged group, then those that do (in their order); the earlier group's slot goes.
          const int lo = idx[static_cast<size_t>(na)];
          std::sort(visited.begin(), visited.end(),
                    [&](int x, int y) { return idx[static_cast<size_t>(x)] < idx[static_cast<size_t>(y)]; });
          std::vector<int> visited_sorted = visited;
          std::sort(visited_sorted.begin(), visited_sorted.end());
          std::vector<int> window;
          for (int k = lo + 1; k < limit; ++k) {
            const int x = seq[static_cast<size_t>(k)];
            if (x >= 0 && !std::binary_search(visited_sorted.begin(), visited_sorted.end(), x)) window.push_back(x);
          }
          window.push_back(nb);
          window.insert(window.end(), visited.begin(), visited.end());
          seq[static_cast<size_t>(lo)] = -1;
          idx[static_cast<size_t>(na)] = -1;
          int k = lo + 1;
          for (int x : window) {
            seq[static_cast<size_t>(k)] = x;
            idx[static_cast<size_t>(x)] = k;
            ++k;
          }
          for (; k <= limit; ++k) seq[static_cast<size_t>(k)] = -1;
        }
      }
    }
  }
  for (Group& g : plan.groups) {
    if (g.members.empty()) continue;  // merged into another group
    std::sort(g.members.begin(), g.members.end(),
              [&](const Instruction* a, const Instruction* b) { return plan.pos[a] < plan.pos[b]; });
    g.main = g.members.back();
    for (const Instruction* m : g.members) {
      if (IsHeavy(*m)) {
        g.main = m;
        break;
      }
    }
    if (!g.heavy) {
      for (const Instruction* m : g.members)
        if (m->opcode() == Opcode::kReduce) g.main = m;
    }
    const int mg = plan.group_of[g.members.front()];
    for (const Instruction* m : g.members) {
      if (UsedOutside(plan, comp, m, mg, 0)) plan.group_outputs.insert(m);
    }
  }
  // Constants and parameters first (they cost nothing and exist from the start), then the rest in
  // sequence order.
  for (int pass = 0; pass < 2; ++pass) {
    for (int k : seq) {
      if (k < 0) continue;
      const Step& st = nodes[static_cast<size_t>(k)];
      const bool first = st.kind == Step::Kind::kInstruction && exists_first(st.inst);
      if (first == (pass == 0)) plan.steps.push_back(st);
    }
  }
  return plan;
}

// ---- the memory-aware order of a plan's steps --------------------------------------------------------

// A memory-aware list schedule of a computation's steps (after XLA's list memory scheduler): among
// the steps whose operands are all computed, the next is the one that frees the most bytes net of
// what it defines (ties: program order); when none frees memory, the first in program order (a
// greedy "least allocation" pick would hoist far work such as another layer's recomputation, or a
// weight update before the backward pass has read the old weights). A step frees a value when it is that value's last reader.
// Values are followed through aliases (tuple, get-tuple-element, bitcast, reshape, ...; a while
// loop's state is updated in place, so a while is an alias of its init here; an inlined broadcast
// reads its operand): an alias defines nothing and its readers read its sources. Parameters,
// constants and aliases go first whenever they are ready (they cost nothing). The root's values
// are never freed. Steps are ordered after fusion, so the fused groups (and the compute they
// cost) are those of program order; only their order changes.
std::vector<Step> MemoryOrderSteps(const CompPlan& plan, const Computation& comp) {
  const int n = static_cast<int>(plan.steps.size());
  std::unordered_map<const Instruction*, int> step_of;
  std::vector<std::vector<const Instruction*>> members(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    const Step& st = plan.steps[static_cast<size_t>(k)];
    if (st.kind == Step::Kind::kGroup) {
      members[static_cast<size_t>(k)] = plan.groups[static_cast<size_t>(st.group)].members;
    } else {
      members[static_cast<size_t>(k)] = {st.inst};
    }
    for (const Instruction* m : members[static_cast<size_t>(k)]) step_of[m] = k;
  }
  enum class Kind : uint8_t { kFree, kAlias, kOwn };
  std::vector<Kind> kind(static_cast<size_t>(n), Kind::kOwn);
  std::vector<int64_t> bytes(static_cast<size_t>(n), 0);
  for (int k = 0; k < n; ++k) {
    const Step& st = plan.steps[static_cast<size_t>(k)];
    if (st.kind == Step::Kind::kGroup) {
      for (const Instruction* m : members[static_cast<size_t>(k)])
        if (plan.group_outputs.count(m)) bytes[static_cast<size_t>(k)] += m->shape().ByteSize();
      continue;
    }
    const Role r = plan.role.at(st.inst);
    if (r == Role::kAlias || r == Role::kInline || r == Role::kWhile) {
      kind[static_cast<size_t>(k)] = Kind::kAlias;
    } else {
      if (r == Role::kParameter || r == Role::kConstant) kind[static_cast<size_t>(k)] = Kind::kFree;
      bytes[static_cast<size_t>(k)] = st.inst->shape().ByteSize();
    }
  }
  // preds and the sources each step's value is (steps are in a valid order: operands come first).
  std::vector<std::vector<int>> preds(static_cast<size_t>(n)), sources(static_cast<size_t>(n)),
      reads(static_cast<size_t>(n));
  // Aliases and inlined ops (broadcast, iota) are values, not work: the expansion takes them when a
  // consumer reads them, so a step waits for what they read, never for their own step (which may
  // come after a group that reads through them). They are followed 64 levels deep at most (a
  // deeper one counts as the step it is).
  auto is_value = [&](const Instruction* o) {
    auto r = plan.role.find(o);
    return r != plan.role.end() && (r->second == Role::kInline || r->second == Role::kAlias);
  };
  // The steps reached through an alias, kept per alias with the depth of its alias chains: a
  // tuple's elements are reached again by every get-tuple-element of it, for every step reading
  // one. Null when the chains are deeper than `budget` (then followed level by level, below).
  struct Reach {
    int height = 0;  // the longest chain of aliases from this one
    std::vector<int> steps;
  };
  std::unordered_map<const Instruction*, Reach> reach;
  auto reach_of = [&](auto&& self, const Instruction* o, int budget) -> const Reach* {
    if (budget <= 0) return nullptr;
    if (auto it = reach.find(o); it != reach.end()) return it->second.height <= budget ? &it->second : nullptr;
    Reach r;
    for (const Instruction* x : o->operands()) {
      if (is_value(x)) {
        const Reach* sub = self(self, x, budget - 1);
        if (!sub) return nullptr;
        r.height = std::max(r.height, sub->height);
        r.steps.insert(r.steps.end(), sub->steps.begin(), sub->steps.end());
      } else if (auto st = step_of.find(x); st != step_of.end()) {
        r.steps.push_back(st->second);
      }
    }
    ++r.height;
    std::sort(r.steps.begin(), r.steps.end());
    r.steps.erase(std::unique(r.steps.begin(), r.steps.end()), r.steps.end());
    return &reach.emplace(o, std::move(r)).first->second;
  };
  int k = 0;
  std::set<int> p, src;
  auto take = [&](int step) {
    if (step == k) return;
    p.insert(step);
    for (int x : sources[static_cast<size_t>(step)]) src.insert(x);
  };
  std::function<void(const Instruction*, int)> add = [&](const Instruction* o, int depth) {
    if (is_value(o) && depth < 64) {
      for (const Instruction* x : o->operands()) add(x, depth + 1);
      return;
    }
    if (auto it = step_of.find(o); it != step_of.end()) take(it->second);
  };
  auto read = [&](const Instruction* o) {
    const Reach* r = is_value(o) ? reach_of(reach_of, o, 64) : nullptr;
    if (!r) return add(o, 0);
    for (int step : r->steps) take(step);
  };
  for (k = 0; k < n; ++k) {
    p.clear();
    src.clear();
    for (const Instruction* m : members[static_cast<size_t>(k)]) {
      for (const Instruction* o : m->operands()) read(o);
      for (const Instruction* o : m->control_predecessors) read(o);
    }
    preds[static_cast<size_t>(k)].assign(p.begin(), p.end());
    if (kind[static_cast<size_t>(k)] == Kind::kAlias) {
      sources[static_cast<size_t>(k)].assign(src.begin(), src.end());
    } else {
      sources[static_cast<size_t>(k)] = {k};
      reads[static_cast<size_t>(k)].assign(src.begin(), src.end());
    }
  }
  std::vector<int> readers(static_cast<size_t>(n), 0);
  for (int k = 0; k < n; ++k)
    for (int x : reads[static_cast<size_t>(k)]) ++readers[static_cast<size_t>(x)];
  if (comp.root()) {
    auto it = step_of.find(comp.root());
    if (it != step_of.end())
      for (int x : sources[static_cast<size_t>(it->second)]) ++readers[static_cast<size_t>(x)];
  }
  std::vector<int> indeg(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> succ(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    for (int q : preds[static_cast<size_t>(k)]) succ[static_cast<size_t>(q)].push_back(k);
    indeg[static_cast<size_t>(k)] = static_cast<int>(preds[static_cast<size_t>(k)].size());
  }
  auto net_freed = [&](int k) {
    int64_t freed = 0;
    for (int x : reads[static_cast<size_t>(k)])
      if (readers[static_cast<size_t>(x)] == 1) freed += bytes[static_cast<size_t>(x)];
    return freed - bytes[static_cast<size_t>(k)];
  };
  // Free steps wait in a queue of their own; the others are scanned each time (their net gain
  // changes as other readers of what they read are scheduled).
  std::priority_queue<int, std::vector<int>, std::greater<>> free_ready;
  std::vector<int> ready;
  auto make_ready = [&](int k) {
    if (kind[static_cast<size_t>(k)] == Kind::kOwn) ready.push_back(k);
    else free_ready.push(k);
  };
  for (int k = 0; k < n; ++k)
    if (indeg[static_cast<size_t>(k)] == 0) make_ready(k);
  std::vector<Step> out;
  out.reserve(static_cast<size_t>(n));
  while (!free_ready.empty() || !ready.empty()) {
    int k = -1;
    if (!free_ready.empty()) {
      k = free_ready.top();
      free_ready.pop();
    } else {
      size_t best = 0;
      int64_t best_gain = net_freed(ready[0]);
      for (size_t j = 1; j < ready.size(); ++j) {
        const int64_t g = net_freed(ready[j]);
        if (g > best_gain || (g == best_gain && ready[j] < ready[best])) {
          best = j;
          best_gain = g;
        }
      }
      if (best_gain <= 0) {  // nothing ready frees memory: program order
        best = 0;
        for (size_t j = 1; j < ready.size(); ++j)
          if (ready[j] < ready[best]) best = j;
      }
      k = ready[best];
      ready[best] = ready.back();
      ready.pop_back();
    }
    out.push_back(plan.steps[static_cast<size_t>(k)]);
    for (int x : reads[static_cast<size_t>(k)]) --readers[static_cast<size_t>(x)];
    for (int x : succ[static_cast<size_t>(k)])
      if (--indeg[static_cast<size_t>(x)] == 0) make_ready(x);
  }
  if (static_cast<int>(out.size()) != n) return plan.steps;  // a cycle would be a malformed plan: keep it
  return out;
}

// ---- expansion ------------------------------------------------------------------------------------------

using Value = std::vector<int32_t>;  // leaf buffer ids (-1: a leaf without memory, e.g. a token)

struct CollectiveKey {
  int kind;
  std::vector<std::vector<int64_t>> groups;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  double bytes;
  bool operator<(const CollectiveKey& o) const {
    return std::tie(kind, bytes, groups, pairs) < std::tie(o.kind, o.bytes, o.groups, o.pairs);
  }
};

struct ReuseCandidate {
  int32_t op = -1;
  int32_t out = -1;
  std::vector<int32_t> inputs;
  bool same_size_only = true;
};

// What a group's op is regardless of the iteration it runs in, computed once per group: an
// unrolled loop runs the same body groups once per iteration.
struct GroupStatic {
  std::string kind_name;
  bool recompute = false;
  double flops = 0, mxu_flops = 0;  // mxu: operands padded to the matrix unit's tiles
  std::vector<bool> output;         // per member: its value is read outside the group
  // Per member, its operands outside the group: (operand index, operand).
  std::vector<std::vector<std::pair<int64_t, const Instruction*>>> external;
  std::vector<std::string> prefix;  // per member: its qualified name without the iteration
  std::string main_prefix;          // (both empty without names: ExecProgramOptions::names)
};

// What expanding a module finds out about its computations and instructions whatever order the
// program is built in: the memory-limit schedule builds it twice (program order, then the memory
// list schedule when that does not fit), and the second build takes the plans, categories and
// collectives' participants the first one found. Shared only between builds whose options differ
// in the schedule, kProgramOrder or kMemoryList (MakePlan orders a computation alike for both; the
// memory list order of a plan's steps is each build's own).
struct ModuleFacts {
  explicit ModuleFacts(const Module& m) {
    if (m.entry()) {
      for (const Instruction* p : m.entry()->parameters())
        if (p) param_names.insert(p->name());
    }
  }
  std::set<std::string, std::less<>> param_names;
  std::unordered_map<const Computation*, CompPlan> plans;
  std::unordered_map<const Computation*, double> flops_memo;
  std::unordered_map<const Shape*, int64_t> padded_bytes;
  std::map<std::pair<const Instruction*, int>, MemoryCategory> categories;
  std::unordered_map<const Instruction*, bool> recomputed;
  std::unordered_map<const Group*, GroupStatic> group_static;
  // Per collective instruction: its kind, operand bytes and participants (Expander::DistinctCollective).
  std::unordered_map<const Instruction*, CollectiveKey> participants;
};

class Expander {
 public:
  Expander(const Module& m, const ChipSpec& chip, const ExecProgramOptions& opt, ModuleFacts* facts)
      : module_(m), chip_(chip), opt_(opt), facts_(*facts) {}

  // The bytes a buffer of `leaf` takes in device memory: padded to the chip's layout tiles
  // (simulator/buffer_layout.h) unless the option is off.
  // Memoised by shape: an unrolled loop asks for the same body shapes once per iteration.
  int64_t BufferBytes(const Shape& leaf) {
    if (!leaf.IsArray()) return 0;
    if (!opt_.pad_to_layout_tiles) return leaf.ByteSize();
    auto [it, added] = facts_.padded_bytes.try_emplace(&leaf, 0);
    if (added) it->second = PaddedByteSize(leaf, chip_);
    return it->second;
  }

  // ClassifyValue and IsRematerialization of a non-parameter instruction, memoised likewise (the
  // category depends only on the instruction and its operand's category).
  MemoryCategory CategoryOf(const Instruction& inst, std::optional<MemoryCategory> operand_category) {
    const int key = operand_category ? static_cast<int>(*operand_category) + 1 : 0;
    auto [it, added] = facts_.categories.try_emplace(std::make_pair(&inst, key), MemoryCategory{});
    if (added) it->second = ClassifyValue(inst, false, facts_.param_names, operand_category);
    return it->second;
  }
  bool Recomputed(const Instruction& inst) {
    auto [it, added] = facts_.recomputed.try_emplace(&inst, false);
    if (added) it->second = IsRematerialization(inst);
    return it->second;
  }

  Status Run(ExecProgram* out) {
    prog_ = out;
    const Computation* entry = module_.entry();
    if (!entry) return Error("the module has no entry computation");
    if (!entry->root()) return Error("the entry computation has no root instruction");
    std::vector<Value> args;
    for (const Instruction* p : entry->parameters()) {
      if (!p) return Error("entry parameter missing");
      Value v;
      std::vector<const Shape*> leaves;
      CollectLeaves(p->shape(), &leaves);
      const MemoryCategory cat = ClassifyValue(*p, true, facts_.param_names, std::nullopt);
      for (size_t k = 0; k < leaves.size(); ++k) {
        if (!leaves[k]->IsArray()) {
          v.push_back(-1);
          continue;
        }
        Buffer b;
        b.name = leaves.size() == 1 ? p->name() : p->name() + "{" + std::to_string(k) + "}";
        b.logical_bytes = LeafBytes(*leaves[k]);
      b.bytes = BufferBytes(*leaves[k]);
        b.category = cat;
        b.is_parameter = true;
        b.donated = opt_.donate_parameters;
        v.push_back(AddBuffer(std::move(b)));
      }
      args.push_back(std::move(v));
    }
    auto root = Expand(*entry, args, "", 0);
    if (!root.ok()) return root.error();
    for (int32_t b : *root)
      if (b >= 0) prog_->buffers[static_cast<size_t>(b)].is_output = true;
    FinishInPlace();
    for (const ExecOp& op : prog_->ops) prog_->flops += op.flops;
    prog_->instructions = module_.instruction_count();
    return Status::Ok();
  }

 private:
  int32_t AddBuffer(Buffer b) {
    prog_->buffers.push_back(std::move(b));
    return static_cast<int32_t>(prog_->buffers.size() - 1);
  }

  const CompPlan& PlanOf(const Computation& c) {
    auto it = facts_.plans.find(&c);
    if (it != facts_.plans.end()) return it->second;
    return facts_.plans.emplace(&c, MakePlan(c, opt_)).first->second;
  }
  // The order `plan`'s steps run in: the plan's, or under the memory list schedule its memory order.
  const std::vector<Step>& StepsOf(const Computation& c, const CompPlan& plan) {
    if (opt_.schedule != ScheduleKind::kMemoryList) return plan.steps;
    auto it = memory_steps_.find(&c);
    if (it != memory_steps_.end()) return it->second;
    return memory_steps_.emplace(&c, MemoryOrderSteps(plan, c)).first->second;
  }

  Status CheckBudget() {
    if (static_cast<int64_t>(prog_->ops.size()) > opt_.max_exec_ops) {
      return Error("the unrolled program exceeds " + std::to_string(opt_.max_exec_ops) +
                   " ops (while loops are unrolled by their trip count); lower the trip counts or raise max_exec_ops");
    }
    return Status::Ok();
  }

  std::string Qualified(const Computation& c, const Instruction& i, const std::string& iter) const {
    if (&c == module_.entry()) return i.name() + iter;
    return c.name() + "/" + i.name() + iter;
  }

  std::optional<MemoryCategory> CategoryOfValue(const Value& v) const {
    for (int32_t b : v)
      if (b >= 0) return prog_->buffers[static_cast<size_t>(b)].category;
    return std::nullopt;
  }

  // New buffers for a value of `shape` defined by `inst` in op `op` (unnamed when `qname` is empty).
  Value NewValue(const Instruction& inst, const Shape& shape, const std::string& qname, int32_t op,
                 MemoryCategory cat) {
    (void)inst;
    Value v;
    std::vector<const Shape*> leaves;
    CollectLeaves(shape, &leaves);
    for (size_t k = 0; k < leaves.size(); ++k) {
      if (!leaves[k]->IsArray()) {
        v.push_back(-1);
        continue;
      }
      Buffer b;
      if (!qname.empty()) b.name = leaves.size() == 1 ? qname : qname + "{" + std::to_string(k) + "}";
      b.logical_bytes = LeafBytes(*leaves[k]);
      b.bytes = BufferBytes(*leaves[k]);
      b.category = cat;
      b.def_op = op;
      v.push_back(AddBuffer(std::move(b)));
    }
    return v;
  }

  struct Frame {
    const Computation* comp = nullptr;
    const CompPlan* plan = nullptr;
    const std::vector<Value>* args = nullptr;
    std::unordered_map<const Instruction*, Value> values;
    std::unordered_map<const Instruction*, int32_t> op_of;  // instruction -> exec op (deps of control edges)
    std::string iter;
  };

  // The value of `i` in frame `f`, resolving aliases and inlined ops lazily.
  Result<Value> ValueOf(Frame& f, const Instruction* i) {
    auto it = f.values.find(i);
    if (it != f.values.end()) return it->second;
    auto ri = f.plan->role.find(i);
    if (ri == f.plan->role.end()) {
      return Error("instruction " + i->name() + " is used in computation " + f.comp->name() + " but belongs to another");
    }
    const Role r = ri->second;
    Value v;
    if (r == Role::kParameter) {
      const int64_t n = i->parameter_number;
      if (n < 0 || n >= static_cast<int64_t>(f.args->size())) {
        return Error("computation " + f.comp->name() + ": parameter " + std::to_string(n) + " has no argument");
      }
      v = (*f.args)[static_cast<size_t>(n)];
    } else if (r == Role::kInline) {
      for (const Instruction* o : i->operands()) {
        auto ov = ValueOf(f, o);
        if (!ov.ok()) return ov.error();
        v.insert(v.end(), ov->begin(), ov->end());
      }
    } else if (r == Role::kAlias) {
      auto res = AliasValue(f, i);
      if (!res.ok()) return res.error();
      v = std::move(res).value();
    } else {
      return Error("internal: value of " + i->name() + " (" + std::string(OpcodeName(i->opcode())) +
                   ") used before it was computed");
    }
    f.values[i] = v;
    return v;
  }

  Result<Value> AliasValue(Frame& f, const Instruction* i) {
    Value v;
    switch (i->opcode()) {
      case Opcode::kTuple:
        for (const Instruction* o : i->operands()) {
          auto ov = ValueOf(f, o);
          if (!ov.ok()) return ov.error();
          v.insert(v.end(), ov->begin(), ov->end());
        }
        return v;
      case Opcode::kGetTupleElement: {
        if (i->operand_count() != 1) return Error(i->name() + ": get-tuple-element needs one operand");
        // An element of a tuple instruction of this computation is that operand's value: the
        // tuple's other elements may not be computed yet (a fused group reading one element runs
        // where the fusion put it; the plan resolves such reads to the element the same way).
        if (const Instruction* t = i->operand(0); t->opcode() == Opcode::kTuple && i->tuple_index >= 0 &&
                                                   i->tuple_index < t->operand_count() && f.plan->role.count(t)) {
          return ValueOf(f, t->operand(i->tuple_index));
        }
        auto ov = ValueOf(f, i->operand(0));
        if (!ov.ok()) return ov.error();
        const Shape& ts = i->operand(0)->shape();
        if (!ts.IsTuple() || i->tuple_index < 0 || i->tuple_index >= static_cast<int64_t>(ts.tuple.size())) {
          return Error(i->name() + ": get-tuple-element index out of range");
        }
        int64_t off = 0;
        for (int64_t k = 0; k < i->tuple_index; ++k) off += LeafCount(ts.tuple[static_cast<size_t>(k)]);
        const int64_t cnt = LeafCount(ts.tuple[static_cast<size_t>(i->tuple_index)]);
        if (ov->empty()) return v;  // a fused value that is never materialised
        if (off + cnt > static_cast<int64_t>(ov->size())) return Error(i->name() + ": tuple leaves do not match");
        v.assign(ov->begin() + off, ov->begin() + off + cnt);
        return v;
      }
      default: break;
    }
    if (IsAsyncDone(*i)) {
      if (i->operand_count() < 1) return Error(i->name() + ": needs an operand");
      auto ov = ValueOf(f, i->operand(0));
      if (!ov.ok()) return ov.error();
      const Shape& ss = i->operand(0)->shape();
      if (ss.IsTuple() && !(ss == i->shape()) && ss.tuple.size() >= 2) {
        const int64_t off = LeafCount(ss.tuple[0]);
        const int64_t cnt = LeafCount(ss.tuple[1]);
        if (off + cnt <= static_cast<int64_t>(ov->size())) v.assign(ov->begin() + off, ov->begin() + off + cnt);
        return v;
      }
      return ov;
    }
    // bitcast, reshape, opt-barrier, domain, annotation custom-calls, add-dependency: operand 0's value
    // (opt-barrier of a tuple: the tuple's value). after-all: no memory.
    if (i->opcode() == Opcode::kAfterAll) {
      v.push_back(-1);
      return v;
    }
    if (i->operand_count() >= 1) return ValueOf(f, i->operand(0));
    v.push_back(-1);
    return v;
  }

  // Buffers (unique, >= 0) of a list of values.
  static void AddBuffers(const Value& v, std::vector<int32_t>* out) {
    for (int32_t b : v)
      if (b >= 0) out->push_back(b);
  }

  void FinalizeDeps(ExecOp& op) {
    std::sort(op.uses.begin(), op.uses.end());
    op.uses.erase(std::unique(op.uses.begin(), op.uses.end()), op.uses.end());
    for (int32_t b : op.uses) {
      const int32_t d = prog_->buffers[static_cast<size_t>(b)].def_op;
      if (d >= 0) op.deps.push_back(d);
    }
    std::sort(op.deps.begin(), op.deps.end());
    op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
  }

  void AddControlDeps(Frame& f, const std::vector<const Instruction*>& members, ExecOp& op) {
    for (const Instruction* m : members) {
      for (const Instruction* p : m->control_predecessors) {
        auto it = f.op_of.find(p);
        if (it != f.op_of.end()) op.deps.push_back(it->second);
      }
    }
  }

  // Category of operand `o` of a group member: through single-operand aliases to a member (whose
  // category is being computed) or to a value that already exists.
  std::optional<MemoryCategory> OperandCategory(Frame& f, const Instruction* o,
                                                const std::unordered_map<const Instruction*, MemoryCategory>& member_cat) {
    for (int hops = 0; o && hops < 64; ++hops) {
      auto mc = member_cat.find(o);
      if (mc != member_cat.end()) return mc->second;
      auto fv = f.values.find(o);
      if (fv != f.values.end()) return CategoryOfValue(fv->second);
      auto ri = f.plan->role.find(o);
      if (ri == f.plan->role.end()) return std::nullopt;
      const Role r = ri->second;
      if ((r == Role::kAlias || r == Role::kInline) && o->operand_count() >= 1) {
        o = o->operand(0);
        continue;
      }
      auto v = ValueOf(f, o);
      if (v.ok()) return CategoryOfValue(*v);
      return std::nullopt;
    }
    return std::nullopt;
  }

  // The buffers a group reads for its operand `o`, each with the most bytes it reads of it: an
  // inlined window (IsSingleWindow) reads only its own bytes of the array it is taken from; the
  // value's other sources are read whole. Looks through inlined ops, bitcasts and reshapes; any
  // other value is its buffers (ValueOf).
  Status WindowedSources(Frame& f, const Instruction* o, double cap, int depth,
                         std::vector<std::pair<int32_t, double>>* out) {
    if (depth < 16 && f.plan->windowed.count(o)) {
      const bool inlined = f.plan->role.at(o) == Role::kInline;
      const bool window = inlined && IsSingleWindow(*o);
      const int64_t n = inlined ? o->operand_count() : 1;
      for (int64_t k = 0; k < n; ++k) {
        const double c = window && k == 0 ? std::min(cap, static_cast<double>(o->shape().ByteSize())) : cap;
        if (Status st = WindowedSources(f, o->operand(k), c, depth + 1, out); !st.ok()) return st;
      }
      return Status::Ok();
    }
    auto ov = ValueOf(f, o);
    if (!ov.ok()) return ov.error();
    for (int32_t b : *ov) out->emplace_back(b, cap);
    return Status::Ok();
  }

  const GroupStatic& StaticOf(const Computation& comp, const CompPlan& plan, const Group& g) {
    auto [it, added] = facts_.group_static.try_emplace(&g);
    GroupStatic& gs = it->second;
    if (!added) return gs;
    if (opt_.names) gs.main_prefix = Qualified(comp, *g.main, "");
    if (g.members.size() == 1) {
      if (g.main->opcode() == Opcode::kCustomCall) gs.kind_name = "custom-call";
      else if (g.main->opcode() == Opcode::kGeneric) gs.kind_name = g.main->opcode_text();
      else gs.kind_name = std::string(OpcodeName(g.main->opcode()));
    } else if (IsGenericNamed(*g.main, "fusion") || !g.heavy) {
      gs.kind_name = "fusion";
    } else {
      gs.kind_name = std::string(OpcodeName(g.main->opcode())) + "-fusion";
    }
    const std::unordered_set<const Instruction*> member_set(g.members.begin(), g.members.end());
    for (const Instruction* m : g.members) {
      gs.recompute = gs.recompute || Recomputed(*m);
      const double flops = InstructionFlops(*m, &facts_.flops_memo);
      gs.flops += flops;
      if (m->opcode() == Opcode::kDot || m->opcode() == Opcode::kConvolution) {
        auto padded = CountMxuFlops(*m, chip_);
        gs.mxu_flops += padded.ok() ? *padded : flops;
      } else {
        gs.mxu_flops += flops;
      }
      gs.output.push_back(plan.group_outputs.count(m) > 0);
      gs.prefix.push_back(gs.output.back() && opt_.names ? Qualified(comp, *m, "") : std::string());
      auto& ext = gs.external.emplace_back();
      for (int64_t k = 0; k < m->operand_count(); ++k)
        if (!member_set.count(m->operand(k))) ext.emplace_back(k, m->operand(k));
    }
    return gs;
  }

  Status RunGroup(Frame& f, const Group& g) {
    const int32_t op_id = static_cast<int32_t>(prog_->ops.size());
    const GroupStatic& gs = StaticOf(*f.comp, *f.plan, g);
    ExecOp op;
    op.kind = ExecKind::kCompute;
    if (opt_.names) op.name = gs.main_prefix + f.iter;
    op.members = static_cast<int32_t>(g.members.size());
    op.loop = cur_loop_;
    op.iteration = cur_iteration_;
    op.recompute = gs.recompute;
    op.kind_name = gs.kind_name;
    op.flops = gs.flops;
    // 1. Categories of every member, in order (internal ones too, for inheritance).
    std::unordered_map<const Instruction*, MemoryCategory> member_cat;
    for (const Instruction* m : g.members) {
      std::optional<MemoryCategory> oc;
      if (m->operand_count() > 0) oc = OperandCategory(f, m->operand(0), member_cat);
      member_cat[m] = CategoryOf(*m, oc);
    }
    // 2. Values: new buffers for members read outside the group, nothing for the others.
    std::vector<ReuseCandidate> reuse;
    double write_bytes = 0;
    for (size_t mi = 0; mi < g.members.size(); ++mi) {
      const Instruction* m = g.members[mi];
      if (!gs.output[mi]) {
        f.values[m] = Value(static_cast<size_t>(LeafCount(m->shape())), -1);  // never materialised
        f.op_of[m] = op_id;
        continue;
      }
      Value v = NewValue(*m, m->shape(), opt_.names ? gs.prefix[mi] + f.iter : std::string(), op_id, member_cat[m]);
      f.values[m] = v;
      f.op_of[m] = op_id;
      for (int32_t b : v) {
        if (b < 0) continue;
        op.defs.push_back(b);
        double wb = static_cast<double>(prog_->buffers[static_cast<size_t>(b)].logical_bytes);
        if (const Instruction* update = InPlaceUpdate(*m)) {
          wb = std::min(wb, static_cast<double>(update->shape().ByteSize()));
        }
        write_bytes += wb;
      }
    }
    // 3. External reads: buffer -> bytes read (slices read only what they keep; a
    //    dynamic-update-slice reads only its update).
    std::map<int32_t, double> reads;
    for (size_t mi = 0; mi < g.members.size(); ++mi) {
      const Instruction* m = g.members[mi];
      for (const auto& [k, o] : gs.external[mi]) {
        std::vector<std::pair<int32_t, double>>& sources = sources_scratch_;  // buffer, at most this many bytes read
        sources.clear();
        if (Status st = WindowedSources(f, o, std::numeric_limits<double>::infinity(), 0, &sources); !st.ok()) return st;
        for (const auto& [b, cap] : sources) {
          if (b < 0 || prog_->buffers[static_cast<size_t>(b)].def_op == op_id) continue;
          double bytes = std::min(cap, static_cast<double>(prog_->buffers[static_cast<size_t>(b)].logical_bytes));
          if (k == 0 && IsSliceLike(m->opcode())) bytes = std::min(bytes, static_cast<double>(m->shape().ByteSize()));
          if (k == 0 && m->opcode() == Opcode::kDynamicUpdateSlice && m->operand_count() > 1) bytes = 0;
          // A scatter's combiner reads the region it updates, not the whole operand.
          if (k == 0 && m->opcode() == Opcode::kScatter && InPlaceUpdate(*m))
            bytes = std::min(bytes, static_cast<double>(InPlaceUpdate(*m)->shape().ByteSize()));
          auto [it, fresh] = reads.emplace(b, bytes);
          if (!fresh) it->second = std::max(it->second, bytes);
          op.uses.push_back(b);
        }
      }
    }
    // 4. In-place candidates for single-buffer outputs.
    if (opt_.in_place_reuse) {
      for (size_t mi = 0; mi < g.members.size(); ++mi) {
        const Instruction* m = g.members[mi];
        if (!gs.output[mi]) continue;
        const Value& v = f.values[m];
        if (v.size() != 1 || v[0] < 0) continue;
        ReuseCandidate rc;
        rc.op = op_id;
        rc.out = v[0];
        if (IsSliceLike(m->opcode()) || InPlaceUpdate(*m)) {
          if (m->operand_count() > 0 && !gs.external[mi].empty() && gs.external[mi].front().first == 0) {
            auto ov = ValueOf(f, m->operand(0));
            if (ov.ok()) AddBuffers(*ov, &rc.inputs);
            rc.same_size_only = false;
          }
        } else if (IsElementwise(m->opcode()) || IsGenericNamed(*m, "fusion")) {
          for (const auto& [b, bytes] : reads) rc.inputs.push_back(b);
        }
        if (!rc.inputs.empty()) reuse.push_back(std::move(rc));
      }
    }
    double read_bytes = 0;
    for (const auto& [b, bytes] : reads) read_bytes += bytes;
    op.bytes = read_bytes + write_bytes;
    op.duration_s = ComputeCost(gs.mxu_flops, op.bytes, chip_);
    AddControlDeps(f, g.members, op);
    FinalizeDeps(op);
    prog_->ops.push_back(std::move(op));
    op_source_.push_back(&g);
    for (auto& rc : reuse) reuse_.push_back(std::move(rc));
    return CheckBudget();
  }

  Status RunCollective(Frame& f, const Instruction& i) {
    const int32_t op_id = static_cast<int32_t>(prog_->ops.size());
    ExecOp op;
    op.kind = ExecKind::kCollective;
    op.name = Qualified(*f.comp, i, f.iter);
    op.loop = cur_loop_;
    op.iteration = cur_iteration_;
    CollectiveKind kind = CollectiveKind::kAllReduce;
    switch (CollectiveOpcodeOf(i).value_or(i.opcode())) {  // async forms: the collective they start
      case Opcode::kAllGather: case Opcode::kAllGatherStart: kind = CollectiveKind::kAllGather; break;
      case Opcode::kAllReduce: case Opcode::kAllReduceStart: kind = CollectiveKind::kAllReduce; break;
      case Opcode::kReduceScatter: kind = CollectiveKind::kReduceScatter; break;
      case Opcode::kAllToAll: kind = CollectiveKind::kAllToAll; break;
      default: kind = CollectiveKind::kCollectivePermute; break;
    }
    op.kind_name = std::string(CollectiveKindName(kind));
    double operand_bytes = 0;
    Value operand_value;
    for (const Instruction* o : i.operands()) {
      auto ov = ValueOf(f, o);
      if (!ov.ok()) return ov.error();
      operand_value.insert(operand_value.end(), ov->begin(), ov->end());
      if (o->shape().IsArray()) operand_bytes += static_cast<double>(o->shape().ByteSize());
      else if (o->shape().IsTuple()) operand_bytes += static_cast<double>(o->shape().ByteSize());
    }
    AddBuffers(operand_value, &op.uses);
    op.bytes = operand_bytes;
    // Result value: a -start with a tuple shape holds (operands, results, context...).
    const MemoryCategory cat = CategoryOf(i, CategoryOfValue(operand_value));
    Value v;
    const Shape& s = i.shape();
    const bool start_tuple = (i.opcode() == Opcode::kAllGatherStart || i.opcode() == Opcode::kCollectivePermuteStart ||
                              i.opcode() == Opcode::kGeneric) &&
                             s.IsTuple() && s.tuple.size() >= 2;
    if (start_tuple) {
      const int64_t n0 = LeafCount(s.tuple[0]);
      for (int64_t k = 0; k < n0; ++k) v.push_back(k < static_cast<int64_t>(operand_value.size()) ? operand_value[static_cast<size_t>(k)] : -1);
      Value r = NewValue(i, s.tuple[1], opt_.names ? op.name : std::string(), op_id, cat);
      v.insert(v.end(), r.begin(), r.end());
      AddBuffers(r, &op.defs);
      for (size_t e = 2; e < s.tuple.size(); ++e)
        for (int64_t k = 0; k < LeafCount(s.tuple[e]); ++k) v.push_back(-1);
    } else {
      v = NewValue(i, s, opt_.names ? op.name : std::string(), op_id, cat);
      AddBuffers(v, &op.defs);
    }
    f.values[&i] = v;
    f.op_of[&i] = op_id;
    // In place: all-reduce (same size), all-gather / reduce-scatter (operand 0, resized).
    if (opt_.in_place_reuse && op.defs.size() == 1) {
      ReuseCandidate rc;
      rc.op = op_id;
      rc.out = op.defs[0];
      if (kind == CollectiveKind::kAllReduce) {
        AddBuffers(operand_value, &rc.inputs);
      } else if ((kind == CollectiveKind::kAllGather || kind == CollectiveKind::kReduceScatter) && i.operand_count() >= 1) {
        auto ov = ValueOf(f, i.operand(0));
        if (ov.ok()) AddBuffers(*ov, &rc.inputs);
        rc.same_size_only = false;
      }
      if (!rc.inputs.empty()) reuse_.push_back(std::move(rc));
    }
    auto index = DistinctCollective(f, i, kind, operand_bytes);
    if (!index.ok()) return index.error();
    op.collective = *index;
    AddControlDeps(f, {&i}, op);
    FinalizeDeps(op);
    prog_->ops.push_back(std::move(op));
    op_source_.push_back(&i);
    return CheckBudget();
  }

  // The index of the distinct collective instruction `i` runs in prog_->collectives (added when new).
  // An instruction met again (a loop body's, once per unrolled iteration) is the same collective:
  // its participants and operand bytes depend on the instruction alone.
  Result<int32_t> DistinctCollective(const Frame& f, const Instruction& i, CollectiveKind kind, double operand_bytes) {
    if (auto known = collective_of_instruction_.find(&i);
        known != collective_of_instruction_.end() && known->second.first == operand_bytes) {
      return known->second.second;
    }
    // Who takes part: XLA's group modes (core/collectives/participants.h), so an empty
    // replica_groups without a channel_id on one replica is every device alone (no traffic).
    auto known = facts_.participants.find(&i);
    if (known == facts_.participants.end() || known->second.kind != static_cast<int>(kind) ||
        known->second.bytes != operand_bytes) {
      CollectiveKey key;
      key.kind = static_cast<int>(kind);
      key.bytes = operand_bytes;
      const int64_t replicas = std::max<int64_t>(1, module_.num_replicas);
      const int64_t devices = opt_.num_devices > 0 ? opt_.num_devices : replicas * std::max<int64_t>(1, module_.num_partitions);
      const int64_t partitions = std::max<int64_t>(1, devices / replicas);
      if (kind == CollectiveKind::kCollectivePermute) {
        auto pairs = CollectivePermutePairs(i, replicas, partitions);
        if (!pairs.ok()) return Error(Qualified(*f.comp, i, "") + ": " + pairs.error().message);
        key.pairs = std::move(*pairs);
      } else {
        auto groups = CollectiveParticipantGroups(i, replicas, partitions);
        if (!groups.ok()) return Error(Qualified(*f.comp, i, "") + ": " + groups.error().message);
        key.groups = std::move(*groups);
      }
      known = facts_.participants.insert_or_assign(&i, std::move(key)).first;
    }
    const CollectiveKey& key = known->second;
    auto it = collective_index_.find(key);
    if (it == collective_index_.end()) {
      CollectiveSpec spec;
      spec.kind = kind;
      spec.groups = key.groups;
      spec.pairs = key.pairs;
      spec.operand_bytes = operand_bytes;
      if (kind == CollectiveKind::kCollectivePermute) {
        // "{{a,b},...}" takes at least 6 characters a pair: past 333 pairs it is over 2000.
        if (6 * spec.pairs.size() + 1 <= 2000) spec.groups_text = SourceTargetPairsText(spec.pairs);
        if (spec.groups_text.empty() || spec.groups_text.size() > 2000)
          spec.groups_text = "(" + std::to_string(spec.pairs.size()) + " source-target pairs)";
      } else {
        spec.groups_text = ReplicaGroupsText(i.replica_groups, 2000);
      }
      it = collective_index_.emplace(key, static_cast<int32_t>(prog_->collectives.size())).first;
      prog_->collectives.push_back(std::move(spec));
    }
    collective_of_instruction_[&i] = {operand_bytes, it->second};
    return it->second;
  }

  Status RunConstant(Frame& f, const Instruction& i) {
    auto it = constants_.find(&i);
    if (it == constants_.end()) {
      Value v;
      std::vector<const Shape*> leaves;
      CollectLeaves(i.shape(), &leaves);
      for (size_t k = 0; k < leaves.size(); ++k) {
        if (!leaves[k]->IsArray()) {
          v.push_back(-1);
          continue;
        }
        Buffer b;
        b.name = Qualified(*f.comp, i, "");
        b.logical_bytes = LeafBytes(*leaves[k]);
        b.bytes = BufferBytes(*leaves[k]);
        b.category = MemoryCategory::kTemporaries;
        b.is_constant = true;
        v.push_back(AddBuffer(std::move(b)));
      }
      it = constants_.emplace(&i, std::move(v)).first;
    }
    f.values[&i] = it->second;
    return Status::Ok();
  }

  Result<Value> Expand(const Computation& comp, const std::vector<Value>& args, const std::string& iter, int depth) {
    if (depth > 64) return Error("computation " + comp.name() + ": calls nest deeper than 64 levels (recursion?)");
    Frame f;
    f.comp = &comp;
    f.plan = &PlanOf(comp);
    f.args = &args;
    f.iter = iter;
    for (const Step& s : StepsOf(comp, *f.plan)) {
      if (s.kind == Step::Kind::kGroup) {
        if (Status st = RunGroup(f, f.plan->groups[static_cast<size_t>(s.group)]); !st.ok()) return st.error();
        continue;
      }
      const Instruction& i = *s.inst;
      switch (f.plan->role.find(&i)->second) {
        case Role::kAlias:
        case Role::kInline:
        case Role::kParameter: {
          auto v = ValueOf(f, &i);
          if (!v.ok()) return v.error();
          break;
        }
        case Role::kConstant:
          if (Status st = RunConstant(f, i); !st.ok()) return st.error();
          break;
        case Role::kCollective:
          if (Status st = RunCollective(f, i); !st.ok()) return st.error();
          break;
        case Role::kWhile: {
          if (Status st = RunWhile(f, i, depth); !st.ok()) return st.error();
          break;
        }
        case Role::kCall: {
          const Computation* callee = i.to_apply();
          if (!callee) return Error(i.name() + ": call without a computation");
          std::vector<Value> a;
          for (const Instruction* o : i.operands()) {
            auto ov = ValueOf(f, o);
            if (!ov.ok()) return ov.error();
            a.push_back(std::move(ov).value());
          }
          auto r = Expand(*callee, a, iter, depth + 1);
          if (!r.ok()) return r.error();
          f.values[&i] = std::move(r).value();
          break;
        }
        case Role::kConditional: {
          const auto& branches = i.called_computations();
          if (branches.empty() || i.operand_count() < 1 + static_cast<int64_t>(branches.size())) {
            return Error(i.name() + ": conditional needs a predicate and one operand per branch");
          }
          size_t b = 0;
          if (auto c = ScalarConstant(i.operand(0))) {
            if (i.operand(0)->shape().type == PrimitiveType::kPred) b = *c != 0 ? 0 : 1;
            else b = *c < 0 || *c >= static_cast<double>(branches.size()) ? branches.size() - 1 : static_cast<size_t>(*c);
            b = std::min(b, branches.size() - 1);
          } else {
            prog_->warnings.push_back("conditional " + Qualified(*f.comp, i, iter) +
                                      ": the branch taken is not known; simulated branch 0");
          }
          auto ov = ValueOf(f, i.operand(static_cast<int64_t>(1 + b)));
          if (!ov.ok()) return ov.error();
          std::vector<Value> a{std::move(ov).value()};
          auto r = Expand(*branches[b], a, iter, depth + 1);
          if (!r.ok()) return r.error();
          f.values[&i] = std::move(r).value();
          break;
        }
        default: break;
      }
    }
    if (!comp.root()) return Error("computation " + comp.name() + " has no root");
    return ValueOf(f, comp.root());
  }

  Status RunWhile(Frame& f, const Instruction& w, int depth) {
    const Computation* cond = w.while_condition();
    const Computation* body = w.while_body();
    if (!cond || !body) return Error(w.name() + ": while needs a condition and a body");
    if (w.operand_count() != 1) return Error(w.name() + ": while takes one operand");
    int64_t trips = 0;
    if (auto t = WhileTripCount(w)) {
      trips = *t;
    } else {
      trips = opt_.default_trip_count;
      prog_->warnings.push_back("while " + Qualified(*f.comp, w, f.iter) + ": trip count unknown; assumed " +
                                std::to_string(trips));
    }
    if (trips > opt_.max_exec_ops) {
      return Error("while " + Qualified(*f.comp, w, f.iter) + " runs " + std::to_string(trips) +
                   " times, more than max_exec_ops (" + std::to_string(opt_.max_exec_ops) + ") allows unrolled");
    }
    auto init = ValueOf(f, w.operand(0));
    if (!init.ok()) return init.error();
    Value state = std::move(init).value();
    const int32_t loop = static_cast<int32_t>(prog_->loops.size());
    prog_->loops.push_back({Qualified(*f.comp, w, f.iter), body->name(), trips, cur_loop_, cur_iteration_});
    const int32_t outer_loop = cur_loop_;
    const int64_t outer_iteration = cur_iteration_;
    cur_loop_ = loop;
    // Iterations 0-3 are expanded; when the third repeats the second ("Loop replay" below),
    // iterations 4 .. trips-1 are written from the third instead of expanded again.
    std::vector<Marks> marks;
    std::vector<Value> states;
    bool replay = false;
    for (int64_t t = 0; t <= trips; ++t) {
      cur_iteration_ = t;
      if (replay && t < trips) {
        ReplayIteration(marks, f.iter, loop, t);
        ++prog_->replayed_iterations;
        state = AffineValue(marks[2], marks[3], marks[4], states[3], t - 3);
        if (Status st = CheckBudget(); !st.ok()) return st;
        continue;
      }
      if (t <= 4 && opt_.replay_loop_iterations) marks.push_back(Mark());
      const std::string it = f.iter + "[" + std::to_string(t) + "]";
      std::vector<Value> a{state};
      auto c = Expand(*cond, a, it, depth + 1);
      if (!c.ok()) return c.error();
      if (t == trips) break;
      auto r = Expand(*body, a, it, depth + 1);
      if (!r.ok()) return r.error();
      state = std::move(r).value();
      if (opt_.replay_loop_iterations && t <= 3) states.push_back(state);
      if (opt_.replay_loop_iterations && t == 3 && trips > 5) {
        marks.push_back(Mark());
        replay = IterationsRepeat(marks, states, f.iter, loop);
      }
    }
    cur_loop_ = outer_loop;
    cur_iteration_ = outer_iteration;
    f.values[&w] = state;
    return Status::Ok();
  }

  // ---- Loop replay ------------------------------------------------------------------------------
  // An unrolled iteration differs from the one before only in its ids (ops, buffers, nested loops:
  // those of the iteration and of the one before it shifted by an iteration's counts; older ones —
  // the values made before the loop, constants made once — the same), its iteration numbers and
  // the "[t]" of its names. Once the slice of iteration 3 (cond + body) is checked to be iteration
  // 2's under that rule, iterations 4 .. trips-1 are written from iteration 3's: no plan lookups,
  // value maps or categories again. A loop whose iterations differ otherwise (a state element
  // rotating through positions, one carried over two iterations, a new collective) is expanded
  // iteration by iteration as before. The programs are the same either way
  // (tests/test_engine.cpp, LoopReplayBuildsTheSameProgram).
  struct Marks {
    size_t ops = 0, buffers = 0, loops = 0, reuse = 0, warnings = 0, collectives = 0;
  };
  Marks Mark() const {
    return {prog_->ops.size(), prog_->buffers.size(), prog_->loops.size(), reuse_.size(), prog_->warnings.size(),
            prog_->collectives.size()};
  }

  // `s` (a name of iteration `from` of a loop whose frame iterates as `outer`) as iteration `to`'s:
  // names are "<base><outer>[from]<nested suffixes>" with no '[' in the base.
  // (Read in place and written once: every op, buffer and loop of each replayed iteration is renamed.)
  static std::optional<std::string> Renamed(const std::string& s, const std::string& outer, int64_t from, int64_t to) {
    const size_t pos = s.find('[');
    if (pos == std::string::npos || s.compare(pos, outer.size(), outer) != 0) return std::nullopt;
    const size_t open = pos + outer.size();  // "[from]" follows
    char buf[24];
    const auto f = std::to_chars(buf, buf + sizeof buf, from);
    const size_t digits = static_cast<size_t>(f.ptr - buf);
    if (open >= s.size() || s[open] != '[' || s.compare(open + 1, digits, buf, digits) != 0) return std::nullopt;
    const size_t close = open + 1 + digits;
    if (close >= s.size() || s[close] != ']') return std::nullopt;
    const auto t = std::to_chars(buf, buf + sizeof buf, to);
    std::string out;
    out.reserve(s.size() + 8);
    out.append(s, 0, open + 1).append(buf, t.ptr).append(s, close, std::string::npos);
    return out;
  }

  // How ids move from an iteration to a later one: those from `lo` on (the iteration's and the
  // one's before it) by `m` iterations of `step`, older ones not at all.
  struct Shift {
    int64_t lo = 0, step = 0, m = 1;
    template <typename T>
    T operator()(T x) const {
      return static_cast<int64_t>(x) >= lo ? static_cast<T>(x + step * m) : x;
    }
    template <typename T>
    std::vector<T> operator()(const std::vector<T>& v) const {
      std::vector<T> out(v.size());
      for (size_t k = 0; k < v.size(); ++k) out[k] = (*this)(v[k]);
      return out;
    }
  };
  struct Shifts {
    Shift ops, buffers, loops;
  };
  // The shifts from the iteration starting at `from` (the one before it starting at `before`) to
  // `m` iterations later.
  static Shifts ShiftsOf(const Marks& before, const Marks& from, const Marks& next, int64_t m) {
    return {{static_cast<int64_t>(before.ops), static_cast<int64_t>(next.ops - from.ops), m},
            {static_cast<int64_t>(before.buffers), static_cast<int64_t>(next.buffers - from.buffers), m},
            {static_cast<int64_t>(before.loops), static_cast<int64_t>(next.loops - from.loops), m}};
  }

  // Iteration `k`'s op `x` as iteration `k + m`'s (loop `loop` is the one unrolled).
  ExecOp ShiftedOp(const ExecOp& x, const Shifts& s, int32_t loop, const std::string& outer, int64_t k, int64_t m) const {
    ExecOp op;
    op.kind = x.kind;
    if (!x.name.empty()) op.name = Renamed(x.name, outer, k, k + m).value_or(std::string());
    op.kind_name = x.kind_name;
    op.duration_s = x.duration_s;
    op.flops = x.flops;
    op.bytes = x.bytes;
    op.collective = x.collective;
    op.deps = s.ops(x.deps);
    op.uses = s.buffers(x.uses);
    op.defs = s.buffers(x.defs);
    op.members = x.members;
    op.loop = s.loops(x.loop);
    op.iteration = x.loop == loop ? x.iteration + m : x.iteration;
    op.recompute = x.recompute;
    return op;
  }
  Buffer ShiftedBuffer(const Buffer& x, const Shifts& s, const std::string& outer, int64_t k, int64_t m) const {
    Buffer b = x;
    if (!x.name.empty()) b.name = Renamed(x.name, outer, k, k + m).value_or(std::string());
    b.def_op = s.ops(x.def_op);
    return b;
  }
  ExecLoop ShiftedLoop(const ExecLoop& x, const Shifts& s, int32_t loop, const std::string& outer, int64_t k, int64_t m) const {
    ExecLoop l = x;
    l.name = Renamed(x.name, outer, k, k + m).value_or(std::string());
    l.parent = s.loops(x.parent);
    l.parent_iteration = x.parent == loop ? x.parent_iteration + m : x.parent_iteration;
    return l;
  }

  // Whether iteration 3 is iteration 2 shifted (marks[k]: where iteration k starts; marks[4]: the
  // end of iteration 3; states[k]: the loop state after iteration k).
  bool IterationsRepeat(const std::vector<Marks>& m, const std::vector<Value>& states, const std::string& outer,
                        int32_t loop) const {
    if (m.size() != 5 || states.size() != 4) return false;
    const Marks &m1 = m[1], &m2 = m[2], &m3 = m[3], &m4 = m[4];
    if (m4.ops - m3.ops != m3.ops - m2.ops || m4.buffers - m3.buffers != m3.buffers - m2.buffers ||
        m4.loops - m3.loops != m3.loops - m2.loops || m4.reuse - m3.reuse != m3.reuse - m2.reuse ||
        m4.warnings - m3.warnings != m3.warnings - m2.warnings || m4.collectives != m2.collectives)
      return false;
    const Shifts s = ShiftsOf(m1, m2, m3, 1);
    for (size_t k = 0; k < m3.ops - m2.ops; ++k) {
      const ExecOp& a = prog_->ops[m2.ops + k];
      const ExecOp& b = prog_->ops[m3.ops + k];
      if (!a.in_place.empty() || !b.in_place.empty()) return false;
      if (a.loop == loop && a.iteration != 2) return false;
      // The same group or collective at the same place (what equal names say, when ops are named).
      if (op_source_[m2.ops + k] != op_source_[m3.ops + k]) return false;
      const ExecOp x = ShiftedOp(a, s, loop, outer, 2, 1);
      const bool named = opt_.names || x.kind == ExecKind::kCollective;
      if ((named && x.name.empty()) || x.name != b.name || x.kind != b.kind || x.kind_name != b.kind_name ||
          x.duration_s != b.duration_s || x.flops != b.flops || x.bytes != b.bytes || x.collective != b.collective ||
          x.deps != b.deps || x.uses != b.uses || x.defs != b.defs || x.members != b.members || x.loop != b.loop ||
          x.iteration != b.iteration || x.recompute != b.recompute)
        return false;
    }
    for (size_t k = 0; k < m3.buffers - m2.buffers; ++k) {
      const Buffer& a = prog_->buffers[m2.buffers + k];
      const Buffer& b = prog_->buffers[m3.buffers + k];
      const Buffer x = ShiftedBuffer(a, s, outer, 2, 1);
      if ((opt_.names && x.name.empty()) || x.name != b.name || x.bytes != b.bytes || x.logical_bytes != b.logical_bytes ||
          x.category != b.category || x.def_op != b.def_op || x.is_parameter != b.is_parameter ||
          x.is_constant != b.is_constant || x.is_output != b.is_output || x.donated != b.donated)
        return false;
    }
    for (size_t k = 0; k < m3.loops - m2.loops; ++k) {
      const ExecLoop& a = prog_->loops[m2.loops + k];
      const ExecLoop& b = prog_->loops[m3.loops + k];
      const ExecLoop x = ShiftedLoop(a, s, loop, outer, 2, 1);
      if (x.name.empty() || x.name != b.name || x.body != b.body || x.trips != b.trips || x.parent != b.parent ||
          x.parent_iteration != b.parent_iteration)
        return false;
    }
    for (size_t k = 0; k < m3.reuse - m2.reuse; ++k) {
      const ReuseCandidate& a = reuse_[m2.reuse + k];
      const ReuseCandidate& b = reuse_[m3.reuse + k];
      if (s.ops(a.op) != b.op || s.buffers(a.out) != b.out || s.buffers(a.inputs) != b.inputs ||
          a.same_size_only != b.same_size_only)
        return false;
    }
    for (size_t k = 0; k < m3.warnings - m2.warnings; ++k) {
      auto w = Renamed(prog_->warnings[m2.warnings + k], outer, 2, 3);
      if (!w || *w != prog_->warnings[m3.warnings + k]) return false;
    }
    if (AffineValue(m1, m2, m3, states[2], 1) != states[3]) return false;
    return true;
  }

  // The loop state after iteration `m` iterations after the one `state` follows.
  static Value AffineValue(const Marks& before, const Marks& from, const Marks& next, const Value& state, int64_t m) {
    const Shift b = ShiftsOf(before, from, next, m).buffers;
    Value v(state.size());
    for (size_t k = 0; k < state.size(); ++k) v[k] = state[k] < 0 ? state[k] : b(state[k]);
    return v;
  }

  // Writes iteration `t` (>= 4) from iteration 3 (checked by IterationsRepeat).
  void ReplayIteration(const std::vector<Marks>& m, const std::string& outer, int32_t loop, int64_t t) {
    const Marks &m2 = m[2], &m3 = m[3], &m4 = m[4];
    const Shifts s = ShiftsOf(m2, m3, m4, t - 3);
    for (size_t k = m3.ops; k < m4.ops; ++k) {
      ExecOp op = ShiftedOp(prog_->ops[k], s, loop, outer, 3, t - 3);
      prog_->ops.push_back(std::move(op));
      op_source_.push_back(op_source_[k]);
    }
    for (size_t k = m3.buffers; k < m4.buffers; ++k) {
      Buffer b = ShiftedBuffer(prog_->buffers[k], s, outer, 3, t - 3);
      prog_->buffers.push_back(std::move(b));
    }
    for (size_t k = m3.loops; k < m4.loops; ++k) {
      ExecLoop l = ShiftedLoop(prog_->loops[k], s, loop, outer, 3, t - 3);
      prog_->loops.push_back(std::move(l));
    }
    for (size_t k = m3.reuse; k < m4.reuse; ++k) {
      const ReuseCandidate& c = reuse_[k];
      ReuseCandidate r{s.ops(c.op), s.buffers(c.out), s.buffers(c.inputs), c.same_size_only};
      reuse_.push_back(std::move(r));
    }
    for (size_t k = m3.warnings; k < m4.warnings; ++k) {
      std::string w = Renamed(prog_->warnings[k], outer, 3, t).value_or(std::string());
      prog_->warnings.push_back(std::move(w));
    }
  }

  // Chooses in-place reuse now that every buffer's last user (in issue order) is known.
  void FinishInPlace() {
    const size_t nb = prog_->buffers.size();
    std::vector<int32_t> last_user(nb, -1);
    for (size_t o = 0; o < prog_->ops.size(); ++o)
      for (int32_t b : prog_->ops[o].uses) last_user[static_cast<size_t>(b)] = std::max(last_user[static_cast<size_t>(b)], static_cast<int32_t>(o));
    std::vector<char> taken(nb, 0), filled(nb, 0);
    for (const ReuseCandidate& rc : reuse_) {
      if (filled[static_cast<size_t>(rc.out)]) continue;
      const Buffer& out = prog_->buffers[static_cast<size_t>(rc.out)];
      for (int32_t x : rc.inputs) {
        const Buffer& in = prog_->buffers[static_cast<size_t>(x)];
        if (taken[static_cast<size_t>(x)] || last_user[static_cast<size_t>(x)] != rc.op) continue;
        if (in.is_output || in.is_constant || (in.is_parameter && !in.donated)) continue;
        if (rc.same_size_only && in.bytes != out.bytes) continue;
        taken[static_cast<size_t>(x)] = 1;
        filled[static_cast<size_t>(rc.out)] = 1;
        prog_->ops[static_cast<size_t>(rc.op)].in_place.emplace_back(rc.out, x);
        break;
      }
    }
  }

  const Module& module_;
  const ChipSpec& chip_;
  const ExecProgramOptions& opt_;
  ExecProgram* prog_ = nullptr;
  ModuleFacts& facts_;
  std::unordered_map<const Computation*, std::vector<Step>> memory_steps_;  // StepsOf
  std::unordered_map<const Instruction*, Value> constants_;
  std::vector<std::pair<int32_t, double>> sources_scratch_;  // RunGroup: one operand's windowed sources
  std::map<CollectiveKey, int32_t> collective_index_;
  std::unordered_map<const Instruction*, std::pair<double, int32_t>> collective_of_instruction_;  // -> (operand bytes, index)
  std::vector<ReuseCandidate> reuse_;
  // Per op (parallel to prog_->ops): the group or collective instruction it runs, which identifies
  // it without its name (loop replay compares iterations by it).
  std::vector<const void*> op_source_;
  int32_t cur_loop_ = -1;       // the innermost loop being unrolled (ExecProgram::loops)
  int64_t cur_iteration_ = 0;   // and its iteration
};

// One marker word of rematerialisation (IsRematerialization).
bool IsRematMarker(std::string_view w) {
  return w == "recompute" || w == "remat" || w == "rematted_computation" || w == "checkpoint" ||
         (w.size() > 5 && w.substr(0, 5) == "remat" && w.find_first_not_of("0123456789", 5) == std::string_view::npos);
}

}  // namespace

bool IsRematerialization(const Instruction& i) {
  // XLA's clones: "<name>.remat", "<name>.remat2".
  const std::string& name = i.name();
  for (size_t start = name.find('.'); start != std::string::npos; start = name.find('.', start + 1)) {
    const size_t end = name.find('.', start + 1);
    if (IsRematMarker(std::string_view(name).substr(start + 1, end == std::string::npos ? std::string::npos : end - start - 1)))
      return true;
  }
  // Every marker contains one of these words: without them no part of the op_name is one. Metadata
  // without a backslash holds its op_name as written (nothing to unescape), so when it has none of
  // the words neither has the op_name, which is then not parsed (most instructions, every build).
  auto has_word = [](std::string_view s) {
    return s.find("remat") != std::string_view::npos || s.find("recompute") != std::string_view::npos ||
           s.find("checkpoint") != std::string_view::npos;
  };
  if (i.metadata.find('\\') == std::string::npos && !has_word(i.metadata)) return false;
  const std::string op_name = i.op_name();
  if (!has_word(op_name)) return false;
  size_t start = 0;
  while (start <= op_name.size()) {
    size_t end = op_name.find('/', start);
    if (end == std::string::npos) end = op_name.size();
    std::string_view part = std::string_view(op_name).substr(start, end - start);
    // JAX wraps transformations: "jvp(remat)", "checkpoint[...]": the word before '(' / '['.
    const size_t cut = part.find_first_of("([");
    if (IsRematMarker(part) || (cut != std::string_view::npos && IsRematMarker(part.substr(0, cut)))) return true;
    // Inside parentheses too: "transpose(jvp(rematted_computation))".
    size_t k = 0;
    while ((k = part.find_first_of("([", k)) != std::string_view::npos) {
      ++k;
      const size_t e = part.find_first_of(")]([", k);
      if (IsRematMarker(part.substr(k, e == std::string_view::npos ? std::string_view::npos : e - k))) return true;
    }
    start = end + 1;
  }
  return false;
}

int64_t SequentialPeakBytes(const ExecProgram& program) { return ComputeSequentialPeak(program).peak_bytes; }

std::optional<int64_t> RematerializationTarget(const ExecProgram& program, const ChipSpec& chip,
                                               const ExecProgramOptions& options) {
  const double target = options.rematerialize_limit_bytes > 0 ? static_cast<double>(options.rematerialize_limit_bytes)
                                                               : chip.device_hbm_bytes();
  if (!options.rematerialize || target <= 0) return std::nullopt;
  // The memory-limit schedule measured its candidates' peaks: the one it chose peaks at the lower.
  const std::array<int64_t, 2>& tried = program.sequential_peak_bytes;
  const int64_t peak = tried[0] <= 0 ? SequentialPeakBytes(program) : tried[1] > 0 ? std::min(tried[0], tried[1]) : tried[0];
  if (static_cast<double>(peak) <= target) return std::nullopt;
  return static_cast<int64_t>(target);
}

void RematerializeTo(ExecProgram* program, int64_t target_bytes) {
  const RematerializationResult r = RematerializeToFit(program, target_bytes);
  program->rematerialized_values = r.values;
  program->rematerialized_bytes = r.bytes;
  program->rematerialized_peak_bytes = r.peak_after;
}

Result<ExecProgram> BuildExecProgram(const Module& module, const ChipSpec& chip, const ExecProgramOptions& options) {
  if (options.default_trip_count < 0) return Error("default_trip_count must be >= 0");
  if (options.max_exec_ops < 1) return Error("max_exec_ops must be >= 1");
  // Rematerialisation comes last, on the order chosen (XLA runs it after scheduling).
  auto rematerialize = [&](ExecProgram* p) {
    if (auto target = RematerializationTarget(*p, chip, options)) RematerializeTo(p, *target);
  };
  // The program built in `order`, without rematerialisation (what the builds share: ModuleFacts).
  ModuleFacts facts(module);
  auto expand = [&](ScheduleKind order) -> Result<ExecProgram> {
    ExecProgramOptions each = options;
    each.schedule = order;
    each.rematerialize = false;
    ExecProgram program;
    program.schedule = order;
    Expander ex(module, chip, each, &facts);
    if (Status s = ex.Run(&program); !s.ok()) return s.error();
    return program;
  };
  if (options.schedule == ScheduleKind::kMemoryLimit) {
    // As XLA's scheduler under a memory limit: the program order as long as it fits the device's
    // HBM (ops run one after another); when it does not, the memory list schedule if that peaks
    // lower.
    const double limit = chip.device_hbm_bytes();
    auto in_order = expand(ScheduleKind::kProgramOrder);
    if (!in_order.ok()) return in_order;
    in_order->sequential_peak_bytes[0] = SequentialPeakBytes(*in_order);
    if (limit <= 0 || static_cast<double>(in_order->sequential_peak_bytes[0]) <= limit) {
      rematerialize(&*in_order);
      return in_order;
    }
    // (The memory list schedule is tried against HBM; rematerialisation below against its own target.)
    auto listed = expand(ScheduleKind::kMemoryList);
    if (!listed.ok()) return listed;
    const int64_t peak_listed = SequentialPeakBytes(*listed);
    const bool take_listed = peak_listed < in_order->sequential_peak_bytes[0];
    ExecProgram chosen = take_listed ? std::move(*listed) : std::move(*in_order);
    chosen.sequential_peak_bytes = {in_order->sequential_peak_bytes[0], peak_listed};
    rematerialize(&chosen);
    return chosen;
  }
  auto program = expand(options.schedule);
  if (!program.ok()) return program;
  rematerialize(&*program);
  return program;
}

}  // namespace shardscope::sim
