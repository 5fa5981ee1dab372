// CapsuleFs: the capsule as a live directory. Each FUSE callback (fuse_table.cc) only replies;
// the work is in a do_<op> method returning a Status or Result.
//
// Lock order (take in this order, never the reverse):
//   1. StateGate ticket (gate_)          a mutating op holds one while it runs
//   2. Node::wc_mu                       one node's working copy; never two at once
//   2b. render_mu_                       the cache of rendered documents
//   3. tree_mu_                          the tree, the workspace metadata, manifest_
//   4. ChangeLog::mu_                    orders the lines of the change log
// fdatasync of the change log happens with no lock held but the node's wc_mu. libfuse's lock
// of a request, held while it calls the request's interrupt function, comes before the
// gate's own mutex (fs/state_gate.h).
#pragma once

#include <fuse3/fuse_lowlevel.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/status.h"
#include "capsule/format/digest_cache.h"
#include "capsule/format/manifest.h"
#include "capsule/format/verify.h"
#include "capsule/format/workspace.h"
#include "capsule/format/workspace_inodes.h"
#include "capsule/format/workspace_times.h"
#include "fs/change_log.h"
#include "fs/entry_notifier.h"
#include "fs/journal_sink.h"
#include "fs/node.h"
#include "fs/state_gate.h"

namespace capsule::fs {

struct DirEntry {
  std::string name;
  fuse_ino_t ino;
  mode_t type;
};

// Who asks: the request's context. Owners of new workspace entries come from it, and it
// decides who may change an owner.
struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups, when the kernel gave them
  bool InGroup(gid_t g) const;
};

// A workspace name or link target, checked before the tree changes, so that a refused one
// leaves nothing behind: the snapshot and the change log are JSON, which holds UTF-8 text only
// (EINVAL otherwise).
Status CheckRecordable(const std::string& text, const std::string& what);

// What fi->fh points to.
struct Handle {
  std::shared_ptr<Node> node;
  bool writer = false;
  // The committed file (blob or real file) it read last, and Node::commits then; guarded by
  // node->wc_mu. Shared with a read in flight, which splices from it after the lock is gone.
  std::shared_ptr<const UniqueFd> committed;
  uint64_t committed_at = 0;
  std::string data;                       // rendered documents and the control file
  std::vector<DirEntry> entries;          // folders: listed at opendir
  std::unique_ptr<LineAssembler> journal; // the journal, when a sink is plugged in
  bool append = false;                    // O_APPEND: every write lands at the end
  bool keep_cache = false;                // the kernel may keep its page cache (Node::content_resets)
  // This handle changed the file since its last commit (guarded by node->wc_mu): its close
  // commits then. A close (or a late release) of a handle that changed nothing commits
  // nothing, so it never commits another opening's write half-way.
  bool wrote = false;
};

// What a read answers: a file to splice from (kept open until the reply is sent), or bytes.
struct ReadReply {
  std::shared_ptr<const UniqueFd> file;
  std::string data;
};

// What a write answers: how much was written, and the bytes still owed to the file's running
// digest, hashed after the answer is sent (or when this goes).
struct WriteDone {
  size_t size = 0;
  DeferredHash hash;
};

struct MountOptions {
  std::string dir;          // the capsule folder
  std::string mountpoint;
  bool read_only = false;   // -o ro
  // -o allow_foreign_owner: mount a capsule folder (or one of its own folders) that another
  // user owns or that group or others may write (refused otherwise; see CheckFolderOwners).
  bool allow_foreign_owner = false;
};

// The capsule folder and its own folders (.capsule, .capsule/work, artifacts, artifacts/blobs,
// harness, schedule, ...): each must be a folder, not a link (refused naming it, always), and,
// unless `allow_foreign_owner`, owned by root or the driver's user and writable by neither group
// nor others, so that no one else can put a link or a file where the driver writes.
Status CheckCapsuleFolders(const DirFd& root, bool allow_foreign_owner);

class TreeUndo;

class CapsuleFs {
 public:
  // Recovers the capsule (drops working copies, replays the change log, rewrites the
  // snapshot and the manifest) and builds the view.
  static Result<std::unique_ptr<CapsuleFs>> Open(const MountOptions& options);
  ~CapsuleFs();

  // The session the kernel's requests come from, to tell the kernel to forget a name it
  // cached (EntryNotifier, a thread: set it after the driver forks into the background);
  // null stops that, before the session ends.
  void SetSession(fuse_session* session);
  void SetJournalSink(JournalSink sink) { journal_sink_ = std::move(sink); }
  void SetControlPath(std::string path) { control_path_ = std::move(path); }

  // Control commands.
  StateGate& gate() { return gate_; }
  // Commits everything, verifies the capsule and holds writers until Thaw. Blobs hashed by
  // an earlier freeze or PreVerify and unchanged since are not read again, so a freeze after
  // a PreVerify reads what changed, not the whole capsule; the first freeze after a PreVerify
  // does not even stat the blobs that PreVerify read. Returns how many blobs it read.
  // `move`: the move out this freeze is for ("" for an admin's); the holder record keeps it,
  // so that only that move thaws the mount (TransitionHolder).
  // `timeout` (an admin's freeze only; zero: none): ThawIfDue thaws it once that has passed. A
  // freeze for a move never times out, and takes over an admin's without its timeout.
  Result<uint64_t> Freeze(const std::string& move = "", std::chrono::seconds timeout = {});
  // Thaws an admin's freeze whose timeout has passed, and says so on the driver's standard
  // error and in the system log.
  void ThawIfDue();
  // Hashes the capsule's blobs while the agent runs, ahead of a freeze (a move's copy phase).
  // Returns how many blobs were read rather than remembered.
  Result<uint64_t> PreVerify();
  // Makes a PreVerify in progress stop soon (Unavailable): the mount is going away.
  void CancelPreVerify() { preverify_cancelled_ = true; }
  // Refused when the holder record is retired (the mount retires then) or frozen for
  // another move than `move`.
  Status Thaw(const std::string& move = "");
  // Records the capsule retired (when it is held here) and refuses every write from now on.
  Status Retire();
  // Retires the mount when the holder record no longer says this machine holds the agent
  // (retired, missing or unreadable): the sidecar may change the record without the socket.
  void CheckHolder();
  Result<std::string> StatusJson();
  // Commits every working copy and rewrites snapshot.json and manifest.json (unmount).
  Status Shutdown();

  Result<fuse_entry_param> do_lookup(fuse_ino_t parent, const std::string& name);
  void do_forget(fuse_ino_t ino, uint64_t n);
  Result<struct stat> do_getattr(fuse_ino_t ino);
  Result<struct stat> do_setattr(fuse_ino_t ino, const struct stat& attr, int to_set, Handle* h,
                                 const Caller& caller = {});
  Result<std::string> do_readlink(fuse_ino_t ino);
  // A regular file (as create and close), or a FIFO, socket or device node: metadata only.
  Result<fuse_entry_param> do_mknod(fuse_ino_t parent, const std::string& name, mode_t mode, dev_t rdev,
                                    const Caller& caller = {});
  Result<fuse_entry_param> do_mkdir(fuse_ino_t parent, const std::string& name, mode_t mode,
                                    const Caller& caller = {});
  Result<fuse_entry_param> do_symlink(const std::string& target, fuse_ino_t parent, const std::string& name,
                                      const Caller& caller = {});
  Status do_unlink(fuse_ino_t parent, const std::string& name);
  Status do_rmdir(fuse_ino_t parent, const std::string& name);
  Status do_rename(fuse_ino_t parent, const std::string& name, fuse_ino_t newparent,
                   const std::string& newname, unsigned flags);
  // Another name for a workspace node that is not a folder (a hard link).
  Result<fuse_entry_param> do_link(fuse_ino_t ino, fuse_ino_t newparent, const std::string& newname);
  // `held`: a write ticket the caller already holds (a create), so that none is waited for.
  Result<Handle*> do_open(fuse_ino_t ino, int flags, const WriteTicket* held = nullptr);
  Result<std::pair<fuse_entry_param, Handle*>> do_create(fuse_ino_t parent, const std::string& name,
                                                         mode_t mode, int flags, const Caller& caller = {});
  Result<ReadReply> do_read(Handle* h, size_t size, off_t off);
  // The bytes of `buf` must live until the result's hash has run.
  Result<WriteDone> do_write(Handle* h, const char* buf, size_t size, off_t off);
  Status do_flush(Handle* h);
  void do_release(Handle* h);
  void do_releasedir(Handle* h);
  Status do_fsync(Handle* h);
  // fallocate(2) on the working copy, a real file: every mode the backing file system has
  // (0, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE, ...), committed like any write.
  Status do_fallocate(Handle* h, int mode, off_t offset, off_t length);
  Status do_fsyncdir() { return SyncAll(); }
  Result<Handle*> do_opendir(fuse_ino_t ino);
  Result<struct statvfs> do_statfs();

  const std::string& dir() const { return options_.dir; }
  // The capsule folder held open: every file the driver changes in it is reached from here,
  // never through a link (dir_fd.h).
  const DirFd& folder() const { return folder_; }
  fuse_session* session() const { return session_; }
  // How long the kernel may keep what it learned of `ino` (its attributes, its names): see
  // CacheTimeout in tree.cc.
  double attr_timeout(fuse_ino_t ino);

 private:
  explicit CapsuleFs(MountOptions options, MountState state);

  // tree.cc: nodes, paths, attributes.
  // `ino`: the number it had at the last checkpoint (BuildTree), when no node has it; else a new one.
  std::shared_ptr<Node> NewNode(NodeKind kind, Node* parent, const std::string& name, fuse_ino_t ino = 0)
      REQUIRES(tree_mu_);
  std::shared_ptr<Node> Get(fuse_ino_t ino);
  // The node of `ino`, or ENOENT naming `name` (the entry being looked for); needs tree_mu_.
  Result<Node*> NodeOf(fuse_ino_t ino, const std::string& name) REQUIRES_SHARED(tree_mu_);
  std::string RelPath(const Node* node) const REQUIRES_SHARED(tree_mu_);  // path in the capsule
  std::string NameOf(const Node* node);          // its first name, for messages; takes tree_mu_ (shared)
  std::string WsPath(const Node* node) const REQUIRES_SHARED(tree_mu_);  // path under files/ (its first name)
  // The path under files/ of the entry `name` in the workspace folder `dir`; needs tree_mu_.
  std::string WsChildPath(const Node* dir, const std::string& name) const REQUIRES_SHARED(tree_mu_);
  // Every name of `node` under files/ (hard links have several); needs tree_mu_.
  std::vector<std::string> WsPaths(const Node* node) const REQUIRES_SHARED(tree_mu_);
  // The workspace from a snapshot; a node gets its time from `times` (now when absent).
  Status LoadWorkspace(bool writable);  // the snapshot and the change log into the tree
  // `inodes` gives a node its inode number, change and access times as the last checkpoint
  // kept them (a remount shows them unchanged).
  Status BuildTree(const Snapshot& snapshot, const WorkspaceTimes& times, const WorkspaceInodes& inodes = {});
  // Every workspace path's inode number and times, for .capsule/inodes.json; needs tree_mu_.
  WorkspaceInodes InodeTable() const;
  // The whole workspace as one change: every entry and its time; needs tree_mu_.
  WorkspaceChange WholeWorkspace() const;
  static Snapshot SnapshotOf(WorkspaceChange whole);
  struct LiveAttr {
    uint64_t size;
    struct timespec mtime;
  };
  // Size and mtime of `node`'s working copy, when it has one. Takes wc_mu.
  std::optional<LiveAttr> WrittenAttr(Node* node);
  Result<struct stat> Attr(Node* node);          // takes wc_mu then tree_mu_
  static double CacheTimeout(NodeKind kind);
  Result<fuse_entry_param> Entry(const std::shared_ptr<Node>& node);  // counts a lookup
  Result<std::shared_ptr<Node>> Child(Node* parent, const std::string& name) REQUIRES(tree_mu_);
  Result<std::string> Render(Document document);
  SnapshotEntry EntryOf(const Node* node) const;  // needs tree_mu_
  // Adds the node's entry and time to `change`; AddSubtree also everything beneath it.
  void Record(const Node* node, const std::string& path, WorkspaceChange* change) const;
  void AddSubtree(const Node* node, const std::string& path, WorkspaceChange* change) const;
  // Record under every name of `node` (nothing when it has none left).
  void RecordAllNames(const Node* node, WorkspaceChange* change) const REQUIRES_SHARED(tree_mu_);
  // The entries of the folder `dir` changed: its mtime and ctime become now (a workspace
  // folder's mtime goes into `change`, so that it is kept). Needs tree_mu_ (unique).
  void EntriesChanged(Node* dir, WorkspaceChange* change) REQUIRES(tree_mu_);
  // A new workspace entry in `parent` made by `caller`: its owner (kept only when it is not
  // the driver's user) and, beneath a setgid folder, the folder's group. Needs tree_mu_.
  void SetNewOwner(Node* node, const Node* parent, const Caller& caller) const;
  // chown(2) of `node` as `caller` asks it (FUSE_SET_ATTR_UID/GID of `to_set`). Takes tree_mu_.
  // chown and chmod of one setattr, as one change-log line (taken back whole if it fails).
  Status ChangeOwnerAndMode(Node* node, const std::string& rel, const struct stat& attr, int to_set,
                            const Caller& caller);
  Status SetOwner(Node* node, const std::string& rel, const struct stat& attr, int to_set,
                  const Caller& caller);  // needs tree_mu_ (unique); logs nothing

  // commit.cc: working copies, commits, checkpoints.
  Status EnsureWorkingCopy(Node* node, bool empty);  // needs node->wc_mu
  // environment/spec.json, schedule files and thread files (IsCheckedWhenWritten): the write of
  // `data` at `off` is refused (EINVAL, nothing of it kept) when it would make the copy whole
  // JSON that fails its check, or extend it into text no JSON begins with, so that a shell's
  // redirection fails visibly at its write, not only at close.
  Status CheckSpecAsWritten(Node* node, const WorkingCopy& wc, std::string_view data, off_t off);  // needs node->wc_mu
  // Durable: the blob and the log line reach the disk before it returns (fsync).
  Status CommitWorkingCopy(Node* node, bool durable = false);  // needs node->wc_mu
  Status CommitRealFile(Node* node);                           // needs node->wc_mu
  // A commit of the capsule file `rel` refused for `why`: the working copy's bytes (at
  // `wc_path`) are kept in DIR/.capsule/rejected/<rel>, and the refusal, EINVAL, says where.
  Status RefuseCommit(const std::string& rel, const std::string& wc_path, const Status& why);
  void DropWorkingCopy(Node* node);                            // needs node->wc_mu
  // The committed file of `node` for reading through `h`, opened again when a commit replaced
  // it since h last read it. Needs node->wc_mu.
  Result<std::shared_ptr<const UniqueFd>> CommittedFile(Node* node, Handle* h);
  // Writes the change's line; should that fail, `undo` (when given) puts the tree back as it
  // was before the change. Needs tree_mu_ (unique).
  Status LogChange(const WorkspaceChange& change, TreeUndo* undo = nullptr) REQUIRES(tree_mu_);
  Status SyncLog();
  Status SyncAll();  // syncfs(2) of the capsule's file system
  Status CommitAll();
  // Writes the snapshot, the workspace times and the manifest whole; `saved`, when given,
  // gets the manifest and snapshot as written (a freeze verifies them without reading back),
  // and with `verify` trusting remembered digests also the blobs folder, listed for
  // VerifySavedFolder with those options on a thread of its own while the tree is walked.
  // Runs only while no write can come (before the mount serves, frozen, at shutdown): the
  // tree it walks and the blobs it syncs stay as they are until it returns.
  Status Checkpoint(SavedCapsule* saved = nullptr, const VerifyOptions* verify = nullptr);
  // manifest_ to change, copied first while a checkpoint's reader still shares it. Needs
  // tree_mu_ (unique). use_count() orders nothing by itself: a reference is taken only under
  // tree_mu_, and the one a freeze's verify holds is dropped before the freeze lets writers
  // on (StateGate), so no edit races a reader.
  Manifest& EditManifest() REQUIRES(tree_mu_);
  bool WritableRealPath(const std::string& rel) const;
  bool CreatableRealPath(const std::string& rel) const;

  // Every handle given to the kernel, so that those it never released (the driver stopped
  // while files were open) are freed with the mount.
  Handle* Register(std::unique_ptr<Handle> h);
  std::unique_ptr<Handle> Unregister(Handle* h);

  // ops_meta.cc helpers.
  Status Detach(Node* node) REQUIRES(tree_mu_);
  // Removes the name `name` in `dir` of `node`, one of its names; the node goes when it has
  // no name left and nothing looks it up. Needs tree_mu_ (unique).
  void RemoveName(Node* dir, const std::string& name, Node* node) REQUIRES(tree_mu_);
  Status TruncateNow(Node* node, uint64_t size);
  // A new workspace entry `node` in `parent`, made by `caller`: its owner, its folder's times,
  // and the change logged. Needs tree_mu_ (unique).
  Status AddWorkspaceEntry(Node* node, Node* parent, const Caller& caller) REQUIRES(tree_mu_);
  Result<std::pair<fuse_entry_param, Handle*>> CreateReal(Node* parent, const std::string& name, mode_t mode,
                                                          int flags);

  const MountOptions options_;
  // Set once by Open: the capsule folder, its working copies' folder and its blobs' folder,
  // held open from the mount's start (a folder renamed or swapped for a link later is not
  // followed: writes land in the folder opened).
  DirFd folder_, work_, blobs_;
  // The driver's own user and group: the owner of whatever has no owner of its own.
  const uint32_t driver_uid_ = ::getuid();
  const uint32_t driver_gid_ = ::getgid();
  fuse_session* session_ = nullptr;
  std::unique_ptr<EntryNotifier> entry_notifier_;  // while there is a session
  StateGate gate_;
  DigestCache verified_blobs_;  // what Freeze and PreVerify hashed; the journal's hash state (Checkpoint)
  std::atomic<bool> preverify_cancelled_{false};
  // Read requests for workspace files the kernel sent us (not served from its page cache):
  // the status's workspace_reads.
  std::atomic<uint64_t> workspace_reads_{0};
  // A PreVerify finished since a freeze last got as far as its verify (only the mount writes
  // the folder, so its digests stay good however long ago that was).
  std::atomic<bool> preverified_{false};
  // The manifest in memory names every blob on disk: a checkpoint listed the folder, and no
  // commit or checkpoint failed half-way since.
  std::atomic<bool> blobs_listed_{false};
  std::string control_path_;
  JournalSink journal_sink_;
  // The journal's last line while its newline has not come, shared by every open of it.
  std::shared_ptr<UnfinishedLine> journal_unfinished_ = std::make_shared<UnfinishedLine>();
  std::unique_ptr<ChangeLog> log_;
  std::atomic<uint64_t> work_counter_{0};
  Mutex handles_mu_;
  std::unordered_set<Handle*> handles_ GUARDED_BY(handles_mu_);

  // Taken after render_mu_, before ChangeLog's (ARCHITECTURE.md, Locks).
  mutable SharedMutex tree_mu_;
  std::unordered_map<fuse_ino_t, std::shared_ptr<Node>> nodes_ GUARDED_BY(tree_mu_);
  fuse_ino_t next_ino_ GUARDED_BY(tree_mu_) = 2;
  uint64_t next_link_group_ GUARDED_BY(tree_mu_) = 1;
  std::shared_ptr<Node> root_;                                   // set once
  std::shared_ptr<Node> files_;                                  // set once: files/
  // Guarded by tree_mu_; shared with what a checkpoint saved, so changed only through
  // EditManifest.
  std::shared_ptr<Manifest> manifest_ = std::make_shared<Manifest>();
  uint64_t generation_ GUARDED_BY(tree_mu_) = 0;  // bumps on change
  Mutex render_mu_ ACQUIRED_BEFORE(tree_mu_);  // guards the render cache
  uint64_t rendered_generation_[3] GUARDED_BY(render_mu_) = {~0ull, ~0ull, ~0ull};
  std::string rendered_[3] GUARDED_BY(render_mu_);
};

}  // namespace capsule::fs
