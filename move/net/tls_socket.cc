#include "move/net/tls_socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "capsule/base/openssl_handles.h"

namespace capsule::move::tls_socket {

// ---------------------------------------------------------------------------------------------
// A socket BIO of our own. OpenSSL's BIO_s_socket writes with write(2), which raises SIGPIPE
// when the peer has gone; this one sends with MSG_NOSIGNAL, so the process never needs to
// ignore the signal. The socket is non-blocking: an empty socket or a full buffer comes back
// to the caller as "retry", and the caller waits with poll(2) and a timeout.

namespace {

int SocketBioWrite(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  ssize_t n;
  do {
    n = send(fd, data, static_cast<size_t>(size), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(bio);
  return static_cast<int>(n);
}

int SocketBioRead(BIO* bio, char* buffer, int size) {
  BIO_clear_retry_flags(bio);
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  ssize_t n;
  do {
    n = recv(fd, buffer, static_cast<size_t>(size), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(bio);
  if (n == 0) BIO_set_flags(bio, BIO_FLAGS_IN_EOF);  // OpenSSL reports "unexpected eof"
  return static_cast<int>(n);
}

long SocketBioCtrl(BIO* bio, int command, long, void*) {
  switch (command) {
    case BIO_CTRL_FLUSH:  // nothing is buffered here
      return 1;
    case BIO_CTRL_EOF:
      return BIO_test_flags(bio, BIO_FLAGS_IN_EOF) != 0;
    default:
      return 0;
  }
}

const BIO_METHOD* SocketBioMethod() {
  // Made once and kept for the life of the process (OpenSSL's own methods are static too).
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "capsule socket (MSG_NOSIGNAL)");
    BIO_meth_set_write(m, SocketBioWrite);
    BIO_meth_set_read(m, SocketBioRead);
    BIO_meth_set_ctrl(m, SocketBioCtrl);
    return m;
  }();
  return method;
}

}  // namespace

Status AttachSocket(SSL* ssl, int fd) {
  BIO* bio = BIO_new(SocketBioMethod());
  if (bio == nullptr) return OpenSslError("BIO_new", Code::kIOError);
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl, bio, bio);  // ssl owns the BIO from here
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Waiting on a socket.

int Deadline::PollTimeout() const {
  if (forever_) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

Result<WaitResult> WaitSocket(int fd, short events, const Deadline& deadline, int wake_fd,
                              const std::string& what) {
  for (;;) {
    if (deadline.passed()) return WaitResult::kTimeout;
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int n = poll(fds, wake_fd >= 0 ? 2 : 1, deadline.PollTimeout());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(what + ": poll", errno);
    }
    if (n == 0) continue;  // the deadline check above decides
    if (wake_fd >= 0 && (fds[1].revents & POLLIN)) return WaitResult::kWoken;
    // POLLERR and POLLHUP count as ready: the next call on the socket reports what happened.
    if (fds[0].revents != 0) return WaitResult::kReady;
  }
}

short EventsFor(int ssl_error) { return ssl_error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT; }

// ---------------------------------------------------------------------------------------------
// Addresses.

namespace {

struct HostPort {
  std::string host;
  std::string port;
};

Result<HostPort> SplitHostPort(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon + 1 == host_port.size()) {
    return Status::InvalidArgument("address " + host_port, "expected HOST:PORT");
  }
  HostPort result{host_port.substr(0, colon), host_port.substr(colon + 1)};
  if (result.host.size() >= 2 && result.host.front() == '[' && result.host.back() == ']') {
    result.host = result.host.substr(1, result.host.size() - 2);
  }
  if (result.port.find_first_not_of("0123456789") != std::string::npos || result.port.size() > 5 ||
      std::stoul(result.port) > 65535) {
    return Status::InvalidArgument("address " + host_port, "port is not a number 0-65535");
  }
  return result;
}

}  // namespace

Result<std::string> FormatAddress(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  const int rc = getnameinfo(address, length, host, sizeof host, port, sizeof port,
                             NI_NUMERICHOST | NI_NUMERICSERV);
  if (rc != 0) return Status::IOError("getnameinfo", gai_strerror(rc));
  if (address->sa_family == AF_INET6) return "[" + std::string(host) + "]:" + port;
  return std::string(host) + ":" + port;
}

Result<std::string> PeerAddress(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return Status::IOError("getpeername", errno);
  }
  return FormatAddress(reinterpret_cast<sockaddr*>(&address), length);
}

AddrInfo::~AddrInfo() {
  if (list_ != nullptr) freeaddrinfo(list_);
}

Result<std::unique_ptr<AddrInfo>> AddrInfo::Resolve(const std::string& host_port, bool passive) {
  CAPSULE_ASSIGN_OR_RETURN(HostPort parts, SplitHostPort(host_port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::unique_ptr<AddrInfo> info(new AddrInfo);
  const int rc = getaddrinfo(parts.host.empty() ? nullptr : parts.host.c_str(), parts.port.c_str(),
                             &hints, &info->list_);
  if (rc != 0) {
    return Status::Unavailable("address " + host_port,
                               std::string("cannot resolve: ") + gai_strerror(rc));
  }
  return info;
}

Result<UniqueFd> NewSocket(int family) {
  UniqueFd fd(socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::IOError("socket", errno);
  return fd;
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Status ConnectSocket(int fd, const addrinfo* address, const Deadline& deadline, int timeout_seconds,
                     const std::string& name) {
  if (connect(fd, address->ai_addr, address->ai_addrlen) == 0) return Status::Ok();
  if (errno != EINPROGRESS && errno != EINTR) {
    return Status::Unavailable("connect to " + name, std::strerror(errno));
  }
  CAPSULE_ASSIGN_OR_RETURN(WaitResult waited,
                           WaitSocket(fd, POLLOUT, deadline, -1, "connect to " + name));
  if (waited == WaitResult::kTimeout) {
    return Status::Unavailable("connect to " + name,
                               "no answer within " + std::to_string(timeout_seconds) + " s");
  }
  int error = 0;
  socklen_t length = sizeof error;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
  if (error != 0) return Status::Unavailable("connect to " + name, std::strerror(error));
  return Status::Ok();
}

}  // namespace capsule::move::tls_socket
