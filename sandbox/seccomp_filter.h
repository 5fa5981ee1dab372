// The seccomp filter every sandboxed run starts under (seccomp(2), built with libseccomp and
// handed to bwrap(1) with --seccomp FD): the system calls that would let a command change its
// mounts or namespaces, read the kernel's keyrings, watch or load code into other processes or
// the kernel, or reboot the machine fail with EPERM, whatever its capabilities; every other
// call is allowed.
//
//   refused (EPERM)  mount, umount2, the new mount API (fsopen, fsconfig, fsmount, fspick,
//                    move_mount, open_tree, mount_setattr), pivot_root, chroot; keyctl,
//                    add_key, request_key; ptrace, process_vm_readv, process_vm_writev; bpf,
//                    perf_event_open, userfaultfd; unshare, setns; kexec_load,
//                    kexec_file_load, init_module, finit_module, delete_module;
//                    open_by_handle_at; reboot, swapon, swapoff, acct, quotactl,
//                    quotactl_fd; clone with any CLONE_NEW* flag
//   ENOSYS           clone3 (its flags sit in memory, out of the filter's reach: the C library
//                    then falls back to clone, whose flags the filter reads)
//   killed           any call of another ABI than the machine's own (on x86_64: the i386
//                    compatibility calls and x32): the sandbox's image is of the machine's
//                    architecture, and a second system call table is a second filter to
//                    keep in step
//
// Thread-safety: stateless; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule::sandbox {

// The names of the system calls the filter refuses with EPERM, whatever their arguments.
const std::vector<std::string>& RefusedSystemCalls();

// The filter as a classic BPF program (seccomp_export_bpf) in an anonymous memory file, read
// from its start: what bwrap --seccomp reads. Made close-on-exec; the caller hands it on.
Result<UniqueFd> SandboxSeccompProgram();

// The same filter in libseccomp's readable form (seccomp_export_pfc), for tests and review.
Result<std::string> SandboxSeccompText();

}  // namespace capsule::sandbox
