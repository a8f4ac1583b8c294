// The 3-D U-Net (Çiçek et al. 2016) of GSPMD §5.6 / Table 8, channels last ([B, D, H, W, C]):
//
//   analysis level l (l = 0 .. levels-1, c = width * 2^l): two 3x3x3 convolutions (c, then 2c
//            channels), each with BatchNorm and ReLU; then 2x2x2 max pooling (stride 2) into the
//            next level (not after the last)
//   synthesis level l (l = levels-2 .. 0): 2x2x2 up-sampling by a transposed convolution (stride
//            2, channels kept), concatenation with the analysis level's output (the skip),
//            two 3x3x3 convolutions to 2c channels with BatchNorm and ReLU
//   a final 1x1x1 convolution to the classes
// Loss: softmax cross-entropy per voxel against the labels [B,D,H,W,classes]; backward by hand
// (conv_blocks.h), then the optimizer step. With width 32 and 4 levels the channel counts are the
// paper's (32/64, 64/128, 128/256, 256/512; synthesis 256, 128, 64).
//
// Annotations ("annotations"): spatial (the default; the batch on mesh axis X, the depth D on Y,
// GSPMD Table 8's (data, spatial) mesh), data, none. Only the inputs (image and labels) are
// annotated — GSPMD §5.6: "sharding annotations are required only for the model inputs"; propagation
// carries the spatial sharding to every convolution, which the partitioner runs with halo exchanges.
//
// Names: parameters "x", "labels", "down<l>_conv<a|b>_w", "up<l>_upconv_w", "up<l>_conv<a|b>_w",
// "final_conv_w" (+ "_bn_scale", "_bn_offset"); scopes "down<l>/conva", "up<l>/concat", ...
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

struct UNet3dConfig {
  int64_t batch = 4;
  int64_t image = 128;  // D = H = W
  int64_t channels = 1;
  int64_t classes = 3;
  int64_t width = 32;
  int64_t levels = 4;
  bool batchnorm = true;
  bool backward = true;
  Optimizer optimizer = Optimizer::kAdam;
  double learning_rate = 1e-3;
  PrimitiveType param_type = PrimitiveType::kF32;
  PrimitiveType act_type = PrimitiveType::kF32;
  ImageAnnotations annotations = ImageAnnotations::kSpatial;
  int64_t mesh_x = 1, mesh_y = 4;
};
Result<std::unique_ptr<Module>> BuildUNet3d(const UNet3dConfig& config);

// The zoo entry of this family: "unet3d".
void AddUNet3dModels(std::vector<ZooModel>& models);

}  // namespace shardscope
