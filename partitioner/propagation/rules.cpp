// Rule table and the op classification shared by the propagation engine and the rules.
#include "partitioner/propagation/rules.h"

#include <algorithm>

#include "partitioner/hlo_sharding_util.h"

namespace shardscope::prop {

std::string_view DirectionName(Direction d) {
  switch (d) {
    case Direction::kAnnotation: return "annotation";
    case Direction::kPreprocess: return "preprocess";
    case Direction::kForward: return "forward";
    case Direction::kBackward: return "backward";
    case Direction::kShardGroup: return "shard-group";
    case Direction::kComputation: return "computation";
    case Direction::kPostProcess: return "post-process";
  }
  return "?";
}

bool RuleContext::IsSpatiallyPartitioned(const Instruction* inst) const {
  const HloSharding* s = ShardingOf(inst);
  return s != nullptr && hlo_sharding_util::IsSpatiallyPartitioned(*s);
}

bool IsGeneric(const Instruction& inst, std::string_view name) {
  return inst.opcode() == Opcode::kGeneric && inst.opcode_text() == name;
}

bool IsElementwiseOp(const Instruction& inst) {
  const Opcode op = inst.opcode();
  if (op == Opcode::kBitcastConvert) {
    if (inst.operand_count() != 1) return false;
    return PrimitiveTypeBytes(inst.shape().type) == PrimitiveTypeBytes(inst.operand(0)->shape().type);
  }
  if (op == Opcode::kMap) {
    if (!inst.dimensions.empty()) {
      if (static_cast<int64_t>(inst.dimensions.size()) != inst.shape().rank()) return false;
      for (size_t i = 0; i < inst.dimensions.size(); ++i) {
        if (inst.dimensions[i] != static_cast<int64_t>(i)) return false;
      }
    }
    return true;
  }
  return IsElementwise(op) || op == Opcode::kRng;
}

bool IsPassthroughCustomCall(const Instruction& inst) {
  if (inst.opcode() != Opcode::kCustomCall) return false;
  const std::string& t = inst.custom_call_target;
  if (t == "Sharding" || t == "X64Combine" || t == "LayoutConstraint") return true;
  if (inst.operand_count() != 1 || !inst.shape().IsArray() || !inst.operand(0)->shape().IsArray() ||
      inst.operand(0)->shape().rank() != inst.shape().rank()) {
    return false;
  }
  return t == "ResizeNearest" || t == "ResizeBilinear" || t == "ResizeNearestGrad" || t == "ResizeBilinearGrad" ||
         t == "Cholesky" || t == "MoveToHost" || t == "MoveToDevice" || t == "PinToDevice" ||
         t == "PinToDeviceSram" || t == "annotate_device_placement";
}

bool IsConversionCustomCall(const Instruction& inst) {
  return IsCustomCall(inst, "SPMDFullToShardShape") || IsCustomCall(inst, "SPMDShardToFullShape");
}

std::vector<int64_t> SortedUnspecifiedDims(const Instruction& inst) {
  std::vector<int64_t> dims = inst.UnspecifiedDims();
  std::sort(dims.begin(), dims.end());
  return dims;
}

bool HasSideEffect(const Instruction& inst) {
  switch (inst.opcode()) {
    case Opcode::kSend: case Opcode::kSendDone: case Opcode::kRecv: case Opcode::kRecvDone:
    case Opcode::kRng: case Opcode::kInfeed: case Opcode::kOutfeed:
    case Opcode::kAllReduceStart: case Opcode::kAllReduceDone: case Opcode::kAllGatherStart:
    case Opcode::kAllGatherDone: case Opcode::kCollectivePermuteStart: case Opcode::kCollectivePermuteDone:
      return true;
    case Opcode::kCustomCall:
      for (const auto& a : inst.raw_attributes) {
        if (a.key == "custom_call_has_side_effect" && a.value == "true") return true;
      }
      return false;
    default:
      return false;
  }
}

int64_t NonRootUsers(const Instruction& inst) {
  int64_t n = static_cast<int64_t>(inst.users().size());
  const Instruction* root = inst.parent() ? inst.parent()->root() : nullptr;
  for (const Instruction* u : inst.users()) {
    if (u == root) --n;
  }
  return n;
}

const Instruction* PickRepresentativeOperand(const Instruction& inst, const RuleContext& ctx) {
  if (inst.operand_count() == 0) return nullptr;
  auto first_if_sharded = [&]() -> const Instruction* {
    return ctx.HasSharding(inst.operand(0)) ? inst.operand(0) : nullptr;
  };
  auto most_specific = [&]() -> const Instruction* {
    const Instruction* best = nullptr;
    for (const Instruction* op : inst.operands()) {
      const HloSharding* s = ctx.ShardingOf(op);
      if (s == nullptr) continue;
      if (best == nullptr || hlo_sharding_util::IsShardingMoreSpecific(*s, *ctx.ShardingOf(best))) best = op;
    }
    return best;
  };
  switch (inst.opcode()) {
    case Opcode::kMap: case Opcode::kPad: case Opcode::kPower: case Opcode::kOptimizationBarrier:
    case Opcode::kReverse: case Opcode::kSlice: case Opcode::kShiftLeft: case Opcode::kShiftRightArithmetic:
    case Opcode::kShiftRightLogical:
      return first_if_sharded();
    case Opcode::kCustomCall:
      return IsPassthroughCustomCall(inst) ? inst.operand(0) : nullptr;
    case Opcode::kGeneric:
      if (inst.opcode_text() == "topk") return most_specific();
      if (inst.opcode_text() == "ragged-all-to-all") return first_if_sharded();
      return nullptr;
    case Opcode::kConcatenate: case Opcode::kAllGather: case Opcode::kAllReduce: case Opcode::kReduceScatter:
    case Opcode::kAllToAll: case Opcode::kCollectivePermute: case Opcode::kSort: case Opcode::kWhile:
      return most_specific();
    default:
      break;
  }
  if (IsElementwise(inst.opcode()) && inst.opcode() != Opcode::kMap) return most_specific();
  return nullptr;
}

namespace {
const RuleTable& Table() {
  static const RuleTable table = [] {
    RuleTable t;
    RegisterElementwiseRules(t);
    RegisterShapeRules(t);
    RegisterDotConvRules(t);
    RegisterReductionRules(t);
    RegisterGatherScatterRules(t);
    RegisterControlFlowRules(t);
    return t;
  }();
  return table;
}
}  // namespace

const OpRule& RuleFor(const Instruction& inst) {
  const RuleTable& t = Table();
  if (inst.opcode() == Opcode::kCustomCall) {
    auto it = t.by_name.find("custom-call:" + inst.custom_call_target);
    if (it != t.by_name.end()) return it->second;
  } else if (inst.opcode() == Opcode::kGeneric) {
    auto it = t.by_name.find(inst.opcode_text());
    if (it != t.by_name.end()) return it->second;
    return t.fallback;
  }
  auto it = t.by_opcode.find(static_cast<int>(inst.opcode()));
  if (it != t.by_opcode.end()) return it->second;
  return t.fallback;
}

}  // namespace shardscope::prop
