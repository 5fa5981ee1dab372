#include "tests/cut_proxy.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace capsule::testing {
namespace {

constexpr size_t kBufferSize = 64 * 1024;

void Signal(int event_fd) {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(event_fd, &one, sizeof one);
}

void Drain(int event_fd) {
  uint64_t value;
  [[maybe_unused]] const ssize_t n = read(event_fd, &value, sizeof value);
}

// Closes `fd` so that its peer sees a reset rather than an orderly end.
void Reset(UniqueFd& fd) {
  const linger abort_on_close{1, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
  fd.Reset();
}

Result<UniqueFd> ConnectTo(const std::string& target) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("proxy target " + target, "expected HOST:PORT");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int rc =
      getaddrinfo(target.substr(0, colon).c_str(), target.substr(colon + 1).c_str(), &hints, &list);
  if (rc != 0) return Status::Unavailable("proxy target " + target, gai_strerror(rc));
  Status last = Status::Unavailable("proxy target " + target, "no address");
  UniqueFd fd;
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    UniqueFd candidate(socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!candidate.valid()) continue;
    if (connect(candidate.get(), a->ai_addr, a->ai_addrlen) == 0) {
      fd = std::move(candidate);
      break;
    }
    last = Status::Unavailable("proxy target " + target, std::strerror(errno));
  }
  freeaddrinfo(list);
  if (!fd.valid()) return last;
  return fd;
}

// One direction of a relayed connection: bytes read from `from` waiting to go to `to`.
struct Pipe {
  std::string buffer;
  size_t sent = 0;         // of buffer
  bool eof = false;        // `from` ended; shutdown(to, SHUT_WR) once the buffer is empty
  bool shut = false;       // that shutdown was done
  uint64_t delivered = 0;  // bytes written to `to`
  bool pending() const { return sent < buffer.size(); }
};

}  // namespace

CutProxy::CutProxy(UniqueFd listen_fd, UniqueFd stop_fd, uint16_t port, std::string target)
    : listen_fd_(std::move(listen_fd)),
      stop_fd_(std::move(stop_fd)),
      port_(port),
      target_(std::move(target)) {}

Result<std::unique_ptr<CutProxy>> CutProxy::Start(const std::string& target) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::IOError("proxy socket", errno);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    return Status::IOError("proxy bind", errno);
  }
  if (listen(fd.get(), 16) != 0) return Status::IOError("proxy listen", errno);
  socklen_t length = sizeof address;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return Status::IOError("proxy getsockname", errno);
  }
  UniqueFd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop.valid()) return Status::IOError("proxy eventfd", errno);
  std::unique_ptr<CutProxy> proxy(
      new CutProxy(std::move(fd), std::move(stop), ntohs(address.sin_port), target));
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->AcceptLoop(); });
  return proxy;
}

CutProxy::~CutProxy() {
  Signal(stop_fd_.get());  // never drained: every thread sees it
  if (acceptor_.joinable()) acceptor_.join();
  // The acceptor has stopped, so relays_ no longer grows.
  for (std::thread& relay : relays_) relay.join();
}

void CutProxy::CutAfter(uint64_t bytes, CutStyle style) {
  cut_style_.store(static_cast<int>(style));
  cut_after_.store(bytes);
  WakeAll();
}

void CutProxy::WakeAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : wake_fds_) Signal(fd);
}

void CutProxy::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents & POLLIN) return;
    UniqueFd client(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client.valid()) continue;
    connections_.fetch_add(1);
    UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake.valid()) continue;  // drops the connection: the client sees it close
    std::lock_guard<std::mutex> lock(mutex_);
    wake_fds_.push_back(wake.get());
    relays_.emplace_back([this, c = std::move(client), w = std::move(wake)]() mutable {
      Relay(std::move(c), std::move(w));
    });
  }
}

void CutProxy::Relay(UniqueFd client, UniqueFd wake) {
  Result<UniqueFd> connected = ConnectTo(target_);
  UniqueFd server;
  if (connected.ok()) server = std::move(*connected);

  Pipe up;    // client -> server
  Pipe down;  // server -> client
  bool cut = false;
  while (server.valid() && client.valid()) {
    if (up.delivered >= cut_after_.load()) {
      cut = true;
      break;
    }
    short client_events = 0;
    short server_events = 0;
    if (!up.eof && !up.pending()) client_events |= POLLIN;
    if (down.pending()) client_events |= POLLOUT;
    if (!down.eof && !down.pending()) server_events |= POLLIN;
    if (up.pending()) server_events |= POLLOUT;
    if (up.eof && !up.pending() && down.eof && !down.pending()) break;  // both ends done

    // A socket with nothing asked of it is left out (fd -1): poll(2) reports a hang-up even
    // when not asked, and would spin while the other side cannot take bytes.
    pollfd fds[4] = {{client_events != 0 ? client.get() : -1, client_events, 0},
                     {server_events != 0 ? server.get() : -1, server_events, 0},
                     {wake.get(), POLLIN, 0},
                     {stop_fd_.get(), POLLIN, 0}};
    if (poll(fds, 4, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[3].revents & POLLIN) break;
    if (fds[2].revents & POLLIN) Drain(wake.get());
    // Never read or pass on more than the limit allows (read again: CutAfter may have moved it
    // during the poll), so that exactly `limit` bytes get through.
    const uint64_t now_limit = cut_after_.load();
    if (up.delivered >= now_limit) continue;  // cut at the top of the loop
    const uint64_t allowed = now_limit - up.delivered;

    bool failed = false;
    // Reads.
    auto read_into = [&](int fd, Pipe& pipe, size_t max) {
      pipe.buffer.resize(max);
      const ssize_t n = recv(fd, pipe.buffer.data(), max, MSG_DONTWAIT);
      if (n > 0) {
        pipe.buffer.resize(static_cast<size_t>(n));
        pipe.sent = 0;
      } else {
        pipe.buffer.clear();
        pipe.sent = 0;
        if (n == 0) pipe.eof = true;
        if (n < 0 && errno != EAGAIN && errno != EINTR) failed = true;
      }
    };
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && (client_events & POLLIN)) {
      read_into(client.get(), up, static_cast<size_t>(std::min<uint64_t>(kBufferSize, allowed)));
    }
    if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) && (server_events & POLLIN)) {
      read_into(server.get(), down, kBufferSize);
    }
    // Writes.
    auto write_from = [&](int fd, Pipe& pipe, uint64_t max, std::atomic<uint64_t>& counter) {
      const size_t size =
          static_cast<size_t>(std::min<uint64_t>(pipe.buffer.size() - pipe.sent, max));
      const ssize_t n = send(fd, pipe.buffer.data() + pipe.sent, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        pipe.sent += static_cast<size_t>(n);
        pipe.delivered += static_cast<uint64_t>(n);
        counter.fetch_add(static_cast<uint64_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        failed = true;
      }
    };
    if (up.pending() && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      // The limit may have dropped since these bytes were read: never pass it.
      write_from(server.get(), up, allowed, client_to_server_);
    }
    if (down.pending() && (fds[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
      write_from(client.get(), down, UINT64_MAX, server_to_client_);
    }
    if (failed) {
      // One side reset or vanished: pass the failure on to the other as a reset.
      Reset(client);
      Reset(server);
      break;
    }
    // Pass an orderly end on once everything before it went through.
    if (up.eof && !up.pending() && !up.shut) {
      shutdown(server.get(), SHUT_WR);
      up.shut = true;
    }
    if (down.eof && !down.pending() && !down.shut) {
      shutdown(client.get(), SHUT_WR);
      down.shut = true;
    }
  }
  if (cut) {
    cuts_.fetch_add(1);
    if (static_cast<CutStyle>(cut_style_.load()) == CutStyle::kReset) {
      Reset(client);
      Reset(server);
    } else {
      shutdown(client.get(), SHUT_RDWR);
      shutdown(server.get(), SHUT_RDWR);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  wake_fds_.erase(std::remove(wake_fds_.begin(), wake_fds_.end(), wake.get()), wake_fds_.end());
  // client, server and wake close here.
}

}  // namespace capsule::testing
