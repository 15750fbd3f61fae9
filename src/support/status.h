// Loom's one error model: libraries return Status or Expected<T>; only the CLI
// turns an error into a message and an exit code.
#pragma once

#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "support/check.h"

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
    LOOM_CHECK(!ok_, "the error of an ok Status");
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
  Expected(T value) : data_(std::move(value)) {}             // NOLINT: implicit by design
  Expected(Error error) : data_(std::move(error)) {}         // NOLINT
  Expected(const Status& status) : data_(status.error()) {}  // NOLINT: never an ok Status

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  // Reading the value of an error is a bug, stopped by LOOM_CHECK.
  const T& value() const& {
    CheckOk();
    return *std::get_if<T>(&data_);
  }
  T& value() & {
    CheckOk();
    return *std::get_if<T>(&data_);
  }
  T&& value() && {
    CheckOk();
    return std::move(*std::get_if<T>(&data_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  const Error& error() const {
    LOOM_CHECK(!ok(), "the error of an Expected that holds a value");
    return *std::get_if<Error>(&data_);
  }
  Status status() const { return ok() ? Status() : Status(error()); }

 private:
  void CheckOk() const {
    if (!ok()) [[unlikely]] {
      InvariantBroken(__FILE__, __LINE__,
                      "the value of an Expected that holds the error: " + error().message);
    }
  }

  std::variant<T, Error> data_;
};

// Runs `work` and returns its Status or Expected, with an allocation that
// failed inside it (std::bad_alloc, or std::length_error for a size past
// what a container can hold) turned into an Error. Used where a thread
// starts work, so that memory running out is that work's error and not
// std::terminate.
template <typename Work>
auto OutOfMemoryAsError(Work&& work) -> decltype(work()) {
  try {
    return work();
  } catch (const std::bad_alloc&) {
    return Error{"out of memory"};
  } catch (const std::length_error&) {
    return Error{"out of memory: a buffer larger than this machine can address"};
  }
}

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
