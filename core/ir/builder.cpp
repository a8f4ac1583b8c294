#include "core/ir/builder.h"

#include <algorithm>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "core/ir/shape_inference.h"

namespace shardscope {
namespace {

std::string S(const Shape& s) { return s.ToString(/*print_layout=*/false); }

bool IsFloatLike(PrimitiveType t) { return IsFloatingPoint(t); }

// Rounds a value to what the element type can hold (for the text and the stored value to agree).
// The range of an integer type as doubles (the 64-bit extremes round to +-2^63 and 2^64, which
// FormatScalar writes back as the exact extremes).
std::pair<double, double> IntegerRange(PrimitiveType t) {
  const int bits = static_cast<int>(PrimitiveTypeBitWidth(t));
  if (IsUnsignedInteger(t)) return {0.0, std::ldexp(1.0, bits) - 1};
  return {-std::ldexp(1.0, bits - 1), std::ldexp(1.0, bits - 1) - 1};
}

double RoundToType(double v, PrimitiveType t) {
  if (t == PrimitiveType::kPred) return v != 0 ? 1 : 0;
  if (IsInteger(t)) {
    if (std::isnan(v)) return 0;
    const auto [lo, hi] = IntegerRange(t);
    return std::clamp(std::trunc(v), lo, hi);
  }
  if (t == PrimitiveType::kF64) return v;
  if (IsFloatLike(t)) return static_cast<double>(static_cast<float>(v));
  return v;
}

std::string FormatScalar(double v, PrimitiveType t) {
  if (t == PrimitiveType::kPred) return v != 0 ? "true" : "false";
  if (IsInteger(t)) {
    // Saturated to the type's range, exactly (also for the 64-bit extremes).
    if (std::isnan(v)) return "0";
    const auto [lo, hi] = IntegerRange(t);
    v = std::clamp(std::trunc(v), lo, hi);
    if (IsUnsignedInteger(t))
      return v >= 18446744073709551615.0 ? "18446744073709551615" : std::to_string(static_cast<uint64_t>(v));
    if (v >= 9223372036854775807.0) return "9223372036854775807";
    if (v <= -9223372036854775808.0) return "-9223372036854775808";
    return std::to_string(static_cast<int64_t>(v));
  }
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  std::to_chars_result r;
  if (t == PrimitiveType::kF64)
    r = std::to_chars(buf, buf + sizeof buf, v);
  else
    r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  return std::string(buf, r.ptr);
}

void FormatNested(const Shape& shape, const std::vector<double>& values, size_t dim, size_t* pos, std::string* out) {
  if (dim == shape.dims.size()) {
    *out += FormatScalar(*pos < values.size() ? values[*pos] : 0.0, shape.type);
    ++*pos;
    return;
  }
  const bool inner = dim + 1 == shape.dims.size();
  *out += inner ? "{" : "{ ";
  for (int64_t i = 0; i < shape.dims[dim]; ++i) {
    if (i) *out += ", ";
    FormatNested(shape, values, dim + 1, pos, out);
  }
  *out += inner ? "}" : " }";
}

}  // namespace

std::string FormatLiteralText(const Shape& shape, const std::vector<double>& values) {
  std::string out;
  size_t pos = 0;
  FormatNested(shape, values, 0, &pos, &out);
  return out;
}

Literal ScalarLiteral(PrimitiveType t, double value) {
  Literal l;
  const double v = RoundToType(value, t);
  l.text = FormatLiteralText(Shape::Scalar(t), {v});
  l.values = {v};
  return l;
}

Builder::Builder(Computation* computation) : comp_(computation) {
  if (!comp_) status_ = Error("Builder: no computation to build into");
}

void Builder::Fail(const std::string& message) {
  if (status_.ok()) status_ = Error(message);
}

// ---- scopes ----------------------------------------------------------------------------------------

Builder::ScopeGuard Builder::Scope(const std::string& name) {
  PushScope(name);
  return ScopeGuard(this);
}
Builder::ScopeGuard Builder::OpNameScope(const std::string& name) {
  PushScope(name, /*in_names=*/false);
  return ScopeGuard(this);
}
void Builder::PushScope(const std::string& name, bool in_names) { scopes_.push_back({name, in_names}); }
void Builder::PopScope() {
  if (!scopes_.empty()) scopes_.pop_back();
}
std::string Builder::CurrentScope() const {
  std::string s;
  for (const auto& part : scopes_) {
    if (part.name.empty()) continue;
    if (!s.empty()) s += "/";
    s += part.name;
  }
  return s;
}
std::string Builder::NamingScope() const {
  std::string s;
  for (const auto& part : scopes_) {
    if (part.name.empty() || !part.in_names) continue;
    if (!s.empty()) s += "/";
    s += part.name;
  }
  return s;
}

void Builder::SetMetadata(Instruction* inst, const std::string& label) {
  // op_name="<scope>/<label>" with '"' and '\\' escaped, written in one string (every op the zoo
  // builds has one).
  if (std::none_of(scopes_.begin(), scopes_.end(), [](const ScopePart& p) { return !p.name.empty(); })) return;
  auto append_escaped = [](std::string& out, std::string_view part) {
    if (part.find_first_of("\"\\") == std::string_view::npos) {
      out.append(part);
      return;
    }
    for (char c : part) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
  };
  std::string m;
  m.reserve(16 + label.size() + 16 * scopes_.size());
  m.append("op_name=\"");
  bool first = true;
  for (const auto& part : scopes_) {
    if (part.name.empty()) continue;
    if (!first) m.push_back('/');
    append_escaped(m, part.name);
    first = false;
  }
  m.push_back('/');
  append_escaped(m, label);
  m.push_back('"');
  inst->metadata = std::move(m);
}

// ---- the general form ----------------------------------------------------------------------------------

Instruction* Builder::AddOp(Opcode op, const std::vector<Instruction*>& operands,
                            const std::function<void(Instruction*)>& configure, const Shape& declared,
                            const std::string& name) {
  return Make(op, operands, configure, declared, declared.type != PrimitiveType::kInvalid, name);
}

Instruction* Builder::Make(Opcode op, const std::vector<Instruction*>& operands,
                           const std::function<void(Instruction*)>& configure, const Shape& initial, bool check_declared,
                           const std::string& name) {
  const std::string label = name.empty() ? std::string(OpcodeName(op)) : name;
  if (!comp_) return nullptr;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i]) {
      Fail(label + ": operand " + std::to_string(i) + " is null");
      return nullptr;
    }
    if (operands[i]->parent() != comp_) {
      Fail(label + ": operand " + std::to_string(i) + " (" + operands[i]->name() + ") belongs to another computation");
      return nullptr;
    }
  }
  std::string inst_name = name;
  if (scoped_names_ && op != Opcode::kParameter) {
    std::string scope = NamingScope();
    if (!scope.empty()) {
      for (char& c : scope)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
      inst_name = scope + "_" + label;
    }
  }
  Instruction* inst = comp_->AddInstruction(op, initial, operands, inst_name);
  if (configure) configure(inst);
  Result<Shape> r = InferShape(*inst);
  std::string err;
  if (!r.ok())
    err = r.error().message;
  else if (check_declared && !r->Compatible(initial))
    err = "inferred shape " + S(*r) + " differs from the requested " + S(initial);
  if (!err.empty()) {
    const std::string scope = CurrentScope();
    Fail(std::string(OpcodeName(op)) + " (" + (scope.empty() ? "" : scope + "/") + label + "): " + err);
    (void)comp_->RemoveInstruction(inst);
    return nullptr;
  }
  Shape s = std::move(r).value();
  if (initial.has_layout && initial.Compatible(s)) {
    s.has_layout = true;
    s.minor_to_major = initial.minor_to_major;
  }
  inst->set_shape(std::move(s));
  SetMetadata(inst, label);
  return inst;
}

// ---- leaves ------------------------------------------------------------------------------------------

Instruction* Builder::Parameter(int64_t number, const Shape& shape, const std::string& name) {
  if (!comp_) return nullptr;
  if (number != static_cast<int64_t>(comp_->parameters().size())) {
    Fail("parameter " + std::to_string(number) + (name.empty() ? "" : " (" + name + ")") +
         ": parameters must be added in order; the next parameter number is " + std::to_string(comp_->parameters().size()));
    return nullptr;
  }
  return AddOp(Opcode::kParameter, {}, [&](Instruction* i) { i->parameter_number = number; }, shape, name);
}

Instruction* Builder::Constant(const Shape& shape, const std::vector<double>& values, const std::string& name) {
  if (!shape.IsArray()) {
    Fail("constant: shape must be an array, found " + S(shape));
    return nullptr;
  }
  const int64_t n = shape.ElementCount();
  if (values.size() != 1 && static_cast<int64_t>(values.size()) != n) {
    Fail("constant: " + std::to_string(values.size()) + " values for shape " + S(shape) + " (" + std::to_string(n) +
         " elements)");
    return nullptr;
  }
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = RoundToType(values.size() == 1 ? values[0] : values[static_cast<size_t>(i)], shape.type);
  return AddOp(Opcode::kConstant, {},
               [&](Instruction* i) {
                 i->literal.text = FormatLiteralText(shape, v);
                 i->literal.values = v;
               },
               shape, name);
}

Instruction* Builder::ConstantScalar(PrimitiveType type, double value, const std::string& name) {
  return Constant(Shape::Scalar(type), {value}, name);
}

Instruction* Builder::Full(const Shape& like, double value, const std::string& name) {
  if (!like.IsArray()) {
    Fail("full: shape must be an array, found " + S(like));
    return nullptr;
  }
  Instruction* c = ConstantScalar(like.type, value);
  if (like.rank() == 0) return c;
  return Broadcast(c, like.dims, {}, name);
}

Instruction* Builder::FullLike(Instruction* like, double value, const std::string& name) {
  if (!like) {
    Fail("full-like: operand is null");
    return nullptr;
  }
  return Full(like->shape(), value, name);
}

Instruction* Builder::Iota(const Shape& shape, int64_t iota_dimension, const std::string& name) {
  return AddOp(Opcode::kIota, {}, [&](Instruction* i) { i->iota_dimension = iota_dimension; }, shape, name);
}

Instruction* Builder::PartitionId(const std::string& name) {
  return AddOp(Opcode::kPartitionId, {}, nullptr, Shape::Scalar(PrimitiveType::kU32), name);
}
Instruction* Builder::ReplicaId(const std::string& name) {
  return AddOp(Opcode::kReplicaId, {}, nullptr, Shape::Scalar(PrimitiveType::kU32), name);
}

// ---- elementwise ----------------------------------------------------------------------------------------

Instruction* Builder::Unary(Opcode op, Instruction* x, const std::string& name) {
  if (!IsElementwiseUnary(op)) {
    Fail(std::string(OpcodeName(op)) + " is not an elementwise unary op");
    return nullptr;
  }
  return AddOp(op, {x}, nullptr, Shape(), name);
}

Instruction* Builder::Binary(Opcode op, Instruction* a, Instruction* b, const std::string& name) {
  if (!IsElementwiseBinary(op)) {
    Fail(std::string(OpcodeName(op)) + " is not an elementwise binary op");
    return nullptr;
  }
  return AddOp(op, {a, b}, nullptr, Shape(), name);
}

Instruction* Builder::Compare(Instruction* a, Instruction* b, ComparisonDirection dir, const std::string& name) {
  return AddOp(Opcode::kCompare, {a, b}, [&](Instruction* i) { i->comparison = dir; }, Shape(), name);
}

Instruction* Builder::Select(Instruction* pred, Instruction* on_true, Instruction* on_false, const std::string& name) {
  return AddOp(Opcode::kSelect, {pred, on_true, on_false}, nullptr, Shape(), name);
}

Instruction* Builder::Clamp(Instruction* lo, Instruction* x, Instruction* hi, const std::string& name) {
  return AddOp(Opcode::kClamp, {lo, x, hi}, nullptr, Shape(), name);
}

Instruction* Builder::Convert(Instruction* x, PrimitiveType to, const std::string& name) {
  if (!x) return AddOp(Opcode::kConvert, {x}, nullptr, Shape(), name);
  return AddOp(Opcode::kConvert, {x}, nullptr, Shape(to, x->shape().dims), name);
}

Instruction* Builder::BitcastConvert(Instruction* x, PrimitiveType to, const std::string& name) {
  // The result dims depend on the bit widths: the placeholder only carries the target type.
  return Make(Opcode::kBitcastConvert, {x}, nullptr, Shape(to, {}), /*check_declared=*/false, name);
}

// ---- shape manipulation --------------------------------------------------------------------------------

Instruction* Builder::Broadcast(Instruction* x, const std::vector<int64_t>& result_dims,
                                const std::vector<int64_t>& dimensions, const std::string& name) {
  const PrimitiveType t = x ? x->shape().type : PrimitiveType::kInvalid;
  return AddOp(Opcode::kBroadcast, {x},
               [&](Instruction* i) {
                 i->dimensions = dimensions;
                 i->has_dimensions_attr = true;
               },
               Shape(t, result_dims), name);
}

Instruction* Builder::BroadcastLike(Instruction* x, Instruction* like, const std::vector<int64_t>& dimensions,
                                    const std::string& name) {
  if (!like) return AddOp(Opcode::kBroadcast, {like}, nullptr, Shape(), name);
  return Broadcast(x, like->shape().dims, dimensions, name);
}

Instruction* Builder::Reshape(Instruction* x, const std::vector<int64_t>& dims, const std::string& name) {
  const PrimitiveType t = x ? x->shape().type : PrimitiveType::kInvalid;
  return AddOp(Opcode::kReshape, {x}, nullptr, Shape(t, dims), name);
}

Instruction* Builder::Transpose(Instruction* x, const std::vector<int64_t>& permutation, const std::string& name) {
  return AddOp(Opcode::kTranspose, {x},
               [&](Instruction* i) {
                 i->dimensions = permutation;
                 i->has_dimensions_attr = true;
               },
               Shape(), name);
}

Instruction* Builder::Slice(Instruction* x, const std::vector<int64_t>& starts, const std::vector<int64_t>& limits,
                            const std::vector<int64_t>& strides, const std::string& name) {
  return AddOp(Opcode::kSlice, {x},
               [&](Instruction* i) {
                 i->slice.starts = starts;
                 i->slice.limits = limits;
                 i->slice.strides = strides.empty() ? std::vector<int64_t>(starts.size(), 1) : strides;
               },
               Shape(), name);
}

Instruction* Builder::DynamicSlice(Instruction* x, const std::vector<Instruction*>& starts,
                                   const std::vector<int64_t>& sizes, const std::string& name) {
  std::vector<Instruction*> ops{x};
  ops.insert(ops.end(), starts.begin(), starts.end());
  return AddOp(Opcode::kDynamicSlice, ops, [&](Instruction* i) { i->dynamic_slice_sizes = sizes; }, Shape(), name);
}

Instruction* Builder::DynamicUpdateSlice(Instruction* x, Instruction* update, const std::vector<Instruction*>& starts,
                                         const std::string& name) {
  std::vector<Instruction*> ops{x, update};
  ops.insert(ops.end(), starts.begin(), starts.end());
  return AddOp(Opcode::kDynamicUpdateSlice, ops, nullptr, Shape(), name);
}

Instruction* Builder::Pad(Instruction* x, Instruction* value, const std::vector<PaddingDim>& padding,
                          const std::string& name) {
  return AddOp(Opcode::kPad, {x, value}, [&](Instruction* i) { i->padding = padding; }, Shape(), name);
}

Instruction* Builder::Concatenate(const std::vector<Instruction*>& xs, int64_t dimension, const std::string& name) {
  return AddOp(Opcode::kConcatenate, xs,
               [&](Instruction* i) {
                 i->dimensions = {dimension};
                 i->has_dimensions_attr = true;
               },
               Shape(), name);
}

Instruction* Builder::Reverse(Instruction* x, const std::vector<int64_t>& dimensions, const std::string& name) {
  return AddOp(Opcode::kReverse, {x},
               [&](Instruction* i) {
                 i->dimensions = dimensions;
                 i->has_dimensions_attr = true;
               },
               Shape(), name);
}

Instruction* Builder::Bitcast(Instruction* x, const Shape& shape, const std::string& name) {
  if (x && shape.IsArray() && x->shape().IsArray() && shape.ByteSize() != x->shape().ByteSize()) {
    Fail("bitcast from " + S(x->shape()) + " to " + S(shape) + " changes the byte size");
    return nullptr;
  }
  return AddOp(Opcode::kBitcast, {x}, nullptr, shape, name);
}

// ---- contractions and windows ------------------------------------------------------------------------

Instruction* Builder::Dot(Instruction* lhs, Instruction* rhs, const DotDimensionNumbers& dims, const std::string& name) {
  return AddOp(Opcode::kDot, {lhs, rhs}, [&](Instruction* i) { i->dot_dims = dims; }, Shape(), name);
}

Instruction* Builder::DotAs(Instruction* lhs, Instruction* rhs, const DotDimensionNumbers& dims, PrimitiveType result_type,
                            const std::string& name) {
  return Make(Opcode::kDot, {lhs, rhs}, [&](Instruction* i) { i->dot_dims = dims; }, Shape(result_type, {}),
              /*check_declared=*/false, name);
}

Instruction* Builder::Convolution(Instruction* input, Instruction* kernel, const ConvolutionDimensionNumbers& dims,
                                  const Window& window, int64_t feature_group_count, int64_t batch_group_count,
                                  const std::string& name) {
  return AddOp(Opcode::kConvolution, {input, kernel},
               [&](Instruction* i) {
                 i->conv_dims = dims;
                 i->window = window;
                 i->has_window = true;
                 i->feature_group_count = feature_group_count;
                 i->batch_group_count = batch_group_count;
               },
               Shape(), name);
}

Instruction* Builder::Reduce(Instruction* x, Instruction* init, const std::vector<int64_t>& dimensions,
                             Computation* reducer, const std::string& name) {
  return Reduce(std::vector<Instruction*>{x}, std::vector<Instruction*>{init}, dimensions, reducer, name);
}

Instruction* Builder::Reduce(const std::vector<Instruction*>& xs, const std::vector<Instruction*>& inits,
                             const std::vector<int64_t>& dimensions, Computation* reducer, const std::string& name) {
  if (xs.size() != inits.size()) {
    Fail("reduce: " + std::to_string(xs.size()) + " inputs but " + std::to_string(inits.size()) + " init values");
    return nullptr;
  }
  std::vector<Instruction*> ops = xs;
  ops.insert(ops.end(), inits.begin(), inits.end());
  return AddOp(Opcode::kReduce, ops,
               [&](Instruction* i) {
                 i->dimensions = dimensions;
                 i->has_dimensions_attr = true;
                 i->mutable_called_computations() = {reducer};
               },
               Shape(), name);
}

Instruction* Builder::ReduceWindow(Instruction* x, Instruction* init, const Window& window, Computation* reducer,
                                   const std::string& name) {
  return AddOp(Opcode::kReduceWindow, {x, init},
               [&](Instruction* i) {
                 i->window = window;
                 i->has_window = true;
                 i->mutable_called_computations() = {reducer};
               },
               Shape(), name);
}

Instruction* Builder::SelectAndScatter(Instruction* operand, Instruction* source, Instruction* init, const Window& window,
                                       Computation* select, Computation* scatter, const std::string& name) {
  return AddOp(Opcode::kSelectAndScatter, {operand, source, init},
               [&](Instruction* i) {
                 i->window = window;
                 i->has_window = true;
                 i->mutable_called_computations() = {select, scatter};
               },
               Shape(), name);
}

Instruction* Builder::Gather(Instruction* operand, Instruction* indices, const GatherDimensionNumbers& dims,
                             const std::vector<int64_t>& slice_sizes, const std::string& name) {
  return AddOp(Opcode::kGather, {operand, indices},
               [&](Instruction* i) {
                 i->gather_dims = dims;
                 i->gather_slice_sizes = slice_sizes;
               },
               Shape(), name);
}

Instruction* Builder::Scatter(Instruction* operand, Instruction* indices, Instruction* updates,
                              const ScatterDimensionNumbers& dims, Computation* combiner, const std::string& name) {
  return AddOp(Opcode::kScatter, {operand, indices, updates},
               [&](Instruction* i) {
                 i->scatter_dims = dims;
                 i->mutable_called_computations() = {combiner};
               },
               Shape(), name);
}

Instruction* Builder::Sort(const std::vector<Instruction*>& xs, int64_t dimension, Computation* comparator, bool is_stable,
                           const std::string& name) {
  return AddOp(Opcode::kSort, xs,
               [&](Instruction* i) {
                 i->dimensions = {dimension};
                 i->has_dimensions_attr = true;
                 i->is_stable = is_stable;
                 i->mutable_called_computations() = {comparator};
               },
               Shape(), name);
}

// ---- tuples and control flow -------------------------------------------------------------------------

Instruction* Builder::Tuple(const std::vector<Instruction*>& xs, const std::string& name) {
  return AddOp(Opcode::kTuple, xs, nullptr, Shape(), name);
}

Instruction* Builder::GetTupleElement(Instruction* t, int64_t index, const std::string& name) {
  return AddOp(Opcode::kGetTupleElement, {t}, [&](Instruction* i) { i->tuple_index = index; }, Shape(), name);
}

Instruction* Builder::While(Instruction* init, Computation* condition, Computation* body, const std::string& name) {
  return AddOp(Opcode::kWhile, {init}, [&](Instruction* i) { i->mutable_called_computations() = {condition, body}; },
               Shape(), name);
}

Instruction* Builder::Conditional(Instruction* selector, const std::vector<Instruction*>& args,
                                  const std::vector<Computation*>& branches, const std::string& name) {
  std::vector<Instruction*> ops{selector};
  ops.insert(ops.end(), args.begin(), args.end());
  return AddOp(Opcode::kConditional, ops, [&](Instruction* i) { i->mutable_called_computations() = branches; }, Shape(),
               name);
}

Instruction* Builder::Call(Computation* callee, const std::vector<Instruction*>& args, const std::string& name) {
  return AddOp(Opcode::kCall, args, [&](Instruction* i) { i->mutable_called_computations() = {callee}; }, Shape(), name);
}

Instruction* Builder::CustomCall(const std::string& target, const std::vector<Instruction*>& args, const Shape& shape,
                                 const std::string& name) {
  return AddOp(Opcode::kCustomCall, args, [&](Instruction* i) { i->custom_call_target = target; }, shape, name);
}

Instruction* Builder::OptimizationBarrier(Instruction* x, const std::string& name) {
  return AddOp(Opcode::kOptimizationBarrier, {x}, nullptr, Shape(), name);
}

Instruction* Builder::AfterAll(const std::vector<Instruction*>& tokens, const std::string& name) {
  return AddOp(Opcode::kAfterAll, tokens, nullptr, Shape::Token(), name);
}

// ---- collectives -----------------------------------------------------------------------------------------

namespace {
void ApplyCollective(Instruction* i, const CollectiveAttributes& o) {
  i->replica_groups.groups = o.replica_groups;
  i->has_replica_groups = !o.replica_groups.empty();
  i->channel_id = o.channel_id;
  i->use_global_device_ids = o.use_global_device_ids;
}
}  // namespace

Instruction* Builder::AllReduce(Instruction* x, Computation* reducer, const CollectiveAttributes& opts,
                                const std::string& name) {
  return AddOp(Opcode::kAllReduce, {x},
               [&](Instruction* i) {
                 ApplyCollective(i, opts);
                 i->mutable_called_computations() = {reducer};
               },
               Shape(), name);
}

Instruction* Builder::AllGather(Instruction* x, int64_t dimension, const CollectiveAttributes& opts, const std::string& name) {
  return AddOp(Opcode::kAllGather, {x},
               [&](Instruction* i) {
                 ApplyCollective(i, opts);
                 i->dimensions = {dimension};
                 i->has_dimensions_attr = true;
               },
               Shape(), name);
}

Instruction* Builder::ReduceScatter(Instruction* x, int64_t dimension, Computation* reducer, const CollectiveAttributes& opts,
                                    const std::string& name) {
  return AddOp(Opcode::kReduceScatter, {x},
               [&](Instruction* i) {
                 ApplyCollective(i, opts);
                 i->dimensions = {dimension};
                 i->has_dimensions_attr = true;
                 i->mutable_called_computations() = {reducer};
               },
               Shape(), name);
}

Instruction* Builder::AllToAll(Instruction* x, int64_t split_dimension, const CollectiveAttributes& opts,
                               const std::string& name) {
  return AddOp(Opcode::kAllToAll, {x},
               [&](Instruction* i) {
                 ApplyCollective(i, opts);
                 i->dimensions = {split_dimension};
                 i->has_dimensions_attr = true;
               },
               Shape(), name);
}

Instruction* Builder::CollectivePermute(Instruction* x, const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs,
                                        std::optional<int64_t> channel_id, const std::string& name) {
  return AddOp(Opcode::kCollectivePermute, {x},
               [&](Instruction* i) {
                 i->source_target_pairs = source_target_pairs;
                 i->channel_id = channel_id;
               },
               Shape(), name);
}

// ---- finishing ----------------------------------------------------------------------------------------

void Builder::SetRoot(Instruction* root) {
  if (!comp_) return;
  if (!root) {
    Fail("SetRoot: root is null");
    return;
  }
  if (root->parent() != comp_) {
    Fail("SetRoot: " + root->name() + " is not in computation " + comp_->name());
    return;
  }
  comp_->set_root(root);
}

Instruction* Builder::Annotate(Instruction* inst, const HloSharding& sharding) {
  if (!inst) return nullptr;
  const Shape& s = inst->shape();
  if (sharding.IsTiled() && (!s.IsArray() || sharding.TiledDataRank() != s.rank())) {
    Fail("annotate " + inst->name() + ": sharding " + sharding.ToString() + " does not fit shape " + S(s));
    return nullptr;
  }
  if (sharding.IsTuple() && (!s.IsTuple() || static_cast<int64_t>(sharding.tuple_elements().size()) != s.LeafCount())) {
    Fail("annotate " + inst->name() + ": tuple sharding " + sharding.ToString() + " does not fit shape " + S(s));
    return nullptr;
  }
  inst->set_sharding(sharding);
  return inst;
}

// ---- scalar computations ---------------------------------------------------------------------------------

Computation* ScalarComputation(Module& module, Opcode op, PrimitiveType type, const std::string& name) {
  std::string n = name;
  if (n.empty()) {
    std::string base(OpcodeName(op));
    if (op == Opcode::kMaximum) base = "max";
    else if (op == Opcode::kMinimum) base = "min";
    else if (op == Opcode::kMultiply) base = "mul";
    n = base + "_" + std::string(PrimitiveTypeName(type));
  }
  if (Computation* existing = module.FindComputation(n)) {
    if (existing->parameters().size() == 2 && existing->root() &&
        existing->root()->shape().Compatible(Shape::Scalar(op == Opcode::kCompare ? PrimitiveType::kPred : type)))
      return existing;
    n = n + "_" + std::to_string(module.computations().size());
  }
  Computation* c = module.AddComputation(n);
  Builder b(c);
  Instruction* x = b.Parameter(0, Shape::Scalar(type), "lhs");
  Instruction* y = b.Parameter(1, Shape::Scalar(type), "rhs");
  b.SetRoot(b.Binary(op, x, y));
  return c;
}

Computation* ScalarComparator(Module& module, PrimitiveType type, ComparisonDirection direction, const std::string& name) {
  std::string n = name.empty() ? "compare_" + std::string(ComparisonDirectionName(direction)) + "_" +
                                     std::string(PrimitiveTypeName(type))
                               : name;
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (Computation* existing = module.FindComputation(n)) return existing;
  Computation* c = module.AddComputation(n);
  Builder b(c);
  Instruction* x = b.Parameter(0, Shape::Scalar(type), "lhs");
  Instruction* y = b.Parameter(1, Shape::Scalar(type), "rhs");
  b.SetRoot(b.Compare(x, y, direction));
  return c;
}

}  // namespace shardscope
