#include "core/zoo/training.h"

#include <cmath>

namespace shardscope {

std::string_view OptimizerName(Optimizer o) {
  switch (o) {
    case Optimizer::kNone: return "none";
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kAdam: return "adam";
  }
  return "none";
}

std::optional<Optimizer> OptimizerFromName(std::string_view s) {
  if (s == "none") return Optimizer::kNone;
  if (s == "sgd") return Optimizer::kSgd;
  if (s == "adam") return Optimizer::kAdam;
  return std::nullopt;
}

Optimizer ReadOptimizer(ZooParams& p) {
  auto o = OptimizerFromName(p.Str("optimizer"));
  if (!o) p.Fail("parameter optimizer must be none, sgd or adam, found '" + p.Str("optimizer") + "'");
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

namespace {
// Where the scale's dims sit in x: its last dim on x's last, leading dims (a stack of scales, one
// per leading index of x) on x's leading dims.
Dims ScaleDims(Instruction* gamma, int64_t last) {
  Dims d;
  for (int64_t i = 0; i + 1 < gamma->shape().rank(); ++i) d.push_back(i);
  d.push_back(last);
  return d;
}
}  // namespace


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
  s.y = b.Mul(s.xhat, net.Bcast(gamma, x, ScaleDims(gamma, last)), "scaled");
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
  Dims summed;  // every dim but the scale's (the last, and any leading dims it carries)
  for (int64_t i = gamma->shape().rank() - 1; i < last; ++i) summed.push_back(i);
  *dgamma = net.Sum(b.Mul(dy, s.xhat), summed, "dscale");
  Instruction* dxhat = b.Mul(dy, net.Bcast(gamma, dy, ScaleDims(gamma, last)), "dnormalized");
  Instruction* mean_d = net.Scale(net.Sum(dxhat, {last}), inv_m, "mean_dnormalized");
  Instruction* mean_dx = net.Scale(net.Sum(b.Mul(dxhat, s.xhat), {last}), inv_m, "mean_dnormalized_x");
  Instruction* t = b.Sub(dxhat, net.Bcast(mean_d, dy, keep));
  t = b.Sub(t, b.Mul(s.xhat, net.Bcast(mean_dx, dy, keep)));
  return b.Mul(t, net.Bcast(s.r, dy, keep), "dx");
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
    // Adam without bias correction: m' = b1 m + (1-b1) g; v' = b2 v + (1-b2) g^2;
    // w' = w - lr m' / (sqrt(v') + eps).
    Instruction* m = b.Add(net.Scale(w.adam_m, kBeta1), net.Scale(g, 1 - kBeta1), short_name + "_m_new");
    Instruction* v = b.Add(net.Scale(w.adam_v, kBeta2), net.Scale(g ? b.Mul(g, g) : nullptr, 1 - kBeta2), short_name + "_v_new");
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

// Adds Adam state parameters (m for every weight, then v for every weight).
void AddAdamParameters(Builder& b, std::vector<Weight>& weights, int64_t* next_param) {
  for (Weight& w : weights) w.adam_m = b.Parameter((*next_param)++, w.param ? w.param->shape() : Shape(), w.name + "_m");
  for (Weight& w : weights) w.adam_v = b.Parameter((*next_param)++, w.param ? w.param->shape() : Shape(), w.name + "_v");
}

void AccumulateGrad(Builder& b, Instruction** acc, Instruction* g) {
  if (!*acc) *acc = g;
  else *acc = b.Add(*acc, g);
}

}  // namespace zoo
}  // namespace shardscope
