// Tuples and control flow: tuple, get-tuple-element, while (loop-carried values keep one sharding),
// conditional, call and the parameters of their computations, outfeed. The cross-computation
// consistency itself (while <-> body root <-> body/condition parameters, ...) is enforced by the
// engine (engine_inference.cpp); these rules move shardings within a computation.
#include <functional>

#include "partitioner/propagation/rules/rules_common.h"

namespace shardscope::prop {
namespace rules {
namespace {

using namespace hlo_sharding_util;

bool TupleForward(Instruction& inst, RuleContext& ctx) {
  bool any = false;
  for (const Instruction* op : inst.operands()) any |= ctx.IsSpatiallyPartitioned(op);
  if (!any) return false;
  const Shape& shape = inst.shape();
  const HloSharding* current = ctx.ShardingOf(&inst);
  std::vector<HloSharding> leaves;
  if (current != nullptr) {
    leaves = ToTupleForm(*current, shape).tuple_elements();
  } else {
    leaves.assign(static_cast<size_t>(LeafCount(shape)), HloSharding::Replicate());
  }
  auto better = [&](const HloSharding& candidate, const HloSharding& existing) {
    return current == nullptr || IsShardingMoreSpecific(candidate, existing);
  };
  size_t index = 0;
  for (const Instruction* op : inst.operands()) {
    const size_t n = static_cast<size_t>(LeafCount(op->shape()));
    const HloSharding* s = ctx.ShardingOf(op);
    if (s != nullptr) {
      if (op->shape().IsTuple()) {
        HloSharding full = ToTupleForm(*s, op->shape());
        for (size_t j = 0; j < n && j < full.tuple_elements().size() && index + j < leaves.size(); ++j) {
          if (better(full.tuple_elements()[j], leaves[index + j])) leaves[index + j] = full.tuple_elements()[j];
        }
      } else if (index < leaves.size()) {
        HloSharding os = *s;
        // An outfeed's own sharding covers its token too; its output sharding is the last element.
        if (op->opcode() == Opcode::kOutfeed && os.IsTuple() && !os.tuple_elements().empty()) {
          os = os.tuple_elements().back();
        }
        if (os.IsTuple() && os.tuple_elements().size() == 1) os = os.tuple_elements()[0];
        if (!os.IsTuple() && better(os, leaves[index])) leaves[index] = os;
      }
    }
    index += n;
  }
  HloSharding next = HloSharding::Tuple(std::move(leaves));
  if (current == nullptr || next != *current) {
    ctx.Set(&inst, std::move(next), nullptr, "tuple");
    return true;
  }
  return false;
}

std::optional<HloSharding> TupleBackward(const Instruction& operand, const Instruction& user, const HloSharding& us,
                                         RuleContext&) {
  const int64_t first = OperandIndex(user, operand);
  if (first < 0) return std::nullopt;
  HloSharding sub = TupleElementSharding(us, user.shape(), first);
  for (int64_t i = first + 1; i < user.operand_count(); ++i) {
    if (user.operand(i) != &operand) continue;
    HloSharding alt = TupleElementSharding(us, user.shape(), i);
    if (IsShardingMoreSpecific(alt, sub)) sub = alt;
  }
  return sub;
}

bool GetTupleElementForward(Instruction& inst, RuleContext& ctx) {
  const Instruction* op = inst.operand(0);
  if (!ctx.IsSpatiallyPartitioned(op)) return false;
  HloSharding s = TupleElementSharding(*ctx.ShardingOf(op), op->shape(), inst.tuple_index);
  if (s.IsManual()) {
    ctx.Set(&inst, std::move(s), op, "get-tuple-element");
    return true;
  }
  return ctx.Improve(&inst, std::move(s), NonRootUsers(inst) == 1, op, "get-tuple-element");
}

std::optional<HloSharding> GetTupleElementBackward(const Instruction& operand, const Instruction& user,
                                                   const HloSharding& us, RuleContext& ctx) {
  const Shape& shape = operand.shape();
  if (!shape.IsTuple() || user.tuple_index < 0 || user.tuple_index >= static_cast<int64_t>(shape.tuple.size())) {
    return std::nullopt;
  }
  int64_t index = 0;
  for (int64_t i = 0; i < user.tuple_index; ++i) index += LeafCount(shape.tuple[static_cast<size_t>(i)]);
  const HloSharding user_full = ToTupleForm(us, user.shape());
  if (user.shape().IsTuple() && user_full.tuple_elements().empty()) return std::nullopt;
  const HloSharding& leaf_template = user.shape().IsTuple() ? user_full.tuple_elements()[0] : us;
  HloSharding base;
  if (const HloSharding* own = ctx.ShardingOf(&operand)) {
    base = ToTupleForm(*own, shape);
  } else {
    std::vector<HloSharding> leaves;
    std::vector<const Shape*> stack = {&shape};
    std::vector<const Shape*> flat;
    // Leaves in order (depth-first).
    std::function<void(const Shape&)> walk = [&](const Shape& s) {
      if (s.IsTuple()) {
        for (const auto& e : s.tuple) walk(e);
      } else {
        flat.push_back(&s);
      }
    };
    walk(shape);
    for (const Shape* leaf : flat) leaves.push_back(ReplicateAllDataDims(leaf_template, leaf->rank()));
    base = HloSharding::Tuple(std::move(leaves));
  }
  auto& leaves = base.mutable_tuple_elements();
  if (user.shape().IsTuple()) {
    const auto& src = user_full.tuple_elements();
    for (size_t i = 0; i < src.size() && static_cast<size_t>(index) + i < leaves.size(); ++i) {
      leaves[static_cast<size_t>(index) + i] = src[i];
    }
  } else if (static_cast<size_t>(index) < leaves.size()) {
    leaves[static_cast<size_t>(index)] = us;
  }
  return base;
}

bool WhileForward(Instruction& inst, RuleContext& ctx) {
  const HloSharding* in = ctx.ShardingOf(inst.operand(0));
  if (in == nullptr) return false;
  HloSharding s = ToTupleForm(*in, inst.shape());
  if (const HloSharding* current = ctx.ShardingOf(&inst)) {
    MergeSharding(ToTupleForm(*current, inst.shape()), &s, ctx.may_combine_partial);
  }
  return ctx.Improve(&inst, std::move(s), false, inst.operand(0), "while");
}

bool ParameterForward(Instruction& inst, RuleContext& ctx) {
  const Instruction* caller = ctx.CallerOf(inst.parent());
  if (caller == nullptr) return false;
  if (caller->opcode() == Opcode::kConditional) {
    const auto& branches = caller->called_computations();
    for (size_t b = 0; b < branches.size(); ++b) {
      if (branches[b] != inst.parent()) continue;
      const int64_t operand_index = static_cast<int64_t>(b) + 1;
      if (operand_index >= caller->operand_count()) return false;
      const Instruction* arg = caller->operand(operand_index);
      const HloSharding* s = ctx.ShardingOf(arg);
      if (s == nullptr) return false;
      return ctx.Improve(&inst, *s, false, arg, "conditional branch parameter");
    }
    return false;
  }
  if (caller->opcode() == Opcode::kCall) {
    if (inst.parameter_number < 0 || inst.parameter_number >= caller->operand_count()) return false;
    const Instruction* arg = caller->operand(inst.parameter_number);
    const HloSharding* s = ctx.ShardingOf(arg);
    if (s == nullptr) return false;
    return ctx.Improve(&inst, *s, false, arg, "call parameter");
  }
  return false;
}

std::optional<HloSharding> OutfeedBackward(const Instruction& operand, const Instruction& user, const HloSharding& us,
                                           RuleContext&) {
  if (user.operand_count() == 0 || &operand != user.operand(0)) return std::nullopt;
  if (!us.IsTuple()) return us;
  std::vector<Shape> shapes;
  for (const Instruction* op : user.operands()) shapes.push_back(op->shape());
  return TupleElementSharding(us, Shape::Tuple(std::move(shapes)), 0);
}

bool NoForward(Instruction&, RuleContext&) { return false; }

}  // namespace
}  // namespace rules

void RegisterControlFlowRules(RuleTable& t) {
  using namespace rules;
  t.Add(Opcode::kTuple, OpRule{"tuple", &TupleForward, &TupleBackward, BackwardInputs::kUser});
  t.Add(Opcode::kGetTupleElement, OpRule{"get-tuple-element", &GetTupleElementForward, &GetTupleElementBackward});
  t.Add(Opcode::kWhile, OpRule{"while", &WhileForward, &DefaultBackward});
  t.Add(Opcode::kConditional, OpRule{"conditional", &NoForward, &DefaultBackward});
  t.Add(Opcode::kCall, OpRule{"call", &NoForward, &DefaultBackward});
  t.Add(Opcode::kParameter, OpRule{"parameter", &ParameterForward, nullptr});
  t.Add(Opcode::kOutfeed, OpRule{"outfeed", &NoForward, &OutfeedBackward, BackwardInputs::kUser});
  t.Add(Opcode::kOptimizationBarrier, OpRule{"opt-barrier", &DefaultForward, &DefaultBackward});
  t.Add(Opcode::kAfterAll, OpRule{"after-all", &NoForward, nullptr});
  t.Add(Opcode::kSend, OpRule{"send", &NoForward, nullptr});
  t.Add(Opcode::kRecv, OpRule{"recv", &NoForward, nullptr});
  t.Add(Opcode::kInfeed, OpRule{"infeed", &NoForward, nullptr});
  t.AddNamed("rng-bit-generator", OpRule{"rng-bit-generator", &DefaultForward, nullptr});
}

}  // namespace shardscope::prop
