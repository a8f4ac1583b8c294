// XLA HloSharding semantics: construction with XLA's normalisation, text parsing (classic and
// named-mesh forms), printing, semantic equality and the per-device view (GSPMD §3.1, §4.1).
#include "core/sharding/sharding.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <unordered_set>

#include "core/sharding/tile_assignment.h"

namespace shardscope {

namespace {

using SubgroupType = HloSharding::SubgroupType;

std::string JoinInts(const std::vector<int64_t>& v, const char* sep = ",") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(v[i]);
  }
  return out;
}

int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  if (a > std::numeric_limits<int64_t>::max() / b) return std::numeric_limits<int64_t>::max();
  return a * b;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  if (a > std::numeric_limits<int64_t>::max() - b) return std::numeric_limits<int64_t>::max();
  return a + b;
}

int64_t CeilDiv(int64_t a, int64_t b) {
  if (b <= 0) return a;
  if (a <= 0) return 0;
  return a / b + (a % b != 0 ? 1 : 0);
}

// An iota tile assignment of `dims` (`form`: devices = iota reshaped to form.reshape_dims,
// transposed by form.perm, reshaped to dims) as common factors: `dims` and the transposed reshape
// dims each split into runs of consecutive factors, and the reshape dims split the same way
// (`split_reshape`; a factor's `split` is its dim there). Then the tile array, seen with the
// factors as its dims (in tile order), is iota reshaped to split_reshape and transposed by the
// factors' splits — so transposes and sorts of the tile dims become permutations of the factors,
// found without listing the devices. Nullopt when no common factors exist (a dim of `dims` cuts a
// reshape dim unevenly).
struct IotaFactor {
  int64_t size = 1;
  size_t dim = 0;     // of `dims`
  int64_t split = 0;  // of split_reshape
};
struct IotaFactors {
  std::vector<int64_t> split_reshape;
  std::vector<IotaFactor> factors;  // in tile order
};

std::optional<IotaFactors> FactorIota(const std::vector<int64_t>& dims, const IotaForm& form) {
  const std::vector<int64_t>& r = form.reshape_dims;
  const size_t k = r.size();
  std::vector<int64_t> p = form.perm;
  if (p.empty()) {
    p.resize(k);
    std::iota(p.begin(), p.end(), 0);
  }
  if (p.size() != k || !IsPermutation(p)) return std::nullopt;
  IotaFactors out;
  std::vector<size_t> shape_of;  // per factor: its dim of the transposed reshape
  size_t i = 0, j = 0;
  int64_t a = 0, b = 0;
  auto load_a = [&] {
    while (i < dims.size() && dims[i] == 1) ++i;
    a = i < dims.size() ? dims[i] : 0;
  };
  auto load_b = [&] {
    while (j < k && r[static_cast<size_t>(p[j])] == 1) ++j;
    b = j < k ? r[static_cast<size_t>(p[j])] : 0;
  };
  auto add = [&](int64_t size) {
    out.factors.push_back({size, i, 0});
    shape_of.push_back(j);
  };
  load_a();
  load_b();
  while (a > 0 && b > 0) {
    if (a == b) {
      add(a);
      ++i, ++j;
      load_a();
      load_b();
    } else if (a % b == 0) {
      add(b);
      a /= b;
      ++j;
      load_b();
    } else if (b % a == 0) {
      add(a);
      b /= a;
      ++i;
      load_a();
    } else {
      return std::nullopt;
    }
  }
  if (a != 0 || b != 0) return std::nullopt;
  // Each reshape dim split into the factors of the transposed dim it became, major first.
  std::vector<size_t> shape_of_source(k);
  for (size_t t = 0; t < k; ++t) shape_of_source[static_cast<size_t>(p[t])] = t;
  for (size_t src = 0; src < k; ++src) {
    for (size_t f = 0; f < out.factors.size(); ++f) {
      if (shape_of[f] != shape_of_source[src]) continue;
      out.factors[f].split = static_cast<int64_t>(out.split_reshape.size());
      out.split_reshape.push_back(out.factors[f].size);
    }
  }
  return out;
}

// The iota description of that tile assignment transposed by `perm` (its factors regrouped).
std::optional<IotaForm> TransposeIotaForm(const std::vector<int64_t>& dims, const IotaForm& form,
                                          const std::vector<int64_t>& perm) {
  auto f = FactorIota(dims, form);
  if (!f) return std::nullopt;
  std::vector<int64_t> split_perm;
  for (int64_t d : perm) {
    for (const IotaFactor& x : f->factors)
      if (x.dim == static_cast<size_t>(d)) split_perm.push_back(x.split);
  }
  return IotaForm{std::move(f->split_reshape), std::move(split_perm)};
}

// Sorts the devices inside each replication group (the last tile dim), as XLA's PartialTile does,
// keeping an iota description when the sorted list is still one.
TileAssignment SortReplicationGroups(const TileAssignment& tiles) {
  if (tiles.num_dimensions() == 0) return tiles;
  const int64_t group = tiles.dims().back();
  if (group <= 1 || tiles.num_elements() % group != 0) return tiles;
  if (tiles.is_iota()) {
    // A group's devices are its factors' strides combined, and the factors' splits order the
    // strides (an earlier split has a stride larger than all later ones together): the groups
    // are sorted exactly when the last dim's factors are in split order, and sorting them puts
    // them in that order.
    if (auto f = FactorIota(tiles.dims(), IotaForm{tiles.iota_reshape_dims(), tiles.iota_perm()})) {
      const size_t last = tiles.dims().size() - 1;
      std::vector<int64_t> split_perm, group_splits;
      for (const IotaFactor& x : f->factors) (x.dim == last ? group_splits : split_perm).push_back(x.split);
      if (std::is_sorted(group_splits.begin(), group_splits.end())) return tiles;
      std::sort(group_splits.begin(), group_splits.end());
      split_perm.insert(split_perm.end(), group_splits.begin(), group_splits.end());
      return TileAssignment::Iota(tiles.dims(), std::move(f->split_reshape), std::move(split_perm));
    }
  }
  std::vector<int64_t> devices = tiles.devices();
  bool changed = false;
  for (size_t start = 0; start < devices.size(); start += static_cast<size_t>(group)) {
    auto b = devices.begin() + static_cast<std::ptrdiff_t>(start);
    auto e = b + group;
    if (!std::is_sorted(b, e)) {
      std::sort(b, e);
      changed = true;
    }
  }
  if (!changed) return tiles;
  if (tiles.is_iota()) {
    if (auto form = DetectIota(devices)) {
      return TileAssignment::Iota(tiles.dims(), form->reshape_dims, form->perm);
    }
  }
  return TileAssignment::Explicit(tiles.dims(), std::move(devices));
}

// Index of the first character at or after `p` that is neither white space nor inside a /* */
// comment: what the sharding grammar skips between tokens (the parser and the printer share it).
size_t SkipBlank(std::string_view s, size_t p) {
  while (p < s.size()) {
    const char c = s[p];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++p;
    } else if (c == '/' && p + 1 < s.size() && s[p + 1] == '*') {
      const size_t end = s.find("*/", p + 2);
      p = end == std::string_view::npos ? s.size() : end + 2;
    } else {
      break;
    }
  }
  return p;
}

void AppendMetadata(std::string* out, const std::vector<ShardingMetadata>& metadata) {
  if (metadata.empty()) return;
  *out += "metadata={";
  const std::string_view first = metadata.front().text;
  const size_t lead = SkipBlank(first, 0);
  // A single entry printed bare must not read back as the list form ("metadata={{a}, ...}"): the
  // parser looks past blanks and comments for a '{'. So an entry that itself starts with '{', or
  // whose blanks run to its end with a comment still open (the comment would close in whatever is
  // printed after it, "/*index=5*/" in a tuple), is printed as a one-element list.
  const bool starts_with_brace = lead < first.size() && first[lead] == '{';
  // (With "*/" appended, an open comment closes on it and the skip runs past it.)
  const bool open_comment = lead >= first.size() && SkipBlank(std::string(first) + "*/", 0) == first.size() + 2;
  if (metadata.size() == 1 && !starts_with_brace && !open_comment) {
    *out += metadata.front().text;
  } else {
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) *out += ", ";
      *out += "{" + metadata[i].text + "}";
    }
  }
  *out += "}";
}

// ---------------------------------------------------------------------------------------------
// Named-mesh form: {mesh['x'=2,'y'=2], device_ids=(...), [{'x'}, {}], replicated={..}, unreduced={..}}

struct NamedAxisRef {
  int64_t axis = 0;
  int64_t pre_size = 1;
  int64_t size = 1;
  bool sub_axis = false;
  size_t offset = 0;
};

struct NamedSpec {
  std::vector<std::pair<std::string, int64_t>> axes;
  bool has_device_ids = false;
  std::vector<int64_t> device_ids;
  std::vector<std::vector<NamedAxisRef>> dims;
  std::vector<bool> open;
  std::vector<NamedAxisRef> replicated, unreduced, manual;
};

std::string QuoteName(const std::string& name) {
  const char q = name.find('\'') != std::string::npos ? '"' : '\'';
  return std::string(1, q) + name + std::string(1, q);
}

std::string NamedRefToString(const NamedSpec& spec, const NamedAxisRef& ref) {
  std::string out = QuoteName(spec.axes[static_cast<size_t>(ref.axis)].first);
  if (ref.sub_axis) out += ":(" + std::to_string(ref.pre_size) + ")" + std::to_string(ref.size);
  return out;
}

std::string NamedRefsToString(const NamedSpec& spec, const std::vector<NamedAxisRef>& refs) {
  std::string out;
  for (size_t i = 0; i < refs.size(); ++i) {
    if (i) out += ", ";
    out += NamedRefToString(spec, refs[i]);
  }
  return out;
}

std::string NamedSpecToString(const NamedSpec& spec) {
  std::string out = "{mesh[";
  for (size_t i = 0; i < spec.axes.size(); ++i) {
    if (i) out += ",";
    out += QuoteName(spec.axes[i].first) + "=" + std::to_string(spec.axes[i].second);
  }
  out += "]";
  if (spec.has_device_ids) out += ", device_ids=(" + JoinInts(spec.device_ids) + ")";
  out += ", [";
  for (size_t d = 0; d < spec.dims.size(); ++d) {
    if (d) out += ", ";
    out += "{" + NamedRefsToString(spec, spec.dims[d]);
    if (spec.open[d]) out += spec.dims[d].empty() ? "?" : ", ?";
    out += "}";
  }
  out += "]";
  if (!spec.replicated.empty()) out += ", replicated={" + NamedRefsToString(spec, spec.replicated) + "}";
  if (!spec.unreduced.empty()) out += ", unreduced={" + NamedRefsToString(spec, spec.unreduced) + "}";
  if (!spec.manual.empty()) out += ", manual={" + NamedRefsToString(spec, spec.manual) + "}";
  out += "}";
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parser.

class ShardingParser {
 public:
  explicit ShardingParser(std::string_view text) : s_(text) {}

  // Canonical named-form text of each parsed leaf ("" for the classic form), in leaf order.
  const std::vector<std::string>& named_texts() const { return named_texts_; }

  Result<HloSharding> ParseAll() {
    HloSharding result;
    if (!ParseTop(&result)) return *error_;
    SkipWs();
    if (pos_ < s_.size()) {
      return Error("expected end of the sharding after its closing '}', found " + DescribeAt(pos_),
                   static_cast<int64_t>(pos_));
    }
    return result;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  std::optional<Error> error_;
  std::vector<std::string> named_texts_;

  bool Fail(size_t offset, std::string message) {
    if (!error_) error_ = Error(std::move(message), static_cast<int64_t>(offset));
    return false;
  }
  bool FailExpected(const std::string& what) {
    SkipWs();
    return Fail(pos_, "expected " + what + ", found " + DescribeAt(pos_));
  }

  size_t SkipWsFrom(size_t p) const { return SkipBlank(s_, p); }
  void SkipWs() { pos_ = SkipWsFrom(pos_); }
  char Peek() {
    SkipWs();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  bool AtEnd() {
    SkipWs();
    return pos_ >= s_.size();
  }
  bool Eat(char c) {
    if (!AtEnd() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Expect(char c, const std::string& context) {
    if (Eat(c)) return true;
    return FailExpected(std::string("'") + c + "' " + context);
  }

  static bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }

  std::string DescribeAt(size_t p) const {
    p = SkipWsFrom(p);
    if (p >= s_.size()) return "end of text";
    const char c = s_[p];
    auto clip = [](std::string_view t) {
      std::string out(t.substr(0, 32));
      if (t.size() > 32) out += "...";
      return "'" + out + "'";
    };
    if (IsIdentStart(c)) {
      size_t e = p;
      while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
      return clip(s_.substr(p, e - p));
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '-' && p + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p + 1])))) {
      size_t e = p + 1;
      while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
      return clip(s_.substr(p, e - p));
    }
    if (std::isprint(static_cast<unsigned char>(c))) return std::string("'") + c + "'";
    char buf[16];
    std::snprintf(buf, sizeof(buf), "byte 0x%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
    return buf;
  }

  // Identifier at the cursor (letters, digits, '_'); empty when none. Consumes it.
  std::string_view LexIdent() {
    SkipWs();
    if (pos_ >= s_.size() || !IsIdentStart(s_[pos_])) return {};
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }
  std::string_view PeekIdent() {
    const size_t save = pos_;
    std::string_view w = LexIdent();
    pos_ = save;
    return w;
  }

  // Non-negative decimal integer. `what` names the expected value for messages.
  bool ParseInt(int64_t* out, const std::string& what, size_t* offset = nullptr) {
    SkipWs();
    const size_t start = pos_;
    if (offset) *offset = start;
    if (pos_ < s_.size() && s_[pos_] == '-' && pos_ + 1 < s_.size() &&
        std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
      return Fail(start, "expected " + what + " (a non-negative integer), found " + DescribeAt(start));
    }
    if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      return Fail(start, "expected " + what + ", found " + DescribeAt(start));
    }
    int64_t value = 0;
    bool overflow = false;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      const int digit = s_[pos_] - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) overflow = true;
      if (!overflow) value = value * 10 + digit;
      ++pos_;
    }
    if (overflow) {
      return Fail(start, "expected " + what + ", found " + DescribeAt(start) +
                             " which does not fit in a 64-bit integer");
    }
    if (pos_ < s_.size() && IsIdentStart(s_[pos_])) {
      return Fail(start, "expected " + what + ", found " + DescribeAt(start) + " followed by " +
                             DescribeAt(pos_));
    }
    *out = value;
    return true;
  }

  // '[' int (',' int)* ']' of positive values.
  bool ParseDimList(std::vector<int64_t>* dims, const std::string& what) {
    if (!Expect('[', "to start the " + what)) return false;
    if (Eat(']')) return Fail(pos_ - 1, "expected a " + what + " with at least one dimension, found ']'");
    do {
      int64_t v = 0;
      size_t off = 0;
      if (!ParseInt(&v, "a dimension size in the " + what, &off)) return false;
      if (v <= 0) return Fail(off, "expected a positive dimension size in the " + what + ", found '0'");
      dims->push_back(v);
    } while (Eat(','));
    return Expect(']', "or ',' in the " + what);
  }

  // At '{': captures the text up to the matching '}', honouring quoted strings.
  bool CaptureBraced(std::string* inner) {
    SkipWs();
    const size_t open = pos_;
    if (pos_ >= s_.size() || s_[pos_] != '{') return FailExpected("'{'");
    int depth = 0;
    bool in_string = false;
    for (size_t i = open; i < s_.size(); ++i) {
      const char c = s_[i];
      if (in_string) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}') {
        if (--depth == 0) {
          *inner = std::string(s_.substr(open + 1, i - open - 1));
          pos_ = i + 1;
          return true;
        }
      }
    }
    return Fail(open, std::string("expected '}' to close the '{' opened here, found end of text") +
                          (in_string ? " (inside an unterminated string)" : ""));
  }

  static std::string Trim(std::string t) {
    size_t b = 0, e = t.size();
    while (b < e && std::isspace(static_cast<unsigned char>(t[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(t[e - 1]))) --e;
    return t.substr(b, e - b);
  }

  // After "metadata=": either {op_name="a" ...} or {{...}, {...}}.
  bool ParseMetadata(std::vector<ShardingMetadata>* out) {
    SkipWs();
    if (pos_ >= s_.size() || s_[pos_] != '{') return FailExpected("'{' to start metadata");
    const size_t inner_start = SkipWsFrom(pos_ + 1);
    if (inner_start < s_.size() && s_[inner_start] == '{') {
      ++pos_;  // the outer '{'
      if (Eat('}')) return true;
      do {
        std::string entry;
        if (!CaptureBraced(&entry)) return false;
        out->push_back(ShardingMetadata{Trim(entry)});
      } while (Eat(','));
      return Expect('}', "or ',' to end the metadata list");
    }
    std::string entry;
    if (!CaptureBraced(&entry)) return false;
    out->push_back(ShardingMetadata{Trim(entry)});
    return true;
  }

  bool ParseTop(HloSharding* out) {
    if (!Expect('{', "to start the sharding")) return false;
    const char next = Peek();
    if (next == '}') {  // empty tuple
      ++pos_;
      *out = HloSharding::Tuple({});
      return true;
    }
    if (next != '{') return ParseSingleBody(out);
    std::vector<HloSharding> elements;
    do {
      if (!Expect('{', "to start a tuple element sharding")) return false;
      if (Peek() == '{') {
        return Fail(pos_, "expected a sharding keyword, found '{' (nested tuple shardings are not valid;"
                          " XLA tuple shardings list one sharding per leaf)");
      }
      HloSharding element;
      if (!ParseSingleBody(&element)) return false;
      elements.push_back(std::move(element));
    } while (Eat(','));
    if (!Expect('}', "or ',' after a tuple element sharding")) return false;
    *out = HloSharding::Tuple(std::move(elements));
    return true;
  }

  // Body of a single (non-tuple) sharding; the '{' is consumed, consumes the closing '}'.
  bool ParseSingleBody(HloSharding* out) {
    SkipWs();
    {
      const size_t save = pos_;
      if (LexIdent() == "mesh" && Peek() == '[') {
        pos_ = save;
        return ParseNamedBody(out);
      }
      pos_ = save;
    }
    named_texts_.emplace_back();
    enum class K { kNone, kReplicated, kManual, kUnknown, kUnreduced, kMaximal };
    K kind = K::kNone;
    std::string kind_word;
    bool has_devices = false, has_iota = false;
    size_t devices_off = 0, list_off = 0;
    std::vector<int64_t> tile_dims, devices, iota_reshape, iota_perm;
    std::optional<int64_t> device;
    size_t device_off = 0;
    bool last_replicate = false;
    size_t last_replicate_off = 0;
    bool has_last_dims = false;
    size_t last_dims_off = 0;
    std::vector<SubgroupType> last_dims;
    std::optional<int64_t> group_id;
    bool group_as = false;
    std::vector<ShardingMetadata> metadata;
    bool has_metadata = false;
    size_t close_off = 0;

    const std::string kExpectedKeyword =
        "a sharding keyword (replicated, manual, maximal, unknown, unreduced, devices=, device=, "
        "last_tile_dim_replicate, last_tile_dims=, shard_as, shard_like, metadata=) or '}'";
    while (true) {
      SkipWs();
      if (pos_ >= s_.size()) return Fail(pos_, "expected '}' to end the sharding, found end of text");
      if (s_[pos_] == '}') {
        close_off = pos_;
        ++pos_;
        break;
      }
      const size_t tok = pos_;
      const std::string_view w = LexIdent();
      if (w.empty()) return FailExpected(kExpectedKeyword);
      auto duplicate = [&](bool seen) {
        if (seen) Fail(tok, "'" + std::string(w) + "' is given twice in one sharding");
        return seen;
      };
      if (w == "replicated" || w == "manual" || w == "unknown" || w == "unreduced" || w == "maximal") {
        if (kind != K::kNone) {
          return Fail(tok, "'" + std::string(w) + "' conflicts with '" + kind_word +
                               "' given earlier in the same sharding");
        }
        kind = w == "replicated" ? K::kReplicated
               : w == "manual"   ? K::kManual
               : w == "unknown"  ? K::kUnknown
               : w == "unreduced" ? K::kUnreduced
                                  : K::kMaximal;
        kind_word = std::string(w);
      } else if (w == "devices") {
        if (duplicate(has_devices)) return false;
        has_devices = true;
        devices_off = tok;
        if (!Expect('=', "after 'devices'")) return false;
        const size_t dims_off = SkipWsFrom(pos_);
        if (!ParseDimList(&tile_dims, "tile shape")) return false;
        const auto count = CheckedProduct(tile_dims);
        if (!count) {
          return Fail(dims_off, "tile shape [" + JoinInts(tile_dims) + "] has more than " +
                                    std::to_string(kMaxShardingDevices) + " devices");
        }
        SkipWs();
        if (s_.substr(pos_, 2) == "<=") {
          has_iota = true;
          pos_ += 2;
          const size_t reshape_off = SkipWsFrom(pos_);
          if (!ParseDimList(&iota_reshape, "iota reshape")) return false;
          const auto iota_count = CheckedProduct(iota_reshape);
          if (!iota_count || *iota_count != *count) {
            return Fail(reshape_off, "expected an iota reshape with " + std::to_string(*count) +
                                         " devices to match tile shape [" + JoinInts(tile_dims) +
                                         "], found [" + JoinInts(iota_reshape) + "]");
          }
          SkipWs();
          if (pos_ < s_.size() && s_[pos_] == 'T') {
            ++pos_;
            const size_t perm_off = SkipWsFrom(pos_);
            if (!Expect('(', "after 'T' in the iota transpose")) return false;
            if (!Eat(')')) {
              do {
                int64_t v = 0;
                if (!ParseInt(&v, "a dimension index in T(...)")) return false;
                iota_perm.push_back(v);
              } while (Eat(','));
              if (!Expect(')', "or ',' to end T(...)")) return false;
            }
            if (iota_perm.size() != iota_reshape.size() || !IsPermutation(iota_perm)) {
              return Fail(perm_off, "expected T(...) to be a permutation of 0.." +
                                        std::to_string(iota_reshape.size() - 1) + " for iota reshape [" +
                                        JoinInts(iota_reshape) + "], found T(" + JoinInts(iota_perm) + ")");
            }
          }
        } else {
          list_off = pos_;
          std::vector<size_t> offsets;
          do {
            int64_t v = 0;
            size_t off = 0;
            if (!ParseInt(&v, "a device id", &off)) return false;
            if (static_cast<int64_t>(devices.size()) >= *count) {
              return Fail(off, "expected " + std::to_string(*count) + " device ids for tile shape [" +
                                   JoinInts(tile_dims) + "], found more");
            }
            devices.push_back(v);
            offsets.push_back(off);
          } while (Eat(','));
          if (static_cast<int64_t>(devices.size()) != *count) {
            return Fail(list_off, "expected " + std::to_string(*count) + " device ids for tile shape [" +
                                      JoinInts(tile_dims) + "], found " + std::to_string(devices.size()));
          }
          std::unordered_set<int64_t> seen;
          for (size_t i = 0; i < devices.size(); ++i) {
            if (!seen.insert(devices[i]).second) {
              return Fail(offsets[i], "expected distinct device ids, found device " +
                                          std::to_string(devices[i]) + " twice in the tile assignment");
            }
          }
        }
      } else if (w == "device") {
        if (duplicate(device.has_value())) return false;
        device_off = tok;
        if (!Expect('=', "after 'device'")) return false;
        int64_t v = 0;
        if (!ParseInt(&v, "a device id after device=")) return false;
        device = v;
      } else if (w == "last_tile_dim_replicate") {
        if (duplicate(last_replicate)) return false;
        last_replicate = true;
        last_replicate_off = tok;
      } else if (w == "last_tile_dims") {
        if (duplicate(has_last_dims)) return false;
        has_last_dims = true;
        last_dims_off = tok;
        if (!Expect('=', "after 'last_tile_dims'")) return false;
        if (!Expect('{', "to start the last_tile_dims list")) return false;
        do {
          const size_t t = SkipWsFrom(pos_);
          const std::string_view type = LexIdent();
          if (type == "replicated") {
            last_dims.push_back(SubgroupType::kReplicated);
          } else if (type == "manual") {
            last_dims.push_back(SubgroupType::kManual);
          } else if (type == "unreduced") {
            last_dims.push_back(SubgroupType::kUnreduced);
          } else if (type == "maximal") {
            last_dims.push_back(SubgroupType::kMaximal);
          } else {
            return Fail(t, "expected a subgroup type (replicated, manual, unreduced, maximal), found " +
                               DescribeAt(t));
          }
        } while (Eat(','));
        if (!Expect('}', "or ',' to end the last_tile_dims list")) return false;
      } else if (w == "shard_as" || w == "shard_like") {
        if (duplicate(group_id.has_value())) return false;
        int64_t v = 0;
        if (!ParseInt(&v, "a shard group id after '" + std::string(w) + "'")) return false;
        group_id = v;
        group_as = w == "shard_as";
      } else if (w == "metadata") {
        if (duplicate(has_metadata)) return false;
        has_metadata = true;
        if (!Expect('=', "after 'metadata'")) return false;
        if (!ParseMetadata(&metadata)) return false;
      } else {
        return Fail(tok, "expected " + kExpectedKeyword + ", found " + DescribeAt(tok));
      }
    }

    HloSharding result;
    if (kind != K::kNone && kind != K::kMaximal && has_devices) {
      return Fail(devices_off, "a '" + kind_word + "' sharding cannot also have devices=[...]");
    }
    if (kind == K::kMaximal && has_devices) {
      return Fail(devices_off, "a maximal sharding takes device=<id>, not devices=[...]");
    }
    if (device && kind != K::kMaximal) {
      return Fail(device_off, "device= is only valid in a maximal sharding ({maximal device=0}); "
                              "for a tiled sharding use devices=[dims]ids");
    }
    if ((last_replicate || has_last_dims) && !has_devices) {
      return Fail(last_replicate ? last_replicate_off : last_dims_off,
                  "last_tile_dim_replicate / last_tile_dims need a tile assignment (devices=[...])");
    }
    if (last_replicate && has_last_dims) {
      return Fail(std::max(last_replicate_off, last_dims_off),
                  "last_tile_dim_replicate and last_tile_dims cannot both be given");
    }
    switch (kind) {
      case K::kReplicated: result = HloSharding::Replicate(); break;
      case K::kManual: result = HloSharding::Manual(); break;
      case K::kUnknown: result = HloSharding::Unknown(); break;
      case K::kUnreduced: result = HloSharding::Unreduced(); break;
      case K::kMaximal:
        if (!device) return Fail(close_off, "expected device=<id> in a maximal sharding, found '}'");
        result = HloSharding::AssignDevice(*device);
        break;
      case K::kNone: {
        if (!has_devices) {
          return Fail(close_off, "expected replicated, manual, maximal, unknown, unreduced or "
                                 "devices=[...] in the sharding, found '}'");
        }
        TileAssignment tiles = has_iota ? TileAssignment::Iota(tile_dims, iota_reshape, iota_perm)
                                        : TileAssignment::Explicit(tile_dims, devices);
        if (has_last_dims && last_dims.size() > tile_dims.size()) {
          return Fail(last_dims_off, "expected at most " + std::to_string(tile_dims.size()) +
                                         " subgroup types for tile shape [" + JoinInts(tile_dims) +
                                         "], found " + std::to_string(last_dims.size()));
        }
        if (last_replicate) {
          result = HloSharding::PartialTile(std::move(tiles));
        } else if (has_last_dims) {
          result = HloSharding::Subgroup(std::move(tiles), last_dims);
        } else {
          result = HloSharding::Tile(std::move(tiles));
        }
        break;
      }
    }
    result.set_shard_group(group_id, group_as);
    result.set_metadata(std::move(metadata));
    *out = std::move(result);
    return true;
  }

  // 'name' or "name".
  bool ParseQuotedName(std::string* name, const std::string& what) {
    SkipWs();
    const size_t start = pos_;
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
      return FailExpected(what + " in quotes ('x')");
    }
    const char q = s_[pos_];
    const size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) {
      return Fail(start, "expected a closing " + std::string(1, q) + " for " + what + ", found end of text");
    }
    *name = std::string(s_.substr(pos_ + 1, end - pos_ - 1));
    if (name->empty()) return Fail(start, "expected " + what + ", found an empty name");
    pos_ = end + 1;
    return true;
  }

  bool ParseAxisRef(const NamedSpec& spec, NamedAxisRef* ref) {
    SkipWs();
    ref->offset = pos_;
    std::string name;
    if (!ParseQuotedName(&name, "a mesh axis name")) return false;
    int64_t axis = -1;
    for (size_t i = 0; i < spec.axes.size(); ++i) {
      if (spec.axes[i].first == name) axis = static_cast<int64_t>(i);
    }
    if (axis < 0) {
      std::string names;
      for (size_t i = 0; i < spec.axes.size(); ++i) names += (i ? ", " : "") + QuoteName(spec.axes[i].first);
      return Fail(ref->offset, "expected a mesh axis (" + (names.empty() ? std::string("none declared") : names) +
                                   "), found unknown axis " + QuoteName(name));
    }
    ref->axis = axis;
    const int64_t axis_size = spec.axes[static_cast<size_t>(axis)].second;
    ref->pre_size = 1;
    ref->size = axis_size;
    ref->sub_axis = false;
    if (Eat(':')) {
      if (!Expect('(', "to start a sub-axis pre-size, as in 'x':(1)2")) return false;
      if (!ParseInt(&ref->pre_size, "a sub-axis pre-size")) return false;
      if (!Expect(')', "after the sub-axis pre-size")) return false;
      if (!ParseInt(&ref->size, "a sub-axis size")) return false;
      ref->sub_axis = true;
      if (ref->pre_size < 1 || ref->size < 1 || ref->pre_size > axis_size ||
          axis_size % ref->pre_size != 0 || (axis_size / ref->pre_size) % ref->size != 0) {
        return Fail(ref->offset, "expected a sub-axis whose pre-size x size divides axis " + QuoteName(name) +
                                     " of size " + std::to_string(axis_size) + ", found :(" +
                                     std::to_string(ref->pre_size) + ")" + std::to_string(ref->size));
      }
      if (ref->pre_size == 1 && ref->size == axis_size) ref->sub_axis = false;  // the whole axis
    }
    return true;
  }

  bool ParseAxisRefSet(const NamedSpec& spec, std::vector<NamedAxisRef>* refs, const std::string& what) {
    if (!Expect('{', "to start the " + what + " axes")) return false;
    if (Eat('}')) return true;
    do {
      NamedAxisRef ref;
      if (!ParseAxisRef(spec, &ref)) return false;
      refs->push_back(ref);
    } while (Eat(','));
    return Expect('}', "or ',' to end the " + what + " axes");
  }

  bool ParseNamedBody(HloSharding* out) {
    NamedSpec spec;
    LexIdent();  // "mesh"
    if (!Expect('[', "to start the mesh axes")) return false;
    if (!Eat(']')) {
      do {
        const size_t off = SkipWsFrom(pos_);
        std::string name;
        if (!ParseQuotedName(&name, "a mesh axis name")) return false;
        for (const auto& a : spec.axes) {
          if (a.first == name) return Fail(off, "expected distinct mesh axis names, found " + QuoteName(name) + " twice");
        }
        if (!Expect('=', "after the mesh axis name")) return false;
        int64_t size = 0;
        size_t size_off = 0;
        if (!ParseInt(&size, "the size of mesh axis " + QuoteName(name), &size_off)) return false;
        if (size < 1) return Fail(size_off, "expected a positive size for mesh axis " + QuoteName(name) + ", found '0'");
        spec.axes.emplace_back(name, size);
      } while (Eat(','));
      if (!Expect(']', "or ',' to end the mesh axes")) return false;
    }
    std::vector<int64_t> sizes;
    for (const auto& a : spec.axes) sizes.push_back(a.second);
    const auto num_devices = CheckedProduct(sizes);
    if (!num_devices) {
      return Fail(0, "mesh has more than " + std::to_string(kMaxShardingDevices) + " devices");
    }
    Eat(',');
    if (PeekIdent() == "device_ids") {
      const size_t ids_off = SkipWsFrom(pos_);
      LexIdent();
      if (!Expect('=', "after 'device_ids'")) return false;
      if (!Expect('(', "to start the device_ids list")) return false;
      std::unordered_set<int64_t> seen;
      if (!Eat(')')) {
        do {
          int64_t v = 0;
          size_t off = 0;
          if (!ParseInt(&v, "a device id", &off)) return false;
          if (!seen.insert(v).second) {
            return Fail(off, "expected distinct device ids, found device " + std::to_string(v) + " twice in device_ids");
          }
          if (static_cast<int64_t>(spec.device_ids.size()) >= *num_devices) {
            return Fail(off, "expected " + std::to_string(*num_devices) + " device ids for the mesh, found more");
          }
          spec.device_ids.push_back(v);
        } while (Eat(','));
        if (!Expect(')', "or ',' to end the device_ids list")) return false;
      }
      if (static_cast<int64_t>(spec.device_ids.size()) != *num_devices) {
        return Fail(ids_off, "expected " + std::to_string(*num_devices) + " device ids for the mesh, found " +
                                 std::to_string(spec.device_ids.size()));
      }
      spec.has_device_ids = true;
      Eat(',');
    }
    if (!Expect('[', "to start the per-dimension shardings")) return false;
    if (!Eat(']')) {
      do {
        if (!Expect('{', "to start a dimension sharding")) return false;
        std::vector<NamedAxisRef> refs;
        bool open = false;
        if (Eat('?')) {
          open = true;
        } else if (Peek() != '}') {
          do {
            if (Eat('?')) {
              open = true;
              break;
            }
            NamedAxisRef ref;
            if (!ParseAxisRef(spec, &ref)) return false;
            refs.push_back(ref);
          } while (Eat(','));
        }
        if (!Expect('}', "or ',' to end the dimension sharding")) return false;
        spec.dims.push_back(std::move(refs));
        spec.open.push_back(open);
      } while (Eat(','));
      if (!Expect(']', "or ',' to end the per-dimension shardings")) return false;
    }
    std::vector<ShardingMetadata> metadata;
    std::optional<int64_t> group_id;
    bool group_as = false;
    while (true) {
      if (AtEnd()) return Fail(pos_, "expected '}' to end the sharding, found end of text");
      if (Eat('}')) break;
      Eat(',');
      const size_t tok = SkipWsFrom(pos_);
      const std::string_view w = LexIdent();
      if (w == "replicated" || w == "unreduced" || w == "manual") {
        if (!Expect('=', "after '" + std::string(w) + "'")) return false;
        auto& target = w == "replicated" ? spec.replicated : w == "unreduced" ? spec.unreduced : spec.manual;
        if (!target.empty()) return Fail(tok, "'" + std::string(w) + "=' is given twice in one sharding");
        if (!ParseAxisRefSet(spec, &target, std::string(w))) return false;
      } else if (w == "metadata") {
        if (!Expect('=', "after 'metadata'")) return false;
        if (!ParseMetadata(&metadata)) return false;
      } else if (w == "shard_as" || w == "shard_like") {
        int64_t v = 0;
        if (!ParseInt(&v, "a shard group id")) return false;
        group_id = v;
        group_as = w == "shard_as";
      } else {
        return Fail(tok, "expected replicated={...}, unreduced={...}, manual={...}, metadata={...} or '}' "
                         "after the dimension shardings, found " + DescribeAt(tok));
      }
    }
    HloSharding result;
    if (!NamedToSharding(spec, &result)) return false;
    named_texts_.push_back(NamedSpecToString(spec));
    result.set_shard_group(group_id, group_as);
    result.set_metadata(std::move(metadata));
    *out = std::move(result);
    return true;
  }

  // Converts the named form to the tile-assignment form (XLA's V3 -> V2 conversion): the mesh's
  // axes (split into the sub-axes in use) are transposed so that dimension axes come first (in
  // dimension order, major first within a dimension), then manual, unreduced and finally the
  // replicated axes; then normalised by HloSharding::Subgroup.
  bool NamedToSharding(const NamedSpec& spec, HloSharding* out);
};

bool ShardingParser::NamedToSharding(const NamedSpec& spec, HloSharding* out) {
  const size_t num_axes = spec.axes.size();
  // Every axis reference, whatever its role.
  std::vector<const NamedAxisRef*> all;
  for (const auto& d : spec.dims)
    for (const auto& r : d) all.push_back(&r);
  for (const auto& r : spec.manual) all.push_back(&r);
  for (const auto& r : spec.unreduced) all.push_back(&r);
  for (const auto& r : spec.replicated) all.push_back(&r);

  // Per axis: the boundaries (pre-sizes) that split it into elementary sub-axes.
  std::vector<std::vector<int64_t>> bounds(num_axes);
  for (size_t a = 0; a < num_axes; ++a) bounds[a] = {1, spec.axes[a].second};
  for (const NamedAxisRef* r : all) {
    auto& b = bounds[static_cast<size_t>(r->axis)];
    b.push_back(r->pre_size);
    b.push_back(r->pre_size * r->size);
  }
  // Elementary sub-axes in mesh order (major first within an axis), and their sizes.
  std::vector<std::vector<int64_t>> elem_id(num_axes);  // per axis, per boundary index
  std::vector<int64_t> elem_sizes;
  for (size_t a = 0; a < num_axes; ++a) {
    auto& b = bounds[a];
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    for (size_t j = 0; j + 1 < b.size(); ++j) {
      if (b[j + 1] % b[j] != 0) {
        for (const NamedAxisRef* r : all) {
          if (r->axis == static_cast<int64_t>(a) && r->sub_axis) {
            return Fail(r->offset, "expected sub-axes of " + QuoteName(spec.axes[a].first) +
                                       " that nest (each pre-size dividing the next), found " +
                                       NamedRefToString(spec, *r) + " among incompatible sub-axes");
          }
        }
        return Fail(0, "incompatible sub-axes of " + QuoteName(spec.axes[a].first));
      }
      elem_id[a].push_back(static_cast<int64_t>(elem_sizes.size()));
      elem_sizes.push_back(b[j + 1] / b[j]);
    }
  }
  auto elementary_of = [&](const NamedAxisRef& r) -> int64_t {
    const auto& b = bounds[static_cast<size_t>(r.axis)];
    for (size_t j = 0; j + 1 < b.size(); ++j) {
      if (b[j] == r.pre_size && b[j + 1] == r.pre_size * r.size) return elem_id[static_cast<size_t>(r.axis)][j];
    }
    return -1;
  };
  const int64_t num_elems = static_cast<int64_t>(elem_sizes.size());
  std::vector<int64_t> position(static_cast<size_t>(num_elems), -1);
  int64_t next_pos = 0;
  auto overlap = [&](const NamedAxisRef& r) {
    return Fail(r.offset, "expected each mesh axis to be used at most once, found " + NamedRefToString(spec, r) +
                              " overlapping another use of " + QuoteName(spec.axes[static_cast<size_t>(r.axis)].first));
  };
  auto place = [&](const NamedAxisRef& r) -> bool {
    const int64_t e = elementary_of(r);
    if (e < 0 || position[static_cast<size_t>(e)] >= 0) return overlap(r);
    position[static_cast<size_t>(e)] = next_pos++;
    return true;
  };
  std::vector<int64_t> tile_dims;
  std::vector<SubgroupType> types;
  for (const auto& d : spec.dims) {
    int64_t size = 1;
    for (const auto& r : d) {
      if (!place(r)) return false;
      size *= r.size;
    }
    tile_dims.push_back(size);
  }
  auto add_group = [&](const std::vector<NamedAxisRef>& refs, SubgroupType type) -> bool {
    if (refs.empty()) return true;
    int64_t size = 1;
    for (const auto& r : refs) {
      if (!place(r)) return false;
      size *= r.size;
    }
    tile_dims.push_back(size);
    types.push_back(type);
    return true;
  };
  if (!add_group(spec.manual, SubgroupType::kManual)) return false;
  if (!add_group(spec.unreduced, SubgroupType::kUnreduced)) return false;
  // Explicitly replicated axes must not overlap others; they join the unused axes at the end.
  std::vector<bool> explicitly_replicated(static_cast<size_t>(num_elems), false);
  for (const auto& r : spec.replicated) {
    const int64_t e = elementary_of(r);
    if (e < 0 || position[static_cast<size_t>(e)] >= 0 || explicitly_replicated[static_cast<size_t>(e)]) {
      return overlap(r);
    }
    explicitly_replicated[static_cast<size_t>(e)] = true;
  }
  int64_t replicated = 1;
  for (int64_t e = 0; e < num_elems; ++e) {
    if (position[static_cast<size_t>(e)] < 0) {
      position[static_cast<size_t>(e)] = next_pos++;
      replicated *= elem_sizes[static_cast<size_t>(e)];
    }
  }
  if (replicated > 1) {
    tile_dims.push_back(replicated);
    types.push_back(SubgroupType::kReplicated);
  }
  std::vector<int64_t> perm(static_cast<size_t>(num_elems));
  for (int64_t e = 0; e < num_elems; ++e) perm[static_cast<size_t>(position[static_cast<size_t>(e)])] = e;

  std::vector<int64_t> sizes;
  for (const auto& a : spec.axes) sizes.push_back(a.second);
  const int64_t n = CheckedProduct(sizes).value_or(1);
  TileAssignment mesh = spec.has_device_ids ? TileAssignment::Explicit({n}, spec.device_ids)
                                            : TileAssignment::Iota({n});
  HloSharding result;
  if (tile_dims.empty() || n == 1) {
    result = HloSharding::Replicate();
  } else {
    TileAssignment tiles = mesh.Reshape(elem_sizes.empty() ? std::vector<int64_t>{1} : elem_sizes);
    if (!elem_sizes.empty()) tiles = tiles.Transpose(perm);
    tiles = tiles.Reshape(tile_dims);
    result = HloSharding::Subgroup(std::move(tiles), types);
  }
  std::vector<int64_t> open;
  for (size_t d = 0; d < spec.open.size(); ++d) {
    if (spec.open[d]) open.push_back(static_cast<int64_t>(d));
  }
  result.set_open_dims(std::move(open));
  *out = std::move(result);
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TileAssignment

const std::vector<int64_t>& TileAssignment::Empty() {
  static const std::vector<int64_t> empty;
  return empty;
}

TileAssignment TileAssignment::Explicit(std::vector<int64_t> dims, std::vector<int64_t> devices) {
  auto rep = std::make_shared<Rep>();
  rep->dims = std::move(dims);
  rep->devices = std::make_shared<const std::vector<int64_t>>(std::move(devices));
  rep->device_index = std::make_shared<const std::vector<int64_t>>(BuildDeviceIndex(*rep->devices));
  TileAssignment t;
  t.rep_ = std::move(rep);
  return t;
}

TileAssignment TileAssignment::Iota(std::vector<int64_t> dims, std::vector<int64_t> reshape_dims,
                                    std::vector<int64_t> perm) {
  const int64_t n = CheckedProduct(dims).value_or(0);
  auto rep = std::make_shared<Rep>();
  rep->dims = std::move(dims);
  IotaForm form{std::move(reshape_dims), std::move(perm)};
  if (form.reshape_dims.empty()) form.reshape_dims = {n};
  const auto rn = CheckedProduct(form.reshape_dims);
  const bool perm_ok = form.perm.empty() ||
                       (form.perm.size() == form.reshape_dims.size() && IsPermutation(form.perm));
  if (!rn || *rn != n || !perm_ok) form = IotaForm{{n}, {}};  // invalid description: plain iota
  if (!IsCanonicalIota(form)) form = CanonicalIota(form);
  IotaTables tables = SharedIotaTables(form);
  rep->devices = std::move(tables.devices);
  rep->device_index = std::move(tables.index);
  rep->iota_reshape = std::move(form.reshape_dims);
  rep->iota_perm = std::move(form.perm);
  TileAssignment t;
  t.rep_ = std::move(rep);
  return t;
}

int64_t TileAssignment::operator()(const std::vector<int64_t>& index) const {
  const std::vector<int64_t>& dims = this->dims();
  if (index.size() != dims.size()) return -1;
  int64_t flat = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (index[i] < 0 || index[i] >= dims[i]) return -1;
    flat = flat * dims[i] + index[i];
  }
  if (flat < 0 || flat >= static_cast<int64_t>(devices().size())) return -1;
  return devices()[static_cast<size_t>(flat)];
}

std::vector<int64_t> TileAssignment::IndexOfDevice(int64_t device) const {
  int64_t flat = -1;
  if (!device_index().empty()) {
    if (device >= 0 && device < static_cast<int64_t>(device_index().size())) {
      flat = device_index()[static_cast<size_t>(device)];
    }
  } else {
    auto it = std::find(devices().begin(), devices().end(), device);
    if (it != devices().end()) flat = it - devices().begin();
  }
  if (flat < 0) return {};
  const std::vector<int64_t>& dims = this->dims();
  std::vector<int64_t> index(dims.size(), 0);
  for (size_t i = dims.size(); i-- > 0;) {
    if (dims[i] <= 0) return {};
    index[i] = flat % dims[i];
    flat /= dims[i];
  }
  return index;
}

TileAssignment TileAssignment::Reshape(std::vector<int64_t> new_dims) const {
  const auto n = CheckedProduct(new_dims, std::numeric_limits<int64_t>::max());
  if (!n || *n != static_cast<int64_t>(devices().size())) return *this;
  if (new_dims == dims()) return *this;
  auto rep = rep_ ? std::make_shared<Rep>(*rep_) : std::make_shared<Rep>();
  rep->dims = std::move(new_dims);
  TileAssignment t;
  t.rep_ = std::move(rep);
  return t;
}

TileAssignment TileAssignment::Transpose(const std::vector<int64_t>& perm) const {
  const std::vector<int64_t>& dims = this->dims();
  if (perm.size() != dims.size() || !IsPermutation(perm)) return *this;
  const auto n = CheckedProduct(dims, std::numeric_limits<int64_t>::max());
  if (!n || *n != static_cast<int64_t>(devices().size())) return *this;
  const size_t k = dims.size();
  bool identity = true;
  for (size_t i = 0; i < k; ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return *this;
  if (is_iota() && *n > 1) {
    if (auto form = TransposeIotaForm(dims, IotaForm{iota_reshape_dims(), iota_perm()}, perm)) {
      std::vector<int64_t> new_dims(k);
      for (size_t i = 0; i < k; ++i) new_dims[i] = dims[static_cast<size_t>(perm[i])];
      return Iota(std::move(new_dims), std::move(form->reshape_dims), std::move(form->perm));
    }
  }
  std::vector<int64_t> stride(k, 1);
  for (size_t i = k; i-- > 1;) stride[i - 1] = stride[i] * dims[i];
  std::vector<int64_t> new_dims(k), new_stride(k);
  for (size_t i = 0; i < k; ++i) {
    new_dims[i] = dims[static_cast<size_t>(perm[i])];
    new_stride[i] = stride[static_cast<size_t>(perm[i])];
  }
  std::vector<int64_t> devices;
  devices.reserve(this->devices().size());
  std::vector<int64_t> idx(k, 0);
  int64_t offset = 0;
  for (int64_t count = 0; count < *n; ++count) {
    devices.push_back(this->devices()[static_cast<size_t>(offset)]);
    for (size_t i = k; i-- > 0;) {
      ++idx[i];
      offset += new_stride[i];
      if (idx[i] < new_dims[i]) break;
      offset -= new_stride[i] * idx[i];
      idx[i] = 0;
    }
  }
  if (is_iota()) {
    if (auto form = DetectIota(devices)) return Iota(std::move(new_dims), form->reshape_dims, form->perm);
  }
  return Explicit(std::move(new_dims), std::move(devices));
}

std::string TileAssignment::ToString() const {
  std::string out = "[" + JoinInts(dims()) + "]";
  if (is_iota()) {
    out += "<=[" + JoinInts(iota_reshape_dims()) + "]";
    if (!iota_perm().empty()) out += "T(" + JoinInts(iota_perm()) + ")";
  } else {
    out += JoinInts(devices());
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// HloSharding construction

HloSharding HloSharding::Replicate() { return HloSharding(); }

HloSharding HloSharding::AssignDevice(int64_t device) {
  HloSharding s;
  s.kind_ = Kind::kMaximal;
  s.maximal_device_ = device;
  return s;
}

HloSharding HloSharding::Manual() {
  HloSharding s;
  s.kind_ = Kind::kManual;
  return s;
}

HloSharding HloSharding::Unknown() {
  HloSharding s;
  s.kind_ = Kind::kUnknown;
  return s;
}

HloSharding HloSharding::Unreduced() {
  HloSharding s;
  s.kind_ = Kind::kUnreduced;
  return s;
}

HloSharding HloSharding::Tile(TileAssignment tiles) {
  if (tiles.num_elements() <= 1) return Replicate();
  HloSharding s;
  s.kind_ = Kind::kTiled;
  s.tiles_ = std::move(tiles);
  return s;
}

HloSharding HloSharding::Subgroup(TileAssignment tiles, std::vector<SubgroupType> subgroup_types) {
  const int64_t rank = tiles.num_dimensions();
  if (static_cast<int64_t>(subgroup_types.size()) > rank) {
    subgroup_types.erase(subgroup_types.begin(),
                         subgroup_types.begin() + (static_cast<int64_t>(subgroup_types.size()) - rank));
  }
  if (subgroup_types.empty()) return Tile(std::move(tiles));
  const int64_t data_rank = rank - static_cast<int64_t>(subgroup_types.size());
  int64_t data_product = 1;
  for (int64_t i = 0; i < data_rank; ++i) data_product = SaturatingMul(data_product, tiles.dim(i));
  const bool all_same = std::all_of(subgroup_types.begin(), subgroup_types.end(),
                                    [&](SubgroupType t) { return t == subgroup_types[0]; });
  if (all_same && data_product == 1) {
    switch (subgroup_types[0]) {
      case SubgroupType::kManual: return Manual();
      case SubgroupType::kReplicated: return Replicate();
      case SubgroupType::kUnreduced: return Unreduced();
      case SubgroupType::kMaximal: break;
    }
  }
  // Normalise: drop size-1 subgroup dims, merge dims of the same type, order the types as XLA does.
  std::vector<int64_t> perm(static_cast<size_t>(data_rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int64_t> merged_dims(tiles.dims().begin(), tiles.dims().begin() + data_rank);
  std::vector<SubgroupType> merged_types;
  std::vector<SubgroupType> order = {SubgroupType::kMaximal, SubgroupType::kManual, SubgroupType::kUnreduced,
                                     SubgroupType::kReplicated};
  for (SubgroupType type : order) {
    int64_t size = 1;
    bool any = false;
    for (size_t i = 0; i < subgroup_types.size(); ++i) {
      const int64_t dim = data_rank + static_cast<int64_t>(i);
      if (subgroup_types[i] != type || tiles.dim(dim) == 1) continue;
      perm.push_back(dim);
      size = SaturatingMul(size, tiles.dim(dim));
      any = true;
    }
    if (any) {
      merged_dims.push_back(size);
      merged_types.push_back(type);
    }
  }
  for (size_t i = 0; i < subgroup_types.size(); ++i) {
    const int64_t dim = data_rank + static_cast<int64_t>(i);
    if (tiles.dim(dim) == 1) perm.push_back(dim);
  }
  TileAssignment merged = tiles.Transpose(perm).Reshape(merged_dims);
  if (merged_types.empty()) return Tile(std::move(merged));
  if (merged_types.size() == 1 && merged_types[0] == SubgroupType::kReplicated) {
    if (merged.num_dimensions() == 1 || merged.dims().back() == merged.num_elements()) return Replicate();
  }
  if (merged_types.size() == 1 && merged_types[0] == SubgroupType::kManual &&
      merged.dims().back() == merged.num_elements()) {
    return Manual();
  }
  if (merged_types.back() == SubgroupType::kReplicated) merged = SortReplicationGroups(merged);
  HloSharding s;
  s.kind_ = Kind::kTiled;
  s.tiles_ = std::move(merged);
  s.subgroup_types_ = std::move(merged_types);
  return s;
}

HloSharding HloSharding::Tuple(std::vector<HloSharding> elements) {
  HloSharding s;
  s.kind_ = Kind::kTuple;
  for (auto& e : elements) {
    if (e.kind_ == Kind::kTuple) {
      for (auto& inner : e.tuple_) s.tuple_.push_back(std::move(inner));
    } else {
      s.tuple_.push_back(std::move(e));
    }
  }
  return s;
}

Result<HloSharding> HloSharding::Parse(std::string_view text) {
  ShardingParser parser(text);
  Result<HloSharding> result = parser.ParseAll();
  if (!result.ok()) return result;
  const auto& named = parser.named_texts();
  HloSharding& s = *result;
  if (s.kind_ == Kind::kTuple) {
    for (size_t i = 0; i < s.tuple_.size() && i < named.size(); ++i) s.tuple_[i].named_form_ = named[i];
  } else if (!named.empty()) {
    s.named_form_ = named.front();
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Printing

std::string HloSharding::ToString(bool include_metadata) const {
  if (kind_ == Kind::kTuple) {
    std::string out = "{";
    for (size_t i = 0; i < tuple_.size(); ++i) {
      if (i) out += (i % 5 == 0) ? ", /*index=" + std::to_string(i) + "*/" : ", ";
      out += tuple_[i].ToString(include_metadata);
    }
    return out + "}";
  }
  if (!named_form_.empty()) {
    auto reparsed = Parse(named_form_);
    if (reparsed.ok() && *reparsed == *this && shard_group_id_ == reparsed->shard_group_id_) {
      std::string out = named_form_;
      if (include_metadata && !metadata_.empty()) {
        out.pop_back();
        out += ", ";
        AppendMetadata(&out, metadata_);
        out += "}";
      }
      return out;
    }
  }
  std::string out = "{";
  switch (kind_) {
    case Kind::kReplicated: out += "replicated"; break;
    case Kind::kManual: out += "manual"; break;
    case Kind::kUnknown: out += "unknown"; break;
    case Kind::kUnreduced: out += "unreduced"; break;
    case Kind::kMaximal: out += "maximal device=" + std::to_string(maximal_device_); break;
    case Kind::kTiled:
      out += "devices=" + tiles_.ToString();
      if (subgroup_types_.size() == 1 && subgroup_types_[0] == SubgroupType::kReplicated) {
        out += " last_tile_dim_replicate";
      } else if (!subgroup_types_.empty()) {
        out += " last_tile_dims={";
        for (size_t i = 0; i < subgroup_types_.size(); ++i) {
          if (i) out += ", ";
          out += SubgroupTypeName(subgroup_types_[i]);
        }
        out += "}";
      }
      break;
    case Kind::kTuple: break;
  }
  if (shard_group_id_) {
    out += (shard_as_ ? " shard_as " : " shard_like ") + std::to_string(*shard_group_id_);
  }
  if (include_metadata && !metadata_.empty()) {
    out += " ";
    AppendMetadata(&out, metadata_);
  }
  return out + "}";
}

// ---------------------------------------------------------------------------------------------
// Queries

bool HloSharding::IsReplicated() const {
  if (kind_ == Kind::kTuple) {
    return std::all_of(tuple_.begin(), tuple_.end(), [](const HloSharding& e) { return e.IsReplicated(); });
  }
  return kind_ == Kind::kReplicated;
}

bool HloSharding::IsManual() const {
  if (kind_ == Kind::kTuple) {
    return std::all_of(tuple_.begin(), tuple_.end(), [](const HloSharding& e) { return e.IsManual(); });
  }
  return kind_ == Kind::kManual;
}

bool HloSharding::IsTileMaximal() const {
  if (kind_ == Kind::kTuple) {
    return std::all_of(tuple_.begin(), tuple_.end(), [](const HloSharding& e) { return e.IsTileMaximal(); });
  }
  return kind_ != Kind::kTiled;
}

bool HloSharding::HasPartialReplication() const {
  return kind_ == Kind::kTiled && std::find(subgroup_types_.begin(), subgroup_types_.end(),
                                            SubgroupType::kReplicated) != subgroup_types_.end();
}

bool HloSharding::HasManualSubgroup() const {
  return kind_ == Kind::kTiled && std::find(subgroup_types_.begin(), subgroup_types_.end(),
                                            SubgroupType::kManual) != subgroup_types_.end();
}

int64_t HloSharding::TiledDataRank() const {
  if (kind_ != Kind::kTiled) return 0;
  return std::max<int64_t>(0, tiles_.num_dimensions() - static_cast<int64_t>(subgroup_types_.size()));
}

int64_t HloSharding::NumTiles() const {
  int64_t n = 1;
  for (int64_t i = 0; i < TiledDataRank(); ++i) n = SaturatingMul(n, tiles_.dim(i));
  return n;
}

int64_t HloSharding::DimensionTiles(int64_t d) const {
  if (d < 0 || d >= TiledDataRank()) return 1;
  return tiles_.dim(d);
}

int64_t HloSharding::NumDevices() const {
  switch (kind_) {
    case Kind::kTiled: return tiles_.num_elements();
    case Kind::kMaximal: return 1;
    case Kind::kTuple: {
      int64_t n = 0;
      for (const auto& e : tuple_) n = std::max(n, e.NumDevices());
      return n;
    }
    default: return 0;
  }
}

HloSharding HloSharding::GetSubSharding(const Shape& shape, const std::vector<int64_t>& index) const {
  if (kind_ != Kind::kTuple) return *this;
  int64_t leaf = 0;
  const Shape* sub = &shape;
  for (int64_t i : index) {
    if (!sub->IsTuple() || i < 0 || i >= static_cast<int64_t>(sub->tuple.size())) return Replicate();
    for (int64_t j = 0; j < i; ++j) leaf += sub->tuple[static_cast<size_t>(j)].LeafCount();
    sub = &sub->tuple[static_cast<size_t>(i)];
  }
  if (sub->IsTuple()) {
    const int64_t n = sub->LeafCount();
    if (leaf + n > static_cast<int64_t>(tuple_.size())) return Replicate();
    return Tuple(std::vector<HloSharding>(tuple_.begin() + leaf, tuple_.begin() + leaf + n));
  }
  if (leaf >= static_cast<int64_t>(tuple_.size())) return Replicate();
  return tuple_[static_cast<size_t>(leaf)];
}

HloSharding HloSharding::ExpandToTuple(const Shape& shape) const {
  if (!shape.IsTuple() || kind_ == Kind::kTuple) return *this;
  const int64_t n = std::max<int64_t>(1, shape.LeafCount());
  return Tuple(std::vector<HloSharding>(static_cast<size_t>(n), *this));
}

bool HloSharding::operator==(const HloSharding& o) const {
  if (kind_ == Kind::kTuple || o.kind_ == Kind::kTuple) {
    if (kind_ == Kind::kTuple && o.kind_ == Kind::kTuple) {
      if (tuple_.size() != o.tuple_.size()) return false;
      for (size_t i = 0; i < tuple_.size(); ++i) {
        if (tuple_[i] != o.tuple_[i]) return false;
      }
      return true;
    }
    // One sharding given for a whole tuple applies to every leaf.
    const HloSharding& tuple = kind_ == Kind::kTuple ? *this : o;
    const HloSharding& single = kind_ == Kind::kTuple ? o : *this;
    if (tuple.tuple_.empty()) return false;
    for (const auto& e : tuple.tuple_) {
      if (e != single) return false;
    }
    return true;
  }
  if (kind_ != o.kind_) return false;
  if (shard_group_id_ != o.shard_group_id_) return false;
  if (shard_group_id_ && shard_as_ != o.shard_as_) return false;
  if (open_dims_ != o.open_dims_) return false;
  switch (kind_) {
    case Kind::kMaximal: return maximal_device_ == o.maximal_device_;
    case Kind::kTiled: return tiles_ == o.tiles_ && subgroup_types_ == o.subgroup_types_;
    default: return true;
  }
}

// ---------------------------------------------------------------------------------------------
// Per-device view

std::vector<int64_t> HloSharding::TileIndexForDevice(int64_t device) const {
  if (kind_ != Kind::kTiled) return {};
  std::vector<int64_t> index = tiles_.IndexOfDevice(device);
  if (index.empty()) return {};
  index.resize(static_cast<size_t>(TiledDataRank()));
  return index;
}

std::vector<int64_t> HloSharding::ShardShape(const std::vector<int64_t>& dims) const {
  std::vector<int64_t> shard = dims;
  for (auto& d : shard) d = std::max<int64_t>(d, 0);
  if (kind_ != Kind::kTiled) return shard;
  const size_t n = std::min(shard.size(), static_cast<size_t>(TiledDataRank()));
  for (size_t i = 0; i < n; ++i) shard[i] = CeilDiv(shard[i], tiles_.dim(static_cast<int64_t>(i)));
  return shard;
}

std::vector<int64_t> HloSharding::ShardOffset(const std::vector<int64_t>& dims, int64_t device) const {
  std::vector<int64_t> offset(dims.size(), 0);
  if (kind_ != Kind::kTiled) return offset;
  const std::vector<int64_t> index = TileIndexForDevice(device);
  if (index.empty()) return {};
  const std::vector<int64_t> shard = ShardShape(dims);
  const size_t n = std::min(dims.size(), index.size());
  for (size_t i = 0; i < n; ++i) offset[i] = SaturatingMul(index[i], shard[i]);
  return offset;
}

std::vector<int64_t> HloSharding::ShardValidExtent(const std::vector<int64_t>& dims, int64_t device) const {
  std::vector<int64_t> extent = dims;
  for (auto& d : extent) d = std::max<int64_t>(d, 0);
  if (kind_ == Kind::kMaximal && device != maximal_device_) return std::vector<int64_t>(dims.size(), 0);
  if (kind_ != Kind::kTiled) return extent;
  const std::vector<int64_t> offset = ShardOffset(dims, device);
  if (offset.empty()) return {};
  const std::vector<int64_t> shard = ShardShape(dims);
  for (size_t i = 0; i < extent.size(); ++i) {
    extent[i] = std::max<int64_t>(0, std::min(shard[i], extent[i] - offset[i]));
  }
  return extent;
}

namespace {
int64_t LeafBytes(const HloSharding& sharding, const Shape& leaf) {
  if (!leaf.IsArray()) return 0;
  int64_t bytes = PrimitiveTypeBytes(leaf.type);
  for (int64_t d : sharding.ShardShape(leaf.dims)) bytes = d == 0 ? 0 : SaturatingMul(bytes, d);
  return bytes;
}

int64_t ShapeBytes(const HloSharding& sharding, const Shape& shape, int64_t* leaf) {
  if (!shape.IsTuple()) {
    const int64_t i = (*leaf)++;
    if (sharding.IsTuple()) {
      const auto& elements = sharding.tuple_elements();
      const HloSharding& s =
          i < static_cast<int64_t>(elements.size()) ? elements[static_cast<size_t>(i)] : HloSharding::Replicate();
      return LeafBytes(s, shape);
    }
    return LeafBytes(sharding, shape);
  }
  int64_t total = 0;
  for (const auto& e : shape.tuple) total = SaturatingAdd(total, ShapeBytes(sharding, e, leaf));
  return total;
}
}  // namespace

int64_t HloSharding::BytesPerDevice(const Shape& shape) const {
  int64_t leaf = 0;
  return ShapeBytes(*this, shape, &leaf);
}

}  // namespace shardscope
