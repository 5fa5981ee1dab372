// Status and Result: the one error type that crosses every module of capsulefs.
//
// A Status is either ok or carries a Code and a message of the form "<what>: <why>", naming
// the file, path, event or peer concerned. Corruption (stored data that contradicts itself or
// its digests) is kept apart from an I/O failure (the system refused a call) and from bad input
// (the caller asked for something invalid). errno appears only as the optional `sys_errno` of
// an I/O failure, so that the FUSE edge can answer with the error the kernel gave.
//
// Thread-safety: values; safe to copy between threads.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace capsule {

enum class Code {
  kOk = 0,
  kInvalidArgument,     // bad input from the caller: refused, nothing changed
  kCorruption,          // stored or received data fails its own checks
  kIOError,             // a system call failed (sys_errno says which)
  kNotFound,            // the thing named does not exist
  kAlreadyExists,       // the thing to create is already there
  kFailedPrecondition,  // the state forbids it: not held here, frozen, retired
  kPermissionDenied,    // the operation is not allowed on that object at all
  kUnavailable,         // a peer could not be reached
};

const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok

  static Status Ok() { return Status(); }
  static Status Make(Code code, std::string what, std::string why) {
    return Status(code, Join(what, why));
  }
  static Status InvalidArgument(std::string what, std::string why) {
    return Status(Code::kInvalidArgument, Join(what, why));
  }
  static Status Corruption(std::string what, std::string why) {
    return Status(Code::kCorruption, Join(what, why));
  }
  // A failed system call; `err` is the errno it returned, kept as sys_errno. The code says
  // what happened: NotFound for ENOENT, AlreadyExists for EEXIST, IOError for the rest.
  static Status IOError(std::string what, int err);
  static Status IOError(std::string what, std::string why) {
    return Status(Code::kIOError, Join(what, why));
  }
  static Status NotFound(std::string what, std::string why) {
    return Status(Code::kNotFound, Join(what, why));
  }
  static Status AlreadyExists(std::string what, std::string why) {
    return Status(Code::kAlreadyExists, Join(what, why));
  }
  static Status FailedPrecondition(std::string what, std::string why) {
    return Status(Code::kFailedPrecondition, Join(what, why));
  }
  static Status PermissionDenied(std::string what, std::string why) {
    return Status(Code::kPermissionDenied, Join(what, why));
  }
  static Status Unavailable(std::string what, std::string why) {
    return Status(Code::kUnavailable, Join(what, why));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // The errno of the failed system call, when this is an I/O failure from one.
  std::optional<int> sys_errno() const { return sys_errno_; }

  // The same error with `context` in front: "context: <message>".
  Status WithContext(const std::string& context) const;

  std::string ToString() const { return ok() ? "ok" : message_; }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static std::string Join(const std::string& what, const std::string& why) {
    return what.empty() ? why : what + ": " + why;
  }

  Code code_ = Code::kOk;
  std::string message_;
  std::optional<int> sys_errno_;
};

// Result<T> holds either a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(state_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  // By value, so that `for (auto& x : *F())` never iterates a destroyed temporary.
  T value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace capsule

// Returns from the enclosing function when `expr` (a Status) is not ok.
#define CAPSULE_RETURN_IF_ERROR(expr)            \
  do {                                           \
    ::capsule::Status capsule_status_ = (expr);  \
    if (!capsule_status_.ok()) return capsule_status_; \
  } while (0)

#define CAPSULE_CONCAT_INNER(a, b) a##b
#define CAPSULE_CONCAT(a, b) CAPSULE_CONCAT_INNER(a, b)

// `CAPSULE_ASSIGN_OR_RETURN(auto x, F());` declares x from a Result or returns its Status.
#define CAPSULE_ASSIGN_OR_RETURN(lhs, expr) \
  CAPSULE_ASSIGN_OR_RETURN_IMPL(CAPSULE_CONCAT(capsule_result_, __LINE__), lhs, expr)
#define CAPSULE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
