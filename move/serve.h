// The target's end of the move protocol's wire: the calls of target_api.h read from a
// connection (move/net/wire.h) and answered by a TargetApi. RemoteTarget
// (move/remote_target.h) is the other end.
//
// Thread-safety: one call of ServeConnection per connection; `target` must be thread-safe
// when connections are served at once.
#pragma once

#include "move/net/wire.h"
#include "move/target_api.h"

namespace capsule::move {

// Answers calls read from `conn` with `target` until the peer ends the connection or it
// fails. A body that a call stops reading early is drained, so the next request is found.
// For a request that asks for them ("working_messages": true), from the moment the call (and
// its body) is read until its reply, a working message goes out every `working_interval`
// (from a thread of its own, the only writer meanwhile).
Status ServeConnection(Connection* conn, TargetApi* target,
                       std::chrono::milliseconds working_interval = kWorkingInterval);

}  // namespace capsule::move
