// Dot (batch, contracting and non-contracting dims; the result merges the shardings implied by both
// operands, GSPMD Fig. 3) and convolution (batch, feature and spatial dims; convolutions that are
// dots in disguise follow the dot rule).
#include "partitioner/propagation/rules/rules_common.h"

namespace shardscope::prop {
namespace rules {
namespace {

using namespace hlo_sharding_util;

// Shared by dot and dot-like convolutions: each operand implies an output sharding; when both do,
// the one whose sharding the (single-user chain) consumer wants wins, else the larger operand, and
// the other is merged in when compatible.
bool DotLikeForward(Instruction& inst, const DotDims& dims, RuleContext& ctx, std::string_view rule) {
  const HloSharding* current = ctx.ShardingOf(&inst);
  std::optional<HloSharding> from[2];
  for (int i = 0; i < 2; ++i) {
    const Instruction* op = inst.operand(i);
    if (!ctx.IsSpatiallyPartitioned(op)) continue;
    from[i] = ReturnImprovedSharding(ctx.OutputShardingFromDotOperand(inst, i), current, inst.shape(),
                                     ctx.may_combine_partial, false);
  }
  if (!from[0] && !from[1]) return false;
  if (from[0] && !from[1]) {
    ctx.Set(&inst, *from[0], inst.operand(0), rule);
    return true;
  }
  if (!from[0] && from[1]) {
    ctx.Set(&inst, *from[1], inst.operand(1), rule);
    return true;
  }
  int primary = 0;
  bool decided = false;
  if (auto lookahead = ctx.LookaheadUserSharding(&inst)) {
    const bool sub0 = IsSubTilingOrEqualSharding(inst.shape(), *lookahead, *from[0]);
    const bool sub1 = IsSubTilingOrEqualSharding(inst.shape(), *lookahead, *from[1]);
    if (sub0 && !sub1) decided = true;
    if (!sub0 && sub1) {
      primary = 1;
      decided = true;
    }
  }
  if (!decided && inst.operand(0)->shape().ByteSize() < inst.operand(1)->shape().ByteSize()) primary = 1;
  ctx.Set(&inst, *from[primary], inst.operand(primary), rule);
  if (ctx.Improve(&inst, *from[1 - primary], false, inst.operand(primary), rule)) {
    ctx.NoteSecondSource(&inst, inst.operand(1 - primary));
  }
  return true;
}

bool DotForward(Instruction& inst, RuleContext& ctx) {
  return DotLikeForward(inst, ctx.DotDimsOf(inst), ctx, "dot");
}

std::optional<HloSharding> DotBackward(const Instruction& operand, const Instruction& user, const HloSharding& us,
                                       RuleContext& ctx) {
  const int64_t idx = OperandIndex(user, operand);
  if (idx < 0 || idx > 1) return std::nullopt;
  const DotDims& dims = ctx.DotDimsOf(user);
  if (!dims.conv_spatial.empty()) return std::nullopt;
  return ctx.dot_memo->InferOperand(&us, ctx.ShardingOf(user.operand(1 - idx)), static_cast<int>(idx), dims,
                                    ctx.may_combine_partial);
}

// A convolution kernel is small when it is smaller than the output along every spatial dim: then
// the output follows the input's (spatial) sharding.
bool IsConvolutionKernelSmall(const Instruction& conv) {
  const auto& cd = conv.conv_dims;
  const Shape& rhs = conv.operand(1)->shape();
  int64_t kernel_prod = 1, output_prod = 1;
  for (size_t i = 0; i < cd.input_spatial.size() && i < cd.kernel_spatial.size() && i < cd.output_spatial.size();
       ++i) {
    const int64_t k = rhs.dim(cd.kernel_spatial[i]);
    const int64_t o = conv.shape().dim(cd.output_spatial[i]);
    kernel_prod *= k;
    output_prod *= o;
    if (k >= o && (i < 2 || k > 3 || kernel_prod >= output_prod)) return false;
  }
  return true;
}

bool ConvolutionForward(Instruction& inst, RuleContext& ctx) {
  const DotDims& dims = ctx.DotDimsOf(inst);
  auto partitions = [&](const Instruction* op, bool lhs) {
    const HloSharding* s = ctx.ShardingOf(op);
    int64_t p = 1;
    if (s == nullptr || !s->IsTiled()) return p;
    for (const auto& d : dims.conv_spatial) p *= s->DimensionTiles(lhs ? d.lhs : d.rhs);
    return p;
  };
  if (dims.conv_spatial.empty() || (partitions(inst.operand(0), true) == 1 && partitions(inst.operand(1), false) == 1 &&
                                    inst.batch_group_count == 1 && inst.feature_group_count == 1)) {
    return DotLikeForward(inst, dims, ctx, "convolution (as dot)");
  }
  const Instruction* lhs = inst.operand(0);
  if (!ctx.IsSpatiallyPartitioned(lhs)) return false;
  const HloSharding& ls = *ctx.ShardingOf(lhs);
  if (hlo_sharding_util::IsTileMaximal(ls)) return ctx.Improve(&inst, ls, false, lhs, "convolution");
  const auto& cd = inst.conv_dims;
  if (IsConvolutionKernelSmall(inst)) {
    if (ls.DimensionTiles(cd.input_feature) > 1) return false;
    std::vector<int64_t> out_to_lhs(static_cast<size_t>(inst.shape().rank()), 0);
    out_to_lhs[static_cast<size_t>(cd.output_batch)] = cd.input_batch;
    out_to_lhs[static_cast<size_t>(cd.output_feature)] = cd.input_feature;
    for (size_t i = 0; i < cd.input_spatial.size() && i < cd.output_spatial.size(); ++i) {
      out_to_lhs[static_cast<size_t>(cd.output_spatial[i])] = cd.input_spatial[i];
    }
    return ctx.Improve(&inst, TransposeSharding(ls, out_to_lhs), false, lhs, "convolution (spatial)");
  }
  return ctx.Improve(&inst, PartiallyReplicateTiledShardingOnAllDimsExcept(ls, {cd.input_batch}), false, lhs,
                     "convolution (batch)");
}

}  // namespace
}  // namespace rules

void RegisterDotConvRules(RuleTable& t) {
  using namespace rules;
  t.Add(Opcode::kDot, OpRule{"dot", &DotForward, &DotBackward, BackwardInputs::kUserAndOtherOperand});
  t.Add(Opcode::kConvolution, OpRule{"convolution", &ConvolutionForward, &DotBackward, BackwardInputs::kUserAndOtherOperand});
}

}  // namespace shardscope::prop
