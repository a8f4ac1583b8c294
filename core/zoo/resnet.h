// ResNet (He et al. 2016) for images, channels last, at ResNet-50's real sizes by default: the
// image model of the weight-update-sharding paper (../shared/papers/000_*.txt §6: ResNet-50 with
// LARS, data parallel, one replica per core).
//
//   stem     7x7/2 conv (3 -> w), BatchNorm, ReLU, 3x3/2 max pool (padding 1)
//   stage i  (i = 1..4, widths w, 2w, 4w, 8w, blocks 3, 4, 6, 3) bottleneck blocks:
//            1x1 conv -> 3x3 conv (stride 2 in the first block of stages 2-4, as torchvision's
//            "v1.5") -> 1x1 conv to 4 x width, each with BatchNorm, ReLU after the first two;
//            the shortcut is a 1x1 projection (with its stride) + BatchNorm in a stage's first
//            block, the identity otherwise; ReLU after the sum
//   head     global average pool, fully connected layer (+ bias) to the classes
// Loss: softmax cross-entropy against one-hot labels; backward by hand (convolutions as XLA
// writes their gradients, conv_blocks.h); then the optimizer step (LARS by default).
// At the default sizes the weights number 25,557,032, as torchvision's resnet50.
//
// Names: parameters "x", "labels", "<stage>_<block>_<conv>_w" ("stage2_block0_conv2_w"),
// "..._bn_scale", "..._bn_offset", "stem_conv_w", "head_fc_w", "head_fc_b"; scopes
// "stage2/block0/conv2", "backward/...", "optimizer/...".
//
// Annotations ("annotations"): none; data (the batch split over mesh axis X: data parallelism,
// mesh_y replicas of it); spatial (batch on X and the image height on Y, the (data, spatial) mesh
// of GSPMD §5.6). Only the inputs are annotated; propagation does the rest.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/zoo/annotations.h"
#include "core/zoo/training.h"
#include "core/zoo/zoo.h"

namespace shardscope {

struct ResNetConfig {
  int64_t batch = 64;
  int64_t image = 224;  // height = width
  int64_t channels = 3;
  int64_t classes = 1000;
  int64_t width = 64;                          // stem and first-stage width
  std::vector<int64_t> blocks = {3, 4, 6, 3};  // bottleneck blocks per stage
  bool backward = true;
  Optimizer optimizer = Optimizer::kLars;
  double learning_rate = 0.1;
  PrimitiveType param_type = PrimitiveType::kF32;
  PrimitiveType act_type = PrimitiveType::kF32;
  ImageAnnotations annotations = ImageAnnotations::kData;
  int64_t mesh_x = 8, mesh_y = 1;
  // BatchNorm statistics over groups of this many examples (0: the whole batch). The reference
  // TPU ResNet normalises each core's examples (its distributed_group_size defaults to 1): with
  // bn_batch = batch / replicas the statistics stay on the device; over the whole batch, data
  // parallelism all-reduces them in every BatchNorm, forward and backward.
  int64_t bn_batch = 0;
};
Result<std::unique_ptr<Module>> BuildResNet(const ResNetConfig& config);

// The zoo entry of this family: "resnet50".
void AddResNetModels(std::vector<ZooModel>& models);

}  // namespace shardscope
