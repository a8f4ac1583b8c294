#include "core/ir/opcodes.h"

#include <string>
#include <unordered_map>

namespace shardscope {

std::string_view OpcodeName(Opcode op) {
  switch (op) {
#define SHARDSCOPE_OPCODE_CASE(e, s) \
  case Opcode::e:                    \
    return s;
    SHARDSCOPE_OPCODES(SHARDSCOPE_OPCODE_CASE)
#undef SHARDSCOPE_OPCODE_CASE
  }
  return "<generic>";
}

std::optional<Opcode> OpcodeFromName(std::string_view name) {
  static const std::unordered_map<std::string_view, Opcode> table = [] {
    std::unordered_map<std::string_view, Opcode> t;
#define SHARDSCOPE_OPCODE_ENTRY(e, s) t.emplace(s, Opcode::e);
    SHARDSCOPE_OPCODES(SHARDSCOPE_OPCODE_ENTRY)
#undef SHARDSCOPE_OPCODE_ENTRY
    t.erase("<generic>");
    t.emplace("sin", Opcode::kSin);
    t.emplace("cos", Opcode::kCos);
    t.emplace("optimization-barrier", Opcode::kOptimizationBarrier);
    t.emplace("clz", Opcode::kClz);
    return t;
  }();
  auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

bool IsElementwiseUnary(Opcode op) {
  switch (op) {
    case Opcode::kAbs: case Opcode::kCbrt: case Opcode::kCeil: case Opcode::kClz: case Opcode::kCos:
    case Opcode::kErf: case Opcode::kExp: case Opcode::kExpm1: case Opcode::kFloor: case Opcode::kImag:
    case Opcode::kIsFinite: case Opcode::kLog: case Opcode::kLog1p: case Opcode::kLogistic:
    case Opcode::kNegate: case Opcode::kNot: case Opcode::kPopcnt: case Opcode::kReal:
    case Opcode::kRoundNearestAfz: case Opcode::kRoundNearestEven: case Opcode::kRsqrt:
    case Opcode::kSign: case Opcode::kSin: case Opcode::kSqrt: case Opcode::kTan: case Opcode::kTanh:
    case Opcode::kConvert: case Opcode::kBitcastConvert: case Opcode::kReducePrecision: case Opcode::kCopy:
      return true;
    default:
      return false;
  }
}

bool IsElementwiseBinary(Opcode op) {
  switch (op) {
    case Opcode::kAdd: case Opcode::kAnd: case Opcode::kAtan2: case Opcode::kComplex:
    case Opcode::kDivide: case Opcode::kMaximum: case Opcode::kMinimum: case Opcode::kMultiply:
    case Opcode::kOr: case Opcode::kPower: case Opcode::kRemainder: case Opcode::kShiftLeft:
    case Opcode::kShiftRightArithmetic: case Opcode::kShiftRightLogical: case Opcode::kSubtract:
    case Opcode::kXor: case Opcode::kCompare: case Opcode::kStochasticConvert:
      return true;
    default:
      return false;
  }
}

bool IsElementwise(Opcode op) {
  return IsElementwiseUnary(op) || IsElementwiseBinary(op) || op == Opcode::kSelect ||
         op == Opcode::kClamp || op == Opcode::kMap;
}

bool IsCollective(Opcode op) {
  switch (op) {
    case Opcode::kAllGather: case Opcode::kAllGatherStart: case Opcode::kAllGatherDone:
    case Opcode::kAllReduce: case Opcode::kAllReduceStart: case Opcode::kAllReduceDone:
    case Opcode::kReduceScatter: case Opcode::kAllToAll: case Opcode::kCollectivePermute:
    case Opcode::kCollectivePermuteStart: case Opcode::kCollectivePermuteDone:
      return true;
    default:
      return false;
  }
}

}  // namespace shardscope
