// Shape inference with XLA semantics (xla/service/shape_inference.cc is the behavioural reference;
// no code is taken from it). Every check returns an Error describing the problem in terms of the
// instruction's operands and attributes; the verifier prefixes the instruction's name.
#include "core/ir/shape_inference.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <string>

namespace shardscope {
namespace {

using Dims = std::vector<int64_t>;

std::string DimsStr(const Dims& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(d[i]);
  }
  return s + "}";
}

std::string S(const Shape& s) { return s.ToString(/*print_layout=*/false); }

std::string TypeName(PrimitiveType t) { return std::string(PrimitiveTypeName(t)); }

Error Err(std::string msg) { return Error(std::move(msg)); }

// Shape with the same dims but another element type.
Shape WithType(const Shape& s, PrimitiveType t) {
  Shape r(t, s.dims);
  r.dynamic_dims = s.dynamic_dims;
  return r;
}

Shape Array(PrimitiveType t, Dims d) { return Shape(t, std::move(d)); }

// The instruction's declared element type when it has one (ops whose result type is a choice:
// convert, dot with preferred_element_type, ...), else `fallback`.
PrimitiveType DeclaredType(const Instruction& inst, PrimitiveType fallback) {
  const Shape& s = inst.shape();
  if (s.IsArray() && s.type != PrimitiveType::kInvalid) return s.type;
  return fallback;
}

bool IsPred(PrimitiveType t) { return t == PrimitiveType::kPred; }
bool IsNumeric(PrimitiveType t) { return IsInteger(t) || IsFloatingPoint(t) || IsComplex(t); }

PrimitiveType ComplexComponentType(PrimitiveType t) {
  if (t == PrimitiveType::kC64) return PrimitiveType::kF32;
  if (t == PrimitiveType::kC128) return PrimitiveType::kF64;
  return t;
}

// Checks that `dims` are distinct and within [0, rank). `what` names the attribute.
std::optional<Error> CheckDimList(const Dims& dims, int64_t rank, const std::string& what) {
  std::set<int64_t> seen;
  for (int64_t d : dims) {
    if (d < 0 || d >= rank)
      return Err(what + " " + DimsStr(dims) + " has dimension " + std::to_string(d) +
                 " out of range for rank " + std::to_string(rank));
    if (!seen.insert(d).second)
      return Err(what + " " + DimsStr(dims) + " repeats dimension " + std::to_string(d));
  }
  return std::nullopt;
}

bool IsSortedUnique(const Dims& d) {
  for (size_t i = 1; i < d.size(); ++i)
    if (d[i] <= d[i - 1]) return false;
  return true;
}

bool Contains(const Dims& d, int64_t v) { return std::find(d.begin(), d.end(), v) != d.end(); }

const Module* ModuleOf(const Instruction& inst) {
  return inst.parent() ? inst.parent()->parent() : nullptr;
}

// Operand access with explicit checks (the IR may come from a parser fed arbitrary text).
#define SS_REQUIRE_OPERANDS(n)                                                                      \
  do {                                                                                              \
    if (inst.operand_count() != (n))                                                                \
      return Err(std::string(OpcodeName(op)) + " takes " + std::to_string(n) + " operand" +        \
                 ((n) == 1 ? "" : "s") + ", found " + std::to_string(inst.operand_count()));      \
  } while (0)
#define SS_REQUIRE_AT_LEAST(n)                                                                      \
  do {                                                                                              \
    if (inst.operand_count() < (n))                                                                 \
      return Err(std::string(OpcodeName(op)) + " takes at least " + std::to_string(n) +            \
                 " operand" + ((n) == 1 ? "" : "s") + ", found " +                                  \
                 std::to_string(inst.operand_count()));                                             \
  } while (0)

std::optional<Error> RequireArray(const Shape& s, const std::string& what) {
  if (!s.IsArray()) return Err(what + " must be an array, found " + S(s));
  return std::nullopt;
}

// ---- window arithmetic (reduce-window, convolution, select-and-scatter) ------------------------

int64_t DilatedBound(int64_t bound, int64_t dilation) { return bound == 0 ? 0 : (bound - 1) * dilation + 1; }
int64_t StridedBound(int64_t bound, int64_t window, int64_t stride) {
  if (window > bound) return 0;
  return (bound - window) / stride + 1;
}

Result<Dims> WindowOutput(const Dims& base, const Window& window, const std::string& what) {
  if (window.dims.size() != base.size())
    return Err(what + " window has " + std::to_string(window.dims.size()) + " dimensions but the operand has " +
               std::to_string(base.size()) + " (spatial) dimensions");
  Dims out(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    const WindowDimension& w = window.dims[i];
    if (w.size < 1) return Err(what + " window size in dimension " + std::to_string(i) + " must be >= 1, found " + std::to_string(w.size));
    if (w.stride < 1) return Err(what + " window stride in dimension " + std::to_string(i) + " must be >= 1, found " + std::to_string(w.stride));
    if (w.base_dilation < 1 || w.window_dilation < 1)
      return Err(what + " window dilation in dimension " + std::to_string(i) + " must be >= 1");
    const int64_t padded = DilatedBound(base[i], w.base_dilation) + w.padding_low + w.padding_high;
    if (padded < 0)
      return Err(what + " negative padding leaves dimension " + std::to_string(i) + " with negative size");
    out[i] = StridedBound(padded, DilatedBound(w.size, w.window_dilation), w.stride);
  }
  return out;
}

// ---- called computations -------------------------------------------------------------------------

std::optional<Error> RequireCalled(const Instruction& inst, size_t n, const char* role) {
  const auto& c = inst.called_computations();
  if (c.size() != n)
    return Err(std::string(OpcodeName(inst.opcode())) + " needs " + std::to_string(n) + " called computation" +
               (n == 1 ? "" : "s") + " (" + role + "), found " + std::to_string(c.size()));
  for (size_t i = 0; i < c.size(); ++i)
    if (!c[i] || !c[i]->root())
      return Err(std::string(OpcodeName(inst.opcode())) + " " + role + " computation " +
                 (c[i] ? c[i]->name() + " has no root" : std::string("is missing")));
  return std::nullopt;
}

// Parameter shape i of a computation, or nullptr if absent.
const Shape* ParamShape(const Computation* c, size_t i) {
  if (!c || i >= c->parameters().size() || !c->parameters()[i]) return nullptr;
  return &c->parameters()[i]->shape();
}

// Same dims and element type, except that two floating-point types count as the same (XLA checks
// reducer signatures ignoring floating-point precision: a bf16 reduce may use an f32 adder).
bool CompatibleIgnoringFpPrecision(const Shape& a, const Shape& b) {
  if (a.IsTuple() || b.IsTuple()) {
    if (!a.IsTuple() || !b.IsTuple() || a.tuple.size() != b.tuple.size()) return false;
    for (size_t i = 0; i < a.tuple.size(); ++i)
      if (!CompatibleIgnoringFpPrecision(a.tuple[i], b.tuple[i])) return false;
    return true;
  }
  if (a.dims != b.dims) return false;
  return a.type == b.type || (IsFloatingPoint(a.type) && IsFloatingPoint(b.type));
}

// Checks a reducer-like computation: `params` scalar parameters of the given types, root equal to
// `root` (a scalar or a tuple of scalars).
std::optional<Error> CheckScalarComputation(const Computation* c, const std::vector<PrimitiveType>& param_types,
                                            const Shape& root, const std::string& role) {
  if (!c) return Err(role + " computation is missing");
  if (c->parameters().size() != param_types.size())
    return Err(role + " computation " + c->name() + " must take " + std::to_string(param_types.size()) +
               " parameters, found " + std::to_string(c->parameters().size()));
  for (size_t i = 0; i < param_types.size(); ++i) {
    const Shape* p = ParamShape(c, i);
    if (!p) return Err(role + " computation " + c->name() + " is missing parameter " + std::to_string(i));
    Shape want = Shape::Scalar(param_types[i]);
    if (!CompatibleIgnoringFpPrecision(*p, want))
      return Err(role + " computation " + c->name() + " parameter " + std::to_string(i) + " must be " + S(want) +
                 ", found " + S(*p));
  }
  if (!c->root()) return Err(role + " computation " + c->name() + " has no root");
  if (!CompatibleIgnoringFpPrecision(c->root()->shape(), root))
    return Err(role + " computation " + c->name() + " must return " + S(root) + ", found " + S(c->root()->shape()));
  return std::nullopt;
}

// ---- collectives ------------------------------------------------------------------------------------

// Number of participants in each group of a collective, following XLA's group modes.
Result<int64_t> CollectiveGroupSize(const Instruction& inst) {
  const Module* m = ModuleOf(inst);
  const int64_t replicas = m ? std::max<int64_t>(1, m->num_replicas) : 1;
  const int64_t partitions = m ? std::max<int64_t>(1, m->num_partitions) : 1;
  const auto& groups = inst.replica_groups.groups;
  int64_t first = -1;
  if (!groups.empty()) {
    first = static_cast<int64_t>(groups[0].size());
    for (size_t i = 1; i < groups.size(); ++i)
      if (static_cast<int64_t>(groups[i].size()) != first)
        return Err("replica_groups have different sizes (" + std::to_string(first) + " and " +
                   std::to_string(groups[i].size()) + ")");
    if (first == 0) return Err("replica_groups contain an empty group");
  }
  const bool has_channel = inst.channel_id.has_value();
  const Opcode op = inst.opcode();
  const bool partition_only = op == Opcode::kAllToAll || op == Opcode::kCollectivePermute;
  if (!has_channel) {
    if (inst.use_global_device_ids) return Err("use_global_device_ids=true requires a channel_id");
    return first >= 0 ? first : replicas;
  }
  if (inst.use_global_device_ids) {
    if (first < 0) return Err("use_global_device_ids=true requires non-empty replica_groups");
    return first;
  }
  if (partition_only) return first >= 0 ? first : partitions;
  // Cross-replica-and-partition: groups name replicas; every partition takes part.
  return (first >= 0 ? first : replicas) * partitions;
}

std::optional<Error> CheckReplicaGroupIds(const Instruction& inst) {
  std::set<int64_t> seen;
  for (const auto& g : inst.replica_groups.groups)
    for (int64_t id : g) {
      if (id < 0) return Err("replica_groups contain negative id " + std::to_string(id));
      if (!seen.insert(id).second) return Err("replica_groups contain id " + std::to_string(id) + " twice");
    }
  return std::nullopt;
}

// ---- per-family inference ----------------------------------------------------------------------------

Result<Shape> InferUnary(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(1);
  const Shape& a = inst.operand(0)->shape();
  const std::string name(OpcodeName(op));
  if (op == Opcode::kCopy) return a;  // any shape, tuples included
  if (auto e = RequireArray(a, name + " operand")) return *e;
  const PrimitiveType t = a.type;
  switch (op) {
    case Opcode::kConvert: {
      PrimitiveType to = DeclaredType(inst, t);
      return WithType(a, to);
    }
    case Opcode::kBitcastConvert: {
      if (!inst.shape().IsArray() || inst.shape().type == PrimitiveType::kInvalid)
        return Err("bitcast-convert result must be an array, found " + S(inst.shape()));
      const PrimitiveType to = inst.shape().type;
      const int64_t from_bits = PrimitiveTypeBitWidth(t), to_bits = PrimitiveTypeBitWidth(to);
      if (from_bits == to_bits) return WithType(a, to);
      if (from_bits > to_bits) {
        if (from_bits % to_bits) return Err("bitcast-convert from " + TypeName(t) + " to " + TypeName(to) + ": bit widths do not divide");
        Dims d = a.dims;
        d.push_back(from_bits / to_bits);
        return Array(to, d);
      }
      if (to_bits % from_bits) return Err("bitcast-convert from " + TypeName(t) + " to " + TypeName(to) + ": bit widths do not divide");
      if (a.dims.empty() || a.dims.back() != to_bits / from_bits)
        return Err("bitcast-convert from " + TypeName(t) + " to " + TypeName(to) + " needs a last dimension of " +
                   std::to_string(to_bits / from_bits) + ", operand is " + S(a));
      Dims d = a.dims;
      d.pop_back();
      return Array(to, d);
    }
    case Opcode::kIsFinite:
      if (!IsFloatingPoint(t)) return Err("is-finite needs a floating-point operand, found " + S(a));
      return WithType(a, PrimitiveType::kPred);
    case Opcode::kAbs:
      if (!IsNumeric(t)) return Err("abs needs a numeric operand, found " + S(a));
      return WithType(a, ComplexComponentType(t));
    case Opcode::kReal: case Opcode::kImag:
      if (!IsFloatingPoint(t) && !IsComplex(t)) return Err(name + " needs a floating-point or complex operand, found " + S(a));
      return WithType(a, ComplexComponentType(t));
    case Opcode::kNot:
      if (!IsPred(t) && !IsInteger(t)) return Err("not needs a pred or integer operand, found " + S(a));
      return a;
    case Opcode::kPopcnt: case Opcode::kClz:
      if (!IsInteger(t)) return Err(name + " needs an integer operand, found " + S(a));
      return a;
    case Opcode::kNegate: case Opcode::kSign:
      if (!IsNumeric(t)) return Err(name + " needs a numeric operand, found " + S(a));
      return a;
    case Opcode::kFloor: case Opcode::kCeil: case Opcode::kRoundNearestAfz: case Opcode::kRoundNearestEven:
    case Opcode::kReducePrecision:
      if (!IsFloatingPoint(t)) return Err(name + " needs a floating-point operand, found " + S(a));
      return a;
    default:
      // Transcendentals: exp, log, tanh, sqrt, rsqrt, ...
      if (!IsFloatingPoint(t) && !IsComplex(t))
        return Err(name + " needs a floating-point or complex operand, found " + S(a));
      return a;
  }
}

Result<Shape> InferBinary(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(2);
  const Shape& a = inst.operand(0)->shape();
  const Shape& b = inst.operand(1)->shape();
  const std::string name(OpcodeName(op));
  if (auto e = RequireArray(a, name + " lhs")) return *e;
  if (auto e = RequireArray(b, name + " rhs")) return *e;
  if (a.dims != b.dims)
    return Err(name + " operands must have the same dimensions, found " + S(a) + " and " + S(b));
  if (op == Opcode::kStochasticConvert) {
    PrimitiveType to = DeclaredType(inst, a.type);
    return WithType(a, to);
  }
  if (a.type != b.type)
    return Err(name + " operands must have the same element type, found " + S(a) + " and " + S(b));
  const PrimitiveType t = a.type;
  switch (op) {
    case Opcode::kCompare:
      return WithType(a, PrimitiveType::kPred);
    case Opcode::kAnd: case Opcode::kOr: case Opcode::kXor:
      if (!IsPred(t) && !IsInteger(t)) return Err(name + " needs pred or integer operands, found " + S(a));
      return a;
    case Opcode::kShiftLeft: case Opcode::kShiftRightArithmetic: case Opcode::kShiftRightLogical:
      if (!IsInteger(t)) return Err(name + " needs integer operands, found " + S(a));
      return a;
    case Opcode::kComplex:
      if (t == PrimitiveType::kF32) return WithType(a, PrimitiveType::kC64);
      if (t == PrimitiveType::kF64) return WithType(a, PrimitiveType::kC128);
      return Err("complex needs f32 or f64 operands, found " + S(a));
    case Opcode::kAtan2:
      if (!IsFloatingPoint(t) && !IsComplex(t)) return Err("atan2 needs floating-point operands, found " + S(a));
      return a;
    default:
      if (!IsNumeric(t)) return Err(name + " needs numeric operands, found " + S(a));
      return a;
  }
}

Result<Shape> InferSelect(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(3);
  const Shape& p = inst.operand(0)->shape();
  const Shape& t = inst.operand(1)->shape();
  const Shape& f = inst.operand(2)->shape();
  if (!p.IsArray() || p.type != PrimitiveType::kPred) return Err("select predicate must be a pred array, found " + S(p));
  if (!t.Compatible(f)) return Err("select branches must have the same shape, found " + S(t) + " and " + S(f));
  if (!t.IsArray()) return Err("select branches must be arrays, found " + S(t));
  if (p.rank() != 0 && p.dims != t.dims)
    return Err("select predicate " + S(p) + " must have the dimensions of the branches " + S(t));
  return t;
}

Result<Shape> InferClamp(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(3);
  const Shape& lo = inst.operand(0)->shape();
  const Shape& x = inst.operand(1)->shape();
  const Shape& hi = inst.operand(2)->shape();
  if (auto e = RequireArray(x, "clamp operand")) return *e;
  for (const Shape* b : {&lo, &hi}) {
    if (!b->IsArray() || b->type != x.type || (b->rank() != 0 && b->dims != x.dims))
      return Err("clamp bounds must be scalars or match the operand " + S(x) + ", found " + S(*b));
  }
  return x;
}

Result<Shape> InferBroadcast(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(1);
  const Shape& a = inst.operand(0)->shape();
  const Shape& out = inst.shape();
  if (auto e = RequireArray(a, "broadcast operand")) return *e;
  if (!out.IsArray()) return Err("broadcast result must be an array, found " + S(out));
  if (static_cast<int64_t>(inst.dimensions.size()) != a.rank())
    return Err("broadcast dimensions " + DimsStr(inst.dimensions) + " must have one entry per operand dimension (operand " +
               S(a) + ")");
  if (auto e = CheckDimList(inst.dimensions, out.rank(), "broadcast dimensions")) return *e;
  for (int64_t i = 0; i < a.rank(); ++i) {
    const int64_t o = inst.dimensions[static_cast<size_t>(i)];
    if (out.dim(o) != a.dim(i))
      return Err("broadcast maps operand dimension " + std::to_string(i) + " (size " + std::to_string(a.dim(i)) +
                 ") to result dimension " + std::to_string(o) + " of size " + std::to_string(out.dim(o)));
  }
  return Array(a.type, out.dims);
}

Result<Shape> InferReshape(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(1);
  const Shape& a = inst.operand(0)->shape();
  const Shape& out = inst.shape();
  if (auto e = RequireArray(a, "reshape operand")) return *e;
  if (!out.IsArray()) return Err("reshape result must be an array, found " + S(out));
  for (int64_t d : out.dims)
    if (d < 0) return Err("reshape result has negative dimension in " + S(out));
  if (a.ElementCount() != out.ElementCount())
    return Err("reshape from " + S(a) + " (" + std::to_string(a.ElementCount()) + " elements) to " +
               DimsStr(out.dims) + " (" + std::to_string(out.ElementCount()) + " elements) changes the element count");
  return Array(a.type, out.dims);
}

Result<Shape> InferTranspose(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(1);
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "transpose operand")) return *e;
  const Dims& perm = inst.dimensions;
  if (static_cast<int64_t>(perm.size()) != a.rank())
    return Err("transpose dimensions " + DimsStr(perm) + " must be a permutation of the operand's " +
               std::to_string(a.rank()) + " dimensions");
  if (auto e = CheckDimList(perm, a.rank(), "transpose dimensions")) return *e;
  Dims d(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) d[i] = a.dim(perm[i]);
  return Array(a.type, d);
}

Result<Shape> InferSlice(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(1);
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "slice operand")) return *e;
  const SliceSpec& s = inst.slice;
  const size_t r = static_cast<size_t>(a.rank());
  if (s.starts.size() != r || s.limits.size() != r || (!s.strides.empty() && s.strides.size() != r))
    return Err("slice needs " + std::to_string(r) + " start/limit/stride entries for operand " + S(a) + ", found " +
               std::to_string(s.starts.size()) + "/" + std::to_string(s.limits.size()) + "/" +
               std::to_string(s.strides.size()));
  Dims d(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t st = s.starts[i], lim = s.limits[i], stride = s.strides.empty() ? 1 : s.strides[i];
    if (stride < 1) return Err("slice stride in dimension " + std::to_string(i) + " must be >= 1, found " + std::to_string(stride));
    if (st < 0 || st > lim || lim > a.dims[i])
      return Err("slice [" + std::to_string(st) + ":" + std::to_string(lim) + "] in dimension " + std::to_string(i) +
                 " is out of bounds for size " + std::to_string(a.dims[i]) + " (need 0 <= start <= limit <= size)");
    d[i] = (lim - st + stride - 1) / stride;
  }
  return Array(a.type, d);
}

std::optional<Error> CheckIndexOperands(const Instruction& inst, int64_t first, int64_t rank, const std::string& name) {
  const int64_t n = inst.operand_count() - first;
  if (n == 1 && rank != 1) {
    // Old form: one rank-1 index vector.
    const Shape& idx = inst.operand(first)->shape();
    if (!idx.IsArray() || !IsInteger(idx.type) || idx.rank() != 1 || idx.dim(0) != rank)
      return Err(name + " takes one scalar integer index per operand dimension (" + std::to_string(rank) +
                 "), found one index operand " + S(idx));
    return std::nullopt;
  }
  if (n != rank)
    return Err(name + " takes one scalar index per operand dimension (" + std::to_string(rank) + "), found " +
               std::to_string(n));
  PrimitiveType t = PrimitiveType::kInvalid;
  for (int64_t i = first; i < inst.operand_count(); ++i) {
    const Shape& idx = inst.operand(i)->shape();
    if (!idx.IsArray() || !IsInteger(idx.type) || idx.rank() != 0)
      return Err(name + " index operand " + std::to_string(i) + " must be an integer scalar, found " + S(idx));
    if (t != PrimitiveType::kInvalid && idx.type != t)
      return Err(name + " index operands must all have the same type, found " + TypeName(t) + " and " + TypeName(idx.type));
    t = idx.type;
  }
  return std::nullopt;
}

Result<Shape> InferDynamicSlice(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(2);
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "dynamic-slice operand")) return *e;
  if (auto e = CheckIndexOperands(inst, 1, a.rank(), "dynamic-slice")) return *e;
  Dims sizes = inst.dynamic_slice_sizes;
  if (static_cast<int64_t>(sizes.size()) != a.rank())
    return Err("dynamic_slice_sizes " + DimsStr(sizes) + " must have one entry per operand dimension of " + S(a));
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] < 0 || sizes[i] > a.dims[i])
      return Err("dynamic_slice_sizes " + DimsStr(sizes) + " exceed operand " + S(a) + " in dimension " + std::to_string(i));
  return Array(a.type, sizes);
}

Result<Shape> InferDynamicUpdateSlice(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(3);
  const Shape& a = inst.operand(0)->shape();
  const Shape& u = inst.operand(1)->shape();
  if (auto e = RequireArray(a, "dynamic-update-slice operand")) return *e;
  if (auto e = RequireArray(u, "dynamic-update-slice update")) return *e;
  if (u.rank() != a.rank() || u.type != a.type)
    return Err("dynamic-update-slice update " + S(u) + " must have the rank and type of the operand " + S(a));
  for (int64_t i = 0; i < a.rank(); ++i)
    if (u.dim(i) > a.dim(i))
      return Err("dynamic-update-slice update " + S(u) + " is larger than the operand " + S(a) + " in dimension " + std::to_string(i));
  if (auto e = CheckIndexOperands(inst, 2, a.rank(), "dynamic-update-slice")) return *e;
  return a;
}

Result<Shape> InferPad(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(2);
  const Shape& a = inst.operand(0)->shape();
  const Shape& v = inst.operand(1)->shape();
  if (auto e = RequireArray(a, "pad operand")) return *e;
  if (!v.IsArray() || v.rank() != 0 || v.type != a.type)
    return Err("pad value must be a " + TypeName(a.type) + " scalar, found " + S(v));
  if (static_cast<int64_t>(inst.padding.size()) != a.rank())
    return Err("padding has " + std::to_string(inst.padding.size()) + " dimensions, operand " + S(a) + " has " +
               std::to_string(a.rank()));
  Dims d(a.dims.size());
  for (size_t i = 0; i < d.size(); ++i) {
    const PaddingDim& p = inst.padding[i];
    if (p.interior < 0) return Err("interior padding in dimension " + std::to_string(i) + " must be >= 0, found " + std::to_string(p.interior));
    d[i] = p.low + p.high + a.dims[i] + std::max<int64_t>(a.dims[i] - 1, 0) * p.interior;
    if (d[i] < 0) return Err("padding makes dimension " + std::to_string(i) + " negative (" + std::to_string(d[i]) + ")");
  }
  return Array(a.type, d);
}

Result<Shape> InferConcatenate(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(1);
  if (inst.dimensions.size() != 1) return Err("concatenate needs exactly one dimension, found " + DimsStr(inst.dimensions));
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "concatenate operand 0")) return *e;
  const int64_t dim = inst.dimensions[0];
  if (dim < 0 || dim >= a.rank())
    return Err("concatenate dimension " + std::to_string(dim) + " out of range for operand " + S(a));
  Dims d = a.dims;
  for (int64_t i = 1; i < inst.operand_count(); ++i) {
    const Shape& b = inst.operand(i)->shape();
    if (!b.IsArray() || b.rank() != a.rank() || b.type != a.type)
      return Err("concatenate operand " + std::to_string(i) + " " + S(b) + " must have the rank and type of operand 0 " + S(a));
    for (int64_t k = 0; k < a.rank(); ++k)
      if (k != dim && b.dim(k) != a.dim(k))
        return Err("concatenate operand " + std::to_string(i) + " " + S(b) + " differs from operand 0 " + S(a) +
                   " in dimension " + std::to_string(k) + " (only dimension " + std::to_string(dim) + " may differ)");
    d[static_cast<size_t>(dim)] += b.dim(dim);
  }
  return Array(a.type, d);
}

Result<Shape> InferReverse(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(1);
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "reverse operand")) return *e;
  if (auto e = CheckDimList(inst.dimensions, a.rank(), "reverse dimensions")) return *e;
  return a;
}

Result<Shape> InferDot(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(2);
  const Shape& l = inst.operand(0)->shape();
  const Shape& r = inst.operand(1)->shape();
  if (auto e = RequireArray(l, "dot lhs")) return *e;
  if (auto e = RequireArray(r, "dot rhs")) return *e;
  const DotDimensionNumbers& dn = inst.dot_dims;
  if (auto e = CheckDimList(dn.lhs_batch, l.rank(), "dot lhs_batch_dims")) return *e;
  if (auto e = CheckDimList(dn.rhs_batch, r.rank(), "dot rhs_batch_dims")) return *e;
  if (auto e = CheckDimList(dn.lhs_contracting, l.rank(), "dot lhs_contracting_dims")) return *e;
  if (auto e = CheckDimList(dn.rhs_contracting, r.rank(), "dot rhs_contracting_dims")) return *e;
  if (dn.lhs_batch.size() != dn.rhs_batch.size())
    return Err("dot has " + std::to_string(dn.lhs_batch.size()) + " lhs batch dims but " +
               std::to_string(dn.rhs_batch.size()) + " rhs batch dims");
  if (dn.lhs_contracting.size() != dn.rhs_contracting.size())
    return Err("dot has " + std::to_string(dn.lhs_contracting.size()) + " lhs contracting dims but " +
               std::to_string(dn.rhs_contracting.size()) + " rhs contracting dims");
  for (int64_t d : dn.lhs_batch)
    if (Contains(dn.lhs_contracting, d)) return Err("dot lhs dimension " + std::to_string(d) + " is both batch and contracting");
  for (int64_t d : dn.rhs_batch)
    if (Contains(dn.rhs_contracting, d)) return Err("dot rhs dimension " + std::to_string(d) + " is both batch and contracting");
  for (size_t i = 0; i < dn.lhs_batch.size(); ++i)
    if (l.dim(dn.lhs_batch[i]) != r.dim(dn.rhs_batch[i]))
      return Err("dot batch dimension sizes differ: lhs " + S(l) + " dim " + std::to_string(dn.lhs_batch[i]) + " vs rhs " +
                 S(r) + " dim " + std::to_string(dn.rhs_batch[i]));
  for (size_t i = 0; i < dn.lhs_contracting.size(); ++i)
    if (l.dim(dn.lhs_contracting[i]) != r.dim(dn.rhs_contracting[i]))
      return Err("dot contracting dimension sizes differ: lhs " + S(l) + " dim " + std::to_string(dn.lhs_contracting[i]) +
                 " (size " + std::to_string(l.dim(dn.lhs_contracting[i])) + ") vs rhs " + S(r) + " dim " +
                 std::to_string(dn.rhs_contracting[i]) + " (size " + std::to_string(r.dim(dn.rhs_contracting[i])) + ")");
  Dims d;
  for (int64_t b : dn.lhs_batch) d.push_back(l.dim(b));
  for (int64_t i = 0; i < l.rank(); ++i)
    if (!Contains(dn.lhs_batch, i) && !Contains(dn.lhs_contracting, i)) d.push_back(l.dim(i));
  for (int64_t i = 0; i < r.rank(); ++i)
    if (!Contains(dn.rhs_batch, i) && !Contains(dn.rhs_contracting, i)) d.push_back(r.dim(i));
  // The result element type may differ (preferred_element_type); take the declared one.
  PrimitiveType t = DeclaredType(inst, l.type);
  return Array(t, d);
}

Result<Shape> InferConvolution(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(2);
  const Shape& in = inst.operand(0)->shape();
  const Shape& k = inst.operand(1)->shape();
  if (auto e = RequireArray(in, "convolution input")) return *e;
  if (auto e = RequireArray(k, "convolution kernel")) return *e;
  const ConvolutionDimensionNumbers& c = inst.conv_dims;
  const int64_t ns = static_cast<int64_t>(c.input_spatial.size());
  if (static_cast<int64_t>(c.kernel_spatial.size()) != ns || static_cast<int64_t>(c.output_spatial.size()) != ns)
    return Err("convolution dim_labels have " + std::to_string(ns) + " input, " + std::to_string(c.kernel_spatial.size()) +
               " kernel and " + std::to_string(c.output_spatial.size()) + " output spatial dimensions");
  if (in.rank() != ns + 2) return Err("convolution input " + S(in) + " must have rank " + std::to_string(ns + 2) + " per dim_labels");
  if (k.rank() != ns + 2) return Err("convolution kernel " + S(k) + " must have rank " + std::to_string(ns + 2) + " per dim_labels");
  Dims in_l = {c.input_batch, c.input_feature};
  in_l.insert(in_l.end(), c.input_spatial.begin(), c.input_spatial.end());
  Dims k_l = {c.kernel_input_feature, c.kernel_output_feature};
  k_l.insert(k_l.end(), c.kernel_spatial.begin(), c.kernel_spatial.end());
  Dims o_l = {c.output_batch, c.output_feature};
  o_l.insert(o_l.end(), c.output_spatial.begin(), c.output_spatial.end());
  if (auto e = CheckDimList(in_l, ns + 2, "convolution input dim_labels")) return *e;
  if (auto e = CheckDimList(k_l, ns + 2, "convolution kernel dim_labels")) return *e;
  if (auto e = CheckDimList(o_l, ns + 2, "convolution output dim_labels")) return *e;
  const int64_t fgc = inst.feature_group_count, bgc = inst.batch_group_count;
  if (fgc < 1) return Err("feature_group_count must be >= 1, found " + std::to_string(fgc));
  if (bgc < 1) return Err("batch_group_count must be >= 1, found " + std::to_string(bgc));
  if (fgc > 1 && bgc > 1) return Err("feature_group_count and batch_group_count cannot both exceed 1");
  const int64_t in_batch = in.dim(c.input_batch), in_feat = in.dim(c.input_feature);
  const int64_t k_in = k.dim(c.kernel_input_feature), k_out = k.dim(c.kernel_output_feature);
  if (in_feat % fgc)
    return Err("convolution input features (" + std::to_string(in_feat) + ") not divisible by feature_group_count " + std::to_string(fgc));
  if (in_feat / fgc != k_in)
    return Err("convolution input features / feature_group_count (" + std::to_string(in_feat) + "/" + std::to_string(fgc) +
               ") must equal the kernel input features (" + std::to_string(k_in) + ")");
  if (k_out % fgc)
    return Err("convolution kernel output features (" + std::to_string(k_out) + ") not divisible by feature_group_count " + std::to_string(fgc));
  if (in_batch % bgc)
    return Err("convolution input batch (" + std::to_string(in_batch) + ") not divisible by batch_group_count " + std::to_string(bgc));
  if (k_out % bgc)
    return Err("convolution kernel output features (" + std::to_string(k_out) + ") not divisible by batch_group_count " + std::to_string(bgc));
  Window w = inst.window;
  if (!inst.has_window && w.dims.empty()) w.dims.resize(static_cast<size_t>(ns));
  if (static_cast<int64_t>(w.dims.size()) != ns)
    return Err("convolution window has " + std::to_string(w.dims.size()) + " dimensions, expected " + std::to_string(ns));
  Dims base(static_cast<size_t>(ns));
  for (int64_t i = 0; i < ns; ++i) {
    base[static_cast<size_t>(i)] = in.dim(c.input_spatial[static_cast<size_t>(i)]);
    const int64_t ksz = k.dim(c.kernel_spatial[static_cast<size_t>(i)]);
    if (!inst.has_window) w.dims[static_cast<size_t>(i)].size = ksz;
    if (w.dims[static_cast<size_t>(i)].size != ksz)
      return Err("convolution window size " + std::to_string(w.dims[static_cast<size_t>(i)].size) + " in spatial dimension " +
                 std::to_string(i) + " differs from the kernel's " + std::to_string(ksz));
  }
  auto spatial = WindowOutput(base, w, "convolution");
  if (!spatial.ok()) return spatial.error();
  Dims d(static_cast<size_t>(ns + 2));
  d[static_cast<size_t>(c.output_batch)] = in_batch / bgc;
  d[static_cast<size_t>(c.output_feature)] = k_out;
  for (int64_t i = 0; i < ns; ++i) d[static_cast<size_t>(c.output_spatial[static_cast<size_t>(i)])] = (*spatial)[static_cast<size_t>(i)];
  PrimitiveType t = DeclaredType(inst, in.type);
  return Array(t, d);
}

Result<Shape> InferReduce(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(2);
  if (inst.operand_count() % 2) return Err("reduce takes N inputs and N init values, found an odd operand count " + std::to_string(inst.operand_count()));
  if (auto e = RequireCalled(inst, 1, "to_apply")) return *e;
  const int64_t n = inst.operand_count() / 2;
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "reduce input 0")) return *e;
  if (auto e = CheckDimList(inst.dimensions, a.rank(), "reduce dimensions")) return *e;
  std::vector<PrimitiveType> params;
  std::vector<Shape> out, acc;
  Dims kept;
  for (int64_t i = 0; i < a.rank(); ++i)
    if (!Contains(inst.dimensions, i)) kept.push_back(a.dim(i));
  for (int64_t i = 0; i < n; ++i) {
    const Shape& x = inst.operand(i)->shape();
    const Shape& init = inst.operand(n + i)->shape();
    if (!x.IsArray() || x.dims != a.dims)
      return Err("reduce input " + std::to_string(i) + " " + S(x) + " must have the dimensions of input 0 " + S(a));
    if (!init.IsArray() || init.rank() != 0)
      return Err("reduce init value " + std::to_string(i) + " must be a scalar, found " + S(init));
    params.push_back(init.type);
    acc.push_back(init);
    out.push_back(Array(init.type, kept));
  }
  for (int64_t i = 0; i < n; ++i) params.push_back(inst.operand(i)->shape().type);
  Shape root = n == 1 ? acc[0] : Shape::Tuple(acc);
  if (auto e = CheckScalarComputation(inst.to_apply(), params, root, "reduce to_apply")) return *e;
  return n == 1 ? out[0] : Shape::Tuple(out);
}

Result<Shape> InferReduceWindow(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(2);
  if (inst.operand_count() % 2) return Err("reduce-window takes N inputs and N init values, found an odd operand count " + std::to_string(inst.operand_count()));
  if (auto e = RequireCalled(inst, 1, "to_apply")) return *e;
  const int64_t n = inst.operand_count() / 2;
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "reduce-window input 0")) return *e;
  auto dims = WindowOutput(a.dims, inst.window, "reduce-window");
  if (!dims.ok()) return dims.error();
  std::vector<PrimitiveType> params;
  std::vector<Shape> out, acc;
  for (int64_t i = 0; i < n; ++i) {
    const Shape& x = inst.operand(i)->shape();
    const Shape& init = inst.operand(n + i)->shape();
    if (!x.IsArray() || x.dims != a.dims)
      return Err("reduce-window input " + std::to_string(i) + " " + S(x) + " must have the dimensions of input 0 " + S(a));
    if (!init.IsArray() || init.rank() != 0)
      return Err("reduce-window init value " + std::to_string(i) + " must be a scalar, found " + S(init));
    params.push_back(init.type);
    acc.push_back(init);
    out.push_back(Array(init.type, *dims));
  }
  for (int64_t i = 0; i < n; ++i) params.push_back(inst.operand(i)->shape().type);
  Shape root = n == 1 ? acc[0] : Shape::Tuple(acc);
  if (auto e = CheckScalarComputation(inst.to_apply(), params, root, "reduce-window to_apply")) return *e;
  return n == 1 ? out[0] : Shape::Tuple(out);
}

Result<Shape> InferSelectAndScatter(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(3);
  if (auto e = RequireCalled(inst, 2, "select, scatter")) return *e;
  const Shape& a = inst.operand(0)->shape();
  const Shape& src = inst.operand(1)->shape();
  const Shape& init = inst.operand(2)->shape();
  if (auto e = RequireArray(a, "select-and-scatter operand")) return *e;
  if (!init.IsArray() || init.rank() != 0 || init.type != a.type)
    return Err("select-and-scatter init value must be a " + TypeName(a.type) + " scalar, found " + S(init));
  auto dims = WindowOutput(a.dims, inst.window, "select-and-scatter");
  if (!dims.ok()) return dims.error();
  if (!src.IsArray() || src.dims != *dims || src.type != a.type)
    return Err("select-and-scatter source must be " + S(Array(a.type, *dims)) + " (the windowed operand), found " + S(src));
  const Computation* sel = inst.called_computations()[0];
  const Computation* sc = inst.called_computations()[1];
  if (auto e = CheckScalarComputation(sel, {a.type, a.type}, Shape::Scalar(PrimitiveType::kPred), "select-and-scatter select")) return *e;
  if (auto e = CheckScalarComputation(sc, {a.type, a.type}, Shape::Scalar(a.type), "select-and-scatter scatter")) return *e;
  return a;
}

Result<Shape> InferGather(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(2);
  const Shape& a = inst.operand(0)->shape();
  const Shape& idx = inst.operand(1)->shape();
  if (auto e = RequireArray(a, "gather operand")) return *e;
  if (!idx.IsArray() || !IsInteger(idx.type)) return Err("gather start_indices must be an integer array, found " + S(idx));
  const GatherDimensionNumbers& g = inst.gather_dims;
  const int64_t ivd = g.index_vector_dim;
  if (ivd < 0 || ivd > idx.rank())
    return Err("gather index_vector_dim " + std::to_string(ivd) + " out of range for start_indices " + S(idx));
  const int64_t index_vector_size = ivd == idx.rank() ? 1 : idx.dim(ivd);
  Dims batch;
  for (int64_t i = 0; i < idx.rank(); ++i)
    if (i != ivd) batch.push_back(idx.dim(i));
  const int64_t out_rank = static_cast<int64_t>(g.offset_dims.size() + batch.size());
  if (!IsSortedUnique(g.offset_dims)) return Err("gather offset_dims " + DimsStr(g.offset_dims) + " must be sorted and unique");
  if (auto e = CheckDimList(g.offset_dims, out_rank, "gather offset_dims")) return *e;
  if (!IsSortedUnique(g.collapsed_slice_dims)) return Err("gather collapsed_slice_dims " + DimsStr(g.collapsed_slice_dims) + " must be sorted and unique");
  if (auto e = CheckDimList(g.collapsed_slice_dims, a.rank(), "gather collapsed_slice_dims")) return *e;
  if (auto e = CheckDimList(g.operand_batching_dims, a.rank(), "gather operand_batching_dims")) return *e;
  if (auto e = CheckDimList(g.start_indices_batching_dims, idx.rank(), "gather start_indices_batching_dims")) return *e;
  if (g.operand_batching_dims.size() != g.start_indices_batching_dims.size())
    return Err("gather operand_batching_dims and start_indices_batching_dims must have the same length");
  if (Contains(g.start_indices_batching_dims, ivd)) return Err("gather start_indices_batching_dims contains index_vector_dim");
  for (size_t k = 0; k < g.operand_batching_dims.size(); ++k) {
    const int64_t od = g.operand_batching_dims[k], id = g.start_indices_batching_dims[k];
    if (a.dim(od) != idx.dim(id))
      return Err("gather operand batching dimension " + std::to_string(od) + " (size " + std::to_string(a.dim(od)) +
                 ") and start_indices batching dimension " + std::to_string(id) + " (size " + std::to_string(idx.dim(id)) +
                 ") must have the same size");
  }
  if (static_cast<int64_t>(g.start_index_map.size()) != index_vector_size)
    return Err("gather start_index_map " + DimsStr(g.start_index_map) + " must have " + std::to_string(index_vector_size) +
               " entries (the index vector size)");
  if (auto e = CheckDimList(g.start_index_map, a.rank(), "gather start_index_map")) return *e;
  if (static_cast<int64_t>(inst.gather_slice_sizes.size()) != a.rank())
    return Err("gather slice_sizes " + DimsStr(inst.gather_slice_sizes) + " must have one entry per operand dimension of " + S(a));
  if (static_cast<int64_t>(g.offset_dims.size() + g.collapsed_slice_dims.size() + g.operand_batching_dims.size()) != a.rank())
    return Err("gather offset_dims + collapsed_slice_dims + operand_batching_dims must cover the operand's " +
               std::to_string(a.rank()) + " dimensions");
  Dims offsets;
  for (int64_t i = 0; i < a.rank(); ++i) {
    const int64_t s = inst.gather_slice_sizes[static_cast<size_t>(i)];
    if (s < 0 || s > a.dim(i))
      return Err("gather slice size " + std::to_string(s) + " in dimension " + std::to_string(i) + " exceeds operand " + S(a));
    const bool collapsed = Contains(g.collapsed_slice_dims, i) || Contains(g.operand_batching_dims, i);
    if (collapsed && s > 1)
      return Err("gather collapses operand dimension " + std::to_string(i) + " whose slice size is " + std::to_string(s) + " (must be <= 1)");
    if (!collapsed) offsets.push_back(s);
  }
  Dims d(static_cast<size_t>(out_rank));
  size_t oi = 0, bi = 0;
  for (int64_t i = 0; i < out_rank; ++i)
    d[static_cast<size_t>(i)] = Contains(g.offset_dims, i) ? offsets[oi++] : batch[bi++];
  return Array(a.type, d);
}

Result<Shape> InferScatter(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(3);
  if ((inst.operand_count() - 1) % 2)
    return Err("scatter takes N operands, indices and N updates, found " + std::to_string(inst.operand_count()) + " operands");
  if (auto e = RequireCalled(inst, 1, "to_apply")) return *e;
  const int64_t n = (inst.operand_count() - 1) / 2;
  const Shape& a = inst.operand(0)->shape();
  const Shape& idx = inst.operand(n)->shape();
  if (auto e = RequireArray(a, "scatter operand")) return *e;
  if (!idx.IsArray() || !IsInteger(idx.type)) return Err("scatter indices must be an integer array, found " + S(idx));
  const ScatterDimensionNumbers& sd = inst.scatter_dims;
  const int64_t ivd = sd.index_vector_dim;
  if (ivd < 0 || ivd > idx.rank()) return Err("scatter index_vector_dim " + std::to_string(ivd) + " out of range for indices " + S(idx));
  const int64_t index_vector_size = ivd == idx.rank() ? 1 : idx.dim(ivd);
  Dims scatter_batch;
  for (int64_t i = 0; i < idx.rank(); ++i)
    if (i != ivd) scatter_batch.push_back(idx.dim(i));
  if (!IsSortedUnique(sd.update_window_dims)) return Err("scatter update_window_dims " + DimsStr(sd.update_window_dims) + " must be sorted and unique");
  if (!IsSortedUnique(sd.inserted_window_dims)) return Err("scatter inserted_window_dims " + DimsStr(sd.inserted_window_dims) + " must be sorted and unique");
  if (auto e = CheckDimList(sd.inserted_window_dims, a.rank(), "scatter inserted_window_dims")) return *e;
  if (auto e = CheckDimList(sd.input_batching_dims, a.rank(), "scatter input_batching_dims")) return *e;
  if (auto e = CheckDimList(sd.scatter_indices_batching_dims, idx.rank(), "scatter scatter_indices_batching_dims")) return *e;
  if (sd.input_batching_dims.size() != sd.scatter_indices_batching_dims.size())
    return Err("scatter input_batching_dims and scatter_indices_batching_dims must have the same length");
  for (size_t k = 0; k < sd.input_batching_dims.size(); ++k) {
    const int64_t od = sd.input_batching_dims[k], id = sd.scatter_indices_batching_dims[k];
    if (a.dim(od) != idx.dim(id))
      return Err("scatter input batching dimension " + std::to_string(od) + " (size " + std::to_string(a.dim(od)) +
                 ") and indices batching dimension " + std::to_string(id) + " (size " + std::to_string(idx.dim(id)) +
                 ") must have the same size");
  }
  if (static_cast<int64_t>(sd.scatter_dims_to_operand_dims.size()) != index_vector_size)
    return Err("scatter_dims_to_operand_dims " + DimsStr(sd.scatter_dims_to_operand_dims) + " must have " +
               std::to_string(index_vector_size) + " entries (the index vector size)");
  if (auto e = CheckDimList(sd.scatter_dims_to_operand_dims, a.rank(), "scatter_dims_to_operand_dims")) return *e;
  if (static_cast<int64_t>(sd.update_window_dims.size() + sd.inserted_window_dims.size() + sd.input_batching_dims.size()) != a.rank())
    return Err("scatter update_window_dims + inserted_window_dims + input_batching_dims must cover the operand's " +
               std::to_string(a.rank()) + " dimensions");
  Dims window_bounds;  // operand dims that update windows span
  for (int64_t i = 0; i < a.rank(); ++i)
    if (!Contains(sd.inserted_window_dims, i) && !Contains(sd.input_batching_dims, i)) window_bounds.push_back(a.dim(i));
  std::vector<Shape> out;
  std::vector<PrimitiveType> params;
  for (int64_t k = 0; k < n; ++k) {
    const Shape& opk = inst.operand(k)->shape();
    const Shape& upd = inst.operand(n + 1 + k)->shape();
    if (!opk.IsArray() || opk.dims != a.dims) return Err("scatter operand " + std::to_string(k) + " " + S(opk) + " must have the dimensions of operand 0 " + S(a));
    if (!upd.IsArray() || upd.type != opk.type) return Err("scatter update " + std::to_string(k) + " must be a " + TypeName(opk.type) + " array, found " + S(upd));
    const int64_t want_rank = static_cast<int64_t>(sd.update_window_dims.size() + scatter_batch.size());
    if (upd.rank() != want_rank)
      return Err("scatter updates " + S(upd) + " must have rank " + std::to_string(want_rank) +
                 " (update_window_dims plus the indices' batch dimensions)");
    if (auto e = CheckDimList(sd.update_window_dims, upd.rank(), "scatter update_window_dims")) return *e;
    size_t wi = 0, bi = 0;
    for (int64_t i = 0; i < upd.rank(); ++i) {
      if (Contains(sd.update_window_dims, i)) {
        if (upd.dim(i) > window_bounds[wi])
          return Err("scatter update window dimension " + std::to_string(i) + " (size " + std::to_string(upd.dim(i)) +
                     ") exceeds the operand bound " + std::to_string(window_bounds[wi]));
        ++wi;
      } else {
        if (upd.dim(i) != scatter_batch[bi])
          return Err("scatter update dimension " + std::to_string(i) + " (size " + std::to_string(upd.dim(i)) +
                     ") must equal the indices' batch dimension size " + std::to_string(scatter_batch[bi]));
        ++bi;
      }
    }
    out.push_back(opk);
    params.push_back(opk.type);
  }
  std::vector<PrimitiveType> all = params;
  all.insert(all.end(), params.begin(), params.end());
  std::vector<Shape> acc;
  for (auto t : params) acc.push_back(Shape::Scalar(t));
  Shape root = n == 1 ? acc[0] : Shape::Tuple(acc);
  if (auto e = CheckScalarComputation(inst.to_apply(), all, root, "scatter to_apply")) return *e;
  return n == 1 ? out[0] : Shape::Tuple(out);
}

Result<Shape> InferSort(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(1);
  if (auto e = RequireCalled(inst, 1, "comparator")) return *e;
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "sort operand 0")) return *e;
  if (inst.dimensions.size() != 1) return Err("sort needs exactly one dimension, found " + DimsStr(inst.dimensions));
  if (inst.dimensions[0] < 0 || inst.dimensions[0] >= a.rank())
    return Err("sort dimension " + std::to_string(inst.dimensions[0]) + " out of range for operand " + S(a));
  std::vector<Shape> out;
  std::vector<PrimitiveType> params;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape& x = inst.operand(i)->shape();
    if (!x.IsArray() || x.dims != a.dims)
      return Err("sort operand " + std::to_string(i) + " " + S(x) + " must have the dimensions of operand 0 " + S(a));
    out.push_back(x);
    params.push_back(x.type);
    params.push_back(x.type);
  }
  if (auto e = CheckScalarComputation(inst.to_apply(), params, Shape::Scalar(PrimitiveType::kPred), "sort comparator")) return *e;
  return out.size() == 1 ? out[0] : Shape::Tuple(out);
}

Result<Shape> InferGetTupleElement(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(1);
  const Shape& t = inst.operand(0)->shape();
  if (!t.IsTuple()) return Err("get-tuple-element operand must be a tuple, found " + S(t));
  if (inst.tuple_index < 0 || inst.tuple_index >= static_cast<int64_t>(t.tuple.size()))
    return Err("get-tuple-element index " + std::to_string(inst.tuple_index) + " out of range for a tuple of " +
               std::to_string(t.tuple.size()) + " elements");
  return t.tuple[static_cast<size_t>(inst.tuple_index)];
}

Result<Shape> InferWhile(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_OPERANDS(1);
  if (auto e = RequireCalled(inst, 2, "condition, body")) return *e;
  const Shape& init = inst.operand(0)->shape();
  const Computation* cond = inst.while_condition();
  const Computation* body = inst.while_body();
  for (const Computation* c : {cond, body}) {
    const char* role = c == cond ? "condition" : "body";
    if (c->parameters().size() != 1 || !ParamShape(c, 0))
      return Err(std::string("while ") + role + " " + c->name() + " must take exactly one parameter, found " +
                 std::to_string(c->parameters().size()));
    if (!ParamShape(c, 0)->Compatible(init))
      return Err(std::string("while ") + role + " " + c->name() + " parameter " + S(*ParamShape(c, 0)) +
                 " differs from the while operand " + S(init));
  }
  if (!cond->root()->shape().Compatible(Shape::Scalar(PrimitiveType::kPred)))
    return Err("while condition " + cond->name() + " must return pred[], found " + S(cond->root()->shape()));
  if (!body->root()->shape().Compatible(init))
    return Err("while body " + body->name() + " returns " + S(body->root()->shape()) + ", which differs from the loop state " + S(init));
  return init;
}

Result<Shape> InferConditional(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(2);
  const auto& branches = inst.called_computations();
  if (branches.empty()) return Err("conditional needs branch computations, found none");
  const Shape& sel = inst.operand(0)->shape();
  if (!sel.IsArray() || sel.rank() != 0 || (sel.type != PrimitiveType::kPred && sel.type != PrimitiveType::kS32))
    return Err("conditional selector must be pred[] or s32[], found " + S(sel));
  if (sel.type == PrimitiveType::kPred && branches.size() != 2)
    return Err("conditional with a pred selector needs 2 branches, found " + std::to_string(branches.size()));
  if (inst.operand_count() != static_cast<int64_t>(branches.size()) + 1)
    return Err("conditional with " + std::to_string(branches.size()) + " branches takes " + std::to_string(branches.size() + 1) +
               " operands, found " + std::to_string(inst.operand_count()));
  std::optional<Shape> result;
  for (size_t i = 0; i < branches.size(); ++i) {
    const Computation* b = branches[i];
    if (!b || !b->root()) return Err("conditional branch " + std::to_string(i) + " is missing or has no root");
    const Shape& arg = inst.operand(static_cast<int64_t>(i) + 1)->shape();
    if (b->parameters().size() != 1 || !ParamShape(b, 0))
      return Err("conditional branch " + b->name() + " must take exactly one parameter, found " + std::to_string(b->parameters().size()));
    if (!ParamShape(b, 0)->Compatible(arg))
      return Err("conditional branch " + b->name() + " parameter " + S(*ParamShape(b, 0)) + " differs from its operand " + S(arg));
    if (!result) result = b->root()->shape();
    else if (!result->Compatible(b->root()->shape()))
      return Err("conditional branches return different shapes: " + S(*result) + " and " + S(b->root()->shape()) + " (" + b->name() + ")");
  }
  return *result;
}

Result<Shape> InferCall(const Instruction& inst) {
  if (auto e = RequireCalled(inst, 1, "to_apply")) return *e;
  const Computation* c = inst.to_apply();
  if (static_cast<int64_t>(c->parameters().size()) != inst.operand_count())
    return Err("call to " + c->name() + " passes " + std::to_string(inst.operand_count()) + " operands, the computation takes " +
               std::to_string(c->parameters().size()) + " parameters");
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape* p = ParamShape(c, static_cast<size_t>(i));
    if (!p) return Err("call target " + c->name() + " is missing parameter " + std::to_string(i));
    if (!p->Compatible(inst.operand(i)->shape()))
      return Err("call operand " + std::to_string(i) + " " + S(inst.operand(i)->shape()) + " differs from " + c->name() +
                 " parameter " + S(*p));
  }
  return c->root()->shape();
}

Result<Shape> InferMap(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(1);
  if (auto e = RequireCalled(inst, 1, "to_apply")) return *e;
  const Shape& a = inst.operand(0)->shape();
  if (auto e = RequireArray(a, "map operand 0")) return *e;
  std::vector<PrimitiveType> params;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape& x = inst.operand(i)->shape();
    if (!x.IsArray() || x.dims != a.dims) return Err("map operand " + std::to_string(i) + " " + S(x) + " must have the dimensions of operand 0 " + S(a));
    params.push_back(x.type);
  }
  const Computation* c = inst.to_apply();
  const Shape& root = c->root()->shape();
  if (!root.IsArray() || root.rank() != 0) return Err("map computation " + c->name() + " must return a scalar, found " + S(root));
  if (auto e = CheckScalarComputation(c, params, root, "map to_apply")) return *e;
  return Array(root.type, a.dims);
}

std::optional<Error> CheckAllReduceComputation(const Instruction& inst, PrimitiveType t) {
  if (auto e = RequireCalled(inst, 1, "to_apply")) return e;
  return CheckScalarComputation(inst.to_apply(), {t, t}, Shape::Scalar(t), std::string(OpcodeName(inst.opcode())) + " to_apply");
}

Result<Shape> InferAllReduce(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(1);
  if (auto e = CheckReplicaGroupIds(inst)) return *e;
  auto gs = CollectiveGroupSize(inst);
  if (!gs.ok()) return gs.error();
  std::vector<Shape> out;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape& x = inst.operand(i)->shape();
    if (!x.IsArray()) return Err(std::string(OpcodeName(op)) + " operand " + std::to_string(i) + " must be an array, found " + S(x));
    if (auto e = CheckAllReduceComputation(inst, x.type)) return *e;
    out.push_back(x);
  }
  return out.size() == 1 ? out[0] : Shape::Tuple(out);
}

Result<Shape> InferAllGatherOrReduceScatter(const Instruction& inst, bool gather) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(1);
  const std::string name(OpcodeName(op));
  if (inst.dimensions.size() != 1) return Err(name + " needs exactly one dimension, found " + DimsStr(inst.dimensions));
  if (auto e = CheckReplicaGroupIds(inst)) return *e;
  auto gs = CollectiveGroupSize(inst);
  if (!gs.ok()) return gs.error();
  const int64_t dim = inst.dimensions[0];
  std::vector<Shape> out;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape& x = inst.operand(i)->shape();
    if (!x.IsArray()) return Err(name + " operand " + std::to_string(i) + " must be an array, found " + S(x));
    if (dim < 0 || dim >= x.rank()) return Err(name + " dimension " + std::to_string(dim) + " out of range for operand " + S(x));
    Shape r = x;
    if (gather) {
      r.dims[static_cast<size_t>(dim)] *= *gs;
    } else {
      if (auto e = CheckAllReduceComputation(inst, x.type)) return *e;
      if (x.dim(dim) % *gs)
        return Err("reduce-scatter dimension " + std::to_string(dim) + " of " + S(x) + " is not divisible by the group size " +
                   std::to_string(*gs));
      r.dims[static_cast<size_t>(dim)] /= *gs;
    }
    out.push_back(r);
  }
  if (gather && op == Opcode::kAllGatherStart) {
    std::vector<Shape> ins;
    for (int64_t i = 0; i < inst.operand_count(); ++i) ins.push_back(inst.operand(i)->shape());
    Shape a = ins.size() == 1 ? ins[0] : Shape::Tuple(ins);
    Shape b = out.size() == 1 ? out[0] : Shape::Tuple(out);
    return Shape::Tuple({a, b});
  }
  return out.size() == 1 ? out[0] : Shape::Tuple(out);
}

Result<Shape> InferAllToAll(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(1);
  if (auto e = CheckReplicaGroupIds(inst)) return *e;
  auto gs = CollectiveGroupSize(inst);
  if (!gs.ok()) return gs.error();
  if (!inst.dimensions.empty()) {
    if (inst.operand_count() != 1) return Err("all-to-all with a split dimension takes one operand, found " + std::to_string(inst.operand_count()));
    if (inst.dimensions.size() != 1) return Err("all-to-all needs one split dimension, found " + DimsStr(inst.dimensions));
    const Shape& x = inst.operand(0)->shape();
    if (auto e = RequireArray(x, "all-to-all operand")) return *e;
    const int64_t d = inst.dimensions[0];
    if (d < 0 || d >= x.rank()) return Err("all-to-all dimension " + std::to_string(d) + " out of range for operand " + S(x));
    if (x.dim(d) % *gs)
      return Err("all-to-all split dimension " + std::to_string(d) + " of " + S(x) + " is not divisible by the group size " + std::to_string(*gs));
    return x;
  }
  std::vector<Shape> out;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape& x = inst.operand(i)->shape();
    if (!x.IsArray()) return Err("all-to-all operand " + std::to_string(i) + " must be an array, found " + S(x));
    if (i > 0 && !x.Compatible(inst.operand(0)->shape()))
      return Err("tuple all-to-all operands must all have the same shape, found " + S(inst.operand(0)->shape()) + " and " + S(x));
    out.push_back(x);
  }
  if (inst.operand_count() != *gs && !inst.replica_groups.empty())
    return Err("tuple all-to-all takes one operand per group member (" + std::to_string(*gs) + "), found " + std::to_string(inst.operand_count()));
  return out.size() == 1 ? out[0] : Shape::Tuple(out);
}

Result<Shape> InferCollectivePermute(const Instruction& inst) {
  const Opcode op = inst.opcode();
  SS_REQUIRE_AT_LEAST(1);
  std::set<int64_t> sources, targets;
  for (const auto& [s, t] : inst.source_target_pairs) {
    if (s < 0 || t < 0) return Err("collective-permute source_target_pairs contain a negative id");
    if (!sources.insert(s).second) return Err("collective-permute source " + std::to_string(s) + " appears twice");
    if (!targets.insert(t).second) return Err("collective-permute target " + std::to_string(t) + " appears twice");
  }
  const Shape& x = inst.operand(0)->shape();
  if (inst.operand_count() == 1) {
    if (op == Opcode::kCollectivePermuteStart) return inst.shape().IsTuple() ? inst.shape() : Shape::Tuple({x, x});
    return x;
  }
  // In-place form (operand, output buffer, input offsets, output offsets): result is the buffer.
  auto is_offsets = [&](const Shape& s) {
    return s.IsTuple() || (s.IsArray() && IsInteger(s.type) && s.rank() <= 1 && !s.Compatible(x));
  };
  if (inst.operand_count() == 4 && is_offsets(inst.operand(2)->shape()) && is_offsets(inst.operand(3)->shape()))
    return inst.operand(1)->shape();
  // Combined form: several arrays permuted together, a tuple of their shapes.
  std::vector<Shape> out;
  for (int64_t i = 0; i < inst.operand_count(); ++i) out.push_back(inst.operand(i)->shape());
  return Shape::Tuple(std::move(out));
}

// Checks the own-shape of a parameter / constant / iota etc. is a well-formed shape.
std::optional<Error> CheckWellFormed(const Shape& s) {
  if (s.type == PrimitiveType::kInvalid) return Err("shape has no element type");
  if (s.IsTuple()) {
    for (const Shape& e : s.tuple)
      if (auto err = CheckWellFormed(e)) return err;
    return std::nullopt;
  }
  for (int64_t d : s.dims)
    if (d < 0) return Err("shape " + S(s) + " has a negative dimension");
  return std::nullopt;
}

}  // namespace

Result<Shape> InferShape(const Instruction& inst) {
  const Opcode op = inst.opcode();
  for (int64_t i = 0; i < inst.operand_count(); ++i)
    if (!inst.operand(i)) return Err("operand " + std::to_string(i) + " is missing");

  if (IsElementwiseUnary(op)) return InferUnary(inst);
  if (IsElementwiseBinary(op)) return InferBinary(inst);

  switch (op) {
    case Opcode::kParameter:
    case Opcode::kConstant:
    case Opcode::kCustomCall:
    case Opcode::kBitcast:
    case Opcode::kInfeed:
    case Opcode::kRecv:
    case Opcode::kGeneric:
    case Opcode::kDomain:
      if (op == Opcode::kDomain && inst.operand_count() == 1) return inst.operand(0)->shape();
      if (op != Opcode::kGeneric)
        if (auto e = CheckWellFormed(inst.shape())) return *e;
      return inst.shape();
    case Opcode::kRng: {
      for (int64_t i = 0; i < inst.operand_count(); ++i) {
        const Shape& p = inst.operand(i)->shape();
        if (!p.IsArray() || p.rank() != 0 || !inst.shape().IsArray() || p.type != inst.shape().type)
          return Err("rng parameters must be scalars of the result type, found " + S(p));
      }
      if (!inst.shape().IsArray()) return Err("rng result must be an array, found " + S(inst.shape()));
      return inst.shape();
    }
    case Opcode::kIota: {
      if (auto e = CheckWellFormed(inst.shape())) return *e;
      if (inst.operand_count() != 0) return Err("iota takes no operands, found " + std::to_string(inst.operand_count()));
      const Shape& s = inst.shape();
      if (!s.IsArray() || s.rank() == 0) return Err("iota shape must be an array of rank >= 1, found " + S(s));
      if (inst.iota_dimension < 0 || inst.iota_dimension >= s.rank())
        return Err("iota_dimension " + std::to_string(inst.iota_dimension) + " out of range for " + S(s));
      return s;
    }
    case Opcode::kPartitionId:
    case Opcode::kReplicaId:
      if (inst.operand_count() != 0) return Err(std::string(OpcodeName(op)) + " takes no operands");
      return Shape::Scalar(PrimitiveType::kU32);
    case Opcode::kSelect: return InferSelect(inst);
    case Opcode::kClamp: return InferClamp(inst);
    case Opcode::kMap: return InferMap(inst);
    case Opcode::kBroadcast: return InferBroadcast(inst);
    case Opcode::kReshape: return InferReshape(inst);
    case Opcode::kTranspose: return InferTranspose(inst);
    case Opcode::kSlice: return InferSlice(inst);
    case Opcode::kDynamicSlice: return InferDynamicSlice(inst);
    case Opcode::kDynamicUpdateSlice: return InferDynamicUpdateSlice(inst);
    case Opcode::kPad: return InferPad(inst);
    case Opcode::kConcatenate: return InferConcatenate(inst);
    case Opcode::kReverse: return InferReverse(inst);
    case Opcode::kDot: return InferDot(inst);
    case Opcode::kConvolution: return InferConvolution(inst);
    case Opcode::kReduce: return InferReduce(inst);
    case Opcode::kReduceWindow: return InferReduceWindow(inst);
    case Opcode::kSelectAndScatter: return InferSelectAndScatter(inst);
    case Opcode::kGather: return InferGather(inst);
    case Opcode::kScatter: return InferScatter(inst);
    case Opcode::kSort: return InferSort(inst);
    case Opcode::kTuple: {
      std::vector<Shape> el;
      for (Instruction* o : inst.operands()) el.push_back(o->shape());
      return Shape::Tuple(std::move(el));
    }
    case Opcode::kGetTupleElement: return InferGetTupleElement(inst);
    case Opcode::kWhile: return InferWhile(inst);
    case Opcode::kConditional: return InferConditional(inst);
    case Opcode::kCall: return InferCall(inst);
    case Opcode::kCopyStart: {
      SS_REQUIRE_OPERANDS(1);
      const Shape& x = inst.operand(0)->shape();
      return Shape::Tuple({x, x, Shape::Scalar(PrimitiveType::kU32)});
    }
    case Opcode::kCopyDone: {
      SS_REQUIRE_OPERANDS(1);
      const Shape& t = inst.operand(0)->shape();
      if (!t.IsTuple() || t.tuple.empty()) return Err("copy-done operand must be the tuple of a copy-start, found " + S(t));
      return t.tuple[0];
    }
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
      return InferAllReduce(inst);
    case Opcode::kAllReduceDone: {
      SS_REQUIRE_OPERANDS(1);
      return inst.operand(0)->shape();
    }
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
      return InferAllGatherOrReduceScatter(inst, /*gather=*/true);
    case Opcode::kAllGatherDone:
    case Opcode::kCollectivePermuteDone: {
      SS_REQUIRE_OPERANDS(1);
      const Shape& t = inst.operand(0)->shape();
      if (!t.IsTuple() || t.tuple.size() < 2)
        return Err(std::string(OpcodeName(op)) + " operand must be the tuple of its start op, found " + S(t));
      return t.tuple[1];
    }
    case Opcode::kReduceScatter: return InferAllGatherOrReduceScatter(inst, /*gather=*/false);
    case Opcode::kAllToAll: return InferAllToAll(inst);
    case Opcode::kCollectivePermute:
    case Opcode::kCollectivePermuteStart:
      return InferCollectivePermute(inst);
    case Opcode::kOptimizationBarrier: {
      SS_REQUIRE_OPERANDS(1);
      return inst.operand(0)->shape();
    }
    case Opcode::kAfterAll: {
      for (int64_t i = 0; i < inst.operand_count(); ++i)
        if (!inst.operand(i)->shape().IsToken())
          return Err("after-all operands must be tokens, operand " + std::to_string(i) + " is " + S(inst.operand(i)->shape()));
      return Shape::Token();
    }
    case Opcode::kOutfeed: {
      SS_REQUIRE_OPERANDS(2);
      if (!inst.operand(1)->shape().IsToken()) return Err("outfeed operand 1 must be a token, found " + S(inst.operand(1)->shape()));
      return Shape::Token();
    }
    case Opcode::kSend: {
      SS_REQUIRE_OPERANDS(2);
      if (!inst.operand(1)->shape().IsToken()) return Err("send operand 1 must be a token, found " + S(inst.operand(1)->shape()));
      return Shape::Tuple({inst.operand(0)->shape(), Shape::Scalar(PrimitiveType::kU32), Shape::Token()});
    }
    case Opcode::kSendDone: {
      SS_REQUIRE_OPERANDS(1);
      return Shape::Token();
    }
    case Opcode::kRecvDone: {
      SS_REQUIRE_OPERANDS(1);
      const Shape& t = inst.operand(0)->shape();
      if (!t.IsTuple() || t.tuple.empty()) return Err("recv-done operand must be the tuple of a recv, found " + S(t));
      return Shape::Tuple({t.tuple[0], Shape::Token()});
    }
    case Opcode::kGetDimensionSize: {
      SS_REQUIRE_OPERANDS(1);
      const Shape& x = inst.operand(0)->shape();
      if (inst.dimensions.size() != 1 || inst.dimensions[0] < 0 || inst.dimensions[0] >= x.rank())
        return Err("get-dimension-size dimension " + DimsStr(inst.dimensions) + " out of range for " + S(x));
      return Shape::Scalar(PrimitiveType::kS32);
    }
    case Opcode::kSetDimensionSize: {
      SS_REQUIRE_OPERANDS(2);
      const Shape& x = inst.operand(0)->shape();
      if (inst.dimensions.size() != 1 || inst.dimensions[0] < 0 || inst.dimensions[0] >= x.rank())
        return Err("set-dimension-size dimension " + DimsStr(inst.dimensions) + " out of range for " + S(x));
      Shape r = x;
      r.dynamic_dims = inst.shape().dynamic_dims;
      return r;
    }
    default:
      return inst.shape();
  }
}

}  // namespace shardscope
