// Carrying out a weight-update-sharding plan: a new module in which gradient all-reduces become
// reduce-scatters, update ops run on shards, and full values are all-gathered where they are
// needed (sections 2.2, 4 and 5 of the paper). Every inserted instruction records its reason.
#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <unordered_set>

#include "core/collectives/reduction.h"
#include "core/ir/builder.h"
#include "core/ir/replica_groups.h"
#include "partitioner/weight_update_sharding/plan.h"

namespace shardscope::wus {
namespace {

// The all-gather reason of a conditional branch begins with this.
constexpr const char* kInsideBranch = "inside the branch";

constexpr const char* kPrefix = "weight-update sharding: ";

Shape WithDims(PrimitiveType t, std::vector<int64_t> dims) { return Shape(t, std::move(dims)); }

bool HasSideEffect(const Instruction& i) {
  switch (i.opcode()) {
    case Opcode::kOutfeed: case Opcode::kSend: case Opcode::kSendDone: case Opcode::kRecv: case Opcode::kRecvDone:
    case Opcode::kInfeed: case Opcode::kCustomCall: case Opcode::kAfterAll:
      return true;
    default:
      return false;
  }
}

class Emitter {
 public:
  Emitter(const Plan& plan, WeightUpdateShardingResult* result) : p_(plan), r_(result) {}
  Status Run();

 private:
  // What an input instruction became in the new program (dense, by instruction id).
  struct Forms {
    Instruction* full = nullptr;
    Instruction* shard = nullptr;
    const Instruction* alias = nullptr;  // a get-tuple-element of a lazy tuple: the element itself
    int32_t layout = -1;
    uint8_t lazy = 0;                    // kLazyTuple / kLazyBroadcast: emitted when first needed
    bool once = false;                   // gathered after the loop: runs once, not batched
    bool live = false;                   // needed by the root or a side effect
  };
  static constexpr uint8_t kLazyTuple = 1, kLazyBroadcast = 2;
  // The rare extras of a value kept sharded across iterations or steps.
  struct Extra {
    std::string gather_why;  // where an all-gather of this shard sits (section 4.2)
    std::string display;     // the name reports use (a loop state element: what it started as)
  };
  // A tuple-valued instruction of the new program some of whose elements are shards.
  struct TupleValue {
    Instruction* tuple = nullptr;
    std::map<int64_t, int32_t> shards;
    std::string gather_why;
    bool once = false;  // the state after a loop: its gathers run once
  };
  struct Ctx {
    const Computation* in = nullptr;
    Computation* out = nullptr;
    const ComputationPlan* plan = nullptr;
    const ShardedIo* io = nullptr;
    std::vector<Forms> forms;  // by input instruction id
    std::unordered_map<const Instruction*, Extra> notes;
    std::unordered_map<const Instruction*, TupleValue> tuples;
    std::map<std::pair<const Instruction*, int32_t>, Instruction*> shard_cache;
    Instruction* device = nullptr;
    std::map<std::pair<int32_t, int64_t>, Instruction*> offsets;  // (scheme, shard rows) -> offset
    Instruction* zero = nullptr;
    std::string gather_why;  // default reason of all-gathers in this computation
    const Instruction* origin = nullptr;
  };

  Result<Computation*> EmitComputation(const Computation* in, const ShardedIo* io, const std::string& name,
                                       const std::string& gather_why, bool entry);
  Status EmitInstruction(Ctx& c, const Instruction* inst);
  Status EmitSeed(Ctx& c, const Instruction* inst, const ValuePlan& v);
  Status EmitElementwise(Ctx& c, const Instruction* inst, const ValuePlan& v);
  Status EmitBroadcast(Ctx& c, const Instruction* inst, const ValuePlan& v);
  Status EmitReduce(Ctx& c, const Instruction* inst, const ValuePlan& v);
  Status EmitFull(Ctx& c, const Instruction* inst);
  Status EmitWhile(Ctx& c, const Instruction* inst);
  Status EmitConditional(Ctx& c, const Instruction* inst);
  Result<Instruction*> BuildTuple(Ctx& c, const Instruction* tuple, const std::map<int64_t, int32_t>& shards);
  Result<Instruction*> Root(Ctx& c);

  static Forms& F(Ctx& c, const Instruction* x) { return c.forms[static_cast<size_t>(x->id())]; }
  const Instruction* Resolve(Ctx& c, const Instruction* v) const {
    while (F(c, v).alias) v = F(c, v).alias;
    return v;
  }
  Result<Instruction*> Full(Ctx& c, const Instruction* v);
  Result<Instruction*> Shard(Ctx& c, const Instruction* v, int32_t layout);
  // Shard of a value already in the new program.
  Instruction* SliceShard(Ctx& c, Instruction* full, int32_t layout, const std::string& what);
  Instruction* Unshard(Ctx& c, Instruction* shard, int32_t layout, const std::string& what, const std::string& where);

  // ---- emission helpers ----
  Instruction* Add(Ctx& c, Opcode op, Shape shape, std::vector<Instruction*> operands, const std::string& name = "");
  Instruction* Note(Instruction* i, const std::string& reason) {
    r_->formatting.push_back({i->name(), kPrefix + reason});
    return i;
  }
  Instruction* ConstS32(Ctx& c, int64_t v);
  Instruction* Constant(Ctx& c, PrimitiveType t, const Literal& lit);
  Instruction* Offset(Ctx& c, int32_t layout);
  Instruction* Format(Ctx& c, Instruction* x, const ShardFormat& f);
  Instruction* Unformat(Ctx& c, Instruction* x, const ShardFormat& f);
  Instruction* Collective(Ctx& c, Opcode op, Instruction* x, Shape shape, const Groups& groups, Computation* reducer,
                          const std::string& reason);
  Computation* CopyComputation(const Computation* src);
  // The texts every inserted op of a layout or scheme repeats, made once: a layout's format
  // (reasons) and a scheme's device groups (collective records).
  const std::string& DescribeLayout(int32_t layout) {
    if (layout_text_.size() < p_.layouts.size()) layout_text_.resize(p_.layouts.size());
    std::optional<std::string>& t = layout_text_[static_cast<size_t>(layout)];
    if (!t) t = p_.layout(layout).format.Describe();
    return *t;
  }
  std::string Qualified(const Ctx& c, const Instruction* i) const {
    return c.in == p_.module->entry() ? i->name() : c.in->name() + "/" + i->name();
  }
  std::string WeightOf(const Instruction* seed) const {
    auto it = seed_weight_.find(seed);
    return it == seed_weight_.end() ? seed->name() : it->second;
  }
  std::string GatherWhy(const Ctx& c, const Instruction* v) const {
    auto it = c.notes.find(v);
    return it != c.notes.end() && !it->second.gather_why.empty() ? it->second.gather_why : c.gather_why;
  }
  std::string Display(const Ctx& c, const Instruction* v) const {
    auto it = c.notes.find(v);
    return it != c.notes.end() && !it->second.display.empty() ? it->second.display : v->name();
  }

  const Plan& p_;
  WeightUpdateShardingResult* r_;
  std::unique_ptr<Module> out_;
  int64_t next_channel_ = 1;
  std::unordered_map<const Computation*, Computation*> copied_;
  std::unordered_map<const Instruction*, std::string> seed_weight_;
  std::vector<std::optional<std::string>> layout_text_;
  ReplicaGroupsTextMemo groups_text_{200};  // a few: one per scheme phase
  size_t id_limit_ = 0;  // input instruction ids are below it
  // Collectives that run once per training run (after a loop, the unsharding program): batching
  // them would only hold more memory at once.
  bool once_ = false;
  std::unordered_set<std::string> once_names_;
  struct OnceScope {
    OnceScope(Emitter* e, bool on) : e_(e), saved_(e->once_) { e->once_ = e->once_ || on; }
    ~OnceScope() { e_->once_ = saved_; }
    Emitter* e_;
    bool saved_;
  };
  Status status_;
};

// ---- helpers -----------------------------------------------------------------------------------

Instruction* Emitter::Add(Ctx& c, Opcode op, Shape shape, std::vector<Instruction*> operands, const std::string& name) {
  Instruction* i = c.out->AddInstruction(op, std::move(shape), std::move(operands), name);
  if (c.origin) i->metadata = c.origin->metadata;
  return i;
}

Instruction* Emitter::ConstS32(Ctx& c, int64_t v) {
  if (v == 0 && c.zero) return c.zero;
  Instruction* k = c.out->AddInstruction(Opcode::kConstant, Shape::Scalar(PrimitiveType::kS32), {});
  k->literal = ScalarLiteral(PrimitiveType::kS32, static_cast<double>(v));
  if (v == 0) c.zero = k;
  return k;
}

Instruction* Emitter::Constant(Ctx& c, PrimitiveType t, const Literal& lit) {
  Instruction* k = c.out->AddInstruction(Opcode::kConstant, Shape::Scalar(t), {});
  k->literal = lit;
  return k;
}

// This device's first row of the shard along formatted dim 0: shard_index[device] * shard rows.
Instruction* Emitter::Offset(Ctx& c, int32_t layout) {
  const Layout& l = p_.layout(layout);
  const int64_t rows = l.format.shard_rows();
  auto key = std::make_pair(l.scheme, rows);
  if (auto it = c.offsets.find(key); it != c.offsets.end()) return it->second;
  const ShardingScheme& s = p_.schemes[static_cast<size_t>(l.scheme)];
  if (!c.device) {
    const int64_t replicas = std::max<int64_t>(1, p_.module->num_replicas);
    const int64_t partitions = std::max<int64_t>(1, p_.module->num_partitions);
    const Shape u32 = Shape::Scalar(PrimitiveType::kU32);
    if (replicas == 1) {
      c.device = c.out->AddInstruction(Opcode::kPartitionId, u32, {});
    } else if (partitions == 1) {
      c.device = c.out->AddInstruction(Opcode::kReplicaId, u32, {});
    } else {
      Instruction* rid = c.out->AddInstruction(Opcode::kReplicaId, u32, {});
      Instruction* pid = c.out->AddInstruction(Opcode::kPartitionId, u32, {});
      Instruction* np = c.out->AddInstruction(Opcode::kConstant, u32, {});
      np->literal = ScalarLiteral(PrimitiveType::kU32, static_cast<double>(partitions));
      c.device = c.out->AddInstruction(Opcode::kAdd, u32, {c.out->AddInstruction(Opcode::kMultiply, u32, {rid, np}), pid});
    }
  }
  std::vector<double> table;
  bool uniform = true;
  for (int64_t d = 0; d < static_cast<int64_t>(s.shard_index.size()); ++d) {
    table.push_back(static_cast<double>(s.shard_index[static_cast<size_t>(d)] * rows));
    uniform = uniform && table.back() == table.front();
  }
  Instruction* off = nullptr;
  if (uniform) {
    off = ConstS32(c, table.empty() ? 0 : static_cast<int64_t>(table[0]));
  } else {
    const int64_t n = static_cast<int64_t>(table.size());
    Instruction* t = c.out->AddInstruction(Opcode::kConstant, Shape(PrimitiveType::kS32, {n}), {}, "shard_offsets");
    t->literal.values = table;
    t->literal.text = FormatLiteralText(t->shape(), table);
    Instruction* ds = c.out->AddInstruction(Opcode::kDynamicSlice, Shape(PrimitiveType::kS32, {1}), {t, c.device});
    ds->dynamic_slice_sizes = {1};
    off = c.out->AddInstruction(Opcode::kReshape, Shape::Scalar(PrimitiveType::kS32), {ds}, "shard_offset");
  }
  c.offsets[key] = off;
  return off;
}

Instruction* Emitter::Format(Ctx& c, Instruction* x, const ShardFormat& f) {
  if (f.bitcast) return Add(c, Opcode::kBitcast, WithDims(x->shape().type, f.FormattedDims()), {x});
  if (f.merge > 1) return Add(c, Opcode::kReshape, WithDims(x->shape().type, f.FormattedDims()), {x});
  return x;
}

Instruction* Emitter::Unformat(Ctx& c, Instruction* x, const ShardFormat& f) {
  if (f.bitcast) return Add(c, Opcode::kBitcast, WithDims(x->shape().type, f.dims), {x});
  if (f.merge > 1) return Add(c, Opcode::kReshape, WithDims(x->shape().type, f.dims), {x});
  return x;
}

Instruction* Emitter::Collective(Ctx& c, Opcode op, Instruction* x, Shape shape, const Groups& groups, Computation* reducer,
                                 const std::string& reason) {
  Instruction* i = Add(c, op, std::move(shape), {x});
  if (op != Opcode::kAllReduce) {
    i->dimensions = {0};
    i->has_dimensions_attr = true;
  }
  if (reducer) i->mutable_called_computations() = {reducer};
  i->replica_groups.groups = groups;
  i->has_replica_groups = true;
  i->channel_id = next_channel_++;
  i->use_global_device_ids = true;
  InsertedCollective ic;
  ic.origin = c.origin ? Qualified(c, c.origin) : "";
  ic.instruction = i->name();
  ic.kind = op;
  ic.bytes_per_device = x->shape().ByteSize();
  ic.replica_groups = groups_text_(groups);
  ic.reason = kPrefix + reason;
  r_->collectives.push_back(std::move(ic));
  if (once_) once_names_.insert(i->name());
  return i;
}

Computation* Emitter::CopyComputation(const Computation* src) {
  if (!src) return nullptr;
  if (auto it = copied_.find(src); it != copied_.end()) return it->second;
  Computation* c = out_->AddComputation(out_->FindComputation(src->name()) ? src->name() + ".1" : src->name());
  copied_[src] = c;
  std::unordered_map<const Instruction*, Instruction*> map;
  for (Instruction* inst : src->MakePostOrder()) {
    std::vector<Instruction*> ops;
    for (Instruction* o : inst->operands()) ops.push_back(map.at(o));
    Instruction* n = inst->opcode() == Opcode::kGeneric ? c->AddGeneric(inst->opcode_text(), inst->shape(), ops, inst->name())
                                                         : c->AddInstruction(inst->opcode(), inst->shape(), ops, inst->name());
    CopyAttributes(*inst, n);
    if (inst->has_sharding()) n->set_sharding(*inst->sharding());
    std::vector<Computation*> called;
    for (Computation* cc : inst->called_computations()) called.push_back(CopyComputation(cc));
    n->mutable_called_computations() = called;
    map[inst] = n;
  }
  if (src->root()) c->set_root(map.at(src->root()));
  return c;
}

// ---- forms -------------------------------------------------------------------------------------

Result<Instruction*> Emitter::Full(Ctx& c, const Instruction* v) {
  v = Resolve(c, v);
  Forms& f = F(c, v);
  if (f.full) return f.full;
  if (auto t = c.tuples.find(v); t != c.tuples.end()) {
    // A state tuple with shard elements: its elements gathered (section 4.2: after the loop).
    std::vector<Instruction*> elems;
    const Shape& s = t->second.tuple->shape();
    for (int64_t i = 0; i < static_cast<int64_t>(s.tuple.size()); ++i) {
      Instruction* e = Add(c, Opcode::kGetTupleElement, s.tuple[static_cast<size_t>(i)], {t->second.tuple});
      e->tuple_index = i;
      if (auto sh = t->second.shards.find(i); sh != t->second.shards.end()) {
        OnceScope once(this, t->second.once);
        e = Unshard(c, e, sh->second, v->name() + "." + std::to_string(i), t->second.gather_why);
      }
      elems.push_back(e);
    }
    std::vector<Shape> shapes;
    for (Instruction* e : elems) shapes.push_back(e->shape());
    f.full = Add(c, Opcode::kTuple, Shape::Tuple(shapes), elems);
    return f.full;
  }
  if (f.lazy == kLazyTuple) {
    auto t = BuildTuple(c, v, {});
    if (!t.ok()) return t;
    F(c, v).full = *t;
    return *t;
  }
  if (f.lazy == kLazyBroadcast) {
    f.lazy = 0;
    const Instruction* saved = c.origin;
    c.origin = v;
    Status s = EmitFull(c, v);
    c.origin = saved;
    if (!s.ok()) return s.error();
    return F(c, v).full;
  }
  if (f.shard) {
    OnceScope once(this, f.once);
    Instruction* full = Unshard(c, f.shard, f.layout, Display(c, v), GatherWhy(c, v));
    F(c, v).full = full;
    return full;
  }
  return Error(c.in->name() + "/" + v->name() + ": used before it was emitted");
}

Instruction* Emitter::SliceShard(Ctx& c, Instruction* full, int32_t layout, const std::string& what) {
  const ShardFormat& f = p_.layout(layout).format;
  Instruction* x = Format(c, full, f);
  if (f.padding()) {
    Instruction* zero = Constant(c, x->shape().type, ScalarLiteral(x->shape().type, 0));
    std::vector<int64_t> dims = f.PaddedDims();
    Instruction* pad = Add(c, Opcode::kPad, WithDims(x->shape().type, dims), {x, zero});
    pad->padding.resize(dims.size());
    pad->padding[0].high = f.padded - f.rows;
    x = pad;
  }
  std::vector<Instruction*> ops = {x, Offset(c, layout)};
  for (size_t d = 1; d < f.FormattedDims().size(); ++d) ops.push_back(ConstS32(c, 0));
  Instruction* ds = Add(c, Opcode::kDynamicSlice, WithDims(x->shape().type, f.ShardDims()), ops, what + ".shard");
  ds->dynamic_slice_sizes = f.ShardDims();
  return Note(ds, what + " sliced to this replica's shard: " + DescribeLayout(layout) + " (section 4.1)");
}

Instruction* Emitter::Unshard(Ctx& c, Instruction* shard, int32_t layout, const std::string& what, const std::string& where) {
  const Layout& l = p_.layout(layout);
  const ShardFormat& f = l.format;
  const ShardingScheme& s = p_.schemes[static_cast<size_t>(l.scheme)];
  Instruction* x = shard;
  int64_t rows = f.shard_rows();
  const size_t phases = s.phases.size();
  for (size_t k = phases; k-- > 0;) {
    const Groups& g = s.phases[k];
    rows *= static_cast<int64_t>(g.front().size());
    std::vector<int64_t> dims = x->shape().dims;
    dims[0] = rows;
    std::string why = what + " all-gathered " + where;
    if (phases > 1) why += ", phase " + std::to_string(phases - k) + " of " + std::to_string(phases) + (k == 1 ? " (columns)" : " (rows)") + " (section 5.1)";
    x = Collective(c, Opcode::kAllGather, x, WithDims(x->shape().type, dims), g, nullptr, why);
  }
  if (f.padding()) {
    std::vector<int64_t> dims = f.FormattedDims();
    Instruction* sl = Add(c, Opcode::kSlice, WithDims(x->shape().type, dims), {x});
    sl->slice.starts.assign(dims.size(), 0);
    sl->slice.limits = dims;
    sl->slice.strides.assign(dims.size(), 1);
    x = Note(sl, what + ": padding of the gathered shards dropped (section 4.1)");
  }
  Instruction* y = Unformat(c, x, f);
  if (y != x) Note(y, what + " formatted back to " + DimsText(f.dims) + " (section 4.1)");
  return y;
}

Result<Instruction*> Emitter::Shard(Ctx& c, const Instruction* v, int32_t layout) {
  v = Resolve(c, v);
  auto key = std::make_pair(v, layout);
  if (auto it = c.shard_cache.find(key); it != c.shard_cache.end()) return it->second;
  const Forms f = F(c, v);
  if (f.shard && f.layout == layout) return f.shard;
  const Layout& l = p_.layout(layout);
  Instruction* out = nullptr;
  // A broadcast that does not touch the shard dims: broadcast straight into the shard.
  bool local = false;
  if (v->opcode() == Opcode::kBroadcast && !f.shard && v->operand_count() == 1) {
    local = true;
    const int64_t first = l.format.bitcast ? l.format.merge : l.format.merge;
    if (l.format.bitcast && v->operand(0)->shape().rank() != 0) local = false;
    for (int64_t d : v->dimensions) local = local && d >= first;
  }
  if (local) {
    auto operand = Full(c, v->operand(0));
    if (!operand.ok()) return operand;
    Instruction* b = Add(c, Opcode::kBroadcast, WithDims(v->shape().type, l.format.ShardDims()), {*operand}, v->name());
    b->has_dimensions_attr = true;
    for (int64_t d : v->dimensions) b->dimensions.push_back(d - l.format.merge + 1);
    b->metadata = v->metadata;
    out = b;
  } else {
    auto full = Full(c, v);
    if (!full.ok()) return full;
    out = SliceShard(c, *full, layout, v->name());
  }
  c.shard_cache[key] = out;
  return out;
}

// ---- instructions ------------------------------------------------------------------------------

Status Emitter::EmitSeed(Ctx& c, const Instruction* inst, const ValuePlan& v) {
  const Layout& l = p_.layout(v.layout);
  const ShardFormat& f = l.format;
  const ShardingScheme& s = p_.schemes[static_cast<size_t>(l.scheme)];
  // The all-reduce, and the data movement after it that now runs on the partial gradient.
  auto src = p_.seed_source.find(inst);
  const Instruction* ar = src == p_.seed_source.end() ? inst : src->second;
  c.origin = ar;
  auto g = Full(c, ar->operand(0));
  if (!g.ok()) return g.error();
  const std::string w = WeightOf(ar);
  Computation* reducer = CopyComputation(ar->to_apply());
  Instruction* moved = *g;
  for (const Instruction* step = ar; step != inst;) {
    step = step->users().front();
    Instruction* n = Add(c, step->opcode(), WithDims(moved->shape().type, step->shape().dims), {moved}, step->name());
    CopyAttributes(*step, n);
    moved = Note(n, step->name() + " moved before the reduce-scatter of " + w + "'s gradient (section 4)");
  }
  g = moved;
  Instruction* x = Format(c, *g, f);
  if (x != *g) Note(x, "gradient of " + w + " formatted " + DimsText(f.dims) + " -> " + DimsText(f.FormattedDims()) + " (section 4.1)");
  if (f.padding()) {
    auto kind = MatchReduction(ar->to_apply());
    auto id = kind ? ReductionIdentity(*kind, x->shape().type) : std::nullopt;
    Instruction* pv = Constant(c, x->shape().type, id ? *id : ScalarLiteral(x->shape().type, 0));
    std::vector<int64_t> dims = f.PaddedDims();
    Instruction* pad = Add(c, Opcode::kPad, WithDims(x->shape().type, dims), {x, pv});
    pad->padding.resize(dims.size());
    pad->padding[0].high = f.padded - f.rows;
    x = Note(pad, "gradient of " + w + " padded " + DimsText(f.FormattedDims()) + " -> " + DimsText(dims) +
                      " with the reduction's identity so it splits evenly (section 4.1)");
  }
  int64_t rows = f.padded;
  for (size_t k = 0; k < s.phases.size(); ++k) {
    const Groups& grp = s.phases[k];
    rows /= static_cast<int64_t>(grp.front().size());
    std::vector<int64_t> dims = x->shape().dims;
    dims[0] = rows;
    std::string why = "gradient of " + w + " reduce-scattered instead of all-reduced (" + DescribeLayout(v.layout) + ") (section 4)";
    if (s.phases.size() > 1)
      why += ", phase " + std::to_string(k + 1) + " of " + std::to_string(s.phases.size()) + (k == 0 ? " (rows)" : " (columns)") +
             " (section 5.1)";
    x = Collective(c, Opcode::kReduceScatter, x, WithDims(x->shape().type, dims), grp, reducer, why);
  }
  if (!s.cross_groups.empty())
    x = Collective(c, Opcode::kAllReduce, x, x->shape(), s.cross_groups, reducer,
                   "partial sharding: the row's shard of " + w + "'s gradient all-reduced across rows (section 5.2)");
  Forms& fm = F(c, inst);
  fm.shard = x;
  fm.layout = v.layout;
  r_->replaced_all_reduces.push_back(Qualified(c, ar));
  return Status::Ok();
}

Status Emitter::EmitElementwise(Ctx& c, const Instruction* inst, const ValuePlan& v) {
  std::vector<Instruction*> ops;
  for (int64_t i = 0; i < inst->operand_count(); ++i) {
    auto o = IsScalarOperand(*inst, i) ? Full(c, inst->operand(i)) : Shard(c, inst->operand(i), v.layout);
    if (!o.ok()) return o.error();
    ops.push_back(*o);
  }
  Instruction* n = Add(c, inst->opcode(), WithDims(inst->shape().type, p_.layout(v.layout).format.ShardDims()), ops,
                       inst->name());
  CopyAttributes(*inst, n);
  Forms& fm = F(c, inst);
  fm.shard = n;
  fm.layout = v.layout;
  return Status::Ok();
}

Status Emitter::EmitBroadcast(Ctx& c, const Instruction* inst, const ValuePlan& v) {
  const ValuePlan* ov = p_.Find(inst->operand(0));
  auto o = Shard(c, inst->operand(0), ov->layout);
  if (!o.ok()) return o.error();
  const int64_t m = p_.layout(ov->layout).format.merge;
  Instruction* n = Add(c, Opcode::kBroadcast, WithDims(inst->shape().type, p_.layout(v.layout).format.ShardDims()), {*o},
                       inst->name());
  n->has_dimensions_attr = true;
  n->dimensions.push_back(0);
  for (size_t i = static_cast<size_t>(m); i < inst->dimensions.size(); ++i) n->dimensions.push_back(inst->dimensions[i] - m + 1);
  Forms& fm = F(c, inst);
  fm.shard = n;
  fm.layout = v.layout;
  return Status::Ok();
}

Status Emitter::EmitReduce(Ctx& c, const Instruction* inst, const ValuePlan& v) {
  const Instruction* x = inst->operand(0);
  const ValuePlan* xv = p_.Find(x);
  const int32_t xl = xv && xv->layout >= 0 ? xv->layout : v.operand_layout;
  const Layout& l = p_.layout(xl);
  const ShardFormat& f = l.format;
  auto xs = Shard(c, x, xl);
  if (!xs.ok()) return xs.error();
  auto init = Full(c, inst->operand(1));
  if (!init.ok()) return init.error();
  Computation* reducer = CopyComputation(inst->to_apply());
  const PrimitiveType t = inst->shape().type;
  // Local dims reduced.
  std::vector<int64_t> dims;
  if (f.bitcast) {
    for (int64_t d = 0; d < static_cast<int64_t>(f.FormattedDims().size()); ++d) dims.push_back(d);
  } else {
    if (v.kind == ValueKind::kReduceMasked) dims.push_back(0);
    for (int64_t d : inst->dimensions)
      if (d >= f.merge) dims.push_back(d - f.merge + 1);
  }
  std::sort(dims.begin(), dims.end());
  if (v.kind == ValueKind::kReduceKeep) {
    Instruction* n = Add(c, Opcode::kReduce, WithDims(t, p_.layout(v.layout).format.ShardDims()), {*xs, *init}, inst->name());
    n->dimensions = dims;
    n->has_dimensions_attr = true;
    n->mutable_called_computations() = {reducer};
    Forms& fm = F(c, inst);
    fm.shard = n;
    fm.layout = v.layout;
    return Status::Ok();
  }
  // Masked reduce + all-reduce (section 4.1, Figure 6).
  auto kind = MatchReduction(inst->to_apply());
  auto identity = kind ? ReductionIdentity(*kind, t) : std::nullopt;
  if (!identity) return Error(inst->name() + ": reduction without an identity cannot run on shards");
  const std::string what = inst->name();
  Instruction* data = *xs;
  if (f.padding()) {
    const Shape s32 = WithDims(PrimitiveType::kS32, data->shape().dims);
    Instruction* iota = Add(c, Opcode::kIota, s32, {});
    iota->iota_dimension = 0;
    Instruction* off = Add(c, Opcode::kBroadcast, s32, {Offset(c, xl)});
    off->has_dimensions_attr = true;
    Instruction* pos = Add(c, Opcode::kAdd, s32, {iota, off});
    Instruction* lim = Add(c, Opcode::kBroadcast, s32, {ConstS32(c, f.rows)});
    lim->has_dimensions_attr = true;
    Instruction* valid = Add(c, Opcode::kCompare, WithDims(PrimitiveType::kPred, data->shape().dims), {pos, lim});
    valid->comparison = ComparisonDirection::kLt;
    Instruction* idv = Add(c, Opcode::kBroadcast, data->shape(), {Constant(c, data->shape().type, *identity)});
    idv->has_dimensions_attr = true;
    data = Note(Add(c, Opcode::kSelect, data->shape(), {valid, data, idv}, what + ".masked"),
                what + ": padding rows masked with the reduction's identity before reducing on the shard (section 4.1)");
  }
  // A non-identity initial value joins once, after the all-reduce.
  const bool init_is_identity = inst->operand(1)->opcode() == Opcode::kConstant &&
                                inst->operand(1)->literal.values.size() == 1 && identity->values.size() == 1 &&
                                inst->operand(1)->literal.values[0] == identity->values[0];
  Instruction* local_init = init_is_identity ? *init : Constant(c, t, *identity);
  Instruction* n = Add(c, Opcode::kReduce, inst->shape(), {data, local_init}, what + ".partial");
  n->dimensions = dims;
  n->has_dimensions_attr = true;
  n->mutable_called_computations() = {reducer};
  const ShardingScheme& s = p_.schemes[static_cast<size_t>(l.scheme)];
  Instruction* all = Collective(c, Opcode::kAllReduce, n, n->shape(), s.shard_groups, reducer,
                                what + " reduced on each replica's shard, the partial results all-reduced (section 4.1)");
  if (!init_is_identity) {
    Instruction* b = Add(c, Opcode::kBroadcast, inst->shape(), {*init});
    b->has_dimensions_attr = true;
    all = Add(c, ReductionOpcode(*kind), inst->shape(), {all, b});
  }
  F(c, inst).full = all;
  return Status::Ok();
}

Result<Instruction*> Emitter::BuildTuple(Ctx& c, const Instruction* tuple, const std::map<int64_t, int32_t>& shards) {
  std::vector<Instruction*> elems;
  for (int64_t i = 0; i < tuple->operand_count(); ++i) {
    auto sh = shards.find(i);
    auto e = sh != shards.end() ? Shard(c, tuple->operand(i), sh->second) : Full(c, tuple->operand(i));
    if (!e.ok()) return e;
    elems.push_back(*e);
  }
  std::vector<Shape> shapes;
  for (Instruction* e : elems) shapes.push_back(e->shape());
  return Add(c, Opcode::kTuple, Shape::Tuple(shapes), elems, tuple->name());
}

Status Emitter::EmitFull(Ctx& c, const Instruction* inst) {
  std::vector<Instruction*> ops;
  // Figure 7: a cast of a value that is held as a shard casts the shard, then gathers.
  if (inst->opcode() == Opcode::kConvert && p_.options.gather_in_compute_type) {
    const Instruction* x = Resolve(c, inst->operand(0));
    const Forms xf = F(c, x);
    if (xf.shard && !xf.full &&
        PrimitiveTypeBytes(inst->shape().type) < PrimitiveTypeBytes(x->shape().type)) {
      bool all_casts = true;
      for (const Instruction* u : x->users())
        if (!ConsumesShard(p_, u, x, xf.layout))
          all_casts = all_casts && u->opcode() == Opcode::kConvert && u->shape().type == inst->shape().type;
      if (all_casts) {
        Instruction* cast = Add(c, Opcode::kConvert, WithDims(inst->shape().type, xf.shard->shape().dims), {xf.shard},
                                inst->name() + ".shard");
        Note(cast, x->name() + "'s shard cast to " + std::string(PrimitiveTypeName(inst->shape().type)) +
                       " before the all-gather (Figure 7)");
        Instruction* full = Unshard(c, cast, xf.layout, Display(c, x) + " (" + std::string(PrimitiveTypeName(inst->shape().type)) + ")",
                                    GatherWhy(c, x) + ", in the narrower type (Figure 7)");
        F(c, inst).full = full;
        return Status::Ok();
      }
    }
  }
  for (const Instruction* o : inst->operands()) {
    auto f = Full(c, o);
    if (!f.ok()) return f.error();
    ops.push_back(*f);
  }
  Instruction* n = inst->opcode() == Opcode::kGeneric
                       ? c.out->AddGeneric(inst->opcode_text(), inst->shape(), std::move(ops), inst->name())
                       : c.out->AddInstruction(inst->opcode(), inst->shape(), std::move(ops), inst->name());
  CopyAttributes(*inst, n);
  if (inst->has_sharding()) n->set_sharding(*inst->sharding());
  if (!inst->called_computations().empty()) {
    std::vector<Computation*> called;
    for (Computation* cc : inst->called_computations()) called.push_back(CopyComputation(cc));
    n->mutable_called_computations() = std::move(called);
  }
  F(c, inst).full = n;
  return Status::Ok();
}

Status Emitter::EmitWhile(Ctx& c, const Instruction* inst) {
  auto cs = p_.call_shards.find(inst);
  static const std::map<int64_t, int32_t> kNone;
  const std::map<int64_t, int32_t>& shards = cs == p_.call_shards.end() ? kNone : cs->second;
  auto io_of = [&](const Computation* comp) -> const ShardedIo* {
    auto it = p_.io.find(comp);
    return it == p_.io.end() ? nullptr : &it->second;
  };
  auto cond = EmitComputation(inst->while_condition(), io_of(inst->while_condition()), inst->while_condition()->name(), "", false);
  if (!cond.ok()) return cond.error();
  auto body = EmitComputation(inst->while_body(), io_of(inst->while_body()), inst->while_body()->name(),
                              "before its use in the loop body, each iteration (section 4.2)", false);
  if (!body.ok()) return body.error();
  const Instruction* init = Resolve(c, inst->operand(0));
  Instruction* new_init = nullptr;
  if (shards.empty()) {
    auto f = Full(c, init);
    if (!f.ok()) return f.error();
    new_init = *f;
  } else if (F(c, init).lazy == kLazyTuple) {
    auto t = BuildTuple(c, init, shards);
    if (!t.ok()) return t.error();
    new_init = *t;
  } else {
    auto f = Full(c, init);
    if (!f.ok()) return f.error();
    std::vector<Instruction*> elems;
    for (int64_t i = 0; i < static_cast<int64_t>((*f)->shape().tuple.size()); ++i) {
      Instruction* e = Add(c, Opcode::kGetTupleElement, (*f)->shape().tuple[static_cast<size_t>(i)], {*f});
      e->tuple_index = i;
      if (auto sh = shards.find(i); sh != shards.end()) e = SliceShard(c, e, sh->second, inst->name() + "." + std::to_string(i));
      elems.push_back(e);
    }
    std::vector<Shape> shapes;
    for (Instruction* e : elems) shapes.push_back(e->shape());
    new_init = Add(c, Opcode::kTuple, Shape::Tuple(shapes), elems);
  }
  Instruction* w = c.out->AddInstruction(Opcode::kWhile, new_init->shape(), {new_init}, inst->name());
  CopyAttributes(*inst, w);
  w->mutable_called_computations() = {*cond, *body};
  if (shards.empty()) {
    F(c, inst).full = w;
  } else {
    c.tuples[inst] = {w, shards, "after the loop (section 4.2: auxiliaries are gathered only outside the training loop)", true};
  }
  return Status::Ok();
}

Status Emitter::EmitConditional(Ctx& c, const Instruction* inst) {
  auto cs = p_.call_shards.find(inst);
  const auto& branches = inst->called_computations();
  auto pred = Full(c, inst->operand(0));
  if (!pred.ok()) return pred.error();
  std::vector<Instruction*> ops = {*pred};
  std::vector<Computation*> out_branches;
  for (size_t b = 0; b < branches.size(); ++b) {
    std::map<int64_t, int32_t> shards;
    if (cs != p_.call_shards.end())
      for (const auto& [key, layout] : cs->second)
        if (key / kBranchStride == static_cast<int64_t>(b)) shards[key % kBranchStride] = layout;
    const Instruction* arg = Resolve(c, inst->operand(static_cast<int64_t>(b) + 1));
    Result<Instruction*> a = shards.empty() ? Full(c, arg) : BuildTuple(c, arg, shards);
    if (!a.ok()) return a.error();
    ops.push_back(*a);
    auto io = p_.io.find(branches[b]);
    const double freq = p_.comps.count(branches[b]) ? p_.comps.at(branches[b]).frequency : 1.0;
    std::string why = kInsideBranch;
    if (freq < 1) why += " taken every " + std::to_string(static_cast<int64_t>(1.0 / freq + 0.5)) + " steps (section 3.2)";
    auto comp = EmitComputation(branches[b], shards.empty() || io == p_.io.end() ? nullptr : &io->second,
                                branches[b]->name(), why, false);
    if (!comp.ok()) return comp.error();
    out_branches.push_back(*comp);
  }
  Instruction* n = c.out->AddInstruction(Opcode::kConditional, inst->shape(), ops, inst->name());
  CopyAttributes(*inst, n);
  n->mutable_called_computations() = out_branches;
  F(c, inst).full = n;
  return Status::Ok();
}

Status Emitter::EmitInstruction(Ctx& c, const Instruction* inst) {
  c.origin = inst;
  const ValuePlan* v = nullptr;
  if (c.plan)
    if (auto it = c.plan->values.find(inst); it != c.plan->values.end()) v = &it->second;
  if (v) {
    switch (v->kind) {
      case ValueKind::kSeed: return EmitSeed(c, inst, *v);
      case ValueKind::kElementwise: return EmitElementwise(c, inst, *v);
      case ValueKind::kBroadcast: return EmitBroadcast(c, inst, *v);
      case ValueKind::kReduceKeep: case ValueKind::kReduceMasked: return EmitReduce(c, inst, *v);
      case ValueKind::kAbsorbed: return Status::Ok();
      case ValueKind::kFull: break;
    }
  }
  switch (inst->opcode()) {
    case Opcode::kTuple:
      F(c, inst).lazy = kLazyTuple;
      return Status::Ok();
    case Opcode::kBroadcast:
      // Emitted where first needed whole; a shard of it is a broadcast of its own (Shard).
      F(c, inst).lazy = kLazyBroadcast;
      return Status::Ok();
    case Opcode::kGetTupleElement: {
      const Instruction* t = Resolve(c, inst->operand(0));
      if (F(c, t).lazy == kLazyTuple && !F(c, t).full) {
        F(c, inst).alias = t->operand(inst->tuple_index);
        return Status::Ok();
      }
      if (auto tv = c.tuples.find(t); tv != c.tuples.end()) {
        const Shape& s = tv->second.tuple->shape().tuple[static_cast<size_t>(inst->tuple_index)];
        Instruction* g = Add(c, Opcode::kGetTupleElement, s, {tv->second.tuple}, inst->name());
        g->tuple_index = inst->tuple_index;
        Forms& fm = F(c, inst);
        if (auto sh = tv->second.shards.find(inst->tuple_index); sh != tv->second.shards.end()) {
          fm.shard = g;
          fm.layout = sh->second;
          fm.once = tv->second.once;
          Extra& note = c.notes[inst];
          note.gather_why = tv->second.gather_why;
          if (auto names = p_.state_names.find(c.in); names != p_.state_names.end() && t->opcode() == Opcode::kParameter &&
              inst->tuple_index < static_cast<int64_t>(names->second.size()))
            note.display = names->second[static_cast<size_t>(inst->tuple_index)];
        } else {
          fm.full = g;
        }
        return Status::Ok();
      }
      return EmitFull(c, inst);
    }
    case Opcode::kWhile: return EmitWhile(c, inst);
    case Opcode::kConditional: return EmitConditional(c, inst);
    case Opcode::kCall: {
      std::vector<Instruction*> ops;
      for (const Instruction* o : inst->operands()) {
        auto f = Full(c, o);
        if (!f.ok()) return f.error();
        ops.push_back(*f);
      }
      auto callee = EmitComputation(inst->to_apply(), nullptr, inst->to_apply()->name(), "", false);
      if (!callee.ok()) return callee.error();
      Instruction* n = c.out->AddInstruction(Opcode::kCall, inst->shape(), ops, inst->name());
      CopyAttributes(*inst, n);
      n->mutable_called_computations() = {*callee};
      F(c, inst).full = n;
      return Status::Ok();
    }
    default:
      return EmitFull(c, inst);
  }
}

Result<Instruction*> Emitter::Root(Ctx& c) {
  const Instruction* root = Resolve(c, c.in->root());
  c.origin = c.in->root();
  if (!c.io || c.io->outputs.empty()) return Full(c, root);
  if (F(c, root).lazy == kLazyTuple) return BuildTuple(c, root, c.io->outputs);
  if (!root->shape().IsTuple() && c.io->outputs.count(0)) return Shard(c, root, c.io->outputs.at(0));
  return Full(c, root);
}

Result<Computation*> Emitter::EmitComputation(const Computation* in, const ShardedIo* io, const std::string& name,
                                              const std::string& gather_why, bool entry) {
  Computation* out = out_->AddComputation(out_->FindComputation(name) ? name + ".1" : name, entry);
  Ctx c;
  c.in = in;
  c.out = out;
  c.io = io;
  c.gather_why = gather_why.empty() ? "where it is next used (section 4)" : gather_why;
  c.forms.assign(id_limit_, Forms{});
  if (auto it = p_.comps.find(in); it != p_.comps.end()) c.plan = &it->second;
  const bool split_entry = in == p_.module->entry() && p_.split;
  // Parameters.
  for (size_t i = 0; i < in->parameters().size(); ++i) {
    const Instruction* prm = in->parameters()[i];
    if (!prm) continue;
    Shape shape = prm->shape();
    std::map<int64_t, int32_t> shards;
    if (io && !io->inputs.empty()) {
      if (split_entry) {
        if (auto it = io->inputs.find(static_cast<int64_t>(i)); it != io->inputs.end()) {
          shape = WithDims(prm->shape().type, p_.layout(it->second).format.ShardDims());
          shards[0] = it->second;
        }
      } else if (i == 0 && shape.IsTuple()) {
        for (const auto& [k, l] : io->inputs) {
          Shape& e = shape.tuple[static_cast<size_t>(k)];
          e = WithDims(e.type, p_.layout(l).format.ShardDims());
          shards[k] = l;
        }
      }
    }
    Instruction* np = out->AddInstruction(Opcode::kParameter, shape, {}, prm->name());
    np->parameter_number = prm->parameter_number;
    np->metadata = prm->metadata;
    if (shards.empty() && prm->has_sharding()) np->set_sharding(*prm->sharding());
    if (shards.empty()) {
      F(c, prm).full = np;
    } else if (split_entry) {
      Forms& f = F(c, prm);
      f.shard = np;
      f.layout = shards[0];
      c.notes[prm].gather_why = "at the start of the step, before the forward pass (section 4.2, Figure 4 right)";
    } else {
      // A loop body's state is kept sharded across iterations; a branch says how often it runs.
      const bool branch = gather_why.rfind(kInsideBranch, 0) == 0;
      c.tuples[prm] = {np, shards,
                       branch ? gather_why : "before its use in this computation (section 4.2: kept sharded across iterations)"};
    }
  }
  // Live instructions only (what the root or a side effect needs), in definition order (the IR's
  // topological order).
  std::vector<const Instruction*> work;
  if (in->root()) work.push_back(in->root());
  for (const auto& i : in->instructions())
    if (HasSideEffect(*i)) work.push_back(i.get());
  while (!work.empty()) {
    const Instruction* x = work.back();
    work.pop_back();
    Forms& f = F(c, x);
    if (f.live) continue;
    f.live = true;
    for (const Instruction* o : x->operands()) work.push_back(o);
    for (const Instruction* o : x->control_predecessors) work.push_back(o);
  }
  for (const auto& holder : in->instructions()) {
    const Instruction* inst = holder.get();
    if (inst->opcode() == Opcode::kParameter || !F(c, inst).live) continue;
    if (Status s = EmitInstruction(c, inst); !s.ok()) return s.error();
  }
  auto root = Root(c);
  if (!root.ok()) return root.error();
  out->set_root(*root);
  if (in->root() && in->root()->has_sharding() && (*root)->shape().Compatible(in->root()->shape()) && !(*root)->has_sharding())
    (*root)->set_sharding(*in->root()->sharding());
  return out;
}

// ---- the whole module --------------------------------------------------------------------------

Status Emitter::Run() {
  const Module& in = *p_.module;
  for (const auto& comp : in.computations())
    for (const auto& inst : comp->instructions()) {
      if (inst->channel_id) next_channel_ = std::max(next_channel_, *inst->channel_id + 1);
      id_limit_ = std::max(id_limit_, static_cast<size_t>(inst->id() + 1));
    }
  for (const Cluster& cl : p_.clusters)
    if (!cl.rejected && cl.decision.sharded)
      for (const Instruction* s : cl.seeds) seed_weight_[s] = cl.decision.weight;
  const Computation* entry = in.entry();
  const auto io = p_.io.find(entry);
  const bool split = p_.split && io != p_.io.end();
  auto new_module = [&](const std::string& name) {
    auto m = std::make_unique<Module>(name);
    m->num_partitions = in.num_partitions;
    m->num_replicas = in.num_replicas;
    m->header_attributes = in.header_attributes;
    return m;
  };
  out_ = new_module(split ? in.name() + ".main" : in.name());
  auto e = EmitComputation(entry, split ? &io->second : nullptr, entry->name(),
                           "at the end of the step, where it is next used (section 4)", true);
  if (!e.ok()) return e.error();
  if (!split) out_->entry_computation_layout = in.entry_computation_layout;
  r_->combined_collectives = CombineCollectives(out_.get(), p_.options.combine_threshold_bytes, once_names_, &r_->collectives);
  if (!split) {
    r_->module = std::move(out_);
    return Status::Ok();
  }
  // Section 4.2's three programs: the main one above, and around it the sharding program (full
  // parameters -> the main program's) and the unsharding program (its outputs -> full ones).
  const ShardedIo& sio = io->second;
  std::unique_ptr<Module> main = std::move(out_);
  {
    out_ = new_module(in.name() + ".sharding");
    Computation* comp = out_->AddComputation(entry->name() + ".sharding", true);
    Ctx c;
    c.out = comp;
    c.in = entry;
    std::vector<Instruction*> outs;
    for (size_t i = 0; i < entry->parameters().size(); ++i) {
      const Instruction* prm = entry->parameters()[i];
      Instruction* np = comp->AddInstruction(Opcode::kParameter, prm->shape(), {}, prm->name());
      np->parameter_number = static_cast<int64_t>(i);
      if (prm->has_sharding()) np->set_sharding(*prm->sharding());
      auto it = sio.inputs.find(static_cast<int64_t>(i));
      c.origin = prm;
      outs.push_back(it == sio.inputs.end() ? np : SliceShard(c, np, it->second, prm->name()));
    }
    std::vector<Shape> shapes;
    for (Instruction* o : outs) shapes.push_back(o->shape());
    comp->set_root(comp->AddInstruction(Opcode::kTuple, Shape::Tuple(shapes), outs, "sharded_state"));
    r_->sharding_program = std::move(out_);
  }
  {
    OnceScope once(this, true);
    out_ = new_module(in.name() + ".unsharding");
    Computation* comp = out_->AddComputation(entry->name() + ".unsharding", true);
    const Shape& main_out = main->entry()->root()->shape();
    const bool tuple_out = main_out.IsTuple();
    Ctx c;
    c.out = comp;
    c.in = entry;
    std::vector<Instruction*> outs;
    const size_t n = tuple_out ? main_out.tuple.size() : 1;
    for (size_t k = 0; k < n; ++k) {
      const Shape& s = tuple_out ? main_out.tuple[k] : main_out;
      std::string pname = "output" + std::to_string(k);
      if (tuple_out && entry->root()->opcode() == Opcode::kTuple) {
        c.origin = entry->root()->operand(static_cast<int64_t>(k));
        pname = c.origin->name();
      }
      Instruction* np = comp->AddInstruction(Opcode::kParameter, s, {}, pname);
      np->parameter_number = static_cast<int64_t>(k);
      auto it = sio.outputs.find(static_cast<int64_t>(k));
      outs.push_back(it == sio.outputs.end() ? np : Unshard(c, np, it->second, pname, "by the unsharding program, after the training loop (section 4.2)"));
    }
    if (tuple_out) {
      std::vector<Shape> shapes;
      for (Instruction* o : outs) shapes.push_back(o->shape());
      Instruction* root = comp->AddInstruction(Opcode::kTuple, Shape::Tuple(shapes), outs, "full_state");
      if (entry->root()->has_sharding()) root->set_sharding(*entry->root()->sharding());
      comp->set_root(root);
    } else {
      comp->set_root(outs[0]);
    }
    r_->unsharding_program = std::move(out_);
  }
  r_->module = std::move(main);
  r_->split = true;
  return Status::Ok();
}

}  // namespace

Status EmitPlan(const Plan& plan, WeightUpdateShardingResult* result) {
  Emitter e(plan, result);
  return e.Run();
}

}  // namespace shardscope::wus
