// TPU v3: the calibration every GSPMD and weight-update-sharding reproduction runs on
// (docs/reproduce.md, "Compute calibration", lists the cases and the residual differences).
#include "simulator/calibration/calibration.h"

#include <cstdio>

namespace shardscope::sim {

namespace {
constexpr double kTpuV3FlopsEfficiency = 0.70;
constexpr double kTpuV3HbmEfficiency = 0.72;
constexpr double kTpuV3OpOverhead = 2e-6;
}  // namespace

void CalibrateTpuV3(ChipSpec& c) {
  // Google Cloud TPU system architecture: each TensorCore has 128x128 matrix units (MXUs). Cloud TPU
  // performance guide: XLA tiles matrix operands in 128 x 8 chunks (8 sublanes of 128 lanes) and pads
  // what does not fill them, which under-uses the core.
  c.mxu_tile = 128;
  c.mxu_rows = 8;
  // Fitted once over the published whole-model cases of the reproduce registry together (the seven
  // columns of GSPMD Table 2 and Table 8's utilisation), not per table: the share of peak
  // that XLA's tiled matrix products sustain on a core, including what the model does not
  // represent (vector-unit work inside matmul fusions, transposes and layout changes, MXU pipeline
  // fill at tile boundaries).
  c.flops_efficiency = kTpuV3FlopsEfficiency;
  // Memory-bound ops: HBM2's sustained bandwidth for streaming reads and writes. Assumed: about the
  // matrix units' share (no published per-op figure for v3): set to it when both were 0.72, and not
  // refitted when the matrix units' share was (docs/reproduce.md, "Compute calibration").
  c.hbm_efficiency = kTpuV3HbmEfficiency;
  // A fixed cost per kernel (launch, prologue, pipeline drain). Assumed: a few microseconds (no
  // published figure in the reference); it matters only for programs of many small ops (the
  // weight-update-sharding step), not for the GSPMD tables (under 0.1% of their steps).
  c.op_overhead = kTpuV3OpOverhead;
  char text[200];
  std::snprintf(text, sizeof text,
                "simulator/calibration/tpu_v3.cpp: MXU 128x128, rows of 8 (Cloud TPU docs); matmul %.2f and HBM %.2f of "
                "peak, %.0f us per op, fitted over every reproduce case together",
                kTpuV3FlopsEfficiency, kTpuV3HbmEfficiency, kTpuV3OpOverhead * 1e6);
  c.calibration = text;
}

}  // namespace shardscope::sim
