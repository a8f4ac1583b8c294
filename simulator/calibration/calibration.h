// The compute calibration of every chip preset: one file per preset (tpu_v3.cpp, ...) sets the
// ChipSpec's flops_efficiency, hbm_efficiency, mxu_tile, mxu_rows and op_overhead and says where
// each figure comes from. One calibration serves every case the simulator is checked against
// (the reproduce registry); a figure is never tuned to one table.
#pragma once

#include "simulator/hardware.h"

namespace shardscope::sim {

// Sets the calibration of the preset named chip.name (no change for other names).
void ApplyPresetCalibration(ChipSpec& chip);

// For a chip without a published whole-model figure of its own: TPU v3's efficiencies and per-op
// overhead (the chip the papers measured) with the chip's own matrix-unit tiles; `file` names the
// preset's calibration file in the chip's calibration line.
void CarryOverTpuV3Efficiencies(ChipSpec& c, int64_t mxu_tile, int64_t mxu_rows, const char* file);

// The memory layout of every TPU preset: arrays in tiles of 8 x 128 32-bit words
// (simulator/buffer_layout.h). Set by ApplyPresetCalibration for every "tpu-" preset.
void SetTpuArrayTiling(ChipSpec& c);

void CalibrateTpuV2(ChipSpec& c);
void CalibrateTpuV3(ChipSpec& c);
void CalibrateTpuV4(ChipSpec& c);
void CalibrateTpuV5e(ChipSpec& c);
void CalibrateTpuV5p(ChipSpec& c);
void CalibrateTpuV6e(ChipSpec& c);
void CalibrateH100(ChipSpec& c);

}  // namespace shardscope::sim
