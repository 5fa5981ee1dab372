// Benchmark (not a test): what the sidecar transport costs on this machine, against plain
// TCP on the same loopback in the same run.
//   - throughput: MIB MiB one way through TlsConnection, and through a plain TCP socket;
//   - set-up: CONNECTIONS TlsConnect + Accept handshakes (both ends verify a certificate
//     chain), and as many plain TCP connects.
// Usage: tls_channel_bench PKI_DIR [MIB] [CONNECTIONS]   (PKI_DIR from tests/make_pki.sh)
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>

#include "capsule/base/file_io.h"
#include "move/net/tls_channel.h"

namespace capsule::move {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds (user + system) this process has used, all threads: steadier than wall time on
// a machine that other work shares.
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Wall and CPU seconds of `run`.
struct Timing {
  double wall, cpu;
};
Timing Time(const std::function<void()>& run) {
  const auto start = Clock::now();
  const double cpu = CpuSeconds();
  run();
  return {Seconds(start), CpuSeconds() - cpu};
}

[[noreturn]] void Die(const Status& status) {
  std::fprintf(stderr, "tls_channel_bench: %s\n", status.ToString().c_str());
  std::exit(1);
}

// Sends `total` bytes in 256 KiB writes through `write`, reads them through `read` on another
// thread, until the reader has the last byte.
void Transfer(uint64_t total, const std::function<Status(std::string_view)>& write,
              const std::function<Result<size_t>(char*, size_t)>& read) {
  const std::string chunk(256 * 1024, 'c');
  auto reader = std::async(std::launch::async, [&]() -> Status {
    std::string buffer(256 * 1024, '\0');
    uint64_t got = 0;
    while (got < total) {
      CAPSULE_ASSIGN_OR_RETURN(size_t n, read(buffer.data(), buffer.size()));
      if (n == 0) return Status::Unavailable("bench reader", "ended early");
      got += n;
    }
    return Status::Ok();
  });
  for (uint64_t sent = 0; sent < total; sent += chunk.size()) {
    const Status status = write(chunk);
    if (!status.ok()) Die(status);
  }
  const Status status = reader.get();
  if (!status.ok()) Die(status);
}

struct TcpPair {
  UniqueFd listener, client, server;
};

TcpPair PlainTcp() {
  TcpPair pair;
  pair.listener.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (bind(pair.listener.get(), reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(pair.listener.get(), 64) != 0 ||
      getsockname(pair.listener.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    Die(Status::IOError("plain TCP listener", errno));
  }
  pair.client.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (connect(pair.client.get(), reinterpret_cast<sockaddr*>(&address), length) != 0) {
    Die(Status::IOError("plain TCP connect", errno));
  }
  pair.server.Reset(accept(pair.listener.get(), nullptr, nullptr));
  return pair;
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tls_channel_bench PKI_DIR [MIB] [CONNECTIONS]\n");
    return 2;
  }
  const std::string pki = argv[1];
  const uint64_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1024;
  const int connections = argc > 3 ? std::atoi(argv[3]) : 200;
  const uint64_t total = mib << 20;
  const TlsCredentials server_credentials{pki + "/server.pem", pki + "/server.key",
                                          pki + "/ca.pem"};
  const TlsCredentials client_credentials{pki + "/client.pem", pki + "/client.key",
                                          pki + "/ca.pem"};

  auto listener = TlsListener::Listen("127.0.0.1:0", server_credentials);
  if (!listener.ok()) Die(listener.status());
  const std::string address = "127.0.0.1:" + std::to_string((*listener)->port());

  // Throughput.
  auto accepted = std::async(std::launch::async, [&] { return (*listener)->Accept(); });
  auto client = TlsConnect(address, client_credentials);
  if (!client.ok()) Die(client.status());
  auto server = accepted.get();
  if (!server.ok()) Die(server.status());
  const Timing tls = Time([&] {
    Transfer(
        total, [&](std::string_view d) { return (*client)->Write(d); },
        [&](char* b, size_t n) { return (*server)->Read(b, n); });
  });

  TcpPair tcp = PlainTcp();
  FdSink tcp_sink(tcp.client.get(), "plain TCP");
  FdSource tcp_source(tcp.server.get(), "plain TCP");
  const Timing plain = Time([&] {
    Transfer(
        total, [&](std::string_view d) { return tcp_sink.Write(d); },
        [&](char* b, size_t n) { return tcp_source.Read(b, n); });
  });

  std::printf("== %llu MiB one way over 127.0.0.1 (CPU: both ends, user + system)\n",
              static_cast<unsigned long long>(mib));
  std::printf("TLS 1.3    %7.2fs  %8.1f MB/s  CPU %6.2fs\n", tls.wall, total / 1e6 / tls.wall,
              tls.cpu);
  std::printf("plain TCP  %7.2fs  %8.1f MB/s  CPU %6.2fs\n", plain.wall, total / 1e6 / plain.wall,
              plain.cpu);
  std::printf("TLS speed = %.2fx plain TCP; TLS CPU per byte = %.2fx plain TCP\n",
              plain.wall / tls.wall, tls.cpu / plain.cpu);

  // Set-up cost.
  const Timing handshakes = Time([&] {
    for (int i = 0; i < connections; ++i) {
      auto a = std::async(std::launch::async, [&] { return (*listener)->Accept(); });
      auto c = TlsConnect(address, client_credentials);
      if (!c.ok()) Die(c.status());
      auto s = a.get();
      if (!s.ok()) Die(s.status());
    }
  });
  const Timing connects = Time([&] {
    for (int i = 0; i < connections; ++i) {
      // A listener, a connect and an accept: all of plain TCP's set-up, on a thread as above.
      std::async(std::launch::async, [&] { return PlainTcp().server.valid(); }).get();
    }
  });
  std::printf("== %d connections, one at a time\n", connections);
  std::printf("TLS 1.3 (both ends verify a chain)  %7.3f ms each  CPU %7.3f ms\n",
              handshakes.wall * 1e3 / connections, handshakes.cpu * 1e3 / connections);
  std::printf("plain TCP                           %7.3f ms each  CPU %7.3f ms\n",
              connects.wall * 1e3 / connections, connects.cpu * 1e3 / connections);
  std::printf("TLS set-up = %.1fx plain TCP (wall)\n", handshakes.wall / connects.wall);

  // How much of a TLS set-up is loading the credentials: TlsConnect reads and checks the
  // three files into a fresh context every time, as TlsListener::Listen does once.
  const Timing loads = Time([&] {
    for (int i = 0; i < connections; ++i) {
      auto l = TlsListener::Listen("127.0.0.1:0", server_credentials);
      if (!l.ok()) Die(l.status());
    }
  });
  std::printf("TlsListener::Listen (loads credentials, binds)  %7.3f ms each  CPU %7.3f ms\n",
              loads.wall * 1e3 / connections, loads.cpu * 1e3 / connections);
  return 0;
}

}  // namespace
}  // namespace capsule::move

int main(int argc, char** argv) { return capsule::move::Main(argc, argv); }
