// Compute cost: a roofline per op. An op that performs `flops` floating-point operations and moves
// `bytes_accessed` bytes between HBM and the core takes
//   max(flops / (peak FLOP/s x flops_efficiency), bytes / (HBM bandwidth x hbm_efficiency))
// on one device (a chip, or a core when a v2/v3 chip runs as two devices). The efficiency factors
// live in ChipSpec (documented choice: 1.0, the theoretical roofline the book uses).
#pragma once

#include "core/ir/ir.h"
#include "core/base/status.h"
#include "simulator/hardware.h"

namespace shardscope::sim {

struct RooflineEstimate {
  double time_s = 0;
  double compute_time_s = 0;        // flops / effective peak
  double memory_time_s = 0;         // bytes / effective HBM bandwidth
  bool compute_bound = false;       // compute_time_s >= memory_time_s (and flops > 0)
  double arithmetic_intensity = 0;  // flops / byte (0 when no bytes)
  double ridge_intensity = 0;       // flops / byte where the two limits meet for this device
};

RooflineEstimate ComputeRoofline(double flops, double bytes_accessed, const ChipSpec& chip);
// Seconds on one device of `chip`.
double ComputeCost(double flops, double bytes_accessed, const ChipSpec& chip);

// FLOPs of a dot or convolution (2 per multiply-add):
//   dot: 2 x |result| x product of the lhs contracting dimension sizes;
//   convolution: 2 x |result| x product of kernel spatial sizes x kernel input-feature size
//   (the kernel's input-feature dimension is already per feature group).
// Error for any other opcode.
Result<double> CountFlops(const Instruction& inst);
// Bytes read and written: every array operand once plus the result (tuples: their leaves).
double BytesAccessed(const Instruction& inst);

}  // namespace shardscope::sim
