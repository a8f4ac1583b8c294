#include "core/zoo/transformer.h"

#include <string>

#include "core/zoo/transformer_block.h"

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
  std::vector<Weight> weights;
  weights.reserve(static_cast<size_t>(c.layers) * 6);
  std::vector<TransformerBlockWeights> lw(static_cast<size_t>(c.layers));
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
    TransformerBlockWeights& L = lw[static_cast<size_t>(l)];
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
  const TransformerBlockConfig bc{c.heads, c.head_dim, c.layernorm, 0};
  const Table1Hook annotate = [&](Instruction* inst, Table1Tensor t, const std::function<Dims(const Dims&)>& expand) {
    ann.Table1(inst, t, expand);
  };
  std::vector<TransformerBlockSaved> saved(static_cast<size_t>(c.layers));
  Instruction* h = x;
  for (int64_t l = 0; l < c.layers; ++l) {
    auto layer_scope = b.Scope("layer" + std::to_string(l));
    saved[static_cast<size_t>(l)] = TransformerBlockForward(net, h, lw[static_cast<size_t>(l)], bc, annotate);
    h = saved[static_cast<size_t>(l)].out;
  }

  if (!c.backward) {
    b.SetRoot(h);
    if (!b.ok()) return b.status().error();
    return module;
  }

  auto [loss, dh] = MseLoss(net, h, target);
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    auto bwd = b.Scope("backward/layer" + std::to_string(l));
    dh = TransformerBlockBackward(net, saved[static_cast<size_t>(l)], lw[static_cast<size_t>(l)], dh, bc);
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
      {"optimizer", optimizer, "weight update after backward: none | sgd | adam"},
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
  return BuildTransformer(c);
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
