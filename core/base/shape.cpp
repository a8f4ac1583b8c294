#include "core/base/shape.h"

#include <array>
#include <charconv>
#include <limits>

namespace shardscope {

namespace {
struct TypeInfo {
  PrimitiveType type;
  std::string_view name;
  int64_t bytes;
};
constexpr std::array<TypeInfo, 34> kTypes = {{
    {PrimitiveType::kInvalid, "invalid", 0},  {PrimitiveType::kPred, "pred", 1},
    {PrimitiveType::kS1, "s1", 1},            {PrimitiveType::kU1, "u1", 1},
    {PrimitiveType::kF4E2M1FN, "f4e2m1fn", 1}, {PrimitiveType::kF8E3M4, "f8e3m4", 1},
    {PrimitiveType::kF8E4M3, "f8e4m3", 1},
    {PrimitiveType::kS2, "s2", 1},            {PrimitiveType::kS4, "s4", 1},
    {PrimitiveType::kS8, "s8", 1},            {PrimitiveType::kS16, "s16", 2},
    {PrimitiveType::kS32, "s32", 4},          {PrimitiveType::kS64, "s64", 8},
    {PrimitiveType::kU2, "u2", 1},            {PrimitiveType::kU4, "u4", 1},
    {PrimitiveType::kU8, "u8", 1},            {PrimitiveType::kU16, "u16", 2},
    {PrimitiveType::kU32, "u32", 4},          {PrimitiveType::kU64, "u64", 8},
    {PrimitiveType::kF8E5M2, "f8e5m2", 1},    {PrimitiveType::kF8E4M3FN, "f8e4m3fn", 1},
    {PrimitiveType::kF8E4M3B11FNUZ, "f8e4m3b11fnuz", 1}, {PrimitiveType::kF8E5M2FNUZ, "f8e5m2fnuz", 1},
    {PrimitiveType::kF8E4M3FNUZ, "f8e4m3fnuz", 1}, {PrimitiveType::kF8E8M0FNU, "f8e8m0fnu", 1},
    {PrimitiveType::kF16, "f16", 2},
    {PrimitiveType::kBF16, "bf16", 2},        {PrimitiveType::kF32, "f32", 4},
    {PrimitiveType::kF64, "f64", 8},          {PrimitiveType::kC64, "c64", 8},
    {PrimitiveType::kC128, "c128", 16},       {PrimitiveType::kToken, "token", 0},
    {PrimitiveType::kTuple, "tuple", 0},      {PrimitiveType::kOpaque, "opaque", 0},
}};

const TypeInfo& Info(PrimitiveType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i;
  return kTypes[0];
}

bool IsIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Overflow-safe multiply for element counts.
int64_t SatMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a > std::numeric_limits<int64_t>::max() / b) return std::numeric_limits<int64_t>::max();
  return a * b;
}
}  // namespace

std::string_view PrimitiveTypeName(PrimitiveType t) { return Info(t).name; }

std::optional<PrimitiveType> PrimitiveTypeFromName(std::string_view name) {
  for (const auto& i : kTypes)
    if (i.name == name && i.type != PrimitiveType::kInvalid && i.type != PrimitiveType::kTuple) return i.type;
  return std::nullopt;
}

int64_t PrimitiveTypeBytes(PrimitiveType t) { return Info(t).bytes; }

int64_t PrimitiveTypeBitWidth(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::kS1: case PrimitiveType::kU1: return 1;
    case PrimitiveType::kS2: case PrimitiveType::kU2: return 2;
    case PrimitiveType::kS4: case PrimitiveType::kU4: case PrimitiveType::kF4E2M1FN: return 4;
    default: return PrimitiveTypeBytes(t) * 8;
  }
}

bool IsFloatingPoint(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::kF4E2M1FN: case PrimitiveType::kF8E3M4: case PrimitiveType::kF8E4M3:
    case PrimitiveType::kF8E5M2: case PrimitiveType::kF8E4M3FN: case PrimitiveType::kF8E4M3B11FNUZ:
    case PrimitiveType::kF8E5M2FNUZ: case PrimitiveType::kF8E4M3FNUZ: case PrimitiveType::kF8E8M0FNU:
    case PrimitiveType::kF16:
    case PrimitiveType::kBF16: case PrimitiveType::kF32: case PrimitiveType::kF64:
      return true;
    default:
      return false;
  }
}
bool IsSignedInteger(PrimitiveType t) {
  return t == PrimitiveType::kS1 || t == PrimitiveType::kS2 || t == PrimitiveType::kS4 || t == PrimitiveType::kS8 ||
         t == PrimitiveType::kS16 || t == PrimitiveType::kS32 || t == PrimitiveType::kS64;
}
bool IsUnsignedInteger(PrimitiveType t) {
  return t == PrimitiveType::kU1 || t == PrimitiveType::kU2 || t == PrimitiveType::kU4 || t == PrimitiveType::kU8 ||
         t == PrimitiveType::kU16 || t == PrimitiveType::kU32 || t == PrimitiveType::kU64;
}
bool IsInteger(PrimitiveType t) { return IsSignedInteger(t) || IsUnsignedInteger(t); }
bool IsComplex(PrimitiveType t) { return t == PrimitiveType::kC64 || t == PrimitiveType::kC128; }

Shape Shape::Tuple(std::vector<Shape> elements) {
  Shape s;
  s.type = PrimitiveType::kTuple;
  s.tuple = std::move(elements);
  return s;
}

Shape Shape::Token() {
  Shape s;
  s.type = PrimitiveType::kToken;
  return s;
}

int64_t Shape::ElementCount() const {
  if (IsTuple()) {
    int64_t n = 0;
    for (const auto& e : tuple) n += e.ElementCount();
    return n;
  }
  if (!IsArray()) return 0;
  int64_t n = 1;
  for (int64_t d : dims) n = SatMul(n, d < 0 ? 0 : d);
  return n;
}

int64_t Shape::ByteSize() const {
  if (IsTuple()) {
    int64_t n = 0;
    for (const auto& e : tuple) n += e.ByteSize();
    return n;
  }
  return SatMul(ElementCount(), PrimitiveTypeBytes(type));
}

int64_t Shape::LeafCount() const {
  if (!IsTuple()) return 1;
  int64_t n = 0;
  for (const auto& e : tuple) n += e.LeafCount();
  return n;
}

bool Shape::Compatible(const Shape& o) const {
  if (type != o.type) return false;
  if (IsTuple()) {
    if (tuple.size() != o.tuple.size()) return false;
    for (size_t i = 0; i < tuple.size(); ++i)
      if (!tuple[i].Compatible(o.tuple[i])) return false;
    return true;
  }
  return dims == o.dims;
}

bool Shape::operator==(const Shape& o) const {
  if (!Compatible(o)) return false;
  if (IsTuple()) {
    for (size_t i = 0; i < tuple.size(); ++i)
      if (!(tuple[i] == o.tuple[i])) return false;
    return true;
  }
  if (has_layout && o.has_layout && minor_to_major != o.minor_to_major) return false;
  auto dyn = [](const Shape& s, size_t i) { return i < s.dynamic_dims.size() && s.dynamic_dims[i]; };
  for (size_t i = 0; i < dims.size(); ++i)
    if (dyn(*this, i) != dyn(o, i)) return false;
  return true;
}

std::string Shape::ToString(bool print_layout) const {
  if (IsTuple()) {
    std::string s = "(";
    for (size_t i = 0; i < tuple.size(); ++i) {
      if (i) s += ", ";
      s += tuple[i].ToString(print_layout);
    }
    return s + ")";
  }
  std::string s(PrimitiveTypeName(type));
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    if (i < dynamic_dims.size() && dynamic_dims[i]) s += "<=";
    s += std::to_string(dims[i]);
  }
  s += "]";
  if (print_layout && has_layout && IsArray()) {
    s += "{";
    for (size_t i = 0; i < minor_to_major.size(); ++i) {
      if (i) s += ",";
      s += std::to_string(minor_to_major[i]);
    }
    s += layout_extra;
    s += "}";
  }
  return s;
}

namespace {

class ShapeParser {
 public:
  explicit ShapeParser(std::string_view t) : t_(t) {}

  Result<Shape> Parse() {
    SkipSpace();
    if (Peek() == '(') {
      ++p_;
      std::vector<Shape> elems;
      SkipSpace();
      if (Peek() == ')') {
        ++p_;
        return Shape::Tuple({});
      }
      while (true) {
        auto e = Parse();
        if (!e.ok()) return e;
        elems.push_back(std::move(e).value());
        SkipSpace();
        if (Peek() == ',') {
          ++p_;
          continue;
        }
        if (Peek() == ')') {
          ++p_;
          break;
        }
        return Err("expected ',' or ')' in tuple shape");
      }
      return Shape::Tuple(std::move(elems));
    }
    size_t start = p_;
    while (p_ < t_.size() && IsIdentChar(t_[p_])) ++p_;
    std::string_view tname = t_.substr(start, p_ - start);
    if (tname.empty()) return Err("expected a shape such as f32[8,16]", start);
    auto type = PrimitiveTypeFromName(tname);
    if (!type) return Err("unknown element type '" + std::string(tname) + "'", start);
    Shape s;
    s.type = *type;
    if (Peek() != '[') {
      if (*type == PrimitiveType::kToken || *type == PrimitiveType::kOpaque) return s;
      return Err("expected '[' after element type '" + std::string(tname) + "'");
    }
    ++p_;
    SkipSpace();
    if (Peek() != ']') {
      while (true) {
        SkipSpace();
        bool dynamic = false;
        if (t_.substr(p_, 2) == "<=") {
          dynamic = true;
          p_ += 2;
        } else if (Peek() == '?') {
          return Err("unbounded dynamic dimension '?' is not supported");
        }
        int64_t v = 0;
        auto r = ReadInt(&v);
        if (!r.ok()) return r.error();
        s.dims.push_back(v);
        s.dynamic_dims.push_back(dynamic);
        SkipSpace();
        if (Peek() == ',') {
          ++p_;
          continue;
        }
        if (Peek() == ']') break;
        return Err("expected ',' or ']' in dimensions");
      }
    }
    ++p_;  // ']'
    bool any_dynamic = false;
    for (bool d : s.dynamic_dims) any_dynamic |= d;
    if (!any_dynamic) s.dynamic_dims.clear();
    if (s.type == PrimitiveType::kToken) return s;
    if (Peek() == '{') {
      // Layout: {1,0} possibly followed by ":T(8,128)..." tiling/memory-space text, kept verbatim.
      ++p_;
      s.has_layout = true;
      SkipSpace();
      while (p_ < t_.size() && Peek() != '}' && Peek() != ':') {
        int64_t v = 0;
        auto r = ReadInt(&v);
        if (!r.ok()) return r.error();
        s.minor_to_major.push_back(v);
        SkipSpace();
        if (Peek() == ',') {
          ++p_;
          SkipSpace();
        } else if (Peek() != '}' && Peek() != ':') {
          return Err("expected ',' or '}' in layout");
        }
      }
      if (Peek() == ':') {
        size_t b = p_;
        int depth = 0;
        while (p_ < t_.size()) {
          char c = t_[p_];
          if (c == '(' || c == '{') ++depth;
          if (c == ')' || (c == '}' && depth > 0)) --depth;
          else if (c == '}' && depth == 0) break;
          ++p_;
        }
        s.layout_extra = std::string(t_.substr(b, p_ - b));
      }
      if (Peek() != '}') return Err("expected '}' to close the layout");
      ++p_;
      if (!s.minor_to_major.empty() && s.minor_to_major.size() != s.dims.size())
        return Err("layout has " + std::to_string(s.minor_to_major.size()) + " entries for a rank-" +
                   std::to_string(s.dims.size()) + " shape");
    }
    return s;
  }

  size_t pos() const { return p_; }

 private:
  char Peek() const { return p_ < t_.size() ? t_[p_] : '\0'; }
  void SkipSpace() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) ++p_;
  }
  Error Err(std::string msg, size_t at = std::string_view::npos) const {
    return Error(std::move(msg), static_cast<int64_t>(at == std::string_view::npos ? p_ : at));
  }
  Status ReadInt(int64_t* v) {
    size_t start = p_;
    while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
    if (start == p_) {
      std::string found = p_ < t_.size() ? std::string("'") + t_[p_] + "'" : "end of input";
      return Err("expected a non-negative integer, found " + found, start);
    }
    auto [ptr, ec] = std::from_chars(t_.data() + start, t_.data() + p_, *v);
    if (ec != std::errc()) return Err("integer out of range", start);
    return Status::Ok();
  }

  std::string_view t_;
  size_t p_ = 0;
};

}  // namespace

Result<Shape> ParseShape(std::string_view text, size_t* consumed) {
  ShapeParser p(text);
  auto r = p.Parse();
  if (r.ok() && consumed) *consumed = p.pos();
  return r;
}

}  // namespace shardscope
