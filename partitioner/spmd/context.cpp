#include "partitioner/spmd/context.h"

#include "core/ir/builder.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <map>
#include <sstream>

namespace shardscope::spmd {

std::unordered_map<Opcode, Handler>& HandlerRegistry() {
  static std::unordered_map<Opcode, Handler> registry;
  return registry;
}

RegisterHandler::RegisterHandler(std::initializer_list<Opcode> ops, Handler h) {
  for (Opcode op : ops) HandlerRegistry()[op] = h;
}

std::string GroupsToString(const std::vector<std::vector<int64_t>>& groups) {
  std::string s = "{";
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i) s += ",";
    s += "{";
    for (size_t j = 0; j < groups[i].size(); ++j) {
      if (j) s += ",";
      s += std::to_string(groups[i][j]);
    }
    s += "}";
  }
  return s + "}";
}

namespace {
// Every collective costs latency beyond its bytes (about 1 us per hop: ~45 kB on a TPU v5e link).
// Plans are compared in bytes, so each collective step adds this much: among plans moving about
// the same data, the one with fewer collectives wins (as XLA's partitioner prefers).
constexpr int64_t kCollectiveOverheadBytes = 16 * 1024;
int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}
int64_t ShardBytes(const TileMap& m, const Shape& base) {
  return Product(m.ShardShape(base.dims)) * PrimitiveTypeBytes(base.type);
}
// Bytes a device receives in an all-to-all moving k tiles of a sharded dim to dim b (whole):
// its shard, with b padded to a multiple of k (GSPMD §4.1: uneven dims travel padded), less the
// 1/k it keeps.
int64_t AllToAllBytes(const TileMap& m, const Shape& base, int64_t b, int64_t k) {
  std::vector<int64_t> shard = m.ShardShape(base.dims);
  shard[static_cast<size_t>(b)] = (base.dim(b) + k - 1) / k * k;
  return Product(shard) * PrimitiveTypeBytes(base.type) * (k - 1) / k;
}
ReplicaGroups MakeGroups(const std::vector<std::vector<int64_t>>& groups) {
  ReplicaGroups rg;
  rg.groups = groups;
  return rg;
}
}  // namespace

SpmdContext::SpmdContext(const Module& original, Module* out, int64_t num_devices, const SpmdOptions& options,
                         PartitionResult* result)
    : original_(original), out_(out), n_(num_devices), options_(options), result_(result) {}

const PValue& SpmdContext::Get(const Instruction* orig) const {
  static const PValue kMissing;
  auto it = values_.find(orig);
  return it == values_.end() ? kMissing : it->second;
}

const HloSharding& SpmdContext::ShardingOf(const Instruction& orig) {
  static const HloSharding kReplicated = HloSharding::Replicate();
  if (orig.has_sharding()) return *orig.sharding();
  return kReplicated;
}

void SpmdContext::set_origin(const Instruction* orig) {
  origin_ = orig;
  if (!orig) {
    origin_key_.clear();
    return;
  }
  const Computation* c = orig->parent();
  origin_key_ = (c && c->parent() && c != c->parent()->entry()) ? c->name() + "/" + orig->name() : orig->name();
}

Instruction* SpmdContext::Emit(Opcode op, Shape shape, std::vector<Instruction*> operands) {
  std::string base = origin_ ? origin_->name() : std::string(OpcodeName(op));
  if (origin_ && op != origin_->opcode()) base = std::string(OpcodeName(op));
  Instruction* i = comp_->AddInstruction(op, std::move(shape), std::move(operands), base);
  if (origin_) {
    result_->origin_map[origin_key_].push_back(i->name());
    if (!origin_->metadata.empty()) i->metadata = origin_->metadata;
  }
  return i;
}

Instruction* SpmdContext::ConstantScalar(PrimitiveType t, double v) {
  Instruction* c = Emit(Opcode::kConstant, Shape::Scalar(t), {});
  c->literal = ScalarLiteral(t, v);
  return c;
}

Instruction* SpmdContext::PartitionId() {
  if (!partition_id_) partition_id_ = Emit(Opcode::kPartitionId, Shape::Scalar(PrimitiveType::kU32), {});
  return partition_id_;
}

Instruction* SpmdContext::TableLookup(const std::vector<int64_t>& table) {
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

Instruction* SpmdContext::DynamicSlice(Instruction* x, const std::vector<Instruction*>& offsets,
                                       std::vector<int64_t> sizes) {
  std::vector<Instruction*> ops = {x};
  ops.insert(ops.end(), offsets.begin(), offsets.end());
  Instruction* ds = Emit(Opcode::kDynamicSlice, Shape(x->shape().type, sizes), std::move(ops));
  ds->dynamic_slice_sizes = std::move(sizes);
  return ds;
}

Instruction* SpmdContext::Slice(Instruction* x, std::vector<int64_t> limits) {
  if (limits == x->shape().dims) return x;
  Instruction* s = Emit(Opcode::kSlice, Shape(x->shape().type, limits), {x});
  s->slice.starts.assign(limits.size(), 0);
  s->slice.limits = limits;
  s->slice.strides.assign(limits.size(), 1);
  return s;
}

Instruction* SpmdContext::PadHigh(Instruction* x, const std::vector<int64_t>& high, double value) {
  if (std::all_of(high.begin(), high.end(), [](int64_t h) { return h == 0; })) return x;
  std::vector<int64_t> dims = x->shape().dims;
  for (size_t i = 0; i < dims.size(); ++i) dims[i] += high[i];
  Instruction* pv = ConstantScalar(x->shape().type, value);
  Instruction* p = Emit(Opcode::kPad, Shape(x->shape().type, dims), {x, pv});
  p->padding.resize(high.size());
  for (size_t i = 0; i < high.size(); ++i) p->padding[i].high = high[i];
  return p;
}

Instruction* SpmdContext::Reshape(Instruction* x, std::vector<int64_t> dims) {
  if (dims == x->shape().dims) return x;
  return Emit(Opcode::kReshape, Shape(x->shape().type, std::move(dims)), {x});
}

Instruction* SpmdContext::Transpose(Instruction* x, const std::vector<int64_t>& perm) {
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

Instruction* SpmdContext::Broadcast(Instruction* scalar, const Shape& shape) {
  Instruction* b = Emit(Opcode::kBroadcast, Shape(scalar->shape().type, shape.dims), {scalar});
  b->has_dimensions_attr = true;
  return b;
}

namespace {
void RecordCollective(PartitionResult* r, const std::string& origin, Instruction* c, Instruction* operand,
                      const std::string& groups, const std::string& reason) {
  InsertedCollective ic;
  ic.origin = origin;
  ic.instruction = c->name();
  ic.kind = c->opcode();
  ic.bytes_per_device = operand->shape().ByteSize();
  ic.replica_groups = groups;
  ic.reason = reason;
  r->collectives.push_back(std::move(ic));
}
}  // namespace

Instruction* SpmdContext::AllGather(Instruction* x, int64_t dim, const std::vector<std::vector<int64_t>>& groups,
                                    const std::string& reason) {
  const int64_t g = groups.empty() ? 1 : static_cast<int64_t>(groups[0].size());
  std::vector<int64_t> dims = x->shape().dims;
  dims[static_cast<size_t>(dim)] *= g;
  Instruction* ag = Emit(Opcode::kAllGather, Shape(x->shape().type, dims), {x});
  ag->dimensions = {dim};
  ag->has_dimensions_attr = true;
  ag->replica_groups = MakeGroups(groups);
  ag->has_replica_groups = true;
  ag->channel_id = NextChannelId();
  ag->use_global_device_ids = true;
  RecordCollective(result_, origin_key_, ag, x, GroupsToString(groups), reason);
  return ag;
}

Instruction* SpmdContext::AllReduce(Instruction* x, Computation* reducer,
                                    const std::vector<std::vector<int64_t>>& groups, const std::string& reason) {
  Instruction* ar = Emit(Opcode::kAllReduce, x->shape(), {x});
  ar->mutable_called_computations() = {reducer};
  ar->replica_groups = MakeGroups(groups);
  ar->has_replica_groups = true;
  ar->channel_id = NextChannelId();
  ar->use_global_device_ids = true;
  RecordCollective(result_, origin_key_, ar, x, GroupsToString(groups), reason);
  return ar;
}

Instruction* SpmdContext::ReduceScatter(Instruction* x, Computation* reducer, int64_t dim,
                                        const std::vector<std::vector<int64_t>>& groups, const std::string& reason) {
  const int64_t g = groups.empty() ? 1 : static_cast<int64_t>(groups[0].size());
  std::vector<int64_t> dims = x->shape().dims;
  dims[static_cast<size_t>(dim)] /= g;
  Instruction* rs = Emit(Opcode::kReduceScatter, Shape(x->shape().type, dims), {x});
  rs->mutable_called_computations() = {reducer};
  rs->dimensions = {dim};
  rs->has_dimensions_attr = true;
  rs->replica_groups = MakeGroups(groups);
  rs->has_replica_groups = true;
  rs->channel_id = NextChannelId();
  rs->use_global_device_ids = true;
  RecordCollective(result_, origin_key_, rs, x, GroupsToString(groups), reason);
  return rs;
}

Instruction* SpmdContext::AllToAll(Instruction* x, int64_t dim, const std::vector<std::vector<int64_t>>& groups,
                                   const std::string& reason) {
  Instruction* a = Emit(Opcode::kAllToAll, x->shape(), {x});
  a->dimensions = {dim};
  a->has_dimensions_attr = true;
  a->replica_groups = MakeGroups(groups);
  a->has_replica_groups = true;
  a->channel_id = NextChannelId();
  RecordCollective(result_, origin_key_, a, x, GroupsToString(groups), reason);
  return a;
}

Instruction* SpmdContext::CollectivePermute(Instruction* x, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                            const std::string& reason) {
  Instruction* cp = Emit(Opcode::kCollectivePermute, x->shape(), {x});
  cp->source_target_pairs = pairs;
  cp->channel_id = NextChannelId();
  std::string text = "{";
  for (size_t i = 0; i < pairs.size(); ++i)
    text += (i ? ",{" : "{") + std::to_string(pairs[i].first) + "," + std::to_string(pairs[i].second) + "}";
  RecordCollective(result_, origin_key_, cp, x, text + "}", reason);
  return cp;
}

Computation* SpmdContext::ScalarReducer(Opcode op, PrimitiveType t) {
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

Computation* SpmdContext::CloneScalarComputation(const Computation* src) {
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

Result<Shape> SpmdContext::ShardShapeOf(const Shape& base, const HloSharding& sharding) const {
  if (base.IsTuple()) {
    std::vector<Shape> leaves;
    for (size_t i = 0; i < base.tuple.size(); ++i) {
      HloSharding sub = sharding.IsTuple() && i < sharding.tuple_elements().size() ? sharding.tuple_elements()[i]
                                                                                   : sharding;
      auto s = ShardShapeOf(base.tuple[i], sub);
      if (!s.ok()) return s;
      leaves.push_back(std::move(s).value());
    }
    return Shape::Tuple(std::move(leaves));
  }
  if (!base.IsArray()) return base;
  auto m = MapOf(sharding, base.rank());
  if (!m.ok()) return m.error();
  return Shape(base.type, m->ShardShape(base.dims));
}

Instruction* SpmdContext::MaskPadding(const PValue& v, const std::vector<int64_t>& dims, double identity) {
  auto m = MapOf(v.sharding, v.base.rank());
  if (!m.ok()) return v.hlo;
  Instruction* mask = nullptr;
  const Shape local = v.hlo->shape();
  for (int64_t d : dims) {
    const int64_t full = v.base.dim(d);
    if (!m->HasPadding(d, full)) continue;
    Instruction* iota = Emit(Opcode::kIota, Shape(PrimitiveType::kS32, local.dims), {});
    iota->iota_dimension = d;
    Instruction* off = TableLookup(m->OffsetTable(d, full));
    Instruction* offb = Broadcast(off, Shape(PrimitiveType::kS32, local.dims));
    Instruction* pos = Emit(Opcode::kAdd, Shape(PrimitiveType::kS32, local.dims), {iota, offb});
    Instruction* lim = Broadcast(ConstantScalar(PrimitiveType::kS32, static_cast<double>(full)),
                                 Shape(PrimitiveType::kS32, local.dims));
    Instruction* lt = Emit(Opcode::kCompare, Shape(PrimitiveType::kPred, local.dims), {pos, lim});
    lt->comparison = ComparisonDirection::kLt;
    mask = mask ? Emit(Opcode::kAnd, Shape(PrimitiveType::kPred, local.dims), {mask, lt}) : lt;
  }
  if (!mask) return v.hlo;
  Instruction* idv = Broadcast(ConstantScalar(local.type, identity), local);
  return Emit(Opcode::kSelect, local, {mask, v.hlo, idv});
}

// ---- resharding ------------------------------------------------------------------------------------

namespace {
// A compact binary key for a sharding (cheaper than its text), for the memo tables.
void AppendKey(std::string& k, const HloSharding& s) {
  k += static_cast<char>('A' + static_cast<int>(s.kind()));
  if (s.IsTuple()) {
    k += '(';
    for (const auto& e : s.tuple_elements()) AppendKey(k, e);
    k += ')';
    return;
  }
  if (s.IsMaximal()) k += std::to_string(s.maximal_device());
  if (!s.IsTiled()) return;
  for (auto t : s.subgroup_types()) k += static_cast<char>('a' + static_cast<int>(t));
  const TileAssignment& ta = s.tile_assignment();
  if (ta.is_iota()) {
    // "[dims]<=[reshape]T(perm)" determines every device: a few bytes instead of all the ids.
    k += 'I';
    k += ta.ToString();
    k += ';';
    return;
  }
  k += 'E';
  const auto& dims = ta.dims();
  k += static_cast<char>(dims.size());
  k.append(reinterpret_cast<const char*>(dims.data()), dims.size() * sizeof(int64_t));
  const auto& devs = ta.devices();
  k.append(reinterpret_cast<const char*>(devs.data()), devs.size() * sizeof(int64_t));
}
}  // namespace

std::string ShardingKey(const HloSharding& s) {
  std::string k;
  AppendKey(k, s);
  return k;
}

Result<TileMap> SpmdContext::MapOf(const HloSharding& sharding, int64_t rank) const {
  std::string& key = map_key_buf_;
  key.clear();
  AppendKey(key, sharding);
  key += '#';
  key += std::to_string(rank);
  auto it = map_cache_.find(key);
  if (it != map_cache_.end()) return it->second;
  auto m = TileMap::FromSharding(sharding, rank, n_);
  map_cache_.emplace(key, m);
  return m;
}

Result<ReshardPlan> SpmdContext::PlanReshard(const HloSharding& from, const HloSharding& to, const Shape& base) const {
  {
    std::string& k = plan_key_buf_;
    k.clear();
    AppendKey(k, from);
    k += '>';
    AppendKey(k, to);
    k += '@';
    k += static_cast<char>(base.type);
    k.append(reinterpret_cast<const char*>(base.dims.data()), base.dims.size() * sizeof(int64_t));
    auto it = plan_cache_.find(k);
    if (it != plan_cache_.end()) return it->second;
  }
  std::string key = plan_key_buf_;  // the buffer is reused by the recursive planning below
  auto plan = PlanReshardUncached(from, to, base);
  plan_cache_.emplace(std::move(key), plan);
  return plan;
}

Result<ReshardPlan> SpmdContext::PlanReshardUncached(const HloSharding& from, const HloSharding& to,
                                                     const Shape& base) const {
  ReshardPlan plan;
  if (!base.IsArray()) return Error("PlanReshard: not an array: " + base.ToString());
  if (from == to) {
    plan.identity = true;
    return plan;
  }
  // Unreduced values hold partial sums: summing them (all-reduce over every device) gives the
  // replicated value; a value becomes unreduced by keeping it on device 0 and zeros elsewhere.
  const bool from_unreduced = from.kind() == HloSharding::Kind::kUnreduced;
  const bool to_unreduced = to.kind() == HloSharding::Kind::kUnreduced;
  if (from_unreduced != to_unreduced) {
    auto rep = TileMap::FromSharding(HloSharding::Replicate(), base.rank(), n_);
    if (!rep.ok()) return rep.error();
    ReshardPlan p;
    if (from_unreduced) {
      const int64_t bytes = base.ByteSize() * 2 * (n_ - 1) / std::max<int64_t>(n_, 1);
      p.steps.push_back({ReshardStep::Kind::kReduceUnreduced, {}, *rep, *rep, bytes});
      auto rest = PlanReshard(HloSharding::Replicate(), to, base);
      if (!rest.ok()) return rest;
      p.bytes = bytes + rest->bytes;
      for (auto& st : rest->steps) p.steps.push_back(st);
    } else {
      auto first = PlanReshard(from, HloSharding::Replicate(), base);
      if (!first.ok()) return first;
      p = *first;
      p.identity = false;
      p.steps.push_back({ReshardStep::Kind::kMakeUnreduced, {}, *rep, *rep, 0});
    }
    return p;
  }
  // A maximal (single-device) value reaches the others the way XLA does it: the owner keeps its
  // value, everyone else contributes zeros, and an all-reduce sums (GSPMD's broadcast by
  // all-reduce). A maximal target needs the value on its device; every device computing the same
  // replicated value satisfies that.
  if (from.IsMaximal() && !to.IsMaximal()) {
    auto rest = PlanReshard(HloSharding::Replicate(), to, base);
    if (!rest.ok()) return rest;
    auto rep = TileMap::FromSharding(HloSharding::Replicate(), base.rank(), n_);
    if (!rep.ok()) return rep.error();
    const int64_t bytes = base.ByteSize() * 2 * (n_ - 1) / std::max<int64_t>(n_, 1);
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kBroadcastFromDevice, {from.maximal_device()}, *rep, *rep, bytes});
    p.bytes = bytes + rest->bytes;
    for (auto& st : rest->steps) p.steps.push_back(st);
    return p;
  }
  const HloSharding& to_eff = to.IsMaximal() ? HloSharding::Replicate() : to;
  if (to.IsMaximal() && from.IsMaximal()) {
    if (from.maximal_device() == to.maximal_device()) {
      plan.identity = true;
      return plan;
    }
    auto rep = TileMap::FromSharding(HloSharding::Replicate(), base.rank(), n_);
    if (!rep.ok()) return rep.error();
    const int64_t bytes = base.ByteSize() * 2 * (n_ - 1) / std::max<int64_t>(n_, 1);
    plan.steps.push_back({ReshardStep::Kind::kBroadcastFromDevice, {from.maximal_device()}, *rep, *rep, bytes});
    plan.bytes = bytes;
    return plan;
  }
  auto fm = MapOf(from, base.rank());
  if (!fm.ok()) return fm.error();
  auto tm = MapOf(to_eff, base.rank());
  if (!tm.ok()) return tm.error();
  const TileMap& F = *fm;
  const TileMap& T = *tm;
  if (F.SameAs(T)) {
    plan.identity = true;
    return plan;
  }
  const std::vector<int64_t>& full = base.dims;
  std::vector<ReshardPlan> candidates;

  // 1. Local refinement: dynamic-slice only (replicated -> sharded, partial -> finer).
  if (IsLocalRefinement(F, T, full)) {
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, F, T, 0});
    candidates.push_back(p);
  }
  // 2. All-to-all: sharding moves from dim a to dim b over the same devices.
  for (int64_t a = 0; a < base.rank(); ++a) {
    for (int64_t b = 0; b < base.rank(); ++b) {
      if (a == b) continue;
      const int64_t k = F.tiles(a);
      if (k <= 1 || F.tiles(b) != 1 || T.tiles(a) != 1 || T.tiles(b) != k) continue;
      bool ok = true;
      for (int64_t d = 0; d < base.rank() && ok; ++d)
        if (d != a && d != b && F.tiles(d) != T.tiles(d)) ok = false;
      for (int64_t dev = 0; dev < n_ && ok; ++dev) {
        const auto& fi = F.device(dev).index;
        const auto& ti = T.device(dev).index;
        if (ti[static_cast<size_t>(b)] != fi[static_cast<size_t>(a)]) ok = false;
        for (int64_t d = 0; d < base.rank() && ok; ++d)
          if (d != a && d != b && fi[static_cast<size_t>(d)] != ti[static_cast<size_t>(d)]) ok = false;
      }
      if (!ok) continue;
      ReshardPlan p;
      p.steps.push_back({ReshardStep::Kind::kAllToAll, {a, b}, F, T, AllToAllBytes(F, base, b, k)});
      p.bytes = p.steps.back().bytes;
      candidates.push_back(p);
    }
  }
  // 3. Collective-permute: same tiling, different devices.
  if (F.tiles() == T.tiles()) {
    ReshardPlan p;
    p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, F, T, ShardBytes(F, base)});
    p.bytes = p.steps.back().bytes;
    candidates.push_back(p);
  }
  // 4. All-gather the dims that must be gathered, then refine locally. Try the minimal set and
  //    gathering everything (always valid).
  std::vector<int64_t> needed, all_tiled;
  for (int64_t d = 0; d < base.rank(); ++d) {
    if (F.tiles(d) > 1) all_tiled.push_back(d);
    if (F.tiles(d) == 1) continue;
    const int64_t fs = F.ShardSize(d, full[static_cast<size_t>(d)]);
    const int64_t ts = T.ShardSize(d, full[static_cast<size_t>(d)]);
    for (int64_t dev = 0; dev < n_; ++dev) {
      const int64_t fo = F.Offset(dev, d, full[static_cast<size_t>(d)]);
      const int64_t to = T.Offset(dev, d, full[static_cast<size_t>(d)]);
      const int64_t tend = std::min(to + ts, full[static_cast<size_t>(d)]);
      if (tend > to && (to < fo || tend > std::min(fo + fs, full[static_cast<size_t>(d)]))) {
        needed.push_back(d);
        break;
      }
    }
  }
  // 4a. Gather only down to the granularity the target needs (gcd of the tile counts): an
  //     all-gather within subgroups (XLA's partial replication resharding).
  {
    ReshardPlan p;
    TileMap cur = F;
    bool ok = true;
    for (int64_t d : needed) {
      const int64_t g = std::gcd(F.tiles(d), T.tiles(d));
      const int64_t k = F.tiles(d) / g;
      if (g <= 1 || k <= 1) { ok = false; break; }
      // The partial gather must land on the target's shard boundaries (even split).
      const int64_t s = cur.ShardSize(d, full[static_cast<size_t>(d)]);
      if (s * k != (full[static_cast<size_t>(d)] + g - 1) / g) { ok = false; break; }
      TileMap next = cur.GatheredBy(d, k);
      int64_t bytes = ShardBytes(cur, base) * (k - 1);
      p.steps.push_back({ReshardStep::Kind::kAllGather, {d, k}, cur, next, bytes});
      p.bytes += bytes;
      cur = next;
    }
    if (ok && !needed.empty()) {
      if (cur.SameAs(T)) {
        candidates.push_back(p);
      } else if (IsLocalRefinement(cur, T, full)) {
        p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, cur, T, 0});
        candidates.push_back(p);
      } else if (cur.tiles() == T.tiles()) {
        p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, cur, T, ShardBytes(cur, base)});
        p.bytes += ShardBytes(cur, base);
        candidates.push_back(p);
      }
    }
  }
  for (const auto& gather : {needed, all_tiled}) {
    if (gather.empty()) continue;
    ReshardPlan p;
    TileMap cur = F;
    for (int64_t d : gather) {
      TileMap next = cur.Gathered({d});
      const int64_t t = cur.tiles(d);
      int64_t bytes = ShardBytes(cur, base) * (t - 1);
      p.steps.push_back({ReshardStep::Kind::kAllGather, {d}, cur, next, bytes});
      p.bytes += bytes;
      cur = next;
    }
    if (!IsLocalRefinement(cur, T, full)) continue;
    if (!cur.SameAs(T)) p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, cur, T, 0});
    candidates.push_back(p);
  }
  // 5. All-to-all first, then a local refinement or a collective-permute (sharding moves to
  //    another dim and is then refined / reordered: XLA's multi-step resharding).
  for (int64_t a = 0; a < base.rank(); ++a) {
    for (int64_t b = 0; b < base.rank(); ++b) {
      const int64_t k = F.tiles(a);
      if (a == b || k <= 1 || F.tiles(b) != 1) continue;
      if (T.tiles(b) % k != 0 && T.tiles(b) != k) continue;
      std::vector<int64_t> tiles = F.tiles();
      tiles[static_cast<size_t>(b)] = k;
      tiles[static_cast<size_t>(a)] = 1;
      std::vector<DeviceTile> devs;
      for (int64_t dev = 0; dev < n_; ++dev) {
        DeviceTile dt = F.device(dev);
        dt.index[static_cast<size_t>(b)] = dt.index[static_cast<size_t>(a)];
        dt.index[static_cast<size_t>(a)] = 0;
        devs.push_back(dt);
      }
      TileMap mid(tiles, devs);
      const int64_t a2a = AllToAllBytes(F, base, b, k);
      ReshardPlan p;
      p.steps.push_back({ReshardStep::Kind::kAllToAll, {a, b}, F, mid, a2a});
      p.bytes = a2a;
      if (mid.SameAs(T)) {
        // already covered by candidate 2
      } else if (IsLocalRefinement(mid, T, full)) {
        p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, mid, T, 0});
        candidates.push_back(p);
      } else if (mid.tiles() == T.tiles()) {
        p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, mid, T, ShardBytes(mid, base)});
        p.bytes += ShardBytes(mid, base);
        candidates.push_back(p);
      }
    }
  }
  // 6. Reorder devices first (collective-permute into a layout from which the target is a local
  //    refinement): a partially replicated value whose groups are permuted.
  if (F.tiles() != T.tiles()) {
    // Map T onto F's tile grid: a device's F-tile is the T-tile it needs, coarsened.
    bool ok = true;
    std::vector<DeviceTile> devs;
    for (int64_t dev = 0; dev < n_ && ok; ++dev) {
      DeviceTile dt;
      dt.index.resize(static_cast<size_t>(base.rank()));
      for (int64_t d = 0; d < base.rank(); ++d) {
        const int64_t ft = F.tiles(d), tt = T.tiles(d);
        if (ft > tt || tt % ft != 0) ok = false;
        else dt.index[static_cast<size_t>(d)] = T.device(dev).index[static_cast<size_t>(d)] / (tt / ft);
      }
      devs.push_back(dt);
    }
    if (ok) {
      TileMap mid(F.tiles(), devs);
      std::map<std::vector<int64_t>, int64_t> count;
      for (auto& dt : devs) ++count[dt.index];
      bool grid = true;
      for (auto& [k, c] : count) grid &= c == F.replication();
      if (grid && !mid.SameAs(F) && IsLocalRefinement(mid, T, full)) {
        ReshardPlan p;
        p.steps.push_back({ReshardStep::Kind::kCollectivePermute, {}, F, mid, ShardBytes(F, base)});
        p.steps.push_back({ReshardStep::Kind::kDynamicSlice, {}, mid, T, 0});
        p.bytes = ShardBytes(F, base);
        candidates.push_back(p);
      }
    }
  }
  if (candidates.empty()) return Error("no resharding plan from " + from.ToString() + " to " + to.ToString());
  for (auto& c : candidates)
    for (const auto& st : c.steps)
      if (st.kind != ReshardStep::Kind::kDynamicSlice) c.bytes += kCollectiveOverheadBytes;
  auto best = std::min_element(candidates.begin(), candidates.end(), [](const ReshardPlan& x, const ReshardPlan& y) {
    if (x.bytes != y.bytes) return x.bytes < y.bytes;
    return x.steps.size() < y.steps.size();
  });
  return *best;
}

Result<Instruction*> SpmdContext::EmitPlan(const PValue& v, const ReshardPlan& plan, const HloSharding& target) {
  Instruction* x = v.hlo;
  const std::vector<int64_t>& full = v.base.dims;
  const std::string reason = "reshard " + v.sharding.ToString() + " -> " + target.ToString();
  for (const ReshardStep& st : plan.steps) {
    switch (st.kind) {
      case ReshardStep::Kind::kDynamicSlice: {
        std::vector<int64_t> sizes = st.after.ShardShape(full);
        std::vector<Instruction*> offsets;
        std::vector<int64_t> high(full.size(), 0);
        bool any = false;
        for (size_t d = 0; d < full.size(); ++d) {
          std::vector<int64_t> table(static_cast<size_t>(n_));
          for (int64_t dev = 0; dev < n_; ++dev) {
            table[static_cast<size_t>(dev)] = st.after.Offset(dev, static_cast<int64_t>(d), full[d]) -
                                              st.before.Offset(dev, static_cast<int64_t>(d), full[d]);
            high[d] = std::max(high[d], table[static_cast<size_t>(dev)] + sizes[d] - x->shape().dims[d]);
          }
          any |= sizes[d] != x->shape().dims[d] || std::any_of(table.begin(), table.end(), [](int64_t t) { return t; });
          offsets.push_back(TableLookup(table));
        }
        if (!any) break;
        x = PadHigh(x, high, 0.0);
        x = DynamicSlice(x, offsets, sizes);
        break;
      }
      case ReshardStep::Kind::kAllGather: {
        const int64_t d = st.dims[0];
        if (st.dims.size() == 2) {  // partial gather by a factor
          x = AllGather(x, d, st.before.GroupsGatheringBy(d, st.dims[1]), reason);
          break;
        }
        x = AllGather(x, d, st.before.GroupsAlong({d}), reason);
        // Drop the padding of uneven shards once the dim is whole.
        std::vector<int64_t> limits = x->shape().dims;
        limits[static_cast<size_t>(d)] = std::min(limits[static_cast<size_t>(d)], full[static_cast<size_t>(d)]);
        x = Slice(x, limits);
        break;
      }
      case ReshardStep::Kind::kAllToAll: {
        // Dim a (k tiles of ceil(A/k), padded) moves to dim b (whole, B): b is padded to k
        // chunks of ceil(B/k) (the target's shard, padding included), chunk j goes to tile j,
        // the received pieces are concatenated along a in source order and a's padding (all at
        // its end: tile i held [i*ceil(A/k), ...)) is sliced off. The padding of b stays as the
        // target's uneven-shard padding (which consumers mask where it could leak into a result).
        const int64_t a = st.dims[0], b = st.dims[1];
        const int64_t k = st.before.tiles(a);
        {
          std::vector<int64_t> high(x->shape().dims.size(), 0);
          const int64_t bd = x->shape().dim(b);
          high[static_cast<size_t>(b)] = (bd + k - 1) / k * k - bd;
          x = PadHigh(x, high, 0.0);
        }
        std::vector<int64_t> dims = x->shape().dims;  // dim a: ceil(A/k), dim b: k * ceil(B/k)
        std::vector<int64_t> split;
        for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
          if (d == b) {
            split.push_back(k);
            split.push_back(dims[static_cast<size_t>(d)] / k);
          } else {
            split.push_back(dims[static_cast<size_t>(d)]);
          }
        }
        x = Reshape(x, split);
        x = AllToAll(x, b, st.before.GroupsAlong({a}), reason);
        // Move the source-index dim (at b) to just before a, then merge it into a.
        const int64_t a_pos = a < b ? a : a + 1;
        std::vector<int64_t> perm;
        for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d) {
          if (d == b) continue;
          if (d == a_pos) perm.push_back(b);
          perm.push_back(d);
        }
        x = Transpose(x, perm);
        const std::vector<int64_t>& td = x->shape().dims;
        // After the transpose the source-index dim sits at index a, directly before a's data:
        // merge indices a and a+1.
        std::vector<int64_t> out;
        for (size_t d = 0; d < td.size(); ++d) {
          if (static_cast<int64_t>(d) == a) {
            out.push_back(td[d] * td[d + 1]);
            ++d;
          } else {
            out.push_back(td[d]);
          }
        }
        x = Reshape(x, out);
        std::vector<int64_t> limits = x->shape().dims;
        limits[static_cast<size_t>(a)] = std::min(limits[static_cast<size_t>(a)], full[static_cast<size_t>(a)]);
        x = Slice(x, limits);
        break;
      }
      case ReshardStep::Kind::kReduceUnreduced: {
        std::vector<int64_t> all(static_cast<size_t>(n_));
        for (int64_t i = 0; i < n_; ++i) all[static_cast<size_t>(i)] = i;
        const PrimitiveType t = x->shape().type;
        x = AllReduce(x, ScalarReducer(t == PrimitiveType::kPred ? Opcode::kOr : Opcode::kAdd, t), {all},
                      "sum the unreduced partial values");
        break;
      }
      case ReshardStep::Kind::kMakeUnreduced:
      case ReshardStep::Kind::kBroadcastFromDevice: {
        if (st.kind == ReshardStep::Kind::kMakeUnreduced) {
          std::vector<int64_t> first(static_cast<size_t>(n_), 0);
          if (n_ > 0) first[0] = 1;
          Instruction* flag = TableLookup(first);
          Instruction* one = ConstantScalar(PrimitiveType::kS32, 1);
          Instruction* eq = Emit(Opcode::kCompare, Shape::Scalar(PrimitiveType::kPred), {flag, one});
          eq->comparison = ComparisonDirection::kEq;
          const Shape& ls = x->shape();
          Instruction* mask = Emit(Opcode::kBroadcast, Shape(PrimitiveType::kPred, ls.dims), {eq});
          mask->has_dimensions_attr = true;
          Instruction* zero = Broadcast(ConstantScalar(ls.type, 0.0), ls);
          x = Emit(Opcode::kSelect, ls, {mask, x, zero});
          break;
        }
        const int64_t owner = st.dims[0];
        std::vector<int64_t> is_owner(static_cast<size_t>(n_), 0);
        if (owner >= 0 && owner < n_) is_owner[static_cast<size_t>(owner)] = 1;
        Instruction* flag = TableLookup(is_owner);
        Instruction* one = ConstantScalar(PrimitiveType::kS32, 1);
        Instruction* eq = Emit(Opcode::kCompare, Shape::Scalar(PrimitiveType::kPred), {flag, one});
        eq->comparison = ComparisonDirection::kEq;
        const Shape& ls = x->shape();
        Instruction* mask = Emit(Opcode::kBroadcast, Shape(PrimitiveType::kPred, ls.dims), {eq});
        mask->has_dimensions_attr = true;
        Instruction* zero = Broadcast(ConstantScalar(ls.type, 0.0), ls);
        Instruction* sel = Emit(Opcode::kSelect, ls, {mask, x, zero});
        std::vector<int64_t> all(static_cast<size_t>(n_));
        for (int64_t i = 0; i < n_; ++i) all[static_cast<size_t>(i)] = i;
        PrimitiveType rt = ls.type == PrimitiveType::kPred ? PrimitiveType::kPred : ls.type;
        x = AllReduce(sel, ScalarReducer(rt == PrimitiveType::kPred ? Opcode::kOr : Opcode::kAdd, rt), {all},
                      "broadcast from device " + std::to_string(owner));
        break;
      }
      case ReshardStep::Kind::kCollectivePermute: {
        // Match the k-th holder of each tile under `before` to the k-th wanter under `after`.
        std::map<std::vector<int64_t>, std::vector<int64_t>> holders, wanters;
        for (int64_t dev = 0; dev < n_; ++dev) {
          holders[st.before.device(dev).index].push_back(dev);
          wanters[st.after.device(dev).index].push_back(dev);
        }
        std::vector<std::pair<int64_t, int64_t>> pairs;
        for (auto& [tile, ws] : wanters) {
          auto& hs = holders[tile];
          // Keep devices that already hold the tile in place.
          std::vector<int64_t> free_h, free_w;
          for (int64_t w : ws)
            if (std::find(hs.begin(), hs.end(), w) != hs.end()) pairs.emplace_back(w, w);
            else free_w.push_back(w);
          for (int64_t h : hs)
            if (std::find(ws.begin(), ws.end(), h) == ws.end()) free_h.push_back(h);
          for (size_t i = 0; i < free_w.size() && i < free_h.size(); ++i) pairs.emplace_back(free_h[i], free_w[i]);
        }
        std::sort(pairs.begin(), pairs.end());
        x = CollectivePermute(x, pairs, reason);
        break;
      }
    }
  }
  return x;
}

Result<Instruction*> SpmdContext::Reshard(const PValue& v, const HloSharding& target) {
  if (!v.hlo) return Error("internal: resharding a value that was not partitioned");
  if (v.base.IsTuple()) return ReshardAny(v, target);
  if (!v.base.IsArray()) return v.hlo;
  if (v.sharding == target) return v.hlo;
  auto plan = PlanReshard(v.sharding, target, v.base);
  if (!plan.ok()) return plan.error();
  if (plan->identity) return v.hlo;
  return EmitPlan(v, *plan, target);
}

Result<Instruction*> SpmdContext::ReshardAny(const PValue& v, const HloSharding& target) {
  if (!v.base.IsTuple()) return Reshard(v, target);
  std::vector<Instruction*> leaves;
  bool changed = false;
  for (size_t i = 0; i < v.base.tuple.size(); ++i) {
    const Shape& leaf_base = v.base.tuple[i];
    HloSharding from = v.sharding.IsTuple() && i < v.sharding.tuple_elements().size()
                           ? v.sharding.tuple_elements()[i] : v.sharding;
    HloSharding to = target.IsTuple() && i < target.tuple_elements().size() ? target.tuple_elements()[i] : target;
    Instruction* gte = Emit(Opcode::kGetTupleElement, v.hlo->shape().tuple[i], {v.hlo});
    gte->tuple_index = static_cast<int64_t>(i);
    auto r = Reshard(PValue{gte, from, leaf_base}, to);
    if (!r.ok()) return r;
    changed |= *r != gte;
    leaves.push_back(*r);
  }
  if (!changed) return v.hlo;
  std::vector<Shape> shapes;
  for (Instruction* l : leaves) shapes.push_back(l->shape());
  return Emit(Opcode::kTuple, Shape::Tuple(shapes), leaves);
}

void SpmdContext::NoteFallback(const Instruction& orig) {
  std::string name = orig.opcode_text();
  auto& v = result_->replicated_fallbacks;
  if (std::find(v.begin(), v.end(), name) == v.end()) v.push_back(name);
}

// ---- halo exchange (GSPMD §4.3, Appendix A.2) -----------------------------------------------------

namespace {
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
}  // namespace

HaloPlan PlanHalo(int64_t shard, int64_t tiles, int64_t full, const std::vector<int64_t>& start, int64_t size,
                  bool x_sharded, bool pad_is_zero, const std::vector<int64_t>& need) {
  HaloPlan p;
  p.shard = shard;
  p.tiles = tiles;
  p.full = full;
  p.size = size = std::max<int64_t>(size, 0);
  const int64_t T = static_cast<int64_t>(start.size());
  if (shard < 1 || tiles < 1 || (!need.empty() && static_cast<int64_t>(need.size()) != T)) {
    p.link_rows = std::numeric_limits<int64_t>::max() / 4;  // nothing to plan: never worth it
    return p;
  }
  auto at = [](const std::vector<int64_t>& v, int64_t i) { return v[static_cast<size_t>(i)]; };
  auto needed = [&](int64_t i) { return need.empty() ? size : std::clamp<int64_t>(at(need, i), 0, size); };
  // The in-range part of what tile i needs: [lo, hi) in full coordinates (empty: lo >= hi).
  auto valid_lo = [&](int64_t i) { return std::max<int64_t>(at(start, i), 0); };
  auto valid_hi = [&](int64_t i) { return std::min(at(start, i) + needed(i), full); };
  auto has_data = [&](int64_t i) { return valid_lo(i) < valid_hi(i); };
  // The pieces, keyed by hop: for each shard the union of the rows any tile needs from it.
  std::map<int64_t, HaloPiece> by_hop;
  if (x_sharded) {
    for (int64_t i = 0; i < T; ++i) {
      if (!has_data(i)) continue;
      const int64_t lo = valid_lo(i) - i * shard, hi = valid_hi(i) - i * shard;  // relative to own shard
      for (int64_t m = FloorDiv(lo, shard); m * shard < hi; ++m) {
        const int64_t from = std::max(lo - m * shard, int64_t{0}), to = std::min(hi - m * shard, shard);
        auto it = by_hop.find(m);
        if (it == by_hop.end()) by_hop[m] = {m, from, to};
        else it->second = {m, std::min(it->second.from, from), std::max(it->second.to, to)};
      }
    }
    if (by_hop.empty()) by_hop[0] = {0, 0, std::min<int64_t>(1, shard)};  // nothing in range is needed
  } else {
    by_hop[0] = {0, 0, full};
  }
  int64_t total = 0;
  std::map<int64_t, int64_t> cum;  // hop -> layout index of its first row
  for (const auto& [m, piece] : by_hop) {
    cum[m] = total;
    total += piece.to - piece.from;
    p.pieces.push_back(piece);
    if (m != 0) {
      ++p.permutes;
      p.rows_received += piece.to - piece.from;
      p.link_rows += (piece.to - piece.from) * (m < 0 ? -m : m);
    }
  }
  // Layout index of full element g as held by tile i, or -1 when the layout does not hold it.
  auto index_of = [&](int64_t i, int64_t g) -> int64_t {
    const int64_t rel = x_sharded ? g - i * shard : g;
    const int64_t m = x_sharded ? FloorDiv(rel, shard) : 0;
    auto it = by_hop.find(m);
    if (it == by_hop.end()) return -1;
    const int64_t row = rel - m * shard;
    if (row < it->second.from || row >= it->second.to) return -1;
    return cum[m] + row - it->second.from;
  };
  // Window offsets: tiles holding data are pinned by their first in-range element.
  std::vector<int64_t> off(static_cast<size_t>(T), 0);
  int64_t min_off = 0, max_end = total;
  for (int64_t i = 0; i < T; ++i) {
    if (!has_data(i)) continue;
    off[static_cast<size_t>(i)] = index_of(i, valid_lo(i)) - (valid_lo(i) - at(start, i));
    min_off = std::min(min_off, off[static_cast<size_t>(i)]);
    max_end = std::max(max_end, off[static_cast<size_t>(i)] + size);
  }
  p.pad_low = -min_off;
  p.pad_high = max_end - total;
  const int64_t padded = total + p.pad_low + p.pad_high;
  if (padded < size) p.pad_high += size - padded;
  p.offsets.resize(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) {
    int64_t o = off[static_cast<size_t>(i)] + p.pad_low;
    // Tiles needing nothing in range: any window will do (masked where needed below).
    if (!has_data(i)) o = std::clamp<int64_t>(o, 0, total + p.pad_low + p.pad_high - size);
    p.offsets[static_cast<size_t>(i)] = o;
  }
  for (int64_t i = 1; i < T; ++i) p.dynamic |= p.offsets[static_cast<size_t>(i)] != p.offsets[0];
  // Masking: a needed position outside [0, full) must read the pad value. The pad around the
  // layout does; the zeros a collective-permute delivers where no neighbour exists do when the pad
  // value is 0; anything else (the padding of uneven shards, or rows of the layout that are not
  // this position) must be masked.
  for (int64_t i = 0; i < T && !(p.mask_low && p.mask_high); ++i) {
    const int64_t s = at(start, i), n = needed(i);
    auto check = [&](int64_t g) {
      const int64_t k = p.offsets[static_cast<size_t>(i)] + (g - s) - p.pad_low;  // layout index read
      if (k < 0 || k >= total) return false;                                     // the pad
      if (!x_sharded) return true;
      // Which shard row is there: find the piece.
      int64_t acc = 0;
      for (const HaloPiece& pc : p.pieces) {
        const int64_t len = pc.to - pc.from;
        if (k < acc + len) {
          const int64_t src = i + pc.hop;
          if (src < 0 || src >= tiles) return !pad_is_zero;  // zeros from a missing neighbour
          return true;  // a real row (or uneven-shard padding): not the pad value
        }
        acc += len;
      }
      return true;
    };
    for (int64_t g = s; g < std::min(s + n, int64_t{0}) && !p.mask_low; ++g) p.mask_low |= check(g);
    for (int64_t g = std::max(s, full); g < s + n && !p.mask_high; ++g) p.mask_high |= check(g);
  }
  return p;
}

std::optional<WindowedTiling> TileWindowedDim(const WindowDimension& w, int64_t tiles, int64_t out_shard,
                                              int64_t out_full) {
  const int64_t bd = w.base_dilation, s = w.stride, O = out_shard;
  if (bd < 1 || s < 1 || w.window_dilation < 1 || w.size < 1 || O < 1 || tiles < 1) return std::nullopt;
  const int64_t D = (w.size - 1) * w.window_dilation + 1;
  auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  WindowedTiling t;
  t.start.resize(static_cast<size_t>(tiles));
  std::vector<int64_t> phase(static_cast<size_t>(tiles));
  int64_t n = 1, pmax = 0, pmin = bd;
  for (int64_t i = 0; i < tiles; ++i) {
    // Tile i's windows cover [a, e) of the padded, dilated input; its first input element sits
    // phase = P*bd - a positions after a.
    const int64_t a = i * O * s - w.padding_low;
    const int64_t e = a + (O - 1) * s + D;
    const int64_t P = ceil_div(a, bd);
    t.start[static_cast<size_t>(i)] = P;
    phase[static_cast<size_t>(i)] = P * bd - a;
    n = std::max(n, ceil_div(e, bd) - P);
    pmax = std::max(pmax, phase[static_cast<size_t>(i)]);
    pmin = std::min(pmin, phase[static_cast<size_t>(i)]);
  }
  const bool uniform = pmin == pmax;
  if (!uniform && s != 1) return std::nullopt;
  t.size = n;
  t.local = w;
  t.local.padding_low = pmax;
  // Enough windows for every tile's own outputs, starting at pmax - phase (0 when uniform).
  const int64_t needed = O + (pmax - pmin);
  const int64_t base_len = pmax + (n - 1) * bd + 1;
  t.local.padding_high = std::max<int64_t>(0, (needed - 1) * s + D - base_len);
  t.local_out = (base_len + t.local.padding_high - D) / s + 1;
  t.out_offset.resize(static_cast<size_t>(tiles));
  t.need.resize(static_cast<size_t>(tiles));
  for (int64_t i = 0; i < tiles; ++i) {
    t.out_offset[static_cast<size_t>(i)] = pmax - phase[static_cast<size_t>(i)];
    // The input its valid outputs read (none for a tile entirely in the output's padding).
    const int64_t valid = std::clamp<int64_t>(out_full - i * O, 0, O);
    const int64_t a = i * O * s - w.padding_low;
    t.need[static_cast<size_t>(i)] =
        valid == 0 ? 0 : std::max<int64_t>(0, ceil_div(a + (valid - 1) * s + D, bd) - t.start[static_cast<size_t>(i)]);
  }
  return t;
}

Result<Instruction*> SpmdContext::ExchangeHalo(Instruction* x, const TileMap& map, int64_t dim, int64_t full,
                                               const std::vector<int64_t>& start, int64_t size, double pad_value,
                                               bool x_sharded, const std::string& what,
                                               const std::vector<int64_t>& need, Instruction* pad_scalar) {
  if (!x || !x->shape().IsArray() || dim < 0 || dim >= x->shape().rank() || dim >= map.rank())
    return Error("halo exchange: dimension " + std::to_string(dim) + " out of range");
  const int64_t tiles = map.tiles(dim);
  if (static_cast<int64_t>(start.size()) != tiles || size < 1)
    return Error("halo exchange: " + std::to_string(start.size()) + " windows for " + std::to_string(tiles) + " tiles");
  const int64_t shard = x_sharded ? map.ShardSize(dim, full) : full;
  if (shard < 1) return Error("halo exchange: dimension " + std::to_string(dim) + " is empty");
  if (x->shape().dim(dim) != shard)
    return Error("halo exchange: dimension " + std::to_string(dim) + " holds " + std::to_string(x->shape().dim(dim)) +
                 " elements, expected " + std::to_string(shard));
  if (!need.empty() && static_cast<int64_t>(need.size()) != tiles) return Error("halo exchange: need per tile expected");
  const HaloPlan p = PlanHalo(shard, tiles, full, start, size, x_sharded, !pad_scalar && pad_value == 0.0, need);
  if (pad_scalar && (!pad_scalar->shape().IsArray() || pad_scalar->shape().rank() != 0 ||
                     pad_scalar->shape().type != x->shape().type))
    return Error("halo exchange: the pad value must be a scalar of the array's type");
  auto pad_constant = [&]() { return pad_scalar ? pad_scalar : ConstantScalar(x->shape().type, pad_value); };
  const PrimitiveType type = x->shape().type;
  const std::string where = "halo exchange: " + what + " dim " + std::to_string(dim);
  auto slice_rows = [&](Instruction* v, int64_t from, int64_t to) -> Instruction* {
    if (from == 0 && to == v->shape().dim(dim)) return v;
    std::vector<int64_t> dims = v->shape().dims;
    dims[static_cast<size_t>(dim)] = to - from;
    Instruction* s = Emit(Opcode::kSlice, Shape(type, dims), {v});
    s->slice.starts.assign(dims.size(), 0);
    s->slice.limits = v->shape().dims;
    s->slice.strides.assign(dims.size(), 1);
    s->slice.starts[static_cast<size_t>(dim)] = from;
    s->slice.limits[static_cast<size_t>(dim)] = to;
    return s;
  };
  // The tile index of every device along dim (who needs which window).
  std::vector<int64_t> tile_of(static_cast<size_t>(n_));
  for (int64_t dev = 0; dev < n_; ++dev) tile_of[static_cast<size_t>(dev)] = map.device(dev).index[static_cast<size_t>(dim)];
  auto per_device = [&](const std::vector<int64_t>& per_tile) {
    std::vector<int64_t> t(static_cast<size_t>(n_));
    for (int64_t dev = 0; dev < n_; ++dev) t[static_cast<size_t>(dev)] = per_tile[static_cast<size_t>(tile_of[static_cast<size_t>(dev)])];
    return t;
  };
  Instruction* cur = x;
  if (x_sharded) {
    // Devices ordered by tile index along dim, one group per combination of the other indices.
    const auto groups = map.GroupsAlong({dim});
    auto hop_pairs = [&](int64_t hop) {  // source tile j + hop -> target tile j
      std::vector<std::pair<int64_t, int64_t>> pairs;
      for (const auto& g : groups)
        for (int64_t j = 0; j < static_cast<int64_t>(g.size()); ++j)
          if (j + hop >= 0 && j + hop < static_cast<int64_t>(g.size()))
            pairs.emplace_back(g[static_cast<size_t>(j + hop)], g[static_cast<size_t>(j)]);
      std::sort(pairs.begin(), pairs.end());
      return pairs;
    };
    std::vector<Instruction*> parts;
    for (const HaloPiece& pc : p.pieces) {
      Instruction* piece = slice_rows(x, pc.from, pc.to);
      if (pc.hop == 0) {
        parts.push_back(piece);
        continue;
      }
      const int64_t hops = pc.hop < 0 ? -pc.hop : pc.hop;
      parts.push_back(CollectivePermute(piece, hop_pairs(pc.hop),
                                        where + (pc.hop < 0 ? " left" : " right") + " halo " +
                                            std::to_string(pc.to - pc.from) + " row(s) from " + std::to_string(hops) +
                                            " tile(s) away"));
    }
    if (parts.size() > 1) {
      std::vector<int64_t> dims = x->shape().dims;
      dims[static_cast<size_t>(dim)] = 0;
      for (Instruction* q : parts) dims[static_cast<size_t>(dim)] += q->shape().dim(dim);
      cur = Emit(Opcode::kConcatenate, Shape(type, dims), parts);
      cur->dimensions = {dim};
      cur->has_dimensions_attr = true;
    } else {
      cur = parts[0];
    }
  }
  if (p.pad_low > 0 || p.pad_high > 0) {
    std::vector<int64_t> dims = cur->shape().dims;
    dims[static_cast<size_t>(dim)] += p.pad_low + p.pad_high;
    Instruction* pad = Emit(Opcode::kPad, Shape(type, dims), {cur, pad_constant()});
    pad->padding.resize(dims.size());
    pad->padding[static_cast<size_t>(dim)].low = p.pad_low;
    pad->padding[static_cast<size_t>(dim)].high = p.pad_high;
    cur = pad;
  }
  if (p.dynamic) {
    std::vector<Instruction*> offsets;
    std::vector<int64_t> sizes = cur->shape().dims;
    sizes[static_cast<size_t>(dim)] = size;
    for (int64_t d = 0; d < cur->shape().rank(); ++d)
      offsets.push_back(d == dim ? TableLookup(per_device(p.offsets)) : ConstantScalar(PrimitiveType::kS32, 0));
    cur = DynamicSlice(cur, offsets, sizes);
  } else {
    cur = slice_rows(cur, p.offsets[0], p.offsets[0] + size);
  }
  if (p.mask_low || p.mask_high) {
    const Shape local = cur->shape();
    const Shape s32(PrimitiveType::kS32, local.dims);
    const Shape pred(PrimitiveType::kPred, local.dims);
    Instruction* iota = Emit(Opcode::kIota, s32, {});
    iota->iota_dimension = dim;
    Instruction* pos = Emit(Opcode::kAdd, s32, {iota, Broadcast(TableLookup(per_device(start)), s32)});
    Instruction* mask = nullptr;
    if (p.mask_low) {
      Instruction* ge = Emit(Opcode::kCompare, pred, {pos, Broadcast(ConstantScalar(PrimitiveType::kS32, 0), s32)});
      ge->comparison = ComparisonDirection::kGe;
      mask = ge;
    }
    if (p.mask_high) {
      Instruction* lt = Emit(Opcode::kCompare, pred,
                             {pos, Broadcast(ConstantScalar(PrimitiveType::kS32, static_cast<double>(full)), s32)});
      lt->comparison = ComparisonDirection::kLt;
      mask = mask ? Emit(Opcode::kAnd, pred, {mask, lt}) : lt;
    }
    cur = Emit(Opcode::kSelect, local, {mask, cur, Broadcast(pad_constant(), local)});
  }
  return cur;
}

// ---- joint tilings ----------------------------------------------------------------------------------

std::optional<TileMap> BuildJointTiling(const std::vector<JointSource>& sources, int64_t num_labels,
                                        int64_t num_devices) {
  std::vector<int64_t> tiles(static_cast<size_t>(num_labels), 1);
  for (const JointSource& src : sources) {
    for (size_t d = 0; d < src.label_of_dim.size(); ++d) {
      const int64_t l = src.label_of_dim[d];
      const int64_t t = src.map->tiles(static_cast<int64_t>(d));
      if (l < 0 || t == 1) continue;
      if (tiles[static_cast<size_t>(l)] != 1 && tiles[static_cast<size_t>(l)] != t) return std::nullopt;
      tiles[static_cast<size_t>(l)] = t;
    }
  }
  std::vector<DeviceTile> devs(static_cast<size_t>(num_devices));
  for (int64_t dev = 0; dev < num_devices; ++dev) {
    auto& idx = devs[static_cast<size_t>(dev)].index;
    idx.assign(static_cast<size_t>(num_labels), -1);
    for (const JointSource& src : sources) {
      for (size_t d = 0; d < src.label_of_dim.size(); ++d) {
        const int64_t l = src.label_of_dim[d];
        if (l < 0 || src.map->tiles(static_cast<int64_t>(d)) == 1) continue;
        const int64_t v = src.map->device(dev).index[d];
        if (idx[static_cast<size_t>(l)] >= 0 && idx[static_cast<size_t>(l)] != v) return std::nullopt;
        idx[static_cast<size_t>(l)] = v;
      }
    }
    for (auto& v : idx) v = std::max<int64_t>(v, 0);
  }
  // A full grid: every tile held by the same number of devices (replicas numbered in device order).
  const int64_t total = Product(tiles);
  if (total <= 0 || num_devices % total != 0) return std::nullopt;
  std::map<std::vector<int64_t>, int64_t> count;
  for (auto& dt : devs) dt.replica = count[dt.index]++;
  if (static_cast<int64_t>(count.size()) != total) return std::nullopt;
  for (const auto& [k, c] : count)
    if (c != num_devices / total) return std::nullopt;
  return TileMap(tiles, devs);
}

TileMap ProjectJointTiling(const TileMap& joint, const std::vector<int64_t>& label_of_dim) {
  return joint.Projected(label_of_dim);
}


}  // namespace shardscope::spmd
