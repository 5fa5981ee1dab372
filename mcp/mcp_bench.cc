// Benchmark (not a test): tool calls per second through `capsule mcp` (a real process, JSON-RPC
// over pipes, one call answered before the next is sent, as a client waits for each) against
// the same operations through the C++ ports in this process, measured in the same run on two
// fresh capsules of the same disk. Appends are durable in both (fdatasync before the answer).
//
//   mcp_bench CAPSULE_BINARY [WORKDIR] [CALLS]
//
// Prints one line per operation: calls/s through the ports, through MCP, and their ratio; and
// the rate of pings, the floor the protocol and the pipes set.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "journal/owned/capsule_ports.h"
#include "journal/test_util.h"

namespace capsule::mcp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFacts = 20;

double Since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void Check(const Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "mcp_bench: %s: %s\n", what, status.message().c_str());
    std::exit(1);
  }
}

std::string Text(int i) { return "message " + std::to_string(i) + ": please look at the build and tell me what broke"; }

// `capsule mcp DIR` on two pipes.
class ServerProcess {
 public:
  ServerProcess(const std::string& binary, const std::string& dir) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) Check(Status::IOError("pipe", errno), "start");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::execl(binary.c_str(), binary.c_str(), "mcp", dir.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = UniqueFd(in[1]);
    from_ = UniqueFd(out[0]);
  }
  ~ServerProcess() {
    to_ = UniqueFd();  // end of input: the server returns
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }

  // Sends one request and returns its reply line; exits on a JSON-RPC error.
  std::string Call(const std::string& method, const Json& params) {
    Json request = {{"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", params}};
    Check(WriteAll(to_.get(), request.dump() + "\n", "server input"), "send");
    std::string line;
    for (;;) {
      size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        break;
      }
      char chunk[1 << 16];
      ssize_t n = ::read(from_.get(), chunk, sizeof chunk);
      if (n <= 0) Check(Status::IOError("server output", "closed"), method.c_str());
      buffer_.append(chunk, static_cast<size_t>(n));
    }
    if (line.find("\"error\":{") != std::string::npos || line.find("\"isError\":true") != std::string::npos) {
      std::fprintf(stderr, "mcp_bench: %s: %s\n", method.c_str(), line.c_str());
      std::exit(1);
    }
    return line;
  }
  std::string Tool(const std::string& name, const Json& arguments) {
    return Call("tools/call", {{"name", name}, {"arguments", arguments}});
  }

 private:
  pid_t pid_ = -1;
  UniqueFd to_, from_;
  std::string buffer_;
  int id_ = 0;
};

struct Rates {
  double append = 0, recall = 0, ping = 0;
};

Rates ThroughPorts(const std::string& dir, int calls) {
  Result<std::unique_ptr<owned::CapsulePorts>> opened = owned::CapsulePorts::Open(dir);
  Check(opened.status(), "open ports");
  owned::CapsulePorts& ports = **opened;
  Rates rates;
  std::string first;
  auto start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    owned::Message message;
    message.role = "user";
    message.content = Text(i);
    Result<owned::Message> appended = ports.Append(message);
    Check(appended.status(), "append");
    if (i == 0) first = appended->id;
  }
  rates.append = calls / Since(start);
  for (int k = 0; k < kFacts; ++k) {
    owned::Fact fact;
    fact.subject = "user";
    fact.key = "k" + std::to_string(k);
    fact.value = k;
    Check(ports.Remember(fact, {first}).status(), "remember");
  }
  start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    Result<std::vector<owned::StoredFact>> facts = ports.Recall("user", {});
    Check(facts.status(), "recall");
    if (facts->size() != kFacts) Check(Status::Corruption("recall", "wrong number of facts"), "recall");
  }
  rates.recall = calls / Since(start);
  return rates;
}

Rates ThroughMcp(const std::string& binary, const std::string& dir, int calls) {
  ServerProcess server(binary, dir);
  server.Call("initialize", {{"protocolVersion", "2025-11-25"},
                             {"capabilities", Json::object()},
                             {"clientInfo", {{"name", "mcp_bench"}, {"version", "1"}}}});
  Rates rates;
  std::string first;
  auto start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    std::string reply = server.Tool("history_append", {{"role", "user"}, {"content", Text(i)}});
    if (i == 0) {
      size_t at = reply.find("\"id\":\"");
      first = reply.substr(at + 6, 64);
    }
  }
  rates.append = calls / Since(start);
  for (int k = 0; k < kFacts; ++k) {
    server.Tool("memory_remember", {{"subject", "user"}, {"key", "k" + std::to_string(k)}, {"value", k}, {"source", first}});
  }
  start = Clock::now();
  for (int i = 0; i < calls; ++i) server.Tool("memory_recall", {{"subject", "user"}});
  rates.recall = calls / Since(start);
  start = Clock::now();
  for (int i = 0; i < calls; ++i) server.Call("ping", Json::object());
  rates.ping = calls / Since(start);
  return rates;
}

}  // namespace
}  // namespace capsule::mcp

int main(int argc, char** argv) {
  using namespace capsule;
  if (argc < 2) {
    std::fprintf(stderr, "usage: mcp_bench CAPSULE_BINARY [WORKDIR] [CALLS]\n");
    return 2;
  }
  const std::string binary = argv[1];
  const std::string work = argc > 2 ? argv[2] : journal::testing::MakeTempDir("mcp-bench");
  const int calls = argc > 3 ? std::atoi(argv[3]) : 2000;
  const std::string ports_dir = JoinPath(work, "ports"), mcp_dir = JoinPath(work, "mcp");
  mcp::Check(journal::testing::MakeTestCapsule(ports_dir, journal::testing::MachineName(1)), "capsule");
  mcp::Check(journal::testing::MakeTestCapsule(mcp_dir, journal::testing::MachineName(2)), "capsule");

  mcp::Rates ports = mcp::ThroughPorts(ports_dir, calls);
  mcp::Rates served = mcp::ThroughMcp(binary, mcp_dir, calls);
  std::printf("%d calls each, durable appends, one call at a time\n", calls);
  std::printf("%-32s %12s %12s %8s\n", "operation", "ports/s", "mcp/s", "mcp/ports");
  std::printf("%-32s %12.0f %12.0f %8.2f\n", "append (history_append)", ports.append, served.append,
              served.append / ports.append);
  std::printf("%-32s %12.0f %12.0f %8.2f\n", "recall 20 facts (memory_recall)", ports.recall, served.recall,
              served.recall / ports.recall);
  std::printf("%-32s %12s %12.0f %8s\n", "ping (the protocol alone)", "-", served.ping, "-");
  return 0;
}
