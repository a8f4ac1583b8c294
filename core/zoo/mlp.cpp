#include "core/zoo/mlp.h"

#include <string>

namespace shardscope {

using namespace zoo;

// ---- MLP --------------------------------------------------------------------------------------------------

Result<std::unique_ptr<Module>> BuildMlp(const MlpConfig& c) {
  if (Status s = CheckPositive({{"batch", c.batch}, {"model", c.model}, {"hidden", c.hidden}, {"layers", c.layers},
                                {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.layers > 4096) return Error("layers = " + std::to_string(c.layers) + " is too many (limit 4096)");
  if (Status s = CheckElementCount({{c.batch, c.hidden}, {c.model, c.hidden}}); !s.ok()) return s.error();
  if (Status s = CheckTrainingParameters(c); !s.ok()) return s.error();

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
    const WeightAdder add = MakeWeightAdder(b, weights, "layer" + std::to_string(l), &pn);
    LayerW& L = lw[static_cast<size_t>(l)];
    L.w1 = add("w1", "", Shape(P, {M, H}));
    L.b1 = add("b1", "", Shape(P, {H}));
    L.w2 = add("w2", "", Shape(P, {H, M}));
    L.b2 = add("b2", "", Shape(P, {M}));
    ann.Table1(L.w1->param, Table1Tensor::kWin);
    ann.Table1(L.w2->param, Table1Tensor::kWout);
  }
  for (Weight& w : weights) ann.WeightParameter(w.param);
  AddOptimizerState(b, weights, c.optimizer, &pn);
  // Data parallelism keeps the optimizer state whole on every device, like the weights.
  for (Weight& w : weights) {
    ann.WeightParameter(w.m);
    ann.WeightParameter(w.v);
  }
  b.PushScope("forward", /*in_names=*/false);  // op_name forward/..., names unchanged
  CastWeights(net, weights);

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
  b.PopScope();  // forward
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

// ---- registry entry ----------------------------------------------------------------------------------------

namespace {

std::vector<ZooParameter> MlpParameters() {
  std::vector<ZooParameter> p = {
      {"batch", "16", "B: batch size"},
      {"model", "64", "M: input/output width"},
      {"hidden", "256", "H: hidden width"},
      {"layers", "2", "number of feed-forward blocks"},
      {"backward", "1", "add the loss and the backward pass (0 | 1)"},
      {"steps", "0", "0: one training step; K: a training loop of K steps (a while loop over K batches, inputs [K,...])"},
      {"optimizer", "sgd", "weight update after backward: none | sgd | adam | adafactor | lars"},
  };
  for (const auto& c : ZooCommonParameters()) p.push_back(c.name == "learning_rate" ? ZooParameter{c.name, "0.01", c.description} : c);
  return p;
}

Result<std::unique_ptr<Module>> BuildFromParams(ZooParams& p) {
  MlpConfig c;
  ReadCommonParameters(p, c);
  if (!p.ok()) return Error(p.error());
  const int64_t steps = p.Int("steps");
  if (!p.ok()) return Error(p.error());
  auto step = BuildMlp(c);
  if (!step.ok() || steps == 0) return step;
  return WrapInTrainingLoop(**step, steps, 2);
}

}  // namespace

void AddMlpModels(std::vector<ZooModel>& models) {
  models.push_back({"mlp", "Feed-forward stack relu(x W1 + b1) W2 + b2 with loss, backward and SGD step; Table 1 FFN annotations",
                    MlpParameters(), &BuildFromParams, &ZooMeshXY});
}

}  // namespace shardscope
