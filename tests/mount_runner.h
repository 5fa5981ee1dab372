// Real capsulefs mounts for end-to-end tests: ./capsulefs (from the test's runfiles) run in
// the foreground in a child, and the helpers every mount test needs.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <string>

namespace capsule::testing {

// Whether a FUSE file system is mounted at `mnt`.
bool IsMounted(const std::string& mnt);

// fusermount3 -u of `mnt`, retried while busy (up to ~5 s). For mounts a test did not start
// itself (a daemonised capsulefs, one a sidecar made).
void UnmountPath(const std::string& mnt);

// Writes `data` with open/write/close; the errno of the first failure, 0 if none.
int Put(const std::string& path, const std::string& data, int flags = O_WRONLY | O_CREAT | O_TRUNC);

// ./capsulefs DIR MNT -f in a child, waited for until mounted; unmounted and reaped when
// destroyed.
class Mount {
 public:
  // `fuse_option`: one more -o for capsulefs (allow_other, say), when not empty.
  Mount(std::string dir, std::string mnt, const std::string& fuse_option = "");
  ~Mount() { Unmount(); }
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  bool up() const { return IsMounted(mnt_); }
  // fusermount3 -u, then waits for the driver to finish its checkpoint and exit: its exit
  // code (128 when it did not exit normally, -1 when it already had).
  int Unmount();
  // kill -9 of the driver; the dead mount is taken away.
  void Kill();
  pid_t pid() const { return pid_; }

 private:
  int Reap();

  std::string dir_, mnt_;
  pid_t pid_ = -1;
};

}  // namespace capsule::testing
