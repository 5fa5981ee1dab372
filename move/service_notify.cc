#include "move/service_notify.h"

#include <systemd/sd-daemon.h>

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

ServiceNotifier::~ServiceNotifier() { StopWatchdog(); }

void ServiceNotifier::Ready(const std::string& status) {
  (void)sd_notify(0, ("READY=1\nSTATUS=" + OneLine(status)).c_str());
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  std::lock_guard lock(mu_);
  if (stop_ || watchdog_.joinable()) return;
  watchdog_ = std::thread([this, interval = std::chrono::microseconds(usec / 2)] {
    std::unique_lock held(mu_);
    while (!stop_) {
      (void)sd_notify(0, "WATCHDOG=1");
      wake_.wait_for(held, interval, [this]() REQUIRES(mu_) { return stop_; });
    }
  });
}

void ServiceNotifier::Status(const std::string& status) {
  (void)sd_notify(0, ("STATUS=" + OneLine(status)).c_str());
}

void ServiceNotifier::Stopping(const std::string& status) {
  StopWatchdog();
  (void)sd_notify(0, ("STOPPING=1\nSTATUS=" + OneLine(status)).c_str());
}

void ServiceNotifier::StopWatchdog() {
  std::thread pinger;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    pinger = std::move(watchdog_);
  }
  wake_.notify_all();
  if (pinger.joinable()) pinger.join();
}

}  // namespace capsule::move
