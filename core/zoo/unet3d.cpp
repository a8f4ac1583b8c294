#include "core/zoo/unet3d.h"

#include <string>

#include "core/zoo/conv_blocks.h"

namespace shardscope {

using namespace zoo;

namespace {

struct Level {
  ConvLayer a, b;           // the two 3x3x3 convolutions
  ConvLayer up;             // synthesis: the up-sampling convolution (levels < last)
  Instruction* out = nullptr;     // analysis output (the skip)
  Instruction* pooled = nullptr;  // its max pooling (input of the next level)
  Instruction* cat = nullptr;     // synthesis: concatenation of skip and up-sampled
  ConvLayer sa, sb;         // synthesis convolutions
};

}  // namespace

Result<std::unique_ptr<Module>> BuildUNet3d(const UNet3dConfig& c) {
  if (Status s = CheckPositive({{"batch", c.batch}, {"image", c.image}, {"channels", c.channels}, {"classes", c.classes},
                                {"width", c.width}, {"levels", c.levels}, {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.levels > 8) return Error("levels = " + std::to_string(c.levels) + " is too many (limit 8)");
  const int64_t factor = int64_t{1} << (c.levels - 1);
  if (c.image % factor != 0)
    return Error("image = " + std::to_string(c.image) + " must be a multiple of 2^(levels-1) = " + std::to_string(factor));
  if (Status s = CheckElementCount({{c.batch, c.image, c.image, c.image, 2 * c.width}, {c.batch, c.image, c.image, c.image, c.classes},
                                    {3, 3, 3, c.width << c.levels, c.width << c.levels}});
      !s.ok())
    return s.error();
  if (Status s = CheckTrainingParameters(c); !s.ok()) return s.error();

  const int64_t B = c.batch, I = c.image, L = c.levels;
  const PrimitiveType P = c.param_type, A = c.act_type;
  const DeviceMesh mesh({{"X", c.mesh_x}, {"Y", c.mesh_y}});
  const ConvSpec conv3 = ConvSpec::Centered(3, 3, 1), pool = ConvSpec::Tiles(3, 2), up = ConvSpec::UpSample(3, 2);

  auto module = std::make_unique<Module>("unet3d");
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
  Instruction* x = b.Parameter(pn++, Shape(A, {B, I, I, I, c.channels}), "x");
  Instruction* labels = c.backward ? b.Parameter(pn++, Shape(A, {B, I, I, I, c.classes}), "labels") : nullptr;
  ann.Apply(x, ImageInputMapping(c.annotations, 5));
  if (labels) ann.Apply(labels, ImageInputMapping(c.annotations, 5));

  std::vector<Weight> weights;
  weights.reserve(static_cast<size_t>(L * 2 * 3 + (L - 1) * 7 + 1));
  std::vector<Level> lv(static_cast<size_t>(L));
  const bool bn = c.batchnorm;
  int64_t cin = c.channels;
  for (int64_t l = 0; l < L; ++l) {
    Level& v = lv[static_cast<size_t>(l)];
    const int64_t ch = c.width << l;
    const WeightAdder add = MakeWeightAdder(b, weights, "down" + std::to_string(l), &pn);
    AddConvLayer(add, P, "conva", "conva", conv3, cin, ch, bn, true, &v.a);
    AddConvLayer(add, P, "convb", "convb", conv3, ch, 2 * ch, bn, true, &v.b);
    cin = 2 * ch;
  }
  for (int64_t l = L - 2; l >= 0; --l) {
    Level& v = lv[static_cast<size_t>(l)];
    const int64_t out = 2 * (c.width << l), below = 2 * (c.width << (l + 1));
    const WeightAdder add = MakeWeightAdder(b, weights, "up" + std::to_string(l), &pn);
    AddConvLayer(add, P, "upconv", "upconv", up, below, below, false, false, &v.up);
    AddConvLayer(add, P, "conva", "conva", conv3, out + below, out, bn, true, &v.sa);
    AddConvLayer(add, P, "convb", "convb", conv3, out, out, bn, true, &v.sb);
  }
  ConvLayer final_conv;
  AddConvLayer(MakeWeightAdder(b, weights, "final", &pn), P, "conv", "", ConvSpec::Centered(3, 1, 1), 2 * c.width,
               c.classes, false, false, &final_conv);
  AddOptimizerState(b, weights, c.optimizer, &pn);
  b.PushScope("forward", /*in_names=*/false);  // op_name forward/..., names unchanged
  CastWeights(net, weights);

  // Forward: the analysis path, then the synthesis path.
  Instruction* h = x;
  for (int64_t l = 0; l < L; ++l) {
    Level& v = lv[static_cast<size_t>(l)];
    auto s = b.Scope("down" + std::to_string(l));
    {
      auto sa = b.Scope("conva");
      h = ConvLayerForward(net, v.a, h);
    }
    {
      auto sb = b.Scope("convb");
      v.out = h = ConvLayerForward(net, v.b, h);
    }
    if (l + 1 < L) v.pooled = h = MaxPool(net, h, pool, "pool");
  }
  for (int64_t l = L - 2; l >= 0; --l) {
    Level& v = lv[static_cast<size_t>(l)];
    auto s = b.Scope("up" + std::to_string(l));
    {
      auto su = b.Scope("upconv");
      h = ConvLayerForward(net, v.up, h);
    }
    v.cat = b.Concatenate({v.out, h}, 4, "concat");
    {
      auto sa = b.Scope("conva");
      h = ConvLayerForward(net, v.sa, v.cat);
    }
    {
      auto sb = b.Scope("convb");
      h = ConvLayerForward(net, v.sb, h);
    }
  }
  Instruction* logits = nullptr;
  {
    auto s = b.Scope("final");
    logits = ConvLayerForward(net, final_conv, h);
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
    auto s = b.Scope("backward/final");
    dh = ConvLayerBackward(net, final_conv, dlogits, true);
  }
  // Gradients reaching each analysis output through its skip.
  std::vector<Instruction*> dskip(static_cast<size_t>(L), nullptr);
  for (int64_t l = 0; l + 1 < L; ++l) {
    Level& v = lv[static_cast<size_t>(l)];
    auto s = b.Scope("backward/up" + std::to_string(l));
    {
      auto sb = b.Scope("convb");
      dh = ConvLayerBackward(net, v.sb, dh, true);
    }
    {
      auto sa = b.Scope("conva");
      dh = ConvLayerBackward(net, v.sa, dh, true);
    }
    const Shape& skip = v.out->shape();
    const Dims lim = {B, skip.dim(1), skip.dim(2), skip.dim(3), v.cat->shape().dim(4)};
    dskip[static_cast<size_t>(l)] = b.Slice(dh, {0, 0, 0, 0, 0}, {B, skip.dim(1), skip.dim(2), skip.dim(3), skip.dim(4)}, {},
                                            "dskip");
    dh = b.Slice(dh, {0, 0, 0, 0, skip.dim(4)}, lim, {}, "dupsampled");
    {
      auto su = b.Scope("upconv");
      dh = ConvLayerBackward(net, v.up, dh, true);
    }
  }
  for (int64_t l = L - 1; l >= 0; --l) {
    Level& v = lv[static_cast<size_t>(l)];
    auto s = b.Scope("backward/down" + std::to_string(l));
    if (l + 1 < L) {
      // dh is the gradient of the pooled output here.
      Instruction* dpool = MaxPoolBackward(net, v.out, v.pooled, dh, pool, "pool");
      dh = b.Add(dskip[static_cast<size_t>(l)], dpool, "dout");
    }
    {
      auto sb = b.Scope("convb");
      dh = ConvLayerBackward(net, v.b, dh, true);
    }
    {
      auto sa = b.Scope("conva");
      dh = ConvLayerBackward(net, v.a, dh, /*need_dx=*/l > 0);
    }
  }
  FinishGradients(net, weights, P);
  b.SetRoot(MakeRoot(net, loss, weights, c.optimizer, c.learning_rate));
  if (!b.ok()) return b.status().error();
  return module;
}

// ---- registry entry ----------------------------------------------------------------------------------------

namespace {

std::vector<ZooParameter> UNet3dParameters() {
  return WithCommonParameters({
      {"batch", "4", "B: global batch size"},
      {"image", "128", "image depth = height = width (GSPMD Table 8: 128 and 256)"},
      {"channels", "1", "input channels"},
      {"classes", "3", "output classes per voxel"},
      {"width", "32", "channels of the first convolution (level l has width * 2^l, then twice that)"},
      {"levels", "4", "resolution levels (levels - 1 poolings)"},
      {"batchnorm", "1", "BatchNorm after each 3x3x3 convolution (0 | 1)"},
      {"backward", "1", "add the loss and the backward pass (0 | 1)"},
      {"optimizer", "adam", "weight update after backward: none | sgd | adam | lars"},
      {"annotations", "spatial", "spatial (batch on X, depth on Y) | data (batch on X) | none"},
      {"mesh_x", "1", "mesh axis X size (data parallel)"},
      {"mesh_y", "4", "mesh axis Y size (spatial partitions)"},
  });
}

Result<std::unique_ptr<Module>> BuildFromParams(ZooParams& p) {
  UNet3dConfig c;
  ReadImageParameters(p, c);
  c.levels = p.Int("levels");
  c.batchnorm = p.Bool("batchnorm");
  if (!p.ok()) return Error(p.error());
  return BuildUNet3d(c);
}

}  // namespace

void AddUNet3dModels(std::vector<ZooModel>& models) {
  models.push_back({"unet3d",
                    "3-D U-Net training step (GSPMD §5.6, Table 8): 3-D convolutions, pooling, up-sampling and skip "
                    "concatenations; only the input's depth is annotated (spatial partitioning with halo exchanges)",
                    UNet3dParameters(), &BuildFromParams, &ZooMeshXY});
}

}  // namespace shardscope
