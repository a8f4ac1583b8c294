#include "partitioner/spmd/windowed_einsum.h"

#include <algorithm>
#include <string>

#include "core/base/units.h"
#include "partitioner/spmd/context.h"

namespace shardscope::spmd {

namespace {

constexpr int64_t kMiB = 1024 * 1024;

// The windowed operand: the one whose plan is a single all-gather of one whole dimension.
struct Window {
  bool is_rhs = false;
  int64_t dim = -1;  // the operand's gathered dim
  int64_t n = 0;     // windows (the all-gather's group size)
  TileMap before;    // the operand's map as it is
  int64_t gathered_bytes = 0;
};

std::optional<Window> FindWindow(SpmdContext& ctx, const WindowedDotInput& in) {
  std::optional<Window> pick;
  for (const bool is_rhs : {true, false}) {
    const PartitionedHlo& v = is_rhs ? in.rhs : in.lhs;
    const HloSharding& target = is_rhs ? in.rhs_target : in.lhs_target;
    auto plan = ctx.resharder().Plan(v.sharding, target, v.base_shape);
    if (!plan.ok() || plan->steps.size() != 1) continue;
    const ReshardStep& st = plan->steps[0];
    if (st.kind != ReshardStep::Kind::kAllGather || st.dims.size() != 1) continue;
    const int64_t d = st.dims[0];
    const int64_t n = st.before.tiles(d);
    if (n < 2 || st.after.tiles(d) != 1) continue;
    const int64_t bytes = ElementsOf(st.after.ShardShape(v.base_shape.dims)) * PrimitiveTypeBytes(v.base_shape.type);
    if (bytes < ctx.options().windowed_einsum_threshold_mib * kMiB) continue;
    if (!pick || bytes > pick->gathered_bytes) pick = Window{is_rhs, d, n, st.before, bytes};
  }
  return pick;
}

}  // namespace

std::optional<Result<Instruction*>> TryWindowedDot(SpmdContext& ctx, const Instruction& dot, const WindowedDotInput& in) {
  if (ctx.options().windowed_einsum_threshold_mib < 0) return std::nullopt;
  const std::optional<Window> win = FindWindow(ctx, in);
  if (!win) return std::nullopt;
  const PartitionedHlo& xv = win->is_rhs ? in.rhs : in.lhs;
  const PartitionedHlo& ov = win->is_rhs ? in.lhs : in.rhs;
  const HloSharding& other_target = win->is_rhs ? in.lhs_target : in.rhs_target;
  const std::vector<int64_t>& x_label = win->is_rhs ? in.rhs_label : in.lhs_label;
  const std::vector<int64_t>& o_label = win->is_rhs ? in.lhs_label : in.rhs_label;
  const int64_t label = x_label[static_cast<size_t>(win->dim)];
  const int64_t out_dim = label < in.out_rank ? label : -1;
  const auto o_it = std::find(o_label.begin(), o_label.end(), label);
  const int64_t other_dim = o_it == o_label.end() ? -1 : static_cast<int64_t>(o_it - o_label.begin());
  const int64_t n = win->n;
  const int64_t full = xv.base_shape.dim(win->dim);
  const int64_t ws = win->before.ShardSize(win->dim, full);
  const int64_t padded = n * ws;
  // The plan multiplies the other operand and writes the output whole along the windowed label.
  auto other_shape = ctx.maps().ShardShape(ov.base_shape, other_target);
  if (!other_shape.ok()) return std::nullopt;
  if (other_dim >= 0 && other_shape->dim(other_dim) != full) return std::nullopt;
  if (out_dim >= 0 && in.local.dim(out_dim) != full) return std::nullopt;

  SpmdBuilder& b = ctx.builder();
  auto other_r = ctx.resharder().Reshard(ov, other_target);
  if (!other_r.ok()) return Result<Instruction*>(other_r.error());
  Instruction* other = *other_r;
  if (other_dim >= 0 && padded > full) {
    std::vector<int64_t> high(static_cast<size_t>(other->shape().rank()), 0);
    high[static_cast<size_t>(other_dim)] = padded - full;
    other = b.PadHigh(other, high, 0.0);
  }
  // A contracted window's padding must add nothing.
  Instruction* x = xv.hlo;
  if (out_dim < 0 && win->before.HasPadding(win->dim, full)) x = MaskPadding(ctx, xv, {win->dim}, 0.0);

  Shape acc_shape = in.local;
  if (out_dim >= 0) acc_shape.dims[static_cast<size_t>(out_dim)] = padded;
  Shape part_shape = in.local;
  if (out_dim >= 0) part_shape.dims[static_cast<size_t>(out_dim)] = ws;
  const Shape s32 = Shape::Scalar(PrimitiveType::kS32);
  auto c32 = [&](int64_t v) { return b.ConstantScalar(PrimitiveType::kS32, static_cast<double>(v)); };

  // Device -> its window at the start (its position in the ring), and the ring: each device
  // receives its successor's window.
  std::vector<int64_t> position(static_cast<size_t>(ctx.num_devices()), 0);
  for (int64_t dev = 0; dev < ctx.num_devices(); ++dev)
    position[static_cast<size_t>(dev)] = win->before.device(dev).index[static_cast<size_t>(win->dim)];
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (const auto& group : win->before.GroupsAlong({win->dim}))
    for (size_t k = 0; k < group.size(); ++k) pairs.emplace_back(group[(k + 1) % group.size()], group[k]);
  const std::string reason = "windowed einsum: " + std::string(win->is_rhs ? "rhs" : "lhs") + " window passed on (" +
                             std::to_string(n) + " windows instead of an all-gather of " +
                             FormatBytes(static_cast<double>(win->gathered_bytes)) + ")";

  // One step at iteration t (the window this device holds then is (position + t) mod n).
  auto step = [&](Instruction* oth, Instruction* xw, Instruction* acc, Instruction* t) {
    Instruction* w = b.Emit(Opcode::kRemainder, s32, {b.Emit(Opcode::kAdd, s32, {b.TableLookup(position), t}), c32(n)});
    Instruction* off = b.Emit(Opcode::kMultiply, s32, {w, c32(ws)});
    Instruction* o = oth;
    if (other_dim >= 0) {
      std::vector<Instruction*> offsets;
      for (int64_t i = 0; i < oth->shape().rank(); ++i) offsets.push_back(i == other_dim ? off : c32(0));
      std::vector<int64_t> sizes = oth->shape().dims;
      sizes[static_cast<size_t>(other_dim)] = ws;
      o = b.DynamicSlice(oth, offsets, sizes);
    }
    Instruction* prod = b.Emit(Opcode::kDot, part_shape, win->is_rhs ? std::vector<Instruction*>{o, xw}
                                                                     : std::vector<Instruction*>{xw, o});
    prod->dot_dims = dot.dot_dims;
    prod->raw_attributes = dot.raw_attributes;
    if (out_dim < 0) return b.Emit(Opcode::kAdd, acc->shape(), {acc, prod});
    std::vector<Instruction*> ops = {acc, prod};
    for (int64_t i = 0; i < acc->shape().rank(); ++i) ops.push_back(i == out_dim ? off : c32(0));
    return b.Emit(Opcode::kDynamicUpdateSlice, acc->shape(), std::move(ops));
  };

  Instruction* acc0 = b.Broadcast(b.ConstantScalar(dot.shape().type, 0.0), acc_shape);
  const Shape state = Shape::Tuple({other->shape(), x->shape(), acc_shape, s32});
  auto elements = [&](Instruction* tuple) {
    std::vector<Instruction*> e;
    for (int64_t i = 0; i < 4; ++i) {
      Instruction* g = b.Emit(Opcode::kGetTupleElement, state.tuple[static_cast<size_t>(i)], {tuple});
      g->tuple_index = i;
      e.push_back(g);
    }
    return e;
  };
  Module* m = b.out_module();
  const std::string base = dot.name() + ".windowed." + std::to_string(m->computations().size());
  const SpmdBuilder::Position saved = b.Save();
  Computation* body = m->AddComputation(base + ".body");
  b.set_comp(body);
  {
    Instruction* p = b.Emit(Opcode::kParameter, state, {});
    p->parameter_number = 0;
    const auto e = elements(p);
    Instruction* acc = step(e[0], e[1], e[2], e[3]);
    Instruction* next = b.CollectivePermute(e[1], pairs, reason);
    Instruction* t = b.Emit(Opcode::kAdd, s32, {e[3], c32(1)});
    body->set_root(b.Emit(Opcode::kTuple, state, {e[0], next, acc, t}));
  }
  Computation* cond = m->AddComputation(base + ".cond");
  b.set_comp(cond);
  {
    Instruction* p = b.Emit(Opcode::kParameter, state, {});
    p->parameter_number = 0;
    Instruction* t = b.Emit(Opcode::kGetTupleElement, s32, {p});
    t->tuple_index = 3;
    Instruction* lt = b.Emit(Opcode::kCompare, Shape::Scalar(PrimitiveType::kPred), {t, c32(n - 1)});
    lt->comparison = ComparisonDirection::kLt;
    cond->set_root(lt);
  }
  b.Restore(saved);
  Instruction* init = b.Emit(Opcode::kTuple, state, {other, x, acc0, c32(0)});
  Instruction* loop = b.Emit(Opcode::kWhile, state, {init});
  loop->mutable_called_computations() = {cond, body};
  loop->backend_config = "{\"known_trip_count\":{\"n\":\"" + std::to_string(n - 1) + "\"}}";
  // The last window's product, after the loop.
  const auto e = elements(loop);
  Instruction* acc = step(e[0], e[1], e[2], e[3]);
  if (out_dim >= 0 && padded > full) acc = b.Slice(acc, in.local.dims);
  return Result<Instruction*>(acc);
}

}  // namespace shardscope::spmd
