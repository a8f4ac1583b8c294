// TPU v6e: its matrix-unit tiles; its efficiencies are TPU v3's (no published whole-model figure
// for this chip is in the reference).
#include "simulator/calibration/calibration.h"

namespace shardscope::sim {

// Google Cloud TPU v6e (Trillium): 256x256 MXUs, so sizes pad to 256.
void CalibrateTpuV6e(ChipSpec& c) { CarryOverTpuV3Efficiencies(c, 256, 8, "tpu_v6e.cpp"); }

}  // namespace shardscope::sim
