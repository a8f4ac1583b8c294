#include "partitioner/spmd/windowed_einsum.h"

#include <algorithm>
#include <functional>
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
    if (n < 2 || st.after.tiles(d) != 1 || n > ctx.options().windowed_einsum_max_iterations) continue;
    const int64_t bytes = ElementsOf(st.after.ShardShape(v.base_shape.dims)) * PrimitiveTypeBytes(v.base_shape.type);
    if (bytes < ctx.options().windowed_einsum_threshold_mib * kMiB) continue;
    if (!pick || bytes > pick->gathered_bytes) pick = Window{is_rhs, d, n, st.before, bytes};
  }
  return pick;
}

// The loop a plan would run: its window and where the windowed label sits in the other operand
// and the output.
struct Loop {
  Window win;
  int64_t out_dim = -1, other_dim = -1;  // -1: the label is not there (contracting / not in the other)
  int64_t full = 0, ws = 0, padded = 0;  // the windowed dim's size, window size, n * window size
};

std::optional<Loop> PlanLoop(SpmdContext& ctx, const WindowedDotInput& in) {
  if (ctx.options().windowed_einsum_threshold_mib < 0) return std::nullopt;
  std::optional<Window> win = FindWindow(ctx, in);
  if (!win) return std::nullopt;
  Loop l;
  const PartitionedHlo& xv = win->is_rhs ? in.rhs : in.lhs;
  const PartitionedHlo& ov = win->is_rhs ? in.lhs : in.rhs;
  const HloSharding& other_target = win->is_rhs ? in.lhs_target : in.rhs_target;
  const std::vector<int64_t>& x_label = win->is_rhs ? in.rhs_label : in.lhs_label;
  const std::vector<int64_t>& o_label = win->is_rhs ? in.lhs_label : in.rhs_label;
  const int64_t label = x_label[static_cast<size_t>(win->dim)];
  l.out_dim = label < in.out_rank ? label : -1;
  const auto o_it = std::find(o_label.begin(), o_label.end(), label);
  l.other_dim = o_it == o_label.end() ? -1 : static_cast<int64_t>(o_it - o_label.begin());
  l.full = xv.base_shape.dim(win->dim);
  l.ws = win->before.ShardSize(win->dim, l.full);
  l.padded = win->n * l.ws;
  // The plan multiplies the other operand and writes the output whole along the windowed label.
  auto other_shape = ctx.maps().ShardShape(ov.base_shape, other_target);
  if (!other_shape.ok()) return std::nullopt;
  if (l.other_dim >= 0 && other_shape->dim(l.other_dim) != l.full) return std::nullopt;
  if (l.out_dim >= 0 && in.local.dim(l.out_dim) != l.full) return std::nullopt;
  l.win = std::move(*win);
  return l;
}

// The loop both windowed forms share: state (a, b, acc, t); each of the n - 1 iterations computes
// acc = step(a, b, acc, t) and passes one element on round the ring (b: the window; or the new acc:
// the partial sums); the n-th step follows the loop. Returns the final acc.
enum class Travelling { kWindow, kAccumulator };
using RingStep = std::function<Instruction*(Instruction*, Instruction*, Instruction*, Instruction*)>;
Instruction* RingLoop(SpmdBuilder& b, const std::string& name, const std::vector<Instruction*>& init_values, int64_t n,
                      Travelling travelling, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                      const std::string& reason, const RingStep& step) {
  const Shape s32 = Shape::Scalar(PrimitiveType::kS32);
  auto c32 = [&](int64_t v) { return b.ConstantScalar(PrimitiveType::kS32, static_cast<double>(v)); };
  const Shape state = Shape::Tuple({init_values[0]->shape(), init_values[1]->shape(), init_values[2]->shape(), s32});
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
  const std::string base = name + ".windowed." + std::to_string(m->computations().size());
  const SpmdBuilder::Position saved = b.Save();
  Computation* body = m->AddComputation(base + ".body");
  b.set_comp(body);
  {
    Instruction* p = b.Emit(Opcode::kParameter, state, {});
    p->parameter_number = 0;
    const auto e = elements(p);
    Instruction* acc = step(e[0], e[1], e[2], e[3]);
    Instruction* window = e[1];
    if (travelling == Travelling::kWindow) window = b.CollectivePermute(e[1], pairs, reason);
    else acc = b.CollectivePermute(acc, pairs, reason);
    Instruction* t = b.Emit(Opcode::kAdd, s32, {e[3], c32(1)});
    body->set_root(b.Emit(Opcode::kTuple, state, {e[0], window, acc, t}));
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
  Instruction* init = b.Emit(Opcode::kTuple, state, {init_values[0], init_values[1], init_values[2], c32(0)});
  Instruction* loop = b.Emit(Opcode::kWhile, state, {init});
  loop->mutable_called_computations() = {cond, body};
  loop->backend_config = "{\"known_trip_count\":{\"n\":\"" + std::to_string(n - 1) + "\"}}";
  // The last step, after the loop.
  const auto e = elements(loop);
  return step(e[0], e[1], e[2], e[3]);
}

}  // namespace

std::optional<WindowedChoice> PlanWindowedDot(SpmdContext& ctx, const WindowedDotInput& in) {
  auto l = PlanLoop(ctx, in);
  if (!l) return std::nullopt;
  return WindowedChoice{l->win.is_rhs, l->win.n, l->win.gathered_bytes};
}

std::optional<Result<Instruction*>> TryWindowedDot(SpmdContext& ctx, const Instruction& dot, const WindowedDotInput& in) {
  const std::optional<Loop> loop_plan = PlanLoop(ctx, in);
  if (!loop_plan) return std::nullopt;
  const Window* win = &loop_plan->win;
  const PartitionedHlo& xv = win->is_rhs ? in.rhs : in.lhs;
  const PartitionedHlo& ov = win->is_rhs ? in.lhs : in.rhs;
  const HloSharding& other_target = win->is_rhs ? in.lhs_target : in.rhs_target;
  const int64_t out_dim = loop_plan->out_dim, other_dim = loop_plan->other_dim;
  const int64_t n = win->n, full = loop_plan->full, ws = loop_plan->ws, padded = loop_plan->padded;

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
  Instruction* acc = RingLoop(b, dot.name(), {other, x, acc0}, n, Travelling::kWindow, pairs, reason, step);
  if (out_dim >= 0 && padded > full) acc = b.Slice(acc, in.local.dims);
  return Result<Instruction*>(acc);
}

}  // namespace shardscope::spmd

namespace shardscope::spmd {

bool WindowedReduceScatterApplies(const SpmdContext& ctx, int64_t partial_bytes, int64_t windows) {
  const int64_t threshold = ctx.options().windowed_einsum_threshold_mib;
  return threshold >= 0 && windows >= 2 && windows <= ctx.options().windowed_einsum_max_iterations &&
         partial_bytes >= threshold * kMiB;
}

Instruction* WindowedReduceScatterDot(SpmdContext& ctx, const Instruction& dot, const WindowedReduceScatterInput& in) {
  SpmdBuilder& b = ctx.builder();
  const Shape s32 = Shape::Scalar(PrimitiveType::kS32);
  auto c32 = [&](int64_t v) { return b.ConstantScalar(PrimitiveType::kS32, static_cast<double>(v)); };
  const int64_t n = static_cast<int64_t>(in.groups.front().size());
  const int64_t whole = in.local.dim(in.out_dim);
  const int64_t ws = (whole + n - 1) / n;  // uneven: the operands are padded with zeros to n windows
  Shape out = in.local;
  out.dims[static_cast<size_t>(in.out_dim)] = ws;
  // A device's position is the piece of the scattered dim it ends with; it receives the partial
  // sums from its successor, so the window it adds to at step t is (position + t + 1) mod n.
  std::vector<int64_t> position(static_cast<size_t>(ctx.num_devices()), 0);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (const auto& group : in.groups)
    for (size_t k = 0; k < group.size(); ++k) {
      position[static_cast<size_t>(group[k])] = static_cast<int64_t>(k);
      pairs.emplace_back(group[(k + 1) % group.size()], group[k]);
    }
  const std::string reason = "windowed einsum: partial sums of " + std::to_string(n) +
                             " output windows passed on (instead of a reduce-scatter of " +
                             FormatBytes(static_cast<double>(ElementsOf(in.local.dims) * PrimitiveTypeBytes(in.local.type))) + ")";
  auto window_of = [&](Instruction* v, int64_t dim, Instruction* off) {
    if (dim < 0) return v;
    std::vector<Instruction*> offsets;
    for (int64_t i = 0; i < v->shape().rank(); ++i) offsets.push_back(i == dim ? off : c32(0));
    std::vector<int64_t> sizes = v->shape().dims;
    sizes[static_cast<size_t>(dim)] = ws;
    return b.DynamicSlice(v, offsets, sizes);
  };
  auto step = [&](Instruction* l, Instruction* r, Instruction* acc, Instruction* t) {
    Instruction* w = b.Emit(Opcode::kRemainder, s32,
                            {b.Emit(Opcode::kAdd, s32, {b.Emit(Opcode::kAdd, s32, {b.TableLookup(position), t}), c32(1)}), c32(n)});
    Instruction* off = b.Emit(Opcode::kMultiply, s32, {w, c32(ws)});
    Instruction* prod = b.Emit(Opcode::kDot, out, {window_of(l, in.lhs_dim, off), window_of(r, in.rhs_dim, off)});
    prod->dot_dims = dot.dot_dims;
    prod->raw_attributes = dot.raw_attributes;
    return b.Emit(Opcode::kAdd, out, {acc, prod});
  };
  auto padded = [&](Instruction* v, int64_t dim) {
    if (dim < 0 || n * ws == whole) return v;
    std::vector<int64_t> high(static_cast<size_t>(v->shape().rank()), 0);
    high[static_cast<size_t>(dim)] = n * ws - whole;
    return b.PadHigh(v, high, 0.0);
  };
  Instruction* acc0 = b.Broadcast(b.ConstantScalar(dot.shape().type, 0.0), out);
  return RingLoop(b, dot.name(), {padded(in.lhs, in.lhs_dim), padded(in.rhs, in.rhs_dim), acc0}, n, Travelling::kAccumulator,
                  pairs, reason, step);
}

}  // namespace shardscope::spmd
