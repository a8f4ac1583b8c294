// JSON (RFC 8259), read and written in one place: settings files of the conformance corpus, custom
// chip presets, project files, and the JSON the exports write.
//
// Reading is strict (no comments, no trailing commas, no leading zeros, no raw control characters or
// invalid UTF-8 in strings) and never aborts: bad text gives an Error "LINE:COLUMN: expected ..." (1-based, columns
// count bytes) whose offset is the byte offset; nesting deeper than ParseOptions::max_depth is an
// error too, so hostile input cannot exhaust the stack. Objects keep their members in the order of
// the text, and every value and every member key remembers where it starts, so a caller that
// rejects a value can say where it is (ErrorAt).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace shardscope::json {

enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

// "null", "a boolean", "a number", "a string", "an array", "an object" (for messages).
std::string_view TypeName(Type type);

// Where a piece of JSON text starts. line and column are 1-based (0 when the value was built, not
// read); offset is the byte offset (-1 when built).
struct Position {
  int64_t line = 0, column = 0, offset = -1;
};

struct Member;

class Value {
 public:
  Value();  // null
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;
  ~Value();

  static Value Null() { return Value(); }
  static Value Bool(bool b);
  static Value Number(double d);
  static Value Integer(int64_t i);  // exact, also beyond 2^53
  static Value String(std::string s);
  static Value Array(std::vector<Value> items);
  static Value Object(std::vector<Member> members);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // The payload of each type; the empty/zero value when the type differs.
  bool boolean() const { return bool_; }
  double number() const { return number_; }
  const std::string& string() const { return string_; }
  const std::vector<Value>& items() const { return items_; }        // array elements
  const std::vector<Member>& members() const { return members_; }   // object members, in text order
  std::vector<Value>& mutable_items() { return items_; }
  std::vector<Member>& mutable_members() { return members_; }

  // A number that is a whole number within int64: an integer literal exactly (even beyond 2^53),
  // otherwise the double when it has no fraction. nullopt for anything else.
  std::optional<int64_t> AsInt64() const;

  // The first member named `key` (nullptr when absent or when this is not an object).
  const Member* FindMember(std::string_view key) const;
  const Value* Find(std::string_view key) const;

  const Position& position() const { return position_; }
  void set_position(Position p) { position_ = p; }

  // Structural equality: same type and payload, object members in the same order; positions are
  // ignored. Numbers compare by value (an exact integer equals the same double).
  bool operator==(const Value& other) const;
  bool operator!=(const Value& other) const { return !(*this == other); }

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool exact_integer_ = false;  // integer_ holds the number exactly
  double number_ = 0;
  int64_t integer_ = 0;
  std::string string_;
  std::vector<Value> items_;
  std::vector<Member> members_;
  Position position_;
};

struct Member {
  std::string key;
  Position position;  // of the key's opening quote
  Value value;
};

struct ParseOptions {
  int max_depth = 256;                 // arrays and objects nested deeper are an error
  bool allow_duplicate_keys = false;   // false: a repeated key in one object is an error
};

// Parses one JSON value (with optional surrounding whitespace) from `text`.
Result<Value> Parse(std::string_view text, const ParseOptions& options = {});

// An error about a value or key read from text: "LINE:COLUMN: message" with its byte offset (just
// the message for built values).
Error ErrorAt(const Position& position, std::string_view message);

// ---- Writing --------------------------------------------------------------------------------------

// Appends a JSON string literal with its quotes: escapes '"', '\\' and control characters; valid
// UTF-8 passes through, every byte of invalid UTF-8 becomes U+FFFD.
void AppendQuoted(std::string& out, std::string_view text);
std::string Quote(std::string_view text);

// The text of a value. indent < 0: one line without spaces; otherwise members and elements on
// lines of their own, indented by `indent` spaces per level. Numbers in their shortest form that
// reads back as the same double (exact integers as integers); non-finite numbers become null.
std::string Serialize(const Value& value, int indent = -1);

}  // namespace shardscope::json
