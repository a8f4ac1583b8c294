#include "core/model_zoo.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>

#include "core/builder.h"
#include "core/verifier.h"

namespace shardscope {

// ---- names -----------------------------------------------------------------------------------------------

std::string_view AnnotationSetName(AnnotationSet s) {
  switch (s) {
    case AnnotationSet::kNone: return "none";
    case AnnotationSet::kAttempt1: return "attempt1";
    case AnnotationSet::kAttempt2: return "attempt2";
    case AnnotationSet::kFinalized: return "finalized";
  }
  return "none";
}

std::optional<AnnotationSet> AnnotationSetFromName(std::string_view s) {
  std::string k;
  for (char c : s)
    if (c != '-' && c != '_' && c != ' ') k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (k.rfind("2d", 0) == 0) k = k.substr(2);
  if (k == "none" || k.empty()) return AnnotationSet::kNone;
  if (k == "attempt1") return AnnotationSet::kAttempt1;
  if (k == "attempt2") return AnnotationSet::kAttempt2;
  if (k == "finalized" || k == "final") return AnnotationSet::kFinalized;
  return std::nullopt;
}

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

std::string_view Table1TensorName(Table1Tensor t) {
  switch (t) {
    case Table1Tensor::kWqkv: return "W_Q/W_K/W_V (MND)";
    case Table1Tensor::kWo: return "W_O (NDM)";
    case Table1Tensor::kWin: return "W_in (MH)";
    case Table1Tensor::kWout: return "W_out (HM)";
    case Table1Tensor::kBSM: return "BSM";
    case Table1Tensor::kBSND: return "BSND";
    case Table1Tensor::kBSH: return "BSH";
  }
  return "";
}

// GSPMD Table 1 ("Dense Transformer sharding annotations"), X = mesh axis 0, Y = mesh axis 1:
//                 MND     NDM     MH   HM   BSM     BSND      BSH
//   2D Attempt 1  X,Y,_   Y,_,X   X,Y  Y,X  _,_,X   _,_,Y,_   _,_,Y
//   2D Attempt 2  X,Y,_   Y,_,X   X,Y  Y,X  X,_,_   X,_,Y,_   X,_,Y
//   2D finalized  X,Y,_   Y,_,X   X,Y  Y,X  X,_,Y   X,_,Y,_   X,_,Y
std::vector<int64_t> Table1DimsMapping(AnnotationSet set, Table1Tensor tensor) {
  constexpr int64_t X = 0, Y = 1, _ = -1;
  if (set == AnnotationSet::kNone) return {};
  switch (tensor) {
    case Table1Tensor::kWqkv: return {X, Y, _};
    case Table1Tensor::kWo: return {Y, _, X};
    case Table1Tensor::kWin: return {X, Y};
    case Table1Tensor::kWout: return {Y, X};
    case Table1Tensor::kBSM:
      if (set == AnnotationSet::kAttempt1) return {_, _, X};
      if (set == AnnotationSet::kAttempt2) return {X, _, _};
      return {X, _, Y};
    case Table1Tensor::kBSND:
      if (set == AnnotationSet::kAttempt1) return {_, _, Y, _};
      return {X, _, Y, _};
    case Table1Tensor::kBSH:
      if (set == AnnotationSet::kAttempt1) return {_, _, Y};
      return {X, _, Y};
  }
  return {};
}

namespace {

using Dims = std::vector<int64_t>;

// Small helpers over the Builder shared by the models.
class Net {
 public:
  Net(Module& m, Builder& b, PrimitiveType act) : m_(m), b_(b), act_(act) {}
  Builder& b() { return b_; }

  Instruction* Const(double v, PrimitiveType t) { return b_.ConstantScalar(t, v); }
  // x * c (c broadcast to x's shape).
  Instruction* Scale(Instruction* x, double c, const std::string& name = "") {
    if (!x) return nullptr;
    return b_.Mul(x, b_.FullLike(x, c), name);
  }
  Instruction* Sum(Instruction* x, const Dims& dims, const std::string& name = "") {
    if (!x) return nullptr;
    const PrimitiveType t = x->shape().type;
    return b_.Reduce(x, Const(0, t), dims, ScalarAdd(m_, t), name);
  }
  Instruction* MaxOver(Instruction* x, const Dims& dims, const std::string& name = "") {
    if (!x) return nullptr;
    const PrimitiveType t = x->shape().type;
    return b_.Reduce(x, Const(-INFINITY, t), dims, ScalarMax(m_, t), name);
  }
  // Broadcasts `x` into `like`'s dims, x's dims landing on `dims`.
  Instruction* Bcast(Instruction* x, Instruction* like, const Dims& dims) {
    if (!x || !like) return nullptr;
    return b_.Broadcast(x, like->shape().dims, dims);
  }
  Instruction* Dot(Instruction* l, Instruction* r, Dims lb, Dims rb, Dims lc, Dims rc, const std::string& name = "") {
    DotDimensionNumbers dn;
    dn.lhs_batch = std::move(lb);
    dn.rhs_batch = std::move(rb);
    dn.lhs_contracting = std::move(lc);
    dn.rhs_contracting = std::move(rc);
    return b_.Dot(l, r, dn, name);
  }
  Instruction* Relu(Instruction* x, const std::string& name = "") {
    if (!x) return nullptr;
    return b_.Max(x, b_.FullLike(x, 0.0), name);
  }
  // d/dx relu(x) applied to dy: select(x > 0, dy, 0).
  Instruction* ReluGrad(Instruction* x, Instruction* dy, const std::string& name = "") {
    if (!x || !dy) return nullptr;
    Instruction* pos = b_.Compare(x, b_.FullLike(x, 0.0), ComparisonDirection::kGt);
    return b_.Select(pos, dy, b_.FullLike(dy, 0.0), name);
  }
  Instruction* ToType(Instruction* x, PrimitiveType t, const std::string& name = "") {
    if (!x || x->shape().type == t) return x;
    return b_.Convert(x, t, name);
  }
  PrimitiveType act() const { return act_; }

 private:
  Module& m_;
  Builder& b_;
  PrimitiveType act_;
};

// A trainable weight: its parameter, the value used in compute (converted to the activation type
// when that differs), its gradient and optimizer state.
struct Weight {
  std::string name;              // "layer0_wqkv"
  std::string scope;             // "layer0/attention" (for backward/optimizer scopes)
  Instruction* param = nullptr;  // param type
  Instruction* value = nullptr;  // act type
  Instruction* grad = nullptr;   // act type, accumulated by backward
  Instruction* adam_m = nullptr;
  Instruction* adam_v = nullptr;
};

// Annotation helper: MeshSplit on a 2-D mesh, recording errors in the builder.
class Annotator {
 public:
  Annotator(Builder& b, AnnotationSet set, const DeviceMesh& mesh) : b_(b), set_(set), mesh_(mesh) {}
  // `mapping` over the instruction's dims (already expanded from the Table 1 logical dims).
  void Apply(Instruction* inst, const Dims& mapping) {
    if (!inst || set_ == AnnotationSet::kNone) return;
    Result<HloSharding> s = MeshSplit(inst->shape().rank(), mesh_, mapping);
    if (!s.ok()) {
      b_.Fail("annotating " + inst->name() + ": " + s.error().message);
      return;
    }
    b_.Annotate(inst, *s);
  }
  void Table1(Instruction* inst, Table1Tensor t, const std::function<Dims(const Dims&)>& expand = nullptr) {
    if (set_ == AnnotationSet::kNone) return;
    Dims m = Table1DimsMapping(set_, t);
    Apply(inst, expand ? expand(m) : m);
  }
  AnnotationSet set() const { return set_; }

 private:
  Builder& b_;
  AnnotationSet set_;
  const DeviceMesh& mesh_;
};

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

struct LayerNormSaved {
  Instruction* xhat = nullptr;  // normalised input
  Instruction* r = nullptr;     // rsqrt(var + eps), [B,S]
  Instruction* y = nullptr;
};

constexpr double kLayerNormEps = 1e-6;

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

struct UpdateResult {
  std::vector<Instruction*> params, m, v;
};

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

}  // namespace

// ---- Transformer ----------------------------------------------------------------------------------------

Result<std::unique_ptr<Module>> BuildTransformer(const TransformerConfig& c) {
  if (Status s = CheckPositive({{"batch", c.batch}, {"seq", c.seq}, {"model", c.model}, {"heads", c.heads},
                                {"head_dim", c.head_dim}, {"hidden", c.hidden}, {"layers", c.layers},
                                {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.layers > 4096) return Error("layers = " + std::to_string(c.layers) + " is too many (limit 4096)");
  if (Status s = CheckElementCount({{c.batch, c.heads, c.seq, c.seq}, {c.batch, c.seq, c.hidden},
                                    {3, c.model, c.heads, c.head_dim}, {c.batch, c.seq, 3, c.heads, c.head_dim}});
      !s.ok())
    return s.error();
  if (c.optimizer != Optimizer::kNone && !c.backward) return Error("an optimizer step needs backward=1");
  if (!IsFloatingPoint(c.param_type) || !IsFloatingPoint(c.act_type))
    return Error("parameter and activation types must be floating point");

  const int64_t B = c.batch, S = c.seq, M = c.model, N = c.heads, D = c.head_dim, H = c.hidden;
  const PrimitiveType P = c.param_type, A = c.act_type;
  const DeviceMesh mesh({{"X", c.mesh_x}, {"Y", c.mesh_y}});

  auto module = std::make_unique<Module>(c.layers == 1 ? "transformer_layer" : "transformer");
  module->num_partitions = c.mesh_x * c.mesh_y;
  Module& m = *module;
  // Reducers first, so the module lists callees before their callers (as XLA's text does).
  ScalarAdd(m, A);
  ScalarMax(m, A);
  Builder b(m.AddComputation("main", /*is_entry=*/true));
  b.set_scoped_names(true);
  Net net(m, b, A);
  Annotator ann(b, c.annotations, mesh);

  // Parameters.
  int64_t pn = 0;
  Instruction* x = b.Parameter(pn++, Shape(A, {B, S, M}), "x");
  Instruction* target = c.backward ? b.Parameter(pn++, Shape(A, {B, S, M}), "target") : nullptr;
  struct LayerW {
    Weight* ln1 = nullptr; Weight* wqkv = nullptr; Weight* wo = nullptr;
    Weight* ln2 = nullptr; Weight* wi = nullptr; Weight* wout = nullptr;
  };
  std::vector<Weight> weights;
  weights.reserve(static_cast<size_t>(c.layers) * 6);
  std::vector<LayerW> lw(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layer" + std::to_string(l);
    auto add = [&](const std::string& n, const std::string& scope, Shape s) {
      Weight w;
      w.name = p + "_" + n;
      w.scope = p + "/" + scope;
      w.param = b.Parameter(pn++, s, w.name);
      weights.push_back(w);
      return &weights.back();
    };
    LayerW& L = lw[static_cast<size_t>(l)];
    if (c.layernorm) L.ln1 = add("ln1_scale", "ln1", Shape(P, {M}));
    L.wqkv = add("wqkv", "attention", Shape(P, {3, M, N, D}));
    L.wo = add("wo", "attention", Shape(P, {N, D, M}));
    if (c.layernorm) L.ln2 = add("ln2_scale", "ln2", Shape(P, {M}));
    L.wi = add("wi", "ffn", Shape(P, {M, H}));
    L.wout = add("wout", "ffn", Shape(P, {H, M}));
    ann.Table1(L.wqkv->param, Table1Tensor::kWqkv, [](const Dims& d) { return Dims{-1, d[0], d[1], d[2]}; });
    ann.Table1(L.wo->param, Table1Tensor::kWo);
    ann.Table1(L.wi->param, Table1Tensor::kWin);
    ann.Table1(L.wout->param, Table1Tensor::kWout);
  }
  if (c.optimizer == Optimizer::kAdam) AddAdamParameters(b, weights, &pn);

  // Weights in the activation type.
  for (Weight& w : weights) {
    auto scope = b.Scope(w.scope);
    w.value = net.ToType(w.param, A, "cast_" + w.name.substr(w.name.find('_') + 1));
  }

  // Forward, keeping what backward needs.
  struct Saved {
    Instruction* x = nullptr;
    LayerNormSaved ln1, ln2;
    Instruction *h1 = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *p = nullptr, *ctx = nullptr;
    Instruction *x1 = nullptr, *h2 = nullptr, *hid = nullptr, *relu = nullptr;
  };
  std::vector<Saved> saved(static_cast<size_t>(c.layers));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Instruction* h = x;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layer" + std::to_string(l);
    Saved& sv = saved[static_cast<size_t>(l)];
    LayerW& L = lw[static_cast<size_t>(l)];
    auto layer_scope = b.Scope(p);
    sv.x = h;
    ann.Table1(h, Table1Tensor::kBSM);  // the layer input activation
    {
      auto s = b.Scope("ln1");
      if (c.layernorm) sv.ln1 = LayerNormForward(net, h, L.ln1->value);
      sv.h1 = c.layernorm ? sv.ln1.y : h;
    }
    Instruction* attn_out = nullptr;
    {
      auto s = b.Scope("attention");
      Instruction* qkv = net.Dot(sv.h1, L.wqkv->value, {}, {}, {2}, {1}, "qkv");  // [B,S,3,N,D]
      ann.Table1(qkv, Table1Tensor::kBSND, [](const Dims& d) { return Dims{d[0], d[1], -1, d[2], d[3]}; });
      auto part = [&](int64_t j, const char* n) {
        Instruction* sl = b.Slice(qkv, {0, 0, j, 0, 0}, {B, S, j + 1, N, D}, {}, std::string(n) + "_slice");
        return b.Reshape(sl, {B, S, N, D}, n);
      };
      sv.q = part(0, "q");
      sv.k = part(1, "k");
      sv.v = part(2, "v");
      Instruction* scores = net.Dot(sv.q, sv.k, {0, 2}, {0, 2}, {3}, {3}, "scores");  // [B,N,S,T]
      Instruction* scaled = net.Scale(scores, scale, "scaled_scores");
      {
        auto sm = b.Scope("softmax");
        Instruction* mx = net.MaxOver(scaled, {3}, "max");
        Instruction* e = b.Exp(b.Sub(scaled, net.Bcast(mx, scaled, {0, 1, 2}), "shifted"), "exp");
        Instruction* den = net.Sum(e, {3}, "sum");
        sv.p = b.Div(e, net.Bcast(den, e, {0, 1, 2}), "probs");
      }
      sv.ctx = net.Dot(sv.p, sv.v, {0, 1}, {0, 2}, {3}, {1}, "context");           // [B,N,S,D]
      attn_out = net.Dot(sv.ctx, L.wo->value, {}, {}, {1, 3}, {0, 1}, "out");     // [B,S,M]
    }
    sv.x1 = b.Add(h, attn_out, "residual1");
    {
      auto s = b.Scope("ln2");
      if (c.layernorm) sv.ln2 = LayerNormForward(net, sv.x1, L.ln2->value);
      sv.h2 = c.layernorm ? sv.ln2.y : sv.x1;
    }
    Instruction* ffn_out = nullptr;
    {
      auto s = b.Scope("ffn");
      sv.hid = net.Dot(sv.h2, L.wi->value, {}, {}, {2}, {0}, "wi");  // [B,S,H]
      ann.Table1(sv.hid, Table1Tensor::kBSH);
      sv.relu = net.Relu(sv.hid, "relu");
      ffn_out = net.Dot(sv.relu, L.wout->value, {}, {}, {2}, {0}, "wo");  // [B,S,M]
    }
    h = b.Add(sv.x1, ffn_out, "residual2");
  }

  if (!c.backward) {
    b.SetRoot(h);
    if (!b.ok()) return b.status().error();
    return module;
  }

  auto [loss, dh] = MseLoss(net, h, target);
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    const std::string p = "layer" + std::to_string(l);
    Saved& sv = saved[static_cast<size_t>(l)];
    LayerW& L = lw[static_cast<size_t>(l)];
    auto bwd = b.Scope("backward/" + p);
    Instruction* dx1 = dh;  // residual2 passes the gradient through
    {
      auto s = b.Scope("ffn");
      Instruction* dffn = dh;
      AccumulateGrad(b, &L.wout->grad, net.Dot(sv.relu, dffn, {}, {}, {0, 1}, {0, 1}, "dwout"));  // [H,M]
      Instruction* drelu = net.Dot(dffn, L.wout->value, {}, {}, {2}, {1}, "drelu");              // [B,S,H]
      Instruction* dhid = net.ReluGrad(sv.hid, drelu, "dhidden");
      AccumulateGrad(b, &L.wi->grad, net.Dot(sv.h2, dhid, {}, {}, {0, 1}, {0, 1}, "dwi"));        // [M,H]
      Instruction* dh2 = net.Dot(dhid, L.wi->value, {}, {}, {2}, {1}, "dh2");                     // [B,S,M]
      Instruction* dres = dh2;
      if (c.layernorm) {
        auto s2 = b.Scope("ln2");
        Instruction* dg = nullptr;
        dres = LayerNormBackward(net, sv.ln2, L.ln2->value, dh2, &dg);
        AccumulateGrad(b, &L.ln2->grad, dg);
      }
      dx1 = b.Add(dh, dres, "dresidual1");
    }
    {
      auto s = b.Scope("attention");
      AccumulateGrad(b, &L.wo->grad, net.Dot(sv.ctx, dx1, {}, {}, {0, 2}, {0, 1}, "dwo"));   // [N,D,M]
      Instruction* dctx = b.Transpose(net.Dot(dx1, L.wo->value, {}, {}, {2}, {2}), {0, 2, 1, 3}, "dcontext");  // [B,N,S,D]
      Instruction* dp = net.Dot(dctx, sv.v, {0, 1}, {0, 2}, {3}, {3}, "dprobs");             // [B,N,S,T]
      Instruction* dv = b.Transpose(net.Dot(sv.p, dctx, {0, 1}, {0, 1}, {2}, {2}), {0, 2, 1, 3}, "dv");  // [B,T,N,D]
      Instruction* dscores = nullptr;
      {
        auto sm = b.Scope("softmax");
        Instruction* pdp = b.Mul(sv.p, dp);
        Instruction* rowsum = net.Sum(pdp, {3}, "rowsum");
        Instruction* dscaled = b.Sub(pdp, b.Mul(sv.p, net.Bcast(rowsum, pdp, {0, 1, 2})), "dscaled");
        dscores = net.Scale(dscaled, scale, "dscores");
      }
      Instruction* dq = b.Transpose(net.Dot(dscores, sv.k, {0, 1}, {0, 2}, {3}, {1}), {0, 2, 1, 3}, "dq");  // [B,S,N,D]
      Instruction* dk = b.Transpose(net.Dot(dscores, sv.q, {0, 1}, {0, 2}, {2}, {1}), {0, 2, 1, 3}, "dk");  // [B,T,N,D]
      Instruction* dqkv = b.Concatenate({b.Reshape(dq, {B, S, 1, N, D}), b.Reshape(dk, {B, S, 1, N, D}),
                                         b.Reshape(dv, {B, S, 1, N, D})},
                                        2, "dqkv");  // [B,S,3,N,D]
      AccumulateGrad(b, &L.wqkv->grad,
                     b.Transpose(net.Dot(sv.h1, dqkv, {}, {}, {0, 1}, {0, 1}), {1, 0, 2, 3}, "dwqkv"));  // [3,M,N,D]
      Instruction* dh1 = net.Dot(dqkv, L.wqkv->value, {}, {}, {2, 3, 4}, {0, 2, 3}, "dh1");            // [B,S,M]
      Instruction* dres = dh1;
      if (c.layernorm) {
        auto s2 = b.Scope("ln1");
        Instruction* dg = nullptr;
        dres = LayerNormBackward(net, sv.ln1, L.ln1->value, dh1, &dg);
        AccumulateGrad(b, &L.ln1->grad, dg);
      }
      dh = b.Add(dx1, dres, "dx");
    }
  }
  FinishGradients(net, weights, P);
  Instruction* root = MakeRoot(net, loss, weights, c.optimizer, c.learning_rate);
  b.SetRoot(root);
  if (!b.ok()) return b.status().error();
  return module;
}

// ---- MLP --------------------------------------------------------------------------------------------------

Result<std::unique_ptr<Module>> BuildMlp(const MlpConfig& c) {
  if (Status s = CheckPositive({{"batch", c.batch}, {"model", c.model}, {"hidden", c.hidden}, {"layers", c.layers},
                                {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.layers > 4096) return Error("layers = " + std::to_string(c.layers) + " is too many (limit 4096)");
  if (Status s = CheckElementCount({{c.batch, c.hidden}, {c.model, c.hidden}}); !s.ok()) return s.error();
  if (c.optimizer != Optimizer::kNone && !c.backward) return Error("an optimizer step needs backward=1");
  if (!IsFloatingPoint(c.param_type) || !IsFloatingPoint(c.act_type))
    return Error("parameter and activation types must be floating point");

  const int64_t B = c.batch, M = c.model, H = c.hidden;
  const PrimitiveType P = c.param_type, A = c.act_type;
  const DeviceMesh mesh({{"X", c.mesh_x}, {"Y", c.mesh_y}});
  auto module = std::make_unique<Module>("mlp");
  module->num_partitions = c.mesh_x * c.mesh_y;
  Module& m = *module;
  // Reducers first, so the module lists callees before their callers (as XLA's text does).
  ScalarAdd(m, A);
  Builder b(m.AddComputation("main", /*is_entry=*/true));
  b.set_scoped_names(true);
  Net net(m, b, A);
  Annotator ann(b, c.annotations, mesh);
  auto drop_s = [](const Dims& d) { return Dims{d[0], d[2]}; };  // BSM / BSH without S

  int64_t pn = 0;
  Instruction* x = b.Parameter(pn++, Shape(A, {B, M}), "x");
  Instruction* target = c.backward ? b.Parameter(pn++, Shape(A, {B, M}), "target") : nullptr;
  std::vector<Weight> weights;
  weights.reserve(static_cast<size_t>(c.layers) * 4);
  struct LayerW { Weight *w1, *b1, *w2, *b2; };
  std::vector<LayerW> lw(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layer" + std::to_string(l);
    auto add = [&](const std::string& n, Shape s) {
      Weight w;
      w.name = p + "_" + n;
      w.scope = p;
      w.param = b.Parameter(pn++, s, w.name);
      weights.push_back(w);
      return &weights.back();
    };
    LayerW& L = lw[static_cast<size_t>(l)];
    L.w1 = add("w1", Shape(P, {M, H}));
    L.b1 = add("b1", Shape(P, {H}));
    L.w2 = add("w2", Shape(P, {H, M}));
    L.b2 = add("b2", Shape(P, {M}));
    ann.Table1(L.w1->param, Table1Tensor::kWin);
    ann.Table1(L.w2->param, Table1Tensor::kWout);
  }
  if (c.optimizer == Optimizer::kAdam) AddAdamParameters(b, weights, &pn);
  for (Weight& w : weights) {
    auto scope = b.Scope(w.scope);
    w.value = net.ToType(w.param, A, "cast_" + w.name.substr(w.name.find('_') + 1));
  }

  struct Saved { Instruction *x, *hid, *relu; };
  std::vector<Saved> saved(static_cast<size_t>(c.layers));
  Instruction* h = x;
  for (int64_t l = 0; l < c.layers; ++l) {
    LayerW& L = lw[static_cast<size_t>(l)];
    Saved& sv = saved[static_cast<size_t>(l)];
    auto scope = b.Scope("layer" + std::to_string(l));
    sv.x = h;
    ann.Table1(h, Table1Tensor::kBSM, drop_s);
    Instruction* pre = net.Dot(h, L.w1->value, {}, {}, {1}, {0}, "w1");  // [B,H]
    sv.hid = b.Add(pre, net.Bcast(L.b1->value, pre, {1}), "hidden");
    ann.Table1(sv.hid, Table1Tensor::kBSH, drop_s);
    sv.relu = net.Relu(sv.hid, "relu");
    Instruction* out = net.Dot(sv.relu, L.w2->value, {}, {}, {1}, {0}, "w2");  // [B,M]
    h = b.Add(out, net.Bcast(L.b2->value, out, {1}), "output");
  }
  if (!c.backward) {
    b.SetRoot(h);
    if (!b.ok()) return b.status().error();
    return module;
  }
  auto [loss, dh] = MseLoss(net, h, target);
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    LayerW& L = lw[static_cast<size_t>(l)];
    Saved& sv = saved[static_cast<size_t>(l)];
    auto scope = b.Scope("backward/layer" + std::to_string(l));
    AccumulateGrad(b, &L.b2->grad, net.Sum(dh, {0}, "db2"));                                 // [M]
    AccumulateGrad(b, &L.w2->grad, net.Dot(sv.relu, dh, {}, {}, {0}, {0}, "dw2"));          // [H,M]
    Instruction* drelu = net.Dot(dh, L.w2->value, {}, {}, {1}, {1}, "drelu");                // [B,H]
    Instruction* dhid = net.ReluGrad(sv.hid, drelu, "dhidden");
    AccumulateGrad(b, &L.b1->grad, net.Sum(dhid, {0}, "db1"));                               // [H]
    AccumulateGrad(b, &L.w1->grad, net.Dot(sv.x, dhid, {}, {}, {0}, {0}, "dw1"));           // [M,H]
    dh = net.Dot(dhid, L.w1->value, {}, {}, {1}, {1}, "dx");                                 // [B,M]
  }
  FinishGradients(net, weights, P);
  b.SetRoot(MakeRoot(net, loss, weights, c.optimizer, c.learning_rate));
  if (!b.ok()) return b.status().error();
  return module;
}

// ---- registry ---------------------------------------------------------------------------------------------

namespace {

const std::vector<ZooParameter>& CommonParameters() {
  static const std::vector<ZooParameter> params = {
      {"annotations", "finalized", "GSPMD Table 1 annotation set: none | attempt1 | attempt2 | finalized"},
      {"mesh_x", "4", "mesh axis X size"},
      {"mesh_y", "4", "mesh axis Y size"},
      {"dtype", "f32", "weight (and optimizer state) element type"},
      {"act_dtype", "", "activation element type (default: dtype); weights are converted when it differs"},
      {"learning_rate", "0.001", "optimizer step size"},
  };
  return params;
}

std::vector<ZooParameter> TransformerParameters(int64_t layers, bool backward, const char* optimizer) {
  std::vector<ZooParameter> p = {
      {"batch", "8", "B: batch size"},
      {"seq", "16", "S: sequence length"},
      {"model", "64", "M: model dimension"},
      {"heads", "8", "N: attention heads"},
      {"head_dim", "16", "D: dimension per head"},
      {"hidden", "256", "H: feed-forward hidden dimension"},
      {"layers", std::to_string(layers), "number of stacked Transformer layers"},
      {"layernorm", "1", "pre-norm LayerNorm before attention and feed-forward (0 | 1)"},
      {"backward", backward ? "1" : "0", "add the loss and the backward pass (0 | 1)"},
      {"optimizer", optimizer, "weight update after backward: none | sgd | adam"},
  };
  for (const auto& c : CommonParameters()) p.push_back(c);
  return p;
}

std::vector<ZooParameter> MlpParameters() {
  std::vector<ZooParameter> p = {
      {"batch", "16", "B: batch size"},
      {"model", "64", "M: input/output width"},
      {"hidden", "256", "H: hidden width"},
      {"layers", "2", "number of feed-forward blocks"},
      {"backward", "1", "add the loss and the backward pass (0 | 1)"},
      {"optimizer", "sgd", "weight update after backward: none | sgd | adam"},
  };
  for (const auto& c : CommonParameters()) p.push_back(c.name == "learning_rate" ? ZooParameter{c.name, "0.01", c.description} : c);
  return p;
}

// Parameter values after overrides, with parsing helpers that remember the first error.
class Params {
 public:
  Params(const ZooModel& model, const ZooOverrides& overrides) {
    for (const auto& p : model.parameters) values_[p.name] = p.default_value;
    for (const auto& [k, v] : overrides) {
      if (!values_.count(k)) {
        std::string names;
        for (const auto& p : model.parameters) names += (names.empty() ? "" : ", ") + p.name;
        Fail("model " + model.name + " has no parameter '" + k + "' (parameters: " + names + ")");
        continue;
      }
      values_[k] = v;
    }
  }
  int64_t Int(const std::string& k) {
    const std::string& v = values_[k];
    int64_t out = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || p != v.data() + v.size()) Fail("parameter " + k + " must be an integer, found '" + v + "'");
    return out;
  }
  bool Bool(const std::string& k) {
    const std::string& v = values_[k];
    if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
    if (v == "0" || v == "false" || v == "no" || v == "off") return false;
    Fail("parameter " + k + " must be 0 or 1, found '" + v + "'");
    return false;
  }
  double Real(const std::string& k) {
    const std::string& v = values_[k];
    try {
      size_t pos = 0;
      double d = std::stod(v, &pos);
      if (pos == v.size() && std::isfinite(d)) return d;
    } catch (...) {
    }
    Fail("parameter " + k + " must be a number, found '" + v + "'");
    return 0;
  }
  PrimitiveType Type(const std::string& k, PrimitiveType fallback) {
    const std::string& v = values_[k];
    if (v.empty()) return fallback;
    auto t = PrimitiveTypeFromName(v);
    if (!t || !IsFloatingPoint(*t)) {
      Fail("parameter " + k + " must be a floating-point type (f32, bf16, f16, f64), found '" + v + "'");
      return fallback;
    }
    return *t;
  }
  AnnotationSet Annotations() {
    auto s = AnnotationSetFromName(values_["annotations"]);
    if (!s) Fail("parameter annotations must be none, attempt1, attempt2 or finalized, found '" + values_["annotations"] + "'");
    return s.value_or(AnnotationSet::kNone);
  }
  Optimizer Opt() {
    auto o = OptimizerFromName(values_["optimizer"]);
    if (!o) Fail("parameter optimizer must be none, sgd or adam, found '" + values_["optimizer"] + "'");
    return o.value_or(Optimizer::kNone);
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  void Fail(const std::string& e) {
    if (error_.empty()) error_ = e;
  }
  std::map<std::string, std::string> values_;
  std::string error_;
};

const ZooModel* FindModel(const std::vector<ZooModel>& models, std::string_view name) {
  for (const auto& m : models)
    if (m.name == name) return &m;
  return nullptr;
}

Error UnknownModel(const std::vector<ZooModel>& models, std::string_view name) {
  std::string names;
  for (const auto& m : models) names += (names.empty() ? "" : ", ") + m.name;
  return Error("unknown zoo model '" + std::string(name) + "' (models: " + names + ")");
}

// The parameters every model of the zoo has (both configs name them alike).
template <typename Config>
void ReadCommonParameters(Params& p, Config& c) {
  c.batch = p.Int("batch");
  c.model = p.Int("model");
  c.hidden = p.Int("hidden");
  c.layers = p.Int("layers");
  c.backward = p.Bool("backward");
  c.optimizer = p.Opt();
  c.learning_rate = p.Real("learning_rate");
  c.param_type = p.Type("dtype", PrimitiveType::kF32);
  c.act_type = p.Type("act_dtype", c.param_type);
  c.annotations = p.Annotations();
  c.mesh_x = p.Int("mesh_x");
  c.mesh_y = p.Int("mesh_y");
}

}  // namespace

std::vector<ZooModel> ZooList() {
  return {
      {"mlp", "Feed-forward stack relu(x W1 + b1) W2 + b2 with loss, backward and SGD step; Table 1 FFN annotations",
       MlpParameters()},
      {"transformer-layer",
       "One dense Transformer layer (GSPMD §5.1: attention + feed-forward), forward, with a GSPMD Table 1 annotation set",
       TransformerParameters(1, false, "none")},
      {"transformer",
       "Stacked Transformer layers: forward, loss, backward and Adam step (a training step), Table 1 annotations per layer",
       TransformerParameters(2, true, "adam")},
  };
}

Result<DeviceMesh> ZooMesh(std::string_view name, const ZooOverrides& overrides) {
  const auto models = ZooList();
  const ZooModel* model = FindModel(models, name);
  if (!model) return UnknownModel(models, name);
  Params p(*model, overrides);
  const int64_t x = p.Int("mesh_x"), y = p.Int("mesh_y");
  if (!p.ok()) return Error(p.error());
  if (x < 1 || y < 1) return Error("mesh_x and mesh_y must be >= 1");
  return DeviceMesh({{"X", x}, {"Y", y}});
}

Result<std::unique_ptr<Module>> ZooBuild(std::string_view name, const ZooOverrides& overrides) {
  const auto models = ZooList();
  const ZooModel* model = FindModel(models, name);
  if (!model) return UnknownModel(models, name);
  Params p(*model, overrides);
  Result<std::unique_ptr<Module>> built = Error("");
  if (model->name == "mlp") {
    MlpConfig c;
    ReadCommonParameters(p, c);
    if (!p.ok()) return Error(p.error());
    built = BuildMlp(c);
  } else {
    TransformerConfig c;
    ReadCommonParameters(p, c);
    c.seq = p.Int("seq");
    c.heads = p.Int("heads");
    c.head_dim = p.Int("head_dim");
    c.layernorm = p.Bool("layernorm");
    if (!p.ok()) return Error(p.error());
    built = BuildTransformer(c);
  }
  if (!built.ok()) return Error(std::string(name) + ": " + built.error().message);
  if (Status s = VerifyModule(**built); !s.ok())
    return Error(std::string(name) + ": the built module does not verify: " + s.error().message);
  return built;
}

}  // namespace shardscope
