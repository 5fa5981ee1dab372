// Every file of a capsule's local folder, .capsule/, named once: what is local to one machine
// and never exported, digested or sent. Paths are relative to the capsule folder. See
// FILES in man/capsule.5.
//
// Thread-safety: constants.
#pragma once

namespace capsule {

// The local folder itself.
inline constexpr char kLocalDir[] = ".capsule";

namespace local {

// Who holds the agent here (capsule/format/holder.h), this machine's id for the capsule, and
// the lock every change of the holder record takes.
inline constexpr char kHolder[] = ".capsule/holder.json";
inline constexpr char kHolderLock[] = ".capsule/holder.lock";
inline constexpr char kMachine[] = ".capsule/machine";

// The one driver of a folder (capsule/format/mount_lock.h) and its control channel.
inline constexpr char kMountLock[] = ".capsule/mount.lock";
inline constexpr char kControlSocket[] = ".capsule/control.sock";

// The mount's working state (fs/): working copies, the change log since the last checkpoint,
// and the workspace's times.
inline constexpr char kWorkDir[] = ".capsule/work";
inline constexpr char kWorkspaceLog[] = ".capsule/workspace.log";
inline constexpr char kTimes[] = ".capsule/times.json";
// Each workspace path's inode number, change and access time as the mount last showed them
// (capsule/format/workspace_inodes.h): a remount shows them unchanged.
inline constexpr char kInodes[] = ".capsule/inodes.json";
// The files a mount wrote outside the workspace since its last checkpoint, each with the
// digest it wrote (capsule/format/trust.h): what its crash recovery may find changed.
inline constexpr char kMountWrites[] = ".capsule/mount-writes.log";
// What the mount refused to commit of each capsule file (a JSON document or an attachment not
// valid whole), kept for its writer under the file's path: .capsule/rejected/<path>.
inline constexpr char kRejectedDir[] = ".capsule/rejected";

// The journal's append lock and its checked tail (journal/journal_file.h).
inline constexpr char kJournalLock[] = ".capsule/journal.lock";
inline constexpr char kJournalTail[] = ".capsule/journal.tail";

// The owned-state database, its lock and its settings (journal/owned/).
inline constexpr char kOwnedDb[] = ".capsule/owned.db";
inline constexpr char kOwnedLock[] = ".capsule/owned.lock";
inline constexpr char kOwnedSettings[] = ".capsule/owned.json";

// Moves: on a target, which move's stream was applied and the files it brought; on a
// source, the move out in progress.
inline constexpr char kMoveRecord[] = ".capsule/move.json";
inline constexpr char kReceivedDir[] = ".capsule/received";
inline constexpr char kOutgoingMove[] = ".capsule/move-out.json";
// Held (a ProcessLock) by the one process moving the agent out, or resolving such a move.
inline constexpr char kMoveLock[] = ".capsule/move-out.lock";

}  // namespace local

// In a sidecar's root folder (not a capsule): ROOT/.staging/<agent-id> is where a move in is
// built before it is activated.
inline constexpr char kStagingDir[] = ".staging";
// In a sidecar's root folder: held (a ProcessLock) by the one sidecar serving it.
inline constexpr char kSidecarLock[] = ".sidecar.lock";
// In a sidecar's root folder: its pid, address and the moves in it has in flight, written
// whole at each change (move/sidecar_state.h; capsule sidecar status reads it).
inline constexpr char kSidecarState[] = ".sidecar.json";

// At a mount's root: a file naming the mount's control socket.
inline constexpr char kControlFileName[] = ".capsulefs-control";

}  // namespace capsule
