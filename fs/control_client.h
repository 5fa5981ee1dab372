// The client side of the control channel (see control.h), for `capsule status|freeze|thaw`
// and the sidecar, and the channel's two parsers, which the server uses too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule::fs {

// True when `path` is the root of a FUSE mount (statfs reports FUSE's magic number).
bool IsFuseMount(const std::string& path);

// The control socket of a mount: read from MOUNTPOINT/.capsulefs-control, or, for a capsule
// folder, DIR/.capsule/control.sock when a mount of it is running.
Result<std::string> FindControlSocket(const std::string& mountpoint_or_dir);

// A name for the socket at `path` that fits in sockaddr_un: the path itself, or, when it is
// too long, /proc/self/fd/<N>/<name> through `dir_fd`, an O_PATH descriptor of its folder.
Result<std::string> SocketName(const std::string& path, UniqueFd* dir_fd);

// Sends one command and returns the reply's JSON; a reply with "ok": false is an error.
Result<Json> SendControl(const std::string& socket_path, const std::string& command);

// One command as the server reads it: a verb (status, freeze, thaw, retire, preverify) and,
// for a move's freeze or thaw, the move's id (1 to 64 lower-case hex digits), or, for an
// admin's freeze, "timeout=SECONDS" (1 to kMaxFreezeTimeoutSeconds): the freeze thaws by
// itself then. A move's freeze never times out.
struct ControlCommand {
  std::string verb;
  std::string move;
  uint64_t timeout_seconds = 0;  // 0: none
};
inline constexpr uint64_t kMaxFreezeTimeoutSeconds = 30ull * 24 * 3600;
// Parses a command line (without its newline); InvalidArgument naming what is wrong.
Result<ControlCommand> ParseControlCommand(std::string_view line);

// Parses a reply: the JSON object when its "ok" is true; FailedPrecondition with the reply's
// "error" when it is false; Corruption for anything else. Never throws.
Result<Json> ParseControlReply(std::string_view reply, const std::string& command, const std::string& socket_path);

}  // namespace capsule::fs
