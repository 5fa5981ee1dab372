// The client side of the control channel (see control.h), for `capsule status|freeze|thaw`
// and the sidecar.
#pragma once

#include <string>

#include "capsule/canonical_json.h"
#include "capsule/status.h"

namespace capsule::fs {

// The control socket of a mount: read from MOUNTPOINT/.capsulefs-control, or, for a capsule
// folder, DIR/.capsule/control.sock when a mount of it is running.
Result<std::string> FindControlSocket(const std::string& mountpoint_or_dir);

// Sends one command and returns the reply's JSON; a reply with "ok": false is an error.
Result<Json> SendControl(const std::string& socket_path, const std::string& command);

}  // namespace capsule::fs
