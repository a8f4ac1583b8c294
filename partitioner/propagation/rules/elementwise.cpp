// Elementwise ops (incl. select, clamp, convert, copy, map, rng), pass-through custom-calls and the
// collectives: the result keeps the operands' sharding; operands of the same shape take the user's.
// GSPMD §3.5: elementwise ops propagate first, in both directions.
#include "partitioner/propagation/rules/rules_common.h"

namespace shardscope::prop {
namespace rules {

int64_t OperandIndex(const Instruction& user, const Instruction& operand) {
  for (int64_t i = 0; i < user.operand_count(); ++i) {
    if (user.operand(i) == &operand) return i;
  }
  return -1;
}

HloSharding MaybeTuple(const Instruction& inst, const HloSharding& s) {
  return hlo_sharding_util::ToTupleForm(s, inst.shape());
}

bool DefaultForward(Instruction& inst, RuleContext& ctx) {
  const bool elementwise =
      IsElementwiseOp(inst) || (ctx.replace_sharding_with_copy && IsCustomCall(inst, "Sharding"));
  if (elementwise && ctx.may_combine_partial) {
    bool changed = false;
    for (const Instruction* op : inst.operands()) {
      if (!ctx.IsSpatiallyPartitioned(op)) continue;
      const HloSharding& s = *ctx.ShardingOf(op);
      if (inst.opcode() == Opcode::kRng) {
        changed |= ctx.Improve(&inst, hlo_sharding_util::ReplicateAllDataDims(s, inst.shape().rank()),
                               NonRootUsers(inst) == 1, op, "rng");
        continue;
      }
      changed |= ctx.Improve(&inst, s, inst.operand_count() == 1 && NonRootUsers(inst) == 1, op, "elementwise");
    }
    return changed;
  }
  const Instruction* op = PickRepresentativeOperand(inst, ctx);
  if (op == nullptr || !ctx.IsSpatiallyPartitioned(op)) return false;
  return ctx.Improve(&inst, *ctx.ShardingOf(op), NonRootUsers(inst) == 1, op,
                     elementwise ? std::string_view("elementwise") : RuleFor(inst).family);
}

std::optional<HloSharding> DefaultBackward(const Instruction& operand, const Instruction& user,
                                           const HloSharding& user_sharding, RuleContext&) {
  if (CompatibleIgnoringElementType(operand.shape(), user.shape())) return user_sharding;
  return std::nullopt;
}

namespace {

bool CustomCallForward(Instruction& inst, RuleContext& ctx) {
  if (ctx.replace_sharding_with_copy && IsCustomCall(inst, "Sharding")) return DefaultForward(inst, ctx);
  // Shard barriers: nothing flows forward through ShardBarrierFrom; ShardBarrierTo takes its
  // operand's sharding as is.
  if (IsCustomCall(inst, "ShardBarrierFrom")) return false;
  if (IsCustomCall(inst, "ShardBarrierTo")) {
    if (inst.operand_count() != 1 || !ctx.HasSharding(inst.operand(0))) return false;
    return ctx.Improve(&inst, *ctx.ShardingOf(inst.operand(0)), NonRootUsers(inst) == 1, inst.operand(0),
                       "shard barrier");
  }
  const Instruction* op = PickRepresentativeOperand(inst, ctx);
  if (op == nullptr || !ctx.IsSpatiallyPartitioned(op)) return false;
  return ctx.Improve(&inst, *ctx.ShardingOf(op), NonRootUsers(inst) == 1, op, "custom-call");
}

std::optional<HloSharding> CustomCallBackward(const Instruction& operand, const Instruction& user,
                                              const HloSharding& user_sharding, RuleContext&) {
  if (!CompatibleIgnoringElementType(operand.shape(), user.shape())) return std::nullopt;
  return user_sharding;
}

}  // namespace
}  // namespace rules

void RegisterElementwiseRules(RuleTable& t) {
  using namespace rules;
  t.fallback = OpRule{"elementwise", &DefaultForward, &DefaultBackward};
  const OpRule elementwise{"elementwise", &DefaultForward, &DefaultBackward};
  for (Opcode op : {Opcode::kAbs, Opcode::kAdd, Opcode::kAnd, Opcode::kAtan2, Opcode::kBitcastConvert, Opcode::kCbrt,
                    Opcode::kCeil, Opcode::kClz, Opcode::kCompare, Opcode::kComplex, Opcode::kConvert, Opcode::kCos,
                    Opcode::kDivide, Opcode::kErf, Opcode::kExp, Opcode::kExpm1, Opcode::kFloor, Opcode::kImag,
                    Opcode::kIsFinite, Opcode::kLog, Opcode::kLog1p, Opcode::kLogistic, Opcode::kMaximum,
                    Opcode::kMinimum, Opcode::kMultiply, Opcode::kNegate, Opcode::kNot, Opcode::kOr, Opcode::kPopcnt,
                    Opcode::kPower, Opcode::kReal, Opcode::kReducePrecision, Opcode::kRemainder,
                    Opcode::kRoundNearestAfz, Opcode::kRoundNearestEven, Opcode::kRsqrt, Opcode::kShiftLeft,
                    Opcode::kShiftRightArithmetic, Opcode::kShiftRightLogical, Opcode::kSign, Opcode::kSin,
                    Opcode::kSqrt, Opcode::kSubtract, Opcode::kTan, Opcode::kTanh, Opcode::kXor,
                    Opcode::kStochasticConvert, Opcode::kMap, Opcode::kRng}) {
    t.Add(op, elementwise);
  }
  t.Add(Opcode::kSelect, OpRule{"select", &DefaultForward, &DefaultBackward});
  t.Add(Opcode::kClamp, OpRule{"clamp", &DefaultForward, &DefaultBackward});
  t.Add(Opcode::kCopy, OpRule{"copy", &DefaultForward, &DefaultBackward});
  t.Add(Opcode::kCustomCall, OpRule{"custom-call", &CustomCallForward, &CustomCallBackward, BackwardInputs::kUser});
  t.AddNamed("custom-call:Sharding", OpRule{"sharding-annotation", &CustomCallForward, &CustomCallBackward, BackwardInputs::kUser});
  const OpRule collective{"collective", &DefaultForward, &DefaultBackward};
  for (Opcode op : {Opcode::kAllReduce, Opcode::kAllGather, Opcode::kReduceScatter, Opcode::kAllToAll,
                    Opcode::kCollectivePermute}) {
    t.Add(op, collective);
  }
  // Generic ops the IR does not model: no rule from operands, same-shape users inform operands.
  t.AddNamed("topk", OpRule{"topk", &DefaultForward, &DefaultBackward});
}

}  // namespace shardscope::prop
