#include "tests/etcd_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "move/fleet/etcd_client.h"
#include "tests/poll.h"

namespace capsule::testing {

int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

EtcdCluster::EtcdCluster(const std::string& dir) : dir_(dir) {
  ::mkdir(dir_.c_str(), 0700);
  for (int i = 0; i < kMembers; ++i) {
    client_ports_[i] = FreeLoopbackPort();
    peer_ports_[i] = FreeLoopbackPort();
  }
  for (int i = 0; i < kMembers; ++i) Launch(i, true);
  ok_ = WaitUntil([this] { return HasQuorum(); }, 30);
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < kMembers; ++i) Stop(i);
}

std::string EtcdCluster::endpoint(int i) const { return "127.0.0.1:" + std::to_string(client_ports_[i]); }

std::string EtcdCluster::url() const {
  std::string url = "etcd://";
  for (int i = 0; i < kMembers; ++i) url += (i ? "," : "") + endpoint(i);
  return url;
}

void EtcdCluster::Launch(int i, bool fresh) {
  const std::string name = "m" + std::to_string(i);
  std::string cluster;
  for (int j = 0; j < kMembers; ++j) {
    cluster += (j ? "," : "") + std::string("m") + std::to_string(j) + "=http://127.0.0.1:" + std::to_string(peer_ports_[j]);
  }
  const std::string client = "http://" + endpoint(i);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_ports_[i]);
  std::vector<std::string> args = {"etcd",
                                   "--name", name,
                                   "--data-dir", dir_ + "/" + name,
                                   "--listen-client-urls", client,
                                   "--advertise-client-urls", client,
                                   "--listen-peer-urls", peer,
                                   "--initial-advertise-peer-urls", peer,
                                   "--initial-cluster", cluster,
                                   "--initial-cluster-token", "capsulefs-test",
                                   "--initial-cluster-state", fresh ? "new" : "existing",
                                   // Quick elections: a lost leader is replaced in about a second.
                                   "--heartbeat-interval", "50",
                                   "--election-timeout", "500",
                                   "--logger", "zap",
                                   "--log-outputs", dir_ + "/" + name + ".log"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::setpgid(0, 0);
    ::execvp("etcd", argv.data());
    ::_exit(127);
  }
  pids_[i] = pid;
}

void EtcdCluster::Stop(int i) {
  if (pids_[i] <= 0) return;
  ::kill(pids_[i], SIGTERM);
  ::waitpid(pids_[i], nullptr, 0);
  pids_[i] = -1;
}

void EtcdCluster::Kill(int i) {
  if (pids_[i] <= 0) return;
  ::kill(pids_[i], SIGKILL);
  ::waitpid(pids_[i], nullptr, 0);
  pids_[i] = -1;
}

void EtcdCluster::Start(int i) {
  if (pids_[i] > 0) return;
  Launch(i, false);
}

bool EtcdCluster::HasQuorum() const {
  Result<fleet::FleetOptions> options = fleet::ParseFleetUrl(url());
  if (!options.ok()) return false;
  options->timeout_ms = 1000;
  fleet::EtcdClient etcd(*options);
  return etcd.Get("/capsulefs-test/health").ok();
}

}  // namespace capsule::testing
