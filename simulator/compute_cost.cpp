#include "simulator/compute_cost.h"

#include <algorithm>
#include <string>

namespace shardscope::sim {

RooflineEstimate ComputeRoofline(double flops, double bytes, const ChipSpec& chip) {
  RooflineEstimate r;
  const double peak = chip.device_peak_flops() * chip.flops_efficiency;
  const double bw = chip.device_hbm_bandwidth() * chip.hbm_efficiency;
  flops = std::max(0.0, flops);
  bytes = std::max(0.0, bytes);
  r.compute_time_s = peak > 0 ? flops / peak : 0;
  r.memory_time_s = bw > 0 ? bytes / bw : 0;
  r.time_s = std::max(r.compute_time_s, r.memory_time_s);
  r.compute_bound = flops > 0 && r.compute_time_s >= r.memory_time_s;
  r.arithmetic_intensity = bytes > 0 ? flops / bytes : 0;
  r.ridge_intensity = bw > 0 ? peak / bw : 0;
  return r;
}

double ComputeCost(double flops, double bytes, const ChipSpec& chip) { return ComputeRoofline(flops, bytes, chip).time_s; }

namespace {
double Elements(const Shape& s) {
  double n = 1;
  for (int64_t d : s.dims) n *= static_cast<double>(d);
  return n;
}
}  // namespace

Result<double> CountFlops(const Instruction& inst) {
  if (inst.opcode() == Opcode::kDot) {
    if (inst.operand_count() < 2) return Error("dot " + inst.name() + " needs two operands");
    const Shape& lhs = inst.operand(0)->shape();
    double contracted = 1;
    for (int64_t d : inst.dot_dims.lhs_contracting) {
      if (d < 0 || d >= lhs.rank()) return Error("dot " + inst.name() + ": contracting dimension " + std::to_string(d) + " is out of range");
      contracted *= static_cast<double>(lhs.dim(d));
    }
    return 2.0 * Elements(inst.shape()) * contracted;
  }
  if (inst.opcode() == Opcode::kConvolution) {
    if (inst.operand_count() < 2) return Error("convolution " + inst.name() + " needs two operands");
    const Shape& kernel = inst.operand(1)->shape();
    const auto& dn = inst.conv_dims;
    double per_output = 1;
    for (int64_t d : dn.kernel_spatial) {
      if (d < 0 || d >= kernel.rank()) return Error("convolution " + inst.name() + ": kernel spatial dimension out of range");
      per_output *= static_cast<double>(kernel.dim(d));
    }
    if (dn.kernel_input_feature < 0 || dn.kernel_input_feature >= kernel.rank()) {
      return Error("convolution " + inst.name() + ": kernel input-feature dimension out of range");
    }
    per_output *= static_cast<double>(kernel.dim(dn.kernel_input_feature));
    return 2.0 * Elements(inst.shape()) * per_output;
  }
  return Error("CountFlops handles dot and convolution, not " + std::string(OpcodeName(inst.opcode())));
}

double BytesAccessed(const Instruction& inst) {
  double bytes = static_cast<double>(inst.shape().ByteSize());
  for (const Instruction* op : inst.operands()) bytes += static_cast<double>(op->shape().ByteSize());
  return bytes;
}

}  // namespace shardscope::sim
