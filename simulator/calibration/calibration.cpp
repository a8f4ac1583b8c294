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
