// Convolutional building blocks the image models share (resnet.cpp, unet3d.cpp), channels last:
// an activation is [B, spatial..., C], a kernel [k..., C_in, C_out] (dim_labels b01f_01io->b01f
// in 2-D, b012f_012io->b012f in 3-D).
//
// Backward passes are convolutions, as XLA writes them:
//   input gradient   the output gradient, base-dilated by the forward stride, convolved with the
//                    reversed kernel (input and output features swapped), strided by the forward
//                    base dilation;
//   kernel gradient  the input (features as the batch, batch as the features) convolved with the
//                    output gradient as the kernel, window-dilated by the forward stride.
// Paddings follow from the forward window and may be negative (XLA allows it) where a stride
// leaves input rows that no window reads.
#pragma once

#include <cstdint>
#include <string>

#include "core/zoo/annotations.h"
#include "core/zoo/training.h"

namespace shardscope::zoo {

// The window of a convolution or pooling over the spatial dims (one entry per spatial dim).
struct ConvSpec {
  Dims kernel, stride, pad_low, pad_high;
  Dims lhs_dilation;  // input (base) dilation: > 1 for the up-sampling (transposed) convolution
  int64_t rank() const { return static_cast<int64_t>(kernel.size()); }
  // `k` wide windows every `s` with k/2 padding each side (torchvision's ResNet; "same" size for
  // stride 1 and odd k), over `n` spatial dims.
  static ConvSpec Centered(int64_t n, int64_t k, int64_t s);
  // Non-overlapping windows of `k` (pooling / down-sampling by k).
  static ConvSpec Tiles(int64_t n, int64_t k);
  // Up-sampling by `f` (a transposed convolution with an f-wide kernel): the input base-dilated by
  // f and padded f-1 on both sides, so an extent of n becomes f*n.
  static ConvSpec UpSample(int64_t n, int64_t f);
  Window ToWindow() const;
  // The output extent of a spatial dim of input extent `in`.
  int64_t OutputSize(int64_t d, int64_t in) const;
};

// The dimension numbers of a channels-last convolution over `n` spatial dims.
ConvolutionDimensionNumbers ChannelsLastConv(int64_t n);

// y = conv(x, w).
Instruction* ConvForward(Net& net, Instruction* x, Instruction* w, const ConvSpec& spec, const std::string& name);
// The gradients of conv(x, w) given dy: the kernel's, and the input's when `need_dx`.
struct ConvGrads {
  Instruction* dx = nullptr;
  Instruction* dw = nullptr;
};
ConvGrads ConvBackward(Net& net, Instruction* x, Instruction* w, Instruction* dy, const ConvSpec& spec, bool need_dx,
                       const std::string& name);

// Max pooling (reduce-window) and its gradient: each window's maximum receives the window's output
// gradient (spread by one interior-padded copy of y and dy per window offset; inputs of pooling are
// ReLU outputs here, whose ties at zero carry no gradient anyway).
Instruction* MaxPool(Net& net, Instruction* x, const ConvSpec& spec, const std::string& name);
Instruction* MaxPoolBackward(Net& net, Instruction* x, Instruction* y, Instruction* dy, const ConvSpec& spec,
                             const std::string& name);

// conv -> BatchNorm (optional) -> ReLU (optional), with what its backward needs.
struct ConvLayer {
  Weight* w = nullptr;
  Weight* gamma = nullptr;  // BatchNorm scale and offset (null without BatchNorm)
  Weight* beta = nullptr;
  ConvSpec spec;
  bool relu = true;
  // BatchNorm statistics over groups of this many examples of dim 0 (0: the whole batch). A group
  // per device's examples is what data-parallel TPU training does by default (the reference
  // ResNet's distributed_group_size = 1): the statistics need no communication.
  int64_t bn_batch = 0;
  // Saved by the forward pass.
  Instruction *x = nullptr, *conv = nullptr, *pre = nullptr, *y = nullptr;
  NormSaved norm;
};
// Adds the layer's weights "<name>_w" [k..., cin, cout], and "<name>_bn_scale", "<name>_bn_offset"
// [cout] when `batchnorm`.
void AddConvLayer(const WeightAdder& add, PrimitiveType P, const std::string& name, const std::string& scope,
                  const ConvSpec& spec, int64_t cin, int64_t cout, bool batchnorm, bool relu, ConvLayer* layer);
Instruction* ConvLayerForward(Net& net, ConvLayer& layer, Instruction* x);
// Returns dx (null when !need_dx); accumulates the weights' gradients.
Instruction* ConvLayerBackward(Net& net, ConvLayer& layer, Instruction* dy, bool need_dx);

// The settings the image models share: "batch", "image", "channels", "classes", "width",
// "annotations" (none | data | spatial) and the training step's.
template <typename Config>
void ReadImageParameters(ZooParams& p, Config& c) {
  c.batch = p.Int("batch");
  c.image = p.Int("image");
  c.channels = p.Int("channels");
  c.classes = p.Int("classes");
  c.width = p.Int("width");
  ReadTrainingParameters(p, c);
  c.annotations = ReadImageAnnotations(p);
}

}  // namespace shardscope::zoo
