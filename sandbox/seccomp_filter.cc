#include "sandbox/seccomp_filter.h"

#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

namespace capsule::sandbox {

namespace {

// The namespaces a clone may not make (clone's first argument); CLONE_NEWTIME is not among
// them: clone takes it only through clone3, and its bit is CSIGNAL's here.
constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                        CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET};

struct FilterRelease {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Filter = std::unique_ptr<void, FilterRelease>;

Status Failed(const std::string& what, int rc) { return Status::IOError("seccomp filter: " + what, -rc); }

Result<Filter> BuildFilter() {
  Filter filter(seccomp_init(SCMP_ACT_ALLOW));
  if (!filter) return Status::IOError("seccomp filter", "libseccomp could not make a filter");
  // Only the native ABI is in the filter: a call of another one ends the process.
  if (int rc = seccomp_attr_set(filter.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc < 0) {
    return Failed("the action for another ABI", rc);
  }
  for (const std::string& name : RefusedSystemCalls()) {
    int number = seccomp_syscall_resolve_name(name.c_str());
    if (number == __NR_SCMP_ERROR) return Status::IOError("seccomp filter", "libseccomp does not know " + name);
    if (int rc = seccomp_rule_add(filter.get(), SCMP_ACT_ERRNO(EPERM), number, 0); rc < 0) return Failed(name, rc);
  }
  if (int rc = seccomp_rule_add(filter.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc < 0) {
    return Failed("clone3", rc);
  }
  for (uint64_t flag : kNamespaceFlags) {
    if (int rc = seccomp_rule_add(filter.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
        rc < 0) {
      return Failed("clone", rc);
    }
  }
  return filter;
}

Result<UniqueFd> AnonymousFile(const char* name) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC));
  if (!fd.valid()) return Status::IOError(std::string("memfd ") + name, errno);
  return fd;
}

}  // namespace

const std::vector<std::string>& RefusedSystemCalls() {
  static const std::vector<std::string> names = {
      // Mounts: a read-only bind stays read-only, nothing is mounted or moved.
      "mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
      "pivot_root", "chroot",
      // The kernel's keyrings, where the host keeps every agent's secrets.
      "keyctl", "add_key", "request_key",
      // Other processes' memory, the kernel's code and tracing.
      "ptrace", "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open", "userfaultfd",
      // Namespaces: no way into another, none of its own (and so no capability in one).
      "unshare", "setns",
      // The machine itself.
      "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at", "reboot",
      "swapon", "swapoff", "acct", "quotactl", "quotactl_fd"};
  return names;
}

Result<UniqueFd> SandboxSeccompProgram() {
  CAPSULE_ASSIGN_OR_RETURN(Filter filter, BuildFilter());
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, AnonymousFile("capsule-seccomp"));
  if (int rc = seccomp_export_bpf(filter.get(), fd.get()); rc < 0) return Failed("export", rc);
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return Status::IOError("seccomp filter", errno);
  return fd;
}

Result<std::string> SandboxSeccompText() {
  CAPSULE_ASSIGN_OR_RETURN(Filter filter, BuildFilter());
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, AnonymousFile("capsule-seccomp-text"));
  if (int rc = seccomp_export_pfc(filter.get(), fd.get()); rc < 0) return Failed("export", rc);
  std::string text;
  char buffer[4096];
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return Status::IOError("seccomp filter", errno);
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IOError("seccomp filter", errno);
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace capsule::sandbox
