#include "fs/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "capsule/base/canonical_json.h"
#include "capsule/base/memory.h"
#include "fs/capsule_fs.h"
#include "capsule/format/local_files.h"
#include "fs/control_client.h"

namespace capsule::fs {

namespace {

// One command line of at most kMaxCommand bytes, read before the socket's deadline. False
// when the client stalls past it, hangs up first, or sends a longer line.
bool ReadCommand(int fd, std::string* command) {
  char buffer[ControlServer::kMaxCommand + 1];
  size_t have = 0;
  while (have < sizeof buffer) {
    ssize_t n = ::read(fd, buffer + have, sizeof buffer - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    const char* end = static_cast<const char*>(std::memchr(buffer + have, '\n', static_cast<size_t>(n)));
    have += static_cast<size_t>(n);
    if (end != nullptr) {
      command->assign(buffer, static_cast<size_t>(end - buffer));
      return true;
    }
  }
  return false;
}

}  // namespace

Status ControlServer::Start(CapsuleFs* fs, const std::string& socket_path, uid_t owner) {
  fs_ = fs;
  path_ = socket_path;
  owner_ = owner;
  // The socket's folder (.capsule), held open and reached without a link. The socket is bound
  // by the name /proc/self/fd/N/control.sock: the kernel takes N to be the folder held, not a
  // path walked again, so a folder swapped for a link since cannot redirect it; bind(2) never
  // follows a link at the last name either (EADDRINUSE).
  CAPSULE_ASSIGN_OR_RETURN(folder_, fs->folder().OpenDir(DirName(local::kControlSocket)));
  name_ = BaseName(local::kControlSocket);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string bound_name = "/proc/self/fd/" + std::to_string(folder_.get()) + "/" + name_;
  if (bound_name.size() >= sizeof addr.sun_path) return Status::InvalidArgument(socket_path, "socket name too long");
  std::memcpy(addr.sun_path, bound_name.c_str(), bound_name.size() + 1);
  listen_fd_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listen_fd_.valid()) return Status::IOError(socket_path, errno);
  // Born 0600 (less, should the umask take more): bind(2) gives the new file the socket's own
  // mode less the umask, and the mode is set on the socket before it has a name, so there is
  // no moment when it is wider, and the process's umask is left alone.
  if (::fchmod(listen_fd_.get(), 0600) != 0) return Status::IOError(socket_path, errno);
  if (::unlinkat(folder_.get(), name_.c_str(), 0) != 0 && errno != ENOENT) return Status::IOError(socket_path, errno);
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::IOError(socket_path, errno);
  }
  if (::listen(listen_fd_.get(), 8) != 0) return Status::IOError(socket_path, errno);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::IOError("pipe", errno);
  stop_read_.Reset(fds[0]);
  stop_write_.Reset(fds[1]);
  thread_ = std::thread([this] { Serve(); });
  return Status::Ok();
}

void ControlServer::Stop() {
  if (!thread_.joinable()) return;
  // The socket goes first: from here on nobody may take the mount for one that serves. From
  // the folder it was bound in, whatever its path leads to now.
  ::unlinkat(folder_.get(), name_.c_str(), 0);
  fs_->CancelPreVerify();
  (void)!::write(stop_write_.get(), "x", 1);
  thread_.join();
  if (worker_.joinable()) worker_.join();
}

void ControlServer::Serve() {
  for (;;) {
    fs_->ThawIfDue();  // an admin's freeze given a timeout ends by itself (within half a second)
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    int ready = ::poll(fds, 2, 500);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (ready == 0) {  // every half second: has the holder record moved on?
      fs_->CheckHolder();
      continue;
    }
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    // A client has kClientDeadline to send its command and take its reply; one that stalls is
    // dropped, so it holds up neither the holder watch, nor status, nor the unmount.
    timeval deadline{kClientDeadline.count(), 0};
    ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof deadline);
    ::setsockopt(conn.get(), SOL_SOCKET, SO_SNDTIMEO, &deadline, sizeof deadline);
    ucred cred{};
    socklen_t len = sizeof(cred);
    std::string reply;
    // The command is read first, whoever sends it, so that a refused client reads its refusal
    // instead of writing to a closed socket (SIGPIPE).
    std::string command;
    if (!ReadCommand(conn.get(), &command)) continue;  // stalled, cut or oversized: dropped
    if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != 0 && cred.uid != owner_)) {
      reply = R"({"error":"control: only root or the mount's owner may use this socket","ok":false})";
    } else {
      if (command == "preverify") {
        // Reads the whole capsule: on its own thread, so that the holder record is still
        // watched and status answered meanwhile. One at a time.
        if (worker_busy_) {
          reply = R"({"error":"control: a preverify is already running","ok":false})";
        } else {
          if (worker_.joinable()) worker_.join();  // finished: returns at once
          worker_busy_ = true;
          worker_ = std::thread([this, conn = std::move(conn)] {
            (void)WriteAll(conn.get(), Handle("preverify") + "\n", "control");
            worker_busy_ = false;
          });
          continue;
        }
      } else {
        reply = Handle(command);
      }
    }
    reply += "\n";
    (void)WriteAll(conn.get(), reply, "control");
    // A freeze's checkpoint and verify are given back once the mount is no longer frozen: a
    // move's switch runs meanwhile, and the trim (0.1 s at 200,000 files) would take a core.
    if (fs_->gate().state() != MountState::kFrozen) ReturnFreedMemory();
  }
}

std::string ControlServer::Handle(const std::string& command) {
  Status done;
  std::optional<uint64_t> blobs_read;
  // "freeze MOVE" and "thaw MOVE": a move out's own freeze and thaw (see holder.h).
  Result<ControlCommand> parsed = ParseControlCommand(command);
  const std::string verb = parsed.ok() ? parsed->verb : "";
  const std::string move = parsed.ok() ? parsed->move : "";
  if (!parsed.ok()) {
    done = parsed.status();
  } else if (verb == "freeze") {
    Result<uint64_t> read = fs_->Freeze(move, std::chrono::seconds(parsed->timeout_seconds));
    if (read.ok()) blobs_read = *read;
    done = read.status();
  } else if (verb == "preverify") {
    Result<uint64_t> read = fs_->PreVerify();
    if (read.ok()) blobs_read = *read;
    done = read.status();
  } else if (verb == "thaw") {
    done = fs_->Thaw(move);
  } else if (verb == "retire") {
    done = fs_->Retire();
  }
  Result<std::string> status = fs_->StatusJson();
  if (done.ok() && !status.ok()) done = status.status();
  if (!done.ok()) {
    Result<std::string> text = CanonicalJson(Json{{"ok", false}, {"error", done.message()}});
    return text.ok() ? *text : R"({"ok":false})";
  }
  Result<Json> parsed_status = ParseJson(*status, "status");
  if (!parsed_status.ok()) return R"({"ok":false})";
  Json json = std::move(*parsed_status);
  json["ok"] = true;
  if (blobs_read) json["blobs_read"] = *blobs_read;
  Result<std::string> text = CanonicalJson(json);
  return text.ok() ? *text : R"({"ok":false})";
}

}  // namespace capsule::fs
