#include "core/zoo/training.h"

#include <cmath>
#include <unordered_map>

namespace shardscope {

std::string_view OptimizerName(Optimizer o) {
  switch (o) {
    case Optimizer::kNone: return "none";
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kAdam: return "adam";
    case Optimizer::kAdafactor: return "adafactor";
    case Optimizer::kLars: return "lars";
  }
  return "none";
}

std::optional<Optimizer> OptimizerFromName(std::string_view s) {
  if (s == "none") return Optimizer::kNone;
  if (s == "sgd") return Optimizer::kSgd;
  if (s == "adam") return Optimizer::kAdam;
  if (s == "adafactor") return Optimizer::kAdafactor;
  if (s == "lars") return Optimizer::kLars;
  return std::nullopt;
}

Optimizer ReadOptimizer(ZooParams& p) {
  auto o = OptimizerFromName(p.Str("optimizer"));
  if (!o) p.Fail("parameter optimizer must be none, sgd, adam, adafactor or lars, found '" + p.Str("optimizer") + "'");
  return o.value_or(Optimizer::kNone);
}

namespace zoo {

Status CheckPositive(const std::vector<std::pair<const char*, int64_t>>& values) {
  for (const auto& [n, v] : values) {
    if (v < 1) return Error(std::string(n) + " must be >= 1, found " + std::to_string(v));
    if (v > (int64_t{1} << 24)) return Error(std::string(n) + " = " + std::to_string(v) + " is too large (limit 16777216)");
  }
  return Status::Ok();
}

// Fails when a tensor of these dims would have more than 2^50 elements (shapes stay in int64 with
// room for byte sizes).
Status CheckElementCount(const std::vector<Dims>& tensors) {
  for (const Dims& d : tensors) {
    double n = 1;
    for (int64_t v : d) n *= static_cast<double>(v);
    if (n > std::ldexp(1.0, 50)) {
      std::string s;
      for (int64_t v : d) s += (s.empty() ? "" : ",") + std::to_string(v);
      return Error("a tensor of shape [" + s + "] would have more than 2^50 elements; choose smaller dimensions");
    }
  }
  return Status::Ok();
}

// ---- layer norm (no bias): y = (x - mean) * rsqrt(var + eps) * gamma over the last dim ------------


LayerNormSaved LayerNormForward(Net& net, Instruction* x, Instruction* gamma) {
  Builder& b = net.b();
  LayerNormSaved s;
  if (!x || !gamma) return s;
  const int64_t last = x->shape().rank() - 1;
  const double inv_m = 1.0 / static_cast<double>(x->shape().dims.back());
  Dims keep;
  for (int64_t i = 0; i < last; ++i) keep.push_back(i);
  Instruction* mean = net.Scale(net.Sum(x, {last}), inv_m, "mean");
  Instruction* xc = b.Sub(x, net.Bcast(mean, x, keep), "centered");
  Instruction* var = net.Scale(net.Sum(b.Mul(xc, xc), {last}), inv_m, "variance");
  Instruction* r = b.Rsqrt(b.Add(var, var ? b.FullLike(var, kLayerNormEps) : nullptr), "rsqrt");
  s.xhat = b.Mul(xc, net.Bcast(r, x, keep), "normalized");
  s.r = r;
  s.y = b.Mul(s.xhat, net.Bcast(gamma, x, {last}), "scaled");
  return s;
}

// Returns dx; accumulates dgamma into *dgamma.
Instruction* LayerNormBackward(Net& net, const LayerNormSaved& s, Instruction* gamma, Instruction* dy,
                               Instruction** dgamma) {
  Builder& b = net.b();
  if (!dy || !s.xhat || !gamma) return nullptr;
  const int64_t last = dy->shape().rank() - 1;
  const double inv_m = 1.0 / static_cast<double>(dy->shape().dims.back());
  Dims keep;
  for (int64_t i = 0; i < last; ++i) keep.push_back(i);
  *dgamma = net.Sum(b.Mul(dy, s.xhat), keep, "dscale");
  Instruction* dxhat = b.Mul(dy, net.Bcast(gamma, dy, {last}), "dnormalized");
  Instruction* mean_d = net.Scale(net.Sum(dxhat, {last}), inv_m, "mean_dnormalized");
  Instruction* mean_dx = net.Scale(net.Sum(b.Mul(dxhat, s.xhat), {last}), inv_m, "mean_dnormalized_x");
  Instruction* t = b.Sub(dxhat, net.Bcast(mean_d, dy, keep));
  t = b.Sub(t, b.Mul(s.xhat, net.Bcast(mean_dx, dy, keep)));
  return b.Mul(t, net.Bcast(s.r, dy, keep), "dx");
}

// ---- optimizer -----------------------------------------------------------------------------------------


std::vector<OptimizerSlot> OptimizerSlots(Optimizer opt, const Shape& weight) {
  switch (opt) {
    case Optimizer::kNone: case Optimizer::kSgd: return {};
    case Optimizer::kAdam: return {{"m", weight}, {"v", weight}};
    case Optimizer::kLars: return {{"momentum", weight}};
    case Optimizer::kAdafactor: {
      const int64_t r = weight.rank();
      if (r < 2) return {{"adafactor_v", weight}};
      Shape row = weight, col = weight;
      row.dims.erase(row.dims.begin() + (r - 1));
      col.dims.erase(col.dims.begin() + (r - 2));
      return {{"adafactor_row", row}, {"adafactor_col", col}};
    }
  }
  return {};
}

namespace {

Dims Iota(int64_t n) {
  Dims d;
  for (int64_t i = 0; i < n; ++i) d.push_back(i);
  return d;
}

// x * s for a scalar s.
Instruction* ScaleBy(Net& net, Instruction* x, Instruction* s, const std::string& name = "") {
  if (!x || !s) return nullptr;
  return net.b().Mul(x, net.Bcast(s, x, {}), name);
}

// sqrt(sum(x^2)) over every dim.
Instruction* Norm(Net& net, Instruction* x, const std::string& name) {
  if (!x) return nullptr;
  return net.b().Sqrt(net.Sum(net.b().Mul(x, x), Iota(x->shape().rank())), name);
}

// Adafactor's update clipping with d = 1: u / max(1, rms(u)).
Instruction* ClipByRms(Net& net, Instruction* u) {
  Builder& b = net.b();
  if (!u) return nullptr;
  const PrimitiveType t = u->shape().type;
  const double n = static_cast<double>(u->shape().ElementCount());
  Instruction* rms = b.Sqrt(net.Scale(net.Sum(b.Mul(u, u), Iota(u->shape().rank())), 1.0 / n), "update_rms");
  Instruction* denom = b.Max(rms, net.Const(1.0, t));
  return ScaleBy(net, u, b.Div(net.Const(1.0, t), denom), "clipped_update");
}

}  // namespace

UpdateResult ApplyOptimizer(Net& net, Optimizer opt, double lr, std::vector<Weight>& weights) {
  Builder& b = net.b();
  UpdateResult out;
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
  constexpr double kLarsMomentum = 0.9, kLarsWeightDecay = 1e-4, kLarsEta = 0.001;
  constexpr double kAdafactorEps = 1e-30;
  // New state per weight, slot by slot.
  std::vector<std::vector<Instruction*>> new_state(weights.size());
  for (size_t wi = 0; wi < weights.size(); ++wi) {
    Weight& w = weights[wi];
    auto scope = b.Scope("optimizer/" + w.scope);
    Instruction* g = w.grad;
    const std::string short_name = w.name.substr(w.name.find('_') + 1);
    const PrimitiveType t = w.param ? w.param->shape().type : PrimitiveType::kF32;
    const int64_t rank = w.param ? w.param->shape().rank() : 0;
    std::vector<Instruction*>& st = new_state[wi];
    auto state = [&](size_t k) { return k < w.state.size() ? w.state[k] : nullptr; };
    switch (opt) {
      case Optimizer::kNone:
        break;
      case Optimizer::kSgd:
        out.params.push_back(b.Sub(w.param, net.Scale(g, lr), short_name + "_new"));
        break;
      case Optimizer::kAdam: {
        // Adam without bias correction: m' = b1 m + (1-b1) g; v' = b2 v + (1-b2) g^2;
        // w' = w - lr m' / (sqrt(v') + eps).
        Instruction* m = b.Add(net.Scale(state(0), kBeta1), net.Scale(g, 1 - kBeta1), short_name + "_m_new");
        Instruction* v = b.Add(net.Scale(state(1), kBeta2), net.Scale(g ? b.Mul(g, g) : nullptr, 1 - kBeta2), short_name + "_v_new");
        Instruction* denom = v ? b.Add(b.Sqrt(v), b.FullLike(v, kEps)) : nullptr;
        Instruction* step = net.Scale(b.Div(m, denom), lr);
        out.params.push_back(b.Sub(w.param, step, short_name + "_new"));
        st = {m, v};
        break;
      }
      case Optimizer::kLars: {
        // u = g + wd w; trust = eta |w| / (|g| + wd |w|) (1 when either norm is 0; rank-1 weights:
        // 1); momentum' = mu momentum + lr trust u; w' = w - momentum'.
        Instruction* u = b.Add(g, net.Scale(w.param, kLarsWeightDecay), "decayed_grad");
        Instruction* trust = net.Const(1.0, t);
        if (rank >= 2) {
          Instruction* wn = Norm(net, w.param, "weight_norm");
          Instruction* gn = Norm(net, g, "grad_norm");
          Instruction* ratio = b.Div(net.Scale(wn, kLarsEta), b.Add(gn, net.Scale(wn, kLarsWeightDecay)));
          Instruction* both = b.Compare(b.Mul(wn, gn), net.Const(0.0, t), ComparisonDirection::kGt);
          trust = b.Select(both, ratio, net.Const(1.0, t), "trust_ratio");
        }
        Instruction* mom = b.Add(net.Scale(state(0), kLarsMomentum), ScaleBy(net, net.Scale(u, lr), trust),
                                 short_name + "_momentum_new");
        out.params.push_back(b.Sub(w.param, mom, short_name + "_new"));
        st = {mom};
        break;
      }
      case Optimizer::kAdafactor: {
        // g2 = g^2 + eps1. Rank >= 2: row' = b2 row + (1-b2) mean(g2, last dim), col' likewise
        // over the second-last dim, v = row' (x) col' / mean(row'); rank 1: v' = b2 v + (1-b2) g2.
        // u = g / sqrt(v), clipped to RMS 1; w' = w - lr u.
        Instruction* g2 = g ? b.Add(b.Mul(g, g), b.FullLike(g, kAdafactorEps), "grad_squared") : nullptr;
        Instruction* v = nullptr;
        if (rank >= 2) {
          const Dims& d = w.param->shape().dims;
          const double rows = static_cast<double>(d[static_cast<size_t>(rank - 2)]);
          const double cols = static_cast<double>(d[static_cast<size_t>(rank - 1)]);
          Instruction* row = b.Add(net.Scale(state(0), kBeta2), net.Scale(net.Sum(g2, {rank - 1}), (1 - kBeta2) / cols),
                                   short_name + "_adafactor_row_new");
          Instruction* col = b.Add(net.Scale(state(1), kBeta2), net.Scale(net.Sum(g2, {rank - 2}), (1 - kBeta2) / rows),
                                   short_name + "_adafactor_col_new");
          Instruction* row_mean = net.Scale(net.Sum(row, {rank - 2}), 1.0 / rows, "row_mean");
          Dims lead = Iota(rank - 2), row_dims = Iota(rank - 1), col_dims = Iota(rank - 2);
          col_dims.push_back(rank - 1);
          Instruction* outer = b.Mul(net.Bcast(row, g, row_dims), net.Bcast(col, g, col_dims));
          v = b.Div(outer, net.Bcast(row_mean, g, lead), "second_moment");
          st = {row, col};
        } else {
          v = b.Add(net.Scale(state(0), kBeta2), net.Scale(g2, 1 - kBeta2), short_name + "_adafactor_v_new");
          st = {v};
        }
        Instruction* u = ClipByRms(net, b.Mul(g, v ? b.Rsqrt(v) : nullptr, "update"));
        out.params.push_back(b.Sub(w.param, net.Scale(u, lr), short_name + "_new"));
        break;
      }
    }
  }
  // State outputs in parameter order: slot 0 of every weight, then slot 1, ...
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (auto& st : new_state)
      if (k < st.size()) {
        out.state.push_back(st[k]);
        any = true;
      }
    if (!any) break;
  }
  return out;
}

// Converts each accumulated gradient to the parameter type (backward scope).
void FinishGradients(Net& net, std::vector<Weight>& weights, PrimitiveType param_type) {
  for (Weight& w : weights) {
    if (w.grad && w.grad->shape().type != param_type) {
      auto scope = net.b().Scope("backward/" + w.scope);
      w.grad = net.ToType(w.grad, param_type, "grad_" + w.name.substr(w.name.find('_') + 1));
    }
  }
}

Instruction* MakeRoot(Net& net, Instruction* loss, std::vector<Weight>& weights, Optimizer opt, double lr) {
  Builder& b = net.b();
  std::vector<Instruction*> outs{loss};
  if (opt == Optimizer::kNone) {
    for (const Weight& w : weights) outs.push_back(w.grad);
  } else {
    UpdateResult u = ApplyOptimizer(net, opt, lr, weights);
    outs.insert(outs.end(), u.params.begin(), u.params.end());
    outs.insert(outs.end(), u.state.begin(), u.state.end());
  }
  return b.Tuple(outs, "outputs");
}

// Loss 0.5 * mean((out - target)^2) and its gradient with respect to `out`.
std::pair<Instruction*, Instruction*> MseLoss(Net& net, Instruction* out, Instruction* target) {
  Builder& b = net.b();
  auto scope = b.Scope("loss");
  if (!out) return {nullptr, nullptr};
  const double count = static_cast<double>(out->shape().ElementCount());
  Dims all;
  for (int64_t i = 0; i < out->shape().rank(); ++i) all.push_back(i);
  Instruction* diff = b.Sub(out, target, "diff");
  Instruction* loss = net.Scale(net.Sum(b.Mul(diff, diff), all, "sum_sq"), 0.5 / count, "loss");
  Instruction* dout = net.Scale(diff, 1.0 / count, "dout");
  return {loss, dout};
}

void AddOptimizerParameters(Builder& b, Optimizer opt, std::vector<Weight>& weights, int64_t* next_param) {
  std::vector<std::vector<OptimizerSlot>> slots;
  for (const Weight& w : weights) slots.push_back(w.param ? OptimizerSlots(opt, w.param->shape()) : std::vector<OptimizerSlot>{});
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (k >= slots[i].size()) continue;
      any = true;
      weights[i].state.push_back(b.Parameter((*next_param)++, slots[i][k].shape, weights[i].name + "_" + slots[i][k].suffix));
    }
    if (!any) break;
  }
}

void AccumulateGrad(Builder& b, Instruction** acc, Instruction* g) {
  if (!*acc) *acc = g;
  else *acc = b.Add(*acc, g);
}

}  // namespace zoo
}  // namespace shardscope

namespace shardscope::zoo {
namespace {

// `s` over a value that gains a leading unsplit dim.
HloSharding WithLeadingDim(const HloSharding& s) {
  if (!s.IsTiled()) return s;
  std::vector<int64_t> dims = s.tile_assignment().dims();
  dims.insert(dims.begin(), 1);
  TileAssignment t = s.tile_assignment().Reshape(dims);
  return s.subgroup_types().empty() ? HloSharding::Tile(t) : HloSharding::Subgroup(t, s.subgroup_types());
}

Instruction* Clone(Computation* into, const Instruction& from, std::vector<Instruction*> operands,
                   const std::unordered_map<const Computation*, Computation*>& cmap) {
  Instruction* n = from.opcode() == Opcode::kGeneric ? into->AddGeneric(from.opcode_text(), from.shape(), std::move(operands), from.name())
                                                      : into->AddInstruction(from.opcode(), from.shape(), std::move(operands), from.name());
  CopyAttributes(from, n);
  if (from.has_sharding()) n->set_sharding(*from.sharding());
  for (Computation* c : from.called_computations()) n->mutable_called_computations().push_back(cmap.at(c));
  return n;
}

}  // namespace

Result<std::unique_ptr<Module>> WrapInTrainingLoop(const Module& step, int64_t steps, int64_t batch_inputs) {
  const Computation* body_in = step.entry();
  if (!body_in || !body_in->root()) return Error("the step module has no entry computation");
  if (steps < 1 || steps > (int64_t{1} << 20)) return Error("steps must be between 1 and 2^20, found " + std::to_string(steps));
  const auto& params = body_in->parameters();
  const Instruction* root = body_in->root();
  const int64_t np = static_cast<int64_t>(params.size());
  if (batch_inputs < 0 || batch_inputs > np) return Error("more batch inputs than parameters");
  if (root->opcode() != Opcode::kTuple || root->operand_count() != 1 + np - batch_inputs)
    return Error("a training loop needs a step returning (loss, one new value per weight and optimizer state)");
  for (int64_t k = batch_inputs; k < np; ++k)
    if (!params[static_cast<size_t>(k)] || !root->operand(1 + k - batch_inputs)->shape().Compatible(params[static_cast<size_t>(k)]->shape()))
      return Error("output " + std::to_string(1 + k - batch_inputs) + " of the step does not match parameter " +
                   std::to_string(k) + " (optimizer none: there is nothing to carry)");
  const Shape loss_shape = root->operand(0)->shape();
  auto m = std::make_unique<Module>(step.name() + "_loop");
  m->num_partitions = step.num_partitions;
  m->num_replicas = step.num_replicas;
  std::unordered_map<const Computation*, Computation*> cmap;
  for (const Computation* c : step.MakeComputationPostOrder()) {
    if (c == body_in) continue;
    Computation* nc = m->AddComputation(c->name());
    cmap[c] = nc;
    std::unordered_map<const Instruction*, Instruction*> imap;
    for (const Instruction* i : c->MakePostOrder()) {
      std::vector<Instruction*> ops;
      for (const Instruction* o : i->operands()) ops.push_back(imap.at(o));
      imap[i] = Clone(nc, *i, ops, cmap);
    }
    nc->set_root(imap.at(c->root()));
  }
  const Shape s32 = Shape::Scalar(PrimitiveType::kS32);
  // State: (i, batch inputs [steps, ...]..., weights and state..., loss).
  std::vector<Shape> state;
  state.push_back(s32);
  for (int64_t k = 0; k < np; ++k) {
    Shape s = params[static_cast<size_t>(k)]->shape();
    if (k < batch_inputs) s.dims.insert(s.dims.begin(), steps);
    state.push_back(s);
  }
  state.push_back(loss_shape);
  const Shape state_shape = Shape::Tuple(state);
  // The entry first, so its parameters keep the step's names (x, target, ...).
  Computation* entry = m->AddComputation("main", /*is_entry=*/true);
  std::vector<Instruction*> ins;
  for (int64_t k = 0; k < np; ++k) {
    const Instruction* prm = params[static_cast<size_t>(k)];
    Instruction* n = entry->AddInstruction(Opcode::kParameter, state[static_cast<size_t>(1 + k)], {}, prm->name());
    n->parameter_number = k;
    if (prm->has_sharding()) n->set_sharding(k < batch_inputs ? WithLeadingDim(*prm->sharding()) : *prm->sharding());
    ins.push_back(n);
  }
  auto gte = [](Computation* c, Instruction* t, int64_t i, const std::string& name = "") {
    Instruction* g = c->AddInstruction(Opcode::kGetTupleElement, t->shape().tuple[static_cast<size_t>(i)], {t}, name);
    g->tuple_index = i;
    return g;
  };
  // Condition: i < steps.
  Computation* cond = m->AddComputation("training_loop_condition");
  {
    Instruction* p = cond->AddInstruction(Opcode::kParameter, state_shape, {}, "state");
    p->parameter_number = 0;
    Instruction* limit = cond->AddInstruction(Opcode::kConstant, s32, {}, "steps");
    limit->literal = ScalarLiteral(PrimitiveType::kS32, static_cast<double>(steps));
    Instruction* lt = cond->AddInstruction(Opcode::kCompare, Shape::Scalar(PrimitiveType::kPred), {gte(cond, p, 0), limit});
    lt->comparison = ComparisonDirection::kLt;
    cond->set_root(lt);
  }
  // Body: the step on slice i of each batch input.
  Computation* body = m->AddComputation("training_step");
  {
    Instruction* p = body->AddInstruction(Opcode::kParameter, state_shape, {}, "state");
    p->parameter_number = 0;
    Instruction* i = gte(body, p, 0);
    std::unordered_map<const Instruction*, Instruction*> imap;
    std::vector<Instruction*> carried;
    for (int64_t k = 0; k < np; ++k) {
      const Instruction* prm = params[static_cast<size_t>(k)];
      Instruction* g = gte(body, p, 1 + k);
      carried.push_back(g);
      if (k >= batch_inputs) {
        imap[prm] = g;
        continue;
      }
      std::vector<int64_t> sizes = g->shape().dims;
      sizes[0] = 1;
      std::vector<Instruction*> ops = {g, i};
      for (size_t d = 1; d < sizes.size(); ++d) {
        Instruction* z = body->AddInstruction(Opcode::kConstant, s32, {});
        z->literal = ScalarLiteral(PrimitiveType::kS32, 0);
        ops.push_back(z);
      }
      Instruction* ds = body->AddInstruction(Opcode::kDynamicSlice, Shape(g->shape().type, sizes), ops, prm->name() + "_step");
      ds->dynamic_slice_sizes = sizes;
      Instruction* r = body->AddInstruction(Opcode::kReshape, prm->shape(), {ds}, prm->name());
      r->metadata = prm->metadata;
      if (prm->has_sharding()) r->set_sharding(*prm->sharding());
      imap[prm] = r;
    }
    for (const Instruction* inst : body_in->MakePostOrder()) {
      if (inst->opcode() == Opcode::kParameter || inst == root) continue;
      std::vector<Instruction*> ops;
      for (const Instruction* o : inst->operands()) ops.push_back(imap.at(o));
      imap[inst] = Clone(body, *inst, ops, cmap);
    }
    Instruction* one = body->AddInstruction(Opcode::kConstant, s32, {});
    one->literal = ScalarLiteral(PrimitiveType::kS32, 1);
    std::vector<Instruction*> next = {body->AddInstruction(Opcode::kAdd, s32, {i, one}, "next_step")};
    for (int64_t k = 0; k < np; ++k)
      next.push_back(k < batch_inputs ? carried[static_cast<size_t>(k)] : imap.at(root->operand(1 + k - batch_inputs)));
    next.push_back(imap.at(root->operand(0)));
    body->set_root(body->AddInstruction(Opcode::kTuple, state_shape, next, "next_state"));
  }
  // Entry: the loop over the inputs, then (final weights and state..., last loss).
  {
    std::vector<Instruction*> init = {nullptr};
    Instruction* zero = entry->AddInstruction(Opcode::kConstant, s32, {}, "first_step");
    zero->literal = ScalarLiteral(PrimitiveType::kS32, 0);
    init[0] = zero;
    init.insert(init.end(), ins.begin(), ins.end());
    Instruction* l0 = entry->AddInstruction(Opcode::kConstant, loss_shape, {}, "no_loss");
    l0->literal = ScalarLiteral(loss_shape.type, 0);
    init.push_back(l0);
    Instruction* t = entry->AddInstruction(Opcode::kTuple, state_shape, init, "initial_state");
    Instruction* w = entry->AddInstruction(Opcode::kWhile, state_shape, {t}, "training_loop");
    w->mutable_called_computations() = {cond, body};
    w->backend_config = "{\"known_trip_count\":{\"n\":\"" + std::to_string(steps) + "\"}}";
    std::vector<Instruction*> outs;
    std::vector<Shape> shapes;
    for (int64_t k = batch_inputs; k < np; ++k) {
      Instruction* g = gte(entry, w, 1 + k, params[static_cast<size_t>(k)]->name() + "_final");
      outs.push_back(g);
      shapes.push_back(g->shape());
    }
    outs.push_back(gte(entry, w, 1 + np));
    shapes.push_back(loss_shape);
    entry->set_root(entry->AddInstruction(Opcode::kTuple, Shape::Tuple(shapes), outs, "outputs"));
  }
  return m;
}

}  // namespace shardscope::zoo
