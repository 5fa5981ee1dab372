// What the sidecar tells the service manager that runs it (sd_notify(3), Debian's
// libsystemd): READY=1 once it listens, WATCHDOG=1 every half of WatchdogSec= while it
// serves (sd_watchdog_enabled(3)), STOPPING=1 when a stop signal came, and a STATUS= line
// with each. Outside systemd (no NOTIFY_SOCKET, no WATCHDOG_USEC) each of them does nothing.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "capsule/base/mutex.h"

namespace capsule::move {

class ServiceNotifier {
 public:
  ServiceNotifier() = default;
  ~ServiceNotifier();  // stops the watchdog's pings
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;

  // READY=1 with `status`; then, when the service manager asked for a watchdog, a thread
  // pings it every half of its interval until Stopping or the destructor.
  void Ready(const std::string& status);
  // STATUS=`status` alone.
  void Status(const std::string& status);
  // STOPPING=1 with `status`; the pings stop.
  void Stopping(const std::string& status);

 private:
  void StopWatchdog();

  Mutex mu_;
  std::condition_variable wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread watchdog_;
};

}  // namespace capsule::move
