// Loom's one error model: libraries return Status or Expected<T>; only the CLI
// turns an error into a message and an exit code.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace loom {

// A position in an HLO text: 1-based line and column; 0 means "unknown".
struct SourceLoc {
  int line = 0;
  int col = 0;
  bool known() const { return line > 0; }
  friend bool operator==(const SourceLoc&, const SourceLoc&) = default;
};

// One diagnostic: what went wrong and, where the error has a place in the
// text, where. `context` names the op or computation when there is no place.
struct Error {
  std::string message;
  SourceLoc loc;

  // "LINE:COL: message", or the bare message where the location is unknown.
  std::string ToString() const;
  // "FILE:LINE:COL: error: message".
  std::string ToString(const std::string& file) const;
};

// Success, or one Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design

  bool ok() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

inline Status OkStatus() { return Status(); }

// A value or an Error.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : data_(std::move(value)) {}      // NOLINT: implicit by design
  Expected(Error error) : data_(std::move(error)) {}  // NOLINT
  Expected(const Status& status) : data_(status.error()) { assert(!status.ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  const T& value() const& {
    assert(ok());
    return std::get<T>(data_);
  }
  T& value() & {
    assert(ok());
    return std::get<T>(data_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(data_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<Error>(data_);
  }
  Status status() const { return ok() ? Status() : Status(error()); }

 private:
  std::variant<T, Error> data_;
};

}  // namespace loom

// Propagate a failed Status/Expected out of the enclosing function.
#define LOOM_RETURN_IF_ERROR(expr)                                                   \
  do {                                                                               \
    if (auto loom_status_ = (expr); !loom_status_.ok()) return loom_status_.error(); \
  } while (false)

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)
// `LOOM_ASSIGN_OR_RETURN(auto x, Compute())` binds the value or returns the error.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_CONCAT(loom_expected_, __LINE__), lhs, expr)
#define LOOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.error();               \
  lhs = std::move(tmp).value()
