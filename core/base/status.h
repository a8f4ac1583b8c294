// Errors as values: every fallible call in core/partitioner/simulator returns Result<T>.
// No exception escapes a library boundary and nothing aborts on bad input.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace shardscope {

struct Error {
  std::string message;
  // Byte offset into the text being parsed, when the error is about text; -1 otherwise.
  // Parsers of sub-languages (sharding text, shapes) report offsets relative to their input, the
  // HLO parser translates them into FILE:LINE:COLUMN.
  int64_t offset = -1;

  Error() = default;
  explicit Error(std::string msg, int64_t off = -1) : message(std::move(msg)), offset(off) {}
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}      // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void> equivalent.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : err_(std::move(e)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return Status(); }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool ok_ = true;
};

}  // namespace shardscope
