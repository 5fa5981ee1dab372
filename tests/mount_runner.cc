#include "tests/mount_runner.h"

#include <signal.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "fs/control_client.h"
#include "tests/cli_runner.h"

namespace capsule::testing {

bool IsMounted(const std::string& mnt) { return fs::IsFuseMount(mnt); }

void UnmountPath(const std::string& mnt) {
  for (int i = 0; i < 100 && IsMounted(mnt); ++i) {
    if (RunProgram("fusermount3", {"-u", mnt}).exit_code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int Put(const std::string& path, const std::string& data, int flags) {
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return errno;
  if (::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
    int err = errno;
    ::close(fd);
    return err;
  }
  return ::close(fd) == 0 ? 0 : errno;
}

Mount::Mount(std::string dir, std::string mnt, const std::string& fuse_option)
    : dir_(std::move(dir)), mnt_(std::move(mnt)) {
  pid_ = ::fork();
  if (pid_ == 0) {
    if (fuse_option.empty()) {
      ::execl("./capsulefs", "capsulefs", dir_.c_str(), mnt_.c_str(), "-f", static_cast<char*>(nullptr));
    } else {
      ::execl("./capsulefs", "capsulefs", dir_.c_str(), mnt_.c_str(), "-f", "-o", fuse_option.c_str(),
              static_cast<char*>(nullptr));
    }
    ::_exit(127);
  }
  for (int i = 0; i < 500 && !IsMounted(mnt_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

int Mount::Unmount() {
  if (pid_ <= 0) return -1;
  for (int i = 0; i < 100 && RunProgram("fusermount3", {"-u", mnt_}).exit_code != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Reap();
}

void Mount::Kill() {
  ::kill(pid_, SIGKILL);
  Reap();
  RunProgram("fusermount3", {"-u", "-z", mnt_});
}

int Mount::Reap() {
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace capsule::testing
