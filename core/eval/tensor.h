// Dense tensors for the reference evaluator: a shape plus row-major storage, or a tuple of tensors.
//
// Storage by element type:
//   f32, bf16, f16, f8*  -> float, rounded to the type's precision on every write (so a bf16 tensor
//                           only ever holds bf16-representable values and results match bf16 math)
//   f64                  -> double
//   pred, s*, u*         -> int64_t, wrapped to the type's width on every write (s32 overflow wraps
//                           like s32; pred holds 0 or 1; u64 keeps its bit pattern)
//   token                -> no data
// Complex types are not supported (an evaluator Error, never a crash).
// Copies share their element buffer until one of them writes (copy-on-write), so passing tensors
// through tuples, get-tuple-element, reshape, while-loop state and collectives costs no copies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/shape.h"
#include "core/base/status.h"

namespace shardscope {

class Tensor {
 public:
  enum class Storage : uint8_t { kNone, kFloat, kDouble, kInt };

  Tensor() = default;  // invalid (type kInvalid, no data)
  // Zero-filled tensor of `shape` (tuples recursively, tokens empty).
  explicit Tensor(const Shape& shape);
  static Tensor Tuple(std::vector<Tensor> elements);
  static Tensor Token();
  // A scalar of type `t` holding `v` (rounded/wrapped to the type).
  static Tensor Scalar(PrimitiveType t, double v);
  // Row-major values; Error when the count does not match the dims or the type is unsupported.
  static Result<Tensor> FromValues(PrimitiveType t, std::vector<int64_t> dims, const std::vector<double>& values);
  static Result<Tensor> FromInts(PrimitiveType t, std::vector<int64_t> dims, const std::vector<int64_t>& values);

  // Whether element type `t` can be held (arrays of it).
  static bool SupportsType(PrimitiveType t);
  static Storage StorageFor(PrimitiveType t);

  bool valid() const { return shape_.type != PrimitiveType::kInvalid; }
  const Shape& shape() const { return shape_; }
  PrimitiveType type() const { return shape_.type; }
  const std::vector<int64_t>& dims() const { return shape_.dims; }
  int64_t rank() const { return static_cast<int64_t>(shape_.dims.size()); }
  int64_t dim(int64_t i) const { return shape_.dims[static_cast<size_t>(i)]; }
  // Number of array elements (0 for tuples and tokens).
  int64_t size() const { return size_; }
  bool IsTuple() const { return shape_.IsTuple(); }
  bool IsArray() const { return shape_.IsArray(); }
  Storage storage() const { return storage_; }

  const std::vector<Tensor>& elements() const { return tuple_; }
  std::vector<Tensor>& mutable_elements() { return tuple_; }
  const Tensor& element(int64_t i) const { return tuple_[static_cast<size_t>(i)]; }
  int64_t element_count() const { return static_cast<int64_t>(tuple_.size()); }

  // Element access by row-major linear index (arrays).
  double GetDouble(int64_t i) const;
  int64_t GetInt(int64_t i) const;  // floats truncate toward zero (NaN -> 0)
  void SetDouble(int64_t i, double v);
  void SetInt(int64_t i, int64_t v);
  // Multi-index access.
  double At(const std::vector<int64_t>& index) const;
  int64_t LinearIndex(const std::vector<int64_t>& index) const;

  std::vector<double> ToDoubles() const;
  std::vector<int64_t> ToInts() const;

  // Raw storage (the vector that matches storage()). The non-const accessors un-share the buffer
  // first; don't keep the returned reference across a copy of this tensor.
  std::vector<float>& floats() { Detach(); return buf_->f; }
  const std::vector<float>& floats() const { return buf_ ? buf_->f : EmptyBuffer().f; }
  std::vector<double>& doubles() { Detach(); return buf_->d; }
  const std::vector<double>& doubles() const { return buf_ ? buf_->d : EmptyBuffer().d; }
  std::vector<int64_t>& ints() { Detach(); return buf_->i; }
  const std::vector<int64_t>& ints() const { return buf_ ? buf_->i : EmptyBuffer().i; }
  // Whether this tensor's elements are shared with another tensor (copy-on-write pending).
  bool SharesBufferWith(const Tensor& o) const { return buf_ && buf_ == o.buf_; }

  // Same shape (type and dims, layouts ignored) and identical values (NaN equals NaN).
  bool Identical(const Tensor& o) const;

  // Changes the dims without touching the data; the element count must stay the same.
  void SetDimsUnchecked(std::vector<int64_t> dims) { shape_.dims = std::move(dims); shape_.minor_to_major.clear(); shape_.has_layout = false; }

  // "f32[2,3] {1, 2, 3, 4, 5, 6}" (at most `max_elements` values; tuples recursively).
  std::string ToString(int64_t max_elements = 64) const;

 private:
  Shape shape_;
  Storage storage_ = Storage::kNone;
  int64_t size_ = 0;
  struct Buffer {
    std::vector<float> f;
    std::vector<double> d;
    std::vector<int64_t> i;
  };
  static const Buffer& EmptyBuffer();
  void Detach() {
    if (!buf_) buf_ = std::make_shared<Buffer>();
    else if (buf_.use_count() > 1) buf_ = std::make_shared<Buffer>(*buf_);
  }
  std::shared_ptr<Buffer> buf_;
  std::vector<Tensor> tuple_;
};

// Rounds `v` to the precision of floating type `t` (f32: float rounding; bf16/f16: round to nearest
// even; f8 types: reduce-precision to their exponent/mantissa widths). f64 returns v.
float RoundToFloatType(PrimitiveType t, double v);
// Wraps `v` to integer type `t` (two's complement, the type's width); pred -> 0/1.
int64_t WrapToIntType(PrimitiveType t, int64_t v);
// Float -> integer type `t`: truncation toward zero, saturating at the type's range, NaN -> 0;
// pred: v != 0. (u64 values come back as their bit pattern.)
int64_t FloatToIntType(PrimitiveType t, double v);
// Bit width of an integer/pred type (pred 1 ... s64 64).
int BitWidth(PrimitiveType t);
// XLA's reduce-precision on an f32 value (round mantissa to nearest even, then overflow to inf /
// underflow to zero by exponent range).
float ReducePrecisionF32(float x, int exponent_bits, int mantissa_bits);

// Row-major strides of `dims`.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims);
int64_t ElementCountOf(const std::vector<int64_t>& dims);

// Advances a row-major multi-index over `dims`; false when it wrapped around (done).
inline bool NextIndex(std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    const size_t u = static_cast<size_t>(d);
    if (++idx[u] < dims[u]) return true;
    idx[u] = 0;
  }
  return false;
}

// dst[di] = src[si] (flat indices; both tensors have the same storage kind).
inline void CopyElem(Tensor& dst, int64_t di, const Tensor& src, int64_t si) {
  switch (dst.storage()) {
    case Tensor::Storage::kFloat: dst.floats()[static_cast<size_t>(di)] = src.floats()[static_cast<size_t>(si)]; break;
    case Tensor::Storage::kDouble: dst.doubles()[static_cast<size_t>(di)] = src.doubles()[static_cast<size_t>(si)]; break;
    case Tensor::Storage::kInt: dst.ints()[static_cast<size_t>(di)] = src.ints()[static_cast<size_t>(si)]; break;
    case Tensor::Storage::kNone: break;
  }
}

}  // namespace shardscope
