#include "core/zoo/resnet.h"

#include <string>

#include "core/zoo/conv_blocks.h"

namespace shardscope {

using namespace zoo;

namespace {

struct Bottleneck {
  std::string scope;  // "stage2/block0"
  ConvLayer conv1, conv2, conv3, proj;
  bool has_proj = false;
  Instruction *x = nullptr, *sum = nullptr;
};

}  // namespace

Result<std::unique_ptr<Module>> BuildResNet(const ResNetConfig& c) {
  if (Status s = CheckPositive({{"batch", c.batch}, {"image", c.image}, {"channels", c.channels},
                                {"classes", c.classes}, {"width", c.width}, {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.blocks.empty() || c.blocks.size() > 8) return Error("blocks must list 1 to 8 stages (e.g. 3,4,6,3)");
  for (int64_t n : c.blocks)
    if (n < 1 || n > 64) return Error("blocks per stage must be 1..64, found " + std::to_string(n));
  const int64_t top_width = c.width << (c.blocks.size() - 1);
  if (Status s = CheckElementCount({{c.batch, c.image, c.image, 4 * c.width}, {c.batch, c.image, c.image, c.channels},
                                    {3, 3, top_width, top_width}, {4 * top_width, c.classes}});
      !s.ok())
    return s.error();
  if (Status s = CheckTrainingParameters(c); !s.ok()) return s.error();
  if (c.bn_batch < 0 || (c.bn_batch > 0 && c.batch % c.bn_batch != 0))
    return Error("bn_batch = " + std::to_string(c.bn_batch) + " must divide the batch (" + std::to_string(c.batch) +
                 "), or be 0 for statistics over the whole batch");

  const int64_t B = c.batch, I = c.image, K = c.classes;
  const PrimitiveType P = c.param_type, A = c.act_type;
  const DeviceMesh mesh({{"X", c.mesh_x}, {"Y", c.mesh_y}});
  const ConvSpec stem_spec = ConvSpec::Centered(2, 7, 2), pool_spec = ConvSpec::Centered(2, 3, 2);
  auto module = std::make_unique<Module>("resnet");
  module->num_partitions = c.mesh_x * c.mesh_y;
  Module& m = *module;
  ScalarAdd(m, A);
  ScalarMax(m, A);
  if (P != A) ScalarAdd(m, P);
  Builder b(m.AddComputation("main", /*is_entry=*/true));
  b.set_scoped_names(true);
  Net net(m, b, A);
  Annotator ann(b, mesh, c.annotations != ImageAnnotations::kNone);

  int64_t pn = 0;
  Instruction* x = b.Parameter(pn++, Shape(A, {B, I, I, c.channels}), "x");
  Instruction* labels = c.backward ? b.Parameter(pn++, Shape(A, {B, K}), "labels") : nullptr;
  ann.Apply(x, ImageInputMapping(c.annotations, 4));
  if (labels) ann.Apply(labels, c.annotations == ImageAnnotations::kNone ? Dims{} : Dims{0, -1});

  // Weights, in network order.
  int64_t n_weights = 3 + 2;
  for (size_t s = 0; s < c.blocks.size(); ++s) n_weights += 9 * c.blocks[s] + 3;
  std::vector<Weight> weights;
  weights.reserve(static_cast<size_t>(n_weights));
  ConvLayer stem;
  AddConvLayer(MakeWeightAdder(b, weights, "stem", &pn), P, "conv", "", stem_spec, c.channels, c.width, true, true, &stem);
  std::vector<Bottleneck> blocks;
  int64_t cin = c.width;
  for (size_t s = 0; s < c.blocks.size(); ++s) {
    const int64_t width = c.width << s, out = 4 * width, stride = s == 0 ? 1 : 2;
    for (int64_t j = 0; j < c.blocks[s]; ++j) {
      Bottleneck blk;
      const std::string stage = "stage" + std::to_string(s + 1), block = "block" + std::to_string(j);
      blk.scope = stage + "/" + block;
      const WeightAdder add = MakeWeightAdder(b, weights, stage + "_" + block, &pn, blk.scope);
      const int64_t st = j == 0 ? stride : 1;
      AddConvLayer(add, P, "conv1", "conv1", ConvSpec::Centered(2, 1, 1), cin, width, true, true, &blk.conv1);
      AddConvLayer(add, P, "conv2", "conv2", ConvSpec::Centered(2, 3, st), width, width, true, true, &blk.conv2);
      AddConvLayer(add, P, "conv3", "conv3", ConvSpec::Centered(2, 1, 1), width, out, true, false, &blk.conv3);
      blk.has_proj = j == 0;
      if (blk.has_proj) AddConvLayer(add, P, "proj", "proj", ConvSpec::Centered(2, 1, st), cin, out, true, false, &blk.proj);
      blocks.push_back(std::move(blk));
      cin = out;
    }
  }
  stem.bn_batch = c.bn_batch;
  for (Bottleneck& blk : blocks)
    for (ConvLayer* l : {&blk.conv1, &blk.conv2, &blk.conv3, &blk.proj}) l->bn_batch = c.bn_batch;
  const WeightAdder add_head = MakeWeightAdder(b, weights, "head", &pn);
  Weight* fc_w = add_head("fc_w", "", Shape(P, {cin, K}));
  Weight* fc_b = add_head("fc_b", "", Shape(P, {K}));
  AddOptimizerState(b, weights, c.optimizer, &pn);
  b.PushScope("forward", /*in_names=*/false);  // op_name forward/..., names unchanged
  CastWeights(net, weights);

  // Forward.
  Instruction *h = nullptr, *pool_in = nullptr, *pool_out = nullptr;
  {
    auto s = b.Scope("stem");
    pool_in = ConvLayerForward(net, stem, x);
    pool_out = h = MaxPool(net, pool_in, pool_spec, "pool");
  }
  for (Bottleneck& blk : blocks) {
    auto s = b.Scope(blk.scope);
    blk.x = h;
    Instruction* y = nullptr;
    {
      auto s1 = b.Scope("conv1");
      y = ConvLayerForward(net, blk.conv1, h);
    }
    {
      auto s2 = b.Scope("conv2");
      y = ConvLayerForward(net, blk.conv2, y);
    }
    {
      auto s3 = b.Scope("conv3");
      y = ConvLayerForward(net, blk.conv3, y);
    }
    Instruction* shortcut = h;
    if (blk.has_proj) {
      auto sp = b.Scope("proj");
      shortcut = ConvLayerForward(net, blk.proj, h);
    }
    blk.sum = b.Add(y, shortcut, "sum");
    h = net.Relu(blk.sum, "out");
  }
  Instruction *features = nullptr, *logits = nullptr;
  const int64_t hw = h ? h->shape().dim(1) * h->shape().dim(2) : 1;
  {
    auto s = b.Scope("head");
    features = net.Scale(net.Sum(h, {1, 2}, "sum"), 1.0 / static_cast<double>(hw), "avgpool");  // [B,C]
    Instruction* fc = net.Dot(features, fc_w->value, {}, {}, {1}, {0}, "fc");
    logits = b.Add(fc, net.Bcast(fc_b->value, fc, {1}), "logits");
  }
  b.PopScope();  // forward
  if (!c.backward) {
    b.SetRoot(logits);
    if (!b.ok()) return b.status().error();
    return module;
  }

  auto [loss, dlogits] = SoftmaxCrossEntropy(net, logits, labels);
  Instruction* dh = nullptr;
  {
    auto s = b.Scope("backward/head");
    AccumulateGrad(b, &fc_w->grad, net.Dot(features, dlogits, {}, {}, {0}, {0}, "dfc_w"));  // [C,K]
    AccumulateGrad(b, &fc_b->grad, net.Sum(dlogits, {0}, "dfc_b"));
    Instruction* dfeatures = net.Dot(dlogits, fc_w->value, {}, {}, {1}, {1}, "dfeatures");  // [B,C]
    dh = net.Bcast(net.Scale(dfeatures, 1.0 / static_cast<double>(hw)), h, {0, 3});
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    Bottleneck& blk = *it;
    auto s = b.Scope("backward/" + blk.scope);
    Instruction* dsum = net.ReluGrad(blk.sum, dh, "dsum");
    Instruction* d = dsum;
    {
      auto s3 = b.Scope("conv3");
      d = ConvLayerBackward(net, blk.conv3, d, true);
    }
    {
      auto s2 = b.Scope("conv2");
      d = ConvLayerBackward(net, blk.conv2, d, true);
    }
    {
      auto s1 = b.Scope("conv1");
      d = ConvLayerBackward(net, blk.conv1, d, true);
    }
    Instruction* dshort = dsum;
    if (blk.has_proj) {
      auto sp = b.Scope("proj");
      dshort = ConvLayerBackward(net, blk.proj, dsum, true);
    }
    dh = b.Add(d, dshort, "dx");
  }
  {
    auto s = b.Scope("backward/stem");
    Instruction* dpool = MaxPoolBackward(net, pool_in, pool_out, dh, pool_spec, "pool");
    ConvLayerBackward(net, stem, dpool, /*need_dx=*/false);
  }
  FinishGradients(net, weights, P);
  b.SetRoot(MakeRoot(net, loss, weights, c.optimizer, c.learning_rate));
  if (!b.ok()) return b.status().error();
  return module;
}

// ---- registry entry ----------------------------------------------------------------------------------------

namespace {

std::vector<ZooParameter> ResNetParameters() {
  return WithCommonParameters({
      {"batch", "64", "B: global batch size"},
      {"image", "224", "image height = width"},
      {"channels", "3", "input channels"},
      {"classes", "1000", "output classes"},
      {"width", "64", "stem and first-stage width (stage i has width * 2^(i-1), its blocks output 4x that)"},
      {"blocks", "3,4,6,3", "bottleneck blocks per stage (ResNet-50: 3,4,6,3; ResNet-101: 3,4,23,3)"},
      {"backward", "1", "add the loss and the backward pass (0 | 1)"},
      {"optimizer", "lars", "weight update after backward: none | sgd | adam | lars"},
      {"learning_rate", "0.1", "optimizer step size"},
      {"bn_batch", "0",
       "BatchNorm statistics over groups of this many examples; 0: the whole batch (set batch / mesh_x for each "
       "replica's own, as data-parallel TPU training does)"},
      {"annotations", "data", "none | data (batch on X) | spatial (batch on X, image height on Y)"},
      {"mesh_x", "8", "mesh axis X size (data parallel replicas)"},
      {"mesh_y", "1", "mesh axis Y size (spatial partitions)"},
  });
}

Result<std::unique_ptr<Module>> BuildFromParams(ZooParams& p) {
  ResNetConfig c;
  ReadImageParameters(p, c);
  c.blocks = p.IntList("blocks");
  c.bn_batch = p.Int("bn_batch");
  if (!p.ok()) return Error(p.error());
  return BuildResNet(c);
}

}  // namespace

void AddResNetModels(std::vector<ZooModel>& models) {
  models.push_back({"resnet50",
                    "ResNet-50 training step at its real sizes (224x224 images, 25.6M weights), LARS; data-parallel "
                    "(the weight-update-sharding paper's image model) or spatially partitioned",
                    ResNetParameters(), &BuildFromParams, &ZooMeshXY});
}

}  // namespace shardscope
