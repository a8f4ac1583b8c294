#include "simulator/compute_cost.h"

#include <algorithm>
#include <cmath>
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
  r.time_s = std::max(r.compute_time_s, r.memory_time_s) + std::max(0.0, chip.op_overhead);
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

namespace {
double RoundUp(double v, int64_t granule) {
  if (granule <= 1 || v <= 0) return v;
  const double g = static_cast<double>(granule);
  return std::ceil(v / g) * g;
}
// 2 x batch x rows x contracted x columns with the unit's padding, the cheaper orientation.
double PaddedProduct(double batch, double a, double contracted, double b, const ChipSpec& chip) {
  const double k = RoundUp(contracted, chip.mxu_tile);
  const double one = RoundUp(a, chip.mxu_rows) * RoundUp(b, chip.mxu_tile);
  const double other = RoundUp(b, chip.mxu_rows) * RoundUp(a, chip.mxu_tile);
  return 2.0 * batch * k * std::min(one, other);
}
}  // namespace

Result<double> CountMxuFlops(const Instruction& inst, const ChipSpec& chip) {
  auto exact = CountFlops(inst);
  if (!exact.ok() || (chip.mxu_tile <= 1 && chip.mxu_rows <= 1)) return exact;
  if (inst.opcode() == Opcode::kDot) {
    const Shape& lhs = inst.operand(0)->shape();
    const Shape& rhs = inst.operand(1)->shape();
    const auto& dd = inst.dot_dims;
    auto product_except = [](const Shape& s, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
      double n = 1;
      for (int64_t d = 0; d < s.rank(); ++d) {
        if (std::find(a.begin(), a.end(), d) == a.end() && std::find(b.begin(), b.end(), d) == b.end()) n *= static_cast<double>(s.dim(d));
      }
      return n;
    };
    double batch = 1, contracted = 1;
    for (int64_t d : dd.lhs_batch) batch *= static_cast<double>(lhs.dim(d));
    for (int64_t d : dd.lhs_contracting) contracted *= static_cast<double>(lhs.dim(d));
    const double rows = product_except(lhs, dd.lhs_batch, dd.lhs_contracting);
    const double cols = product_except(rhs, dd.rhs_batch, dd.rhs_contracting);
    return std::max(*exact, PaddedProduct(batch, rows, contracted, cols, chip));
  }
  // Convolution: a product of [batch x output spatial, kernel window x input features] by
  // [kernel window x input features, output features] (the window folds into the contraction, so
  // a 3x3x3 kernel over 32 features contracts 864 values, not 27 padded 32s).
  const Shape& kernel = inst.operand(1)->shape();
  const auto& dn = inst.conv_dims;
  double window = 1;
  for (int64_t d : dn.kernel_spatial) window *= static_cast<double>(kernel.dim(d));
  const double in = static_cast<double>(kernel.dim(dn.kernel_input_feature));
  const double out = dn.kernel_output_feature >= 0 && dn.kernel_output_feature < kernel.rank()
                         ? static_cast<double>(kernel.dim(dn.kernel_output_feature))
                         : 1.0;
  const double positions = out > 0 ? Elements(inst.shape()) / out : 0;
  return std::max(*exact, PaddedProduct(1.0, positions, window * in, out, chip));
}

double BytesAccessed(const Instruction& inst) {
  double bytes = static_cast<double>(inst.shape().ByteSize());
  for (const Instruction* op : inst.operands()) bytes += static_cast<double>(op->shape().ByteSize());
  return bytes;
}

}  // namespace shardscope::sim
