#include "core/eval/evaluator.h"

#include "core/collectives/reduction.h"

#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

#include "core/eval/virtual_cluster.h"

namespace shardscope {

std::string DescribeInstruction(const Instruction& inst) {
  std::string s = "%" + inst.name() + " (" + inst.opcode_text() + ")";
  if (inst.parent()) s += " in computation " + inst.parent()->name();
  return s;
}

namespace {

using Storage = Tensor::Storage;

Error OpError(const Instruction& inst, const std::string& msg) {
  return Error("evaluator: " + DescribeInstruction(inst) + ": " + msg);
}

std::string DimsStr(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// Fills every element of `dst` with element `si` of `src`.
void FillWith(Tensor& dst, const Tensor& src, int64_t si) {
  for (int64_t i = 0; i < dst.size(); ++i) CopyElem(dst, i, src, si);
}

bool IsArrayOf(const Tensor* t) { return t && t->IsArray() && t->storage() != Storage::kNone; }

// ---- Literal text ---------------------------------------------------------------------------------

Result<std::vector<double>> ParseLiteralNumbers(std::string_view text) {
  std::vector<double> out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '{' || c == '}' || c == '(' || c == ')' || c == ',' || c == ' ' || c == '\n' || c == '\t' ||
        c == '\r') {
      ++i;
      continue;
    }
    // A shape prefix inside tuple literals: "f32[2] {...}".
    if (std::isalpha(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      std::string_view word = text.substr(i, j - i);
      if (j < text.size() && text[j] == '[') {
        size_t consumed = 0;
        auto shape = ParseShape(text.substr(i), &consumed);
        if (!shape.ok() || consumed == 0) return Error("cannot read literal near '" + std::string(word) + "'");
        i += consumed;
        continue;
      }
      if (word == "true") { out.push_back(1); i = j; continue; }
      if (word == "false") { out.push_back(0); i = j; continue; }
      if (word == "inf") { out.push_back(std::numeric_limits<double>::infinity()); i = j; continue; }
      if (word == "nan") { out.push_back(std::numeric_limits<double>::quiet_NaN()); i = j; continue; }
      return Error("cannot read literal value '" + std::string(word) + "'");
    }
    size_t j = i;
    while (j < text.size() && text[j] != ',' && text[j] != '}' && text[j] != ')' && text[j] != ' ' &&
           text[j] != '\n' && text[j] != '\t' && text[j] != '{' && text[j] != '(')
      ++j;
    std::string tok(text.substr(i, j - i));
    if (tok == "...") return Error("the constant's value is elided ('...') in the text");
    if (tok == "-inf") { out.push_back(-std::numeric_limits<double>::infinity()); i = j; continue; }
    if (tok == "-nan" || tok == "+nan") { out.push_back(std::numeric_limits<double>::quiet_NaN()); i = j; continue; }
    if (tok == "+inf") { out.push_back(std::numeric_limits<double>::infinity()); i = j; continue; }
    char* end = nullptr;
    double v = std::strtod(tok.c_str(), &end);
    if (end == tok.c_str() || *end != '\0') {
      // Integers beyond 2^53 etc.: try an integer read.
      return Error("cannot read literal value '" + tok + "'");
    }
    out.push_back(v);
    i = j;
  }
  return out;
}

Status FillLeaves(Tensor& t, const std::vector<double>& vals, size_t& pos) {
  if (t.IsTuple()) {
    for (Tensor& e : t.mutable_elements()) {
      Status s = FillLeaves(e, vals, pos);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
  if (!t.IsArray()) return Status::Ok();
  if (pos + static_cast<size_t>(t.size()) > vals.size()) return Error("too few values in the literal");
  for (int64_t i = 0; i < t.size(); ++i) t.SetDouble(i, vals[pos++]);
  return Status::Ok();
}

// ---- Scalar arithmetic ------------------------------------------------------------------------------

inline double FMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}
inline double FMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}

// Binary op on floats (doubles). `ok` false when the op is not defined for floats.
inline double FloatBinary(Opcode op, double a, double b, bool& ok) {
  switch (op) {
    case Opcode::kAdd: return a + b;
    case Opcode::kSubtract: return a - b;
    case Opcode::kMultiply: return a * b;
    case Opcode::kDivide: return a / b;
    case Opcode::kMaximum: return FMax(a, b);
    case Opcode::kMinimum: return FMin(a, b);
    case Opcode::kPower: return std::pow(a, b);
    case Opcode::kAtan2: return std::atan2(a, b);
    case Opcode::kRemainder: return std::fmod(a, b);
    default: ok = false; return 0;
  }
}

inline int64_t SignExtend(int64_t v, int bits) {
  if (bits >= 64) return v;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  const uint64_t sign = uint64_t{1} << (bits - 1);
  return static_cast<int64_t>(((static_cast<uint64_t>(v) & mask) ^ sign)) - static_cast<int64_t>(sign);
}

inline int64_t IntBinary(Opcode op, PrimitiveType t, int64_t a, int64_t b, bool& ok) {
  const int bits = BitWidth(t);
  const bool uns = IsUnsignedInteger(t) || t == PrimitiveType::kPred;
  const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
  int64_t r = 0;
  switch (op) {
    case Opcode::kAdd: r = static_cast<int64_t>(ua + ub); break;
    case Opcode::kSubtract: r = static_cast<int64_t>(ua - ub); break;
    case Opcode::kMultiply: r = static_cast<int64_t>(ua * ub); break;
    case Opcode::kDivide:
      if (b == 0) {
        r = -1;
      } else if (uns) {
        r = static_cast<int64_t>(ua / ub);
      } else if (b == -1) {
        r = static_cast<int64_t>(uint64_t{0} - ua);  // min / -1 wraps to min
      } else {
        r = a / b;
      }
      break;
    case Opcode::kRemainder:
      if (b == 0) {
        r = a;
      } else if (uns) {
        r = static_cast<int64_t>(ua % ub);
      } else if (b == -1) {
        r = 0;
      } else {
        r = a % b;
      }
      break;
    case Opcode::kMaximum: r = uns ? static_cast<int64_t>(std::max(ua, ub)) : std::max(a, b); break;
    case Opcode::kMinimum: r = uns ? static_cast<int64_t>(std::min(ua, ub)) : std::min(a, b); break;
    case Opcode::kAnd: r = a & b; break;
    case Opcode::kOr: r = a | b; break;
    case Opcode::kXor: r = a ^ b; break;
    case Opcode::kShiftLeft: r = ub >= static_cast<uint64_t>(bits) ? 0 : static_cast<int64_t>(ua << ub); break;
    case Opcode::kShiftRightLogical:
      r = ub >= static_cast<uint64_t>(bits) ? 0 : static_cast<int64_t>((ua & mask) >> ub);
      break;
    case Opcode::kShiftRightArithmetic: {
      const int64_t sa = SignExtend(a, bits);
      r = ub >= static_cast<uint64_t>(bits) ? (sa < 0 ? -1 : 0) : (sa >> ub);
      break;
    }
    case Opcode::kPower: {
      if (!uns && b < 0) {
        r = a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
        break;
      }
      uint64_t base = ua, e = ub, acc = 1;
      while (e) {
        if (e & 1) acc *= base;
        base *= base;
        e >>= 1;
      }
      r = static_cast<int64_t>(acc);
      break;
    }
    default: ok = false; return 0;
  }
  return WrapToIntType(t, r);
}

inline int64_t IntUnary(Opcode op, PrimitiveType t, int64_t x, bool& ok) {
  const int bits = BitWidth(t);
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
  const bool uns = IsUnsignedInteger(t) || t == PrimitiveType::kPred;
  int64_t r = 0;
  switch (op) {
    case Opcode::kAbs: r = (!uns && x < 0) ? static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(x)) : x; break;
    case Opcode::kNegate: r = static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(x)); break;
    case Opcode::kNot: r = t == PrimitiveType::kPred ? (x ? 0 : 1) : ~x; break;
    case Opcode::kPopcnt: r = std::popcount(static_cast<uint64_t>(x) & mask); break;
    case Opcode::kClz: r = bits - static_cast<int64_t>(std::bit_width(static_cast<uint64_t>(x) & mask)); break;
    case Opcode::kSign: r = uns ? (x != 0) : (x > 0 ? 1 : (x < 0 ? -1 : 0)); break;
    case Opcode::kCopy: r = x; break;
    default: ok = false; return 0;
  }
  return WrapToIntType(t, r);
}

inline double FloatUnary(Opcode op, double x, bool& ok) {
  switch (op) {
    case Opcode::kAbs: return std::fabs(x);
    case Opcode::kCbrt: return std::cbrt(x);
    case Opcode::kCeil: return std::ceil(x);
    case Opcode::kCos: return std::cos(x);
    case Opcode::kErf: return std::erf(x);
    case Opcode::kExp: return std::exp(x);
    case Opcode::kExpm1: return std::expm1(x);
    case Opcode::kFloor: return std::floor(x);
    case Opcode::kLog: return std::log(x);
    case Opcode::kLog1p: return std::log1p(x);
    case Opcode::kLogistic: return 1.0 / (1.0 + std::exp(-x));
    case Opcode::kNegate: return -x;
    case Opcode::kRoundNearestAfz: return std::round(x);
    case Opcode::kRoundNearestEven: return std::nearbyint(x);
    case Opcode::kRsqrt: return 1.0 / std::sqrt(x);
    case Opcode::kSign: return x > 0 ? 1.0 : (x < 0 ? -1.0 : x);
    case Opcode::kSin: return std::sin(x);
    case Opcode::kSqrt: return std::sqrt(x);
    case Opcode::kTan: return std::tan(x);
    case Opcode::kTanh: return std::tanh(x);
    case Opcode::kCopy: return x;
    default: ok = false; return 0;
  }
}

inline uint32_t FloatOrderKey32(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

inline bool CompareDoubles(ComparisonDirection dir, double a, double b, bool total_order) {
  if (total_order) {
    const uint32_t ka = FloatOrderKey32(static_cast<float>(a)), kb = FloatOrderKey32(static_cast<float>(b));
    switch (dir) {
      case ComparisonDirection::kEq: return ka == kb;
      case ComparisonDirection::kNe: return ka != kb;
      case ComparisonDirection::kLt: return ka < kb;
      case ComparisonDirection::kLe: return ka <= kb;
      case ComparisonDirection::kGt: return ka > kb;
      case ComparisonDirection::kGe: return ka >= kb;
    }
  }
  switch (dir) {
    case ComparisonDirection::kEq: return a == b;
    case ComparisonDirection::kNe: return a != b;
    case ComparisonDirection::kLt: return a < b;
    case ComparisonDirection::kLe: return a <= b;
    case ComparisonDirection::kGt: return a > b;
    case ComparisonDirection::kGe: return a >= b;
  }
  return false;
}

template <typename T>
inline bool CompareOrdered(ComparisonDirection dir, T a, T b) {
  switch (dir) {
    case ComparisonDirection::kEq: return a == b;
    case ComparisonDirection::kNe: return a != b;
    case ComparisonDirection::kLt: return a < b;
    case ComparisonDirection::kLe: return a <= b;
    case ComparisonDirection::kGt: return a > b;
    case ComparisonDirection::kGe: return a >= b;
  }
  return false;
}

// Compares element `i` of `a` with element `j` of `b` (same type).
inline bool CompareElems(ComparisonDirection dir, const Tensor& a, int64_t i, const Tensor& b, int64_t j,
                         bool total_order) {
  if (a.storage() == Storage::kInt) {
    const int64_t x = a.ints()[static_cast<size_t>(i)], y = b.ints()[static_cast<size_t>(j)];
    if (IsUnsignedInteger(a.type()) || a.type() == PrimitiveType::kPred)
      return CompareOrdered(dir, static_cast<uint64_t>(x), static_cast<uint64_t>(y));
    return CompareOrdered(dir, x, y);
  }
  return CompareDoubles(dir, a.GetDouble(i), b.GetDouble(j), total_order);
}

// ---- Bit casts ------------------------------------------------------------------------------------

uint64_t ToBits(const Tensor& t, int64_t i) {
  switch (t.type()) {
    case PrimitiveType::kF32: return std::bit_cast<uint32_t>(t.floats()[static_cast<size_t>(i)]);
    case PrimitiveType::kF64: return std::bit_cast<uint64_t>(t.doubles()[static_cast<size_t>(i)]);
    case PrimitiveType::kBF16: return std::bit_cast<uint32_t>(t.floats()[static_cast<size_t>(i)]) >> 16;
    case PrimitiveType::kF16: return Eigen::numext::bit_cast<uint16_t>(Eigen::half(t.floats()[static_cast<size_t>(i)]));
    default: {
      const int bits = BitWidth(t.type());
      const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
      return static_cast<uint64_t>(t.GetInt(i)) & mask;
    }
  }
}

void FromBits(Tensor& t, int64_t i, uint64_t bits) {
  switch (t.type()) {
    case PrimitiveType::kF32: t.floats()[static_cast<size_t>(i)] = std::bit_cast<float>(static_cast<uint32_t>(bits)); break;
    case PrimitiveType::kF64: t.doubles()[static_cast<size_t>(i)] = std::bit_cast<double>(bits); break;
    case PrimitiveType::kBF16: t.floats()[static_cast<size_t>(i)] = std::bit_cast<float>(static_cast<uint32_t>(bits << 16)); break;
    case PrimitiveType::kF16:
      t.floats()[static_cast<size_t>(i)] =
          static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<uint16_t>(bits)));
      break;
    default: t.SetInt(i, static_cast<int64_t>(bits)); break;
  }
}

bool BitcastableType(PrimitiveType t) {
  return t == PrimitiveType::kF32 || t == PrimitiveType::kF64 || t == PrimitiveType::kBF16 ||
         t == PrimitiveType::kF16 || IsInteger(t) || t == PrimitiveType::kPred;
}

// ---- Recognising simple reducer computations ----------------------------------------------------------

// When `c` is `p0 OP p1` (or p1 OP p0) for a reduction OP (core/collectives/reduction.h), returns OP.
std::optional<Opcode> SimpleBinaryReducer(const Computation* c) {
  const std::optional<ReductionKind> kind = MatchReduction(c);
  if (!kind) return std::nullopt;
  return ReductionOpcode(*kind);
}

// Whether `c` returns its second parameter (scatter's "overwrite").
bool ReturnsSecondParameter(const Computation* c) {
  return c && c->parameters().size() == 2 && c->root() && c->root()->opcode() == Opcode::kParameter &&
         c->root()->parameter_number == 1;
}

// Applies a simple reducer op to a float accumulator / int accumulator.
inline double ApplyFloatReducer(Opcode op, double a, double b) {
  bool ok = true;
  return FloatBinary(op, a, b, ok);
}

// Flattens a computation result into its leaves (a non-tuple result is one leaf).
std::vector<Tensor> Leaves(Tensor t) {
  if (!t.IsTuple()) return {std::move(t)};
  return std::move(t.mutable_elements());
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// Builds a double buffer holding `t` transposed by `perm` (result dim i = t dim perm[i]).
std::vector<double> TransposedDoubles(const Tensor& t, const std::vector<int64_t>& perm) {
  const int64_t r = t.rank();
  std::vector<int64_t> out_dims(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) out_dims[static_cast<size_t>(i)] = t.dim(perm[static_cast<size_t>(i)]);
  const auto in_strides = RowMajorStrides(t.dims());
  std::vector<int64_t> stride_for_out(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) stride_for_out[static_cast<size_t>(i)] = in_strides[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  std::vector<double> out(static_cast<size_t>(t.size()));
  if (t.size() == 0) return out;
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t n = 0;
  do {
    int64_t src = 0;
    for (int64_t d = 0; d < r; ++d) src += idx[static_cast<size_t>(d)] * stride_for_out[static_cast<size_t>(d)];
    out[static_cast<size_t>(n++)] = t.GetDouble(src);
  } while (NextIndex(idx, out_dims));
  return out;
}

std::vector<int64_t> TransposedInts(const Tensor& t, const std::vector<int64_t>& perm) {
  const int64_t r = t.rank();
  std::vector<int64_t> out_dims(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) out_dims[static_cast<size_t>(i)] = t.dim(perm[static_cast<size_t>(i)]);
  const auto in_strides = RowMajorStrides(t.dims());
  std::vector<int64_t> out(static_cast<size_t>(t.size()));
  if (t.size() == 0) return out;
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t n = 0;
  do {
    int64_t src = 0;
    for (int64_t d = 0; d < r; ++d)
      src += idx[static_cast<size_t>(d)] * in_strides[static_cast<size_t>(perm[static_cast<size_t>(d)])];
    out[static_cast<size_t>(n++)] = t.GetInt(src);
  } while (NextIndex(idx, out_dims));
  return out;
}

bool ValidDimList(const std::vector<int64_t>& dims, int64_t rank, bool unique = true) {
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(rank, 0)), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) return false;
    if (unique && seen[static_cast<size_t>(d)]) return false;
    seen[static_cast<size_t>(d)] = true;
  }
  return true;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Window position -> input position (or -1 when it falls on padding or a dilation hole).
inline int64_t WindowInputPos(const WindowDimension& w, int64_t out_pos, int64_t k, int64_t in_size) {
  const int64_t pos = out_pos * w.stride + k * w.window_dilation - w.padding_low;
  if (pos < 0) return -1;
  const int64_t bd = w.base_dilation < 1 ? 1 : w.base_dilation;
  if (pos % bd != 0) return -1;
  const int64_t p = pos / bd;
  return p < in_size ? p : -1;
}

}  // namespace

// ---- Evaluator ----------------------------------------------------------------------------------------

Evaluator::Evaluator(EvalOptions options) : options_(options), rng_(options.rng_seed), probe_rng_(options.probe_seed) {}

Status CheckArguments(const Computation& c, const std::vector<Tensor>& args) {
  if (args.size() != c.parameters().size())
    return Error("evaluator: computation " + c.name() + " takes " + std::to_string(c.parameters().size()) +
                 " parameter(s), " + std::to_string(args.size()) + " argument(s) given");
  for (size_t i = 0; i < args.size(); ++i) {
    const Instruction* p = c.parameters()[i];
    if (!p) return Error("evaluator: computation " + c.name() + " has no parameter " + std::to_string(i));
    if (!p->shape().Compatible(args[i].shape()))
      return Error("evaluator: parameter " + std::to_string(i) + " (%" + p->name() + ") of " + c.name() +
                   " expects " + p->shape().ToString(false) + ", got " + args[i].shape().ToString(false));
  }
  return Status::Ok();
}

const std::vector<const Instruction*>& Evaluator::Order(const Computation& c) {
  auto it = order_cache_.find(&c);
  if (it != order_cache_.end()) return it->second;
  std::vector<const Instruction*> order;
  for (Instruction* i : c.MakePostOrder()) order.push_back(i);
  return order_cache_.emplace(&c, std::move(order)).first->second;
}

Result<Tensor> Evaluator::EvaluateModule(const Module& module, const std::vector<Tensor>& args) {
  if (!module.entry()) return Error("evaluator: module " + module.name() + " has no entry computation");
  return EvaluateComputation(*module.entry(), args);
}

Result<Tensor> Evaluator::EvaluateComputation(const Computation& c, const std::vector<Tensor>& args) {
  Status st = CheckArguments(c, args);
  if (!st.ok()) return st.error();
  if (!c.root()) return Error("evaluator: computation " + c.name() + " has no root");
  if (depth_ > 200) return Error("evaluator: computations nest deeper than 200 calls (recursion?) at " + c.name());
  struct DepthGuard {
    int64_t& d;
    explicit DepthGuard(int64_t& x) : d(x) { ++d; }
    ~DepthGuard() { --d; }
  } guard(depth_);

  const auto& order = Order(c);
  std::unordered_map<const Instruction*, Tensor> values;
  std::unordered_map<const Instruction*, int64_t> remaining;
  values.reserve(order.size() * 2);
  for (const Instruction* inst : order) remaining[inst] = static_cast<int64_t>(inst->users().size());

  std::vector<const Tensor*> ops;
  for (const Instruction* inst : order) {
    if (inst->opcode() == Opcode::kParameter) {
      const int64_t n = inst->parameter_number;
      if (n < 0 || n >= static_cast<int64_t>(args.size()))
        return Error("evaluator: " + DescribeInstruction(*inst) + ": parameter number out of range");
      values[inst] = args[static_cast<size_t>(n)];
      continue;
    }
    ops.clear();
    for (const Instruction* op : inst->operands()) {
      auto it = values.find(op);
      if (it == values.end())
        return Error("evaluator: " + DescribeInstruction(*inst) + ": operand %" + op->name() + " has no value");
      ops.push_back(&it->second);
    }
    auto r = EvaluateInstruction(*inst, ops);
    if (!r.ok()) return r.error();
    values[inst] = std::move(r.value());
    // Release operands that have no users left.
    std::vector<const Instruction*> distinct(inst->operands().begin(), inst->operands().end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (const Instruction* op : distinct) {
      auto rit = remaining.find(op);
      if (rit != remaining.end() && --rit->second <= 0 && op != c.root()) values.erase(op);
    }
  }
  auto it = values.find(c.root());
  if (it == values.end()) return Error("evaluator: root of " + c.name() + " was not evaluated");
  return std::move(it->second);
}

Result<Tensor> Evaluator::EvaluateInstruction(const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (IsCollective(inst.opcode()))
    return OpError(inst, "collectives need the virtual cluster (RunSpmd); this evaluator runs one device");
  // The result type must be one we can hold.
  const Shape& s = inst.shape();
  if (s.IsArray() && !Tensor::SupportsType(s.type))
    return OpError(inst, "element type " + std::string(PrimitiveTypeName(s.type)) + " is not supported by the evaluator");
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i] || (ops[i]->IsArray() && ops[i]->storage() == Storage::kNone))
      return OpError(inst, "operand " + std::to_string(i) + " has an unsupported element type");
  auto r = Dispatch(inst, ops);
  if (!r.ok()) {
    // Prefix with the instruction unless the message already names an evaluator location.
    if (r.error().message.rfind("evaluator:", 0) == 0) return r.error();
    return OpError(inst, r.error().message);
  }
  if (options_.probe_sums) ProbeSum(inst, ops, r.value());
  return r;
}

void Evaluator::ProbeSum(const Instruction& inst, const std::vector<const Tensor*>& ops, Tensor& t) {
  // Which sums round: a dot's and a convolution's, a reduction's whose reducer adds (a maximum or
  // minimum is the same in every order; any other reducer is moved relative to its result).
  bool adds = false;
  switch (inst.opcode()) {
    case Opcode::kDot: case Opcode::kConvolution: adds = true; break;
    case Opcode::kReduce: case Opcode::kReduceWindow: {
      const Computation* fn = inst.to_apply();
      const Instruction* root = fn ? fn->root() : nullptr;
      if (!root) return;
      switch (root->opcode()) {
        case Opcode::kMaximum: case Opcode::kMinimum: case Opcode::kAnd: case Opcode::kOr: return;
        case Opcode::kAdd: adds = true; break;
        default: break;
      }
      break;
    }
    default: return;
  }
  // Partial sums rounded in another order move a sum by about an ulp of the sum of its terms'
  // magnitudes, not of the sum itself (cancellation): the same op on the operands' magnitudes.
  std::optional<Tensor> magnitude;
  if (adds && t.IsArray()) {
    std::vector<Tensor> abs_values;
    abs_values.reserve(ops.size());
    for (const Tensor* op : ops) {
      Tensor a = *op;
      if (a.IsArray() && (a.storage() == Storage::kFloat || a.storage() == Storage::kDouble))
        for (int64_t i = 0; i < a.size(); ++i) a.SetDouble(i, std::fabs(a.GetDouble(i)));
      abs_values.push_back(std::move(a));
    }
    std::vector<const Tensor*> abs_ops;
    for (const Tensor& a : abs_values) abs_ops.push_back(&a);
    auto m = Dispatch(inst, abs_ops);
    if (m.ok() && m->IsArray() && m->size() == t.size()) magnitude = std::move(m).value();
  }
  auto probe = [&](Tensor& leaf, const Tensor* scale) {
    if (!leaf.IsArray() || (leaf.storage() != Storage::kFloat && leaf.storage() != Storage::kDouble)) return;
    const double ulp = leaf.type() == PrimitiveType::kF64 ? 0x1.0p-52
                       : leaf.type() == PrimitiveType::kF32 ? 0x1.0p-23
                       : leaf.type() == PrimitiveType::kF16 ? 0x1.0p-10
                       : leaf.type() == PrimitiveType::kBF16 ? 0x1.0p-7
                                                              : 0x1.0p-3;
    for (int64_t i = 0; i < leaf.size(); ++i) {
      const double u = static_cast<double>(probe_rng_() >> 11) * 0x1.0p-53;  // [0, 1)
      const double v = leaf.GetDouble(i);
      const double size = scale ? std::max(std::fabs(v), std::fabs(scale->GetDouble(i))) : std::fabs(v);
      leaf.SetDouble(i, v + size * ulp * (2.0 * u - 1.0));
    }
  };
  if (t.IsTuple()) {
    for (Tensor& leaf : t.mutable_elements()) probe(leaf, nullptr);
  } else {
    probe(t, magnitude ? &*magnitude : nullptr);
  }
}

// ---- Op implementations -----------------------------------------------------------------------------

namespace {

Result<std::vector<Tensor>> CallScalarSlow(Evaluator& ev, const Computation& c, const std::vector<Tensor>& args) {
  auto r = ev.EvaluateComputation(c, args);
  if (!r.ok()) return r.error();
  return Leaves(std::move(r.value()));
}

Result<Tensor> Elementwise(const Instruction& inst, const std::vector<const Tensor*>& ops) {
  const Shape& shape = inst.shape();
  const Opcode op = inst.opcode();
  Tensor out(shape);
  const int64_t n = out.size();
  for (const Tensor* t : ops)
    if (!t->IsArray() || (t->size() != n && t->size() != 1))
      return Error("operand " + t->shape().ToString(false) + " does not match the result " + shape.ToString(false));
  auto idx = [](const Tensor* t, int64_t i) { return t->size() == 1 ? 0 : i; };

  if (ops.size() == 1) {
    const Tensor& a = *ops[0];
    if (op == Opcode::kConvert || op == Opcode::kCopy || op == Opcode::kReal) {
      if (a.storage() == Storage::kInt && out.storage() == Storage::kInt) {
        for (int64_t i = 0; i < n; ++i) out.SetInt(i, a.ints()[static_cast<size_t>(idx(&a, i))]);
      } else {
        for (int64_t i = 0; i < n; ++i) out.SetDouble(i, a.GetDouble(idx(&a, i)));
      }
      return out;
    }
    if (op == Opcode::kImag) return out;  // zeros for real types
    if (op == Opcode::kBitcastConvert) {
      if (BitWidth(a.type()) != BitWidth(out.type()) || !BitcastableType(a.type()) || !BitcastableType(out.type()))
        return Error("bitcast-convert between " + std::string(PrimitiveTypeName(a.type())) + " and " +
                     std::string(PrimitiveTypeName(out.type())) + " (different bit widths) is not supported");
      for (int64_t i = 0; i < n; ++i) FromBits(out, i, ToBits(a, idx(&a, i)));
      return out;
    }
    if (op == Opcode::kReducePrecision) {
      int eb = 8, mb = 23;
      for (const auto& ra : inst.raw_attributes) {
        if (ra.key == "exponent_bits") eb = std::atoi(ra.value.c_str());
        if (ra.key == "mantissa_bits") mb = std::atoi(ra.value.c_str());
      }
      if (a.storage() != Storage::kFloat && a.storage() != Storage::kDouble) return Error("reduce-precision needs a float operand");
      for (int64_t i = 0; i < n; ++i)
        out.SetDouble(i, ReducePrecisionF32(static_cast<float>(a.GetDouble(idx(&a, i))), eb, mb));
      return out;
    }
    if (op == Opcode::kIsFinite) {
      for (int64_t i = 0; i < n; ++i) out.SetInt(i, std::isfinite(a.GetDouble(idx(&a, i))) ? 1 : 0);
      return out;
    }
    if (a.storage() == Storage::kInt) {
      bool ok = true;
      for (int64_t i = 0; i < n; ++i) {
        out.SetInt(i, IntUnary(op, a.type(), a.ints()[static_cast<size_t>(idx(&a, i))], ok));
        if (!ok) return Error("op is not defined for integer type " + std::string(PrimitiveTypeName(a.type())));
      }
      return out;
    }
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) {
      out.SetDouble(i, FloatUnary(op, a.GetDouble(idx(&a, i)), ok));
      if (!ok) return Error("op is not defined for floating-point type " + std::string(PrimitiveTypeName(a.type())));
    }
    return out;
  }

  if (op == Opcode::kSelect) {
    if (ops.size() != 3) return Error("select takes 3 operands");
    const Tensor& p = *ops[0];
    const Tensor& a = *ops[1];
    const Tensor& b = *ops[2];
    if (a.type() != out.type() || b.type() != out.type()) return Error("select operand types differ from the result");
    for (int64_t i = 0; i < n; ++i) {
      const bool c = p.GetInt(idx(&p, i)) != 0;
      if (c) CopyElem(out, i, a, idx(&a, i));
      else CopyElem(out, i, b, idx(&b, i));
    }
    return out;
  }
  if (op == Opcode::kClamp) {
    if (ops.size() != 3) return Error("clamp takes 3 operands");
    const Tensor& lo = *ops[0];
    const Tensor& x = *ops[1];
    const Tensor& hi = *ops[2];
    if (lo.type() != out.type() || x.type() != out.type() || hi.type() != out.type())
      return Error("clamp operand types differ from the result");
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) {
      if (out.storage() == Storage::kInt) {
        const int64_t v = IntBinary(Opcode::kMinimum, out.type(),
                                    IntBinary(Opcode::kMaximum, out.type(), x.ints()[static_cast<size_t>(idx(&x, i))],
                                              lo.ints()[static_cast<size_t>(idx(&lo, i))], ok),
                                    hi.ints()[static_cast<size_t>(idx(&hi, i))], ok);
        out.SetInt(i, v);
      } else {
        out.SetDouble(i, FMin(FMax(x.GetDouble(idx(&x, i)), lo.GetDouble(idx(&lo, i))), hi.GetDouble(idx(&hi, i))));
      }
    }
    return out;
  }
  if (ops.size() != 2) return Error("expected 2 operands, got " + std::to_string(ops.size()));
  const Tensor& a = *ops[0];
  const Tensor& b = *ops[1];
  if (op == Opcode::kCompare) {
    const bool total = inst.comparison_type == "TOTALORDER";
    if (a.type() != b.type()) return Error("compare operands have different types");
    for (int64_t i = 0; i < n; ++i) out.SetInt(i, CompareElems(inst.comparison, a, idx(&a, i), b, idx(&b, i), total) ? 1 : 0);
    return out;
  }
  if (out.storage() == Storage::kInt) {
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) {
      out.SetInt(i, IntBinary(op, out.type(), a.GetInt(idx(&a, i)), b.GetInt(idx(&b, i)), ok));
      if (!ok) return Error("op is not defined for integer type " + std::string(PrimitiveTypeName(out.type())));
    }
    return out;
  }
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    out.SetDouble(i, FloatBinary(op, a.GetDouble(idx(&a, i)), b.GetDouble(idx(&b, i)), ok));
    if (!ok) return Error("op is not defined for floating-point type " + std::string(PrimitiveTypeName(out.type())));
  }
  return out;
}

Result<Tensor> EvalConstant(const Instruction& inst) {
  Tensor out(inst.shape());
  if (out.IsArray() && static_cast<int64_t>(inst.literal.values.size()) == out.size() && out.size() > 0) {
    for (int64_t i = 0; i < out.size(); ++i) out.SetDouble(i, inst.literal.values[static_cast<size_t>(i)]);
    return out;
  }
  if (out.IsArray() && out.size() == 0) return out;
  auto vals = ParseLiteralNumbers(inst.literal.text);
  if (!vals.ok()) return Error("constant: " + vals.error().message);
  size_t pos = 0;
  Status st = FillLeaves(out, vals.value(), pos);
  if (!st.ok()) return Error("constant: " + st.error().message + " (" + std::to_string(vals->size()) + " values for " +
                             inst.shape().ToString(false) + ")");
  if (pos != vals->size())
    return Error("constant: " + std::to_string(vals->size()) + " values for " + inst.shape().ToString(false));
  return out;
}

Result<Tensor> EvalIota(const Instruction& inst) {
  Tensor out(inst.shape());
  const int64_t d = inst.iota_dimension;
  if (d < 0 || d >= out.rank()) return Error("iota_dimension " + std::to_string(d) + " out of range");
  if (out.size() == 0) return out;
  std::vector<int64_t> idx(static_cast<size_t>(out.rank()), 0);
  int64_t i = 0;
  do {
    out.SetInt(i++, idx[static_cast<size_t>(d)]);
  } while (NextIndex(idx, out.dims()));
  return out;
}

Result<Tensor> EvalBroadcast(const Instruction& inst, const Tensor& a) {
  Tensor out(inst.shape());
  if (a.type() != out.type()) return Error("operand type differs from the result type");
  const auto& bd = inst.dimensions;
  if (static_cast<int64_t>(bd.size()) != a.rank()) {
    if (a.rank() == 0) {
      FillWith(out, a, 0);
      return out;
    }
    return Error("broadcast dimensions " + DimsStr(bd) + " do not match operand rank " + std::to_string(a.rank()));
  }
  for (size_t i = 0; i < bd.size(); ++i)
    if (bd[i] < 0 || bd[i] >= out.rank() || out.dim(bd[i]) != a.dim(static_cast<int64_t>(i)))
      return Error("broadcast dimension " + std::to_string(bd[i]) + " does not fit operand " + a.shape().ToString(false));
  if (out.size() == 0) return out;
  const auto a_strides = RowMajorStrides(a.dims());
  std::vector<int64_t> out_stride(static_cast<size_t>(out.rank()), 0);
  for (size_t i = 0; i < bd.size(); ++i) out_stride[static_cast<size_t>(bd[i])] = a_strides[i];
  std::vector<int64_t> idx(static_cast<size_t>(out.rank()), 0);
  int64_t i = 0;
  do {
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d) src += idx[d] * out_stride[d];
    CopyElem(out, i++, a, src);
  } while (NextIndex(idx, out.dims()));
  return out;
}

Result<Tensor> EvalReshape(const Instruction& inst, const Tensor& a) {
  if (!inst.shape().IsArray()) return Error("reshape to a non-array shape");
  if (ElementCountOf(inst.shape().dims) != a.size())
    return Error("reshape of " + a.shape().ToString(false) + " to " + inst.shape().ToString(false) + " changes the element count");
  if (a.type() != inst.shape().type) {
    // bitcast between same-width types with the same element count
    if (inst.opcode() == Opcode::kBitcast && BitWidth(a.type()) == BitWidth(inst.shape().type) &&
        BitcastableType(a.type()) && BitcastableType(inst.shape().type)) {
      Tensor out(inst.shape());
      for (int64_t i = 0; i < out.size(); ++i) FromBits(out, i, ToBits(a, i));
      return out;
    }
    return Error("cannot reinterpret " + a.shape().ToString(false) + " as " + inst.shape().ToString(false));
  }
  Tensor out = a;
  out.SetDimsUnchecked(inst.shape().dims);
  return out;
}

bool IsDefaultLayout(const Shape& s) {
  if (!s.has_layout || s.minor_to_major.empty()) return true;
  const int64_t r = s.rank();
  if (static_cast<int64_t>(s.minor_to_major.size()) != r) return false;
  for (int64_t i = 0; i < r; ++i)
    if (s.minor_to_major[static_cast<size_t>(i)] != r - 1 - i) return false;
  return true;
}

Result<Tensor> EvalTranspose(const Instruction& inst, const Tensor& a) {
  const auto& perm = inst.dimensions;
  if (static_cast<int64_t>(perm.size()) != a.rank() || !ValidDimList(perm, a.rank()))
    return Error("transpose dimensions " + DimsStr(perm) + " are not a permutation of rank " + std::to_string(a.rank()));
  Tensor out(inst.shape());
  if (out.type() != a.type()) return Error("operand type differs from the result type");
  for (int64_t i = 0; i < a.rank(); ++i)
    if (out.dim(i) != a.dim(perm[static_cast<size_t>(i)])) return Error("result shape does not match the permutation");
  if (out.size() == 0) return out;
  const auto in_strides = RowMajorStrides(a.dims());
  std::vector<int64_t> st(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) st[i] = in_strides[static_cast<size_t>(perm[i])];
  std::vector<int64_t> idx(perm.size(), 0);
  int64_t i = 0;
  do {
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d) src += idx[d] * st[d];
    CopyElem(out, i++, a, src);
  } while (NextIndex(idx, out.dims()));
  return out;
}

Result<Tensor> EvalSlice(const Instruction& inst, const Tensor& a) {
  const auto& sl = inst.slice;
  const int64_t r = a.rank();
  if (static_cast<int64_t>(sl.starts.size()) != r || static_cast<int64_t>(sl.limits.size()) != r)
    return Error("slice spec rank does not match operand rank " + std::to_string(r));
  Tensor out(inst.shape());
  if (out.type() != a.type() || out.rank() != r) return Error("result shape does not fit the operand");
  std::vector<int64_t> strides(static_cast<size_t>(r), 1);
  for (int64_t d = 0; d < r; ++d) {
    const size_t u = static_cast<size_t>(d);
    if (u < sl.strides.size()) strides[u] = sl.strides[u];
    if (strides[u] < 1 || sl.starts[u] < 0 || sl.limits[u] > a.dim(d) || sl.starts[u] > sl.limits[u])
      return Error("slice bounds [" + std::to_string(sl.starts[u]) + ":" + std::to_string(sl.limits[u]) + "] out of range for dim " +
                   std::to_string(d) + " of " + a.shape().ToString(false));
    if (out.dim(d) != (sl.limits[u] - sl.starts[u] + strides[u] - 1) / strides[u])
      return Error("result dim " + std::to_string(d) + " does not match the slice");
  }
  if (out.size() == 0) return out;
  const auto in_strides = RowMajorStrides(a.dims());
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t i = 0;
  do {
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d) src += (sl.starts[d] + idx[d] * strides[d]) * in_strides[d];
    CopyElem(out, i++, a, src);
  } while (NextIndex(idx, out.dims()));
  return out;
}

// Start indices of dynamic-slice / dynamic-update-slice: scalar operands from `first`, or one vector.
Result<std::vector<int64_t>> StartIndices(const std::vector<const Tensor*>& ops, size_t first, int64_t rank) {
  std::vector<int64_t> starts;
  if (ops.size() == first + 1 && ops[first]->rank() == 1 && rank != 1) {
    if (ops[first]->size() != rank) return Error("start index vector has the wrong length");
    for (int64_t i = 0; i < rank; ++i) starts.push_back(ops[first]->GetInt(i));
    return starts;
  }
  if (static_cast<int64_t>(ops.size() - first) != rank)
    return Error("expected " + std::to_string(rank) + " start indices, got " + std::to_string(ops.size() - first));
  for (size_t i = first; i < ops.size(); ++i) {
    if (ops[i]->size() != 1) return Error("start index operand is not a scalar");
    starts.push_back(ops[i]->GetInt(0));
  }
  return starts;
}

Result<Tensor> EvalDynamicSlice(const Instruction& inst, const std::vector<const Tensor*>& ops) {
  const Tensor& a = *ops[0];
  auto st = StartIndices(ops, 1, a.rank());
  if (!st.ok()) return st.error();
  Tensor out(inst.shape());
  if (out.type() != a.type() || out.rank() != a.rank()) return Error("result shape does not fit the operand");
  std::vector<int64_t> starts = st.value();
  for (int64_t d = 0; d < a.rank(); ++d) {
    if (out.dim(d) > a.dim(d)) return Error("slice size exceeds operand dim " + std::to_string(d));
    starts[static_cast<size_t>(d)] = std::clamp<int64_t>(starts[static_cast<size_t>(d)], 0, a.dim(d) - out.dim(d));
  }
  if (out.size() == 0) return out;
  const auto in_strides = RowMajorStrides(a.dims());
  std::vector<int64_t> idx(static_cast<size_t>(a.rank()), 0);
  int64_t i = 0;
  do {
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d) src += (starts[d] + idx[d]) * in_strides[d];
    CopyElem(out, i++, a, src);
  } while (NextIndex(idx, out.dims()));
  return out;
}

Result<Tensor> EvalDynamicUpdateSlice(const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (ops.size() < 2) return Error("dynamic-update-slice needs an operand and an update");
  const Tensor& a = *ops[0];
  const Tensor& u = *ops[1];
  auto st = StartIndices(ops, 2, a.rank());
  if (!st.ok()) return st.error();
  if (u.rank() != a.rank() || u.type() != a.type()) return Error("update does not fit the operand");
  std::vector<int64_t> starts = st.value();
  for (int64_t d = 0; d < a.rank(); ++d) {
    if (u.dim(d) > a.dim(d)) return Error("update exceeds operand dim " + std::to_string(d));
    starts[static_cast<size_t>(d)] = std::clamp<int64_t>(starts[static_cast<size_t>(d)], 0, a.dim(d) - u.dim(d));
  }
  Tensor out = a;
  if (u.size() == 0) return out;
  const auto strides = RowMajorStrides(a.dims());
  std::vector<int64_t> idx(static_cast<size_t>(a.rank()), 0);
  int64_t i = 0;
  do {
    int64_t dst = 0;
    for (size_t d = 0; d < idx.size(); ++d) dst += (starts[d] + idx[d]) * strides[d];
    CopyElem(out, dst, u, i++);
  } while (NextIndex(idx, u.dims()));
  return out;
}

Result<Tensor> EvalPad(const Instruction& inst, const Tensor& a, const Tensor& pv) {
  const int64_t r = a.rank();
  if (static_cast<int64_t>(inst.padding.size()) != r) return Error("padding config rank does not match operand rank");
  Tensor out(inst.shape());
  if (out.type() != a.type() || out.rank() != r || pv.size() != 1 || pv.type() != a.type())
    return Error("result / padding value do not fit the operand");
  for (int64_t d = 0; d < r; ++d) {
    const auto& p = inst.padding[static_cast<size_t>(d)];
    if (p.interior < 0) return Error("negative interior padding");
    const int64_t n = a.dim(d);
    const int64_t expect = std::max<int64_t>(0, p.low + p.high + n + std::max<int64_t>(0, n - 1) * p.interior);
    if (out.dim(d) != expect) return Error("result dim " + std::to_string(d) + " does not match the padding");
  }
  FillWith(out, pv, 0);
  if (a.size() == 0 || out.size() == 0) return out;
  const auto out_strides = RowMajorStrides(out.dims());
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t i = 0;
  do {
    int64_t dst = 0;
    bool inside = true;
    for (int64_t d = 0; d < r; ++d) {
      const auto& p = inst.padding[static_cast<size_t>(d)];
      const int64_t pos = p.low + idx[static_cast<size_t>(d)] * (p.interior + 1);
      if (pos < 0 || pos >= out.dim(d)) {
        inside = false;
        break;
      }
      dst += pos * out_strides[static_cast<size_t>(d)];
    }
    if (inside) CopyElem(out, dst, a, i);
    ++i;
  } while (NextIndex(idx, a.dims()));
  return out;
}

Result<Tensor> EvalConcatenate(const Instruction& inst, const std::vector<const Tensor*>& ops) {
  Tensor out(inst.shape());
  if (inst.dimensions.empty()) return Error("concatenate needs dimensions={d}");
  const int64_t cd = inst.dimensions[0];
  if (cd < 0 || cd >= out.rank()) return Error("concatenate dimension out of range");
  int64_t offset = 0;
  const auto out_strides = RowMajorStrides(out.dims());
  for (const Tensor* t : ops) {
    if (t->rank() != out.rank() || t->type() != out.type()) return Error("operand " + t->shape().ToString(false) + " does not fit");
    for (int64_t d = 0; d < out.rank(); ++d)
      if (d != cd && t->dim(d) != out.dim(d)) return Error("operand " + t->shape().ToString(false) + " does not fit");
    if (offset + t->dim(cd) > out.dim(cd)) return Error("operands exceed the result along the concatenate dimension");
    if (t->size() > 0) {
      std::vector<int64_t> idx(static_cast<size_t>(t->rank()), 0);
      int64_t i = 0;
      do {
        int64_t dst = 0;
        for (int64_t d = 0; d < t->rank(); ++d)
          dst += (idx[static_cast<size_t>(d)] + (d == cd ? offset : 0)) * out_strides[static_cast<size_t>(d)];
        CopyElem(out, dst, *t, i++);
      } while (NextIndex(idx, t->dims()));
    }
    offset += t->dim(cd);
  }
  if (offset != out.dim(cd)) return Error("operands do not fill the result along the concatenate dimension");
  return out;
}

Result<Tensor> EvalReverse(const Instruction& inst, const Tensor& a) {
  if (!ValidDimList(inst.dimensions, a.rank())) return Error("reverse dimensions out of range");
  Tensor out(inst.shape());
  if (out.type() != a.type() || out.dims() != a.dims()) return Error("result shape differs from the operand");
  if (a.size() == 0) return out;
  const auto strides = RowMajorStrides(a.dims());
  std::vector<int64_t> idx(static_cast<size_t>(a.rank()), 0);
  int64_t i = 0;
  do {
    int64_t src = 0;
    for (int64_t d = 0; d < a.rank(); ++d) {
      int64_t x = idx[static_cast<size_t>(d)];
      if (Contains(inst.dimensions, d)) x = a.dim(d) - 1 - x;
      src += x * strides[static_cast<size_t>(d)];
    }
    CopyElem(out, i++, a, src);
  } while (NextIndex(idx, a.dims()));
  return out;
}

Result<Tensor> EvalDot(const Instruction& inst, const Tensor& lhs, const Tensor& rhs) {
  const auto& dn = inst.dot_dims;
  if (dn.lhs_batch.size() != dn.rhs_batch.size() || dn.lhs_contracting.size() != dn.rhs_contracting.size())
    return Error("dot batch/contracting dimension counts differ between lhs and rhs");
  std::vector<int64_t> lhs_all = dn.lhs_batch, rhs_all = dn.rhs_batch;
  lhs_all.insert(lhs_all.end(), dn.lhs_contracting.begin(), dn.lhs_contracting.end());
  rhs_all.insert(rhs_all.end(), dn.rhs_contracting.begin(), dn.rhs_contracting.end());
  if (!ValidDimList(lhs_all, lhs.rank()) || !ValidDimList(rhs_all, rhs.rank()))
    return Error("dot dimension numbers out of range or repeated");
  for (size_t i = 0; i < dn.lhs_batch.size(); ++i)
    if (lhs.dim(dn.lhs_batch[i]) != rhs.dim(dn.rhs_batch[i])) return Error("dot batch dimension sizes differ");
  for (size_t i = 0; i < dn.lhs_contracting.size(); ++i)
    if (lhs.dim(dn.lhs_contracting[i]) != rhs.dim(dn.rhs_contracting[i])) return Error("dot contracting dimension sizes differ");
  std::vector<int64_t> lhs_free, rhs_free;
  for (int64_t d = 0; d < lhs.rank(); ++d)
    if (!Contains(lhs_all, d)) lhs_free.push_back(d);
  for (int64_t d = 0; d < rhs.rank(); ++d)
    if (!Contains(rhs_all, d)) rhs_free.push_back(d);
  int64_t B = 1, M = 1, N = 1, K = 1;
  std::vector<int64_t> out_dims;
  for (int64_t d : dn.lhs_batch) { B *= lhs.dim(d); out_dims.push_back(lhs.dim(d)); }
  for (int64_t d : lhs_free) { M *= lhs.dim(d); out_dims.push_back(lhs.dim(d)); }
  for (int64_t d : rhs_free) { N *= rhs.dim(d); out_dims.push_back(rhs.dim(d)); }
  for (int64_t d : dn.lhs_contracting) K *= lhs.dim(d);
  Tensor out(inst.shape());
  if (out.dims() != out_dims)
    return Error("result " + inst.shape().ToString(false) + " does not match the dot's " + DimsStr(out_dims));
  if (out.size() == 0) return out;
  std::vector<int64_t> lperm = dn.lhs_batch;
  lperm.insert(lperm.end(), lhs_free.begin(), lhs_free.end());
  lperm.insert(lperm.end(), dn.lhs_contracting.begin(), dn.lhs_contracting.end());
  std::vector<int64_t> rperm = dn.rhs_batch;
  rperm.insert(rperm.end(), dn.rhs_contracting.begin(), dn.rhs_contracting.end());
  rperm.insert(rperm.end(), rhs_free.begin(), rhs_free.end());
  using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MatU = Eigen::Matrix<uint64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  if (out.storage() == Storage::kInt) {
    // An integer result: the operands are converted to the result's type first and the products
    // summed in it (as XLA's evaluator does), so a dot split along its contracting dims and summed
    // by an all-reduce computes the same (converting each partial sum would not).
    auto as_result_type = [&](const Tensor& t) -> Tensor {
      Tensor c(Shape(out.type(), t.dims()));
      for (int64_t i = 0; i < t.size(); ++i) c.SetDouble(i, t.GetDouble(i));
      return c;
    };
    const Tensor lhs_int = lhs.storage() == Storage::kInt ? Tensor() : as_result_type(lhs);
    const Tensor rhs_int = rhs.storage() == Storage::kInt ? Tensor() : as_result_type(rhs);
    auto l = TransposedInts(lhs.storage() == Storage::kInt ? lhs : lhs_int, lperm);
    auto r = TransposedInts(rhs.storage() == Storage::kInt ? rhs : rhs_int, rperm);
    // In unsigned 64-bit arithmetic: it wraps (defined), and modulo 2^64 it is the same sum of
    // products as in signed arithmetic; SetInt then wraps it to the result's width.
    const std::vector<uint64_t> lu(l.begin(), l.end()), ru(r.begin(), r.end());
    for (int64_t b = 0; b < B; ++b) {
      Eigen::Map<const MatU> A(lu.data() + b * M * K, M, K);
      Eigen::Map<const MatU> Bm(ru.data() + b * K * N, K, N);
      MatU C = K == 0 ? MatU::Zero(M, N) : MatU(A * Bm);
      for (int64_t i = 0; i < M * N; ++i) out.SetInt(b * M * N + i, static_cast<int64_t>(C.data()[i]));
    }
    return out;
  }
  auto l = TransposedDoubles(lhs, lperm);
  auto r = TransposedDoubles(rhs, rperm);
  for (int64_t b = 0; b < B; ++b) {
    Eigen::Map<const MatD> A(l.data() + b * M * K, M, K);
    Eigen::Map<const MatD> Bm(r.data() + b * K * N, K, N);
    MatD C = K == 0 ? MatD::Zero(M, N) : MatD(A * Bm);
    for (int64_t i = 0; i < M * N; ++i) out.SetDouble(b * M * N + i, C.data()[i]);
  }
  return out;
}

Result<Tensor> EvalConvolution(const Instruction& inst, const Tensor& in, const Tensor& ker) {
  const auto& cd = inst.conv_dims;
  Tensor out(inst.shape());
  const size_t ns = cd.input_spatial.size();
  if (cd.kernel_spatial.size() != ns || cd.output_spatial.size() != ns) return Error("convolution spatial dimension counts differ");
  std::vector<int64_t> in_dims_list = cd.input_spatial, k_dims_list = cd.kernel_spatial, o_dims_list = cd.output_spatial;
  in_dims_list.push_back(cd.input_batch);
  in_dims_list.push_back(cd.input_feature);
  k_dims_list.push_back(cd.kernel_input_feature);
  k_dims_list.push_back(cd.kernel_output_feature);
  o_dims_list.push_back(cd.output_batch);
  o_dims_list.push_back(cd.output_feature);
  if (in.rank() != static_cast<int64_t>(ns + 2) || ker.rank() != static_cast<int64_t>(ns + 2) || out.rank() != static_cast<int64_t>(ns + 2) ||
      !ValidDimList(in_dims_list, in.rank()) || !ValidDimList(k_dims_list, ker.rank()) || !ValidDimList(o_dims_list, out.rank()))
    return Error("convolution dim_labels do not fit the operand ranks");
  std::vector<WindowDimension> win(ns);
  for (size_t s = 0; s < ns; ++s) {
    if (inst.has_window && s < inst.window.dims.size()) win[s] = inst.window.dims[s];
    else win[s].size = ker.dim(cd.kernel_spatial[s]);
    if (win[s].stride < 1 || win[s].window_dilation < 1 || win[s].base_dilation < 1) return Error("window stride/dilation must be >= 1");
    if (win[s].size != ker.dim(cd.kernel_spatial[s])) return Error("window size does not match the kernel's spatial size");
  }
  const int64_t G = std::max<int64_t>(1, inst.feature_group_count);
  const int64_t BG = std::max<int64_t>(1, inst.batch_group_count);
  const int64_t C_in = in.dim(cd.input_feature);
  const int64_t K_in = ker.dim(cd.kernel_input_feature);
  const int64_t K_out = ker.dim(cd.kernel_output_feature);
  const int64_t O_b = out.dim(cd.output_batch);
  if (C_in != K_in * G) return Error("input features " + std::to_string(C_in) + " != kernel input features x feature_group_count");
  if (K_out % G != 0 || K_out % BG != 0) return Error("kernel output features not divisible by the group count");
  if (out.dim(cd.output_feature) != K_out) return Error("output features differ from the kernel's");
  if (in.dim(cd.input_batch) != O_b * BG) return Error("output batch x batch_group_count != input batch");
  const int64_t out_per_fg = K_out / G, out_per_bg = K_out / BG;
  const auto is = RowMajorStrides(in.dims()), ks = RowMajorStrides(ker.dims()), os = RowMajorStrides(out.dims());
  std::vector<int64_t> ksp(ns);
  for (size_t s = 0; s < ns; ++s) ksp[s] = ker.dim(cd.kernel_spatial[s]);
  const int64_t kcount = Product(ksp);
  if (out.size() == 0) return out;
  const bool int_math = out.storage() == Storage::kInt;
  if (!int_math && BG == 1) {
    // im2col + GEMM per batch element and feature group: patches [out spatial, K_in x window]
    // times kernel [K_in x window, out features of the group].
    using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    std::vector<int64_t> osp(ns);
    for (size_t s = 0; s < ns; ++s) osp[s] = out.dim(cd.output_spatial[s]);
    const int64_t rows = Product(osp), cols = K_in * kcount;
    const std::vector<double> in_d = in.ToDoubles();
    // Kernel matrices per feature group.
    std::vector<MatD> W(static_cast<size_t>(G), MatD::Zero(cols, out_per_fg));
    {
      std::vector<int64_t> kk(ns, 0);
      int64_t kpos = 0;
      if (kcount > 0) do {
        int64_t k_off = 0;
        for (size_t s = 0; s < ns; ++s) {
          const int64_t kr = win[s].window_reversal ? ksp[s] - 1 - kk[s] : kk[s];
          k_off += kr * ks[static_cast<size_t>(cd.kernel_spatial[s])];
        }
        for (int64_t g = 0; g < G; ++g)
          for (int64_t ki = 0; ki < K_in; ++ki)
            for (int64_t oc = 0; oc < out_per_fg; ++oc)
              W[static_cast<size_t>(g)](ki * kcount + kpos, oc) =
                  ker.GetDouble(k_off + ki * ks[static_cast<size_t>(cd.kernel_input_feature)] +
                                (g * out_per_fg + oc) * ks[static_cast<size_t>(cd.kernel_output_feature)]);
        ++kpos;
      } while (NextIndex(kk, ksp));
    }
    // Input offsets (or -1) of every (output position, window position) pair, shared by all batches.
    std::vector<int64_t> tap(static_cast<size_t>(rows * kcount), -1);
    {
      std::vector<int64_t> o(ns, 0), kk(ns, 0);
      int64_t row = 0;
      if (rows > 0) do {
        int64_t kpos = 0;
        if (kcount > 0) {
          std::fill(kk.begin(), kk.end(), 0);
          do {
            int64_t off = 0;
            bool valid = true;
            for (size_t s = 0; s < ns; ++s) {
              const int64_t p = WindowInputPos(win[s], o[s], kk[s], in.dim(cd.input_spatial[s]));
              if (p < 0) { valid = false; break; }
              off += p * is[static_cast<size_t>(cd.input_spatial[s])];
            }
            tap[static_cast<size_t>(row * kcount + kpos)] = valid ? off : -1;
            ++kpos;
          } while (NextIndex(kk, ksp));
        }
        ++row;
      } while (NextIndex(o, osp));
    }
    MatD P(rows, cols);
    std::vector<int64_t> o(ns, 0);
    for (int64_t b = 0; b < O_b; ++b) {
      for (int64_t g = 0; g < G; ++g) {
        const int64_t base = b * is[static_cast<size_t>(cd.input_batch)];
        for (int64_t row = 0; row < rows; ++row)
          for (int64_t ki = 0; ki < K_in; ++ki) {
            const int64_t foff = base + (g * K_in + ki) * is[static_cast<size_t>(cd.input_feature)];
            for (int64_t kpos = 0; kpos < kcount; ++kpos) {
              const int64_t t = tap[static_cast<size_t>(row * kcount + kpos)];
              P(row, ki * kcount + kpos) = t < 0 ? 0.0 : in_d[static_cast<size_t>(foff + t)];
            }
          }
        const MatD C = cols == 0 ? MatD::Zero(rows, out_per_fg) : MatD(P * W[static_cast<size_t>(g)]);
        std::fill(o.begin(), o.end(), 0);
        for (int64_t row = 0; row < rows; ++row) {
          int64_t obase = b * os[static_cast<size_t>(cd.output_batch)];
          for (size_t s = 0; s < ns; ++s) obase += o[s] * os[static_cast<size_t>(cd.output_spatial[s])];
          for (int64_t oc = 0; oc < out_per_fg; ++oc)
            out.SetDouble(obase + (g * out_per_fg + oc) * os[static_cast<size_t>(cd.output_feature)], C(row, oc));
          NextIndex(o, osp);
        }
      }
    }
    return out;
  }
  // General loop (integers, batch groups): one output element at a time.
  std::vector<int64_t> oidx(static_cast<size_t>(out.rank()), 0);
  std::vector<int64_t> kidx(ns, 0);
  do {
    const int64_t b = oidx[static_cast<size_t>(cd.output_batch)];
    const int64_t f = oidx[static_cast<size_t>(cd.output_feature)];
    const int64_t fg = f / out_per_fg;
    const int64_t bg = f / out_per_bg;
    const int64_t in_b = bg * O_b + b;
    double acc = 0;
    int64_t iacc = 0;
    if (kcount > 0) {
      std::fill(kidx.begin(), kidx.end(), 0);
      do {
        int64_t in_off = in_b * is[static_cast<size_t>(cd.input_batch)];
        int64_t k_off = f * ks[static_cast<size_t>(cd.kernel_output_feature)];
        bool valid = true;
        for (size_t s = 0; s < ns; ++s) {
          const int64_t p = WindowInputPos(win[s], oidx[static_cast<size_t>(cd.output_spatial[s])], kidx[s], in.dim(cd.input_spatial[s]));
          if (p < 0) { valid = false; break; }
          in_off += p * is[static_cast<size_t>(cd.input_spatial[s])];
          const int64_t kk = win[s].window_reversal ? ksp[s] - 1 - kidx[s] : kidx[s];
          k_off += kk * ks[static_cast<size_t>(cd.kernel_spatial[s])];
        }
        if (valid) {
          for (int64_t ki = 0; ki < K_in; ++ki) {
            const int64_t ii = in_off + (fg * K_in + ki) * is[static_cast<size_t>(cd.input_feature)];
            const int64_t kk = k_off + ki * ks[static_cast<size_t>(cd.kernel_input_feature)];
            if (int_math) iacc += in.GetInt(ii) * ker.GetInt(kk);
            else acc += in.GetDouble(ii) * ker.GetDouble(kk);
          }
        }
      } while (NextIndex(kidx, ksp));
    }
    int64_t o = 0;
    for (size_t d = 0; d < oidx.size(); ++d) o += oidx[d] * os[d];
    if (int_math) out.SetInt(o, iacc);
    else out.SetDouble(o, acc);
  } while (NextIndex(oidx, out.dims()));
  return out;
}

}  // namespace

// ---- Scalar programs: computations on scalars compiled to a flat op list ------------------------------
//
// Reducers, comparators and combiners run once per element (or per comparison); evaluating them as
// full computations (a value map, tensors per instruction) costs microseconds per call. A
// computation whose every instruction is a scalar elementwise op, compare, select, clamp, convert,
// bitcast-convert, constant or parameter (with an optional tuple root) is compiled into this form
// once and run with plain values, with the same rounding and wrapping as the tensor ops.

namespace {
struct ScalarValue {
  double f = 0;   // float types (already rounded to the type)
  int64_t i = 0;  // pred / integer types (already wrapped)
};

inline bool IsFloatType(PrimitiveType t) {
  const auto st = Tensor::StorageFor(t);
  return st == Storage::kFloat || st == Storage::kDouble;
}
inline double RoundTo(PrimitiveType t, double v) { return t == PrimitiveType::kF64 ? v : RoundToFloatType(t, v); }

inline ScalarValue ReadSV(const Tensor& t, int64_t i) {
  ScalarValue v;
  if (t.storage() == Storage::kInt) v.i = t.ints()[static_cast<size_t>(i)];
  else v.f = t.GetDouble(i);
  return v;
}
inline void WriteSV(Tensor& t, int64_t i, const ScalarValue& v) {
  if (t.storage() == Storage::kInt) t.ints()[static_cast<size_t>(i)] = v.i;
  else if (t.storage() == Storage::kFloat) t.floats()[static_cast<size_t>(i)] = static_cast<float>(v.f);
  else if (t.storage() == Storage::kDouble) t.doubles()[static_cast<size_t>(i)] = v.f;
}

uint64_t ScalarBits(PrimitiveType t, const ScalarValue& v) {
  switch (t) {
    case PrimitiveType::kF32: return std::bit_cast<uint32_t>(static_cast<float>(v.f));
    case PrimitiveType::kF64: return std::bit_cast<uint64_t>(v.f);
    case PrimitiveType::kBF16: return std::bit_cast<uint32_t>(static_cast<float>(v.f)) >> 16;
    case PrimitiveType::kF16: return Eigen::numext::bit_cast<uint16_t>(Eigen::half(static_cast<float>(v.f)));
    default: {
      const int bits = BitWidth(t);
      const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
      return static_cast<uint64_t>(v.i) & mask;
    }
  }
}
ScalarValue FromScalarBits(PrimitiveType t, uint64_t bits) {
  ScalarValue v;
  switch (t) {
    case PrimitiveType::kF32: v.f = std::bit_cast<float>(static_cast<uint32_t>(bits)); break;
    case PrimitiveType::kF64: v.f = std::bit_cast<double>(bits); break;
    case PrimitiveType::kBF16: v.f = std::bit_cast<float>(static_cast<uint32_t>(bits << 16)); break;
    case PrimitiveType::kF16: v.f = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<uint16_t>(bits))); break;
    default: v.i = WrapToIntType(t, static_cast<int64_t>(bits)); break;
  }
  return v;
}
}  // namespace

class ScalarProgram {
 public:
  static std::unique_ptr<ScalarProgram> Compile(const Computation& c);

  size_t num_params() const { return param_types_.size(); }
  size_t num_outputs() const { return outs_.size(); }
  const std::vector<PrimitiveType>& param_types() const { return param_types_; }
  const std::vector<PrimitiveType>& output_types() const { return out_types_; }
  // Runs the program; `params` holds num_params() values, `outs` receives num_outputs().
  void Run(const ScalarValue* params, ScalarValue* outs) const;

 private:
  enum class Kind : uint8_t { kConst, kConvert, kBitcast, kCompare, kSelect, kClamp, kIsFinite, kUnaryF, kUnaryI, kBinaryF, kBinaryI };
  struct Op {
    Kind kind = Kind::kConst;
    Opcode op = Opcode::kAdd;
    PrimitiveType type = PrimitiveType::kInvalid, in_type = PrimitiveType::kInvalid;
    int a = -1, b = -1, c = -1;
    ComparisonDirection dir = ComparisonDirection::kEq;
    bool total = false;
    ScalarValue k;
  };
  std::vector<PrimitiveType> param_types_, out_types_;
  std::vector<Op> ops_;
  std::vector<int> outs_;
  mutable std::vector<ScalarValue> slots_;
};

std::unique_ptr<ScalarProgram> ScalarProgram::Compile(const Computation& c) {
  auto p = std::make_unique<ScalarProgram>();
  const auto& params = c.parameters();
  auto scalar = [](const Shape& sh) { return sh.IsArray() && sh.rank() == 0 && Tensor::SupportsType(sh.type); };
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i] || !scalar(params[i]->shape())) return nullptr;
    p->param_types_.push_back(params[i]->shape().type);
  }
  if (!c.root()) return nullptr;
  std::unordered_map<const Instruction*, int> slot;
  std::unordered_map<int, PrimitiveType> slot_type;
  for (size_t i = 0; i < params.size(); ++i) {
    slot[params[i]] = static_cast<int>(i);
    slot_type[static_cast<int>(i)] = params[i]->shape().type;
  }
  const int np = static_cast<int>(params.size());
  for (const Instruction* inst : c.MakePostOrder()) {
    if (inst->opcode() == Opcode::kParameter) {
      if (!slot.count(inst)) return nullptr;
      continue;
    }
    if (inst->opcode() == Opcode::kTuple) {
      if (inst != c.root()) return nullptr;
      for (const Instruction* o : inst->operands()) {
        auto it = slot.find(o);
        if (it == slot.end()) return nullptr;
        p->outs_.push_back(it->second);
        p->out_types_.push_back(o->shape().type);
      }
      continue;
    }
    if (!scalar(inst->shape())) return nullptr;
    std::vector<int> in;
    for (const Instruction* o : inst->operands()) {
      auto it = slot.find(o);
      if (it == slot.end() || !scalar(o->shape())) return nullptr;
      in.push_back(it->second);
    }
    Op op;
    op.op = inst->opcode();
    op.type = inst->shape().type;
    auto in_type = [&](size_t k) { return slot_type[in[k]]; };
    bool ok = true;
    const Opcode oc = inst->opcode();
    if (oc == Opcode::kConstant) {
      auto t = EvalConstant(*inst);
      if (!t.ok() || t->size() != 1) return nullptr;
      op.kind = Kind::kConst;
      op.k = ReadSV(t.value(), 0);
    } else if (oc == Opcode::kConvert || (oc == Opcode::kCopy && in.size() == 1)) {
      if (in.size() != 1) return nullptr;
      op.kind = Kind::kConvert;
      op.in_type = in_type(0);
    } else if (oc == Opcode::kBitcastConvert) {
      if (in.size() != 1 || BitWidth(in_type(0)) != BitWidth(op.type) || !BitcastableType(in_type(0)) || !BitcastableType(op.type))
        return nullptr;
      op.kind = Kind::kBitcast;
      op.in_type = in_type(0);
    } else if (oc == Opcode::kCompare) {
      if (in.size() != 2 || in_type(0) != in_type(1)) return nullptr;
      op.kind = Kind::kCompare;
      op.in_type = in_type(0);
      op.dir = inst->comparison;
      op.total = inst->comparison_type == "TOTALORDER";
    } else if (oc == Opcode::kSelect) {
      if (in.size() != 3 || in_type(1) != op.type || in_type(2) != op.type) return nullptr;
      op.kind = Kind::kSelect;
    } else if (oc == Opcode::kClamp) {
      if (in.size() != 3 || in_type(0) != op.type || in_type(1) != op.type || in_type(2) != op.type) return nullptr;
      op.kind = Kind::kClamp;
    } else if (oc == Opcode::kIsFinite) {
      if (in.size() != 1 || !IsFloatType(in_type(0))) return nullptr;
      op.kind = Kind::kIsFinite;
    } else if (IsElementwiseUnary(oc) && in.size() == 1) {
      if (in_type(0) != op.type) return nullptr;
      if (IsFloatType(op.type)) {
        FloatUnary(oc, 0.5, ok);
        op.kind = Kind::kUnaryF;
      } else {
        IntUnary(oc, op.type, 1, ok);
        op.kind = Kind::kUnaryI;
      }
    } else if (IsElementwiseBinary(oc) && in.size() == 2) {
      if (in_type(0) != op.type || in_type(1) != op.type) return nullptr;
      if (IsFloatType(op.type)) {
        FloatBinary(oc, 1, 1, ok);
        op.kind = Kind::kBinaryF;
      } else {
        IntBinary(oc, op.type, 1, 1, ok);
        op.kind = Kind::kBinaryI;
      }
    } else {
      return nullptr;
    }
    if (!ok) return nullptr;
    if (in.size() > 0) op.a = in[0];
    if (in.size() > 1) op.b = in[1];
    if (in.size() > 2) op.c = in[2];
    const int s_new = np + static_cast<int>(p->ops_.size());
    slot[inst] = s_new;
    slot_type[s_new] = op.type;
    p->ops_.push_back(op);
  }
  if (c.root()->opcode() != Opcode::kTuple) {
    auto it = slot.find(c.root());
    if (it == slot.end()) return nullptr;
    p->outs_.push_back(it->second);
    p->out_types_.push_back(c.root()->shape().type);
  }
  p->slots_.resize(static_cast<size_t>(np) + p->ops_.size());
  return p;
}

void ScalarProgram::Run(const ScalarValue* params, ScalarValue* outs) const {
  const size_t np = param_types_.size();
  ScalarValue* sl = slots_.data();
  for (size_t i = 0; i < np; ++i) sl[i] = params[i];
  bool ok = true;
  for (size_t j = 0; j < ops_.size(); ++j) {
    const Op& op = ops_[j];
    ScalarValue r;
    switch (op.kind) {
      case Kind::kConst: r = op.k; break;
      case Kind::kConvert: {
        const ScalarValue& a = sl[op.a];
        const bool in_int = !IsFloatType(op.in_type), out_int = !IsFloatType(op.type);
        if (in_int && out_int) r.i = WrapToIntType(op.type, a.i);
        else if (in_int) r.f = RoundTo(op.type, op.in_type == PrimitiveType::kU64 ? static_cast<double>(static_cast<uint64_t>(a.i))
                                                                                  : static_cast<double>(a.i));
        else if (out_int) r.i = FloatToIntType(op.type, a.f);
        else r.f = RoundTo(op.type, a.f);
        break;
      }
      case Kind::kBitcast: r = FromScalarBits(op.type, ScalarBits(op.in_type, sl[op.a])); break;
      case Kind::kCompare: {
        const ScalarValue& a = sl[op.a];
        const ScalarValue& b = sl[op.b];
        if (IsFloatType(op.in_type)) r.i = CompareDoubles(op.dir, a.f, b.f, op.total);
        else if (IsUnsignedInteger(op.in_type) || op.in_type == PrimitiveType::kPred)
          r.i = CompareOrdered(op.dir, static_cast<uint64_t>(a.i), static_cast<uint64_t>(b.i));
        else r.i = CompareOrdered(op.dir, a.i, b.i);
        break;
      }
      case Kind::kSelect: r = sl[op.a].i ? sl[op.b] : sl[op.c]; break;
      case Kind::kClamp:
        if (IsFloatType(op.type)) r.f = FMin(FMax(sl[op.b].f, sl[op.a].f), sl[op.c].f);
        else r.i = IntBinary(Opcode::kMinimum, op.type, IntBinary(Opcode::kMaximum, op.type, sl[op.b].i, sl[op.a].i, ok), sl[op.c].i, ok);
        break;
      case Kind::kIsFinite: r.i = std::isfinite(sl[op.a].f) ? 1 : 0; break;
      case Kind::kUnaryF: r.f = RoundTo(op.type, FloatUnary(op.op, sl[op.a].f, ok)); break;
      case Kind::kUnaryI: r.i = IntUnary(op.op, op.type, sl[op.a].i, ok); break;
      case Kind::kBinaryF: r.f = RoundTo(op.type, FloatBinary(op.op, sl[op.a].f, sl[op.b].f, ok)); break;
      case Kind::kBinaryI: r.i = IntBinary(op.op, op.type, sl[op.a].i, sl[op.b].i, ok); break;
    }
    sl[np + j] = r;
  }
  for (size_t k = 0; k < outs_.size(); ++k) outs[k] = sl[outs_[k]];
}

Evaluator::~Evaluator() = default;
Evaluator::Evaluator(Evaluator&&) noexcept = default;
Evaluator& Evaluator::operator=(Evaluator&&) noexcept = default;

const ScalarProgram* Evaluator::ScalarProgramFor(const Computation& c) {
  auto it = scalar_programs_.find(&c);
  if (it != scalar_programs_.end()) return it->second.get();
  auto p = ScalarProgram::Compile(c);
  const ScalarProgram* raw = p.get();
  scalar_programs_.emplace(&c, std::move(p));
  return raw;
}

namespace {

// Whether `p` takes parameters of `in` types (in order) and returns `n_out` values.
bool ProgramFits(const ScalarProgram* p, const std::vector<PrimitiveType>& in, const std::vector<PrimitiveType>& out) {
  return p && p->param_types() == in && p->output_types() == out;
}

// Calls a computation on scalar tensors: through its scalar program when it has one.
Result<std::vector<Tensor>> CallScalar(Evaluator& ev, const Computation& c, const std::vector<Tensor>& args) {
  const ScalarProgram* p = ev.ScalarProgramFor(c);
  if (p && p->num_params() == args.size()) {
    bool fits = true;
    std::vector<ScalarValue> in(args.size());
    for (size_t i = 0; i < args.size() && fits; ++i) {
      if (!args[i].IsArray() || args[i].size() != 1 || args[i].type() != p->param_types()[i]) fits = false;
      else in[i] = ReadSV(args[i], 0);
    }
    if (fits) {
      std::vector<ScalarValue> out(p->num_outputs());
      p->Run(in.data(), out.data());
      std::vector<Tensor> res;
      res.reserve(out.size());
      for (size_t k = 0; k < out.size(); ++k) {
        Tensor t(Shape::Scalar(p->output_types()[k]));
        WriteSV(t, 0, out[k]);
        res.push_back(std::move(t));
      }
      return res;
    }
  }
  return CallScalarSlow(ev, c, args);
}

}  // namespace


// ---- Ops that call computations (members need the evaluator) ------------------------------------------

namespace {

Result<Tensor> EvalReduce(Evaluator& ev, const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (ops.size() % 2 != 0 || ops.empty()) return Error("reduce takes N inputs and N init values");
  const size_t n = ops.size() / 2;
  const Tensor& in0 = *ops[0];
  for (size_t k = 0; k < n; ++k) {
    if (!ops[k]->IsArray() || ops[k]->dims() != in0.dims()) return Error("reduce inputs have different shapes");
    if (ops[n + k]->size() != 1) return Error("reduce init value is not a scalar");
  }
  if (!ValidDimList(inst.dimensions, in0.rank())) return Error("reduce dimensions out of range");
  const Computation* fn = inst.to_apply();
  if (!fn) return Error("reduce has no to_apply computation");
  std::vector<int64_t> out_dims;
  for (int64_t d = 0; d < in0.rank(); ++d)
    if (!Contains(inst.dimensions, d)) out_dims.push_back(d);
  std::vector<int64_t> kept_sizes;
  for (int64_t d : out_dims) kept_sizes.push_back(in0.dim(d));
  // Output stride contributed by each input dim (0 for reduced dims).
  const auto ostr = RowMajorStrides(kept_sizes);
  std::vector<int64_t> in_to_out(static_cast<size_t>(in0.rank()), 0);
  for (size_t i = 0; i < out_dims.size(); ++i) in_to_out[static_cast<size_t>(out_dims[i])] = ostr[i];
  const int64_t out_count = Product(kept_sizes);

  std::vector<Tensor> accs;
  for (size_t k = 0; k < n; ++k) {
    const Shape leaf = inst.shape().IsTuple() ? (k < inst.shape().tuple.size() ? inst.shape().tuple[k] : Shape())
                                              : inst.shape();
    if (!leaf.IsArray() || leaf.dims != kept_sizes || leaf.type != ops[n + k]->type())
      return Error("result shape does not match the reduced operand");
    Tensor acc(leaf);
    FillWith(acc, *ops[n + k], 0);
    accs.push_back(std::move(acc));
  }
  auto make_result = [&]() -> Tensor {
    if (n == 1 && !inst.shape().IsTuple()) return std::move(accs[0]);
    return Tensor::Tuple(std::move(accs));
  };
  if (in0.size() == 0) return make_result();

  const auto fast = n == 1 ? SimpleBinaryReducer(fn) : std::nullopt;
  if (fast && in0.type() == accs[0].type()) {
    Tensor& acc = accs[0];
    const Opcode op = *fast;
    std::vector<int64_t> idx(static_cast<size_t>(in0.rank()), 0);
    if (acc.storage() == Storage::kInt) {
      std::vector<int64_t> a(static_cast<size_t>(out_count), acc.GetInt(0));
      bool ok = true;
      int64_t i = 0;
      do {
        int64_t o = 0;
        for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * in_to_out[d];
        a[static_cast<size_t>(o)] = IntBinary(op, acc.type(), a[static_cast<size_t>(o)], in0.ints()[static_cast<size_t>(i++)], ok);
      } while (NextIndex(idx, in0.dims()));
      if (!ok) return Error("reducer op is not defined for " + std::string(PrimitiveTypeName(acc.type())));
      for (int64_t o = 0; o < out_count; ++o) acc.SetInt(o, a[static_cast<size_t>(o)]);
    } else {
      if (op == Opcode::kAnd || op == Opcode::kOr || op == Opcode::kXor)
        return Error("reducer op is not defined for floating-point types");
      std::vector<double> a(static_cast<size_t>(out_count), acc.GetDouble(0));
      int64_t i = 0;
      do {
        int64_t o = 0;
        for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * in_to_out[d];
        a[static_cast<size_t>(o)] = ApplyFloatReducer(op, a[static_cast<size_t>(o)], in0.GetDouble(i++));
      } while (NextIndex(idx, in0.dims()));
      for (int64_t o = 0; o < out_count; ++o) acc.SetDouble(o, a[static_cast<size_t>(o)]);
    }
    return make_result();
  }
  // General path: evaluate the reducer per element (as a scalar program when it compiles).
  {
    std::vector<PrimitiveType> in_types, out_types;
    for (size_t k = 0; k < n; ++k) in_types.push_back(accs[k].type());
    for (size_t k = 0; k < n; ++k) in_types.push_back(ops[k]->type());
    for (size_t k = 0; k < n; ++k) out_types.push_back(accs[k].type());
    const ScalarProgram* prog = ev.ScalarProgramFor(*fn);
    if (ProgramFits(prog, in_types, out_types)) {
      std::vector<ScalarValue> in(2 * n), out(n);
      std::vector<int64_t> idx(static_cast<size_t>(in0.rank()), 0);
      int64_t i = 0;
      do {
        int64_t o = 0;
        for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * in_to_out[d];
        for (size_t k = 0; k < n; ++k) {
          in[k] = ReadSV(accs[k], o);
          in[n + k] = ReadSV(*ops[k], i);
        }
        prog->Run(in.data(), out.data());
        for (size_t k = 0; k < n; ++k) WriteSV(accs[k], o, out[k]);
        ++i;
      } while (NextIndex(idx, in0.dims()));
      return make_result();
    }
  }
  std::vector<Tensor> args(2 * n);
  for (size_t k = 0; k < n; ++k) {
    args[k] = Tensor(Shape::Scalar(accs[k].type()));
    args[n + k] = Tensor(Shape::Scalar(ops[k]->type()));
  }
  std::vector<int64_t> idx(static_cast<size_t>(in0.rank()), 0);
  int64_t i = 0;
  do {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * in_to_out[d];
    for (size_t k = 0; k < n; ++k) {
      CopyElem(args[k], 0, accs[k], o);
      CopyElem(args[n + k], 0, *ops[k], i);
    }
    auto r = CallScalar(ev, *fn, args);
    if (!r.ok()) return r.error();
    if (r->size() != n) return Error("reducer returns " + std::to_string(r->size()) + " values, expected " + std::to_string(n));
    for (size_t k = 0; k < n; ++k) {
      if ((*r)[k].type() != accs[k].type() || (*r)[k].size() != 1) return Error("reducer result type mismatch");
      CopyElem(accs[k], o, (*r)[k], 0);
    }
    ++i;
  } while (NextIndex(idx, in0.dims()));
  return make_result();
}

Result<Tensor> EvalReduceWindow(Evaluator& ev, const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (ops.size() % 2 != 0 || ops.empty()) return Error("reduce-window takes N inputs and N init values");
  const size_t n = ops.size() / 2;
  const Tensor& in0 = *ops[0];
  const int64_t r = in0.rank();
  if (static_cast<int64_t>(inst.window.dims.size()) != r) return Error("window rank does not match operand rank");
  const Computation* fn = inst.to_apply();
  if (!fn) return Error("reduce-window has no to_apply computation");
  std::vector<Tensor> outs;
  for (size_t k = 0; k < n; ++k) {
    if (ops[k]->dims() != in0.dims()) return Error("reduce-window inputs have different shapes");
    if (ops[n + k]->size() != 1) return Error("init value is not a scalar");
    const Shape leaf = inst.shape().IsTuple() ? (k < inst.shape().tuple.size() ? inst.shape().tuple[k] : Shape()) : inst.shape();
    if (!leaf.IsArray() || leaf.rank() != r || leaf.type != ops[n + k]->type()) return Error("result shape does not fit");
    outs.emplace_back(leaf);
  }
  std::vector<int64_t> wsize(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    const auto& w = inst.window.dims[static_cast<size_t>(d)];
    if (w.size < 0 || w.stride < 1 || w.window_dilation < 1 || w.base_dilation < 1) return Error("invalid window");
    wsize[static_cast<size_t>(d)] = w.size;
  }
  const auto fast = n == 1 ? SimpleBinaryReducer(fn) : std::nullopt;
  const Opcode fast_op = fast.value_or(Opcode::kAdd);
  const auto is = RowMajorStrides(in0.dims());
  std::vector<Tensor> args(2 * n);
  for (size_t k = 0; k < n; ++k) {
    args[k] = Tensor(Shape::Scalar(outs[k].type()));
    args[n + k] = Tensor(Shape::Scalar(ops[k]->type()));
  }
  if (outs[0].size() == 0) return n == 1 && !inst.shape().IsTuple() ? std::move(outs[0]) : Tensor::Tuple(std::move(outs));
  std::vector<int64_t> oidx(static_cast<size_t>(r), 0), widx(static_cast<size_t>(r), 0);
  int64_t o = 0;
  const int64_t wcount = Product(wsize);
  do {
    // Accumulators start at the init values.
    std::vector<Tensor> acc(n);
    for (size_t k = 0; k < n; ++k) acc[k] = *ops[n + k];
    double facc = n == 1 && fast ? ops[n]->GetDouble(0) : 0;
    int64_t iacc = n == 1 && fast ? ops[n]->GetInt(0) : 0;
    if (wcount > 0) {
      std::fill(widx.begin(), widx.end(), 0);
      do {
        int64_t src = 0;
        bool valid = true;
        for (int64_t d = 0; d < r; ++d) {
          const int64_t p = WindowInputPos(inst.window.dims[static_cast<size_t>(d)], oidx[static_cast<size_t>(d)],
                                           widx[static_cast<size_t>(d)], in0.dim(d));
          if (p < 0) { valid = false; break; }
          src += p * is[static_cast<size_t>(d)];
        }
        if (!valid) continue;
        if (fast) {
          bool ok = true;
          if (in0.storage() == Storage::kInt) iacc = IntBinary(fast_op, in0.type(), iacc, in0.GetInt(src), ok);
          else facc = ApplyFloatReducer(fast_op, facc, in0.GetDouble(src));
          if (!ok) return Error("reducer op not defined for this type");
        } else {
          for (size_t k = 0; k < n; ++k) {
            CopyElem(args[k], 0, acc[k], 0);
            CopyElem(args[n + k], 0, *ops[k], src);
          }
          auto res = CallScalar(ev, *fn, args);
          if (!res.ok()) return res.error();
          if (res->size() != n) return Error("reducer returns the wrong number of values");
          for (size_t k = 0; k < n; ++k) acc[k] = std::move((*res)[k]);
        }
      } while (NextIndex(widx, wsize));
    }
    if (fast) {
      if (outs[0].storage() == Storage::kInt) outs[0].SetInt(o, iacc);
      else outs[0].SetDouble(o, facc);
    } else {
      for (size_t k = 0; k < n; ++k) {
        if (acc[k].size() != 1 || acc[k].type() != outs[k].type()) return Error("reducer result type mismatch");
        CopyElem(outs[k], o, acc[k], 0);
      }
    }
    ++o;
  } while (NextIndex(oidx, outs[0].dims()));
  if (n == 1 && !inst.shape().IsTuple()) return std::move(outs[0]);
  return Tensor::Tuple(std::move(outs));
}

Result<Tensor> EvalSelectAndScatter(Evaluator& ev, const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (ops.size() != 3) return Error("select-and-scatter takes operand, source and init value");
  const Tensor& a = *ops[0];
  const Tensor& src = *ops[1];
  const Tensor& init = *ops[2];
  const int64_t r = a.rank();
  if (static_cast<int64_t>(inst.window.dims.size()) != r || src.rank() != r) return Error("window / source rank mismatch");
  const auto& called = inst.called_computations();
  if (called.size() < 2 || !called[0] || !called[1]) return Error("select-and-scatter needs select and scatter computations");
  const Computation* select = called[0];
  const Computation* scatter = called[1];
  Tensor out(inst.shape());
  if (out.dims() != a.dims() || out.type() != a.type() || init.size() != 1 || init.type() != a.type())
    return Error("result / init value do not fit the operand");
  if (src.type() != a.type()) return Error("source type differs from the operand type");
  FillWith(out, init, 0);
  // Fast select: compare(p0, p1) with a direction.
  std::optional<ComparisonDirection> fast_sel;
  if (select->root() && select->root()->opcode() == Opcode::kCompare && select->parameters().size() == 2 &&
      select->root()->operand(0)->opcode() == Opcode::kParameter && select->root()->operand(1)->opcode() == Opcode::kParameter &&
      select->root()->operand(0)->parameter_number == 0 && select->root()->operand(1)->parameter_number == 1)
    fast_sel = select->root()->comparison;
  const auto fast_sc = SimpleBinaryReducer(scatter);
  std::vector<int64_t> wsize(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) wsize[static_cast<size_t>(d)] = inst.window.dims[static_cast<size_t>(d)].size;
  const auto is = RowMajorStrides(a.dims());
  Tensor sa(Shape::Scalar(a.type())), sb(Shape::Scalar(a.type()));
  Tensor ca(Shape::Scalar(out.type())), cb(Shape::Scalar(src.type()));
  if (src.size() == 0 || Product(wsize) == 0) return out;
  std::vector<int64_t> sidx(static_cast<size_t>(r), 0), widx(static_cast<size_t>(r), 0);
  int64_t si = 0;
  do {
    int64_t selected = -1;
    std::fill(widx.begin(), widx.end(), 0);
    do {
      int64_t pos = 0;
      bool valid = true;
      for (int64_t d = 0; d < r; ++d) {
        const int64_t p = WindowInputPos(inst.window.dims[static_cast<size_t>(d)], sidx[static_cast<size_t>(d)],
                                         widx[static_cast<size_t>(d)], a.dim(d));
        if (p < 0) { valid = false; break; }
        pos += p * is[static_cast<size_t>(d)];
      }
      if (!valid) continue;
      if (selected < 0) {
        selected = pos;
        continue;
      }
      bool keep;
      if (fast_sel) {
        keep = CompareElems(*fast_sel, a, selected, a, pos, false);
      } else {
        CopyElem(sa, 0, a, selected);
        CopyElem(sb, 0, a, pos);
        auto res = CallScalar(ev, *select, {sa, sb});
        if (!res.ok()) return res.error();
        if (res->size() != 1 || (*res)[0].size() != 1) return Error("select computation must return a pred scalar");
        keep = (*res)[0].GetInt(0) != 0;
      }
      if (!keep) selected = pos;
    } while (NextIndex(widx, wsize));
    if (selected >= 0) {
      if (fast_sc) {
        bool ok = true;
        if (out.storage() == Storage::kInt)
          out.SetInt(selected, IntBinary(*fast_sc, out.type(), out.GetInt(selected), src.GetInt(si), ok));
        else
          out.SetDouble(selected, ApplyFloatReducer(*fast_sc, out.GetDouble(selected), src.GetDouble(si)));
      } else {
        CopyElem(ca, 0, out, selected);
        CopyElem(cb, 0, src, si);
        auto res = CallScalar(ev, *scatter, {ca, cb});
        if (!res.ok()) return res.error();
        if (res->size() != 1 || (*res)[0].size() != 1 || (*res)[0].type() != out.type())
          return Error("scatter computation result type mismatch");
        CopyElem(out, selected, (*res)[0], 0);
      }
    }
    ++si;
  } while (NextIndex(sidx, src.dims()));
  return out;
}

// The position in a gather/scatter batch-index vector of indices dim `d` (index_vector_dim removed).
inline int64_t BatchPos(int64_t d, int64_t ivd, int64_t indices_rank) {
  return (ivd < indices_rank && d > ivd) ? d - 1 : d;
}

Result<Tensor> EvalGather(const Instruction& inst, const Tensor& a, const Tensor& ind) {
  const auto& dn = inst.gather_dims;
  const auto& ss = inst.gather_slice_sizes;
  const int64_t r = a.rank();
  Tensor out(inst.shape());
  if (out.type() != a.type()) return Error("result type differs from the operand");
  if (static_cast<int64_t>(ss.size()) != r) return Error("slice_sizes rank does not match the operand");
  for (int64_t d = 0; d < r; ++d)
    if (ss[static_cast<size_t>(d)] < 0 || ss[static_cast<size_t>(d)] > a.dim(d)) return Error("slice size out of range");
  const int64_t ivd = dn.index_vector_dim;
  const int64_t ir = ind.rank();
  if (ivd < 0 || ivd > ir) return Error("index_vector_dim out of range");
  const int64_t vec_len = ivd == ir ? 1 : ind.dim(ivd);
  if (static_cast<int64_t>(dn.start_index_map.size()) != vec_len) return Error("start_index_map length != index vector length");
  if (!ValidDimList(dn.start_index_map, r) || !ValidDimList(dn.collapsed_slice_dims, r) || !ValidDimList(dn.operand_batching_dims, r) ||
      !ValidDimList(dn.offset_dims, out.rank()) || dn.operand_batching_dims.size() != dn.start_indices_batching_dims.size() ||
      !ValidDimList(dn.start_indices_batching_dims, ir))
    return Error("gather dimension numbers out of range");
  std::vector<int64_t> batch_out;
  for (int64_t d = 0; d < out.rank(); ++d)
    if (!Contains(dn.offset_dims, d)) batch_out.push_back(d);
  if (static_cast<int64_t>(batch_out.size()) != (ivd == ir ? ir : ir - 1)) return Error("output batch rank does not match the indices");
  for (int64_t d = 0, bi = 0; d < ir; ++d) {
    if (d == ivd) continue;
    if (out.dim(batch_out[static_cast<size_t>(bi++)]) != ind.dim(d)) return Error("output batch dims do not match the indices");
  }
  std::vector<int64_t> offset_operand;  // operand dims that appear as offset dims, in order
  for (int64_t d = 0; d < r; ++d)
    if (!Contains(dn.collapsed_slice_dims, d) && !Contains(dn.operand_batching_dims, d)) offset_operand.push_back(d);
  if (offset_operand.size() != dn.offset_dims.size()) return Error("offset_dims count does not match the slice");
  std::vector<int64_t> offset_dims_sorted = dn.offset_dims;
  std::sort(offset_dims_sorted.begin(), offset_dims_sorted.end());
  for (size_t k = 0; k < offset_operand.size(); ++k)
    if (out.dim(offset_dims_sorted[k]) != ss[static_cast<size_t>(offset_operand[k])]) return Error("offset dim size != slice size");
  const auto as = RowMajorStrides(a.dims());
  const auto ist = RowMajorStrides(ind.dims());
  if (out.size() == 0) return out;
  // A collapsed dimension with slice size 0 (allowed, as in XLA) makes every slice empty: nothing
  // is read and the output keeps its zeros (there is no element to start a slice at).
  for (int64_t d = 0; d < r; ++d)
    if (ss[static_cast<size_t>(d)] == 0) return out;
  std::vector<int64_t> oidx(static_cast<size_t>(out.rank()), 0), start(static_cast<size_t>(r)), bidx(batch_out.size());
  int64_t o = 0;
  do {
    for (size_t i = 0; i < batch_out.size(); ++i) bidx[i] = oidx[static_cast<size_t>(batch_out[i])];
    // Base linear index into indices for this batch position (index-vector dim at 0).
    int64_t ibase = 0;
    {
      size_t bi = 0;
      for (int64_t d = 0; d < ir; ++d) {
        if (d == ivd) continue;
        ibase += bidx[bi++] * ist[static_cast<size_t>(d)];
      }
    }
    std::fill(start.begin(), start.end(), 0);
    for (int64_t k = 0; k < vec_len; ++k) {
      const int64_t li = ibase + (ivd == ir ? 0 : k * ist[static_cast<size_t>(ivd)]);
      start[static_cast<size_t>(dn.start_index_map[static_cast<size_t>(k)])] = ind.GetInt(li);
    }
    for (size_t i = 0; i < dn.operand_batching_dims.size(); ++i)
      start[static_cast<size_t>(dn.operand_batching_dims[i])] = bidx[static_cast<size_t>(BatchPos(dn.start_indices_batching_dims[i], ivd, ir))];
    int64_t src = 0;
    for (int64_t d = 0; d < r; ++d) {
      const int64_t s = std::clamp<int64_t>(start[static_cast<size_t>(d)], 0, a.dim(d) - ss[static_cast<size_t>(d)]);
      start[static_cast<size_t>(d)] = s;
    }
    for (size_t k = 0; k < offset_operand.size(); ++k)
      start[static_cast<size_t>(offset_operand[k])] += oidx[static_cast<size_t>(offset_dims_sorted[k])];
    for (int64_t d = 0; d < r; ++d) src += start[static_cast<size_t>(d)] * as[static_cast<size_t>(d)];
    CopyElem(out, o++, a, src);
  } while (NextIndex(oidx, out.dims()));
  return out;
}

Result<Tensor> EvalScatter(Evaluator& ev, const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (ops.size() < 3 || (ops.size() - 1) % 2 != 0) return Error("scatter takes N operands, indices and N updates");
  const size_t n = (ops.size() - 1) / 2;
  const Tensor& a0 = *ops[0];
  const Tensor& ind = *ops[n];
  const Tensor& u0 = *ops[n + 1];
  const auto& dn = inst.scatter_dims;
  const int64_t r = a0.rank();
  const Computation* fn = inst.to_apply();
  if (!fn) return Error("scatter has no to_apply computation");
  std::vector<Tensor> outs;
  for (size_t k = 0; k < n; ++k) {
    if (ops[k]->dims() != a0.dims() || ops[n + 1 + k]->dims() != u0.dims()) return Error("scatter operands/updates differ in shape");
    outs.push_back(*ops[k]);
  }
  const int64_t ivd = dn.index_vector_dim;
  const int64_t ir = ind.rank();
  if (ivd < 0 || ivd > ir) return Error("index_vector_dim out of range");
  const int64_t vec_len = ivd == ir ? 1 : ind.dim(ivd);
  if (static_cast<int64_t>(dn.scatter_dims_to_operand_dims.size()) != vec_len)
    return Error("scatter_dims_to_operand_dims length != index vector length");
  if (!ValidDimList(dn.scatter_dims_to_operand_dims, r) || !ValidDimList(dn.inserted_window_dims, r) ||
      !ValidDimList(dn.input_batching_dims, r) || !ValidDimList(dn.update_window_dims, u0.rank()) ||
      dn.input_batching_dims.size() != dn.scatter_indices_batching_dims.size() || !ValidDimList(dn.scatter_indices_batching_dims, ir))
    return Error("scatter dimension numbers out of range");
  std::vector<int64_t> upd_scatter;
  for (int64_t d = 0; d < u0.rank(); ++d)
    if (!Contains(dn.update_window_dims, d)) upd_scatter.push_back(d);
  if (static_cast<int64_t>(upd_scatter.size()) != (ivd == ir ? ir : ir - 1)) return Error("update scatter rank does not match the indices");
  for (int64_t d = 0, bi = 0; d < ir; ++d) {
    if (d == ivd) continue;
    if (u0.dim(upd_scatter[static_cast<size_t>(bi++)]) != ind.dim(d)) return Error("update scatter dims do not match the indices");
  }
  for (size_t k = 0; k < n; ++k)
    if (ops[n + 1 + k]->type() != ops[k]->type()) return Error("update type differs from the operand type");
  std::vector<int64_t> window_operand;
  for (int64_t d = 0; d < r; ++d)
    if (!Contains(dn.inserted_window_dims, d) && !Contains(dn.input_batching_dims, d)) window_operand.push_back(d);
  if (window_operand.size() != dn.update_window_dims.size()) return Error("update_window_dims count does not match the operand");
  std::vector<int64_t> uwd = dn.update_window_dims;
  std::sort(uwd.begin(), uwd.end());
  std::vector<int64_t> wsize(static_cast<size_t>(r), 1);
  for (size_t k = 0; k < window_operand.size(); ++k) {
    wsize[static_cast<size_t>(window_operand[k])] = u0.dim(uwd[k]);
    if (u0.dim(uwd[k]) > a0.dim(window_operand[k])) return Error("update window larger than the operand");
  }
  const auto fast = n == 1 ? SimpleBinaryReducer(fn) : std::nullopt;
  const Opcode fast_op = fast.value_or(Opcode::kAdd);
  const bool overwrite = n == 1 && ReturnsSecondParameter(fn);
  const auto as = RowMajorStrides(a0.dims());
  const auto ist = RowMajorStrides(ind.dims());
  std::vector<Tensor> args(2 * n);
  for (size_t k = 0; k < n; ++k) {
    args[k] = Tensor(Shape::Scalar(outs[k].type()));
    args[n + k] = Tensor(Shape::Scalar(ops[n + 1 + k]->type()));
  }
  if (u0.size() == 0) return n == 1 && !inst.shape().IsTuple() ? std::move(outs[0]) : Tensor::Tuple(std::move(outs));
  std::vector<int64_t> uidx(static_cast<size_t>(u0.rank()), 0), start(static_cast<size_t>(r));
  int64_t ui = 0;
  do {
    int64_t ibase = 0;
    {
      size_t bi = 0;
      for (int64_t d = 0; d < ir; ++d) {
        if (d == ivd) continue;
        ibase += uidx[static_cast<size_t>(upd_scatter[bi++])] * ist[static_cast<size_t>(d)];
      }
    }
    std::fill(start.begin(), start.end(), 0);
    for (int64_t k = 0; k < vec_len; ++k) {
      const int64_t li = ibase + (ivd == ir ? 0 : k * ist[static_cast<size_t>(ivd)]);
      start[static_cast<size_t>(dn.scatter_dims_to_operand_dims[static_cast<size_t>(k)])] = ind.GetInt(li);
    }
    for (size_t i = 0; i < dn.input_batching_dims.size(); ++i)
      start[static_cast<size_t>(dn.input_batching_dims[i])] =
          uidx[static_cast<size_t>(upd_scatter[static_cast<size_t>(BatchPos(dn.scatter_indices_batching_dims[i], ivd, ir))])];
    bool in_bounds = true;
    for (int64_t d = 0; d < r; ++d)
      if (start[static_cast<size_t>(d)] < 0 || start[static_cast<size_t>(d)] > a0.dim(d) - wsize[static_cast<size_t>(d)]) in_bounds = false;
    if (in_bounds) {
      int64_t dst = 0;
      for (int64_t d = 0; d < r; ++d) dst += start[static_cast<size_t>(d)] * as[static_cast<size_t>(d)];
      for (size_t k = 0; k < window_operand.size(); ++k)
        dst += uidx[static_cast<size_t>(uwd[k])] * as[static_cast<size_t>(window_operand[k])];
      if (overwrite) {
        CopyElem(outs[0], dst, *ops[n + 1], ui);
      } else if (fast) {
        bool ok = true;
        if (outs[0].storage() == Storage::kInt)
          outs[0].SetInt(dst, IntBinary(fast_op, outs[0].type(), outs[0].GetInt(dst), ops[n + 1]->GetInt(ui), ok));
        else
          outs[0].SetDouble(dst, ApplyFloatReducer(fast_op, outs[0].GetDouble(dst), ops[n + 1]->GetDouble(ui)));
        if (!ok) return Error("combiner op not defined for this type");
      } else {
        for (size_t k = 0; k < n; ++k) {
          CopyElem(args[k], 0, outs[k], dst);
          CopyElem(args[n + k], 0, *ops[n + 1 + k], ui);
        }
        auto res = CallScalar(ev, *fn, args);
        if (!res.ok()) return res.error();
        if (res->size() != n) return Error("combiner returns the wrong number of values");
        for (size_t k = 0; k < n; ++k) {
          if ((*res)[k].size() != 1 || (*res)[k].type() != outs[k].type()) return Error("combiner result type mismatch");
          CopyElem(outs[k], dst, (*res)[k], 0);
        }
      }
    }
    ++ui;
  } while (NextIndex(uidx, u0.dims()));
  if (n == 1 && !inst.shape().IsTuple()) return std::move(outs[0]);
  return Tensor::Tuple(std::move(outs));
}

Result<Tensor> EvalSort(Evaluator& ev, const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (ops.empty()) return Error("sort needs operands");
  const Tensor& k0 = *ops[0];
  const int64_t r = k0.rank();
  const int64_t dim = inst.dimensions.empty() ? r - 1 : inst.dimensions[0];
  if (dim < 0 || dim >= r) return Error("sort dimension out of range");
  for (const Tensor* t : ops)
    if (t->dims() != k0.dims()) return Error("sort operands differ in shape");
  const Computation* cmp = inst.to_apply();
  if (!cmp) return Error("sort has no comparator");
  const size_t n = ops.size();
  if (cmp->parameters().size() != 2 * n) return Error("comparator takes " + std::to_string(cmp->parameters().size()) + " parameters, expected " + std::to_string(2 * n));
  // Fast comparator: compare(p[2k], p[2k+1]) (or swapped) with LT / GT.
  int64_t key = -1;
  bool ascending = true;
  bool total = false;
  const Instruction* root = cmp->root();
  if (root && root->opcode() == Opcode::kCompare && root->operand(0)->opcode() == Opcode::kParameter &&
      root->operand(1)->opcode() == Opcode::kParameter &&
      (root->comparison == ComparisonDirection::kLt || root->comparison == ComparisonDirection::kGt)) {
    const int64_t p0 = root->operand(0)->parameter_number, p1 = root->operand(1)->parameter_number;
    if (p0 / 2 == p1 / 2 && p0 != p1) {
      key = p0 / 2;
      const bool lt = root->comparison == ComparisonDirection::kLt;
      ascending = (p0 % 2 == 0) ? lt : !lt;
      total = root->comparison_type == "TOTALORDER";
    }
  }
  std::vector<Tensor> outs;
  for (const Tensor* t : ops) outs.emplace_back(t->shape());
  const int64_t len = k0.dim(dim);
  const auto strides = RowMajorStrides(k0.dims());
  const int64_t stride = strides[static_cast<size_t>(dim)];
  std::vector<int64_t> outer_dims = k0.dims();
  outer_dims[static_cast<size_t>(dim)] = 1;
  std::vector<Tensor> args(2 * n);
  for (size_t k = 0; k < n; ++k) {
    args[2 * k] = Tensor(Shape::Scalar(ops[k]->type()));
    args[2 * k + 1] = Tensor(Shape::Scalar(ops[k]->type()));
  }
  std::optional<Error> failure;
  const ScalarProgram* prog = ev.ScalarProgramFor(*cmp);
  std::vector<PrimitiveType> cmp_types;
  for (size_t k = 0; k < n; ++k) {
    cmp_types.push_back(ops[k]->type());
    cmp_types.push_back(ops[k]->type());
  }
  const bool prog_fits = ProgramFits(prog, cmp_types, {PrimitiveType::kPred});
  std::vector<ScalarValue> sv_in(2 * n);
  ScalarValue sv_out;
  if (k0.size() > 0) {
    std::vector<int64_t> oidx(static_cast<size_t>(r), 0), perm(static_cast<size_t>(len));
    do {
      int64_t base = 0;
      for (int64_t d = 0; d < r; ++d) base += oidx[static_cast<size_t>(d)] * strides[static_cast<size_t>(d)];
      std::iota(perm.begin(), perm.end(), 0);
      if (key >= 0) {
        const Tensor& kt = *ops[static_cast<size_t>(key)];
        const auto dir = ascending ? ComparisonDirection::kLt : ComparisonDirection::kGt;
        std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) {
          return CompareElems(dir, kt, base + x * stride, kt, base + y * stride, total);
        });
      } else if (prog_fits) {
        std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) {
          for (size_t k = 0; k < n; ++k) {
            sv_in[2 * k] = ReadSV(*ops[k], base + x * stride);
            sv_in[2 * k + 1] = ReadSV(*ops[k], base + y * stride);
          }
          prog->Run(sv_in.data(), &sv_out);
          return sv_out.i != 0;
        });
      } else {
        std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) {
          if (failure) return false;
          for (size_t k = 0; k < n; ++k) {
            CopyElem(args[2 * k], 0, *ops[k], base + x * stride);
            CopyElem(args[2 * k + 1], 0, *ops[k], base + y * stride);
          }
          auto res = CallScalar(ev, *cmp, args);
          if (!res.ok()) {
            failure = res.error();
            return false;
          }
          if (res->size() != 1 || (*res)[0].size() != 1) {
            failure = Error("comparator must return a pred scalar");
            return false;
          }
          return (*res)[0].GetInt(0) != 0;
        });
        if (failure) return *failure;
      }
      for (size_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < len; ++j) CopyElem(outs[k], base + j * stride, *ops[k], base + perm[static_cast<size_t>(j)] * stride);
    } while (NextIndex(oidx, outer_dims));
  }
  if (n == 1 && !inst.shape().IsTuple()) return std::move(outs[0]);
  return Tensor::Tuple(std::move(outs));
}

Result<Tensor> EvalMap(Evaluator& ev, const Instruction& inst, const std::vector<const Tensor*>& ops) {
  const Computation* fn = inst.to_apply();
  if (!fn) return Error("map has no to_apply computation");
  Tensor out(inst.shape());
  for (const Tensor* t : ops)
    if (t->size() != out.size()) return Error("map operands differ in shape from the result");
  std::vector<Tensor> args;
  for (const Tensor* t : ops) args.emplace_back(Shape::Scalar(t->type()));
  for (int64_t i = 0; i < out.size(); ++i) {
    for (size_t k = 0; k < ops.size(); ++k) CopyElem(args[k], 0, *ops[k], i);
    auto res = CallScalar(ev, *fn, args);
    if (!res.ok()) return res.error();
    if (res->size() != 1 || (*res)[0].size() != 1 || (*res)[0].type() != out.type()) return Error("map computation result type mismatch");
    CopyElem(out, i, (*res)[0], 0);
  }
  return out;
}

// Slices `device`'s tile of `full` according to `sharding` (zero padded to the shard shape).
Result<Tensor> TileOf(const Tensor& full, const HloSharding& sharding, int64_t device, const Shape& want) {
  if (want.rank() != full.rank() || want.type != full.type()) return Error("the manual shard shape does not fit the operand");
  auto block = ManualBlockIndex(sharding, full.dims(), want.dims, device);
  if (!block.ok()) return block.error();
  std::vector<int64_t> offset(static_cast<size_t>(full.rank()));
  for (int64_t d = 0; d < full.rank(); ++d) offset[static_cast<size_t>(d)] = block.value()[static_cast<size_t>(d)] * want.dims[static_cast<size_t>(d)];
  Tensor out(want);
  if (out.size() == 0) return out;
  const auto fs = RowMajorStrides(full.dims());
  std::vector<int64_t> idx(static_cast<size_t>(out.rank()), 0);
  int64_t i = 0;
  do {
    int64_t src = 0;
    bool inside = true;
    for (int64_t d = 0; d < out.rank(); ++d) {
      const int64_t p = offset[static_cast<size_t>(d)] + idx[static_cast<size_t>(d)];
      if (p >= full.dim(d)) { inside = false; break; }
      src += p * fs[static_cast<size_t>(d)];
    }
    if (inside) CopyElem(out, i, full, src);
    ++i;
  } while (NextIndex(idx, out.dims()));
  return out;
}

// Integer after "key=" in a backend_config string ("dimension=0,amount=2"); nullopt if absent.
std::optional<int64_t> ConfigInt(const std::string& config, const std::string& key) {
  size_t pos = 0;
  while ((pos = config.find(key + "=", pos)) != std::string::npos) {
    if (pos == 0 || !std::isalnum(static_cast<unsigned char>(config[pos - 1])) ) {
      const char* p = config.c_str() + pos + key.size() + 1;
      char* end = nullptr;
      const long long v = std::strtoll(p, &end, 10);
      if (end != p) return static_cast<int64_t>(v);
      return std::nullopt;
    }
    pos += key.size();
  }
  return std::nullopt;
}

// XLA's TopK custom-call: (values, s32 indices) of the k largest along the last dimension, largest
// first; ties keep the lower index first.
Result<Tensor> EvalTopK(const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (ops.size() != 1 || !IsArrayOf(ops[0]) || ops[0]->rank() < 1) return Error("TopK takes one array operand");
  const Shape& s = inst.shape();
  if (!s.IsTuple() || s.tuple.size() != 2 || !s.tuple[0].IsArray() || !s.tuple[1].IsArray())
    return Error("TopK returns (values, indices)");
  const Tensor& a = *ops[0];
  const int64_t r = a.rank();
  const int64_t n = a.dim(r - 1);
  const int64_t k = s.tuple[0].rank() == r ? s.tuple[0].dims[static_cast<size_t>(r - 1)] : -1;
  std::vector<int64_t> want = a.dims();
  want[static_cast<size_t>(r - 1)] = k;
  if (k < 0 || k > n || s.tuple[0].dims != want || s.tuple[1].dims != want || s.tuple[0].type != a.type())
    return Error("TopK result shapes do not fit the operand");
  Tensor vals(s.tuple[0]), idxs(s.tuple[1]);
  const int64_t rows = n == 0 ? 0 : a.size() / n;
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t row = 0; row < rows; ++row) {
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) {
      return CompareElems(ComparisonDirection::kGt, a, row * n + x, a, row * n + y, false);
    });
    for (int64_t j = 0; j < k; ++j) {
      CopyElem(vals, row * k + j, a, row * n + perm[static_cast<size_t>(j)]);
      idxs.SetInt(row * k + j, perm[static_cast<size_t>(j)]);
    }
  }
  return Tensor::Tuple({std::move(vals), std::move(idxs)});
}

// XLA's internal rotate: result[i] = operand[(i - amount) mod n] along `dimension`.
Result<Tensor> EvalRotateRight(const Instruction& inst, const std::vector<const Tensor*>& ops) {
  if (ops.size() != 1 || !IsArrayOf(ops[0])) return Error("RotateRight takes one array operand");
  const Tensor& a = *ops[0];
  const auto dim = ConfigInt(inst.backend_config, "dimension");
  const auto amount = ConfigInt(inst.backend_config, "amount");
  if (!dim || !amount || *dim < 0 || *dim >= a.rank()) return Error("RotateRight needs backend_config dimension=D,amount=A");
  if (!inst.shape().Compatible(a.shape())) return Error("RotateRight changes the shape");
  Tensor out(a.shape());
  const int64_t n = a.dim(*dim);
  if (a.size() == 0 || n == 0) return out;
  const auto st = RowMajorStrides(a.dims());
  std::vector<int64_t> idx(static_cast<size_t>(a.rank()), 0);
  int64_t i = 0;
  do {
    const int64_t x = idx[static_cast<size_t>(*dim)];
    const int64_t src_x = (((x - *amount) % n) + n) % n;
    CopyElem(out, i, a, i + (src_x - x) * st[static_cast<size_t>(*dim)]);
    ++i;
  } while (NextIndex(idx, a.dims()));
  return out;
}

}  // namespace

Result<Tensor> Evaluator::Dispatch(const Instruction& inst, const std::vector<const Tensor*>& ops) {
  const Opcode op = inst.opcode();
  auto need = [&](size_t n) -> std::optional<Error> {
    if (ops.size() < n) return Error("expects " + std::to_string(n) + " operand(s), has " + std::to_string(ops.size()));
    for (size_t i = 0; i < n; ++i)
      if (!IsArrayOf(ops[i]) && !(op == Opcode::kTuple))
        return Error("operand " + std::to_string(i) + " is not an array");
    return std::nullopt;
  };
#define NEED(n)                   \
  if (auto e = need(n)) return *e;

  if (op == Opcode::kCopy && !ops.empty() && !ops[0]->IsArray()) return *ops[0];
  if (IsElementwise(op) && op != Opcode::kMap) {
    NEED(ops.size());
    if (!inst.shape().IsArray()) return Error("elementwise op with a non-array result");
    return Elementwise(inst, ops);
  }
  switch (op) {
    case Opcode::kConstant: return EvalConstant(inst);
    case Opcode::kIota: return EvalIota(inst);
    case Opcode::kBroadcast: NEED(1); return EvalBroadcast(inst, *ops[0]);
    case Opcode::kReshape: NEED(1); return EvalReshape(inst, *ops[0]);
    case Opcode::kBitcast:
      NEED(1);
      if (!IsDefaultLayout(inst.shape()) || !IsDefaultLayout(inst.operand(0)->shape()))
        return Error("bitcast between non-default layouts is not supported (only row-major reinterpretation)");
      return EvalReshape(inst, *ops[0]);
    case Opcode::kTranspose: NEED(1); return EvalTranspose(inst, *ops[0]);
    case Opcode::kSlice: NEED(1); return EvalSlice(inst, *ops[0]);
    case Opcode::kDynamicSlice: NEED(ops.size()); if (ops.empty()) return Error("no operand"); return EvalDynamicSlice(inst, ops);
    case Opcode::kDynamicUpdateSlice: NEED(ops.size()); return EvalDynamicUpdateSlice(inst, ops);
    case Opcode::kPad: NEED(2); return EvalPad(inst, *ops[0], *ops[1]);
    case Opcode::kConcatenate: NEED(ops.size()); if (ops.empty()) return Error("no operands"); return EvalConcatenate(inst, ops);
    case Opcode::kReverse: NEED(1); return EvalReverse(inst, *ops[0]);
    case Opcode::kDot: NEED(2); return EvalDot(inst, *ops[0], *ops[1]);
    case Opcode::kConvolution: NEED(2); return EvalConvolution(inst, *ops[0], *ops[1]);
    case Opcode::kReduce: NEED(ops.size()); return EvalReduce(*this, inst, ops);
    case Opcode::kReduceWindow: NEED(ops.size()); return EvalReduceWindow(*this, inst, ops);
    case Opcode::kSelectAndScatter: NEED(3); return EvalSelectAndScatter(*this, inst, ops);
    case Opcode::kGather: NEED(2); return EvalGather(inst, *ops[0], *ops[1]);
    case Opcode::kScatter: NEED(ops.size()); return EvalScatter(*this, inst, ops);
    case Opcode::kSort: NEED(ops.size()); return EvalSort(*this, inst, ops);
    case Opcode::kMap: NEED(ops.size()); return EvalMap(*this, inst, ops);
    case Opcode::kTuple: {
      std::vector<Tensor> elems;
      elems.reserve(ops.size());
      for (const Tensor* t : ops) elems.push_back(*t);
      return Tensor::Tuple(std::move(elems));
    }
    case Opcode::kGetTupleElement: {
      if (ops.size() != 1 || !ops[0]->IsTuple()) return Error("operand is not a tuple");
      if (inst.tuple_index < 0 || inst.tuple_index >= ops[0]->element_count())
        return Error("tuple index " + std::to_string(inst.tuple_index) + " out of range");
      return ops[0]->element(inst.tuple_index);
    }
    case Opcode::kCopy:
    case Opcode::kOptimizationBarrier:
    case Opcode::kDomain:
    case Opcode::kSetDimensionSize:
      if (ops.empty()) return Error("no operand");
      return *ops[0];
    case Opcode::kCopyStart: {
      if (ops.empty()) return Error("no operand");
      if (inst.shape().IsTuple()) {
        Tensor t(inst.shape());
        auto& el = t.mutable_elements();
        if (el.size() >= 2) { el[0] = *ops[0]; el[1] = *ops[0]; }
        return t;
      }
      return *ops[0];
    }
    case Opcode::kCopyDone: {
      if (ops.empty()) return Error("no operand");
      if (ops[0]->IsTuple() && ops[0]->element_count() > 0) return ops[0]->element(0);
      return *ops[0];
    }
    case Opcode::kAfterAll: return Tensor::Token();
    // Host transfers: outfeed's data leaves the device (the device sees only the token it returns);
    // infeed's comes from a host the evaluator does not have.
    case Opcode::kOutfeed: return Tensor::Token();
    case Opcode::kInfeed: return Error("infeed reads data its host streams in at run time; the evaluator has no host to read it from");
    case Opcode::kPartitionId: return Tensor::Scalar(inst.shape().IsArray() ? inst.shape().type : PrimitiveType::kU32, static_cast<double>(options_.partition_id));
    case Opcode::kReplicaId: return Tensor::Scalar(inst.shape().IsArray() ? inst.shape().type : PrimitiveType::kU32, static_cast<double>(options_.replica_id));
    case Opcode::kGetDimensionSize: {
      NEED(1);
      const int64_t d = inst.dimensions.empty() ? 0 : inst.dimensions[0];
      if (d < 0 || d >= ops[0]->rank()) return Error("dimension out of range");
      return Tensor::Scalar(inst.shape().IsArray() ? inst.shape().type : PrimitiveType::kS32, static_cast<double>(ops[0]->dim(d)));
    }
    case Opcode::kCall: {
      if (!inst.to_apply()) return Error("call has no to_apply computation");
      std::vector<Tensor> args;
      for (const Tensor* t : ops) args.push_back(*t);
      return EvaluateComputation(*inst.to_apply(), args);
    }
    case Opcode::kWhile: {
      const Computation* cond = inst.while_condition();
      const Computation* body = inst.while_body();
      if (!cond || !body) return Error("while needs condition and body computations");
      if (ops.size() != 1) return Error("while takes one operand");
      Tensor state = *ops[0];
      for (int64_t it = 0;; ++it) {
        if (it >= options_.max_while_iterations)
          return Error("while loop ran more than " + std::to_string(options_.max_while_iterations) + " iterations");
        auto c = EvaluateComputation(*cond, {state});
        if (!c.ok()) return c.error();
        if (!c->IsArray() || c->size() != 1) return Error("while condition must return a pred scalar");
        if (c->GetInt(0) == 0) break;
        auto b = EvaluateComputation(*body, {std::move(state)});
        if (!b.ok()) return b.error();
        state = std::move(b.value());
      }
      return state;
    }
    case Opcode::kConditional: {
      if (ops.empty() || !IsArrayOf(ops[0]) || ops[0]->size() != 1) return Error("conditional needs a scalar predicate / index");
      const auto& branches = inst.called_computations();
      if (branches.empty()) return Error("conditional has no branch computations");
      int64_t b = 0;
      if (ops[0]->type() == PrimitiveType::kPred) {
        b = ops[0]->GetInt(0) ? 0 : 1;
        if (branches.size() != 2) return Error("pred conditional needs true and false computations");
      } else {
        b = ops[0]->GetInt(0);
        if (b < 0 || b >= static_cast<int64_t>(branches.size())) b = static_cast<int64_t>(branches.size()) - 1;
      }
      const Computation* c = branches[static_cast<size_t>(b)];
      if (!c) return Error("missing branch computation");
      std::vector<Tensor> args;
      if (static_cast<size_t>(b) + 1 < ops.size()) args.push_back(*ops[static_cast<size_t>(b) + 1]);
      return EvaluateComputation(*c, args);
    }
    case Opcode::kCustomCall: {
      const std::string& target = inst.custom_call_target;
      if (target == "Sharding" || target == "SPMDFullToShardShape" || target == "SPMDShardToFullShape" ||
          target == "ShardBarrierFrom" || target == "ShardBarrierTo" || target == "X64Combine" || target == "MoveToHost" ||
          target == "MoveToDevice" || target == "AllocateBuffer" || target == "LayoutConstraint") {
        if (ops.empty()) return Error("custom-call " + target + " has no operand");
        if (ops[0]->shape().Compatible(inst.shape())) return *ops[0];
        if (target == "SPMDFullToShardShape" && inst.operand(0)->has_sharding() && ops[0]->IsArray() && inst.shape().IsArray())
          return TileOf(*ops[0], *inst.operand(0)->sharding(), options_.partition_id, inst.shape());
        return Error("custom-call " + target + " changes the shape from " + ops[0]->shape().ToString(false) + " to " +
                     inst.shape().ToString(false) + "; on one device that is not defined");
      }
      if (target == "TopK") return EvalTopK(inst, ops);
      if (target == "_SPMDInternalOp_RotateRight") return EvalRotateRight(inst, ops);
      return Error("custom-call target \"" + target + "\" is not supported by the evaluator");
    }
    case Opcode::kRng: {
      NEED(2);
      if (ops[0]->size() != 1 || ops[1]->size() != 1) return Error("rng bounds must be scalars");
      Tensor out(inst.shape());
      std::string dist = "rng_uniform";
      for (const auto& ra : inst.raw_attributes)
        if (ra.key == "distribution") dist = ra.value;
      const double a = ops[0]->GetDouble(0), b = ops[1]->GetDouble(0);
      if (dist.find("normal") != std::string::npos) {
        std::normal_distribution<double> nd(a, b > 0 ? b : 1.0);
        for (int64_t i = 0; i < out.size(); ++i) out.SetDouble(i, nd(rng_));
      } else if (out.storage() == Storage::kInt) {
        const int64_t lo = ops[0]->GetInt(0), hi = ops[1]->GetInt(0);
        for (int64_t i = 0; i < out.size(); ++i) {
          const uint64_t span = hi > lo ? static_cast<uint64_t>(hi - lo) : 1;
          out.SetInt(i, lo + static_cast<int64_t>(rng_() % span));
        }
      } else {
        for (int64_t i = 0; i < out.size(); ++i) {
          const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
          out.SetDouble(i, a + (b - a) * u);
        }
      }
      return out;
    }
    case Opcode::kParameter: return Error("parameters are bound by EvaluateComputation");
    default: break;
  }
  if (op == Opcode::kGeneric && inst.opcode_text() == "add-dependency" && !ops.empty()) return *ops[0];
  return Error("op '" + inst.opcode_text() + "' is not supported by the evaluator");
#undef NEED
}

Result<std::vector<int64_t>> ManualBlockIndex(const HloSharding& sharding, const std::vector<int64_t>& full,
                                              const std::vector<int64_t>& piece, int64_t device) {
  const int64_t r = static_cast<int64_t>(full.size());
  if (static_cast<int64_t>(piece.size()) != r) return Error("manual shard rank differs from the full rank");
  std::vector<int64_t> block(static_cast<size_t>(r), 0);
  const bool tiled = sharding.IsTiled() && sharding.TiledDataRank() == r;
  std::vector<int64_t> index;
  if (tiled) {
    index = sharding.tile_assignment().IndexOfDevice(device);
    if (static_cast<int64_t>(index.size()) < r)
      return Error("device " + std::to_string(device) + " is not in the tile assignment of " + sharding.ToString());
  }
  for (int64_t d = 0; d < r; ++d) {
    const int64_t f = full[static_cast<size_t>(d)], p = piece[static_cast<size_t>(d)];
    if (p <= 0 || p > f) return Error("manual shard dim " + std::to_string(p) + " does not fit full dim " + std::to_string(f));
    const int64_t split = (f + p - 1) / p;
    if (split == 1) continue;
    const int64_t tiles = tiled ? sharding.tile_assignment().dim(d) : 1;
    if (tiles % split != 0)
      return Error("sharding " + sharding.ToString() + " splits dim " + std::to_string(d) + " " + std::to_string(tiles) +
                   " ways, which does not refine the manual split of " + std::to_string(f) + " into blocks of " + std::to_string(p));
    block[static_cast<size_t>(d)] = index[static_cast<size_t>(d)] / (tiles / split);
  }
  return block;
}

std::vector<int64_t> ManualGroupKey(const HloSharding& sharding, int64_t device) {
  std::vector<int64_t> key;
  if (!sharding.IsTiled()) return key;
  const auto index = sharding.tile_assignment().IndexOfDevice(device);
  const int64_t data = sharding.TiledDataRank();
  const auto& types = sharding.subgroup_types();
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i] == HloSharding::SubgroupType::kManual && static_cast<size_t>(data) + i < index.size())
      key.push_back(index[static_cast<size_t>(data) + i]);
  return key;
}

Result<Tensor> CombineElementwise(Evaluator& ev, const Computation& fn, const std::vector<const Tensor*>& values) {
  if (values.empty() || !values[0]) return Error("nothing to combine");
  const Tensor& v0 = *values[0];
  if (!IsArrayOf(&v0)) return Error("can only combine arrays");
  for (const Tensor* v : values)
    if (!v || v->type() != v0.type() || v->dims() != v0.dims())
      return Error("combined buffers differ in shape: " + v0.shape().ToString(false) + " vs " +
                   (v ? v->shape().ToString(false) : std::string("none")));
  Tensor out(v0.shape());
  const int64_t n = v0.size();
  if (auto op = SimpleBinaryReducer(&fn)) {
    if (v0.storage() == Storage::kInt) {
      bool ok = true;
      for (int64_t i = 0; i < n; ++i) {
        int64_t acc = v0.ints()[static_cast<size_t>(i)];
        for (size_t k = 1; k < values.size(); ++k) acc = IntBinary(*op, v0.type(), acc, values[k]->ints()[static_cast<size_t>(i)], ok);
        out.SetInt(i, acc);
      }
      if (!ok) return Error("reducer op not defined for " + std::string(PrimitiveTypeName(v0.type())));
      return out;
    }
    if (*op == Opcode::kAnd || *op == Opcode::kOr || *op == Opcode::kXor) return Error("reducer op not defined for floating-point types");
    for (int64_t i = 0; i < n; ++i) {
      double acc = v0.GetDouble(i);
      for (size_t k = 1; k < values.size(); ++k) acc = ApplyFloatReducer(*op, acc, values[k]->GetDouble(i));
      out.SetDouble(i, acc);
    }
    return out;
  }
  const ScalarProgram* prog = ev.ScalarProgramFor(fn);
  if (ProgramFits(prog, {v0.type(), v0.type()}, {v0.type()})) {
    ScalarValue in[2], res;
    for (int64_t i = 0; i < n; ++i) {
      res = ReadSV(v0, i);
      for (size_t k = 1; k < values.size(); ++k) {
        in[0] = res;
        in[1] = ReadSV(*values[k], i);
        prog->Run(in, &res);
      }
      WriteSV(out, i, res);
    }
    return out;
  }
  std::vector<Tensor> args(2);
  args[0] = Tensor(Shape::Scalar(v0.type()));
  args[1] = Tensor(Shape::Scalar(v0.type()));
  for (int64_t i = 0; i < n; ++i) {
    CopyElem(out, i, v0, i);
    for (size_t k = 1; k < values.size(); ++k) {
      CopyElem(args[0], 0, out, i);
      CopyElem(args[1], 0, *values[k], i);
      auto r = CallScalar(ev, fn, args);
      if (!r.ok()) return r.error();
      if (r->size() != 1 || (*r)[0].size() != 1 || (*r)[0].type() != out.type()) return Error("reducer result type mismatch");
      CopyElem(out, i, (*r)[0], 0);
    }
  }
  return out;
}

Result<Tensor> Evaluate(const Module& module, const std::vector<Tensor>& args, const EvalOptions& options) {
  if (!module.entry()) return Error("evaluator: module " + module.name() + " has no entry computation");
  if (ModuleHasCollectives(module)) {
    ClusterOptions co;
    co.rng_seed = options.rng_seed;
    co.max_while_iterations = options.max_while_iterations;
    co.probe_sums = options.probe_sums;
    co.probe_seed = options.probe_seed;
    auto r = RunSpmd(module, 1, {args}, co);
    if (!r.ok()) return r.error();
    return std::move(r.value()[0]);
  }
  Evaluator ev(options);
  return ev.EvaluateModule(module, args);
}

}  // namespace shardscope
