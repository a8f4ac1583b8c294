#include "partitioner/while_loop_all_reduce_code_motion.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/collectives/participants.h"
#include "core/collectives/reduction.h"
#include "core/ir/replica_groups.h"

namespace shardscope {

namespace {

using Labels = std::vector<int64_t>;  // per global device: equal labels, equal values

// ---- which values are the same on which devices -------------------------------------------------
//
// For every instruction of a loop body, a label per device such that two devices with the same
// label hold the same value. Sources of difference are partition-id and replica-id; a small scalar
// integer computed from them alone is evaluated per device (so table[partition-id] is labelled by
// the table's entries: the partitioner's offsets are the same within a row of the mesh).
//
// A labelling is kept once, in canonical form (renumbered in order of first appearance, so equal
// partitions of the devices are equal vectors), and named by an id: instructions hold ids, and the
// join of two labellings is computed once per pair of ids. A 2048-device program labels thousands
// of instructions with a handful of distinct labellings.
class DeviceUniformity {
 public:
  using Id = int32_t;
  static constexpr Id kUniform = 0;
  static constexpr Id kDeviceIds = 1;

  DeviceUniformity(int64_t replicas, int64_t partitions)
      : replicas_(replicas), partitions_(partitions), devices_(replicas * partitions) {
    Intern(Labels(static_cast<size_t>(devices_), 0));
    Labels ids(static_cast<size_t>(devices_));
    for (int64_t d = 0; d < devices_; ++d) ids[static_cast<size_t>(d)] = d;
    Intern(std::move(ids));
  }

  // Labels of every instruction of `c`, its parameter's tuple elements labelled `param`
  // (one entry per element; a non-tuple parameter: one entry).
  void Analyse(const Computation& c, const std::vector<Id>& param) {
    for (const auto& owned : c.instructions()) Visit(*owned, param);
  }

  // The labelling of `x` (a tuple's: of its elements joined).
  Id Of(const Instruction* x) {
    auto it = labels_.find(x);
    if (it == labels_.end()) return kDeviceIds;
    Id out = kUniform;
    for (Id l : it->second) out = Join(out, l);
    return out;
  }
  const Labels& Get(Id id) const { return table_[static_cast<size_t>(id)]; }

  // The labelling that tells apart the devices either one tells apart.
  Id Join(Id a, Id b) {
    if (a == b || b == kUniform) return a;
    if (a == kUniform) return b;
    if (a == kDeviceIds || b == kDeviceIds) return kDeviceIds;
    const uint64_t key = static_cast<uint64_t>(std::min(a, b)) << 32 | static_cast<uint64_t>(std::max(a, b));
    auto it = joins_.find(key);
    if (it != joins_.end()) return it->second;
    const Labels& la = Get(a);
    const Labels& lb = Get(b);
    // Canonical labels count from 0: each pair numbered through a table when the pairs are few
    // (a labelling with few values joined with another), else through a map.
    const size_t na = static_cast<size_t>(*std::max_element(la.begin(), la.end())) + 1;
    const size_t nb = static_cast<size_t>(*std::max_element(lb.begin(), lb.end())) + 1;
    Labels out(la.size());
    std::vector<int64_t> id(na * nb <= 4 * la.size() + 64 ? na * nb : 0, -1);
    std::unordered_map<uint64_t, int64_t> ids;
    int64_t next = 0;
    for (size_t d = 0; d < la.size(); ++d) {
      const uint64_t pair = static_cast<uint64_t>(la[d]) * nb + static_cast<uint64_t>(lb[d]);
      int64_t& k = id.empty() ? ids.emplace(pair, -1).first->second : id[pair];
      if (k < 0) k = next++;
      out[d] = k;
    }
    const Id r = Intern(std::move(out));
    joins_.emplace(key, r);
    return r;
  }

  static bool SameWithin(const Labels& l, const std::vector<std::vector<int64_t>>& groups) {
    for (const auto& g : groups)
      for (int64_t d : g)
        if (d < 0 || static_cast<size_t>(d) >= l.size() || l[static_cast<size_t>(d)] != l[static_cast<size_t>(g[0])])
          return false;
    return true;
  }

 private:
  // Renumbered in order of first appearance (so equal partitions compare equal).
  static Labels Canonical(const Labels& a) {
    Labels out(a.size());
    if (a.empty()) return out;
    const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
    if (*lo >= 0 && *hi < 4 * static_cast<int64_t>(a.size()) + 16) {
      std::vector<int64_t> id(static_cast<size_t>(*hi) + 1, -1);
      int64_t next = 0;
      for (size_t d = 0; d < a.size(); ++d) {
        int64_t& k = id[static_cast<size_t>(a[d])];
        if (k < 0) k = next++;
        out[d] = k;
      }
      return out;
    }
    std::map<int64_t, int64_t> ids;
    for (size_t d = 0; d < a.size(); ++d) out[d] = ids.emplace(a[d], ids.size()).first->second;
    return out;
  }

  // The id of a canonical labelling.
  Id Intern(Labels canonical) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : canonical) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    auto& bucket = index_[h];
    for (Id id : bucket)
      if (table_[static_cast<size_t>(id)] == canonical) return id;
    const Id id = static_cast<Id>(table_.size());
    table_.push_back(std::move(canonical));
    bucket.push_back(id);
    return id;
  }
  Id InternAny(const Labels& l) { return Intern(Canonical(l)); }

  static bool SingleElementInteger(const Instruction& x) {
    const Shape& s = x.shape();
    if (!s.IsArray() || IsFloatingPoint(s.type) || s.type == PrimitiveType::kPred) return false;
    for (int64_t d : s.dims)
      if (d != 1) return false;
    return true;
  }

  bool ReadsDeviceId(const Computation* c) {
    auto it = reads_device_id_.find(c);
    if (it != reads_device_id_.end()) return it->second;
    reads_device_id_[c] = false;  // recursion guard
    bool reads = false;
    for (const auto& i : c->instructions()) {
      if (i->opcode() == Opcode::kPartitionId || i->opcode() == Opcode::kReplicaId || i->opcode() == Opcode::kRng) reads = true;
      for (const Computation* callee : i->called_computations()) reads = reads || ReadsDeviceId(callee);
    }
    return reads_device_id_[c] = reads;
  }

  // Per-device value of a single-element integer computed from constants and device ids.
  std::optional<std::vector<int64_t>> ValueOf(const Instruction& x) {
    auto known = [&](int64_t k) -> const std::vector<int64_t>* {
      auto it = values_.find(x.operand(k));
      return it == values_.end() ? nullptr : &it->second;
    };
    std::vector<int64_t> v(static_cast<size_t>(devices_));
    switch (x.opcode()) {
      case Opcode::kPartitionId:
        for (int64_t d = 0; d < devices_; ++d) v[static_cast<size_t>(d)] = d % partitions_;
        return v;
      case Opcode::kReplicaId:
        for (int64_t d = 0; d < devices_; ++d) v[static_cast<size_t>(d)] = d / partitions_;
        return v;
      case Opcode::kConstant:
        if (x.literal.values.size() != 1) return std::nullopt;
        std::fill(v.begin(), v.end(), static_cast<int64_t>(x.literal.values[0]));
        return v;
      case Opcode::kReshape: case Opcode::kBitcast: case Opcode::kConvert: case Opcode::kCopy: case Opcode::kBroadcast:
        if (const auto* a = known(0)) return *a;
        return std::nullopt;
      case Opcode::kAdd: case Opcode::kSubtract: case Opcode::kMultiply: case Opcode::kDivide: case Opcode::kRemainder:
      case Opcode::kMaximum: case Opcode::kMinimum: {
        const auto* a = known(0);
        const auto* b = known(1);
        if (!a || !b) return std::nullopt;
        for (size_t d = 0; d < v.size(); ++d) {
          const int64_t p = (*a)[d], q = (*b)[d];
          switch (x.opcode()) {
            case Opcode::kAdd: v[d] = p + q; break;
            case Opcode::kSubtract: v[d] = p - q; break;
            case Opcode::kMultiply: v[d] = p * q; break;
            case Opcode::kDivide: if (q == 0) return std::nullopt; v[d] = p / q; break;
            case Opcode::kRemainder: if (q == 0) return std::nullopt; v[d] = p % q; break;
            case Opcode::kMaximum: v[d] = std::max(p, q); break;
            default: v[d] = std::min(p, q); break;
          }
        }
        return v;
      }
      case Opcode::kDynamicSlice: {
        // table[index] of a rank-1 constant table.
        const Instruction* table = x.operand(0);
        if (table->opcode() != Opcode::kConstant || table->shape().rank() != 1 || x.operand_count() != 2) return std::nullopt;
        const auto& t = table->literal.values;
        const auto* index = known(1);
        if (!index || t.empty() || static_cast<int64_t>(t.size()) != table->shape().dim(0)) return std::nullopt;
        for (size_t d = 0; d < v.size(); ++d) {
          const int64_t i = std::clamp<int64_t>((*index)[d], 0, static_cast<int64_t>(t.size()) - 1);
          v[d] = static_cast<int64_t>(t[static_cast<size_t>(i)]);
        }
        return v;
      }
      default:
        return std::nullopt;
    }
  }

  void Visit(const Instruction& x, const std::vector<Id>& param) {
    std::vector<Id>& out = labels_[&x];
    out.clear();
    if (SingleElementInteger(x)) {
      if (auto v = ValueOf(x)) {
        out.push_back(InternAny(*v));
        values_[&x] = std::move(*v);
        return;
      }
    }
    values_.erase(&x);
    switch (x.opcode()) {
      case Opcode::kParameter:
        if (param.empty()) out.push_back(kDeviceIds);
        else out = param;
        return;
      case Opcode::kGetTupleElement: {
        auto it = labels_.find(x.operand(0));
        if (it != labels_.end() && it->second.size() > 1 && x.tuple_index >= 0 &&
            static_cast<size_t>(x.tuple_index) < it->second.size()) {
          out.push_back(it->second[static_cast<size_t>(x.tuple_index)]);
        } else {
          out.push_back(Of(x.operand(0)));
        }
        return;
      }
      case Opcode::kTuple: {
        std::vector<Id> elements;
        for (const Instruction* o : x.operands()) elements.push_back(Of(o));
        labels_[&x] = std::move(elements);
        return;
      }
      case Opcode::kConstant: case Opcode::kIota:
        out.push_back(kUniform);
        return;
      case Opcode::kPartitionId: case Opcode::kReplicaId: case Opcode::kRng:
      case Opcode::kCollectivePermute: case Opcode::kReduceScatter: case Opcode::kAllToAll:
        out.push_back(kDeviceIds);
        return;
      case Opcode::kAllReduce: case Opcode::kAllGather: {
        // The same within each participant group.
        auto groups = CollectiveParticipantGroups(x, replicas_, partitions_);
        if (!groups.ok()) {
          out.push_back(kDeviceIds);
          return;
        }
        Labels l = Get(kDeviceIds);
        for (const auto& g : *groups)
          for (int64_t d : g)
            if (d >= 0 && d < devices_) l[static_cast<size_t>(d)] = devices_ + g[0];
        out.push_back(InternAny(l));
        return;
      }
      default:
        break;
    }
    for (const Computation* c : x.called_computations()) {
      if (ReadsDeviceId(c)) {
        out.push_back(kDeviceIds);
        return;
      }
    }
    // A deterministic function of its operands.
    Id l = kUniform;
    for (const Instruction* o : x.operands()) l = Join(l, Of(o));
    out.push_back(l);
  }

  int64_t replicas_, partitions_, devices_;
  std::vector<Labels> table_;                                  // id -> canonical labelling
  std::unordered_map<uint64_t, std::vector<Id>> index_;        // hash -> ids
  std::unordered_map<uint64_t, Id> joins_;                     // (a, b) -> join
  std::unordered_map<const Instruction*, std::vector<Id>> labels_;
  std::unordered_map<const Instruction*, std::vector<int64_t>> values_;
  std::unordered_map<const Computation*, bool> reads_device_id_;
};

// ---- the pattern --------------------------------------------------------------------------------

bool IsSumAllReduce(const Instruction& x) {
  if (x.opcode() != Opcode::kAllReduce || x.operand_count() != 1 || !x.shape().IsArray()) return false;
  auto kind = MatchReduction(x.to_apply());
  return kind && *kind == ReductionKind::kSum;
}

bool IsZero(const Instruction* x) {
  while (x->opcode() == Opcode::kBroadcast || x->opcode() == Opcode::kReshape || x->opcode() == Opcode::kCopy ||
         x->opcode() == Opcode::kConvert || x->opcode() == Opcode::kSlice || x->opcode() == Opcode::kDynamicSlice)
    x = x->operand(0);
  if (x->opcode() != Opcode::kConstant || x->literal.values.empty()) return false;
  return std::all_of(x->literal.values.begin(), x->literal.values.end(), [](double v) { return v == 0; });
}

// One carried element's accumulation, as found in the body.
struct Accumulation {
  int64_t index = 0;
  std::string kind = "add";
  std::vector<Instruction*> all_reduces;  // the contributions' leaves
  std::vector<const Instruction*> scatter_indices;
  std::vector<std::vector<int64_t>> groups;
};

class LoopMatcher {
 public:
  LoopMatcher(const Module& module, const Instruction* loop) : module_(module), body_(loop->while_body()) {}

  // The accumulation of element k, or the reason there is none (reasons name the all-reduces met).
  Result<Accumulation> Match(int64_t k, const std::vector<std::vector<Instruction*>>& buffer_gtes) {
    acc_ = Accumulation{};
    acc_.index = k;
    chain_.clear();
    tree_.clear();
    depends_.clear();
    met_.clear();
    inner_.clear();
    buffer_ = &buffer_gtes[static_cast<size_t>(k)];
    Instruction* root = body_->root();
    Instruction* top = root->operand(k);
    if (buffer_->empty()) return Error("the loop does not read its element " + std::to_string(k));
    int root_uses = 0;
    for (Instruction* o : root->operands()) root_uses += o == top;
    if (root_uses != 1 || top->users().size() != 1) return Error("the accumulated value is also used elsewhere in the loop");
    if (Status s = Chain(top, root); !s.ok()) return s.error();
    if (acc_.all_reduces.empty()) return Error("no all-reduce is accumulated");
    for (const auto& [x, groups] : inner_)
      if (!Commute(acc_.groups, groups, Devices()))
        return Error(x->name() + " (" + std::string(OpcodeName(x->opcode())) +
                     ") moves data between devices the all-reduces sum over");
    for (Instruction* g : *buffer_)
      for (const Instruction* u : g->users())
        if (!chain_.count(u)) return Error("the accumulation buffer is also read by " + u->name());
    return acc_;
  }
  // The all-reduces met by the last Match (also when it failed).
  const std::vector<Instruction*>& met() const { return met_; }

 private:
  bool IsBuffer(const Instruction* x) const { return std::find(buffer_->begin(), buffer_->end(), x) != buffer_->end(); }

  // Whether `x` is the buffer or an accumulation (add, scatter) of it. Only such chains are
  // followed: a buffer read elsewhere is caught by the users check at the end of Match.
  bool DependsOnBuffer(const Instruction* x) {
    auto it = depends_.find(x);
    if (it != depends_.end()) return it->second;
    bool d = IsBuffer(x);
    if (!d && (x->opcode() == Opcode::kAdd || x->opcode() == Opcode::kScatter))
      for (const Instruction* o : x->operands()) d = d || DependsOnBuffer(o);
    return depends_[x] = d;
  }

  static bool OnlyUsedBy(const Instruction* x, const Instruction* user) {
    return std::all_of(x->users().begin(), x->users().end(), [&](const Instruction* u) { return u == user; });
  }

  Status Chain(Instruction* x, const Instruction* user) {
    if (!OnlyUsedBy(x, user)) return Error(x->name() + " is also used elsewhere in the loop");
    chain_.insert(x);
    if (IsBuffer(x)) return Status::Ok();
    if (x->opcode() == Opcode::kAdd) {
      const bool d0 = DependsOnBuffer(x->operand(0)), d1 = DependsOnBuffer(x->operand(1));
      if (d0 == d1) return Error(x->name() + " does not add a contribution to the buffer");
      Instruction* chain = x->operand(d0 ? 0 : 1);
      Instruction* contribution = x->operand(d0 ? 1 : 0);
      if (Status s = Contribution(contribution, x); !s.ok()) return s;
      return Chain(chain, x);
    }
    if (x->opcode() == Opcode::kScatter && x->operand_count() == 3) {
      auto kind = MatchReduction(x->to_apply());
      if (!kind || *kind != ReductionKind::kSum) return Error(x->name() + " scatters without adding");
      if (DependsOnBuffer(x->operand(1)) || DependsOnBuffer(x->operand(2)))
        return Error(x->name() + " reads the buffer in its indices or updates");
      acc_.kind = "scatter-add";
      acc_.scatter_indices.push_back(x->operand(1));
      if (Status s = Contribution(x->operand(2), x); !s.ok()) return s;
      return Chain(x->operand(0), x);
    }
    return Error("the buffer is updated by " + std::string(OpcodeName(x->opcode())) + " " + x->name() +
                 ", not accumulated");
  }

  Status Contribution(Instruction* x, const Instruction* user) {
    if (!OnlyUsedBy(x, user)) return Error(x->name() + " is also used elsewhere in the loop");
    if (!tree_.insert(x).second) return Error(x->name() + " is accumulated twice");
    switch (x->opcode()) {
      case Opcode::kAllReduce: {
        met_.push_back(x);
        if (!IsSumAllReduce(*x)) return Error(x->name() + " does not sum");
        auto groups = CollectiveParticipantGroups(*x, Replicas(), Partitions());
        if (!groups.ok()) return Error(x->name() + ": " + groups.error().message);
        if (acc_.all_reduces.empty()) {
          acc_.groups = *groups;
        } else {
          const Instruction& first = *acc_.all_reduces[0];
          if (*groups != acc_.groups || first.use_global_device_ids != x->use_global_device_ids ||
              first.channel_id.has_value() != x->channel_id.has_value() || first.shape().type != x->shape().type)
            return Error(x->name() + " reduces over other groups than " + first.name());
        }
        acc_.all_reduces.push_back(x);
        return Status::Ok();
      }
      case Opcode::kReshape: case Opcode::kTranspose: case Opcode::kBitcast: case Opcode::kCopy: case Opcode::kSlice:
      case Opcode::kBroadcast:
        return Contribution(x->operand(0), x);
      case Opcode::kConcatenate: case Opcode::kAdd:
        for (Instruction* o : x->operands())
          if (Status s = Contribution(o, x); !s.ok()) return s;
        return Status::Ok();
      case Opcode::kAllToAll: case Opcode::kAllGather: {
        // A resharding between the sum and the accumulation (another mesh axis): linear, and it
        // commutes with the sum when it moves data the same way within every summed group.
        if (x->operand_count() != 1 || !x->shape().IsArray()) break;
        auto groups = CollectiveParticipantGroups(*x, Replicas(), Partitions());
        if (!groups.ok()) return Error(x->name() + ": " + groups.error().message);
        inner_.emplace_back(x, *groups);
        return Contribution(x->operand(0), x);
      }
      default:
        break;
    }
    NoteAllReducesBelow(x, 6);
    return Error("the contribution " + x->name() + " (" + std::string(OpcodeName(x->opcode())) +
                     ") is not a sum of all-reduces");
  }

  int64_t Replicas() const { return std::max<int64_t>(1, module_.num_replicas); }
  int64_t Partitions() const { return std::max<int64_t>(1, module_.num_partitions); }
  int64_t Devices() const { return Replicas() * Partitions(); }

  // The reason of a failed match also belongs to the all-reduces a few ops below it.
  void NoteAllReducesBelow(Instruction* x, int depth) {
    for (Instruction* o : x->operands()) {
      if (o->opcode() == Opcode::kAllReduce) met_.push_back(o);
      else if (depth > 0) NoteAllReducesBelow(o, depth - 1);
    }
  }

  // Whether a collective over `inner` groups commutes with a sum over `sum` groups: every device
  // of a summed group sits at the same position of an inner group of the same size, and the
  // devices at each position of those inner groups are summed together.
  static bool Commute(const std::vector<std::vector<int64_t>>& sum, const std::vector<std::vector<int64_t>>& inner,
                      int64_t devices) {
    std::vector<int64_t> sum_group(static_cast<size_t>(devices), -1), inner_group(static_cast<size_t>(devices), -1),
        position(static_cast<size_t>(devices), -1);
    for (size_t g = 0; g < sum.size(); ++g)
      for (int64_t d : sum[g])
        if (d >= 0 && d < devices) sum_group[static_cast<size_t>(d)] = static_cast<int64_t>(g);
    for (size_t g = 0; g < inner.size(); ++g)
      for (size_t j = 0; j < inner[g].size(); ++j) {
        const int64_t d = inner[g][j];
        if (d < 0 || d >= devices) return false;
        inner_group[static_cast<size_t>(d)] = static_cast<int64_t>(g);
        position[static_cast<size_t>(d)] = static_cast<int64_t>(j);
      }
    for (const auto& group : sum) {
      const int64_t a = group[0];
      if (inner_group[static_cast<size_t>(a)] < 0) return false;
      const auto& ga = inner[static_cast<size_t>(inner_group[static_cast<size_t>(a)])];
      for (int64_t b : group) {
        if (inner_group[static_cast<size_t>(b)] < 0 || position[static_cast<size_t>(b)] != position[static_cast<size_t>(a)])
          return false;
        const auto& gb = inner[static_cast<size_t>(inner_group[static_cast<size_t>(b)])];
        if (gb.size() != ga.size()) return false;
        for (size_t j = 0; j < ga.size(); ++j)
          if (sum_group[static_cast<size_t>(ga[j])] < 0 || sum_group[static_cast<size_t>(ga[j])] != sum_group[static_cast<size_t>(gb[j])])
            return false;
      }
    }
    return true;
  }

  const Module& module_;
  Computation* body_;
  Accumulation acc_;
  const std::vector<Instruction*>* buffer_ = nullptr;
  std::unordered_set<const Instruction*> chain_, tree_;
  std::vector<Instruction*> met_;
  // Collectives between the all-reduces and the accumulation, with their groups.
  std::vector<std::pair<const Instruction*, std::vector<std::vector<int64_t>>>> inner_;
  std::unordered_map<const Instruction*, bool> depends_;
};

int64_t MaxChannelId(const Module& m) {
  int64_t c = 0;
  for (const auto& comp : m.computations())
    for (const auto& i : comp->instructions())
      if (i->channel_id) c = std::max(c, *i->channel_id);
  return c;
}

// Moves `inst` (just added at the end of `c`) to right after `after`.
void PlaceAfter(Computation& c, Instruction* inst, const Instruction* after) {
  const auto& list = c.instructions();
  for (size_t i = 0; i + 1 < list.size(); ++i) {
    if (list[i].get() != after) continue;
    if (list[i + 1].get() != inst) c.MoveBefore(inst, list[i + 1].get());
    return;
  }
}

Instruction* AddZero(Computation& c, const Shape& shape, const Instruction* before) {
  Instruction* zero = c.AddInstruction(Opcode::kConstant, Shape::Scalar(shape.type), {}, "zero");
  zero->literal.text = shape.type == PrimitiveType::kPred ? "false" : "0";
  zero->literal.values = {0.0};
  Instruction* b = c.AddInstruction(Opcode::kBroadcast, shape, {zero}, "zero_accumulator");
  b->has_dimensions_attr = true;
  c.MoveBefore(zero, before);
  c.MoveBefore(b, before);
  return b;
}

// The carried-tuple elements the condition reads.
std::set<int64_t> ElementsRead(const Computation* cond, int64_t arity) {
  std::set<int64_t> read;
  if (!cond || cond->parameters().empty() || !cond->parameter(0)) return read;
  for (const Instruction* u : cond->parameter(0)->users()) {
    if (u->opcode() == Opcode::kGetTupleElement) {
      read.insert(u->tuple_index);
    } else {
      for (int64_t k = 0; k < arity; ++k) read.insert(k);
    }
  }
  return read;
}

}  // namespace

std::string WhileLoopAllReduceCodeMotionResult::Summary() const {
  std::set<std::string> loops;
  size_t removed = 0;
  for (const auto& s : sunk) {
    loops.insert(s.computation + "/" + s.while_loop);
    removed += s.removed.size();
  }
  return "moved " + std::to_string(removed) + " all-reduce(s) out of " + std::to_string(loops.size()) + " loop(s) (" +
         std::to_string(sunk.size()) + " accumulation buffer(s)); " + std::to_string(kept.size()) +
         " all-reduce(s) stay in loops";
}

Result<WhileLoopAllReduceCodeMotionResult> WhileLoopAllReduceCodeMotion(Module& module) {
  WhileLoopAllReduceCodeMotionResult result;
  const int64_t replicas = std::max<int64_t>(1, module.num_replicas);
  const int64_t partitions = std::max<int64_t>(1, module.num_partitions);
  int64_t next_channel = MaxChannelId(module) + 1;

  // Callers of every computation (a body called twice is left alone).
  std::unordered_map<const Computation*, int> callers;
  std::vector<std::pair<Computation*, Instruction*>> loops;
  for (const auto& c : module.computations())
    for (const auto& i : c->instructions()) {
      for (const Computation* callee : i->called_computations()) ++callers[callee];
      if (i->opcode() == Opcode::kWhile && i->while_body()) loops.emplace_back(c.get(), i.get());
    }

  for (const auto& entry : loops) {
    // Named variables, not a structured binding: the lambdas below capture them (clang 14 cannot
    // capture a structured binding).
    auto* const caller = entry.first;
    auto* const loop = entry.second;
    Computation* body = loop->while_body();
    std::vector<Instruction*> body_all_reduces;
    for (const auto& i : body->instructions())
      if (i->opcode() == Opcode::kAllReduce) body_all_reduces.push_back(i.get());
    if (body_all_reduces.empty()) continue;
    std::map<const Instruction*, std::string> why_kept;
    auto keep_all = [&](const std::string& reason) {
      for (Instruction* ar : body_all_reduces) result.kept.push_back({ar->name(), loop->name(), reason});
    };
    Instruction* root = body->root();
    Instruction* param = body->parameters().empty() ? nullptr : body->parameter(0);
    Instruction* init = loop->operand(0);
    if (callers[body] != 1) {
      keep_all("the loop body is called from more than one place");
      continue;
    }
    if (!root || root->opcode() != Opcode::kTuple || !param || !param->shape().IsTuple() ||
        init->opcode() != Opcode::kTuple) {
      keep_all("the loop does not carry an explicit tuple");
      continue;
    }
    const int64_t arity = root->operand_count();
    bool whole_use = false;
    std::vector<std::vector<Instruction*>> buffer_gtes(static_cast<size_t>(arity));
    for (Instruction* u : param->users()) {
      if (u->opcode() != Opcode::kGetTupleElement || u->tuple_index < 0 || u->tuple_index >= arity) {
        whole_use = true;
        break;
      }
      buffer_gtes[static_cast<size_t>(u->tuple_index)].push_back(u);
    }
    std::vector<std::vector<Instruction*>> out_gtes(static_cast<size_t>(arity));
    for (Instruction* u : loop->users()) {
      if (u->opcode() != Opcode::kGetTupleElement || u->tuple_index < 0 || u->tuple_index >= arity) {
        whole_use = true;
        break;
      }
      out_gtes[static_cast<size_t>(u->tuple_index)].push_back(u);
    }
    if (whole_use || loop->is_root()) {
      keep_all("the loop's carried tuple is used whole");
      continue;
    }
    const std::set<int64_t> cond_reads = ElementsRead(loop->while_condition(), arity);

    // Match every element first, then rewrite.
    LoopMatcher matcher(module, loop);
    std::vector<Accumulation> movable;
    std::unique_ptr<DeviceUniformity> uniformity;
    for (int64_t k = 0; k < arity; ++k) {
      auto acc = matcher.Match(k, buffer_gtes);
      if (!acc.ok()) {
        // The reason belongs to the all-reduces met while matching.
        for (Instruction* ar : matcher.met()) why_kept.emplace(ar, acc.error().message);
        continue;
      }
      if (cond_reads.count(k)) {
        for (Instruction* ar : acc->all_reduces) why_kept.emplace(ar, "the loop condition reads the buffer");
        continue;
      }
      if (!acc->scatter_indices.empty()) {
        if (!uniformity) {
          // Elements the loop carries unchanged in value across devices: optimistic fixed point from
          // the initial values' labels (the caller analysed with its parameters all different).
          uniformity = std::make_unique<DeviceUniformity>(replicas, partitions);
          uniformity->Analyse(*caller, {});
          std::vector<DeviceUniformity::Id> params;
          for (const Instruction* o : init->operands()) params.push_back(uniformity->Of(o));
          for (int round = 0; round <= arity + 1; ++round) {
            uniformity->Analyse(*body, params);
            bool changed = false;
            for (int64_t e = 0; e < arity; ++e) {
              const DeviceUniformity::Id joined =
                  uniformity->Join(params[static_cast<size_t>(e)], uniformity->Of(root->operand(e)));
              if (joined != params[static_cast<size_t>(e)]) {
                params[static_cast<size_t>(e)] = joined;
                changed = true;
              }
            }
            if (!changed) break;
          }
        }
        bool uniform = true;
        for (const Instruction* idx : acc->scatter_indices)
          uniform = uniform && DeviceUniformity::SameWithin(uniformity->Get(uniformity->Of(idx)), acc->groups);
        if (!uniform) {
          for (Instruction* ar : acc->all_reduces)
            why_kept.emplace(ar, "the scatter's indices differ between the devices the all-reduce sums over");
          continue;
        }
      }
      movable.push_back(std::move(acc).value());
    }

    // The loop's own initial tuple, to change an element of (a copy when others read it too).
    auto own_init = [&]() {
      if (init->users().size() != 1) {
        Instruction* copy = caller->AddInstruction(Opcode::kTuple, init->shape(), init->operands(), init->name());
        caller->MoveBefore(copy, loop);
        loop->ReplaceOperand(0, copy);
        init = copy;
      }
      return init;
    };
    std::set<const Instruction*> moved;
    for (const Accumulation& acc : movable) {
      const int64_t k = acc.index;
      SunkAllReduce s;
      s.while_loop = loop->name();
      s.computation = caller->name();
      s.tuple_index = k;
      s.accumulation = acc.kind;
      const Instruction& first = *acc.all_reduces[0];
      s.replica_groups = ReplicaGroupsText(first.replica_groups);
      s.bytes_per_device = root->operand(k)->shape().ByteSize();
      // The new all-reduce after the loop, from the first one's attributes.
      Instruction* after = nullptr;
      std::vector<Instruction*>& outs = out_gtes[static_cast<size_t>(k)];
      if (!outs.empty()) {
        const Instruction* earliest = nullptr;
        for (const auto& i : caller->instructions())
          if (std::find(outs.begin(), outs.end(), i.get()) != outs.end()) {
            earliest = i.get();
            break;
          }
        Instruction* g0 = const_cast<Instruction*>(earliest);
        after = caller->AddInstruction(Opcode::kAllReduce, g0->shape(), {g0}, "all-reduce");
        CopyAttributes(first, after);
        after->mutable_called_computations() = first.called_computations();
        after->channel_id = first.channel_id ? std::optional<int64_t>(next_channel++) : std::nullopt;
        after->metadata = "op_name=\"" + std::string(kWhileLoopAllReduceCodeMotionName) + "\"";
        PlaceAfter(*caller, after, g0);
        Instruction* value = after;
        Instruction* init_k = init->operand(k);
        if (!IsZero(init_k)) {
          value = caller->AddInstruction(Opcode::kAdd, g0->shape(), {init_k, after}, "accumulated");
          PlaceAfter(*caller, value, after);
          Instruction* own = own_init();
          own->ReplaceOperand(k, AddZero(*caller, init_k->shape(), own));
        }
        for (Instruction* g : outs) {
          std::vector<Instruction*> users = g->users();
          for (Instruction* u : users) {
            if (u == after) continue;
            for (int64_t i = 0; i < u->operand_count(); ++i)
              if (u->operand(i) == g) u->ReplaceOperand(i, value);
          }
          if (caller->root() == g) caller->set_root(value);
        }
        s.all_reduce = after->name();
      } else if (!IsZero(init->operand(k))) {
        // Unused result: nothing to reduce, but keep the loop's arithmetic on partial sums sound.
        Instruction* own = own_init();
        own->ReplaceOperand(k, AddZero(*caller, own->operand(k)->shape(), own));
      }
      for (Instruction* ar : acc.all_reduces) {
        s.removed.push_back(ar->name());
        moved.insert(ar);
        ar->ReplaceAllUsesWith(ar->operand(0));
        if (Status st = body->RemoveInstruction(ar); !st.ok())
          return Error(std::string(kWhileLoopAllReduceCodeMotionName) + ": " + st.error().message);
      }
      result.changed = true;
      result.sunk.push_back(std::move(s));
    }
    for (Instruction* ar : body_all_reduces) {
      if (moved.count(ar)) continue;
      auto it = why_kept.find(ar);
      result.kept.push_back({ar->name(), loop->name(),
                             it != why_kept.end() ? it->second : "its result is used in the loop, not only accumulated"});
    }
  }
  return result;
}

Result<WhileLoopAllReduceCodeMotionResult> WhileLoopAllReduceCodeMotionOf(PartitionResult& partition) {
  if (!partition.module) return Error(std::string(kWhileLoopAllReduceCodeMotionName) + ": no partitioned program");
  auto r = WhileLoopAllReduceCodeMotion(*partition.module);
  if (!r.ok() || !r->changed) return r;
  // SPMD name -> original, for the loops' origins.
  std::map<std::string, std::string> original_of;
  for (const auto& [original, names] : partition.origin_map)
    for (const auto& n : names) original_of.emplace(n, original);
  std::set<std::string> removed;
  for (const SunkAllReduce& s : r->sunk) removed.insert(s.removed.begin(), s.removed.end());
  auto& cs = partition.collectives;
  cs.erase(std::remove_if(cs.begin(), cs.end(), [&](const InsertedCollective& c) { return removed.count(c.instruction) > 0; }),
           cs.end());
  for (auto& [original, names] : partition.origin_map)
    names.erase(std::remove_if(names.begin(), names.end(), [&](const std::string& n) { return removed.count(n) > 0; }),
                names.end());
  for (const SunkAllReduce& s : r->sunk) {
    if (s.all_reduce.empty()) continue;
    InsertedCollective c;
    auto it = original_of.find(s.while_loop);
    c.origin = it != original_of.end() ? it->second : s.while_loop;
    c.instruction = s.all_reduce;
    c.kind = Opcode::kAllReduce;
    c.bytes_per_device = s.bytes_per_device;
    c.replica_groups = s.replica_groups;
    c.reason = "while-loop all-reduce code motion: element " + std::to_string(s.tuple_index) + " of " + s.while_loop +
               " accumulated (" + s.accumulation + ") over the iterations, summed once after the loop instead of " +
               std::to_string(s.removed.size()) + " all-reduce(s) per iteration";
    partition.origin_map[c.origin].push_back(s.all_reduce);
    cs.push_back(std::move(c));
  }
  return r;
}

}  // namespace shardscope
