#include "core/zoo/conv_blocks.h"

#include <cmath>

namespace shardscope::zoo {

ConvSpec ConvSpec::Centered(int64_t n, int64_t k, int64_t s) {
  ConvSpec c;
  c.kernel.assign(static_cast<size_t>(n), k);
  c.stride.assign(static_cast<size_t>(n), s);
  c.pad_low.assign(static_cast<size_t>(n), k / 2);
  c.pad_high.assign(static_cast<size_t>(n), k / 2);
  c.lhs_dilation.assign(static_cast<size_t>(n), 1);
  return c;
}

ConvSpec ConvSpec::Tiles(int64_t n, int64_t k) {
  ConvSpec c = Centered(n, k, k);
  c.pad_low.assign(static_cast<size_t>(n), 0);
  c.pad_high.assign(static_cast<size_t>(n), 0);
  return c;
}

ConvSpec ConvSpec::UpSample(int64_t n, int64_t f) {
  ConvSpec c = Centered(n, f, 1);
  c.pad_low.assign(static_cast<size_t>(n), f - 1);
  c.pad_high.assign(static_cast<size_t>(n), f - 1);
  c.lhs_dilation.assign(static_cast<size_t>(n), f);
  return c;
}

Window ConvSpec::ToWindow() const {
  Window w;
  for (int64_t d = 0; d < rank(); ++d) {
    WindowDimension wd;
    wd.size = kernel[d];
    wd.stride = stride[d];
    wd.padding_low = pad_low[d];
    wd.padding_high = pad_high[d];
    wd.base_dilation = lhs_dilation[d];
    w.dims.push_back(wd);
  }
  return w;
}

int64_t ConvSpec::OutputSize(int64_t d, int64_t in) const {
  const int64_t padded = (in - 1) * lhs_dilation[d] + 1 + pad_low[d] + pad_high[d];
  return padded < kernel[d] ? 0 : (padded - kernel[d]) / stride[d] + 1;
}

ConvolutionDimensionNumbers ChannelsLastConv(int64_t n) {
  ConvolutionDimensionNumbers dn;
  dn.input_batch = 0;
  dn.input_feature = n + 1;
  dn.kernel_input_feature = n;
  dn.kernel_output_feature = n + 1;
  dn.output_batch = 0;
  dn.output_feature = n + 1;
  for (int64_t i = 0; i < n; ++i) {
    dn.input_spatial.push_back(1 + i);
    dn.kernel_spatial.push_back(i);
    dn.output_spatial.push_back(1 + i);
  }
  return dn;
}

Instruction* ConvForward(Net& net, Instruction* x, Instruction* w, const ConvSpec& spec, const std::string& name) {
  if (!x || !w) return nullptr;
  return net.b().Convolution(x, w, ChannelsLastConv(spec.rank()), spec.ToWindow(), 1, 1, name);
}

ConvGrads ConvBackward(Net& net, Instruction* x, Instruction* w, Instruction* dy, const ConvSpec& spec, bool need_dx,
                       const std::string& name) {
  Builder& b = net.b();
  ConvGrads g;
  if (!x || !w || !dy) return g;
  const int64_t n = spec.rank();
  if (need_dx) {
    ConvolutionDimensionNumbers dn = ChannelsLastConv(n);
    std::swap(dn.kernel_input_feature, dn.kernel_output_feature);
    Window win;
    for (int64_t d = 0; d < n; ++d) {
      const int64_t k = spec.kernel[d], s = spec.stride[d], bd = spec.lhs_dilation[d], pl = spec.pad_low[d];
      const int64_t in = x->shape().dim(1 + d), out = dy->shape().dim(1 + d);
      WindowDimension wd;
      wd.size = k;
      wd.stride = bd;
      wd.base_dilation = s;
      wd.padding_low = k - 1 - pl;
      wd.padding_high = (in - 1) * bd + pl - (out - 1) * s;
      win.dims.push_back(wd);
    }
    Dims spatial;
    for (int64_t d = 0; d < n; ++d) spatial.push_back(d);
    Instruction* reversed = b.Reverse(w, spatial, name + "_reversed_kernel");
    g.dx = b.Convolution(dy, reversed, dn, win, 1, 1, "d" + name + "_input");
  }
  ConvolutionDimensionNumbers dn;
  dn.input_batch = n + 1;  // input features play the batch
  dn.input_feature = 0;    // and the batch is contracted
  dn.kernel_input_feature = 0;
  dn.kernel_output_feature = n + 1;
  dn.output_batch = n;
  dn.output_feature = n + 1;
  Window win;
  for (int64_t d = 0; d < n; ++d) {
    dn.input_spatial.push_back(1 + d);
    dn.kernel_spatial.push_back(1 + d);
    dn.output_spatial.push_back(d);
    const int64_t k = spec.kernel[d], s = spec.stride[d], bd = spec.lhs_dilation[d];
    const int64_t in = x->shape().dim(1 + d), out = dy->shape().dim(1 + d);
    const int64_t padded = spec.pad_low[d] + (in - 1) * bd + 1 + spec.pad_high[d];
    WindowDimension wd;
    wd.size = out;
    wd.window_dilation = s;
    wd.base_dilation = bd;
    wd.padding_low = spec.pad_low[d];
    // Rows past the last window are not read: drop them so the result has the kernel's extent.
    wd.padding_high = spec.pad_high[d] - (padded - (out - 1) * s - k);
    win.dims.push_back(wd);
  }
  g.dw = b.Convolution(x, dy, dn, win, 1, 1, "d" + name + "_kernel");
  return g;
}

namespace {

Window PoolWindow(const ConvSpec& spec) {
  Window w;
  w.dims.push_back(WindowDimension{});  // batch
  for (const WindowDimension& d : spec.ToWindow().dims) w.dims.push_back(d);
  w.dims.push_back(WindowDimension{});  // features
  return w;
}

}  // namespace

Instruction* MaxPool(Net& net, Instruction* x, const ConvSpec& spec, const std::string& name) {
  if (!x) return nullptr;
  Builder& b = net.b();
  Module& m = *b.computation()->parent();
  const PrimitiveType t = x->shape().type;
  return b.ReduceWindow(x, net.Const(-INFINITY, t), PoolWindow(spec), ScalarMax(m, t), name);
}

Instruction* MaxPoolBackward(Net& net, Instruction* x, Instruction* y, Instruction* dy, const ConvSpec& spec,
                             const std::string& name) {
  Builder& b = net.b();
  if (!x || !y || !dy) return nullptr;
  const int64_t n = spec.rank();
  const PrimitiveType t = x->shape().type;
  int64_t offsets = 1;
  for (int64_t k : spec.kernel) offsets *= k;
  Instruction* dx = nullptr;
  for (int64_t o = 0; o < offsets; ++o) {
    // Window offset o (mixed radix over the kernel): output j lands on input j*stride + offset - pad_low.
    std::vector<PaddingDim> pad(static_cast<size_t>(n + 2));
    int64_t rest = o;
    for (int64_t d = n - 1; d >= 0; --d) {
      const int64_t off = rest % spec.kernel[d];
      rest /= spec.kernel[d];
      PaddingDim& p = pad[static_cast<size_t>(1 + d)];
      p.low = off - spec.pad_low[d];
      p.interior = spec.stride[d] - 1;
      p.high = x->shape().dim(1 + d) - (p.low + (y->shape().dim(1 + d) - 1) * spec.stride[d] + 1);
    }
    const std::string tag = name + "_offset" + std::to_string(o);
    Instruction* y_at = b.Pad(y, net.Const(-INFINITY, t), pad, tag + "_max");
    Instruction* dy_at = b.Pad(dy, net.Const(0, t), pad, tag + "_grad");
    Instruction* is_max = b.Compare(x, y_at, ComparisonDirection::kEq);
    AccumulateGrad(b, &dx, b.Select(is_max, dy_at, dy_at ? b.FullLike(dy_at, 0.0) : nullptr));
  }
  return dx;
}

void AddConvLayer(const WeightAdder& add, PrimitiveType P, const std::string& name, const std::string& scope,
                  const ConvSpec& spec, int64_t cin, int64_t cout, bool batchnorm, bool relu, ConvLayer* layer) {
  Dims k = spec.kernel;
  k.push_back(cin);
  k.push_back(cout);
  layer->spec = spec;
  layer->relu = relu;
  layer->w = add(name + "_w", scope, Shape(P, k));
  if (batchnorm) {
    layer->gamma = add(name + "_bn_scale", scope, Shape(P, {cout}));
    layer->beta = add(name + "_bn_offset", scope, Shape(P, {cout}));
  }
}

namespace {

// The BatchNorm input as [groups, examples per group, ...] when the layer normalises groups of its
// batch, else itself.
Instruction* BatchNormGroups(Builder& b, const ConvLayer& L, Instruction* x, const std::string& name) {
  if (!x || L.bn_batch <= 0 || L.bn_batch >= x->shape().dim(0)) return x;
  std::vector<int64_t> dims = x->shape().dims;
  dims[0] = x->shape().dim(0) / L.bn_batch;
  dims.insert(dims.begin() + 1, L.bn_batch);
  return b.Reshape(x, dims, name);
}

Instruction* Ungrouped(Builder& b, Instruction* grouped, const Instruction* like, const std::string& name) {
  if (!grouped || grouped->shape().rank() == like->shape().rank()) return grouped;
  return b.Reshape(grouped, like->shape().dims, name);
}

}  // namespace

Instruction* ConvLayerForward(Net& net, ConvLayer& L, Instruction* x) {
  Builder& b = net.b();
  if (!x || !L.w) return nullptr;
  L.x = x;
  L.conv = ConvForward(net, x, L.w->value, L.spec, "conv");
  L.pre = L.conv;
  if (L.gamma) {
    auto s = b.Scope("bn");
    Instruction* in = BatchNormGroups(b, L, L.conv, "groups");
    L.norm = BatchNormForward(net, in, L.gamma->value, L.beta->value, /*group_dims=*/in->shape().rank() - L.conv->shape().rank());
    L.pre = Ungrouped(b, L.norm.y, L.conv, "ungrouped");
  }
  L.y = L.relu ? net.Relu(L.pre, "relu") : L.pre;
  return L.y;
}

Instruction* ConvLayerBackward(Net& net, ConvLayer& L, Instruction* dy, bool need_dx) {
  Builder& b = net.b();
  if (!dy || !L.x) return nullptr;
  Instruction* d = L.relu ? net.ReluGrad(L.pre, dy, "drelu") : dy;
  if (L.gamma) {
    auto s = b.Scope("bn");
    Instruction *dg = nullptr, *db = nullptr;
    d = Ungrouped(b, NormalizeBackward(net, L.norm, L.gamma->value, BatchNormGroups(b, L, d, "dgroups"), &dg, &db),
                  L.conv, "dungrouped");
    AccumulateGrad(b, &L.gamma->grad, dg);
    AccumulateGrad(b, &L.beta->grad, db);
  }
  ConvGrads g = ConvBackward(net, L.x, L.w->value, d, L.spec, need_dx, "conv");
  AccumulateGrad(b, &L.w->grad, g.dw);
  return g.dx;
}

}  // namespace shardscope::zoo
