// The sidecar's door and its promise that an activated agent runs, through the real binaries:
// two `capsule serve` sidecars on loopback, attackers that hold sockets open, send a TLS
// ClientHello a byte at a time, or authenticate and then declare 64 MiB messages they never
// send, while a real move goes through; and a target whose mount of the agent fails.
//
// The attackers bind addresses of their own (127.0.X.Y: all of 127/8 is this machine), so
// each is a peer of its own to the door, apart from the real move's 127.0.0.1.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/openssl_handles.h"
#include "capsule/format/holder.h"
#include "tests/cli_runner.h"
#include "tests/poll.h"
#include "tests/mount_runner.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using Clock = std::chrono::steady_clock;
using testing::MakeTempDir;
using testing::RunCapsule;
using testing::Sidecar;
using testing::WaitUntil;

std::string StateOf(const std::string& dir) {
  Result<HolderRecord> record = HolderRecord::Load(dir);
  if (!record.ok()) return PathExists(dir) ? "none" : "absent";
  return std::string(HolderStateName(record->state)) + "@" + std::to_string(record->epoch);
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The lines of `log` that contain `text`.
std::vector<std::string> LinesWith(const std::string& log, const std::string& text) {
  std::vector<std::string> found;
  Result<std::string> all = ReadFile(log);
  if (!all.ok()) return found;
  for (size_t start = 0, end; (end = all->find('\n', start)) != std::string::npos; start = end + 1) {
    std::string line = all->substr(start, end - start);
    if (line.find(text) != std::string::npos) found.push_back(line);
  }
  return found;
}

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// Enough descriptors for the attackers' sockets, held all at once by this process.
void RaiseFileLimit() {
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);
  ASSERT_GE(limit.rlim_cur, 1024u) << "this test holds about 600 sockets open";
}

// A TCP connection from `source` (an address of 127/8) to 127.0.0.1:`port`; blocking, with
// 5-second send and receive timeouts so that nothing here waits for ever.
UniqueFd ConnectFrom(const std::string& source, int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  timeval five{5, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &five, sizeof five);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &five, sizeof five);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    return UniqueFd();
  }
  return fd;
}

// Whether the sidecar still holds the connection `fd` open, having sent nothing on it: no
// byte, end or reset waiting.
bool HeldOpenInSilence(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 0;
}

// The bytes of a real TLS 1.3 ClientHello, as a client would send them first.
std::string ClientHello() {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  SslPtr ssl(SSL_new(ctx.get()));
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl.get(), in, out);  // ssl owns both
  SSL_connect(ssl.get());           // wants the server's answer; the hello is written
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  return std::string(data, static_cast<size_t>(size));
}

// A connection that completed the TLS handshake with a certificate the sidecar trusts.
struct TlsPeer {
  UniqueFd fd;
  SslPtr ssl;
  bool Send(const std::string& bytes) {
    return SSL_write(ssl.get(), bytes.data(), static_cast<int>(bytes.size())) == static_cast<int>(bytes.size());
  }
};

// Connects from `source` and asks one query, whose reply says the sidecar has let the
// connection in, authenticated: from then on it is a connection, no longer a handshake.
std::unique_ptr<TlsPeer> AuthenticatedFrom(SSL_CTX* ctx, const std::string& source, int port) {
  auto peer = std::make_unique<TlsPeer>();
  peer->fd = ConnectFrom(source, port);
  if (!peer->fd.valid()) return nullptr;
  peer->ssl.reset(SSL_new(ctx));
  SSL_set_fd(peer->ssl.get(), peer->fd.get());
  if (SSL_connect(peer->ssl.get()) != 1) return nullptr;
  const std::string query = R"({"agent":"door-probe","call":"query","move":"00000000000000000000000000000000"})";
  const char length[4] = {0, 0, 0, static_cast<char>(query.size())};
  if (!peer->Send(std::string(length, 4) + query)) return nullptr;
  std::string reply;
  char buffer[256];
  while (reply.size() < 4 + 2 || reply.find('}') == std::string::npos) {
    const int n = SSL_read(peer->ssl.get(), buffer, sizeof buffer);
    if (n <= 0) return nullptr;
    reply.append(buffer, static_cast<size_t>(n));
  }
  if (reply.find("\"ok\":true") == std::string::npos) return nullptr;
  return peer;
}

// A message header declaring the largest message the wire allows, 64 MiB.
const std::string kDeclares64MiB("\x04\x00\x00\x00", 4);

// The number in a field of /proc/PID/status ("Threads"), -1 when it cannot be read.
long ProcStatusNumber(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

int CountEntries(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> handle(::opendir(dir.c_str()), &::closedir);
  int n = 0;
  while (handle && ::readdir(handle.get()) != nullptr) ++n;
  return n - 2;  // . and ..
}

class SidecarDoorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);  // a peer the sidecar dropped is written to in vain
    root_ = MakeTempDir("sidecar-door");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
    a_ = root_ + "/a";
    b_ = root_ + "/b";
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws).ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/data.bin", std::string(2 << 20, 'd')).ok());
    for (const char* agent : {"agent-1", "agent-2"}) {
      auto init = RunCapsule({"init", a_ + "/" + agent, "--id", agent, "--name", "Agent", "--workspace", ws});
      ASSERT_EQ(init.exit_code, 0) << init.err;
    }
  }

  testing::RunResult Move(const std::string& source, const std::string& to) {
    return RunCapsule({"move", source, "--to", to, "--cert", pki_ + "/client.pem", "--key", pki_ + "/client.key",
                       "--ca", pki_ + "/ca.pem"});
  }

  std::string root_, pki_, seal_, a_, b_;
};

// With the default limits of the door (32 handshakes in progress in all, 4 per peer; 64
// connections, 16 per peer): 500 sockets that never say a word, 10 clients sending a
// ClientHello a byte every quarter second, 10 authenticated peers that declare a 64 MiB
// message and trickle it a byte at a time, and 20 more that declare one and send 1 KiB.
// A real move still goes through, in at most twice the time the same move took on the quiet
// sidecar (give or take two seconds), while every slow ClientHello is still in its handshake:
// the move's handshake did not wait behind theirs. The sidecar holds a bounded number of
// descriptors and threads however many sockets are opened, the declared 64 MiB are never
// reserved, and each connection it turned away has a log line saying why.
TEST_F(SidecarDoorTest, AMoveGoesThroughPast500IdleSocketsAndSlowlorisClientsInBoundedMemory) {
  RaiseFileLimit();
  const std::string log_a = root_ + "/a.log", log_b = root_ + "/b.log";
  Sidecar sidecar_a(a_, pki_, seal_, {"--handshake-timeout", "2"}, log_a);
  Sidecar sidecar_b(b_, pki_, seal_, {}, log_b);
  const int port = PortOf(sidecar_b.address());

  Clock::time_point start = Clock::now();
  auto quiet = Move(a_ + "/agent-1", sidecar_b.address());
  const double quiet_seconds = SecondsSince(start);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  const double rss_quiet = testing::ProcStatusMiB(sidecar_b.pid(), "VmRSS");

  // 500 silent sockets, two from each of 250 addresses: the door keeps 32 handshakes in
  // progress and gives the place of the oldest away to each newcomer.
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 500; ++i) {
    idle.push_back(ConnectFrom("127.0.1." + std::to_string(1 + i / 2), port));
    ASSERT_TRUE(idle.back().valid()) << "socket " << i << ": " << std::strerror(errno);
  }
  ASSERT_TRUE(WaitUntil([&] { return LinesWith(log_b, " serve: dropped handshake ").size() >= 468; }, 20))
      << LinesWith(log_b, " serve: dropped handshake ").size() << " handshakes dropped";
  const std::vector<std::string> dropped = LinesWith(log_b, " serve: dropped handshake peer=127.0.1.");
  ASSERT_FALSE(dropped.empty());
  EXPECT_NE(dropped.front().find(" why=\"its place went to a newer connection: 32 handshakes are in progress in "
                                 "all (--max-handshakes 32)\""),
            std::string::npos)
      << dropped.front();

  // Authenticated peers that declare 64 MiB: 10 trickling, 20 silent after 1 KiB.
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  ASSERT_EQ(SSL_CTX_use_certificate_chain_file(ctx.get(), (pki_ + "/client.pem").c_str()), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey_file(ctx.get(), (pki_ + "/client.key").c_str(), SSL_FILETYPE_PEM), 1);
  ASSERT_EQ(SSL_CTX_load_verify_locations(ctx.get(), (pki_ + "/ca.pem").c_str(), nullptr), 1);
  std::vector<std::unique_ptr<TlsPeer>> trickling, declaring;
  for (int i = 0; i < 10; ++i) {
    trickling.push_back(AuthenticatedFrom(ctx.get(), "127.0.3." + std::to_string(1 + i), port));
    ASSERT_NE(trickling.back(), nullptr) << "trickling peer " << i;
    ASSERT_TRUE(trickling.back()->Send(kDeclares64MiB));
  }
  for (int i = 0; i < 20; ++i) {
    declaring.push_back(AuthenticatedFrom(ctx.get(), "127.0.4." + std::to_string(1 + i / 4), port));
    ASSERT_NE(declaring.back(), nullptr) << "declaring peer " << i;
    ASSERT_TRUE(declaring.back()->Send(kDeclares64MiB + std::string(1024, '{')));
  }
  // 10 ClientHellos, a byte at a time.
  const std::string hello = ClientHello();
  ASSERT_GT(hello.size(), 100u);
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 10; ++i) {
    slow.push_back(ConnectFrom("127.0.2." + std::to_string(1 + i), port));
    ASSERT_TRUE(slow.back().valid());
  }
  std::atomic<bool> stop{false};
  std::thread slowloris([&] {
    for (size_t at = 0; !stop && at < hello.size(); ++at) {
      for (const UniqueFd& fd : slow) (void)::send(fd.get(), hello.data() + at, 1, MSG_NOSIGNAL);
      for (const auto& peer : trickling) (void)peer->Send("{");
      for (int wait = 0; !stop && wait < 5; ++wait) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  start = Clock::now();
  auto attacked = Move(a_ + "/agent-2", sidecar_b.address());
  const double attacked_seconds = SecondsSince(start);
  // Checked before anything else can age them: each slow ClientHello is still in its
  // handshake, held open by the sidecar, which has said nothing on it.
  int still_handshaking = 0;
  for (const UniqueFd& fd : slow) still_handshaking += HeldOpenInSilence(fd.get()) ? 1 : 0;
  stop = true;
  slowloris.join();
  ASSERT_EQ(attacked.exit_code, 0) << attacked.err;
  EXPECT_EQ(StateOf(b_ + "/agent-2"), "active@2");
  EXPECT_EQ(StateOf(a_ + "/agent-2"), "retired@1");
  EXPECT_EQ(still_handshaking, 10) << "the move's handshake went past the slow ones, not after them";
  EXPECT_LE(attacked_seconds, 2 * quiet_seconds + 2.0)
      << "quiet " << quiet_seconds << " s, under attack " << attacked_seconds << " s";
  std::cerr << "move: quiet " << quiet_seconds << " s, under attack " << attacked_seconds << " s\n";

  // Bounded, however many sockets this process holds (about 560): a descriptor and an
  // eventfd per connection the door lets in, a thread per connection, and no declared 64 MiB.
  const int fds = CountEntries("/proc/" + std::to_string(sidecar_b.pid()) + "/fd");
  EXPECT_LE(fds, 2 * 64 + 16) << "descriptors of the sidecar";
  const long threads = ProcStatusNumber(sidecar_b.pid(), "Threads");
  EXPECT_LE(threads, 64 + 16) << "threads of the sidecar";
  const double rss_attacked = testing::ProcStatusMiB(sidecar_b.pid(), "VmRSS");
  // Reserved, the declared messages would be 30 x 64 MiB = 1.9 GiB; the bound leaves room for
  // the sanitizers' own keeping (about 90 MiB more under ASan, 6 MiB without).
  EXPECT_LT(rss_attacked - rss_quiet, 256) << "MiB more than after the quiet move (" << rss_quiet
                                           << " MiB), with 30 connections declaring 64 MiB each";
  std::cerr << "sidecar: " << fds << " descriptors, " << threads << " threads, VmRSS " << rss_quiet << " -> "
            << rss_attacked << " MiB\n";

  // Past 64 connections, the 65th authenticated one is refused, and says so.
  std::vector<std::unique_ptr<TlsPeer>> more;
  for (int i = 0; i < 40 && LinesWith(log_b, " serve: refused connection ").empty(); ++i) {
    auto peer = AuthenticatedFrom(ctx.get(), "127.0.5." + std::to_string(1 + i / 8), port);
    if (peer != nullptr) {
      peer->Send(kDeclares64MiB);
      more.push_back(std::move(peer));
    }
  }
  const std::vector<std::string> refused = LinesWith(log_b, " serve: refused connection peer=127.0.5.");
  ASSERT_FALSE(refused.empty()) << "no connection refused past --max-connections; " << more.size()
                                << " more authenticated; the log:\n"
                                << ReadFile(log_b).value();
  EXPECT_NE(refused.front().find("why=\"64 connections are open in all (--max-connections 64), every one "
                                 "authenticated\""),
            std::string::npos)
      << refused.front();

  // The other sidecar gives a silent socket up after its --handshake-timeout of 2 s.
  UniqueFd silent = ConnectFrom("127.0.6.1", PortOf(sidecar_a.address()));
  ASSERT_TRUE(silent.valid());
  ASSERT_TRUE(WaitUntil([&] { return !LinesWith(log_a, " serve: dropped handshake peer=127.0.6.1:").empty(); }, 10));
  EXPECT_NE(LinesWith(log_a, " serve: dropped handshake peer=127.0.6.1:")
                .front()
                .find("why=\"TLS handshake with 127.0.6.1:"),
            std::string::npos);
  EXPECT_NE(LinesWith(log_a, " serve: dropped handshake peer=127.0.6.1:").front().find(": not complete after 2 s\""),
            std::string::npos);
}

// What a peer sends reaches the log escaped: a move id with a terminal escape and a line
// break is quoted on one line, and forges no line of its own.
TEST_F(SidecarDoorTest, PeerTextInTheLogIsEscaped) {
  const std::string log = root_ + "/b.log";
  Sidecar sidecar_b(b_, pki_, seal_, {}, log);
  const std::string message =
      R"({"agent":"agent-1","call":"activate","epoch":2,"move":"\u001b[2J\n2026-01-01T00:00:00Z serve: activated"})";
  auto peer = testing::RunProgram("python3", {"tests/hostile_peer.py", sidecar_b.address(), pki_ + "/client.pem",
                                              pki_ + "/client.key", pki_ + "/ca.pem", message});
  ASSERT_EQ(peer.exit_code, 0) << peer.err;
  EXPECT_NE(peer.out.find("\"ok\":false"), std::string::npos) << peer.out;
  ASSERT_TRUE(WaitUntil([&] { return !LinesWith(log, " serve: refused activate ").empty(); }, 10));
  Result<std::string> text = ReadFile(log);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->find('\x1b'), std::string::npos) << "no raw escape reaches the log";
  EXPECT_TRUE(LinesWith(log, "serve: activated").size() == 1 &&
              LinesWith(log, "serve: activated").front().find(" serve: refused activate ") != std::string::npos)
      << *text;
  EXPECT_NE(text->find(R"(move="\u001b[2J\n2026-01-01T00:00:00Z serve: activated")"), std::string::npos) << *text;
}

// Activate means running: a target that mounts what it takes over (--mount-to) and cannot
// mount this agent (where its mount belongs, a file) refuses the activate, undoing it, so the
// source thaws and runs the agent on, its mount writable; the target holds nothing new. Once
// the fault is cleared the same move goes through and the agent is mounted there. The same
// on the way back, where the target's retired copy is put back in its place.
TEST_F(SidecarDoorTest, ATargetThatCannotMountTheAgentRefusesActivateAndTheSourceKeepsIt) {
  const std::string mnt = root_ + "/mnt", mounts_a = root_ + "/mounted-a", mounts_b = root_ + "/mounted-b";
  const std::string log_b = root_ + "/b.log";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  ASSERT_TRUE(MakeDirectories(mounts_a).ok());
  ASSERT_TRUE(MakeDirectories(mounts_b).ok());
  ASSERT_TRUE(WriteFileAtomic(mounts_b + "/agent-1", "a file where the mount belongs\n").ok());
  Sidecar sidecar_b(b_, pki_, seal_, {"--mount-to", mounts_b}, log_b);
  {
    testing::Mount source(a_ + "/agent-1", mnt);
    ASSERT_TRUE(source.up());
    auto refused = Move(mnt, sidecar_b.address());
    EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
    EXPECT_NE(refused.err.find("the target did not take over ("), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("the agent could not be started here (cannot mount " + b_ + "/agent-1 at " + mounts_b +
                               "/agent-1"),
              std::string::npos)
        << refused.err;
    EXPECT_NE(refused.err.find("so the agent was thawed here"), std::string::npos) << refused.err;
    EXPECT_EQ(StateOf(a_ + "/agent-1"), "active@1");
    EXPECT_EQ(testing::Put(mnt + "/files/after-refusal.txt", "still here\n"), 0) << "the source's mount takes writes";
    EXPECT_EQ(StateOf(b_ + "/agent-1"), "absent") << "the target holds nothing of the agent";
    EXPECT_FALSE(PathExists(b_ + "/.staging/agent-1"));
    EXPECT_FALSE(testing::IsMounted(mounts_b + "/agent-1"));
    const std::vector<std::string> logged = LinesWith(log_b, " serve: refused activate agent=agent-1 ");
    ASSERT_EQ(logged.size(), 1u);
    EXPECT_NE(logged[0].find("so this machine does not take it over and the source keeps it"), std::string::npos)
        << logged[0];

    // The fault cleared, the same agent moves.
    ASSERT_EQ(::unlink((mounts_b + "/agent-1").c_str()), 0);
    auto moved = Move(mnt, sidecar_b.address());
    ASSERT_EQ(moved.exit_code, 0) << moved.err;
    EXPECT_EQ(StateOf(b_ + "/agent-1"), "active@2");
    EXPECT_EQ(StateOf(a_ + "/agent-1"), "retired@1");
    ASSERT_TRUE(testing::IsMounted(mounts_b + "/agent-1"));
    EXPECT_EQ(*ReadFile(mounts_b + "/agent-1/files/after-refusal.txt"), "still here\n");
    EXPECT_EQ(testing::Put(mnt + "/files/late.txt", "no\n"), EROFS);
  }

  // Back to a sidecar that cannot mount it either: its retired copy goes back in its place.
  ASSERT_TRUE(WriteFileAtomic(mounts_a + "/agent-1", "a file where the mount belongs\n").ok());
  {
    Sidecar sidecar_a(a_, pki_, seal_, {"--mount-to", mounts_a});
    auto refused = Move(mounts_b + "/agent-1", sidecar_a.address());
    EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
    EXPECT_NE(refused.err.find("the agent could not be started here"), std::string::npos) << refused.err;
    EXPECT_EQ(StateOf(a_ + "/agent-1"), "retired@1") << "the copy the activation replaced is back";
    EXPECT_EQ(StateOf(b_ + "/agent-1"), "active@2");
    EXPECT_EQ(testing::Put(mounts_b + "/agent-1/files/on-b.txt", "b\n"), 0);
    ASSERT_EQ(::unlink((mounts_a + "/agent-1").c_str()), 0);
    auto back = Move(mounts_b + "/agent-1", sidecar_a.address());
    ASSERT_EQ(back.exit_code, 0) << back.err;
    EXPECT_EQ(StateOf(a_ + "/agent-1"), "active@3");
    ASSERT_TRUE(testing::IsMounted(mounts_a + "/agent-1"));
    EXPECT_EQ(*ReadFile(mounts_a + "/agent-1/files/on-b.txt"), "b\n");
  }
  testing::UnmountPath(mounts_a + "/agent-1");
  testing::UnmountPath(mounts_b + "/agent-1");
}

}  // namespace
}  // namespace capsule
