#include "move/service_notify.h"

#include <systemd/sd-daemon.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace capsule::move {

namespace {

// A STATUS= value is one line: a newline would start another assignment.
std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

void ServiceNotifier::Ready(const std::string& status) {
  (void)sd_notify(0, ("READY=1\nSTATUS=" + OneLine(status)).c_str());
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  std::lock_guard lock(mu_);
  every_ = std::chrono::microseconds(std::max<uint64_t>(usec / 4, 1000));
  last_ping_ = std::chrono::steady_clock::now() - every_;
}

int ServiceNotifier::AliveEveryMillis() {
  std::lock_guard lock(mu_);
  if (every_.count() == 0 || stopping_) return -1;
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(every_).count());
}

void ServiceNotifier::Alive() {
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (every_.count() == 0 || stopping_ || now - last_ping_ < every_) return;
    last_ping_ = now;
  }
  (void)sd_notify(0, "WATCHDOG=1");
}

void ServiceNotifier::Status(const std::string& status) {
  (void)sd_notify(0, ("STATUS=" + OneLine(status)).c_str());
}

void ServiceNotifier::Stopping(const std::string& status) {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  (void)sd_notify(0, ("STOPPING=1\nSTATUS=" + OneLine(status)).c_str());
}

}  // namespace capsule::move
