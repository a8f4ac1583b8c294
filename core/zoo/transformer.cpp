#include "core/zoo/transformer.h"

#include <cmath>
#include <string>

namespace shardscope {

using namespace zoo;

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
      ann.WeightParameter(w.param);
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
  AddOptimizerParameters(b, c.optimizer, weights, &pn);

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

// ---- registry entries --------------------------------------------------------------------------------------

namespace {

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
      {"steps", "0", "0: one training step; K: a training loop of K steps (a while loop over K batches, inputs [K,...])"},
      {"optimizer", optimizer, "weight update after backward: none | sgd | adam | adafactor | lars"},
  };
  for (const auto& c : ZooCommonParameters()) p.push_back(c);
  return p;
}

Result<std::unique_ptr<Module>> BuildFromParams(ZooParams& p) {
  TransformerConfig c;
  ReadCommonParameters(p, c);
  c.seq = p.Int("seq");
  c.heads = p.Int("heads");
  c.head_dim = p.Int("head_dim");
  c.layernorm = p.Bool("layernorm");
  if (!p.ok()) return Error(p.error());
  const int64_t steps = p.Int("steps");
  if (!p.ok()) return Error(p.error());
  auto step = BuildTransformer(c);
  if (!step.ok() || steps == 0) return step;
  return WrapInTrainingLoop(**step, steps, 2);
}

}  // namespace

void AddTransformerModels(std::vector<ZooModel>& models) {
  models.push_back({"transformer-layer",
                    "One dense Transformer layer (GSPMD §5.1: attention + feed-forward), forward, with a GSPMD Table 1 annotation set",
                    TransformerParameters(1, false, "none"), &BuildFromParams, &ZooMeshXY});
  models.push_back({"transformer",
                    "Stacked Transformer layers: forward, loss, backward and Adam step (a training step), Table 1 annotations per layer",
                    TransformerParameters(2, true, "adam"), &BuildFromParams, &ZooMeshXY});
}

}  // namespace shardscope
