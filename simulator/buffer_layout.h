// The bytes an array takes in device memory (HBM) once laid out the way the chip stores arrays.
//
// TPUs store arrays in tiles: XLA's default TPU layouts tile the two most minor dimensions so that
// the minor one fills the 128 lanes of a vector register and the second-minor its 8 sublanes of
// 32-bit words; narrower types pack several elements per 32-bit word, so the second-minor tile
// grows to 16 rows for bf16 and 32 for 8-bit types. An array whose minor dimensions are not
// multiples of the tile is padded to whole tiles. Sources:
//   - XLA, "Tiled layout" (openxla.org/xla/tiled_layout): tiling of the most minor dimensions,
//     padding to whole tiles (the F32[3,5] example), and combined tilings such as (8,128)(2,1)
//     that pack 16-bit elements in pairs.
//   - JAX, Cloud TPU Colabs README, "Padding" (github.com/jax-ml/jax, cloud_tpu_colabs/README.md):
//     "Arrays in the Cloud TPU are tiled. This entails padding one of the dimensions to a multiple
//     of 8, and a different dimension to a multiple of 128."
//   - JAX, "Writing TPU kernels with Pallas" (docs.jax.dev/en/latest/pallas/tpu/details.html):
//     vector registers of 8 x 128 32-bit elements, 16-bit types packed two per 32-bit word.
// The tile is a property of the chip preset (ChipSpec::layout_lanes / layout_sublanes, set in the
// TPU presets' calibration files); a chip without tiling (GPU, CPU, 0/0) keeps the logical size.
//
// A second-minor dimension smaller than the tile takes a smaller tile (SecondMinorTile below).
// Which dimensions: the shape's layout when it has one (minor_to_major[0] is the minor dimension:
// a module dumped by XLA after layout assignment). A shape without one (a zoo model, a module
// before layout assignment) gets the layout XLA's TPU layout assignment would be free to choose:
// modelled as the pair of minor and second-minor dimensions that pads least, the default (the last
// two, {rank-1, ..., 0}) when no other pads less. Source: Cloud TPU performance guide, "Consequences
// of tiling" (cloud.google.com/tpu/docs/performance-guide): arrays are tiled, padding one
// dimension to a multiple of 8 and a different one to a multiple of 128, and "XLA performs data
// layout transformations" so that data is arranged for the hardware, driven by heuristics. A
// GShard dispatch mask [G,S,E,C] with capacity C = 4 (2048 experts) is thus laid out with S or E
// minor, not padded 32x; a [G,S,E] gating tensor with E = 32 puts S minor. Rank 1 pads its only
// dimension to the lanes; scalars are not padded. Tuples are sums of their leaves.
#pragma once

#include <cstdint>

#include "core/base/shape.h"
#include "simulator/hardware.h"

namespace shardscope::sim {

// The tile the second-minor dimension is padded to for `type` on `chip`: layout_sublanes x
// (32 / bits per element) — 8 for f32/s32, 16 for bf16/f16, 32 for 8-bit types; 64-bit types 8.
// 0 when the chip does not tile.
int64_t SublaneTile(const ChipSpec& chip, PrimitiveType type);

// The tile the second-minor dimension of `rows` rows is padded to: the full SublaneTile for
// `rows` >= it, else the smallest power of two >= rows that fills at least one 32-bit word of packed
// elements (f32: 1, 2, 4; bf16: 2, 4, 8). TPU HLO dumps show these small tiles, e.g.
// f32[1,6144]{1,0:T(1,128)} and bf16[1,6144]{1,0:T(2,128)(2,1)}: XLA does not pad a single row to 8.
int64_t SecondMinorTile(const ChipSpec& chip, PrimitiveType type, int64_t rows);

// Bytes `shape` occupies in device memory on `chip` (== shape.ByteSize() on a chip without tiling):
// tiled in its own layout, or, without one, in the least padded choice of its two minor dimensions.
int64_t PaddedByteSize(const Shape& shape, const ChipSpec& chip);

}  // namespace shardscope::sim
