#include "sandbox/sandbox_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "capsule/base/canonical_json.h"
#include "capsule/base/sha256.h"
#include "sandbox/process.h"

namespace capsule::sandbox {

namespace {

constexpr char kRootfs[] = "rootfs";
constexpr char kMeta[] = "sandbox.json";
constexpr char kLastUse[] = "last-use";
// Where a run's workspace appears inside every sandbox; made at build, as the root file
// system is read-only when it runs.
constexpr char kWorkspaceInside[] = "workspace";
constexpr char kDevices[] = ".dev";
// Who owns the device nodes: not root, whom a sandbox run as root is on the host.
constexpr uid_t kDeviceOwner = 65534;
constexpr gid_t kDeviceGroup = 65534;

struct DeviceNode {
  const char* name;
  unsigned major, minor;
};
constexpr DeviceNode kDeviceNodes[] = {{"null", 1, 3},    {"zero", 1, 5},    {"full", 1, 7},
                                       {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};

bool IsTheNode(const struct stat& st, const DeviceNode& node) {
  return S_ISCHR(st.st_mode) && st.st_rdev == makedev(node.major, node.minor) && st.st_uid == kDeviceOwner &&
         st.st_gid == kDeviceGroup && (st.st_mode & 07777) == 0666 && st.st_nlink == 1;
}

// DIR/name made the node `node` is, through a temporary name and a rename: whole or absent.
Status MakeDeviceNode(int dir, const std::string& dir_path, const DeviceNode& node) {
  struct stat st {};
  if (::fstatat(dir, node.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && IsTheNode(st, node)) return Status::Ok();
  std::string temp = std::string(".") + node.name + "-" + std::to_string(::getpid());
  (void)::unlinkat(dir, temp.c_str(), 0);
  std::string path = JoinPath(dir_path, node.name);
  if (::mknodat(dir, temp.c_str(), S_IFCHR | 0600, makedev(node.major, node.minor)) != 0) return Status::IOError(path, errno);
  if (::fchownat(dir, temp.c_str(), kDeviceOwner, kDeviceGroup, AT_SYMLINK_NOFOLLOW) != 0 ||
      ::fchmodat(dir, temp.c_str(), 0666, 0) != 0 || ::renameat(dir, temp.c_str(), dir, node.name) != 0) {
    int err = errno;
    (void)::unlinkat(dir, temp.c_str(), 0);
    return Status::IOError(path, err);
  }
  return Status::Ok();
}

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status Touch(const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (::futimens(fd.get(), nullptr) != 0) return Status::IOError(path, errno);
  return Status::Ok();
}

// The lines of mmdebstrap's log that say why it failed, as one status naming what is missing.
Status BuildFailure(const std::string& log_path, int exit_code, const SandboxSpec& spec, const std::string& mirror) {
  std::ifstream log(log_path);
  std::string line, last_error;
  const std::string what = "sandbox " + spec.image;
  while (std::getline(log, line)) {
    for (const char* marker : {"Unable to locate package ", "has no installation candidate"}) {
      size_t at = line.find(marker);
      if (at == std::string::npos) continue;
      std::string package;
      if (marker[0] == 'U') {
        package = line.substr(at + std::string(marker).size());
      } else {
        size_t open = line.find('\''), close = line.find('\'', open + 1);
        package = open != std::string::npos && close != std::string::npos ? line.substr(open + 1, close - open - 1) : line;
      }
      return Status::NotFound("package " + package, "not in " + spec.image + " (Debian mirror " + mirror + ")");
    }
    if (line.compare(0, 3, "E: ") == 0) last_error = line.substr(3);
    if (line.find("Failed to fetch") != std::string::npos || line.find("Could not resolve") != std::string::npos ||
        line.find("Could not connect") != std::string::npos) {
      return Status::Unavailable("Debian mirror " + mirror, line);
    }
  }
  if (last_error.empty()) last_error = "see the last lines of its output above";
  return Status::IOError(what, "mmdebstrap failed (exit " + std::to_string(exit_code) + "): " + last_error);
}

uint64_t TreeSize(const std::string& dir) {
  Result<std::vector<TreeEntry>> entries = ListTree(dir);
  uint64_t size = 0;
  if (!entries.ok()) return 0;
  for (const TreeEntry& entry : *entries) {
    if (entry.type == TreeEntry::Type::kFile) size += entry.size;
  }
  return size;
}

// The first Debian URI in the text of an apt sources file (one-line or deb822 form).
std::string MirrorIn(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string first, uri;
    words >> first;
    if (first == "deb" || first == "URIs:") {
      while (words >> uri && uri[0] == '[') {
        while (uri.back() != ']' && words >> uri) {}
      }
      if (uri.find("://") != std::string::npos && uri.find("security") == std::string::npos) {
        while (!uri.empty() && uri.back() == '/') uri.pop_back();
        return uri;
      }
    }
  }
  return "";
}

}  // namespace

std::string DebianMirror() {
  if (const char* set = std::getenv("CAPSULE_DEBIAN_MIRROR"); set != nullptr && *set) return set;
  std::vector<std::string> files = {"/etc/apt/sources.list"};
  if (DIR* dir = ::opendir("/etc/apt/sources.list.d")) {
    std::vector<std::string> found;
    while (struct dirent* entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name.size() > 8 && (name.rfind(".sources") == name.size() - 8 || name.rfind(".list") == name.size() - 5)) {
        found.push_back("/etc/apt/sources.list.d/" + name);
      }
    }
    ::closedir(dir);
    std::sort(found.begin(), found.end());
    files.insert(files.begin(), found.begin(), found.end());
  }
  for (const std::string& file : files) {
    Result<std::string> text = ReadFile(file);
    if (!text.ok()) continue;
    std::string mirror = MirrorIn(*text);
    if (!mirror.empty()) return mirror;
  }
  return "http://deb.debian.org/debian";
}

std::string SandboxCache::DefaultRoot() {
  const char* set = std::getenv("CAPSULE_SANDBOX_CACHE");
  return set != nullptr && *set ? set : "/var/cache/capsule/sandboxes";
}

Result<SandboxCache> SandboxCache::Open(const std::string& root) {
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(root));
  std::string real = RealPath(root);
  return SandboxCache(real.empty() ? root : real);
}

Result<std::string> SandboxCache::DeviceNodes() const {
  if (::geteuid() != 0) return std::string();
  std::string path = JoinPath(root_, kDevices);
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return Status::IOError(path, errno);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd dir, OpenFile(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (::fstat(dir.get(), &st) != 0) return Status::IOError(path, errno);
  if (st.st_uid != 0 || (st.st_mode & 0077) != 0) {
    if (::fchown(dir.get(), 0, 0) != 0 || ::fchmod(dir.get(), 0700) != 0) return Status::IOError(path, errno);
  }
  struct statvfs fs {};
  if (::fstatvfs(dir.get(), &fs) != 0) return Status::IOError(path, errno);
  if ((fs.f_flag & ST_NODEV) != 0) {
    return Status::FailedPrecondition(root_, "on a file system mounted nodev: the sandbox's device nodes cannot be made there");
  }
  for (const DeviceNode& node : kDeviceNodes) CAPSULE_RETURN_IF_ERROR(MakeDeviceNode(dir.get(), path, node));
  return path;
}

Result<UniqueFd> SandboxCache::Lock(const std::string& digest, int operation) const {
  std::string path = JoinPath(root_, ".lock-" + digest);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  while (::flock(fd.get(), operation) != 0) {
    if (errno == EWOULDBLOCK) return Status::FailedPrecondition("sandbox " + digest.substr(0, 12), "in use by a run");
    if (errno != EINTR) return Status::IOError(path, errno);
  }
  return fd;
}

Result<SandboxEntry> SandboxCache::Load(const std::string& digest) const {
  std::string dir = JoinPath(root_, digest);
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFile(JoinPath(dir, kMeta)));
  CAPSULE_ASSIGN_OR_RETURN(Json meta, ParseJson(text, JoinPath(dir, kMeta), Code::kCorruption));
  SandboxEntry entry;
  try {
    entry.digest = meta.at("digest").get<std::string>();
    entry.image = meta.at("image").get<std::string>();
    entry.packages = meta.at("packages").get<std::vector<std::string>>();
    entry.built = meta.at("built").get<int64_t>();
    entry.size = meta.at("size").get<uint64_t>();
  } catch (const Json::exception&) {
    return Status::Corruption(JoinPath(dir, kMeta), "not a sandbox record");
  }
  entry.rootfs = JoinPath(dir, kRootfs);
  struct stat st {};
  entry.last_used = ::stat(JoinPath(dir, kLastUse).c_str(), &st) == 0 ? st.st_mtim.tv_sec : entry.built;
  return entry;
}

Result<SandboxEntry> SandboxCache::BuildLocked(const SandboxSpec& spec, const std::string& digest) {
  CAPSULE_ASSIGN_OR_RETURN(std::string suite, spec.Suite());
  if (FindProgram("mmdebstrap").empty()) {
    return Status::FailedPrecondition("sandbox " + spec.image, "mmdebstrap is not installed (apt-get install mmdebstrap)");
  }
  // What a build cut short left of this digest: no one else builds it while we hold its lock.
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> left, ListTree(root_, {}));
  for (const TreeEntry& entry : left) {
    if (entry.path.find('/') == std::string::npos && entry.path.rfind(".build-" + digest + "-", 0) == 0) {
      CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(root_, entry.path)));
    }
  }
  std::string pattern = JoinPath(root_, ".build-" + digest + "-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) return Status::IOError(pattern, errno);
  std::string build = pattern;
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      if (!path.empty()) (void)RemoveTree(path);
    }
  } cleanup{build};
  std::string rootfs = JoinPath(build, kRootfs);
  std::string mirror = DebianMirror();
  std::vector<std::string> argv = {"mmdebstrap", "--variant=essential", "--components=main"};
  if (!spec.packages.empty()) {
    std::string include = "--include=", names;
    for (size_t i = 0; i < spec.packages.size(); ++i) {
      include += (i ? "," : "") + spec.packages[i];
      names += " " + spec.packages[i];  // checked names (IsPackageName): nothing for a shell to expand
    }
    argv.push_back(include);
    // mmdebstrap resolves the packages only after the essential system is installed: a name
    // the mirror lacks is found right after the download instead, by the same apt, in seconds.
    argv.push_back("--extract-hook=apt-get --simulate --quiet install" + names + " >/dev/null");
  }
  argv.insert(argv.end(), {suite, rootfs, mirror});
  ProcessOptions options;
  options.output_file = JoinPath(build, "build.log");
  options.null_input = true;  // mmdebstrap reads sources from standard input when it is not a terminal
  CAPSULE_ASSIGN_OR_RETURN(int exit_code, RunProcess(argv, options));
  if (exit_code != 0) return BuildFailure(options.output_file, exit_code, spec, mirror);
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(rootfs, kWorkspaceInside)));
  Json meta = {{"digest", digest}, {"image", spec.image}, {"suite", suite}, {"packages", spec.packages},
               {"mirror", mirror}, {"built", Now()}, {"size", TreeSize(rootfs)}};
  CAPSULE_ASSIGN_OR_RETURN(std::string meta_text, CanonicalJson(meta, kMeta));
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(build, kMeta), meta_text + "\n"));
  CAPSULE_RETURN_IF_ERROR(Touch(JoinPath(build, kLastUse)));
  // Every byte of the tree on disk before its name appears.
  {
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(build, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (::syncfs(fd.get()) != 0) return Status::IOError(build, errno);
  }
  std::string final_dir = JoinPath(root_, digest);
  if (::rename(build.c_str(), final_dir.c_str()) != 0) return Status::IOError(final_dir, errno);
  cleanup.path.clear();
  CAPSULE_RETURN_IF_ERROR(SyncDirectory(root_));
  return Load(digest);
}

Result<SandboxCache::Built> SandboxCache::Build(const SandboxSpec& spec) {
  auto start = std::chrono::steady_clock::now();
  CAPSULE_RETURN_IF_ERROR(spec.Suite().status());
  std::string digest = spec.Digest();
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd lock, Lock(digest, LOCK_EX));
  Built built;
  if (PathExists(JoinPath(JoinPath(root_, digest), kMeta))) {
    CAPSULE_RETURN_IF_ERROR(Touch(JoinPath(JoinPath(root_, digest), kLastUse)));
    CAPSULE_ASSIGN_OR_RETURN(built.entry, Load(digest));
    built.cache_hit = true;
  } else {
    CAPSULE_ASSIGN_OR_RETURN(built.entry, BuildLocked(spec, digest));
  }
  built.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return built;
}

Result<SandboxEntry> SandboxCache::Hold(const SandboxSpec& spec, SandboxHold* hold) {
  std::string digest = spec.Digest();
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd lock, Lock(digest, LOCK_SH));
  if (!PathExists(JoinPath(JoinPath(root_, digest), kMeta))) {
    return Status::NotFound("sandbox " + digest.substr(0, 12), "not built (capsule sandbox build)");
  }
  (void)Touch(JoinPath(JoinPath(root_, digest), kLastUse));  // a read-only cache still runs
  CAPSULE_ASSIGN_OR_RETURN(SandboxEntry entry, Load(digest));
  *hold = SandboxHold(std::move(lock));
  return entry;
}

Result<std::vector<SandboxEntry>> SandboxCache::List() const {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, ListTree(root_, {}));
  std::vector<SandboxEntry> out;
  for (const TreeEntry& entry : entries) {
    if (entry.type != TreeEntry::Type::kDirectory || entry.path.find('/') != std::string::npos ||
        !IsSha256Hex(entry.path)) {
      continue;
    }
    Result<SandboxEntry> loaded = Load(entry.path);
    if (loaded.ok()) out.push_back(std::move(*loaded));
  }
  return out;
}

Result<SandboxEntry> SandboxCache::Remove(const std::string& digest) {
  if (digest.size() < 8 || digest.size() > 64 ||
      !std::all_of(digest.begin(), digest.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'); })) {
    return Status::InvalidArgument(digest, "not a sandbox digest (8 to 64 lower-case hex digits, as capsule sandbox ls prints)");
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<SandboxEntry> all, List());
  std::vector<SandboxEntry> matching;
  for (SandboxEntry& entry : all) {
    if (entry.digest.compare(0, digest.size(), digest) == 0) matching.push_back(std::move(entry));
  }
  if (matching.empty()) return Status::NotFound("sandbox " + digest, "not in the cache " + root_);
  if (matching.size() > 1) return Status::InvalidArgument("sandbox " + digest, "names several sandboxes; give more digits");
  SandboxEntry entry = matching.front();
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd lock, Lock(entry.digest, LOCK_EX | LOCK_NB));
  // Out of its name in one step, then removed: a crash leaves debris, never half a sandbox.
  std::string doomed = JoinPath(root_, ".build-" + entry.digest + "-removed");
  (void)RemoveTree(doomed);
  if (::rename(JoinPath(root_, entry.digest).c_str(), doomed.c_str()) != 0) return Status::IOError(JoinPath(root_, entry.digest), errno);
  CAPSULE_RETURN_IF_ERROR(SyncDirectory(root_));
  CAPSULE_RETURN_IF_ERROR(RemoveTree(doomed));
  return entry;
}

}  // namespace capsule::sandbox
