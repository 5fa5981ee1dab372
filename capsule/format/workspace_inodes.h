// .capsule/inodes.json: what a mount showed of each workspace path beyond its content and
// mtime (artifacts/snapshot.json, .capsule/times.json): its inode number, change time and
// access time, so that a remount shows them unchanged (git compares inode numbers and change
// times to tell an unchanged file without reading it). Local to this machine, like the times:
// never exported or moved. The mount writes it whole at each checkpoint.
//
//   {"<path>":[ino,ctime_sec,ctime_nsec,atime_sec,atime_nsec],...}   canonical JSON
//
// ctime 0,0: the mtime's; atime_sec -1: no access time of its own (the mount shows the mtime). The key "" is files/
// itself, with its mtime after the five numbers. A missing or unreadable file gives nothing:
// new inode numbers and times, never a refused mount.
#pragma once

#include <time.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "capsule/base/dir_fd.h"
#include "capsule/base/status.h"

namespace capsule {

struct InodeRecord {
  uint64_t ino = 0;
  struct timespec ctime {};  // {}: as the mtime
  std::optional<struct timespec> atime;
  std::optional<struct timespec> mtime;  // files/ itself only
};

using WorkspaceInodes = std::map<std::string, InodeRecord>;

// The table at `rel` beneath the folder held open (a link there is not followed: nothing).
WorkspaceInodes LoadWorkspaceInodes(const DirFd& folder, const std::string& rel);
// Its canonical text.
Result<std::string> WorkspaceInodesText(const WorkspaceInodes& inodes);

}  // namespace capsule
