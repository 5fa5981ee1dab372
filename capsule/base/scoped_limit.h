// Tests only: a resource limit's soft value lowered for a scope, to make a write or an open
// fail as a full disk or a busy process would. SIGXFSZ is ignored meanwhile, so that a write
// past RLIMIT_FSIZE fails with EFBIG instead of ending the test program.
#pragma once

#include <signal.h>
#include <sys/resource.h>

namespace capsule::testing {

class ScopedLimit {
 public:
  ScopedLimit(int resource, rlim_t soft) : resource_(resource) {
    ok_ = ::getrlimit(resource_, &saved_) == 0;
    struct rlimit lowered = saved_;
    lowered.rlim_cur = soft;
    ok_ = ok_ && ::setrlimit(resource_, &lowered) == 0;
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
  }
  ~ScopedLimit() {
    ::setrlimit(resource_, &saved_);
    ::signal(SIGXFSZ, old_handler_);
  }
  ScopedLimit(const ScopedLimit&) = delete;
  ScopedLimit& operator=(const ScopedLimit&) = delete;

  // Whether the limit was lowered.
  bool ok() const { return ok_; }

 private:
  int resource_;
  struct rlimit saved_ {};
  sighandler_t old_handler_;
  bool ok_ = false;
};

}  // namespace capsule::testing
