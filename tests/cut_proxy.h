// A TCP relay for tests that need a link to die mid-stream: it listens on 127.0.0.1 (a free
// port), forwards every connection to a target HOST:PORT, and, once armed with CutAfter(n),
// cuts each connection when n bytes have passed from client to server on it: the first n
// bytes are delivered, then both sockets are reset (or closed, see CutStyle), in both
// directions at once. Until armed it relays faithfully, half-closes included.
//
// Thread-safety: all methods may be called from any thread. Each connection is relayed by a
// thread of its own; the destructor stops and joins them all.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule::testing {

class CutProxy {
 public:
  enum class CutStyle {
    kReset,  // RST to both ends (SO_LINGER 0): the peers see ECONNRESET
    kClose,  // FIN to both ends: the peers see an end of stream
  };
  static constexpr uint64_t kNever = UINT64_MAX;

  // Starts relaying to `target` ("HOST:PORT").
  static Result<std::unique_ptr<CutProxy>> Start(const std::string& target);
  ~CutProxy();
  CutProxy(const CutProxy&) = delete;
  CutProxy& operator=(const CutProxy&) = delete;

  uint16_t port() const { return port_; }
  // "127.0.0.1:PORT", to give to a client instead of the target.
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Cuts every connection, open or future, once `bytes` have passed client to server on it
  // (at once for connections already past it). kNever disarms.
  void CutAfter(uint64_t bytes, CutStyle style = CutStyle::kReset);

  // Bytes relayed so far, over all connections, each way.
  uint64_t bytes_client_to_server() const { return client_to_server_.load(); }
  uint64_t bytes_server_to_client() const { return server_to_client_.load(); }
  // Connections accepted so far, and how many of them were cut.
  int connections() const { return connections_.load(); }
  int cuts() const { return cuts_.load(); }

 private:
  CutProxy(UniqueFd listen_fd, UniqueFd stop_fd, uint16_t port, std::string target);
  void AcceptLoop();
  void Relay(UniqueFd client, UniqueFd wake);
  void WakeAll();

  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // eventfd: readable once the destructor runs
  uint16_t port_;
  std::string target_;

  std::atomic<uint64_t> cut_after_{kNever};
  std::atomic<int> cut_style_{static_cast<int>(CutStyle::kReset)};
  std::atomic<uint64_t> client_to_server_{0};
  std::atomic<uint64_t> server_to_client_{0};
  std::atomic<int> connections_{0};
  std::atomic<int> cuts_{0};

  std::mutex mutex_;
  std::vector<int> wake_fds_;  // one eventfd per relay, told when the cut is re-armed
  std::vector<std::thread> relays_;
  std::thread acceptor_;
};

}  // namespace capsule::testing
