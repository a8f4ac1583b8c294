// TPU v5e: its matrix-unit tiles; its efficiencies are TPU v3's (no published whole-model figure
// for this chip is in the reference).
#include "simulator/calibration/calibration.h"

namespace shardscope::sim {

// Google Cloud TPU v5e: four 128x128 MXUs per TensorCore; 128 x 8 tiles.
void CalibrateTpuV5e(ChipSpec& c) { CarryOverTpuV3Efficiencies(c, 128, 8, "tpu_v5e.cpp"); }

}  // namespace shardscope::sim
