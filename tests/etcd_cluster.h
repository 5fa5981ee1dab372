// A real etcd cluster of three members for tests: /usr/bin/etcd (Debian's etcd-server) run
// three times on loopback ports chosen free, each member with its own data folder under the
// test's temporary folder, started by the test and stopped by it (and when destroyed).
#pragma once

#include <sys/types.h>

#include <array>
#include <string>

namespace capsule::testing {

class EtcdCluster {
 public:
  static constexpr int kMembers = 3;

  // Starts the three members with data under `dir` (made), and waits for a leader: ok() says
  // whether one was elected within 30 s.
  explicit EtcdCluster(const std::string& dir);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool ok() const { return ok_; }
  // etcd://127.0.0.1:C0,127.0.0.1:C1,127.0.0.1:C2: what --fleet takes.
  std::string url() const;
  // The client address of member `i` (127.0.0.1:PORT).
  std::string endpoint(int i) const;

  // Stops member `i` (SIGTERM, waited for); a stopped member stays stopped.
  void Stop(int i);
  // SIGKILL: a member that dies rather than stops.
  void Kill(int i);
  // Starts member `i` again on its data folder and ports.
  void Start(int i);
  // Whether a linearizable read through the members still up is answered (a quorum holds).
  bool HasQuorum() const;
  pid_t pid(int i) const { return pids_[i]; }

 private:
  void Launch(int i, bool fresh);

  std::string dir_;
  std::array<int, kMembers> client_ports_{}, peer_ports_{};
  std::array<pid_t, kMembers> pids_{-1, -1, -1};
  bool ok_ = false;
};

// A TCP port on 127.0.0.1 free now (bound to port 0, then let go).
int FreeLoopbackPort();

}  // namespace capsule::testing
