// JSON reader and writer. See json.h.
#include "core/base/json.h"

#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

namespace shardscope::json {

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kNull: return "null";
    case Type::kBool: return "a boolean";
    case Type::kNumber: return "a number";
    case Type::kString: return "a string";
    case Type::kArray: return "an array";
    case Type::kObject: return "an object";
  }
  return "a value";
}

// ---- Value ----------------------------------------------------------------------------------------

Value::Value() = default;
Value::Value(const Value&) = default;
Value::Value(Value&&) noexcept = default;
Value& Value::operator=(const Value&) = default;
Value& Value::operator=(Value&&) noexcept = default;
Value::~Value() = default;

Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}

Value Value::Number(double d) {
  Value v;
  v.type_ = Type::kNumber;
  v.number_ = d;
  return v;
}

Value Value::Integer(int64_t i) {
  Value v;
  v.type_ = Type::kNumber;
  v.number_ = static_cast<double>(i);
  v.integer_ = i;
  v.exact_integer_ = true;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.string_ = std::move(s);
  return v;
}

Value Value::Array(std::vector<Value> items) {
  Value v;
  v.type_ = Type::kArray;
  v.items_ = std::move(items);
  return v;
}

Value Value::Object(std::vector<Member> members) {
  Value v;
  v.type_ = Type::kObject;
  v.members_ = std::move(members);
  return v;
}

std::optional<int64_t> Value::AsInt64() const {
  if (type_ != Type::kNumber) return std::nullopt;
  if (exact_integer_) return integer_;
  // 2^63 is exactly representable; every double below it in magnitude with no fraction fits.
  if (!std::isfinite(number_) || number_ != std::floor(number_) || std::fabs(number_) >= 9223372036854775808.0) {
    return std::nullopt;
  }
  return static_cast<int64_t>(number_);
}

const Member* Value::FindMember(std::string_view key) const {
  for (const Member& m : members_) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

const Value* Value::Find(std::string_view key) const {
  const Member* m = FindMember(key);
  return m ? &m->value : nullptr;
}

bool Value::operator==(const Value& other) const {
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kNull: return true;
    case Type::kBool: return bool_ == other.bool_;
    case Type::kNumber:
      if (exact_integer_ && other.exact_integer_) return integer_ == other.integer_;
      return number_ == other.number_;
    case Type::kString: return string_ == other.string_;
    case Type::kArray: return items_ == other.items_;
    case Type::kObject:
      if (members_.size() != other.members_.size()) return false;
      for (size_t i = 0; i < members_.size(); ++i) {
        if (members_[i].key != other.members_[i].key || members_[i].value != other.members_[i].value) return false;
      }
      return true;
  }
  return false;
}

Error ErrorAt(const Position& position, std::string_view message) {
  if (position.line <= 0) return Error(std::string(message));
  return Error(std::to_string(position.line) + ":" + std::to_string(position.column) + ": " + std::string(message),
               position.offset);
}

// ---- Reading --------------------------------------------------------------------------------------

namespace {

void AppendUtf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid UTF-8.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char cc = byte(i + k);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;  // overlong / surrogate
  if (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
  return n;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

class Reader {
 public:
  Reader(std::string_view text, const ParseOptions& options) : text_(text), options_(options) {}

  Result<Value> Run() {
    // A UTF-8 byte order mark is allowed before the value.
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = line_start_ = 3;
    SkipSpace();
    auto value = ReadValue(0);
    if (!value.ok()) return value;
    SkipSpace();
    if (pos_ != text_.size()) return Fail(Here(), "unexpected text after the JSON value, found " + Found());
    return value;
  }

 private:
  Position Here() const {
    return Position{line_, static_cast<int64_t>(pos_ - line_start_) + 1, static_cast<int64_t>(pos_)};
  }
  static Error Fail(const Position& at, std::string_view message) { return ErrorAt(at, message); }

  // What is at the current position, for "expected X, found Y".
  std::string Found() const {
    if (pos_ >= text_.size()) return "the end of the text";
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
    static const char* kHex = "0123456789ABCDEF";
    return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 0xF];
  }

  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool AtEnd() const { return pos_ >= text_.size(); }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        ++pos_;
        ++line_;
        line_start_ = pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Result<Value> ReadValue(int depth) {
    const Position at = Here();
    Result<Value> result = Value();
    const char c = Peek();
    if (AtEnd()) {
      return Fail(at, "expected a value (object, array, string, number, true, false or null), found the end of the text");
    } else if (c == '{' || c == '[') {
      if (depth >= options_.max_depth) {
        return Fail(at, "nesting deeper than " + std::to_string(options_.max_depth) + " levels");
      }
      result = c == '{' ? ReadObject(depth + 1) : ReadArray(depth + 1);
    } else if (c == '"') {
      auto s = ReadString();
      if (!s.ok()) return s.error();
      result = Value::String(std::move(*s));
    } else if (c == '-' || IsDigit(c)) {
      result = ReadNumber();
    } else if (Literal("true")) {
      result = Value::Bool(true);
    } else if (Literal("false")) {
      result = Value::Bool(false);
    } else if (Literal("null")) {
      result = Value::Null();
    } else {
      return Fail(at, "expected a value (object, array, string, number, true, false or null), found " + Found());
    }
    if (result.ok()) result->set_position(at);
    return result;
  }

  Result<Value> ReadArray(int depth) {
    ++pos_;  // '['
    std::vector<Value> items;
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return Value::Array(std::move(items));
    }
    while (true) {
      SkipSpace();
      auto item = ReadValue(depth);
      if (!item.ok()) return item;
      items.push_back(std::move(*item));
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return Value::Array(std::move(items));
      }
      return Fail(Here(), "expected ',' or ']' after an array element, found " + Found());
    }
  }

  Result<Value> ReadObject(int depth) {
    ++pos_;  // '{'
    std::vector<Member> members;
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return Value::Object(std::move(members));
    }
    while (true) {
      SkipSpace();
      Member m;
      m.position = Here();
      if (Peek() != '"') return Fail(m.position, "expected a quoted key, found " + Found());
      auto key = ReadString();
      if (!key.ok()) return key.error();
      m.key = std::move(*key);
      if (!options_.allow_duplicate_keys) {
        for (const Member& earlier : members) {
          if (earlier.key == m.key) {
            return Fail(m.position, "duplicate key \"" + m.key + "\" (first at " + std::to_string(earlier.position.line) +
                                        ":" + std::to_string(earlier.position.column) + ")");
          }
        }
      }
      SkipSpace();
      if (Peek() != ':') return Fail(Here(), "expected ':' after the key \"" + m.key + "\", found " + Found());
      ++pos_;
      SkipSpace();
      auto value = ReadValue(depth);
      if (!value.ok()) return value;
      m.value = std::move(*value);
      members.push_back(std::move(m));
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return Value::Object(std::move(members));
      }
      return Fail(Here(), "expected ',' or '}' after an object member, found " + Found());
    }
  }

  // Four hex digits at pos_; advances past them.
  Result<uint32_t> ReadHex4(const Position& escape) {
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      if (AtEnd()) return Fail(escape, "incomplete \\u escape (expected four hex digits)");
      const char h = text_[pos_];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') code |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= static_cast<uint32_t>(h - 'A' + 10);
      else return Fail(Here(), "expected a hex digit in the \\u escape, found " + Found());
      ++pos_;
    }
    return code;
  }

  // A string literal at pos_ (which is '"'); strings never span lines (raw newlines are errors),
  // so Here() stays right inside them.
  Result<std::string> ReadString() {
    const Position start = Here();
    ++pos_;
    std::string out;
    while (true) {
      if (AtEnd()) return Fail(start, "unterminated string (expected a closing '\"')");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\n') return Fail(Here(), "unterminated string (a newline inside a string must be written \\n)");
      if (c < 0x20) return Fail(Here(), "control character " + Found() + " inside a string (write it as a \\u escape)");
      if (c >= 0x80) {
        // JSON text is UTF-8 (RFC 8259 §8.1): a string keeps its sequences as they are, and a
        // byte that starts no valid sequence is an error (it could not be written back).
        const size_t n = Utf8SequenceLength(text_, pos_);
        if (n == 0) return Fail(Here(), "invalid UTF-8 (" + Found() + ") inside a string");
        out.append(text_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      const Position escape = Here();
      ++pos_;
      if (AtEnd()) return Fail(start, "unterminated string (expected a closing '\"')");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          auto code = ReadHex4(escape);
          if (!code.ok()) return code.error();
          uint32_t cp = *code;
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail(escape, "unpaired low surrogate in the \\u escape (a \\uD800-\\uDBFF escape must come first)");
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") {
              return Fail(escape, "unpaired high surrogate in the \\u escape (expected a \\uDC00-\\uDFFF escape after it)");
            }
            const Position low_at = Here();
            pos_ += 2;
            auto low = ReadHex4(low_at);
            if (!low.ok()) return low.error();
            if (*low < 0xDC00 || *low > 0xDFFF) {
              return Fail(low_at, "expected a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (*low - 0xDC00);
          }
          AppendUtf8(out, cp);
          break;
        }
        default: {
          const bool printable = e >= 0x20 && e < 0x7F;
          return Fail(escape, std::string("unknown escape ") + (printable ? std::string("'\\") + e + "'" : "'\\' + a control byte") +
                                  " (known: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        }
      }
    }
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  Result<Value> ReadNumber() {
    const Position start = Here();
    const size_t begin = pos_;
    size_t end = pos_;
    while (end < text_.size() && (IsDigit(text_[end]) || text_[end] == '-' || text_[end] == '+' || text_[end] == '.' ||
                                  text_[end] == 'e' || text_[end] == 'E')) {
      ++end;
    }
    const std::string_view token = text_.substr(begin, end - begin);
    auto malformed = [&] { return Fail(start, "malformed number '" + std::string(token) + "'"); };
    size_t i = 0;
    if (i < token.size() && token[i] == '-') ++i;
    if (i >= token.size() || !IsDigit(token[i])) return malformed();
    if (token[i] == '0') {
      ++i;
    } else {
      while (i < token.size() && IsDigit(token[i])) ++i;
    }
    bool integral = true;
    if (i < token.size() && token[i] == '.') {
      integral = false;
      ++i;
      if (i >= token.size() || !IsDigit(token[i])) return malformed();
      while (i < token.size() && IsDigit(token[i])) ++i;
    }
    if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
      integral = false;
      ++i;
      if (i < token.size() && (token[i] == '+' || token[i] == '-')) ++i;
      if (i >= token.size() || !IsDigit(token[i])) return malformed();
      while (i < token.size() && IsDigit(token[i])) ++i;
    }
    if (i != token.size()) return malformed();
    pos_ = end;
    if (integral) {
      int64_t n = 0;
      auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), n);
      if (ec == std::errc() && ptr == token.data() + token.size()) return Value::Integer(n);
    }
    double d = 0;
    auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), d);
    if (ec == std::errc::result_out_of_range) {
      // Underflow reads as zero; overflow has no double.
      if (std::fabs(std::strtod(std::string(token).c_str(), nullptr)) < 1.0) return Value::Number(0.0);
      return Fail(start, "number out of range '" + std::string(token) + "'");
    }
    if (ec != std::errc() || ptr != token.data() + token.size()) return malformed();
    return Value::Number(d);
  }

  std::string_view text_;
  const ParseOptions& options_;
  size_t pos_ = 0;
  int64_t line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

Result<Value> Parse(std::string_view text, const ParseOptions& options) { return Reader(text, options).Run(); }

// ---- Writing --------------------------------------------------------------------------------------

namespace {

void AppendNumber(std::string& out, const Value& v) {
  char buf[64];
  if (auto i = v.AsInt64(); i && static_cast<double>(*i) == v.number()) {
    auto r = std::to_chars(buf, buf + sizeof buf, *i);
    out.append(buf, r.ptr);
    return;
  }
  if (!std::isfinite(v.number())) {
    out += "null";
    return;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, v.number());
  out.append(buf, r.ptr);
}

void Write(std::string& out, const Value& v, int indent, int level) {
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.type()) {
    case Type::kNull: out += "null"; return;
    case Type::kBool: out += v.boolean() ? "true" : "false"; return;
    case Type::kNumber: AppendNumber(out, v); return;
    case Type::kString: AppendQuoted(out, v.string()); return;
    case Type::kArray:
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += ',';
        newline(level + 1);
        Write(out, v.items()[i], indent, level + 1);
      }
      if (!v.items().empty()) newline(level);
      out += ']';
      return;
    case Type::kObject:
      out += '{';
      for (size_t i = 0; i < v.members().size(); ++i) {
        if (i) out += ',';
        newline(level + 1);
        AppendQuoted(out, v.members()[i].key);
        out += indent < 0 ? ":" : ": ";
        Write(out, v.members()[i].value, indent, level + 1);
      }
      if (!v.members().empty()) newline(level);
      out += '}';
      return;
  }
}

}  // namespace

void AppendQuoted(std::string& out, std::string_view text) {
  static const char* kHex = "0123456789abcdef";
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(text, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

std::string Quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  AppendQuoted(out, text);
  return out;
}

std::string Serialize(const Value& value, int indent) {
  std::string out;
  Write(out, value, indent, 0);
  return out;
}

}  // namespace shardscope::json
