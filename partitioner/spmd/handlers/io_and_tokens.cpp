// Host transfers, tokens and the ops of manually partitioned code (XLA's HandleInfeed,
// HandleOutfeed, HandlePartitionId, and its manual handling of collective-permute):
//   after-all           a token; passes through whatever its sharding.
//   infeed              each device reads its own part of the data from its host: replicated,
//                       maximal and manual data whole, tiled data its shard. When the tiling is
//                       uneven the devices read different shapes: a conditional over the devices'
//                       distinct shapes (branch index partition-id, or a table of it), each branch
//                       reading its shape and padding it to the shard shape.
//   outfeed             on one device (a maximal sharding): a conditional on partition-id ==
//                       device, the other devices producing a token by after-all; otherwise each
//                       device sends its shard (manual: its value as is); uneven tilings send each
//                       device's shard without its padding, through a conditional like infeed's.
//   partition-id        meaningful only in manually partitioned code (a manual sharding), where it
//                       stays as it is; elsewhere refused, as XLA refuses it.
//   collective-permute  written in manually partitioned code (manual, or a manual subgroup with
//                       the other mesh axes still partitioned): kept with its source-target pairs
//                       on each device's local value; outside such code the replicated fallback
//                       (XLA's DefaultAction).
#include <algorithm>
#include <string>
#include <vector>

#include "partitioner/hlo_sharding_util.h"
#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {

namespace {

Instruction* TupleElement(SpmdBuilder& b, Instruction* tuple, int64_t index) {
  Instruction* g = b.Emit(Opcode::kGetTupleElement, tuple->shape().tuple[static_cast<size_t>(index)], {tuple});
  g->tuple_index = index;
  return g;
}

Instruction* MakeTuple(SpmdBuilder& b, const std::vector<Instruction*>& elements) {
  std::vector<Shape> shapes;
  for (Instruction* e : elements) shapes.push_back(e->shape());
  return b.Emit(Opcode::kTuple, Shape::Tuple(std::move(shapes)), elements);
}

// Device `device`'s part of a value of shape `base` under `sharding`, without the padding of
// uneven shards (XLA's MakeNonPaddedShapeForGivenPartition); tuples leaf by leaf.
Result<Shape> UnpaddedShardShape(const TileMapCache& maps, const Shape& base, const HloSharding& sharding, int64_t device) {
  if (base.IsTuple()) {
    std::vector<Shape> leaves;
    for (size_t i = 0; i < base.tuple.size(); ++i) {
      auto leaf = UnpaddedShardShape(maps, base.tuple[i],
                                     hlo_sharding_util::TupleElementSharding(sharding, base, static_cast<int64_t>(i)), device);
      if (!leaf.ok()) return leaf;
      leaves.push_back(std::move(leaf).value());
    }
    return Shape::Tuple(std::move(leaves));
  }
  if (!base.IsArray()) return base;
  auto m = maps.Get(sharding, base.rank());
  if (!m.ok()) return m.error();
  Shape s(base.type, base.dims);
  for (int64_t d = 0; d < base.rank(); ++d) {
    const int64_t full = base.dim(d);
    const int64_t size = m->ShardSize(d, full);
    s.dims[static_cast<size_t>(d)] = std::clamp<int64_t>(full - m->Offset(device, d, full), 0, size);
  }
  return s;
}

// The devices' distinct unpadded shapes of a value (in the order of the first device holding
// each) and, per device, the index of its shape: the branches of an uneven infeed or outfeed.
struct PerDeviceShapes {
  std::vector<Shape> shapes;
  std::vector<int64_t> branch_of_device;
};
Result<PerDeviceShapes> DistinctShardShapes(SpmdContext& ctx, const Shape& base, const HloSharding& sharding) {
  PerDeviceShapes out;
  for (int64_t d = 0; d < ctx.num_devices(); ++d) {
    auto s = UnpaddedShardShape(ctx.maps(), base, sharding, d);
    if (!s.ok()) return s.error();
    size_t k = 0;
    while (k < out.shapes.size() && !out.shapes[k].Compatible(*s)) ++k;
    if (k == out.shapes.size()) out.shapes.push_back(std::move(s).value());
    out.branch_of_device.push_back(static_cast<int64_t>(k));
  }
  return out;
}

// The conditional's branch index on each device: partition-id itself when every device has a
// branch of its own (converted to s32, as conditional wants), else a table of it.
Instruction* BranchIndex(SpmdBuilder& b, const PerDeviceShapes& per_device) {
  if (static_cast<int64_t>(per_device.shapes.size()) == b.num_devices())
    return b.Emit(Opcode::kConvert, Shape::Scalar(PrimitiveType::kS32), {b.PartitionId()});
  return b.TableLookup(per_device.branch_of_device);
}

std::string UniqueComputationName(const Module& m, const std::string& base) {
  if (!m.FindComputation(base)) return base;
  for (int64_t k = 1;; ++k) {
    std::string name = base + "." + std::to_string(k);
    if (!m.FindComputation(name)) return name;
  }
}

// A computation of the SPMD program for a conditional's branch, built by `body` (which emits into
// it and returns its root); the builder's position is restored afterwards.
template <typename Body>
Computation* BuildBranch(SpmdBuilder& b, const std::string& base_name, Body body) {
  Computation* c = b.out_module()->AddComputation(UniqueComputationName(*b.out_module(), base_name));
  const SpmdBuilder::Position saved = b.Save();
  b.set_comp(c);
  c->set_root(body());
  b.Restore(saved);
  return c;
}

Instruction* BranchParameter(SpmdBuilder& b, const Shape& shape) {
  Instruction* p = b.Emit(Opcode::kParameter, shape, {});
  p->parameter_number = 0;
  return p;
}

// x (a value of `target`'s structure) with `leaf(b, array, target_leaf)` applied to every array
// leaf whose shape differs from the target's (tokens and matching leaves as they are).
template <typename LeafFn>
Instruction* MapLeavesTo(SpmdBuilder& b, Instruction* x, const Shape& target, const LeafFn& leaf) {
  if (x->shape().Compatible(target)) return x;
  if (x->shape().IsTuple()) {
    std::vector<Instruction*> leaves;
    for (size_t i = 0; i < target.tuple.size(); ++i)
      leaves.push_back(MapLeavesTo(b, TupleElement(b, x, static_cast<int64_t>(i)), target.tuple[i], leaf));
    return MakeTuple(b, leaves);
  }
  if (!x->shape().IsArray()) return x;
  return leaf(b, x, target);
}

// x (each array leaf no larger than `target`'s) padded at the high end with zeros up to `target`
// (XLA's PadToShape).
Instruction* PadLeavesTo(SpmdBuilder& b, Instruction* x, const Shape& target) {
  return MapLeavesTo(b, x, target, [](SpmdBuilder& bb, Instruction* a, const Shape& t) {
    std::vector<int64_t> high(a->shape().dims.size());
    for (size_t d = 0; d < high.size(); ++d) high[d] = t.dims[d] - a->shape().dims[d];
    return bb.PadHigh(a, high, 0);
  });
}

// x with every array leaf sliced down to `target` ([0, limit) on every dim): a shard without its
// padding.
Instruction* SliceLeavesTo(SpmdBuilder& b, Instruction* x, const Shape& target) {
  return MapLeavesTo(b, x, target, [](SpmdBuilder& bb, Instruction* a, const Shape& t) { return bb.Slice(a, t.dims); });
}

// `shape` with the layouts of `layout_from` where the structures agree (the per-device
// outfeed_shape keeps the original's layouts, as XLA copies them over).
Shape WithLayoutsOf(Shape shape, const Shape& layout_from) {
  if (shape.IsTuple()) {
    if (layout_from.IsTuple() && layout_from.tuple.size() == shape.tuple.size())
      for (size_t i = 0; i < shape.tuple.size(); ++i) shape.tuple[i] = WithLayoutsOf(shape.tuple[i], layout_from.tuple[i]);
    return shape;
  }
  if (shape.IsArray() && layout_from.IsArray() && layout_from.has_layout && layout_from.rank() == shape.rank()) {
    shape.has_layout = true;
    shape.minor_to_major = layout_from.minor_to_major;
    shape.layout_extra = layout_from.layout_extra;
  }
  return shape;
}

// An outfeed emitted for `orig` sending `data` (of shape `sent`): orig's attributes, with
// outfeed_shape (when written) the shape this device sends.
Instruction* EmitOutfeed(SpmdBuilder& b, const Instruction& orig, Instruction* data, Instruction* token, const Shape& sent) {
  Instruction* o = b.Emit(Opcode::kOutfeed, Shape::Token(), {data, token});
  CopyAttributes(orig, o);
  for (RawAttribute& a : o->raw_attributes) {
    if (a.key != "outfeed_shape") continue;
    auto written = ParseShape(a.value);
    a.value = WithLayoutsOf(sent, written.ok() ? *written : Shape()).ToString(true);
  }
  return o;
}

Status HandleAfterAll(SpmdContext& ctx, const Instruction& orig) {
  std::vector<Instruction*> tokens;
  for (const Instruction* o : orig.operands()) {
    const PartitionedHlo& v = ctx.Get(o);
    if (!v.hlo) return Error(orig.name() + ": operand " + o->name() + " was not partitioned");
    tokens.push_back(v.hlo);
  }
  Instruction* x = ctx.builder().Emit(Opcode::kAfterAll, Shape::Token(), tokens);
  ctx.Set(&orig, {x, SpmdContext::ShardingOf(orig), orig.shape()});
  return Status::Ok();
}

Status HandleInfeed(SpmdContext& ctx, const Instruction& orig) {
  if (!orig.shape().IsTuple() || orig.shape().tuple.size() != 2 || orig.operand_count() != 1)
    return Error(orig.name() + ": infeed takes a token and returns (data, token), found " + orig.shape().ToString(false));
  const PartitionedHlo& token = ctx.Get(orig.operand(0));
  if (!token.hlo) return Error(orig.name() + ": its token was not partitioned");
  SpmdBuilder& b = ctx.builder();
  const HloSharding sharding = SpmdContext::ShardingOf(orig);
  const Shape& data = orig.shape().tuple[0];
  const HloSharding data_sharding = hlo_sharding_util::TupleElementSharding(sharding, orig.shape(), 0);
  auto shard = ctx.maps().ShardShape(data, data_sharding);
  if (!shard.ok()) return Error(orig.name() + ": " + shard.error().message);
  const Shape result(Shape::Tuple({*shard, Shape::Token()}));
  auto per_device = DistinctShardShapes(ctx, data, data_sharding);
  if (!per_device.ok()) return Error(orig.name() + ": " + per_device.error().message);
  if (per_device->shapes.size() == 1 && per_device->shapes[0].Compatible(*shard)) {
    // Whole (replicated, maximal, manual) or evenly tiled: every device reads its part.
    Instruction* x = b.Emit(Opcode::kInfeed, result, {token.hlo});
    CopyAttributes(orig, x);
    ctx.Set(&orig, {x, sharding, orig.shape()});
    return Status::Ok();
  }
  // Uneven: the devices read different shapes, each branch one of them padded to the shard shape.
  std::vector<Computation*> branches;
  for (size_t k = 0; k < per_device->shapes.size(); ++k) {
    const Shape& mine = per_device->shapes[k];
    branches.push_back(BuildBranch(b, orig.name() + ".infeed_branch_" + std::to_string(k), [&] {
      Instruction* param = BranchParameter(b, Shape::Token());
      Instruction* in = b.Emit(Opcode::kInfeed, Shape::Tuple({mine, Shape::Token()}), {param});
      CopyAttributes(orig, in);
      if (mine.Compatible(*shard)) return in;
      Instruction* padded = PadLeavesTo(b, TupleElement(b, in, 0), *shard);
      return MakeTuple(b, {padded, TupleElement(b, in, 1)});
    }));
  }
  std::vector<Instruction*> operands = {BranchIndex(b, *per_device)};
  operands.insert(operands.end(), branches.size(), token.hlo);
  Instruction* x = b.Emit(Opcode::kConditional, result, operands);
  x->mutable_called_computations() = branches;
  ctx.Set(&orig, {x, sharding, orig.shape()});
  return Status::Ok();
}

// An outfeed on one device: a conditional on partition-id == device, whose other branch makes a
// token (XLA's HandleSingleDevice).
Status OutfeedOnOneDevice(SpmdContext& ctx, const Instruction& orig, int64_t device) {
  SpmdBuilder& b = ctx.builder();
  const HloSharding on_device = HloSharding::AssignDevice(device);
  auto data = ctx.resharder().ReshardAny(ctx.Get(orig.operand(0)), on_device);
  if (!data.ok()) return Error(orig.name() + ": " + data.error().message);
  Instruction* token = ctx.Get(orig.operand(1)).hlo;
  Instruction* args = MakeTuple(b, {*data, token});
  Instruction* pred = b.Emit(Opcode::kCompare, Shape::Scalar(PrimitiveType::kPred),
                             {b.PartitionId(), b.ConstantScalar(PrimitiveType::kU32, static_cast<double>(device))});
  pred->comparison = ComparisonDirection::kEq;
  Computation* sends = BuildBranch(b, orig.name() + ".on_device_" + std::to_string(device), [&] {
    Instruction* param = BranchParameter(b, args->shape());
    return EmitOutfeed(b, orig, TupleElement(b, param, 0), TupleElement(b, param, 1), (*data)->shape());
  });
  Computation* others = BuildBranch(b, orig.name() + ".elsewhere", [&] {
    BranchParameter(b, args->shape());
    return b.Emit(Opcode::kAfterAll, Shape::Token(), {});
  });
  Instruction* x = b.Emit(Opcode::kConditional, Shape::Token(), {pred, args, args});
  x->mutable_called_computations() = {sends, others};
  ctx.Set(&orig, {x, SpmdContext::ShardingOf(orig), orig.shape()});
  return Status::Ok();
}

Status HandleOutfeed(SpmdContext& ctx, const Instruction& orig) {
  if (orig.operand_count() != 2) return Error(orig.name() + ": outfeed takes data and a token");
  const PartitionedHlo& in = ctx.Get(orig.operand(0));
  const PartitionedHlo& token = ctx.Get(orig.operand(1));
  if (!in.hlo || !token.hlo) return Error(orig.name() + ": its operands were not partitioned");
  SpmdBuilder& b = ctx.builder();
  HloSharding sharding = SpmdContext::ShardingOf(orig);
  if (auto device = hlo_sharding_util::UniqueDevice(sharding)) return OutfeedOnOneDevice(ctx, orig, *device);
  // The sharding is the data's; a tuple sharding may also list the token's (one leaf more).
  const Shape& shape = orig.operand(0)->shape();
  const int64_t leaves = hlo_sharding_util::LeafCount(shape);
  if (sharding.IsTuple() && static_cast<int64_t>(sharding.tuple_elements().size()) == leaves + 1) {
    std::vector<HloSharding> data_leaves(sharding.tuple_elements().begin(), sharding.tuple_elements().end() - 1);
    sharding = HloSharding::Tuple(std::move(data_leaves));
  }
  if (sharding.IsTuple() && !shape.IsTuple() && !sharding.tuple_elements().empty()) sharding = sharding.tuple_elements().front();
  if (sharding.IsManual()) {
    // Manually partitioned code: each device sends its own value.
    Instruction* x = EmitOutfeed(b, orig, in.hlo, token.hlo, in.hlo->shape());
    ctx.Set(&orig, {x, SpmdContext::ShardingOf(orig), orig.shape()});
    return Status::Ok();
  }
  auto data = in.sharding == sharding ? Result<Instruction*>(in.hlo) : ctx.resharder().ReshardAny(in, sharding);
  if (!data.ok()) return Error(orig.name() + ": " + data.error().message);
  const Shape& shard = (*data)->shape();
  auto per_device = DistinctShardShapes(ctx, shape, sharding);
  if (!per_device.ok()) return Error(orig.name() + ": " + per_device.error().message);
  if (per_device->shapes.size() == 1 && per_device->shapes[0].Compatible(shard)) {
    Instruction* x = EmitOutfeed(b, orig, *data, token.hlo, shard);
    ctx.Set(&orig, {x, SpmdContext::ShardingOf(orig), orig.shape()});
    return Status::Ok();
  }
  // Uneven: each branch sends one of the devices' shapes, its shard with the padding sliced off.
  Instruction* args = MakeTuple(b, {*data, token.hlo});
  std::vector<Computation*> branches;
  for (size_t k = 0; k < per_device->shapes.size(); ++k) {
    const Shape& mine = per_device->shapes[k];
    branches.push_back(BuildBranch(b, orig.name() + ".outfeed_branch_" + std::to_string(k), [&] {
      Instruction* param = BranchParameter(b, args->shape());
      Instruction* sent = SliceLeavesTo(b, TupleElement(b, param, 0), mine);
      return EmitOutfeed(b, orig, sent, TupleElement(b, param, 1), mine);
    }));
  }
  std::vector<Instruction*> operands = {BranchIndex(b, *per_device)};
  operands.insert(operands.end(), branches.size(), args);
  Instruction* x = b.Emit(Opcode::kConditional, Shape::Token(), operands);
  x->mutable_called_computations() = branches;
  ctx.Set(&orig, {x, SpmdContext::ShardingOf(orig), orig.shape()});
  return Status::Ok();
}

Status HandlePartitionId(SpmdContext& ctx, const Instruction& orig) {
  if (!orig.has_sharding() || !orig.sharding()->IsManual())
    return Error(orig.name() + ": partition-id outside manually partitioned code is ambiguous (is the instruction "
                 "replicated, or its data, and which?), so the SPMD partitioner does not partition it, as XLA's does "
                 "not; inside a manual region give it sharding={manual}");
  Instruction* x = ctx.builder().Emit(Opcode::kPartitionId, orig.shape(), {});
  CopyAttributes(orig, x);
  ctx.Set(&orig, {x, *orig.sharding(), orig.shape()});
  return Status::Ok();
}

Status HandleCollectivePermute(SpmdContext& ctx, const Instruction& orig) {
  if (orig.operand_count() != 1 || !orig.shape().IsArray()) return PartitionWithFallback(ctx, orig);
  const PartitionedHlo& in = ctx.Get(orig.operand(0));
  if (!in.hlo) return Error(orig.name() + ": its operand was not partitioned");
  const HloSharding s = orig.has_sharding() ? *orig.sharding() : in.sharding;
  // Outside manually partitioned code: the op on the replicated value (XLA's DefaultAction).
  if (!s.IsManual() && !s.HasManualSubgroup()) return PartitionWithFallback(ctx, orig);
  for (const auto& [source, target] : orig.source_target_pairs)
    for (int64_t device : {source, target})
      if (device < 0 || device >= ctx.num_devices())
        return Error(orig.name() + ": source_target_pairs name device " + std::to_string(device) + ", outside the " +
                     std::to_string(ctx.num_devices()) + " partitions");
  // Each device's local value moves as the program says: the operand in the op's sharding (a
  // manual subgroup's other axes split as the op's), the same pairs.
  auto operand = ctx.resharder().Reshard(in, s);
  if (!operand.ok()) return Error(orig.name() + ": " + operand.error().message);
  auto local = ctx.maps().ShardShape(orig.shape(), s);
  if (!local.ok()) return Error(orig.name() + ": " + local.error().message);
  if (!(*operand)->shape().Compatible(*local))
    return Error(orig.name() + ": the operand holds " + (*operand)->shape().ToString(false) + " on each device, the result " +
                 local->ToString(false) + " under " + s.ToString());
  Instruction* x = ctx.builder().Emit(Opcode::kCollectivePermute, *local, {*operand});
  CopyAttributes(orig, x);
  // A fully manual value is each device's own (its shape the local one), as SPMDFullToShardShape
  // sets it.
  ctx.Set(&orig, {x, s, s.IsManual() ? *local : orig.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterIoAndTokenHandlers(HandlerTable& table) {
  table.Add({Opcode::kAfterAll}, HandleAfterAll);
  table.Add({Opcode::kInfeed}, HandleInfeed);
  table.Add({Opcode::kOutfeed}, HandleOutfeed);
  table.Add({Opcode::kPartitionId}, HandlePartitionId);
  table.Add({Opcode::kCollectivePermute}, HandleCollectivePermute);
}

}  // namespace shardscope::spmd
