// Waiting in tests for a state to be observed, never for a time to pass.
#ifndef CAPSULEFS_TESTS_POLL_H_
#define CAPSULEFS_TESTS_POLL_H_

#include <chrono>
#include <functional>
#include <thread>

namespace capsule::testing {

// Polls `done` every 20 ms until it holds or `seconds` pass; whether it held. The verdict is
// the caller's, on what `done` observed; the deadline only bounds a wait that would never end.
inline bool WaitUntil(const std::function<bool()>& done, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  while (!done()) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace capsule::testing

#endif  // CAPSULEFS_TESTS_POLL_H_
