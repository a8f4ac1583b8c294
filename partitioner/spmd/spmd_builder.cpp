#include "partitioner/spmd/spmd_builder.h"

#include <algorithm>

#include "core/ir/builder.h"
#include "core/ir/replica_groups.h"

namespace shardscope::spmd {

namespace {
// The groups move into the instruction (a caller's temporary, or its copy): at thousands of
// devices copying them again was a noticeable part of emitting collectives.
ReplicaGroups MakeGroups(std::vector<std::vector<int64_t>> groups) {
  ReplicaGroups rg;
  rg.groups = std::move(groups);
  return rg;
}
}  // namespace

SpmdBuilder::SpmdBuilder(Module* out, int64_t num_devices, PartitionResult* result)
    : out_(out), n_(num_devices), result_(result) {}

void SpmdBuilder::set_origin(const Instruction* orig) {
  origin_ = orig;
  origin_names_ = nullptr;
  if (!orig) {
    origin_key_.clear();
    return;
  }
  const Computation* c = orig->parent();
  origin_key_ = (c && c->parent() && c != c->parent()->entry()) ? c->name() + "/" + orig->name() : orig->name();
}

SpmdBuilder::Position SpmdBuilder::Save() const { return Position{comp_, partition_id_, origin_}; }

void SpmdBuilder::Restore(const Position& p) {
  set_origin(p.origin);
  comp_ = p.comp;
  partition_id_ = p.partition_id;
}

Instruction* SpmdBuilder::Emit(Opcode op, Shape shape, std::vector<Instruction*> operands) {
  std::string base = origin_ ? origin_->name() : std::string(OpcodeName(op));
  if (origin_ && op != origin_->opcode()) base = std::string(OpcodeName(op));
  Instruction* i = comp_->AddInstruction(op, std::move(shape), std::move(operands), base);
  if (origin_) {
    // The origin's entry, looked up at its first instruction (none for an origin that emits none).
    if (!origin_names_) origin_names_ = &result_->origin_map[origin_key_];
    origin_names_->push_back(i->name());
    if (!origin_->metadata.empty()) i->metadata = origin_->metadata;
  }
  return i;
}

Instruction* SpmdBuilder::ConstantScalar(PrimitiveType t, double v) {
  Instruction* c = Emit(Opcode::kConstant, Shape::Scalar(t), {});
  c->literal = ScalarLiteral(t, v);
  return c;
}

Instruction* SpmdBuilder::PartitionId() {
  if (!partition_id_) partition_id_ = Emit(Opcode::kPartitionId, Shape::Scalar(PrimitiveType::kU32), {});
  return partition_id_;
}

Instruction* SpmdBuilder::TableLookup(const std::vector<int64_t>& table) {
  bool uniform = std::all_of(table.begin(), table.end(), [&](int64_t v) { return v == table[0]; });
  if (uniform) return ConstantScalar(PrimitiveType::kS32, static_cast<double>(table.empty() ? 0 : table[0]));
  Instruction* c = Emit(Opcode::kConstant, Shape(PrimitiveType::kS32, {static_cast<int64_t>(table.size())}), {});
  std::string text = "{";
  for (size_t i = 0; i < table.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(table[i]);
    c->literal.values.push_back(static_cast<double>(table[i]));
  }
  c->literal.text = text + "}";
  Instruction* ds = Emit(Opcode::kDynamicSlice, Shape(PrimitiveType::kS32, {1}), {c, PartitionId()});
  ds->dynamic_slice_sizes = {1};
  return Reshape(ds, {});
}

Instruction* SpmdBuilder::DynamicSlice(Instruction* x, const std::vector<Instruction*>& offsets,
                                       std::vector<int64_t> sizes) {
  std::vector<Instruction*> ops = {x};
  ops.insert(ops.end(), offsets.begin(), offsets.end());
  Instruction* ds = Emit(Opcode::kDynamicSlice, Shape(x->shape().type, sizes), std::move(ops));
  ds->dynamic_slice_sizes = std::move(sizes);
  return ds;
}

Instruction* SpmdBuilder::Slice(Instruction* x, std::vector<int64_t> limits) {
  if (limits == x->shape().dims) return x;
  Instruction* s = Emit(Opcode::kSlice, Shape(x->shape().type, limits), {x});
  s->slice.starts.assign(limits.size(), 0);
  s->slice.limits = limits;
  s->slice.strides.assign(limits.size(), 1);
  return s;
}

Instruction* SpmdBuilder::SliceDim(Instruction* x, int64_t dim, int64_t from, int64_t to) {
  if (from == 0 && to == x->shape().dim(dim)) return x;
  std::vector<int64_t> dims = x->shape().dims;
  dims[static_cast<size_t>(dim)] = to - from;
  Instruction* s = Emit(Opcode::kSlice, Shape(x->shape().type, dims), {x});
  s->slice.starts.assign(dims.size(), 0);
  s->slice.limits = x->shape().dims;
  s->slice.strides.assign(dims.size(), 1);
  s->slice.starts[static_cast<size_t>(dim)] = from;
  s->slice.limits[static_cast<size_t>(dim)] = to;
  return s;
}

Instruction* SpmdBuilder::PadHigh(Instruction* x, const std::vector<int64_t>& high, double value) {
  if (std::all_of(high.begin(), high.end(), [](int64_t h) { return h == 0; })) return x;
  std::vector<int64_t> dims = x->shape().dims;
  for (size_t i = 0; i < dims.size(); ++i) dims[i] += high[i];
  Instruction* pv = ConstantScalar(x->shape().type, value);
  Instruction* p = Emit(Opcode::kPad, Shape(x->shape().type, dims), {x, pv});
  p->padding.resize(high.size());
  for (size_t i = 0; i < high.size(); ++i) p->padding[i].high = high[i];
  return p;
}

Instruction* SpmdBuilder::Reshape(Instruction* x, std::vector<int64_t> dims) {
  if (dims == x->shape().dims) return x;
  return Emit(Opcode::kReshape, Shape(x->shape().type, std::move(dims)), {x});
}

Instruction* SpmdBuilder::Transpose(Instruction* x, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return x;
  std::vector<int64_t> dims(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) dims[i] = x->shape().dims[static_cast<size_t>(perm[i])];
  Instruction* t = Emit(Opcode::kTranspose, Shape(x->shape().type, dims), {x});
  t->dimensions = perm;
  t->has_dimensions_attr = true;
  return t;
}

Instruction* SpmdBuilder::Broadcast(Instruction* scalar, const Shape& shape) {
  Instruction* b = Emit(Opcode::kBroadcast, Shape(scalar->shape().type, shape.dims), {scalar});
  b->has_dimensions_attr = true;
  return b;
}

void SpmdBuilder::Record(Instruction* collective, Instruction* operand, std::string groups, const std::string& reason) {
  InsertedCollective ic;
  ic.origin = origin_key_;
  ic.instruction = collective->name();
  ic.kind = collective->opcode();
  ic.bytes_per_device = operand->shape().ByteSize();
  ic.replica_groups = std::move(groups);
  ic.reason = reason;
  result_->collectives.push_back(std::move(ic));
}

Instruction* SpmdBuilder::AllGather(Instruction* x, int64_t dim, std::vector<std::vector<int64_t>> groups,
                                    const std::string& reason) {
  const int64_t g = groups.empty() ? 1 : static_cast<int64_t>(groups[0].size());
  std::vector<int64_t> dims = x->shape().dims;
  dims[static_cast<size_t>(dim)] *= g;
  Instruction* ag = Emit(Opcode::kAllGather, Shape(x->shape().type, dims), {x});
  ag->dimensions = {dim};
  ag->has_dimensions_attr = true;
  ag->replica_groups = MakeGroups(std::move(groups));
  ag->has_replica_groups = true;
  ag->channel_id = NextChannelId();
  ag->use_global_device_ids = true;
  Record(ag, x, groups_text_(ag->replica_groups.groups), reason);
  return ag;
}

Instruction* SpmdBuilder::AllReduce(Instruction* x, Computation* reducer,
                                    std::vector<std::vector<int64_t>> groups, const std::string& reason) {
  Instruction* ar = Emit(Opcode::kAllReduce, x->shape(), {x});
  ar->mutable_called_computations() = {reducer};
  ar->replica_groups = MakeGroups(std::move(groups));
  ar->has_replica_groups = true;
  ar->channel_id = NextChannelId();
  ar->use_global_device_ids = true;
  Record(ar, x, groups_text_(ar->replica_groups.groups), reason);
  return ar;
}

Instruction* SpmdBuilder::ReduceScatter(Instruction* x, Computation* reducer, int64_t dim,
                                        std::vector<std::vector<int64_t>> groups, const std::string& reason) {
  const int64_t g = groups.empty() ? 1 : static_cast<int64_t>(groups[0].size());
  std::vector<int64_t> dims = x->shape().dims;
  dims[static_cast<size_t>(dim)] /= g;
  Instruction* rs = Emit(Opcode::kReduceScatter, Shape(x->shape().type, dims), {x});
  rs->mutable_called_computations() = {reducer};
  rs->dimensions = {dim};
  rs->has_dimensions_attr = true;
  rs->replica_groups = MakeGroups(std::move(groups));
  rs->has_replica_groups = true;
  rs->channel_id = NextChannelId();
  rs->use_global_device_ids = true;
  Record(rs, x, groups_text_(rs->replica_groups.groups), reason);
  return rs;
}

Instruction* SpmdBuilder::AllToAll(Instruction* x, int64_t dim, std::vector<std::vector<int64_t>> groups,
                                   const std::string& reason) {
  Instruction* a = Emit(Opcode::kAllToAll, x->shape(), {x});
  a->dimensions = {dim};
  a->has_dimensions_attr = true;
  a->replica_groups = MakeGroups(std::move(groups));
  a->has_replica_groups = true;
  a->channel_id = NextChannelId();
  Record(a, x, groups_text_(a->replica_groups.groups), reason);
  return a;
}

Instruction* SpmdBuilder::CollectivePermute(Instruction* x, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                            const std::string& reason) {
  Instruction* cp = Emit(Opcode::kCollectivePermute, x->shape(), {x});
  cp->source_target_pairs = pairs;
  cp->channel_id = NextChannelId();
  Record(cp, x, SourceTargetPairsText(pairs), reason);
  return cp;
}

Computation* SpmdBuilder::ScalarReducer(Opcode op, PrimitiveType t) {
  auto key = std::make_pair(static_cast<int>(op), static_cast<int>(t));
  auto it = reducers_.find(key);
  if (it != reducers_.end()) return it->second;
  std::string name = std::string(OpcodeName(op)) + "." + std::string(PrimitiveTypeName(t)) + ".reducer";
  Computation* c = out_->AddComputation(name);
  Instruction* a = c->AddInstruction(Opcode::kParameter, Shape::Scalar(t), {}, "lhs");
  a->parameter_number = 0;
  Instruction* b = c->AddInstruction(Opcode::kParameter, Shape::Scalar(t), {}, "rhs");
  b->parameter_number = 1;
  c->set_root(c->AddInstruction(op, Shape::Scalar(t), {a, b}, std::string(OpcodeName(op))));
  // Keep reducers ahead of their users when printed.
  reducers_[key] = c;
  return c;
}

Computation* SpmdBuilder::CloneScalarComputation(const Computation* src) {
  if (!src) return nullptr;
  auto it = cloned_.find(src);
  if (it != cloned_.end()) return it->second;
  Computation* c = out_->AddComputation(out_->FindComputation(src->name()) ? src->name() + ".spmd" : src->name());
  cloned_[src] = c;
  std::unordered_map<const Instruction*, Instruction*> map;
  for (Instruction* inst : src->MakePostOrder()) {
    std::vector<Instruction*> ops;
    for (Instruction* o : inst->operands()) ops.push_back(map.at(o));
    Instruction* n = inst->opcode() == Opcode::kGeneric
                         ? c->AddGeneric(inst->opcode_text(), inst->shape(), ops, inst->name())
                         : c->AddInstruction(inst->opcode(), inst->shape(), ops, inst->name());
    CopyAttributes(*inst, n);
    std::vector<Computation*> called;
    for (Computation* cc : inst->called_computations()) called.push_back(CloneScalarComputation(cc));
    n->mutable_called_computations() = called;
    map[inst] = n;
  }
  if (src->root()) c->set_root(map.at(src->root()));
  return c;
}

Instruction* SpmdBuilder::MaskPadding(Instruction* x, const TileMap& map, const Shape& base,
                                      const std::vector<int64_t>& dims, double identity) {
  Instruction* mask = nullptr;
  const Shape local = x->shape();
  for (int64_t d : dims) {
    const int64_t full = base.dim(d);
    if (!map.HasPadding(d, full)) continue;
    Instruction* iota = Emit(Opcode::kIota, Shape(PrimitiveType::kS32, local.dims), {});
    iota->iota_dimension = d;
    Instruction* off = TableLookup(map.OffsetTable(d, full));
    Instruction* offb = Broadcast(off, Shape(PrimitiveType::kS32, local.dims));
    Instruction* pos = Emit(Opcode::kAdd, Shape(PrimitiveType::kS32, local.dims), {iota, offb});
    Instruction* lim = Broadcast(ConstantScalar(PrimitiveType::kS32, static_cast<double>(full)),
                                 Shape(PrimitiveType::kS32, local.dims));
    Instruction* lt = Emit(Opcode::kCompare, Shape(PrimitiveType::kPred, local.dims), {pos, lim});
    lt->comparison = ComparisonDirection::kLt;
    mask = mask ? Emit(Opcode::kAnd, Shape(PrimitiveType::kPred, local.dims), {mask, lt}) : lt;
  }
  if (!mask) return x;
  Instruction* idv = Broadcast(ConstantScalar(local.type, identity), local);
  return Emit(Opcode::kSelect, local, {mask, x, idv});
}

void SpmdBuilder::NoteFallback(const Instruction& orig) {
  std::string name = orig.opcode_text();
  auto& v = result_->replicated_fallbacks;
  if (std::find(v.begin(), v.end(), name) == v.end()) v.push_back(name);
}

}  // namespace shardscope::spmd
