#include "core/eval/tensor.h"

#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace shardscope {

namespace {

float RoundToBf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return std::bit_cast<float>((bits | 0x00400000u) & 0xFFFF0000u);  // quiet NaN
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7FFFu + lsb;
  bits &= 0xFFFF0000u;
  return std::bit_cast<float>(bits);
}

float RoundToF16(float f) { return static_cast<float>(Eigen::half(f)); }

}  // namespace

float ReducePrecisionF32(float x, int exponent_bits, int mantissa_bits) {
  if (std::isnan(x)) return mantissa_bits > 0 ? x : std::numeric_limits<float>::infinity();
  uint32_t bits = std::bit_cast<uint32_t>(x);
  constexpr int kMantissa = 23, kExponent = 8;
  if (mantissa_bits < kMantissa && mantissa_bits >= 0) {
    const uint32_t last_bit_mask = 1u << (kMantissa - mantissa_bits);
    const uint32_t base_bias = (last_bit_mask >> 1) - 1;
    const uint32_t last_bit = (bits & last_bit_mask) >> (kMantissa - mantissa_bits);
    const uint32_t truncation_mask = ~(last_bit_mask - 1);
    bits = (bits + last_bit + base_bias) & truncation_mask;
  }
  if (exponent_bits < kExponent && exponent_bits > 0) {
    const uint32_t bias = 127;
    const uint32_t reduced_bias = (1u << (exponent_bits - 1)) - 1;
    const uint32_t max_exp = bias + reduced_bias;
    const uint32_t min_exp = bias - reduced_bias;
    const uint32_t exp = bits & 0x7F800000u;
    const uint32_t sign = bits & 0x80000000u;
    if (exp > (max_exp << 23))
      bits = sign | 0x7F800000u;
    else if (exp <= (min_exp << 23))
      bits = sign;
  }
  return std::bit_cast<float>(bits);
}

float RoundToFloatType(PrimitiveType t, double v) {
  const float f = static_cast<float>(v);
  switch (t) {
    case PrimitiveType::kBF16: return RoundToBf16(f);
    case PrimitiveType::kF16: return RoundToF16(f);
    case PrimitiveType::kF8E5M2:
    case PrimitiveType::kF8E5M2FNUZ: return ReducePrecisionF32(f, 5, 2);
    case PrimitiveType::kF8E4M3FN:
    case PrimitiveType::kF8E4M3B11FNUZ:
    case PrimitiveType::kF8E4M3FNUZ:
    case PrimitiveType::kF8E4M3: return ReducePrecisionF32(f, 4, 3);
    case PrimitiveType::kF8E3M4: return ReducePrecisionF32(f, 3, 4);
    case PrimitiveType::kF4E2M1FN: return ReducePrecisionF32(f, 2, 1);
    default: return f;
  }
}

int BitWidth(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::kPred: return 1;
    case PrimitiveType::kS1: case PrimitiveType::kU1: return 1;
    case PrimitiveType::kS2: case PrimitiveType::kU2: return 2;
    case PrimitiveType::kS4: case PrimitiveType::kU4: return 4;
    case PrimitiveType::kS8: case PrimitiveType::kU8: return 8;
    case PrimitiveType::kS16: case PrimitiveType::kU16: case PrimitiveType::kF16: case PrimitiveType::kBF16: return 16;
    case PrimitiveType::kS32: case PrimitiveType::kU32: case PrimitiveType::kF32: return 32;
    case PrimitiveType::kS64: case PrimitiveType::kU64: case PrimitiveType::kF64: return 64;
    default: return 8;
  }
}

int64_t WrapToIntType(PrimitiveType t, int64_t v) {
  if (t == PrimitiveType::kPred) return v != 0 ? 1 : 0;
  const int b = BitWidth(t);
  if (b >= 64) return v;
  const uint64_t u = static_cast<uint64_t>(v);
  const uint64_t mask = (uint64_t{1} << b) - 1;
  if (IsUnsignedInteger(t)) return static_cast<int64_t>(u & mask);
  const uint64_t low = u & mask;
  const uint64_t sign = uint64_t{1} << (b - 1);
  return static_cast<int64_t>((low ^ sign)) - static_cast<int64_t>(sign);
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    s[static_cast<size_t>(i)] = s[static_cast<size_t>(i + 1)] * dims[static_cast<size_t>(i + 1)];
  return s;
}

int64_t ElementCountOf(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= (d < 0 ? 0 : d);
  return n;
}

Tensor::Storage Tensor::StorageFor(PrimitiveType t) {
  if (t == PrimitiveType::kF64) return Storage::kDouble;
  if (IsFloatingPoint(t)) return Storage::kFloat;
  if (t == PrimitiveType::kPred || IsInteger(t)) return Storage::kInt;
  return Storage::kNone;
}

bool Tensor::SupportsType(PrimitiveType t) { return StorageFor(t) != Storage::kNone; }

const Tensor::Buffer& Tensor::EmptyBuffer() {
  static const Buffer empty;
  return empty;
}

Tensor::Tensor(const Shape& shape) : shape_(shape) {
  if (shape.IsTuple()) {
    tuple_.reserve(shape.tuple.size());
    for (const Shape& s : shape.tuple) tuple_.emplace_back(s);
    return;
  }
  if (!shape.IsArray()) return;
  storage_ = StorageFor(shape.type);
  if (storage_ == Storage::kNone) return;
  size_ = ElementCountOf(shape.dims);
  buf_ = std::make_shared<Buffer>();
  switch (storage_) {
    case Storage::kFloat: buf_->f.assign(static_cast<size_t>(size_), 0.0f); break;
    case Storage::kDouble: buf_->d.assign(static_cast<size_t>(size_), 0.0); break;
    case Storage::kInt: buf_->i.assign(static_cast<size_t>(size_), 0); break;
    case Storage::kNone: break;
  }
}

Tensor Tensor::Tuple(std::vector<Tensor> elements) {
  Tensor t;
  std::vector<Shape> shapes;
  shapes.reserve(elements.size());
  for (const Tensor& e : elements) shapes.push_back(e.shape());
  t.shape_ = Shape::Tuple(std::move(shapes));
  t.tuple_ = std::move(elements);
  return t;
}

Tensor Tensor::Token() { return Tensor(Shape::Token()); }

Tensor Tensor::Scalar(PrimitiveType t, double v) {
  Tensor s(Shape::Scalar(t));
  if (s.size_ == 1) s.SetDouble(0, v);
  return s;
}

Result<Tensor> Tensor::FromValues(PrimitiveType t, std::vector<int64_t> dims, const std::vector<double>& values) {
  if (!SupportsType(t)) return Error("tensor: element type " + std::string(PrimitiveTypeName(t)) + " is not supported");
  Tensor out(Shape(t, std::move(dims)));
  if (static_cast<int64_t>(values.size()) != out.size())
    return Error("tensor: " + out.shape().ToString(false) + " needs " + std::to_string(out.size()) +
                 " values, got " + std::to_string(values.size()));
  for (int64_t i = 0; i < out.size(); ++i) out.SetDouble(i, values[static_cast<size_t>(i)]);
  return out;
}

Result<Tensor> Tensor::FromInts(PrimitiveType t, std::vector<int64_t> dims, const std::vector<int64_t>& values) {
  if (!SupportsType(t)) return Error("tensor: element type " + std::string(PrimitiveTypeName(t)) + " is not supported");
  Tensor out(Shape(t, std::move(dims)));
  if (static_cast<int64_t>(values.size()) != out.size())
    return Error("tensor: " + out.shape().ToString(false) + " needs " + std::to_string(out.size()) +
                 " values, got " + std::to_string(values.size()));
  for (int64_t i = 0; i < out.size(); ++i) out.SetInt(i, values[static_cast<size_t>(i)]);
  return out;
}

double Tensor::GetDouble(int64_t i) const {
  switch (storage_) {
    case Storage::kFloat: return buf_->f[static_cast<size_t>(i)];
    case Storage::kDouble: return buf_->d[static_cast<size_t>(i)];
    case Storage::kInt:
      if (shape_.type == PrimitiveType::kU64) return static_cast<double>(static_cast<uint64_t>(buf_->i[static_cast<size_t>(i)]));
      return static_cast<double>(buf_->i[static_cast<size_t>(i)]);
    case Storage::kNone: return 0.0;
  }
  return 0.0;
}

namespace {
int64_t DoubleToInt64Saturating(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

// Float -> integer type conversion: truncation toward zero, saturating at the type's range, NaN -> 0.
int64_t DoubleToIntType(PrimitiveType t, double v) {
  if (t == PrimitiveType::kPred) return v != 0.0 ? 1 : 0;
  if (std::isnan(v)) return 0;
  const int b = BitWidth(t);
  if (IsUnsignedInteger(t)) {
    if (v <= 0) return 0;
    if (b >= 64) {
      if (v >= 1.8446744073709552e19) return -1;  // all ones
      return static_cast<int64_t>(static_cast<uint64_t>(v));
    }
    const double max = std::ldexp(1.0, b) - 1;
    return static_cast<int64_t>(std::trunc(std::min(v, max)));
  }
  if (b >= 64) return DoubleToInt64Saturating(v);
  const double max = std::ldexp(1.0, b - 1) - 1, min = -std::ldexp(1.0, b - 1);
  return static_cast<int64_t>(std::trunc(std::clamp(v, min, max)));
}
}  // namespace

int64_t FloatToIntType(PrimitiveType t, double v) { return DoubleToIntType(t, v); }

int64_t Tensor::GetInt(int64_t i) const {
  switch (storage_) {
    case Storage::kFloat: return DoubleToInt64Saturating(buf_->f[static_cast<size_t>(i)]);
    case Storage::kDouble: return DoubleToInt64Saturating(buf_->d[static_cast<size_t>(i)]);
    case Storage::kInt: return buf_->i[static_cast<size_t>(i)];
    case Storage::kNone: return 0;
  }
  return 0;
}

void Tensor::SetDouble(int64_t i, double v) {
  if (storage_ == Storage::kNone) return;
  Detach();
  switch (storage_) {
    case Storage::kFloat: buf_->f[static_cast<size_t>(i)] = RoundToFloatType(shape_.type, v); break;
    case Storage::kDouble: buf_->d[static_cast<size_t>(i)] = v; break;
    case Storage::kInt: buf_->i[static_cast<size_t>(i)] = DoubleToIntType(shape_.type, v); break;
    case Storage::kNone: break;
  }
}

void Tensor::SetInt(int64_t i, int64_t v) {
  if (storage_ == Storage::kNone) return;
  Detach();
  switch (storage_) {
    case Storage::kFloat: buf_->f[static_cast<size_t>(i)] = RoundToFloatType(shape_.type, static_cast<double>(v)); break;
    case Storage::kDouble: buf_->d[static_cast<size_t>(i)] = static_cast<double>(v); break;
    case Storage::kInt: buf_->i[static_cast<size_t>(i)] = WrapToIntType(shape_.type, v); break;
    case Storage::kNone: break;
  }
}

int64_t Tensor::LinearIndex(const std::vector<int64_t>& index) const {
  int64_t li = 0;
  for (size_t d = 0; d < index.size() && d < shape_.dims.size(); ++d) li = li * shape_.dims[d] + index[d];
  return li;
}

double Tensor::At(const std::vector<int64_t>& index) const { return GetDouble(LinearIndex(index)); }

std::vector<double> Tensor::ToDoubles() const {
  std::vector<double> v(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) v[static_cast<size_t>(i)] = GetDouble(i);
  return v;
}

std::vector<int64_t> Tensor::ToInts() const {
  std::vector<int64_t> v(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) v[static_cast<size_t>(i)] = GetInt(i);
  return v;
}

bool Tensor::Identical(const Tensor& o) const {
  if (!shape_.Compatible(o.shape_)) return false;
  if (IsTuple()) {
    if (tuple_.size() != o.tuple_.size()) return false;
    for (size_t i = 0; i < tuple_.size(); ++i)
      if (!tuple_[i].Identical(o.tuple_[i])) return false;
    return true;
  }
  if (storage_ != o.storage_ || size_ != o.size_) return false;
  switch (storage_) {
    case Storage::kInt: return ints() == o.ints();
    case Storage::kFloat: {
      const auto &a = floats(), &b = o.floats();
      for (size_t i = 0; i < a.size(); ++i)
        if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
      return true;
    }
    case Storage::kDouble: {
      const auto &a = doubles(), &b = o.doubles();
      for (size_t i = 0; i < a.size(); ++i)
        if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
      return true;
    }
    case Storage::kNone: return true;
  }
  return true;
}

std::string Tensor::ToString(int64_t max_elements) const {
  if (IsTuple()) {
    std::string s = "(";
    for (size_t i = 0; i < tuple_.size(); ++i) {
      if (i) s += ", ";
      s += tuple_[i].ToString(max_elements);
    }
    return s + ")";
  }
  std::string s = shape_.ToString(false);
  if (!IsArray()) return s;
  s += " {";
  for (int64_t i = 0; i < size_ && i < max_elements; ++i) {
    if (i) s += ", ";
    if (shape_.type == PrimitiveType::kPred) {
      s += GetInt(i) ? "true" : "false";
    } else if (storage_ == Storage::kInt) {
      s += shape_.type == PrimitiveType::kU64 ? std::to_string(static_cast<uint64_t>(GetInt(i)))
                                              : std::to_string(GetInt(i));
    } else {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.7g", GetDouble(i));
      s += buf;
    }
  }
  if (size_ > max_elements) s += ", ...";
  return s + "}";
}

}  // namespace shardscope
