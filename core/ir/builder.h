// A small API to construct modules in code (tests, the model zoo, programmatic partitioning):
//
//   Module m("mlp");
//   Builder b(m.AddComputation("main", /*is_entry=*/true));
//   auto* x = b.Parameter(0, Shape(PrimitiveType::kF32, {B, D}), "x");
//   auto* w = b.Parameter(1, Shape(PrimitiveType::kF32, {D, H}), "w");
//   auto scope = b.Scope("layer0/ffn");                      // metadata op_name="layer0/ffn/..."
//   auto* y = b.Dot(x, w, DotDims(/*lhs_contracting=*/{1}, /*rhs_contracting=*/{0}), "wi");
//   auto* s = b.Reduce(y, b.ConstantScalar(PrimitiveType::kF32, 0), {1}, ScalarAdd(m, PrimitiveType::kF32));
//   b.SetRoot(b.Tuple({y, s}));
//   if (!b.ok()) ... b.status().error().message
//
// Every op's shape is inferred through InferShape (core/shape_inference.h). When the operands and
// attributes don't agree, the op returns nullptr, nothing is added, and the builder keeps the
// first error ("dot (layer0/ffn/wi): dot contracting dimension sizes differ: ..."). Ops given a
// nullptr operand return nullptr quietly, so a chain of calls can be checked once at the end.
// Ops whose shape cannot be inferred from operands (parameter, constant, iota, broadcast, reshape,
// custom-call, ...) take the result shape or dimensions explicitly.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/shape.h"
#include "core/sharding/sharding.h"
#include "core/base/status.h"

namespace shardscope {

struct CollectiveAttributes {
  std::vector<std::vector<int64_t>> replica_groups;  // empty = all devices
  std::optional<int64_t> channel_id;
  bool use_global_device_ids = false;
};

class Builder {
 public:
  explicit Builder(Computation* computation);
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  Computation* computation() const { return comp_; }
  Module* module() const { return comp_ ? comp_->parent() : nullptr; }

  // First error met while building (ok when none).
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // ---- name scopes (metadata op_name) ----
  // Every instruction created while a scope is active gets metadata op_name="scope/label", where
  // label is the instruction's name argument or, when none is given, its opcode. Scopes nest
  // ("layer0" then "attention" gives "layer0/attention"); a scope may itself contain '/'.
  class ScopeGuard {
   public:
    ScopeGuard(ScopeGuard&& o) noexcept : b_(o.b_) { o.b_ = nullptr; }
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;
    ScopeGuard& operator=(ScopeGuard&&) = delete;
    ~ScopeGuard() {
      if (b_) b_->PopScope();
    }

   private:
    friend class Builder;
    explicit ScopeGuard(Builder* b) : b_(b) {}
    Builder* b_;
  };
  [[nodiscard]] ScopeGuard Scope(const std::string& name);
  // A scope that shows in op_name metadata but not in scoped instruction names: a training step's
  // phase ("forward") groups its ops in a graph viewer while "layer0_ffn_wi" keeps its name.
  [[nodiscard]] ScopeGuard OpNameScope(const std::string& name);
  void PushScope(const std::string& name, bool in_names = true);
  void PopScope();
  std::string CurrentScope() const;  // "layer0/attention" ("" at top level)
  // When on, instructions created inside a scope are named after it: Dot(..., "wi") in scope
  // "layer0/ffn" becomes "layer0_ffn_wi" (unnamed ops: "layer0_ffn_add", uniquified as usual).
  void set_scoped_names(bool on) { scoped_names_ = on; }

  // ---- leaves ----
  // Parameters must be added in number order (0, 1, 2, ...).
  Instruction* Parameter(int64_t number, const Shape& shape, const std::string& name = "");
  // Constant with explicit values (row-major, one per element; a single value fills the shape).
  Instruction* Constant(const Shape& shape, const std::vector<double>& values, const std::string& name = "");
  Instruction* ConstantScalar(PrimitiveType type, double value, const std::string& name = "");
  // A constant scalar broadcast to `like`'s dimensions and element type.
  Instruction* Full(const Shape& like, double value, const std::string& name = "");
  Instruction* FullLike(Instruction* like, double value, const std::string& name = "");
  Instruction* Iota(const Shape& shape, int64_t iota_dimension, const std::string& name = "");
  Instruction* PartitionId(const std::string& name = "");
  Instruction* ReplicaId(const std::string& name = "");

  // ---- elementwise ----
  Instruction* Unary(Opcode op, Instruction* x, const std::string& name = "");
  Instruction* Binary(Opcode op, Instruction* a, Instruction* b, const std::string& name = "");
  Instruction* Add(Instruction* a, Instruction* b, const std::string& name = "") { return Binary(Opcode::kAdd, a, b, name); }
  Instruction* Sub(Instruction* a, Instruction* b, const std::string& name = "") { return Binary(Opcode::kSubtract, a, b, name); }
  Instruction* Mul(Instruction* a, Instruction* b, const std::string& name = "") { return Binary(Opcode::kMultiply, a, b, name); }
  Instruction* Div(Instruction* a, Instruction* b, const std::string& name = "") { return Binary(Opcode::kDivide, a, b, name); }
  Instruction* Max(Instruction* a, Instruction* b, const std::string& name = "") { return Binary(Opcode::kMaximum, a, b, name); }
  Instruction* Min(Instruction* a, Instruction* b, const std::string& name = "") { return Binary(Opcode::kMinimum, a, b, name); }
  Instruction* Pow(Instruction* a, Instruction* b, const std::string& name = "") { return Binary(Opcode::kPower, a, b, name); }
  Instruction* Neg(Instruction* x, const std::string& name = "") { return Unary(Opcode::kNegate, x, name); }
  Instruction* Exp(Instruction* x, const std::string& name = "") { return Unary(Opcode::kExp, x, name); }
  Instruction* Log(Instruction* x, const std::string& name = "") { return Unary(Opcode::kLog, x, name); }
  Instruction* Sqrt(Instruction* x, const std::string& name = "") { return Unary(Opcode::kSqrt, x, name); }
  Instruction* Rsqrt(Instruction* x, const std::string& name = "") { return Unary(Opcode::kRsqrt, x, name); }
  Instruction* Tanh(Instruction* x, const std::string& name = "") { return Unary(Opcode::kTanh, x, name); }
  Instruction* Abs(Instruction* x, const std::string& name = "") { return Unary(Opcode::kAbs, x, name); }
  Instruction* Copy(Instruction* x, const std::string& name = "") { return Unary(Opcode::kCopy, x, name); }
  Instruction* Compare(Instruction* a, Instruction* b, ComparisonDirection dir, const std::string& name = "");
  Instruction* Select(Instruction* pred, Instruction* on_true, Instruction* on_false, const std::string& name = "");
  Instruction* Clamp(Instruction* lo, Instruction* x, Instruction* hi, const std::string& name = "");
  Instruction* Convert(Instruction* x, PrimitiveType to, const std::string& name = "");
  Instruction* BitcastConvert(Instruction* x, PrimitiveType to, const std::string& name = "");

  // ---- shape manipulation ----
  // `dimensions[i]` is the result dimension operand dimension i maps to.
  Instruction* Broadcast(Instruction* x, const std::vector<int64_t>& result_dims, const std::vector<int64_t>& dimensions,
                         const std::string& name = "");
  // Broadcast so that x fills `like`'s dimensions, x's dims mapping to `dimensions` of `like`.
  Instruction* BroadcastLike(Instruction* x, Instruction* like, const std::vector<int64_t>& dimensions,
                             const std::string& name = "");
  Instruction* Reshape(Instruction* x, const std::vector<int64_t>& dims, const std::string& name = "");
  Instruction* Transpose(Instruction* x, const std::vector<int64_t>& permutation, const std::string& name = "");
  Instruction* Slice(Instruction* x, const std::vector<int64_t>& starts, const std::vector<int64_t>& limits,
                     const std::vector<int64_t>& strides = {}, const std::string& name = "");
  Instruction* DynamicSlice(Instruction* x, const std::vector<Instruction*>& starts, const std::vector<int64_t>& sizes,
                            const std::string& name = "");
  Instruction* DynamicUpdateSlice(Instruction* x, Instruction* update, const std::vector<Instruction*>& starts,
                                  const std::string& name = "");
  Instruction* Pad(Instruction* x, Instruction* value, const std::vector<PaddingDim>& padding, const std::string& name = "");
  Instruction* Concatenate(const std::vector<Instruction*>& xs, int64_t dimension, const std::string& name = "");
  Instruction* Reverse(Instruction* x, const std::vector<int64_t>& dimensions, const std::string& name = "");
  Instruction* Bitcast(Instruction* x, const Shape& shape, const std::string& name = "");

  // ---- contractions and windows ----
  Instruction* Dot(Instruction* lhs, Instruction* rhs, const DotDimensionNumbers& dims, const std::string& name = "");
  // Result element type other than lhs's (preferred_element_type).
  Instruction* DotAs(Instruction* lhs, Instruction* rhs, const DotDimensionNumbers& dims, PrimitiveType result_type,
                     const std::string& name = "");
  Instruction* Convolution(Instruction* input, Instruction* kernel, const ConvolutionDimensionNumbers& dims,
                           const Window& window, int64_t feature_group_count = 1, int64_t batch_group_count = 1,
                           const std::string& name = "");
  Instruction* Reduce(Instruction* x, Instruction* init, const std::vector<int64_t>& dimensions, Computation* reducer,
                      const std::string& name = "");
  Instruction* Reduce(const std::vector<Instruction*>& xs, const std::vector<Instruction*>& inits,
                      const std::vector<int64_t>& dimensions, Computation* reducer, const std::string& name = "");
  Instruction* ReduceWindow(Instruction* x, Instruction* init, const Window& window, Computation* reducer,
                            const std::string& name = "");
  Instruction* SelectAndScatter(Instruction* operand, Instruction* source, Instruction* init, const Window& window,
                                Computation* select, Computation* scatter, const std::string& name = "");
  Instruction* Gather(Instruction* operand, Instruction* indices, const GatherDimensionNumbers& dims,
                      const std::vector<int64_t>& slice_sizes, const std::string& name = "");
  Instruction* Scatter(Instruction* operand, Instruction* indices, Instruction* updates, const ScatterDimensionNumbers& dims,
                       Computation* combiner, const std::string& name = "");
  Instruction* Sort(const std::vector<Instruction*>& xs, int64_t dimension, Computation* comparator, bool is_stable = false,
                    const std::string& name = "");

  // ---- tuples and control flow ----
  Instruction* Tuple(const std::vector<Instruction*>& xs, const std::string& name = "");
  Instruction* GetTupleElement(Instruction* t, int64_t index, const std::string& name = "");
  Instruction* While(Instruction* init, Computation* condition, Computation* body, const std::string& name = "");
  Instruction* Conditional(Instruction* selector, const std::vector<Instruction*>& args,
                           const std::vector<Computation*>& branches, const std::string& name = "");
  Instruction* Call(Computation* callee, const std::vector<Instruction*>& args, const std::string& name = "");
  Instruction* CustomCall(const std::string& target, const std::vector<Instruction*>& args, const Shape& shape,
                          const std::string& name = "");
  Instruction* OptimizationBarrier(Instruction* x, const std::string& name = "");
  Instruction* AfterAll(const std::vector<Instruction*>& tokens, const std::string& name = "");

  // ---- collectives (replica_groups empty = all devices) ----
  Instruction* AllReduce(Instruction* x, Computation* reducer, const CollectiveAttributes& opts = {}, const std::string& name = "");
  Instruction* AllGather(Instruction* x, int64_t dimension, const CollectiveAttributes& opts = {}, const std::string& name = "");
  Instruction* ReduceScatter(Instruction* x, int64_t dimension, Computation* reducer, const CollectiveAttributes& opts = {},
                             const std::string& name = "");
  Instruction* AllToAll(Instruction* x, int64_t split_dimension, const CollectiveAttributes& opts = {}, const std::string& name = "");
  Instruction* CollectivePermute(Instruction* x, const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs,
                                 std::optional<int64_t> channel_id = std::nullopt, const std::string& name = "");

  // ---- the general form ----
  // Adds `op` with `operands`, lets `configure` set attributes / called computations, infers the
  // shape (starting from `declared` for ops that need it) and keeps the instruction only if
  // inference succeeds and (when `declared` is an array or tuple) agrees with it.
  Instruction* AddOp(Opcode op, const std::vector<Instruction*>& operands,
                     const std::function<void(Instruction*)>& configure, const Shape& declared = Shape(),
                     const std::string& name = "");

  // ---- finishing ----
  void SetRoot(Instruction* root);
  // Sets a (user) sharding on an instruction; records an error when it does not fit the shape.
  Instruction* Annotate(Instruction* inst, const HloSharding& sharding);
  // Records an error (e.g. from a helper that failed) as the builder's first error.
  void Fail(const std::string& message);

 private:
  Instruction* Make(Opcode op, const std::vector<Instruction*>& operands, const std::function<void(Instruction*)>& configure,
                    const Shape& initial, bool check_declared, const std::string& name);
  void SetMetadata(Instruction* inst, const std::string& label);

  Computation* comp_;
  Status status_;
  struct ScopePart {
    std::string name;
    bool in_names = true;  // false: op_name only (OpNameScope)
  };
  std::vector<ScopePart> scopes_;
  std::string NamingScope() const;  // CurrentScope() without the op_name-only parts
  bool scoped_names_ = false;
};

// Dot dimension numbers in one call (designated initializers such as
// {.lhs_contracting = {1}, .rhs_contracting = {0}} work too, but trip -Wmissing-field-initializers).
inline DotDimensionNumbers DotDims(std::vector<int64_t> lhs_contracting, std::vector<int64_t> rhs_contracting,
                                   std::vector<int64_t> lhs_batch = {}, std::vector<int64_t> rhs_batch = {}) {
  DotDimensionNumbers d;
  d.lhs_contracting = std::move(lhs_contracting);
  d.rhs_contracting = std::move(rhs_contracting);
  d.lhs_batch = std::move(lhs_batch);
  d.rhs_batch = std::move(rhs_batch);
  return d;
}

// Scalar binary computations (two scalar parameters, root = op(p0, p1)), e.g. reducers for reduce
// and all-reduce. Reuses an existing computation of the same name in `module` when its signature
// fits. Names default to "add_f32", "max_f32", ....
Computation* ScalarComputation(Module& module, Opcode op, PrimitiveType type, const std::string& name = "");
inline Computation* ScalarAdd(Module& m, PrimitiveType t) { return ScalarComputation(m, Opcode::kAdd, t); }
inline Computation* ScalarMax(Module& m, PrimitiveType t) { return ScalarComputation(m, Opcode::kMaximum, t); }
inline Computation* ScalarMin(Module& m, PrimitiveType t) { return ScalarComputation(m, Opcode::kMinimum, t); }
inline Computation* ScalarMul(Module& m, PrimitiveType t) { return ScalarComputation(m, Opcode::kMultiply, t); }
// A sort / select comparator: (a, b) -> compare(a, b, direction).
Computation* ScalarComparator(Module& module, PrimitiveType type, ComparisonDirection direction, const std::string& name = "");

// The text of a literal for the given values and shape ("1", "{1, 2}", "{ {1, 2}, {3, 4} }"),
// in the HLO constant syntax, so that printing and re-parsing give the same values.
std::string FormatLiteralText(const Shape& shape, const std::vector<double>& values);
// A scalar literal of type `t`: the value rounded to the type (integers truncated and saturated
// to the type's range, written exactly), as Builder::ConstantScalar makes it.
Literal ScalarLiteral(PrimitiveType t, double value);

}  // namespace shardscope
