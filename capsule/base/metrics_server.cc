#include "capsule/base/metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace capsule {

namespace {

constexpr size_t kMaxHead = 8192;
constexpr int kIdleMillis = 5000;

// Waits until `fd` is ready for `events`, `kIdleMillis` at most, or the server stops: true
// when ready.
bool WaitReady(int fd, short events, int wake) {
  pollfd fds[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
  for (;;) {
    int n = ::poll(fds, 2, kIdleMillis);
    if (n < 0 && errno == EINTR) continue;
    return n > 0 && fds[1].revents == 0 && fds[0].revents != 0;
  }
}

void SendAll(int fd, const std::string& data, int wake) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!WaitReady(fd, POLLOUT, wake)) return;
    } else {
      return;
    }
  }
}

std::string Response(const std::string& status, const std::string& type, const std::string& body,
                     const std::string& extra = "") {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra + "Connection: close\r\n\r\n" + body;
}

std::string Plain(const std::string& status, const std::string& text, const std::string& extra = "") {
  return Response(status, "text/plain; charset=utf-8", text + "\n", extra);
}

Result<std::pair<UniqueFd, uint16_t>> ListenOn(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon + 1 == host_port.size()) {
    return Status::InvalidArgument(host_port, "not HOST:PORT");
  }
  std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int error = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found); error != 0) {
    return Status::InvalidArgument(host_port, std::string("cannot resolve: ") + ::gai_strerror(error));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  UniqueFd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::IOError(host_port, errno);
  int on = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd.get(), 16) != 0) {
    return Status::IOError(host_port, errno);
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) return Status::IOError(host_port, errno);
  const uint16_t number = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::make_pair(std::move(fd), number);
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host_port,
                                                           const MetricsRegistry* registry) {
  CAPSULE_ASSIGN_OR_RETURN(auto listening, ListenOn(host_port));
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) return Status::IOError("eventfd", errno);
  auto server = std::unique_ptr<MetricsServer>(
      new MetricsServer(std::move(listening.first), std::move(wake), listening.second, registry));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsServer::MetricsServer(UniqueFd listen, UniqueFd wake, uint16_t port, const MetricsRegistry* registry)
    : listen_(std::move(listen)), wake_(std::move(wake)), port_(port), registry_(registry) {}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void MetricsServer::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn.valid()) {
      // Out of descriptors, say: give connections time to close rather than spin.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) ::usleep(100 * 1000);
      continue;
    }
    Answer(conn.get());
  }
}

void MetricsServer::Answer(int fd) {
  std::string head;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kIdleMillis);
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHead) {
      SendAll(fd, Plain("431 Request Header Fields Too Large", "request head over 8 KiB"), wake_.get());
      return;
    }
    // The whole head within the idle time, not only each read: a trickle does not hold the port.
    if (std::chrono::steady_clock::now() > deadline || !WaitReady(fd, POLLIN, wake_.get())) return;
    char buffer[2048];
    ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return;
    head.append(buffer, static_cast<size_t>(n));
  }
  const std::string line = head.substr(0, head.find("\r\n"));
  const size_t first = line.find(' ');
  const size_t second = first == std::string::npos ? first : line.find(' ', first + 1);
  if (second == std::string::npos || line.compare(second + 1, 7, "HTTP/1.") != 0) {
    SendAll(fd, Plain("400 Bad Request", "not an HTTP/1.x request line"), wake_.get());
    return;
  }
  const std::string method = line.substr(0, first);
  std::string path = line.substr(first + 1, second - first - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    SendAll(fd, Plain("405 Method Not Allowed", "only GET", "Allow: GET, HEAD\r\n"), wake_.get());
    return;
  }
  if (path != "/metrics" && path != "/") {
    SendAll(fd, Plain("404 Not Found", "the numbers are at /metrics"), wake_.get());
    return;
  }
  std::string response = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", registry_->Exposition());
  if (method == "HEAD") response = response.substr(0, response.find("\r\n\r\n") + 4);
  SendAll(fd, response, wake_.get());
}

}  // namespace capsule
