// The socket side of the TLS transport (move/net/tls_channel.h), apart from TLS itself:
// non-blocking TCP sockets, waiting on them with a deadline, HOST:PORT addresses, and the
// OpenSSL BIO that sends without SIGPIPE. Internal to //move:tls_channel.
#pragma once

#include <netdb.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule::move::tls_socket {

// Lets `ssl` read and write `fd` (not owned: the caller keeps the fd open longer than the
// SSL). Sends use MSG_NOSIGNAL, so a vanished peer is an EPIPE, never a SIGPIPE. The fd is
// non-blocking: an empty socket or a full buffer is SSL_ERROR_WANT_READ/WANT_WRITE.
Status AttachSocket(SSL* ssl, int fd);

// A point in time to give up at, or none.
class Deadline {
 public:
  // `seconds` from now; 0 (or less) = never.
  explicit Deadline(int seconds)
      : forever_(seconds <= 0), at_(Clock::now() + std::chrono::seconds(seconds)) {}
  // Milliseconds left for poll(2): -1 for never, 0 once passed.
  int PollTimeout() const;
  bool passed() const { return !forever_ && Clock::now() >= at_; }

 private:
  using Clock = std::chrono::steady_clock;
  bool forever_;
  Clock::time_point at_;
};

enum class WaitResult { kReady, kTimeout, kWoken };

// Waits for `events` (POLLIN, POLLOUT) on `fd` until `deadline`, or until `wake_fd` (if not
// -1) becomes readable. An error or hang-up on `fd` counts as ready: the next call on the
// socket reports it.
Result<WaitResult> WaitSocket(int fd, short events, const Deadline& deadline, int wake_fd,
                              const std::string& what);

// The poll(2) events OpenSSL asked to wait for with SSL_ERROR_WANT_READ or WANT_WRITE.
short EventsFor(int ssl_error);

// "HOST:PORT", "[V6]:PORT" or ":PORT" resolved for TCP, freed on destruction.
class AddrInfo {
 public:
  ~AddrInfo();
  // `passive` for an address to listen on (":PORT" then means every address).
  static Result<std::unique_ptr<AddrInfo>> Resolve(const std::string& host_port, bool passive);
  const addrinfo* list() const { return list_; }

 private:
  addrinfo* list_ = nullptr;
};

// "1.2.3.4:5" or "[::1]:5".
Result<std::string> FormatAddress(const sockaddr* address, socklen_t length);
// The address of the peer connected on `fd`, as FormatAddress.
Result<std::string> PeerAddress(int fd);

// A non-blocking, close-on-exec TCP socket.
Result<UniqueFd> NewSocket(int family);
// Turns Nagle off: the protocol's small messages should not wait.
void SetNoDelay(int fd);
// Connects the non-blocking `fd` to `address` by `deadline`; Unavailable naming `name` when
// refused, unreachable or silent past the deadline (`timeout_seconds`, for the message).
Status ConnectSocket(int fd, const addrinfo* address, const Deadline& deadline, int timeout_seconds,
                     const std::string& name);

}  // namespace capsule::move::tls_socket
