// H100 SXM: its matrix-unit tiles; its efficiencies are TPU v3's (no published whole-model figure
// for this chip is in the reference).
#include "simulator/calibration/calibration.h"

namespace shardscope::sim {

// NVIDIA Hopper tuning guide: tensor-core GEMM tiles; sizes that are multiples of 64 (bf16) avoid padded tiles.
void CalibrateH100(ChipSpec& c) { CarryOverTpuV3Efficiencies(c, 64, 8, "h100.cpp"); }

}  // namespace shardscope::sim
