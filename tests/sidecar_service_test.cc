// `capsule serve` as systemd runs it (capsule-sidecar.service, Type=notify): the real program
// on loopback, told of a notification socket the test owns (sd_notify(3)'s datagram protocol),
// and stopped by SIGTERM in the middle of a move.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::Sidecar;

constexpr auto kDeadline = std::chrono::seconds(60);

// A datagram socket, as systemd's notification socket is, in the abstract namespace (a test
// folder's path may be longer than a socket's name can be): NOTIFY_SOCKET=`name()`. Each
// message is read with the pid of the process that sent it (SO_PASSCRED).
class NotifySocket {
 public:
  NotifySocket() : name_("@capsule-notify-test-" + std::to_string(::getpid())) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    name_.copy(addr.sun_path + 1, name_.size() - 1, 1);  // sun_path[0] stays 0: abstract
    socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    int on = 1;
    bound_ = fd_.valid() && ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), length) == 0 &&
             ::setsockopt(fd_.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0;
  }
  bool bound() const { return bound_; }
  const std::string& name() const { return name_; }

  struct Message {
    std::string text;
    pid_t pid = 0;
  };
  // The next message, or nothing by the deadline.
  std::optional<Message> Next(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buffer[4096];
      char control[CMSG_SPACE(sizeof(ucred))];
      iovec iov{buffer, sizeof buffer};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      ssize_t n = ::recvmsg(fd_.get(), &msg, 0);
      if (n < 0) continue;
      Message got{std::string(buffer, static_cast<size_t>(n)), 0};
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
          ucred cred;
          std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
          got.pid = cred.pid;
        }
      }
      return got;
    }
  }

 private:
  std::string name_;
  UniqueFd fd_;
  bool bound_ = false;
};

bool HasLine(const std::string& text, const std::string& line) {
  return ("\n" + text + "\n").find("\n" + line + "\n") != std::string::npos;
}

// Polls `path` until it holds `needle` (or the deadline): its content then.
std::string WaitForText(const std::string& path, const std::string& needle) {
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  for (;;) {
    Result<std::string> text = ReadFile(path);
    if (text.ok() && text->find(needle) != std::string::npos) return *text;
    if (std::chrono::steady_clock::now() > deadline) return text.ok() ? *text : "";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string StateOf(const std::string& dir) {
  Result<HolderRecord> record = HolderRecord::Load(dir);
  if (!record.ok()) return PathExists(dir) ? "none" : "absent";
  return std::string(HolderStateName(record->state)) + "@" + std::to_string(record->epoch);
}

class SidecarServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("sidecar-service");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
  }
  void TearDown() override {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    if (!old_path_.empty()) ::setenv("PATH", old_path_.c_str(), 1);
  }
  std::string root_, pki_, seal_, old_path_;
};

TEST_F(SidecarServiceTest, TellsTheServiceManagerReadyWhenItListensPingsTheWatchdogAndSaysStopping) {
  NotifySocket notify;
  ASSERT_TRUE(notify.bound());
  ::setenv("NOTIFY_SOCKET", notify.name().c_str(), 1);
  ::setenv("WATCHDOG_USEC", "200000", 1);  // WatchdogSec=200ms: a ping every 100 ms
  ::unsetenv("WATCHDOG_PID");
  Sidecar sidecar(root_ + "/b", pki_, seal_, {}, root_ + "/sidecar.log");
  ASSERT_FALSE(sidecar.address().empty());
  auto deadline = std::chrono::steady_clock::now() + kDeadline;

  std::optional<NotifySocket::Message> ready = notify.Next(deadline);
  ASSERT_TRUE(ready.has_value()) << "no READY=1 from the sidecar";
  EXPECT_TRUE(HasLine(ready->text, "READY=1")) << ready->text;
  EXPECT_TRUE(HasLine(ready->text, "STATUS=listening on " + sidecar.address())) << ready->text;
  EXPECT_EQ(ready->pid, sidecar.pid()) << "systemd takes notifications from the main process only";
  int pings = 0;
  while (pings < 3) {
    std::optional<NotifySocket::Message> ping = notify.Next(deadline);
    ASSERT_TRUE(ping.has_value()) << "only " << pings << " watchdog pings";
    ASSERT_EQ(ping->text, "WATCHDOG=1");
    EXPECT_EQ(ping->pid, sidecar.pid());
    ++pings;
  }

  ASSERT_EQ(::kill(sidecar.pid(), SIGTERM), 0);
  std::optional<NotifySocket::Message> said;
  while ((said = notify.Next(deadline)) && said->text == "WATCHDOG=1") {
  }
  ASSERT_TRUE(said.has_value()) << "no STOPPING=1 after SIGTERM";
  EXPECT_TRUE(HasLine(said->text, "STOPPING=1")) << said->text;
  std::string log = WaitForText(root_ + "/sidecar.log", "serve: stopped");
  EXPECT_NE(log.find("serve: stopped 0 move(s) in rolled back; no call in progress"), std::string::npos) << log;
}

// SIGTERM while a copy is in progress (the target builds the agent's sandbox during the copy:
// a stand-in for mmdebstrap holds it there until the test lets it go): no new call begins, the
// copy finishes, and then the move, which did not activate, is rolled back before the sidecar
// exits: nothing staged is left, the source holds its agent as before.
TEST_F(SidecarServiceTest, SigtermLetsTheCallInProgressFinishAndRollsBackTheMove) {
  const std::string agent = "stop-" + std::to_string(::getpid());
  const std::string src = root_ + "/a/" + agent, dst = root_ + "/b/" + agent;
  ASSERT_EQ(RunCapsule({"init", src, "--id", agent, "--name", "Agent"}).exit_code, 0);
  {
    std::string mnt = MakeTempDir("specmnt");
    testing::Mount mount(src, mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(testing::Put(mnt + "/environment/spec.json",
                           R"({"env":{},"image":"debian:12","packages":["hello"],"secrets":[]})"),
              0);
    ASSERT_EQ(mount.Unmount(), 0);
  }
  const std::string bin = MakeTempDir("fakebin");
  const std::string script =
      "#!/bin/sh\n"
      "n=$#; i=0; for a; do i=$((i+1)); [ $i -eq $((n-1)) ] && target=$a; done\n"
      "touch " + bin + "/started\n"
      "i=0; while [ ! -e " + bin + "/release ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n"
      "mkdir -p \"$target/usr/bin\" && echo hello > \"$target/usr/bin/hello\"\n";
  ASSERT_TRUE(WriteFileAtomic(bin + "/mmdebstrap", script).ok());
  ASSERT_EQ(::chmod((bin + "/mmdebstrap").c_str(), 0755), 0);
  old_path_ = std::getenv("PATH");
  ::setenv("PATH", (bin + ":" + old_path_).c_str(), 1);

  const std::string log = root_ + "/sidecar.log";
  Sidecar sidecar(root_ + "/b", pki_, seal_, {"--sandbox-cache", MakeTempDir("cache")}, log);
  ASSERT_FALSE(sidecar.address().empty());
  testing::RunResult moved;
  std::thread mover([&] {
    moved = RunCapsule({"move", src, "--to", sidecar.address(), "--cert", pki_ + "/client.pem", "--key",
                        pki_ + "/client.key", "--ca", pki_ + "/ca.pem"});
  });
  // The copy is in progress: the target is building the sandbox.
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!PathExists(bin + "/started") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(PathExists(bin + "/started")) << WaitForText(log, "never");

  ASSERT_EQ(::kill(sidecar.pid(), SIGTERM), 0);
  std::string said = WaitForText(log, "serve: stopping");
  EXPECT_NE(said.find("serve: stopping 1 call(s) in progress; waiting for them to finish (60 s at most)"),
            std::string::npos)
      << said;
  EXPECT_TRUE(PathExists(root_ + "/b/.staging/" + agent)) << "the copy in progress was cut";
  ASSERT_TRUE(WriteFileAtomic(bin + "/release", "").ok());
  mover.join();
  sidecar.Stop();

  said = WaitForText(log, "serve: stopped");
  EXPECT_NE(said.find("serve: copied copy agent=" + agent), std::string::npos) << "the copy did not finish:\n" << said;
  EXPECT_NE(said.find("serve: aborted abort agent=" + agent), std::string::npos) << said;
  EXPECT_NE(said.find("serve: stopped 1 move(s) in rolled back; no call in progress"), std::string::npos) << said;
  // The source was told and rolled back; it holds its agent as before, the target nothing.
  EXPECT_EQ(moved.exit_code, 1) << moved.out << moved.err;
  EXPECT_EQ(StateOf(src), "active@1");
  EXPECT_EQ(StateOf(dst), "absent");
  Result<std::vector<TreeEntry>> staged = ListTree(root_ + "/b/.staging");
  ASSERT_TRUE(staged.ok());
  EXPECT_TRUE(staged->empty()) << staged->front().path;
  testing::RunResult status = RunCapsule({"sidecar", "status", "--root", root_ + "/b", "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(Json::parse(status.out)["moves"].empty()) << status.out;
  EXPECT_EQ(RunCapsule({"verify", src}).exit_code, 0);
}

// capsule-sidecar.service gives the sidecar no capability (CapabilityBoundingSet= empty,
// NoNewPrivileges): run as root so, through setpriv(1), it still receives a whole move, and
// SIGTERM ends it with exit 0.
TEST_F(SidecarServiceTest, ReceivesAMoveAsRootWithoutAnyCapability) {
  const std::string agent = "nocap-" + std::to_string(::getpid());
  const std::string src = root_ + "/a/" + agent, dst = root_ + "/b/" + agent;
  ASSERT_EQ(RunCapsule({"init", src, "--id", agent, "--name", "Agent"}).exit_code, 0);
  std::vector<std::string> args = {"setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs",
                                   "./capsule", "serve", "--root", root_ + "/b", "--listen", "127.0.0.1:0",
                                   "--cert", pki_ + "/server.pem", "--key", pki_ + "/server.key",
                                   "--ca", pki_ + "/ca.pem", "--seal-key", seal_};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const std::string log = root_ + "/sidecar.log";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err >= 0) ::dup2(err, 2);
    ::close(out[0]);
    ::execvp("setpriv", argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  UniqueFd read_end(out[0]);
  std::string line;
  char c;
  while (::read(read_end.get(), &c, 1) == 1 && c != '\n') line.push_back(c);
  ASSERT_EQ(line.rfind("listening on 127.0.0.1:", 0), 0u) << line << *ReadFile(log);
  const std::string address = line.substr(std::string("listening on ").size());

  Result<std::string> proc = ReadFile("/proc/" + std::to_string(pid) + "/status");
  ASSERT_TRUE(proc.ok());
  EXPECT_NE(proc->find("\nCapEff:\t0000000000000000\n"), std::string::npos) << *proc;
  EXPECT_NE(proc->find("\nCapBnd:\t0000000000000000\n"), std::string::npos) << *proc;
  EXPECT_NE(proc->find("\nUid:\t0\t"), std::string::npos) << *proc;

  testing::RunResult moved = RunCapsule({"move", src, "--to", address, "--cert", pki_ + "/client.pem", "--key",
                                         pki_ + "/client.key", "--ca", pki_ + "/ca.pem"});
  EXPECT_EQ(moved.exit_code, 0) << moved.out << moved.err << *ReadFile(log);
  EXPECT_EQ(StateOf(dst), "active@2");
  EXPECT_EQ(StateOf(src), "retired@1");

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(RunCapsule({"verify", dst}).exit_code, 0);
}

}  // namespace
}  // namespace capsule
