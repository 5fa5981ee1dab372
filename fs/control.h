// The control channel: a Unix stream socket at DIR/.capsule/control.sock, mode 0600, that
// only root or the user who mounted may use (checked with SO_PEERCRED on each connection, so
// that a socket whose mode someone widened still refuses everyone else). It is bound in the
// folder the mount holds open, with its mode set before it has a name (see Start).
// The mount shows its path in MNT/.capsulefs-control, so clients find it from the mountpoint.
//
// Protocol: the client sends one command line ("status", "freeze", "thaw", "retire" or
// "preverify"; a move out sends "freeze MOVE" and "thaw MOVE", see capsule/format/holder.h)
// of at most kMaxCommand bytes, within kClientDeadline, and reads one canonical JSON line back: {"agent","epoch","ok":true,"state"}
// (freeze and preverify add "blobs_read", the blobs they read rather than remembered) or
// {"error":"...","ok":false}. One connection, one command.
//
// The serving thread also watches the holder record every half second (CapsuleFs::CheckHolder).
//
// Thread-safety: one thread serves the socket, one connection at a time, except a preverify
// (hashing every blob ahead of a freeze), which runs on a worker thread of its own so that
// status, freeze and the holder watch go on; a second preverify meanwhile is refused.
// Stop removes the socket first, cancels a preverify, then joins both threads.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule::fs {

class CapsuleFs;

class ControlServer {
 public:
  ControlServer() = default;
  ~ControlServer() { Stop(); }
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  static constexpr size_t kMaxCommand = 256;
  static constexpr std::chrono::seconds kClientDeadline{2};

  Status Start(CapsuleFs* fs, const std::string& socket_path, uid_t owner);
  void Stop();

 private:
  void Serve();
  std::string Handle(const std::string& command);

  CapsuleFs* fs_ = nullptr;
  std::string path_;
  uid_t owner_ = 0;
  DirFd folder_;      // the socket's folder, held from Start to Stop
  std::string name_;  // the socket's name in folder_
  UniqueFd listen_fd_;
  UniqueFd stop_read_, stop_write_;
  std::thread thread_;
  std::thread worker_;  // a preverify in progress
  std::atomic<bool> worker_busy_{false};
};

}  // namespace capsule::fs
