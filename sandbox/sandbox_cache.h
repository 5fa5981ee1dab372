// The machine's cache of sandbox root file systems, one per digest of what determines it
// (SandboxSpec::Digest: the image, the packages, the architecture, the builder's version):
//
//   CACHE/<digest>/rootfs/        the root file system (mmdebstrap's output)
//   CACHE/<digest>/sandbox.json   {"digest","image","suite","packages","mirror","built","size"}
//   CACHE/<digest>/last-use       empty; its modification time is the last build or run
//   CACHE/.lock-<digest>          flock(2): exclusive while one builds or removes, shared
//                                 while one runs
//   CACHE/.build-<digest>-XXXXXX  a build in progress (or one a crash cut short)
//   CACHE/.dev/                   0700, root's: the device nodes every sandbox's /dev holds
//                                 (null, zero, full, random, urandom, tty), each 0666 and
//                                 owned by nobody (65534), so that no sandbox may change them
//
// A build writes into a .build- folder, syncs the file system, then renames it to
// CACHE/<digest> in one step: a crash leaves the sandbox whole or absent, and two builds of
// one digest at once (two agents, two processes) take turns on its lock, the second finding
// the first's result. CACHE is $CAPSULE_SANDBOX_CACHE, or /var/cache/capsule/sandboxes.
//
// Thread-safety: every method may be called from any thread and process at once; the locks
// are flock(2)s on files in CACHE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"
#include "sandbox/sandbox_spec.h"

namespace capsule::sandbox {

struct SandboxEntry {
  std::string digest;
  std::string image;
  std::vector<std::string> packages;
  std::string rootfs;     // CACHE/<digest>/rootfs
  uint64_t size = 0;      // bytes of its files
  int64_t built = 0;      // seconds since the epoch
  int64_t last_used = 0;  // seconds since the epoch
};

// A sandbox held for a run: its lock, shared, until dropped; `rm` of it waits or is refused.
class SandboxHold {
 public:
  SandboxHold() = default;
  explicit SandboxHold(UniqueFd lock) : lock_(std::move(lock)) {}

 private:
  UniqueFd lock_;
};

class SandboxCache {
 public:
  // $CAPSULE_SANDBOX_CACHE when set, else /var/cache/capsule/sandboxes.
  static std::string DefaultRoot();
  // The cache at `root` (made when missing).
  static Result<SandboxCache> Open(const std::string& root);

  struct Built {
    SandboxEntry entry;
    bool cache_hit = false;
    double seconds = 0;  // the whole call, waiting for another build included
  };
  // The sandbox of `spec`: the cached one, or a new one built with mmdebstrap from the
  // machine's Debian mirror. InvalidArgument for an image not supported; NotFound naming a
  // package the mirror does not have; FailedPrecondition when mmdebstrap is not installed.
  Result<Built> Build(const SandboxSpec& spec);
  // The cached sandbox of `spec`, held for a run (its last use recorded); NotFound when it
  // is not built.
  Result<SandboxEntry> Hold(const SandboxSpec& spec, SandboxHold* hold);

  Result<std::vector<SandboxEntry>> List() const;
  // Removes the sandbox whose digest is, or starts with, `digest` (at least 8 hex digits).
  // NotFound when none is; InvalidArgument when several are; FailedPrecondition while a run
  // uses it.
  Result<SandboxEntry> Remove(const std::string& digest);

  // For a run as root: CACHE/.dev with its nodes as above, each made (or made again, when
  // it is not what it should be) by mknod(2). A sandbox binds them over the host's, which
  // belong to root and so to a command run as root on the host, user namespace or not.
  // Empty for anyone else: the host's nodes are not theirs to change. FailedPrecondition
  // when CACHE is on a file system mounted nodev.
  Result<std::string> DeviceNodes() const;

  const std::string& root() const { return root_; }

 private:
  explicit SandboxCache(std::string root) : root_(std::move(root)) {}
  Result<UniqueFd> Lock(const std::string& digest, int operation) const;
  Result<SandboxEntry> Load(const std::string& digest) const;
  Result<SandboxEntry> BuildLocked(const SandboxSpec& spec, const std::string& digest);

  std::string root_;
};

// The Debian mirror sandboxes are built from: $CAPSULE_DEBIAN_MIRROR, else the first Debian
// URI of the machine's apt sources (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list),
// else http://deb.debian.org/debian.
std::string DebianMirror();

}  // namespace capsule::sandbox
