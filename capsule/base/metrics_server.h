// A registry's numbers (capsule/base/metrics.h) served to a Prometheus scraper: a small
// HTTP/1.1 responder on a plain TCP port of its own (never a TLS port), on a thread of its
// own. It answers `GET /metrics` (and `GET /`) with the text exposition format, version 0.0.4,
// one request per connection (Connection: close); anything else gets 400, 404 or 405.
//
// Bounded: a request's head may be 8 KiB at most (431 past it), and a connection that sends
// or takes nothing for 5 s is closed. Connections are answered one at a time, so a slow client
// holds the port for 5 s at most; nothing it sends reaches anything but this parser.
//
// Thread-safety: Start and the destructor on one thread; the registry is read from the
// server's thread (it is thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "capsule/base/file_io.h"
#include "capsule/base/metrics.h"
#include "capsule/base/status.h"

namespace capsule {

class MetricsServer {
 public:
  // Listens on "HOST:PORT" ("[::1]:PORT" for IPv6; PORT 0 picks a free one, see port()) and
  // serves `registry`, which must outlive the server. A bad address or a port in use is an
  // error naming it.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host_port, const MetricsRegistry* registry);
  ~MetricsServer();  // stops serving and joins its thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  MetricsServer(UniqueFd listen, UniqueFd wake, uint16_t port, const MetricsRegistry* registry);
  void Serve();
  void Answer(int fd);

  UniqueFd listen_;
  UniqueFd wake_;  // an eventfd: readable once the server stops
  const uint16_t port_;
  const MetricsRegistry* const registry_;
  std::thread thread_;
};

}  // namespace capsule
