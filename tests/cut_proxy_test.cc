// The cut proxy relays faithfully until armed, then lets exactly N bytes through and cuts.
#include "tests/cut_proxy.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <future>
#include <string>

#include "capsule/base/file_io.h"
#include "gtest/gtest.h"

namespace capsule::testing {
namespace {

// A one-connection TCP server on 127.0.0.1 that reads until the end or an error and, when
// `echo`, sends every byte back.
class Sink {
 public:
  explicit Sink(bool echo) {
    fd_.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(listen(fd_.get(), 4), 0);
    socklen_t length = sizeof address;
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    done_ = std::async(std::launch::async, [this, echo] {
      Outcome outcome;
      UniqueFd connection(accept(fd_.get(), nullptr, nullptr));
      char buffer[65536];
      for (;;) {
        const ssize_t n = read(connection.get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          outcome.error = n < 0 ? errno : 0;
          break;
        }
        outcome.received.append(buffer, static_cast<size_t>(n));
        if (echo) {
          EXPECT_TRUE(WriteAll(connection.get(), {buffer, size_t(n)}, "echo").ok());
        }
      }
      return outcome;
    });
  }
  struct Outcome {
    std::string received;
    int error = 0;  // errno of the read that ended it, 0 for an orderly end
  };
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  Outcome Wait() { return done_.get(); }

 private:
  UniqueFd fd_;
  uint16_t port_ = 0;
  std::future<Outcome> done_;
};

UniqueFd ConnectTo(uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  return fd;
}

std::string Pattern(size_t size) {
  std::string data(size, '\0');
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7 + i / 251);
  return data;
}

// Writes until done or refused; the errno of the refusal, 0 if all went.
int WriteUntilRefused(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += static_cast<size_t>(n);
  }
  return 0;
}

TEST(CutProxyTest, RelaysBothWaysUntilArmed) {
  Sink echo(/*echo=*/true);
  auto proxy = CutProxy::Start(echo.address());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  UniqueFd client = ConnectTo((*proxy)->port());
  const std::string data = Pattern(300 * 1024);
  auto reader = std::async(std::launch::async, [&] {
    std::string back;
    char buffer[65536];
    ssize_t n;
    while ((n = read(client.get(), buffer, sizeof buffer)) > 0) back.append(buffer, size_t(n));
    return back;
  });
  ASSERT_EQ(WriteUntilRefused(client.get(), data), 0);
  shutdown(client.get(), SHUT_WR);  // the half-close reaches the sink, which then ends
  const Sink::Outcome outcome = echo.Wait();
  EXPECT_EQ(outcome.error, 0);
  EXPECT_TRUE(outcome.received == data);
  EXPECT_TRUE(reader.get() == data);
  EXPECT_EQ((*proxy)->bytes_client_to_server(), data.size());
  EXPECT_EQ((*proxy)->bytes_server_to_client(), data.size());
  EXPECT_EQ((*proxy)->connections(), 1);
  EXPECT_EQ((*proxy)->cuts(), 0);
}

TEST(CutProxyTest, ResetAfterExactlyNBytes) {
  Sink sink(/*echo=*/false);
  auto proxy = CutProxy::Start(sink.address());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  (*proxy)->CutAfter(100000);
  UniqueFd client = ConnectTo((*proxy)->port());
  // More than the kernel buffers on the way can hold, so the writer is still writing at the cut.
  const std::string data = Pattern(32 << 20);
  const int refused = WriteUntilRefused(client.get(), data);
  EXPECT_TRUE(refused == ECONNRESET || refused == EPIPE) << refused;
  const Sink::Outcome outcome = sink.Wait();
  EXPECT_EQ(outcome.error, ECONNRESET);
  // Bytes the proxy handed to the kernel before the reset may be dropped with it, never more.
  EXPECT_LE(outcome.received.size(), 100000u);
  EXPECT_TRUE(outcome.received == data.substr(0, outcome.received.size()));
  EXPECT_EQ((*proxy)->bytes_client_to_server(), 100000u);
  EXPECT_EQ((*proxy)->cuts(), 1);
}

TEST(CutProxyTest, CloseAfterExactlyNBytesDeliversThemAll) {
  Sink sink(/*echo=*/false);
  auto proxy = CutProxy::Start(sink.address());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  (*proxy)->CutAfter(12345, CutProxy::CutStyle::kClose);
  UniqueFd client = ConnectTo((*proxy)->port());
  const std::string data = Pattern(1 << 20);
  WriteUntilRefused(client.get(), data);  // may or may not be refused: the proxy closed
  const Sink::Outcome outcome = sink.Wait();
  EXPECT_EQ(outcome.error, 0);
  EXPECT_TRUE(outcome.received == data.substr(0, 12345)) << outcome.received.size();
  EXPECT_EQ((*proxy)->cuts(), 1);
}

TEST(CutProxyTest, ArmingCutsAnOpenConnection) {
  Sink sink(/*echo=*/false);
  auto proxy = CutProxy::Start(sink.address());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  UniqueFd client = ConnectTo((*proxy)->port());
  ASSERT_EQ(WriteUntilRefused(client.get(), "hello"), 0);
  while ((*proxy)->bytes_client_to_server() < 5) usleep(1000);
  (*proxy)->CutAfter(0);  // already past: cut now
  const Sink::Outcome outcome = sink.Wait();
  EXPECT_EQ(outcome.received, "hello");
  EXPECT_EQ(outcome.error, ECONNRESET);
  char byte;
  EXPECT_LT(read(client.get(), &byte, 1), 0);
  EXPECT_EQ(errno, ECONNRESET);
}

}  // namespace
}  // namespace capsule::testing
