// The client side of the control channel (see control.h), for `capsule status|freeze|thaw`
// and the sidecar.
#pragma once

#include <string>

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

}  // namespace capsule::fs
