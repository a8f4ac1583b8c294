// TPU v2: its matrix-unit tiles; its efficiencies are TPU v3's (no published whole-model figure
// for this chip is in the reference).
#include "simulator/calibration/calibration.h"

namespace shardscope::sim {

// Google Cloud TPU system architecture: 128x128 MXUs; performance guide: 128 x 8 tiles.
void CalibrateTpuV2(ChipSpec& c) { CarryOverTpuV3Efficiencies(c, 128, 8, "tpu_v2.cpp"); }

}  // namespace shardscope::sim
