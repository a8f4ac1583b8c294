#include "core/zoo/training.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace shardscope {

std::string_view OptimizerName(Optimizer o) {
  switch (o) {
    case Optimizer::kNone: return "none";
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kAdam: return "adam";
    case Optimizer::kLars: return "lars";
    case Optimizer::kAdafactor: return "adafactor";
  }
  return "none";
}

std::optional<Optimizer> OptimizerFromName(std::string_view s) {
  if (s == "none") return Optimizer::kNone;
  if (s == "sgd") return Optimizer::kSgd;
  if (s == "adam") return Optimizer::kAdam;
  if (s == "lars") return Optimizer::kLars;
  if (s == "adafactor") return Optimizer::kAdafactor;
  return std::nullopt;
}

Optimizer ReadOptimizer(ZooParams& p) {
  auto o = OptimizerFromName(p.Str("optimizer"));
  if (!o) p.Fail("parameter optimizer must be none, sgd, adam, lars or adafactor, found '" + p.Str("optimizer") + "'");
  return o.value_or(Optimizer::kNone);
}

namespace zoo {

WeightAdder MakeWeightAdder(Builder& b, std::vector<Weight>& weights, const std::string& prefix, int64_t* next_param,
                            const std::string& scope_prefix) {
  const std::string where = scope_prefix.empty() ? prefix : scope_prefix;
  return [&b, &weights, prefix, where, next_param](const std::string& name, const std::string& scope,
                                                   const Shape& shape) -> Weight* {
    if (weights.size() == weights.capacity()) {
      b.Fail("internal: the weight list's capacity was not reserved");
      return nullptr;
    }
    Weight w;
    w.name = prefix + "_" + name;
    w.scope = scope.empty() ? where : where + "/" + scope;
    w.param = b.Parameter((*next_param)++, shape, w.name);
    weights.push_back(w);
    return &weights.back();
  };
}

void CastWeights(Net& net, std::vector<Weight>& weights) {
  for (Weight& w : weights) {
    auto scope = net.b().Scope(w.scope);
    w.value = net.ToType(w.param, net.act(), "cast_" + w.name.substr(w.name.find('_') + 1));
  }
}

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

// ---- normalisation ---------------------------------------------------------------------------------

namespace {

Dims Complement(const Dims& dims, int64_t rank) {
  Dims out;
  for (int64_t i = 0; i < rank; ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) out.push_back(i);
  return out;
}

double Count(const Instruction* x, const Dims& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(x->shape().dim(d));
  return n;
}

}  // namespace

NormSaved NormalizeForward(Net& net, Instruction* x, const Dims& stats, Instruction* gamma, Instruction* beta,
                           const Dims& param, double eps) {
  Builder& b = net.b();
  NormSaved s;
  s.stats = stats;
  s.param = param;
  if (!x || !gamma) return s;
  const Dims keep = Complement(stats, x->shape().rank());
  const double inv_n = 1.0 / Count(x, stats);
  Instruction* mean = net.Scale(net.Sum(x, stats), inv_n, "mean");
  Instruction* xc = b.Sub(x, net.Bcast(mean, x, keep), "centered");
  Instruction* var = net.Scale(net.Sum(b.Mul(xc, xc), stats), inv_n, "variance");
  Instruction* r = b.Rsqrt(b.Add(var, var ? b.FullLike(var, eps) : nullptr), "rsqrt");
  s.xhat = b.Mul(xc, net.Bcast(r, x, keep), "normalized");
  s.r = r;
  s.y = b.Mul(s.xhat, net.Bcast(gamma, x, param), "scaled");
  if (beta) s.y = b.Add(s.y, net.Bcast(beta, x, param), "shifted");
  return s;
}

Instruction* NormalizeBackward(Net& net, const NormSaved& s, Instruction* gamma, Instruction* dy, Instruction** dgamma,
                               Instruction** dbeta) {
  Builder& b = net.b();
  if (!dy || !s.xhat || !gamma) return nullptr;
  const int64_t rank = dy->shape().rank();
  const Dims keep = Complement(s.stats, rank);
  const Dims outside_param = Complement(s.param, rank);
  const double inv_n = 1.0 / Count(dy, s.stats);
  *dgamma = net.Sum(b.Mul(dy, s.xhat), outside_param, "dscale");
  if (dbeta) *dbeta = net.Sum(dy, outside_param, "doffset");
  // dx = r * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), means over the stats dims.
  Instruction* dxhat = b.Mul(dy, net.Bcast(gamma, dy, s.param), "dnormalized");
  Instruction* mean_d = net.Scale(net.Sum(dxhat, s.stats), inv_n, "mean_dnormalized");
  Instruction* mean_dx = net.Scale(net.Sum(b.Mul(dxhat, s.xhat), s.stats), inv_n, "mean_dnormalized_x");
  Instruction* t = b.Sub(dxhat, net.Bcast(mean_d, dy, keep));
  t = b.Sub(t, b.Mul(s.xhat, net.Bcast(mean_dx, dy, keep)));
  return b.Mul(t, net.Bcast(s.r, dy, keep), "dx");
}

NormSaved LayerNormForward(Net& net, Instruction* x, Instruction* gamma) {
  if (!x) return {};
  const int64_t last = x->shape().rank() - 1;
  // A stack of scales [P..., M] lies along x's leading dims and its last.
  Dims param;
  for (int64_t i = 0; gamma && i + 1 < gamma->shape().rank(); ++i) param.push_back(i);
  param.push_back(last);
  return NormalizeForward(net, x, {last}, gamma, nullptr, param, kLayerNormEps);
}

Instruction* LayerNormBackward(Net& net, const NormSaved& s, Instruction* gamma, Instruction* dy, Instruction** dgamma) {
  return NormalizeBackward(net, s, gamma, dy, dgamma);
}

NormSaved BatchNormForward(Net& net, Instruction* x, Instruction* gamma, Instruction* beta, int64_t group_dims) {
  if (!x) return {};
  const int64_t f = x->shape().rank() - 1;
  Dims stats;
  for (int64_t i = group_dims; i < f; ++i) stats.push_back(i);
  return NormalizeForward(net, x, stats, gamma, beta, {f}, kBatchNormEps);
}

// ---- optimizer -----------------------------------------------------------------------------------------


namespace {

Dims Iota(int64_t n) {
  Dims d;
  for (int64_t i = 0; i < n; ++i) d.push_back(i);
  return d;
}

// One weight's Adafactor step (training.h); its new state joins out->m (row / unfactored) and, for
// rank >= 2, out->v (column).
void ApplyAdafactor(Net& net, const Weight& w, double lr, const std::string& short_name, UpdateResult* out) {
  Builder& b = net.b();
  Instruction* g = w.grad;
  if (!g || !w.param) return;
  const int64_t rank = w.param->shape().rank();
  const PrimitiveType t = w.param->shape().type;
  Instruction* g2 = b.Add(b.Mul(g, g), b.FullLike(g, kAdafactorEps), "grad_squared");
  Instruction* v = nullptr;
  if (rank >= 2) {
    const Dims& d = w.param->shape().dims;
    const double rows = static_cast<double>(d[static_cast<size_t>(rank - 2)]);
    const double cols = static_cast<double>(d[static_cast<size_t>(rank - 1)]);
    Instruction* row = b.Add(net.Scale(w.m, kAdafactorDecay), net.Scale(net.Sum(g2, {rank - 1}), (1 - kAdafactorDecay) / cols),
                             short_name + "_adafactor_row_new");
    Instruction* col = b.Add(net.Scale(w.v, kAdafactorDecay), net.Scale(net.Sum(g2, {rank - 2}), (1 - kAdafactorDecay) / rows),
                             short_name + "_adafactor_col_new");
    Instruction* row_mean = net.Scale(net.Sum(row, {rank - 2}), 1.0 / rows, "row_mean");
    Dims col_dims = Iota(rank - 2);
    col_dims.push_back(rank - 1);
    Instruction* outer = b.Mul(net.Bcast(row, g, Iota(rank - 1)), net.Bcast(col, g, col_dims));
    v = b.Div(outer, net.Bcast(row_mean, g, Iota(rank - 2)), "second_moment");
    out->m.push_back(row);
    out->v.push_back(col);
  } else {
    v = b.Add(net.Scale(w.m, kAdafactorDecay), net.Scale(g2, 1 - kAdafactorDecay), short_name + "_adafactor_v_new");
    out->m.push_back(v);
  }
  // Update clipping (d = 1): u / max(1, rms(u)).
  Instruction* u = b.Mul(g, b.Rsqrt(v), "update");
  const double n = static_cast<double>(g->shape().ElementCount());
  Instruction* rms = b.Sqrt(net.Scale(net.Sum(b.Mul(u, u), Iota(g->shape().rank())), 1.0 / n), "update_rms");
  Instruction* clip = b.Div(net.Const(1.0, t), b.Max(rms, net.Const(1.0, t)));
  Instruction* clipped = b.Mul(u, b.Broadcast(clip, g->shape().dims, {}), "clipped_update");
  out->params.push_back(b.Sub(w.param, net.Scale(clipped, lr), short_name + "_new"));
}

}  // namespace

UpdateResult ApplyOptimizer(Net& net, Optimizer opt, double lr, std::vector<Weight>& weights) {
  Builder& b = net.b();
  UpdateResult out;
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
  for (Weight& w : weights) {
    auto scope = b.Scope("optimizer/" + w.scope);
    Instruction* g = w.grad;
    const std::string short_name = w.name.substr(w.name.find('_') + 1);
    if (opt == Optimizer::kSgd) {
      out.params.push_back(b.Sub(w.param, net.Scale(g, lr), short_name + "_new"));
      continue;
    }
    if (opt == Optimizer::kLars) {
      Instruction* step = g;
      if (g && w.param && w.param->shape().rank() > 1) {
        // trust = eta |w| / (|g| + wd |w|), 1 when either norm is 0; the step is lr trust (g + wd w).
        const PrimitiveType t = w.param->shape().type;
        Dims all;
        for (int64_t i = 0; i < w.param->shape().rank(); ++i) all.push_back(i);
        Instruction* wn = b.Sqrt(net.Sum(b.Mul(w.param, w.param), all), short_name + "_norm");
        Instruction* gn = b.Sqrt(net.Sum(b.Mul(g, g), all), short_name + "_grad_norm");
        Instruction* zero = net.Const(0, t);
        Instruction* both = b.Binary(Opcode::kAnd, b.Compare(wn, zero, ComparisonDirection::kGt),
                                     b.Compare(gn, zero, ComparisonDirection::kGt));
        Instruction* ratio = b.Div(net.Scale(wn, kLarsEta), b.Add(gn, net.Scale(wn, kLarsWeightDecay)));
        Instruction* trust = b.Select(both, ratio, net.Const(1, t), short_name + "_trust");
        Instruction* decayed = b.Add(g, net.Scale(w.param, kLarsWeightDecay));
        step = b.Mul(decayed, b.Broadcast(trust, g->shape().dims, {}));
      }
      Instruction* m = b.Add(net.Scale(w.m, kLarsMomentum), net.Scale(step, lr), short_name + "_m_new");
      out.params.push_back(b.Sub(w.param, m, short_name + "_new"));
      out.m.push_back(m);
      continue;
    }
    if (opt == Optimizer::kAdafactor) {
      ApplyAdafactor(net, w, lr, short_name, &out);
      continue;
    }
    // Adam without bias correction: m' = b1 m + (1-b1) g; v' = b2 v + (1-b2) g^2;
    // w' = w - lr m' / (sqrt(v') + eps).
    Instruction* m = b.Add(net.Scale(w.m, kBeta1), net.Scale(g, 1 - kBeta1), short_name + "_m_new");
    Instruction* v = b.Add(net.Scale(w.v, kBeta2), net.Scale(g ? b.Mul(g, g) : nullptr, 1 - kBeta2), short_name + "_v_new");
    Instruction* denom = v ? b.Add(b.Sqrt(v), b.FullLike(v, kEps)) : nullptr;
    Instruction* step = net.Scale(b.Div(m, denom), lr);
    out.params.push_back(b.Sub(w.param, step, short_name + "_new"));
    out.m.push_back(m);
    out.v.push_back(v);
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
    outs.insert(outs.end(), u.m.begin(), u.m.end());
    outs.insert(outs.end(), u.v.begin(), u.v.end());
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

void AddOptimizerState(Builder& b, std::vector<Weight>& weights, Optimizer opt, int64_t* next_param) {
  if (opt == Optimizer::kAdafactor) {
    auto without = [](Shape s, int64_t dim) {
      s.dims.erase(s.dims.begin() + dim);
      return s;
    };
    for (Weight& w : weights) {
      if (!w.param) continue;
      const Shape& s = w.param->shape();
      w.m = s.rank() >= 2 ? b.Parameter((*next_param)++, without(s, s.rank() - 1), w.name + "_adafactor_row")
                          : b.Parameter((*next_param)++, s, w.name + "_adafactor_v");
    }
    for (Weight& w : weights)
      if (w.param && w.param->shape().rank() >= 2)
        w.v = b.Parameter((*next_param)++, without(w.param->shape(), w.param->shape().rank() - 2), w.name + "_adafactor_col");
    return;
  }
  if (opt != Optimizer::kAdam && opt != Optimizer::kLars) return;
  for (Weight& w : weights) w.m = b.Parameter((*next_param)++, w.param ? w.param->shape() : Shape(), w.name + "_m");
  if (opt != Optimizer::kAdam) return;
  for (Weight& w : weights) w.v = b.Parameter((*next_param)++, w.param ? w.param->shape() : Shape(), w.name + "_v");
}

std::pair<Instruction*, Instruction*> SoftmaxCrossEntropy(Net& net, Instruction* logits, Instruction* labels) {
  Builder& b = net.b();
  auto scope = b.Scope("loss");
  if (!logits || !labels) return {nullptr, nullptr};
  const int64_t last = logits->shape().rank() - 1;
  Dims rows, all;
  for (int64_t i = 0; i < last; ++i) rows.push_back(i);
  for (int64_t i = 0; i <= last; ++i) all.push_back(i);
  const double count = static_cast<double>(logits->shape().ElementCount() / std::max<int64_t>(1, logits->shape().dim(last)));
  Instruction* mx = net.MaxOver(logits, {last}, "max");
  Instruction* shifted = b.Sub(logits, net.Bcast(mx, logits, rows), "shifted");
  Instruction* e = b.Exp(shifted, "exp");
  Instruction* den = net.Sum(e, {last}, "sum");
  Instruction* log_probs = b.Sub(shifted, net.Bcast(b.Log(den), logits, rows), "log_probs");
  Instruction* loss = net.Scale(net.Sum(b.Mul(labels, log_probs), all, "sum_ll"), -1.0 / count, "loss");
  Instruction* probs = b.Div(e, net.Bcast(den, e, rows), "probs");
  // d/dlogits = (probs * sum(labels) - labels) / rows: exact for any labels (probs - labels for a
  // distribution).
  Instruction* mass = net.Bcast(net.Sum(labels, {last}, "label_mass"), logits, rows);
  Instruction* dlogits = net.Scale(b.Sub(b.Mul(probs, mass), labels), 1.0 / count, "dlogits");
  return {loss, dlogits};
}

Instruction* OneHot(Net& net, Instruction* ids, int64_t classes, PrimitiveType t, const std::string& name) {
  Builder& b = net.b();
  if (!ids) return nullptr;
  Dims dims = ids->shape().dims, kept;
  for (int64_t i = 0; i < ids->shape().rank(); ++i) kept.push_back(i);
  dims.push_back(classes);
  Instruction* index = b.Iota(Shape(ids->shape().type, dims), ids->shape().rank(), name.empty() ? "" : name + "_index");
  Instruction* hit = b.Compare(index, b.Broadcast(ids, dims, kept), ComparisonDirection::kEq);
  return b.Convert(hit, t, name);
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
