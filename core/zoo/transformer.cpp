#include "core/zoo/transformer.h"

#include <cmath>
#include <string>
#include <tuple>

namespace shardscope {

using namespace zoo;

// ---- blocks -----------------------------------------------------------------------------------------------

namespace zoo {

void AddAttentionWeights(const WeightAdder& add, PrimitiveType P, int64_t M, int64_t N, int64_t D, bool layernorm,
                         AttentionBlock* a) {
  if (layernorm) a->ln = add("ln1_scale", "ln1", Shape(P, {M}));
  a->wqkv = add("wqkv", "attention", Shape(P, {3, M, N, D}));
  a->wo = add("wo", "attention", Shape(P, {N, D, M}));
}

void AnnotateAttentionWeights(Annotator& ann, const AttentionBlock& a) {
  ann.Table1(a.wqkv->param, Table1Tensor::kWqkv, [](const Dims& d) { return Dims{-1, d[0], d[1], d[2]}; });
  ann.Table1(a.wo->param, Table1Tensor::kWo);
}

void AddFfnWeights(const WeightAdder& add, PrimitiveType P, int64_t M, int64_t H, bool layernorm, FfnBlock* f) {
  if (layernorm) f->ln = add("ln2_scale", "ln2", Shape(P, {M}));
  f->wi = add("wi", "ffn", Shape(P, {M, H}));
  f->wout = add("wout", "ffn", Shape(P, {H, M}));
}

void AnnotateFfnWeights(Annotator& ann, const FfnBlock& f) {
  ann.Table1(f.wi->param, Table1Tensor::kWin);
  ann.Table1(f.wout->param, Table1Tensor::kWout);
}

Instruction* PreNorm(Net& net, Weight* ln, Instruction* x, NormSaved* saved) {
  if (!ln) return x;
  *saved = LayerNormForward(net, x, ln->value);
  return saved->y;
}

Instruction* PreNormBackward(Net& net, Weight* ln, const NormSaved& saved, Instruction* dy) {
  if (!ln) return dy;
  Instruction* dg = nullptr;
  Instruction* dx = LayerNormBackward(net, saved, ln->value, dy, &dg);
  AccumulateGrad(net.b(), &ln->grad, dg);
  return dx;
}

namespace {

// The blocks' tensors may carry leading dims P (layers stacked and vectorised over them: the
// pipelined Transformer's stage dim): x [P..., B, S, M], W_qkv [P..., 3, M, N, D], every dot
// batched over P. Dimension lists of the prefix-free layer, moved behind the prefix:
struct PrefixDims {
  int64_t p = 0;
  // The layer's own dims, shifted by p.
  Dims At(const Dims& d) const {
    Dims r;
    for (int64_t x : d) r.push_back(x + p);
    return r;
  }
  // Batch dims of a dot, dims kept by a broadcast, a permutation: the prefix dims, then the
  // shifted ones.
  Dims Batch(const Dims& d) const {
    Dims r;
    for (int64_t i = 0; i < p; ++i) r.push_back(i);
    for (int64_t x : d) r.push_back(x + p);
    return r;
  }
  // Slice starts: 0 on the prefix dims.
  Dims Starts(const Dims& own) const {
    Dims r(static_cast<size_t>(p), 0);
    r.insert(r.end(), own.begin(), own.end());
    return r;
  }
  // A shape of the layer's own dims behind `like`'s prefix.
  Dims Shape(Instruction* like, const Dims& own) const {
    Dims r;
    for (int64_t i = 0; i < p; ++i) r.push_back(like->shape().dim(i));
    r.insert(r.end(), own.begin(), own.end());
    return r;
  }
};

PrefixDims PrefixOf(Instruction* x) { return PrefixDims{x->shape().rank() - 3}; }

}  // namespace

Instruction* AttentionForward(Net& net, Annotator& ann, AttentionBlock& a, Instruction* x) {
  Builder& b = net.b();
  if (!x || !a.wqkv || !a.wo || x->shape().rank() < 3) return nullptr;
  const PrefixDims P = PrefixOf(x);
  const Dims none = P.Batch({});
  const int64_t B = x->shape().dim(P.p), S = x->shape().dim(P.p + 1);
  const int64_t N = a.wqkv->param->shape().dim(P.p + 2), D = a.wqkv->param->shape().dim(P.p + 3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  a.x = x;
  {
    auto s = b.Scope("ln1");
    a.h = PreNorm(net, a.ln, x, &a.norm);
  }
  Instruction* out = nullptr;
  {
    auto s = b.Scope("attention");
    Instruction* qkv = net.Dot(a.h, a.wqkv->value, none, none, P.At({2}), P.At({1}), "qkv");  // [B,S,3,N,D]
    ann.Table1(qkv, Table1Tensor::kBSND, [](const Dims& d) { return Dims{d[0], d[1], -1, d[2], d[3]}; });
    auto part = [&](int64_t j, const char* n) {
      Instruction* sl = b.Slice(qkv, P.Starts({0, 0, j, 0, 0}), P.Shape(x, {B, S, j + 1, N, D}), {},
                                std::string(n) + "_slice");
      return b.Reshape(sl, P.Shape(x, {B, S, N, D}), n);
    };
    a.q = part(0, "q");
    a.k = part(1, "k");
    a.v = part(2, "v");
    Instruction* scores = net.Dot(a.q, a.k, P.Batch({0, 2}), P.Batch({0, 2}), P.At({3}), P.At({3}), "scores");  // [B,N,S,T]
    Instruction* scaled = net.Scale(scores, scale, "scaled_scores");
    {
      auto sm = b.Scope("softmax");
      Instruction* mx = net.MaxOver(scaled, P.At({3}), "max");
      Instruction* e = b.Exp(b.Sub(scaled, net.Bcast(mx, scaled, P.Batch({0, 1, 2})), "shifted"), "exp");
      Instruction* den = net.Sum(e, P.At({3}), "sum");
      a.p = b.Div(e, net.Bcast(den, e, P.Batch({0, 1, 2})), "probs");
    }
    a.ctx = net.Dot(a.p, a.v, P.Batch({0, 1}), P.Batch({0, 2}), P.At({3}), P.At({1}), "context");  // [B,N,S,D]
    out = net.Dot(a.ctx, a.wo->value, none, none, P.At({1, 3}), P.At({0, 1}), "out");  // [B,S,M]
  }
  return b.Add(x, out, "residual1");
}

Instruction* AttentionBackward(Net& net, AttentionBlock& a, Instruction* dy) {
  Builder& b = net.b();
  if (!dy || !a.x) return nullptr;
  const PrefixDims P = PrefixOf(a.x);
  const Dims none = P.Batch({});
  const int64_t B = a.x->shape().dim(P.p), S = a.x->shape().dim(P.p + 1);
  const int64_t N = a.wqkv->param->shape().dim(P.p + 2), D = a.wqkv->param->shape().dim(P.p + 3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // Scoped like the forward: attention/..., then ln1/... beside it, the residual at the layer.
  Instruction* dh1 = nullptr;
  {
    auto s = b.Scope("attention");
    AccumulateGrad(b, &a.wo->grad, net.Dot(a.ctx, dy, none, none, P.At({0, 2}), P.At({0, 1}), "dwo"));  // [N,D,M]
    Instruction* dctx = b.Transpose(net.Dot(dy, a.wo->value, none, none, P.At({2}), P.At({2})), P.Batch({0, 2, 1, 3}),
                                    "dcontext");  // [B,N,S,D]
    Instruction* dp = net.Dot(dctx, a.v, P.Batch({0, 1}), P.Batch({0, 2}), P.At({3}), P.At({3}), "dprobs");  // [B,N,S,T]
    Instruction* dv = b.Transpose(net.Dot(a.p, dctx, P.Batch({0, 1}), P.Batch({0, 1}), P.At({2}), P.At({2})),
                                  P.Batch({0, 2, 1, 3}), "dv");  // [B,T,N,D]
    Instruction* dscores = nullptr;
    {
      auto sm = b.Scope("softmax");
      Instruction* pdp = b.Mul(a.p, dp);
      Instruction* rowsum = net.Sum(pdp, P.At({3}), "rowsum");
      Instruction* dscaled = b.Sub(pdp, b.Mul(a.p, net.Bcast(rowsum, pdp, P.Batch({0, 1, 2}))), "dscaled");
      dscores = net.Scale(dscaled, scale, "dscores");
    }
    Instruction* dq = b.Transpose(net.Dot(dscores, a.k, P.Batch({0, 1}), P.Batch({0, 2}), P.At({3}), P.At({1})),
                                  P.Batch({0, 2, 1, 3}), "dq");  // [B,S,N,D]
    Instruction* dk = b.Transpose(net.Dot(dscores, a.q, P.Batch({0, 1}), P.Batch({0, 2}), P.At({2}), P.At({1})),
                                  P.Batch({0, 2, 1, 3}), "dk");  // [B,T,N,D]
    const Dims one = P.Shape(a.x, {B, S, 1, N, D});
    Instruction* dqkv = b.Concatenate({b.Reshape(dq, one), b.Reshape(dk, one), b.Reshape(dv, one)}, P.p + 2,
                                      "dqkv");  // [B,S,3,N,D]
    AccumulateGrad(b, &a.wqkv->grad,
                   b.Transpose(net.Dot(a.h, dqkv, none, none, P.At({0, 1}), P.At({0, 1})), P.Batch({1, 0, 2, 3}),
                               "dwqkv"));  // [3,M,N,D]
    dh1 = net.Dot(dqkv, a.wqkv->value, none, none, P.At({2, 3, 4}), P.At({0, 2, 3}), "dh1");  // [B,S,M]
  }
  Instruction* dres = dh1;
  if (a.ln) {
    auto s2 = b.Scope("ln1");
    dres = PreNormBackward(net, a.ln, a.norm, dh1);
  }
  return b.Add(dy, dres, "dx");
}

Instruction* FfnForward(Net& net, Annotator& ann, FfnBlock& f, Instruction* x) {
  Builder& b = net.b();
  if (!x || !f.wi || !f.wout || x->shape().rank() < 3) return nullptr;
  const PrefixDims P = PrefixOf(x);
  const Dims none = P.Batch({});
  f.x = x;
  {
    auto s = b.Scope("ln2");
    f.h = PreNorm(net, f.ln, x, &f.norm);
  }
  Instruction* out = nullptr;
  {
    auto s = b.Scope("ffn");
    f.hid = net.Dot(f.h, f.wi->value, none, none, P.At({2}), P.At({0}), "wi");  // [B,S,H]
    ann.Table1(f.hid, Table1Tensor::kBSH);
    f.relu = net.Relu(f.hid, "relu");
    out = net.Dot(f.relu, f.wout->value, none, none, P.At({2}), P.At({0}), "wo");  // [B,S,M]
  }
  return b.Add(x, out, "residual2");
}

Instruction* FfnBackward(Net& net, FfnBlock& f, Instruction* dy) {
  Builder& b = net.b();
  if (!dy || !f.x) return nullptr;
  const PrefixDims P = PrefixOf(f.x);
  const Dims none = P.Batch({});
  Instruction* dh2 = nullptr;
  {
    auto s = b.Scope("ffn");
    AccumulateGrad(b, &f.wout->grad, net.Dot(f.relu, dy, none, none, P.At({0, 1}), P.At({0, 1}), "dwout"));  // [H,M]
    Instruction* drelu = net.Dot(dy, f.wout->value, none, none, P.At({2}), P.At({1}), "drelu");              // [B,S,H]
    Instruction* dhid = net.ReluGrad(f.hid, drelu, "dhidden");
    AccumulateGrad(b, &f.wi->grad, net.Dot(f.h, dhid, none, none, P.At({0, 1}), P.At({0, 1}), "dwi"));        // [M,H]
    dh2 = net.Dot(dhid, f.wi->value, none, none, P.At({2}), P.At({1}), "dh2");                               // [B,S,M]
  }
  Instruction* dres = dh2;
  if (f.ln) {
    auto s2 = b.Scope("ln2");
    dres = PreNormBackward(net, f.ln, f.norm, dh2);
  }
  return b.Add(dy, dres, "dresidual1");
}

}  // namespace zoo

// ---- Transformer ----------------------------------------------------------------------------------------

Result<std::unique_ptr<Module>> BuildTransformer(const TransformerConfig& c) {
  if (Status s = CheckPositive({{"batch", c.batch}, {"seq", c.seq}, {"model", c.model}, {"heads", c.heads},
                                {"head_dim", c.head_dim}, {"hidden", c.hidden}, {"layers", c.layers},
                                {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.layers > 4096) return Error("layers = " + std::to_string(c.layers) + " is too many (limit 4096)");
  if (c.vocab < 0 || c.vocab > (int64_t{1} << 24))
    return Error("vocab must be 0 (no vocabulary layers) or between 1 and 16777216, found " + std::to_string(c.vocab));
  if (c.vocab > 0)
    if (Status s = CheckElementCount({{c.batch, c.seq, c.vocab}, {c.vocab, c.model}}); !s.ok()) return s.error();
  if (Status s = CheckElementCount({{c.batch, c.heads, c.seq, c.seq}, {c.batch, c.seq, c.hidden},
                                    {3, c.model, c.heads, c.head_dim}, {c.batch, c.seq, 3, c.heads, c.head_dim}});
      !s.ok())
    return s.error();
  if (Status s = CheckTrainingParameters(c); !s.ok()) return s.error();

  const int64_t B = c.batch, S = c.seq, M = c.model, N = c.heads, D = c.head_dim, H = c.hidden, V = c.vocab;
  const PrimitiveType P = c.param_type, A = c.act_type;
  // The softmax and its cross-entropy run in f32 (or the activation type when that is wider).
  const PrimitiveType loss_type = PrimitiveTypeBitWidth(A) >= 32 ? A : PrimitiveType::kF32;
  const DeviceMesh mesh({{"X", c.mesh_x}, {"Y", c.mesh_y}});

  auto module = std::make_unique<Module>(c.layers == 1 ? "transformer_layer" : "transformer");
  module->num_partitions = c.mesh_x * c.mesh_y;
  Module& m = *module;
  // Reducers first, so the module lists callees before their callers (as XLA's text does).
  ScalarAdd(m, A);
  ScalarMax(m, A);
  if (V > 0) {
    ScalarAdd(m, loss_type);
    ScalarMax(m, loss_type);
  }
  Builder b(m.AddComputation("main", /*is_entry=*/true));
  b.set_scoped_names(true);
  Net net(m, b, A);
  Annotator ann(b, c.annotations, mesh);

  // Parameters.
  int64_t pn = 0;
  Instruction *x = nullptr, *target = nullptr, *ids = nullptr, *labels = nullptr;
  if (V > 0) {
    ids = b.Parameter(pn++, Shape(PrimitiveType::kS32, {B, S}), "ids");
    labels = c.backward ? b.Parameter(pn++, Shape(PrimitiveType::kS32, {B, S}), "labels") : nullptr;
  } else {
    x = b.Parameter(pn++, Shape(A, {B, S, M}), "x");
    target = c.backward ? b.Parameter(pn++, Shape(A, {B, S, M}), "target") : nullptr;
  }
  struct Layer {
    AttentionBlock attention;
    FfnBlock ffn;
  };
  std::vector<Weight> weights;
  weights.reserve(static_cast<size_t>(c.layers) * 6 + 2);
  std::vector<Layer> layers(static_cast<size_t>(c.layers));
  Weight *embedding = nullptr, *softmax = nullptr;
  if (V > 0) {
    embedding = MakeWeightAdder(b, weights, "embedding", &pn)("table", "", Shape(P, {V, M}));
    ann.Vocabulary(embedding->param, VocabularyTensor::kEmbedding);
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const WeightAdder add = MakeWeightAdder(b, weights, "layer" + std::to_string(l), &pn);
    Layer& L = layers[static_cast<size_t>(l)];
    AddAttentionWeights(add, P, M, N, D, c.layernorm, &L.attention);
    AddFfnWeights(add, P, M, H, c.layernorm, &L.ffn);
    AnnotateAttentionWeights(ann, L.attention);
    AnnotateFfnWeights(ann, L.ffn);
  }
  if (V > 0) {
    softmax = MakeWeightAdder(b, weights, "softmax", &pn)("weight", "", Shape(P, {M, V}));
    ann.Vocabulary(softmax->param, VocabularyTensor::kSoftmaxWeight);
  }
  for (Weight& w : weights) ann.WeightParameter(w.param);
  AddOptimizerState(b, weights, c.optimizer, &pn);
  // Data parallelism keeps the optimizer state whole on every device, like the weights.
  for (Weight& w : weights) {
    ann.WeightParameter(w.m);
    ann.WeightParameter(w.v);
  }

  // Forward, keeping what backward needs. Its ops are scoped forward/layer<l>/... (op_name only:
  // names stay "layer<l>_..."), beside loss/, backward/layer<l>/... and optimizer/layer<l>/...
  Instruction* h = x;
  Instruction *tokens = nullptr, *logits = nullptr;  // vocab: the ids' one-hot [B,S,V], the f32 logits
  {
    auto forward = b.OpNameScope("forward");
    CastWeights(net, weights);
    if (V > 0) {
      auto s = b.Scope("embedding");
      tokens = OneHot(net, ids, V, A, "one_hot");
      ann.Vocabulary(tokens, VocabularyTensor::kBSV);
      h = net.Dot(tokens, embedding->value, {}, {}, {2}, {0}, "lookup");  // [B,S,M]
    }
    for (int64_t l = 0; l < c.layers; ++l) {
      Layer& L = layers[static_cast<size_t>(l)];
      auto layer_scope = b.Scope("layer" + std::to_string(l));
      ann.Table1(h, Table1Tensor::kBSM);  // the layer input activation
      h = FfnForward(net, ann, L.ffn, AttentionForward(net, ann, L.attention, h));
    }
    if (V > 0) {
      auto s = b.Scope("softmax");
      Instruction* dot = net.Dot(h, softmax->value, {}, {}, {2}, {0}, "logits");  // [B,S,V]
      ann.Vocabulary(dot, VocabularyTensor::kBSV);
      logits = net.ToType(dot, loss_type, "logits_" + std::string(PrimitiveTypeName(loss_type)));
    }
  }

  if (!c.backward) {
    b.SetRoot(V > 0 ? logits : h);
    if (!b.ok()) return b.status().error();
    return module;
  }

  Instruction *loss = nullptr, *dh = nullptr;
  if (V > 0) {
    Instruction* label_one_hot = nullptr;
    {
      auto s = b.Scope("loss");
      label_one_hot = OneHot(net, labels, V, loss_type, "label_one_hot");
      ann.Vocabulary(label_one_hot, VocabularyTensor::kBSV);
    }
    Instruction* dlogits = nullptr;
    std::tie(loss, dlogits) = SoftmaxCrossEntropy(net, logits, label_one_hot);
    auto bwd = b.Scope("backward/softmax");
    Instruction* g = net.ToType(dlogits, A, "dlogits");
    AccumulateGrad(b, &softmax->grad, net.Dot(h, g, {}, {}, {0, 1}, {0, 1}, "dweight"));  // [M,V]
    dh = net.Dot(g, softmax->value, {}, {}, {2}, {1}, "dh");                                // [B,S,M]
  } else {
    std::tie(loss, dh) = MseLoss(net, h, target);
  }
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    Layer& L = layers[static_cast<size_t>(l)];
    auto bwd = b.Scope("backward/layer" + std::to_string(l));
    dh = AttentionBackward(net, L.attention, FfnBackward(net, L.ffn, dh));
  }
  if (V > 0) {
    auto bwd = b.Scope("backward/embedding");
    AccumulateGrad(b, &embedding->grad, net.Dot(tokens, dh, {}, {}, {0, 1}, {0, 1}, "dtable"));  // [V,M]
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
      {"vocab", "0", "V: vocabulary size; > 0: token ids in, a one-hot embedding [V,M] and a softmax layer [M,V] with cross-entropy (GSPMD §5.1: 32000); 0: MSE on [B,S,M] inputs"},
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
  c.vocab = p.Int("vocab");
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
