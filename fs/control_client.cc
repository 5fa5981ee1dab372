#include "fs/control_client.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "capsule/base/file_io.h"
#include "capsule/format/local_files.h"

namespace capsule::fs {

namespace {
constexpr long kFuseSuperMagic = 0x65735546;  // statfs(2)'s f_type of every FUSE mount
}  // namespace

bool IsFuseMount(const std::string& path) {
  struct statfs st;
  return ::statfs(path.c_str(), &st) == 0 && st.f_type == kFuseSuperMagic;
}

Result<std::string> FindControlSocket(const std::string& path) {
  Result<std::string> text = ReadFile(JoinPath(path, kControlFileName));
  if (text.ok()) {
    std::string socket = *text;
    while (!socket.empty() && (socket.back() == '\n' || socket.back() == ' ')) socket.pop_back();
    return socket;
  }
  std::string socket = JoinPath(path, local::kControlSocket);
  if (PathExists(socket)) return socket;
  return Status::NotFound(path, "no capsulefs mount here (no .capsulefs-control, no .capsule/control.sock)");
}

Result<std::string> SocketName(const std::string& path, UniqueFd* dir_fd) {
  sockaddr_un addr{};
  if (path.size() < sizeof(addr.sun_path)) return path;
  CAPSULE_ASSIGN_OR_RETURN(*dir_fd, OpenFile(DirName(path), O_PATH | O_DIRECTORY | O_CLOEXEC));
  std::string name = "/proc/self/fd/" + std::to_string(dir_fd->get()) + "/" + BaseName(path);
  if (name.size() >= sizeof(addr.sun_path)) return Status::InvalidArgument(path, "socket name too long");
  return name;
}

Result<Json> SendControl(const std::string& socket_path, const std::string& command) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  UniqueFd dir_fd;
  CAPSULE_ASSIGN_OR_RETURN(std::string name, SocketName(socket_path, &dir_fd));
  std::memcpy(addr.sun_path, name.c_str(), name.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::IOError(socket_path, errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::Make(Code::kUnavailable, socket_path, std::strerror(errno));
  }
  CAPSULE_RETURN_IF_ERROR(WriteAll(fd.get(), command + "\n", socket_path));
  std::string reply;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IOError(socket_path, errno);
    if (n == 0) break;
    reply.append(buffer, static_cast<size_t>(n));
  }
  return ParseControlReply(reply, command, socket_path);
}

Result<Json> ParseControlReply(std::string_view reply, const std::string& command, const std::string& socket_path) {
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(reply, socket_path, Code::kCorruption));
  if (!json.is_object()) return Status::Corruption(socket_path, "a reply that is not a JSON object");
  auto ok = json.find("ok");
  if (ok == json.end() || !ok->is_boolean() || !ok->get<bool>()) {
    auto error = json.find("error");
    return Status::FailedPrecondition(command, error != json.end() && error->is_string() ? error->get<std::string>()
                                                                                           : "refused");
  }
  return json;
}

Result<ControlCommand> ParseControlCommand(std::string_view line) {
  ControlCommand command;
  size_t space = line.find(' ');
  command.verb = std::string(line.substr(0, space));
  if (space != std::string_view::npos) command.move = std::string(line.substr(space + 1));
  const bool takes_move = command.verb == "freeze" || command.verb == "thaw";
  if (command.verb != "status" && command.verb != "retire" && command.verb != "preverify" && !takes_move) {
    std::string shown(line.substr(0, 64));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    return Status::InvalidArgument("control", "unknown command '" + shown + "'");
  }
  if (space == std::string_view::npos) return command;
  if (!takes_move) return Status::InvalidArgument("control", command.verb + " takes no argument");
  if (command.verb == "freeze" && command.move.rfind("timeout=", 0) == 0) {
    std::string seconds = command.move.substr(8);
    command.move.clear();
    bool digits = !seconds.empty() && seconds.size() <= 10;
    for (char c : seconds) digits = digits && c >= '0' && c <= '9';
    if (digits) command.timeout_seconds = std::stoull(seconds);
    if (!digits || command.timeout_seconds == 0 || command.timeout_seconds > kMaxFreezeTimeoutSeconds) {
      return Status::InvalidArgument("control", "freeze: a timeout is 1 to " + std::to_string(kMaxFreezeTimeoutSeconds) +
                                                    " seconds (timeout=SECONDS)");
    }
    return command;
  }
  bool hex = !command.move.empty() && command.move.size() <= 64;
  for (char c : command.move) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) return Status::InvalidArgument("control", command.verb + ": a move id is 1 to 64 lower-case hex digits");
  return command;
}

}  // namespace capsule::fs
