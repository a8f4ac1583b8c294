#include "core/zoo/training.h"

#include <algorithm>
#include <cmath>

namespace shardscope {

std::string_view OptimizerName(Optimizer o) {
  switch (o) {
    case Optimizer::kNone: return "none";
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kAdam: return "adam";
    case Optimizer::kLars: return "lars";
  }
  return "none";
}

std::optional<Optimizer> OptimizerFromName(std::string_view s) {
  if (s == "none") return Optimizer::kNone;
  if (s == "sgd") return Optimizer::kSgd;
  if (s == "adam") return Optimizer::kAdam;
  if (s == "lars") return Optimizer::kLars;
  return std::nullopt;
}

Optimizer ReadOptimizer(ZooParams& p) {
  auto o = OptimizerFromName(p.Str("optimizer"));
  if (!o) p.Fail("parameter optimizer must be none, sgd, adam or lars, found '" + p.Str("optimizer") + "'");
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

NormSaved BatchNormForward(Net& net, Instruction* x, Instruction* gamma, Instruction* beta) {
  if (!x) return {};
  const int64_t f = x->shape().rank() - 1;
  Dims stats;
  for (int64_t i = 0; i < f; ++i) stats.push_back(i);
  return NormalizeForward(net, x, stats, gamma, beta, {f}, kBatchNormEps);
}

// ---- optimizer -----------------------------------------------------------------------------------------


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

void AccumulateGrad(Builder& b, Instruction** acc, Instruction* g) {
  if (!*acc) *acc = g;
  else *acc = b.Add(*acc, g);
}

}  // namespace zoo
}  // namespace shardscope
