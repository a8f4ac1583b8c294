// Array and tuple shapes with XLA's element types and text form: f32[8,256]{1,0}, (f32[2], s32[]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace shardscope {

enum class PrimitiveType : uint8_t {
  kInvalid, kPred, kS1, kS2, kS4, kS8, kS16, kS32, kS64, kU1, kU2, kU4, kU8, kU16, kU32, kU64,
  kF4E2M1FN, kF8E3M4, kF8E4M3, kF8E5M2, kF8E4M3FN, kF8E4M3B11FNUZ, kF8E5M2FNUZ, kF8E4M3FNUZ, kF8E8M0FNU,
  kF16, kBF16, kF32, kF64, kC64, kC128, kToken, kTuple, kOpaque,
};

std::string_view PrimitiveTypeName(PrimitiveType t);                 // "f32", "bf16", ...
std::optional<PrimitiveType> PrimitiveTypeFromName(std::string_view name);
// Bytes per element (sub-byte types round up to 1). 0 for token/tuple/opaque.
int64_t PrimitiveTypeBytes(PrimitiveType t);
// Bits per element as stored (pred 8, s4/u4/f4e2m1fn 4, s2/u2 2, s1/u1 1); 0 for token/tuple/opaque.
int64_t PrimitiveTypeBitWidth(PrimitiveType t);
bool IsFloatingPoint(PrimitiveType t);
bool IsSignedInteger(PrimitiveType t);
bool IsUnsignedInteger(PrimitiveType t);
bool IsInteger(PrimitiveType t);   // signed or unsigned
bool IsComplex(PrimitiveType t);

struct Shape {
  PrimitiveType type = PrimitiveType::kInvalid;
  std::vector<int64_t> dims;                 // arrays only
  std::vector<bool> dynamic_dims;            // '<=' bounded-dynamic markers; empty = all static
  std::vector<int64_t> minor_to_major;       // layout, kept for printing; may be empty
  bool has_layout = false;
  std::string layout_extra;                  // anything after minor_to_major in {...}, kept verbatim
  std::vector<Shape> tuple;                  // tuples only

  Shape() = default;
  Shape(PrimitiveType t, std::vector<int64_t> d) : type(t), dims(std::move(d)) {}
  static Shape Tuple(std::vector<Shape> elements);
  static Shape Token();
  static Shape Scalar(PrimitiveType t) { return Shape(t, {}); }

  bool IsTuple() const { return type == PrimitiveType::kTuple; }
  bool IsToken() const { return type == PrimitiveType::kToken; }
  bool IsArray() const { return !IsTuple() && !IsToken() && type != PrimitiveType::kOpaque; }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t dim(int64_t i) const { return dims[static_cast<size_t>(i)]; }
  int64_t ElementCount() const;  // arrays: product of dims; tuples: sum over leaves
  int64_t ByteSize() const;      // arrays: elements x element size; tuples: sum over leaves
  // Number of array leaves (1 for an array, recursive count for tuples).
  int64_t LeafCount() const;

  // Equality of type and dimensions (layouts ignored), recursively for tuples.
  bool Compatible(const Shape& other) const;
  bool operator==(const Shape& other) const;  // includes layout when both have one

  std::string ToString(bool print_layout = true) const;
};

// Parses "f32[8,256]{1,0}", "(f32[2], s32[])", "token[]", "pred[]". On error the Error's offset is
// relative to `text`. On success `*consumed` (if given) is the number of bytes read.
Result<Shape> ParseShape(std::string_view text, size_t* consumed = nullptr);

}  // namespace shardscope
