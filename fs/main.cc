// capsulefs DIR MOUNTPOINT [-f] [-o ro] [-o OPTION...]: the capsule as a live directory.
// See man/capsulefs.8.
#undef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/memory.h"
#include "capsule/format/holder.h"
#include "capsule/base/version.h"
#include "capsule/format/local_files.h"
#include "capsule/format/mount_lock.h"
#include "fs/capsule_fs.h"
#include "fs/control.h"
#include "fs/control_client.h"
#include "fs/fuse_table.h"
#include "fs/journal_append.h"
#include "journal/accept_edits.h"

namespace {

constexpr char kUsage[] =
    "usage: capsulefs DIR MOUNTPOINT [-f] [-o ro] [-o OPTION...]\n"
    "  Mounts the capsule at DIR as a live directory at MOUNTPOINT.\n"
    "  -f          stay in the foreground (otherwise daemonise once the mount is ready)\n"
    "  -o ro       read-only mount\n"
    "  -o allow_foreign_owner\n"
    "              mount a capsule folder that another user owns or may write (refused\n"
    "              otherwise: see capsulefs(8), THE CAPSULE FOLDER)\n"
    "  -o accept_edits\n"
    "              take files edited behind the manifest on purpose first, as capsule accept\n"
    "              does (journal: edits_accepted), instead of refusing the capsule\n"
    "  -o OPTION   passed to FUSE (e.g. allow_other); mount(8)'s own (defaults, nofail,\n"
    "              _netdev, x-*, relatime...) are ignored, and suid, dev too: the mount is\n"
    "              always nosuid,nodev\n"
    "  --help      this text;  --version  the version\n"
    "  Unmount with fusermount3 -u MOUNTPOINT. Control: capsule status|freeze|thaw MOUNTPOINT.\n"
    "  Also mount -t fuse.capsulefs DIR MOUNTPOINT [-o OPTIONS] and /etc/fstab (capsulefs(8)).\n";

// Options mount(8) and mount.fuse3 hand on (`mount -t fuse.capsulefs`, an /etc/fstab line)
// that mean nothing to the driver or that libfuse would refuse: taken and ignored, so that
// `defaults` and an fstab's usual options mount. `suid` and `dev` among them: the mount is
// always nosuid,nodev (libfuse's default), so a file in a capsule never runs with its
// owner's rights nor opens a device of this machine.
bool IgnoredMountOption(const std::string& option) {
  static const char* const kIgnored[] = {
      "rw", "suid", "dev", "defaults", "auto", "noauto", "nofail", "_netdev", "user", "nouser", "users", "owner",
      "group", "relatime", "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime", "diratime",
      "nodiratime", "iversion", "noiversion", "silent", "loud"};
  for (const char* ignored : kIgnored) {
    if (option == ignored) return true;
  }
  return option.rfind("x-", 0) == 0 || option.rfind("comment=", 0) == 0;
}

struct Args {
  capsule::fs::MountOptions mount;
  bool foreground = false;
  bool accept_edits = false;
  std::vector<std::string> fuse_options;
};

// 0 parsed, 1 printed help/version, 2 usage error.
int Parse(int argc, char** argv, Args* args) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 1;
    }
    if (arg == "--version" || arg == "-V") {
      std::cout << "capsulefs " << capsule::kVersion << "\n";
      return 1;
    }
    if (arg == "-f") {
      args->foreground = true;
    } else if (arg == "-o" || arg.rfind("-o", 0) == 0) {
      std::string list = arg == "-o" ? (i + 1 < argc ? argv[++i] : "") : arg.substr(2);
      if (list.empty()) return 2;
      std::stringstream ss(list);
      for (std::string option; std::getline(ss, option, ',');) {
        if (option == "ro") args->mount.read_only = true;
        if (IgnoredMountOption(option)) continue;
        if (option == "allow_foreign_owner") {  // the driver's, not FUSE's
          args->mount.allow_foreign_owner = true;
          continue;
        }
        if (option == "accept_edits") {  // the driver's too
          args->accept_edits = true;
          continue;
        }
        args->fuse_options.push_back(option);
      }
    } else if (!arg.empty() && arg[0] == '-') {
      return 2;
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) return 2;
  args->mount.dir = positional[0];
  args->mount.mountpoint = positional[1];
  return 0;
}

// A mountpoint must be an empty directory that is not a mountpoint already: mounting over a
// file answers EIO for ever, over a mount hides it (another agent), over files hides them.
capsule::Status CheckMountpoint(const std::string& mountpoint) {
  struct stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) return capsule::Status::IOError(mountpoint, errno);
  if (!S_ISDIR(st.st_mode)) {
    return capsule::Status::InvalidArgument(mountpoint, "not a directory; a mountpoint must be an empty directory");
  }
  struct stat parent {};
  if (capsule::fs::IsFuseMount(mountpoint) ||
      (::stat((mountpoint + "/..").c_str(), &parent) == 0 && (parent.st_dev != st.st_dev || parent.st_ino == st.st_ino))) {
    return capsule::Status::FailedPrecondition(mountpoint, "already a mountpoint; unmount it first (fusermount3 -u " +
                                                               mountpoint + ")");
  }
  DIR* dir = ::opendir(mountpoint.c_str());
  if (dir == nullptr) return capsule::Status::IOError(mountpoint, errno);
  bool empty = true;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") empty = false;
  }
  ::closedir(dir);
  if (!empty) return capsule::Status::InvalidArgument(mountpoint, "not empty; a mountpoint must be an empty directory");
  return capsule::Status::Ok();
}

int Run(const Args& args) {
  if (capsule::Status checked = CheckMountpoint(args.mount.mountpoint); !checked.ok()) {
    std::cerr << "capsulefs: " << checked.message() << "\n";
    return 1;
  }
  if (args.accept_edits) {
    // Taken before the mount's lock, which capsule accept's re-seal needs for itself.
    auto taken = capsule::journal::AcceptEditsIfAny(args.mount.dir);
    if (!taken.ok()) {
      std::cerr << "capsulefs: -o accept_edits: " << taken.status().message() << "\n";
      return 1;
    }
    for (const capsule::AcceptedEdit& edit : *taken) {
      std::cerr << "capsulefs: -o accept_edits: " << edit.path << ": " << edit.why << "\n";
    }
    if (!taken->empty()) {
      std::cerr << "capsulefs: -o accept_edits: accepted " << taken->size()
                << (taken->size() == 1 ? " edit" : " edits") << " (journal: edits_accepted)\n";
    }
  }
  // Held until the last checkpoint is on disk, also in the daemon (fork keeps the lock).
  auto mount_lock = capsule::LockForMount(args.mount.dir);
  if (!mount_lock.ok()) {
    std::cerr << "capsulefs: " << mount_lock.status().message() << "\n";
    return 1;
  }
  if (mount_lock->valid()) {
    // Best effort: without it, commands tell a finishing driver by its control socket alone.
    (void)capsule::RecordMountpoint(mount_lock->get(), args.mount.mountpoint);
  }
  auto opened = capsule::fs::CapsuleFs::Open(args.mount);
  if (!opened.ok()) {
    std::cerr << "capsulefs: " << opened.status().message() << "\n";
    return 1;
  }
  std::unique_ptr<capsule::fs::CapsuleFs> fs = std::move(opened).value();
  capsule::ReturnFreedMemory();  // what reading the capsule and the first checkpoint built
  std::string socket_path = capsule::JoinPath(fs->dir(), capsule::local::kControlSocket);
  fs->SetControlPath(socket_path);
  if (fs->gate().state() != capsule::fs::MountState::kReadOnly) {
    // Held here: the journal takes appends of whole lines (man capsulefs.8).
    auto appender = capsule::fs::MakeJournalAppender(fs->folder());
    if (!appender.ok()) {
      std::cerr << "capsulefs: " << appender.status().message() << "\n";
      return 1;
    }
    fs->SetJournalSink(std::move(appender).value());
  }

  if (fs->gate().state() == capsule::fs::MountState::kReadOnly && !args.mount.read_only) {
    // Say why, once, where the person who mounted it looks: a copy, a retired or no record.
    capsule::Status held = capsule::CheckHeldHere(fs->dir());
    if (!held.ok()) std::cerr << "capsulefs: mounted read-only: " << held.message() << "\n";
  }
  // The kernel checks access against each entry's owner and mode, as on any file system.
  std::vector<std::string> words = {"capsulefs", "-o", "fsname=capsulefs,subtype=capsulefs,default_permissions"};
  // Not held here (or -o ro): the kernel mount is read-only too, so statfs says so.
  if (fs->gate().state() == capsule::fs::MountState::kReadOnly) words.insert(words.end(), {"-o", "ro"});
  for (const std::string& option : args.fuse_options) {
    words.push_back("-o");
    words.push_back(option);
  }
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  // libfuse copies the arguments it adds (fuse_opt_add_arg); they are freed on every way out.
  struct ArgsOwner {
    fuse_args* args;
    ~ArgsOwner() { fuse_opt_free_args(args); }
  } args_owner{&fargs};
  fuse_session* se = fuse_session_new(&fargs, &capsule::fs::Operations(), sizeof(fuse_lowlevel_ops), fs.get());
  if (se == nullptr) {
    std::cerr << "capsulefs: could not start a FUSE session (see libfuse's message above)\n";
    return 1;
  }
  int result = 1;
  if (fuse_set_signal_handlers(se) == 0) {
    if (fuse_session_mount(se, args.mount.mountpoint.c_str()) == 0) {
      fuse_daemonize(args.foreground ? 1 : 0);
      fs->SetSession(se);  // after the fork: it starts a thread
      capsule::fs::ControlServer control;
      capsule::Status started = control.Start(fs.get(), socket_path, ::getuid());
      if (!started.ok()) std::cerr << "capsulefs: control channel: " << started.message() << "\n";
      fuse_loop_config* config = fuse_loop_cfg_create();
      fuse_loop_cfg_set_max_threads(config, 64);
      fuse_loop_cfg_set_idle_threads(config, 16);
      result = fuse_session_loop_mt(se, config) == 0 ? 0 : 1;
      fuse_loop_cfg_destroy(config);
      control.Stop();
      fs->SetSession(nullptr);
      capsule::Status shut = fs->Shutdown();
      if (!shut.ok()) {
        std::cerr << "capsulefs: unmount: " << shut.message() << "\n";
        result = 1;
      }
      fuse_session_unmount(se);
    } else {
      std::cerr << "capsulefs: " << args.mount.mountpoint << ": the kernel refused the mount (see libfuse's message "
                << "above, if any)\n";
    }
    fuse_remove_signal_handlers(se);
  } else {
    std::cerr << "capsulefs: could not install signal handlers\n";
  }
  fuse_session_destroy(se);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  capsule::ReturnLargeBlocksAtOnce();  // a long-lived process (capsule/base/memory.h)
  // A write past the file size limit (ulimit -f) fails with EFBIG, which the writer through
  // the mount is told, instead of the signal that would end the driver and the mount with it.
  ::signal(SIGXFSZ, SIG_IGN);
  Args args;
  int parsed = Parse(argc, argv, &args);
  if (parsed == 1) return 0;
  if (parsed == 2) {
    std::cerr << kUsage;
    return 2;
  }
  return Run(args);
}
