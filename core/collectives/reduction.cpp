#include "core/collectives/reduction.h"

#include <cmath>
#include <limits>
#include <string>

namespace shardscope {

std::optional<ReductionKind> MatchReduction(const Computation* c) {
  if (!c || c->parameters().size() != 2 || !c->root()) return std::nullopt;
  const Instruction* r = c->root();
  std::optional<ReductionKind> kind;
  switch (r->opcode()) {
    case Opcode::kAdd: kind = ReductionKind::kSum; break;
    case Opcode::kMultiply: kind = ReductionKind::kProduct; break;
    case Opcode::kMinimum: kind = ReductionKind::kMin; break;
    case Opcode::kMaximum: kind = ReductionKind::kMax; break;
    case Opcode::kAnd: kind = ReductionKind::kAnd; break;
    case Opcode::kOr: kind = ReductionKind::kOr; break;
    case Opcode::kXor: kind = ReductionKind::kXor; break;
    default: return std::nullopt;
  }
  if (r->operand_count() != 2) return std::nullopt;
  const Instruction* a = r->operand(0);
  const Instruction* b = r->operand(1);
  if (a->opcode() != Opcode::kParameter || b->opcode() != Opcode::kParameter) return std::nullopt;
  if (!((a->parameter_number == 0 && b->parameter_number == 1) || (a->parameter_number == 1 && b->parameter_number == 0)))
    return std::nullopt;
  if (!r->shape().IsArray() || r->shape().rank() != 0) return std::nullopt;
  return kind;
}

Opcode ReductionOpcode(ReductionKind kind) {
  switch (kind) {
    case ReductionKind::kSum: return Opcode::kAdd;
    case ReductionKind::kProduct: return Opcode::kMultiply;
    case ReductionKind::kMin: return Opcode::kMinimum;
    case ReductionKind::kMax: return Opcode::kMaximum;
    case ReductionKind::kAnd: return Opcode::kAnd;
    case ReductionKind::kOr: return Opcode::kOr;
    case ReductionKind::kXor: return Opcode::kXor;
  }
  return Opcode::kAdd;
}

std::string_view ReductionKindName(ReductionKind kind) {
  switch (kind) {
    case ReductionKind::kSum: return "sum";
    case ReductionKind::kProduct: return "product";
    case ReductionKind::kMin: return "min";
    case ReductionKind::kMax: return "max";
    case ReductionKind::kAnd: return "and";
    case ReductionKind::kOr: return "or";
    case ReductionKind::kXor: return "xor";
  }
  return "sum";
}

namespace {

Literal Scalar(std::string text, double value) {
  Literal l;
  l.text = std::move(text);
  l.values = {value};
  return l;
}

bool HasInfinity(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::kF8E5M2: case PrimitiveType::kF8E4M3: case PrimitiveType::kF8E3M4:
    case PrimitiveType::kF16: case PrimitiveType::kBF16: case PrimitiveType::kF32: case PrimitiveType::kF64:
      return true;
    default:
      return false;
  }
}

// The type's lowest (want_max = false) or highest value as exact text and as a double.
std::optional<Literal> Extreme(PrimitiveType t, bool highest) {
  if (t == PrimitiveType::kPred) return highest ? Scalar("true", 1) : Scalar("false", 0);
  if (IsFloatingPoint(t)) {
    if (!HasInfinity(t)) return std::nullopt;
    const double inf = std::numeric_limits<double>::infinity();
    return highest ? Scalar("inf", inf) : Scalar("-inf", -inf);
  }
  if (!IsInteger(t)) return std::nullopt;
  const int width = static_cast<int>(PrimitiveTypeBitWidth(t));
  if (IsUnsignedInteger(t)) {
    if (!highest) return Scalar("0", 0);
    const uint64_t v = width == 64 ? std::numeric_limits<uint64_t>::max() : (uint64_t{1} << width) - 1;
    return Scalar(std::to_string(v), static_cast<double>(v));
  }
  const int64_t hi = width == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (width - 1)) - 1;
  const int64_t lo = width == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (width - 1));
  return highest ? Scalar(std::to_string(hi), static_cast<double>(hi)) : Scalar(std::to_string(lo), static_cast<double>(lo));
}

}  // namespace

std::optional<Literal> ReductionIdentity(ReductionKind kind, PrimitiveType t) {
  const bool numeric = t == PrimitiveType::kPred || IsInteger(t) || IsFloatingPoint(t);
  if (!numeric) return std::nullopt;
  const bool pred = t == PrimitiveType::kPred;
  switch (kind) {
    case ReductionKind::kSum:
      if (pred) return std::nullopt;
      return Scalar("0", 0);
    case ReductionKind::kProduct:
      if (pred) return std::nullopt;
      return Scalar("1", 1);
    case ReductionKind::kOr:
    case ReductionKind::kXor:
      if (IsFloatingPoint(t)) return std::nullopt;
      return pred ? Scalar("false", 0) : Scalar("0", 0);
    case ReductionKind::kAnd:
      if (IsFloatingPoint(t)) return std::nullopt;
      if (pred) return Scalar("true", 1);
      // All bits set: -1 for signed types, the highest value for unsigned ones.
      if (IsUnsignedInteger(t)) return Extreme(t, /*highest=*/true);
      return Scalar("-1", -1);
    case ReductionKind::kMax: return Extreme(t, /*highest=*/false);
    case ReductionKind::kMin: return Extreme(t, /*highest=*/true);
  }
  return std::nullopt;
}

}  // namespace shardscope
