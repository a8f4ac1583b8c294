#include "simulator/calibration/calibration.h"

#include <string>

namespace shardscope::sim {

void ApplyPresetCalibration(ChipSpec& chip) {
  if (chip.name == "tpu-v2") CalibrateTpuV2(chip);
  else if (chip.name == "tpu-v3") CalibrateTpuV3(chip);
  else if (chip.name == "tpu-v4") CalibrateTpuV4(chip);
  else if (chip.name == "tpu-v5e") CalibrateTpuV5e(chip);
  else if (chip.name == "tpu-v5p") CalibrateTpuV5p(chip);
  else if (chip.name == "tpu-v6e") CalibrateTpuV6e(chip);
  else if (chip.name == "h100") CalibrateH100(chip);
  if (chip.name.rfind("tpu-", 0) == 0) SetTpuArrayTiling(chip);
}

void SetTpuArrayTiling(ChipSpec& c) {
  // Every TPU generation stores HBM arrays in (8 sublanes x 128 lanes) tiles of 32-bit words,
  // 16-bit types packed two per word (XLA, "Tiled layout", openxla.org/xla/tiled_layout; JAX,
  // cloud_tpu_colabs/README.md "Padding": one dimension padded to a multiple of 8, another to a
  // multiple of 128; JAX, "Writing TPU kernels with Pallas": 8 x 128 vector registers).
  // simulator/buffer_layout.h pads buffer sizes with it.
  c.layout_lanes = 128;
  c.layout_sublanes = 8;
}

void CarryOverTpuV3Efficiencies(ChipSpec& c, int64_t mxu_tile, int64_t mxu_rows, const char* file) {
  ChipSpec v3;
  CalibrateTpuV3(v3);
  c.flops_efficiency = v3.flops_efficiency;
  c.hbm_efficiency = v3.hbm_efficiency;
  c.op_overhead = v3.op_overhead;
  c.mxu_tile = mxu_tile;
  c.mxu_rows = mxu_rows;
  c.calibration = std::string("simulator/calibration/") + file + ": " + std::to_string(mxu_tile) + "x" +
                  std::to_string(mxu_tile) + " matrix tiles, rows of " + std::to_string(mxu_rows) +
                  "; efficiencies and per-op overhead carried over from tpu-v3";
}

}  // namespace shardscope::sim
