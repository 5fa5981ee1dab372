// The source's own capsule during a move: found from a capsule folder or the mountpoint of
// one, and frozen, thawed or retired through its mount's control channel when it is mounted
// (the mount commits and verifies on freeze, and refuses writes with EROFS once retired), or
// through its holder record when it is not.
#pragma once

#include <optional>
#include <string>

#include "capsule/base/status.h"
#include "capsule/format/holder.h"

namespace capsule::move {

class LocalCapsule {
 public:
  // `source`: a capsule folder (mounted or not) or a capsulefs mountpoint.
  static Result<LocalCapsule> Open(const std::string& source);

  const std::string& dir() const { return dir_; }
  bool mounted() const { return socket_.has_value(); }

  // A mount hashes its blobs now, while the agent runs, so that the freeze's verify reads
  // only what changed after this. Best effort: a failure here leaves the freeze to find it.
  // A folder's freeze does not verify, so there is nothing to do.
  void PrepareFreeze();
  // Returns once every write is committed and the capsule verifies; writes wait from then on.
  // The holder record names `move` as what froze it, so that only that move thaws it.
  Status Freeze(const std::string& move);
  // Writes go on, at the epoch the record holds: refused when the record is retired (the
  // target took over) or frozen for another move.
  Status Thaw(const std::string& move);
  // Records the capsule retired at `epoch`, the epoch the move left from (refused when the
  // record has moved on since: a late answer about an old move never retires a newer
  // holding); a mount refuses every write from then on.
  Status Retire(uint64_t epoch);

 private:
  std::string dir_;
  std::optional<std::string> socket_;
};

}  // namespace capsule::move
