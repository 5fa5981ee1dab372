// What the sidecar tells the service manager that runs it (sd_notify(3), Debian's
// libsystemd): READY=1 once it listens, WATCHDOG=1 from its serving loop while that loop turns
// (sd_watchdog_enabled(3)), STOPPING=1 when a stop signal came, and a STATUS= line with each.
// Outside systemd (no NOTIFY_SOCKET, no WATCHDOG_USEC) each of them does nothing.
//
// The watchdog is pinged by the loop that accepts connections, not by a thread of its own: a
// loop that is stuck stops the pings, and systemd restarts the service after WatchdogSec=.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

#include "capsule/base/mutex.h"

namespace capsule::move {

class ServiceNotifier {
 public:
  ServiceNotifier() = default;
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;

  // READY=1 with `status`; reads whether the service manager asked for a watchdog.
  void Ready(const std::string& status);
  // How long the serving loop may wait before it calls Alive again, in milliseconds: a quarter
  // of WatchdogSec=; -1 (no limit) without a watchdog.
  int AliveEveryMillis();
  // The serving loop turns: WATCHDOG=1, at most once every AliveEveryMillis.
  void Alive();
  // STATUS=`status` alone.
  void Status(const std::string& status);
  // STOPPING=1 with `status`; no ping from now on.
  void Stopping(const std::string& status);

 private:
  Mutex mu_;
  std::chrono::microseconds every_ GUARDED_BY(mu_){0};  // 0: no watchdog
  std::chrono::steady_clock::time_point last_ping_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace capsule::move
