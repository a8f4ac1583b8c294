#include "core/zoo/ncf.h"

#include <string>

namespace shardscope {

using namespace zoo;

namespace {

GatherDimensionNumbers RowGather() {
  GatherDimensionNumbers g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  return g;
}

ScatterDimensionNumbers RowScatter() {
  ScatterDimensionNumbers s;
  s.update_window_dims = {1};
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return s;
}

}  // namespace

Result<std::unique_ptr<Module>> BuildNcf(const NcfConfig& c) {
  if (Status s = CheckPositive({{"batch", c.batch}, {"users", c.users}, {"items", c.items}, {"factors", c.factors},
                                {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.widths.size() < 2) return Error("mlp needs at least two widths (the first is twice the MLP embedding width)");
  for (int64_t w : c.widths)
    if (w < 1 || w > (int64_t{1} << 20)) return Error("mlp widths must be between 1 and 2^20");
  if (c.widths[0] % 2) return Error("the first mlp width must be even (user and item embeddings of half of it)");
  if (Status s = CheckElementCount({{c.users, c.factors}, {c.items, c.factors}, {c.users, c.widths[0] / 2}}); !s.ok())
    return s.error();
  if (c.annotations != AnnotationSet::kNone && c.annotations != AnnotationSet::kDataParallel)
    return Error("ncf has the annotation sets none and data-parallel");
  if (!IsFloatingPoint(c.param_type)) return Error("the parameter type must be floating point");

  const int64_t B = c.batch, k = c.factors, e = c.widths[0] / 2;
  const PrimitiveType P = c.param_type, S32 = PrimitiveType::kS32;
  const DeviceMesh mesh({{"X", c.mesh_x}, {"Y", c.mesh_y}});
  auto module = std::make_unique<Module>("ncf");
  module->num_partitions = c.mesh_x * c.mesh_y;
  Module& m = *module;
  ScalarAdd(m, P);
  ScalarMax(m, P);
  Builder b(m.AddComputation("main", /*is_entry=*/true));
  b.set_scoped_names(true);
  Net net(m, b, P);
  Annotator ann(b, c.annotations, mesh);
  const std::vector<int64_t> batch_split = {kEveryMeshAxis};

  int64_t pn = 0;
  Instruction* users = b.Parameter(pn++, Shape(S32, {B}), "input_users");
  Instruction* items = b.Parameter(pn++, Shape(S32, {B}), "input_items");
  Instruction* label = b.Parameter(pn++, Shape(P, {B}), "label");
  ann.Apply(users, batch_split);
  ann.Apply(items, batch_split);
  ann.Apply(label, batch_split);
  std::vector<Weight> weights;
  weights.reserve(4 + 2 * c.widths.size() + 2);
  auto add = [&](const std::string& n, const std::string& scope, Shape s) {
    Weight w;
    w.name = "ncf_" + n;
    w.scope = scope;
    w.param = b.Parameter(pn++, s, w.name);
    ann.WeightParameter(w.param);
    w.value = w.param;
    weights.push_back(w);
    return weights.size() - 1;
  };
  const size_t gmf_user = add("gmf_user", "gmf", Shape(P, {c.users, k}));
  const size_t gmf_item = add("gmf_item", "gmf", Shape(P, {c.items, k}));
  const size_t mlp_user = add("mlp_user", "mlp", Shape(P, {c.users, e}));
  const size_t mlp_item = add("mlp_item", "mlp", Shape(P, {c.items, e}));
  std::vector<size_t> dense_w, dense_b;
  for (size_t l = 1; l < c.widths.size(); ++l) {
    dense_w.push_back(add("mlp" + std::to_string(l) + "_w", "mlp", Shape(P, {c.widths[l - 1], c.widths[l]})));
    dense_b.push_back(add("mlp" + std::to_string(l) + "_b", "mlp", Shape(P, {c.widths[l]})));
  }
  const int64_t top = k + c.widths.back();
  const size_t out_w = add("out_w", "output", Shape(P, {top, 1}));
  const size_t out_b = add("out_b", "output", Shape(P, {1}));
  AddOptimizerState(b, weights, c.optimizer, &pn);
  // Data parallelism keeps the optimizer state whole on every device, like the weights.
  for (Weight& w : weights) {
    ann.WeightParameter(w.m);
    ann.WeightParameter(w.v);
  }
  auto W = [&](size_t i) { return weights[i].param; };

  // Forward.
  Instruction* uidx = b.Reshape(users, {B, 1}, "user_index");
  Instruction* iidx = b.Reshape(items, {B, 1}, "item_index");
  Instruction *eu = nullptr, *ei = nullptr, *gmf = nullptr, *mu = nullptr, *mi = nullptr;
  {
    auto s = b.Scope("gmf");
    eu = b.Gather(W(gmf_user), uidx, RowGather(), {1, k}, "user_embedding");
    ei = b.Gather(W(gmf_item), iidx, RowGather(), {1, k}, "item_embedding");
    gmf = b.Mul(eu, ei, "product");
  }
  std::vector<Instruction*> pre, act;  // per dense layer
  Instruction* h = nullptr;
  {
    auto s = b.Scope("mlp");
    mu = b.Gather(W(mlp_user), uidx, RowGather(), {1, e}, "user_embedding");
    mi = b.Gather(W(mlp_item), iidx, RowGather(), {1, e}, "item_embedding");
    h = b.Concatenate({mu, mi}, 1, "embeddings");
    act.push_back(h);
    for (size_t l = 0; l < dense_w.size(); ++l) {
      Instruction* y = net.Dot(h, W(dense_w[l]), {}, {}, {1}, {0}, "dense" + std::to_string(l + 1));
      y = b.Add(y, net.Bcast(W(dense_b[l]), y, {1}));
      pre.push_back(y);
      h = net.Relu(y, "relu" + std::to_string(l + 1));
      act.push_back(h);
    }
  }
  Instruction *features = nullptr, *z = nullptr;
  {
    auto s = b.Scope("output");
    features = b.Concatenate({gmf, h}, 1, "features");
    Instruction* zd = net.Dot(features, W(out_w), {}, {}, {1}, {0});  // [B,1]
    Instruction* z2 = b.Add(zd, net.Bcast(W(out_b), zd, {1}));
    z = b.Reshape(z2, {B}, "logit");
  }
  // Loss: mean binary cross-entropy with logits, max(z,0) - z y + log(1 + exp(-|z|)); dz = (sigmoid(z) - y) / B.
  Instruction *loss = nullptr, *dz = nullptr;
  {
    auto s = b.Scope("loss");
    Instruction* pos = b.Max(z, b.FullLike(z, 0.0));
    Instruction* soft = b.Unary(Opcode::kLog1p, b.Exp(b.Neg(b.Abs(z))));
    Instruction* terms = b.Add(b.Sub(pos, b.Mul(z, label)), soft, "cross_entropy");
    loss = net.Scale(net.Sum(terms, {0}), 1.0 / static_cast<double>(B), "loss");
    dz = net.Scale(b.Sub(b.Unary(Opcode::kLogistic, z), label), 1.0 / static_cast<double>(B), "dlogit");
  }
  // Backward.
  auto scatter_rows = [&](Instruction* table, Instruction* idx, Instruction* updates, const std::string& name) {
    return b.Scatter(b.FullLike(table, 0.0), idx, updates, RowScatter(), ScalarAdd(m, P), name);
  };
  {
    auto s = b.Scope("backward/output");
    Instruction* dz2 = b.Reshape(dz, {B, 1});
    weights[out_w].grad = net.Dot(features, dz2, {}, {}, {0}, {0}, "dout_w");  // [top,1]
    weights[out_b].grad = b.Reshape(net.Sum(dz, {0}), {1}, "dout_b");
    Instruction* dfeat = net.Dot(dz2, W(out_w), {}, {}, {1}, {1}, "dfeatures");  // [B,top]
    Instruction* dgmf = b.Slice(dfeat, {0, 0}, {B, k}, {}, "dgmf");
    Instruction* dh = b.Slice(dfeat, {0, k}, {B, top}, {}, "dmlp");
    {
      auto s2 = b.Scope("gmf");
      weights[gmf_user].grad = scatter_rows(W(gmf_user), uidx, b.Mul(dgmf, ei), "duser_embedding");
      weights[gmf_item].grad = scatter_rows(W(gmf_item), iidx, b.Mul(dgmf, eu), "ditem_embedding");
    }
    auto s3 = b.Scope("mlp");
    for (size_t l = dense_w.size(); l-- > 0;) {
      Instruction* dy = net.ReluGrad(pre[l], dh, "drelu" + std::to_string(l + 1));
      weights[dense_w[l]].grad = net.Dot(act[l], dy, {}, {}, {0}, {0}, "ddense" + std::to_string(l + 1));
      weights[dense_b[l]].grad = net.Sum(dy, {0}, "dbias" + std::to_string(l + 1));
      dh = net.Dot(dy, W(dense_w[l]), {}, {}, {1}, {1}, "dinput" + std::to_string(l + 1));
    }
    weights[mlp_user].grad = scatter_rows(W(mlp_user), uidx, b.Slice(dh, {0, 0}, {B, e}), "duser_embedding");
    weights[mlp_item].grad = scatter_rows(W(mlp_item), iidx, b.Slice(dh, {0, e}, {B, 2 * e}), "ditem_embedding");
  }
  b.SetRoot(MakeRoot(net, loss, weights, c.optimizer, c.learning_rate));
  if (!b.ok()) return b.status().error();
  return module;
}

// ---- registry entry ----------------------------------------------------------------------------------------

namespace {

std::vector<ZooParameter> NcfParameters() {
  return {
      {"batch", "64", "B: examples per step"},
      {"users", "64", "U: users (MLPerf 0.6, ml-20m: 138493)"},
      {"items", "32", "I: items (ml-20m: 26744)"},
      {"factors", "8", "k: GMF embedding width (MLPerf: 64)"},
      {"mlp", "16,16,8", "MLP tower widths, the first twice its embedding width (MLPerf: 256,256,128,64)"},
      {"steps", "0", "0: one training step; K: a training loop of K steps (a while loop over K batches)"},
      {"optimizer", "adam", "weight update: sgd | adam | adafactor | lars"},
      {"learning_rate", "0.001", "optimizer step size"},
      {"dtype", "f32", "weight and optimizer-state element type"},
      {"annotations", "data-parallel", "none | data-parallel (weights replicated, batch over every device)"},
      {"mesh_x", "4", "mesh axis X size"},
      {"mesh_y", "1", "mesh axis Y size"},
  };
}

Result<std::unique_ptr<Module>> BuildFromParams(ZooParams& p) {
  NcfConfig c;
  c.batch = p.Int("batch");
  c.users = p.Int("users");
  c.items = p.Int("items");
  c.factors = p.Int("factors");
  c.optimizer = ReadOptimizer(p);
  c.learning_rate = p.Real("learning_rate");
  c.param_type = p.FloatType("dtype", PrimitiveType::kF32);
  c.annotations = ReadAnnotationSet(p);
  c.mesh_x = p.Int("mesh_x");
  c.mesh_y = p.Int("mesh_y");
  const int64_t steps = p.Int("steps");
  c.widths.clear();
  const std::string& text = p.Str("mlp");
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      size_t used = 0;
      const long long v = std::stoll(part, &used);
      if (used != part.size()) throw 0;
      c.widths.push_back(v);
    } catch (...) {
      return Error("parameter mlp must be comma-separated integers, found '" + text + "'");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (!p.ok()) return Error(p.error());
  if (c.optimizer == Optimizer::kNone) return Error("ncf trains: the optimizer must be sgd, adam, adafactor or lars");
  auto step = BuildNcf(c);
  if (!step.ok() || steps == 0) return step;
  return WrapInTrainingLoop(**step, steps, 3);
}

}  // namespace

void AddNcfModels(std::vector<ZooModel>& models) {
  models.push_back({"ncf",
                    "Neural collaborative filtering (NeuMF): embedding gathers, GMF and MLP towers, cross-entropy, backward "
                    "(scatter-add embedding gradients) and an Adam step; data-parallel annotations",
                    NcfParameters(), &BuildFromParams, &ZooMeshXY});
}

}  // namespace shardscope
