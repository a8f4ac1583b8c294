// The structure-aware module generator. See module_generator.h.
#include "fuzz/module_generator.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/builder.h"
#include "core/ir/verifier.h"

namespace shardscope::fuzz {

uint64_t ByteReader::Below(uint64_t bound) {
  if (bound <= 1) return 0;
  uint64_t v = 0;
  // One byte for small choices, two for larger ones.
  const int bytes = bound <= 256 ? 1 : 2;
  for (int i = 0; i < bytes; ++i) {
    v <<= 8;
    if (pos_ < size_) v |= data_[pos_++];
  }
  return v % bound;
}

namespace {

int64_t Product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

class Generator {
 public:
  Generator(ByteReader& in, const GeneratorLimits& limits) : in_(in), limits_(limits) {}

  Result<GeneratedModule> Run() {
    GeneratedModule out;
    out.mesh = MakeMesh();
    out.module = std::make_unique<Module>("fuzz");
    module_ = out.module.get();
    module_->num_partitions = out.mesh.num_devices();
    mesh_ = &out.mesh;
    Builder b(module_->AddComputation("main", /*is_entry=*/true));
    b_ = &b;

    const int64_t params = 1 + static_cast<int64_t>(in_.Below(3));
    for (int64_t i = 0; i < params; ++i) NewParameter(RandomShape(ElementType()));
    const int64_t ops = 1 + static_cast<int64_t>(in_.Below(static_cast<uint64_t>(limits_.max_ops)));
    for (int64_t i = 0; i < ops && b.ok(); ++i) AddOp();
    if (!b.ok()) return Error("generator: " + b.status().error().message);

    // Shardings: every parameter usually, other values sometimes.
    for (Instruction* v : values_) {
      const bool is_param = v->opcode() == Opcode::kParameter;
      if (is_param ? !in_.Chance(4) : in_.Chance(3)) Annotate(v);
    }
    // The root: the last value, or a tuple of the last few.
    const int64_t outputs = std::min<int64_t>(static_cast<int64_t>(values_.size()), 1 + static_cast<int64_t>(in_.Below(3)));
    Instruction* root = values_.back();
    if (outputs > 1) {
      std::vector<Instruction*> last(values_.end() - outputs, values_.end());
      root = b.Tuple(last);
    }
    b.SetRoot(root);
    if (!b.ok()) return Error("generator: " + b.status().error().message);
    Status verified = VerifyModule(*module_);
    if (!verified.ok()) return Error("generator: the built module does not verify: " + verified.error().message);
    return out;
  }

 private:
  // ---- mesh and shapes -------------------------------------------------------------------------

  DeviceMesh MakeMesh() {
    static const int64_t kSizes[] = {1, 2, 2, 3, 4};
    static const char* kNames[] = {"X", "Y", "Z"};
    std::vector<MeshAxis> axes;
    int64_t devices = 1;
    const int64_t n_axes = 1 + static_cast<int64_t>(in_.Below(3));
    for (int64_t i = 0; i < n_axes; ++i) {
      int64_t size = kSizes[in_.Below(5)];
      if (devices * size > limits_.max_devices) size = 1;
      devices *= size;
      axes.push_back({kNames[i], size});
    }
    if (devices == 1) {  // a one-device mesh tests nothing: make the first axis 2
      axes[0].size = 2;
      devices = 2;
    }
    std::vector<int64_t> order(static_cast<size_t>(devices));
    std::iota(order.begin(), order.end(), 0);
    if (in_.Chance(4)) {  // a device order other than row-major (non-iota tile assignments)
      for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[in_.Below(i + 1)]);
    }
    return DeviceMesh(std::move(axes), std::move(order));
  }

  PrimitiveType ElementType() { return in_.Chance(8) ? PrimitiveType::kS32 : PrimitiveType::kF32; }

  int64_t Dim() {
    static const int64_t kDims[] = {1, 2, 3, 4, 4, 5, 6, 8};
    return kDims[in_.Below(8)];
  }

  Shape RandomShape(PrimitiveType type) {
    const int64_t rank = in_.Chance(10) ? 0 : 1 + static_cast<int64_t>(in_.Below(3));
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < rank; ++i) dims.push_back(Dim());
    return Shape(type, dims);
  }

  bool Fits(const std::vector<int64_t>& dims) const { return Product(dims) <= limits_.max_elements; }

  // ---- values ----------------------------------------------------------------------------------

  Instruction* NewParameter(const Shape& shape) {
    Instruction* p = b_->Parameter(static_cast<int64_t>(module_->entry()->parameters().size()), shape);
    if (p) values_.push_back(p);
    return p;
  }

  Instruction* Pick() { return values_[in_.Below(values_.size())]; }

  // A value of rank >= min_rank (a new parameter when there is none).
  Instruction* PickRanked(int64_t min_rank, PrimitiveType type = PrimitiveType::kInvalid) {
    std::vector<Instruction*> fit;
    for (Instruction* v : values_) {
      if (v->shape().rank() >= min_rank && (type == PrimitiveType::kInvalid || v->shape().type == type)) fit.push_back(v);
    }
    if (!fit.empty() && !in_.Chance(6)) return fit[in_.Below(fit.size())];
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < std::max<int64_t>(min_rank, 1); ++i) dims.push_back(Dim());
    return NewParameter(Shape(type == PrimitiveType::kInvalid ? PrimitiveType::kF32 : type, dims));
  }

  // A value with exactly `shape` (existing or a new parameter).
  Instruction* PickLike(const Shape& shape) {
    std::vector<Instruction*> fit;
    for (Instruction* v : values_) {
      if (v->shape().Compatible(shape)) fit.push_back(v);
    }
    if (!fit.empty() && !in_.Chance(3)) return fit[in_.Below(fit.size())];
    return NewParameter(Shape(shape.type, shape.dims));
  }

  void Keep(Instruction* v) {
    if (v) values_.push_back(v);
  }

  Instruction* Zero(PrimitiveType type) { return b_->ConstantScalar(type, 0); }

  // ---- ops -------------------------------------------------------------------------------------

  void AddOp() {
    switch (in_.Below(16)) {
      case 0: return Unary();
      case 1: case 2: return BinaryOp();
      case 3: case 4: return DotOp();
      case 5: return TransposeOp();
      case 6: return ReshapeOp();
      case 7: return BroadcastOp();
      case 8: return ReduceOp();
      case 9: return SliceOp();
      case 10: return PadOp();
      case 11: return ConcatenateOp();
      case 12: return ReverseOp();
      case 13: return SelectOp();
      case 14: return DynamicSliceOp();
      default: return ReduceWindowOp();
    }
  }

  void Unary() {
    Instruction* x = Pick();
    const bool is_float = x->shape().type == PrimitiveType::kF32;
    static const Opcode kFloat[] = {Opcode::kNegate, Opcode::kAbs, Opcode::kTanh, Opcode::kCopy};
    static const Opcode kInt[] = {Opcode::kNegate, Opcode::kAbs, Opcode::kCopy};
    if (in_.Chance(5)) {
      Keep(b_->Convert(x, is_float ? PrimitiveType::kS32 : PrimitiveType::kF32));
      return;
    }
    Keep(b_->Unary(is_float ? kFloat[in_.Below(4)] : kInt[in_.Below(3)], x));
  }

  void BinaryOp() {
    static const Opcode kOps[] = {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply, Opcode::kMaximum, Opcode::kMinimum};
    Instruction* x = Pick();
    Instruction* y = PickLike(x->shape());
    Keep(b_->Binary(kOps[in_.Below(5)], x, y));
  }

  void SelectOp() {
    Instruction* x = Pick();
    Instruction* y = PickLike(x->shape());
    static const ComparisonDirection kDirs[] = {ComparisonDirection::kLt, ComparisonDirection::kGt, ComparisonDirection::kEq};
    Instruction* pred = b_->Compare(x, y, kDirs[in_.Below(3)]);
    Keep(b_->Select(pred, x, y));
  }

  void DotOp() {
    Instruction* x = PickRanked(1, PrimitiveType::kF32);
    if (!x) return;
    const Shape& xs = x->shape();
    const int64_t contracting = static_cast<int64_t>(in_.Below(static_cast<uint64_t>(xs.rank())));
    // A batch dim (the first other dim) sometimes.
    int64_t batch = -1;
    if (xs.rank() >= 2 && in_.Chance(3)) batch = contracting == 0 ? 1 : 0;
    const int64_t n = Dim();
    std::vector<int64_t> rhs_dims;
    if (batch >= 0) rhs_dims.push_back(xs.dim(batch));
    rhs_dims.push_back(xs.dim(contracting));
    rhs_dims.push_back(n);
    std::vector<int64_t> out_dims;
    if (batch >= 0) out_dims.push_back(xs.dim(batch));
    for (int64_t d = 0; d < xs.rank(); ++d) {
      if (d != contracting && d != batch) out_dims.push_back(xs.dim(d));
    }
    out_dims.push_back(n);
    if (!Fits(out_dims)) return;
    Instruction* w = PickLike(Shape(PrimitiveType::kF32, rhs_dims));
    const int64_t rhs_contracting = batch >= 0 ? 1 : 0;
    Keep(b_->Dot(x, w,
                 batch >= 0 ? DotDims({contracting}, {rhs_contracting}, {batch}, {0}) : DotDims({contracting}, {rhs_contracting})));
  }

  void TransposeOp() {
    Instruction* x = PickRanked(2);
    std::vector<int64_t> perm(static_cast<size_t>(x->shape().rank()));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[in_.Below(i + 1)]);
    Keep(b_->Transpose(x, perm));
  }

  void ReshapeOp() {
    Instruction* x = PickRanked(1);
    std::vector<int64_t> dims = x->shape().dims;
    switch (in_.Below(3)) {
      case 0:  // flatten
        dims = {Product(dims)};
        break;
      case 1:  // merge two adjacent dims
        if (dims.size() >= 2) {
          const size_t i = in_.Below(dims.size() - 1);
          dims[i] *= dims[i + 1];
          dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        }
        break;
      default: {  // split a dim by one of its factors, or add a dim of 1
        const size_t i = in_.Below(dims.size());
        const int64_t d = dims[i];
        int64_t f = 1;
        for (int64_t c : {2, 3, 4}) {
          if (d % c == 0 && d > c && in_.Chance(2)) f = c;
        }
        dims[i] = d / f;
        dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(i) + 1, f);
        break;
      }
    }
    Keep(b_->Reshape(x, dims));
  }

  void BroadcastOp() {
    Instruction* x = Pick();
    const int64_t rank = x->shape().rank();
    if (rank >= 3) return Keep(b_->Copy(x));
    // Insert one new dim at a random position; the operand's dims keep their order.
    const int64_t at = static_cast<int64_t>(in_.Below(static_cast<uint64_t>(rank + 1)));
    std::vector<int64_t> out, mapping;
    for (int64_t d = 0, o = 0; d <= rank; ++d) {
      if (d == at) out.push_back(Dim()), ++o;
      if (d < rank) {
        mapping.push_back(o++);
        out.push_back(x->shape().dim(d));
      }
    }
    if (!Fits(out)) return;
    Keep(b_->Broadcast(x, out, mapping));
  }

  void ReduceOp() {
    Instruction* x = PickRanked(1);
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < x->shape().rank(); ++d) {
      if (in_.Chance(2)) dims.push_back(d);
    }
    if (dims.empty()) dims.push_back(static_cast<int64_t>(in_.Below(static_cast<uint64_t>(x->shape().rank()))));
    const PrimitiveType t = x->shape().type;
    static const Opcode kReducers[] = {Opcode::kAdd, Opcode::kMaximum, Opcode::kMinimum};
    const Opcode op = kReducers[in_.Below(3)];
    // The identity as the initial value (max/min: the lowest/highest value the inputs can take is
    // not needed: any value works, the same on both sides).
    Keep(b_->Reduce(x, Zero(t), dims, ScalarComputation(*module_, op, t)));
  }

  void SliceOp() {
    Instruction* x = PickRanked(1);
    std::vector<int64_t> starts, limits, strides;
    for (int64_t d : x->shape().dims) {
      const int64_t s = static_cast<int64_t>(in_.Below(static_cast<uint64_t>(d)));
      const int64_t l = s + 1 + static_cast<int64_t>(in_.Below(static_cast<uint64_t>(d - s)));
      starts.push_back(s);
      limits.push_back(l);
      strides.push_back(in_.Chance(4) ? 2 : 1);
    }
    Keep(b_->Slice(x, starts, limits, strides));
  }

  void PadOp() {
    Instruction* x = PickRanked(1);
    std::vector<PaddingDim> pads;
    std::vector<int64_t> out;
    for (int64_t d : x->shape().dims) {
      PaddingDim p;
      p.low = static_cast<int64_t>(in_.Below(3)) - (d > 1 && in_.Chance(5) ? 3 : 0);
      p.high = static_cast<int64_t>(in_.Below(3));
      p.interior = in_.Chance(5) ? 1 : 0;
      int64_t size = p.low + d + (d - 1) * p.interior + p.high;
      if (size < 1) {
        p.low = 0;
        size = d + (d - 1) * p.interior + p.high;
      }
      pads.push_back(p);
      out.push_back(size);
    }
    if (!Fits(out)) return;
    Keep(b_->Pad(x, Zero(x->shape().type), pads));
  }

  void ConcatenateOp() {
    Instruction* x = PickRanked(1);
    const int64_t dim = static_cast<int64_t>(in_.Below(static_cast<uint64_t>(x->shape().rank())));
    Shape other = x->shape();
    other.dims[static_cast<size_t>(dim)] = Dim();
    std::vector<int64_t> out = x->shape().dims;
    out[static_cast<size_t>(dim)] += other.dims[static_cast<size_t>(dim)];
    if (!Fits(out)) return;
    Keep(b_->Concatenate({x, PickLike(other)}, dim));
  }

  void ReverseOp() {
    Instruction* x = PickRanked(1);
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < x->shape().rank(); ++d) {
      if (in_.Chance(2)) dims.push_back(d);
    }
    Keep(b_->Reverse(x, dims));
  }

  void DynamicSliceOp() {
    Instruction* x = PickRanked(1);
    std::vector<Instruction*> starts;
    std::vector<int64_t> sizes;
    for (int64_t d : x->shape().dims) {
      const int64_t size = 1 + static_cast<int64_t>(in_.Below(static_cast<uint64_t>(d)));
      sizes.push_back(size);
      // Start indices beyond the valid range are clamped (XLA semantics); try those too.
      starts.push_back(b_->ConstantScalar(PrimitiveType::kS32, static_cast<double>(in_.Below(static_cast<uint64_t>(d + 2)))));
    }
    if (in_.Chance(2)) {
      Keep(b_->DynamicSlice(x, starts, sizes));
      return;
    }
    Instruction* update = PickLike(Shape(x->shape().type, sizes));
    Keep(b_->DynamicUpdateSlice(x, update, starts));
  }

  void ReduceWindowOp() {
    Instruction* x = PickRanked(1);
    Window w;
    for (int64_t d : x->shape().dims) {
      WindowDimension wd;
      wd.size = 1 + static_cast<int64_t>(in_.Below(static_cast<uint64_t>(std::min<int64_t>(d, 3))));
      wd.stride = 1 + static_cast<int64_t>(in_.Below(2));
      wd.padding_low = static_cast<int64_t>(in_.Below(2));
      wd.padding_high = static_cast<int64_t>(in_.Below(2));
      w.dims.push_back(wd);
    }
    const PrimitiveType t = x->shape().type;
    Keep(b_->ReduceWindow(x, Zero(t), w, ScalarComputation(*module_, in_.Chance(2) ? Opcode::kAdd : Opcode::kMaximum, t)));
  }

  // ---- shardings -------------------------------------------------------------------------------

  void Annotate(Instruction* v) {
    const int64_t rank = v->shape().rank();
    switch (in_.Below(10)) {
      case 0:
        b_->Annotate(v, HloSharding::Replicate());
        return;
      case 1:
        b_->Annotate(v, HloSharding::AssignDevice(static_cast<int64_t>(in_.Below(static_cast<uint64_t>(mesh_->num_devices())))));
        return;
      default:
        break;
    }
    if (rank == 0) return;
    // Each mesh axis splits a random dim (several axes may split one dim, major first) or is left
    // out (partial replication).
    AxisAssignment a;
    a.dim_axes.resize(static_cast<size_t>(rank));
    for (int64_t axis = 0; axis < mesh_->num_axes(); ++axis) {
      const uint64_t choice = in_.Below(static_cast<uint64_t>(rank + 1));
      if (choice < static_cast<uint64_t>(rank)) a.dim_axes[choice].push_back(axis);
    }
    auto s = MeshShard(rank, *mesh_, a);
    if (s.ok()) b_->Annotate(v, *s);
  }

  ByteReader& in_;
  GeneratorLimits limits_;
  Module* module_ = nullptr;
  const DeviceMesh* mesh_ = nullptr;
  Builder* b_ = nullptr;
  std::vector<Instruction*> values_;
};

}  // namespace

Result<GeneratedModule> GenerateModule(ByteReader& in, const GeneratorLimits& limits) {
  return Generator(in, limits).Run();
}

}  // namespace shardscope::fuzz
