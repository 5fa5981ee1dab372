#include "capsule/format/workspace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"

namespace capsule {

namespace {

Status Bad(const std::string& path, const std::string& why) {
  return Status::Corruption(kSnapshotPath, "'" + path + "': " + why);
}

}  // namespace

const char* SnapshotTypeName(SnapshotEntry::Type type) {
  switch (type) {
    case SnapshotEntry::Type::kFile: return "file";
    case SnapshotEntry::Type::kDirectory: return "dir";
    case SnapshotEntry::Type::kSymlink: return "link";
    case SnapshotEntry::Type::kFifo: return "fifo";
    case SnapshotEntry::Type::kSocket: return "socket";
    case SnapshotEntry::Type::kCharDevice: return "chr";
    case SnapshotEntry::Type::kBlockDevice: return "blk";
  }
  return "?";
}

mode_t SnapshotTypeBits(SnapshotEntry::Type type) {
  switch (type) {
    case SnapshotEntry::Type::kFile: return S_IFREG;
    case SnapshotEntry::Type::kDirectory: return S_IFDIR;
    case SnapshotEntry::Type::kSymlink: return S_IFLNK;
    case SnapshotEntry::Type::kFifo: return S_IFIFO;
    case SnapshotEntry::Type::kSocket: return S_IFSOCK;
    case SnapshotEntry::Type::kCharDevice: return S_IFCHR;
    case SnapshotEntry::Type::kBlockDevice: return S_IFBLK;
  }
  return 0;
}

namespace {

using Type = SnapshotEntry::Type;

bool IsDevice(Type type) { return type == Type::kCharDevice || type == Type::kBlockDevice; }

// The checks that span entries: a link group is one file, so its names agree on everything.
Status CheckLinkGroups(const std::map<std::string, SnapshotEntry>& entries) {
  std::map<uint64_t, const std::pair<const std::string, SnapshotEntry>*> first;
  for (const auto& item : entries) {
    const SnapshotEntry& entry = item.second;
    if (entry.link == 0) continue;
    auto [it, fresh] = first.emplace(entry.link, &item);
    if (fresh) continue;
    SnapshotEntry a = it->second->second, b = entry;
    if (!(a == b)) {
      return Bad(item.first, "hard link " + std::to_string(entry.link) + " differs from '" + it->second->first +
                                 "', another name of the same file");
    }
  }
  return Status::Ok();
}

// One entry's object as ToCanonicalText writes it: its keys in canonical order, exactly the
// keys its type has, every value in range. False for anything else, which the general reader
// then reads (or refuses with a reason).
bool ReadCanonicalEntry(CanonicalReader* in, SnapshotEntry* entry) {
  static constexpr std::string_view kKeys[] = {"gid", "link", "mode", "rdev", "sha256", "size", "target", "type", "uid"};
  enum Key { kGid, kLink, kMode, kRdev, kSha256, kSize, kTarget, kType, kUid, kKeyCount };
  bool has[kKeyCount] = {};
  uint64_t numbers[kKeyCount] = {};
  std::string type_name = "file";
  int next = 0;  // the first key that may still come
  for (bool first = true; !in->Literal("}"); first = false) {
    if (!in->Literal(first ? "{\"" : ",\"")) return false;
    int key = next;
    while (key < kKeyCount && !in->Literal(kKeys[key])) ++key;
    if (key == kKeyCount || !in->Literal("\":")) return false;
    has[key] = true;
    next = key + 1;
    bool read = key == kSha256 ? in->String(&entry->sha256)
                : key == kTarget ? in->String(&entry->target)
                : key == kType   ? in->String(&type_name) && type_name != "file"
                                 : in->Unsigned(&numbers[key]);
    if (!read) return false;
  }
  bool known = false;
  for (Type t : {Type::kFile, Type::kDirectory, Type::kSymlink, Type::kFifo, Type::kSocket, Type::kCharDevice,
                 Type::kBlockDevice}) {
    if (type_name == SnapshotTypeName(t)) {
      entry->type = t;
      known = true;
    }
  }
  const Type t = entry->type;
  const bool file = t == Type::kFile, symlink = t == Type::kSymlink;
  if (!known || has[kMode] == symlink || has[kRdev] != IsDevice(t) || has[kSha256] != file || has[kSize] != file ||
      has[kTarget] != symlink || (file && !IsSha256Hex(entry->sha256)) || numbers[kMode] > 07777 ||
      numbers[kGid] > UINT32_MAX || numbers[kUid] > UINT32_MAX ||
      (has[kLink] && (numbers[kLink] == 0 || t == Type::kDirectory))) {
    return false;
  }
  if (has[kMode]) entry->mode = static_cast<mode_t>(numbers[kMode]);
  entry->size = numbers[kSize];
  entry->rdev = numbers[kRdev];
  entry->link = numbers[kLink];
  if (has[kUid]) entry->uid = static_cast<uint32_t>(numbers[kUid]);
  if (has[kGid]) entry->gid = static_cast<uint32_t>(numbers[kGid]);
  return true;
}

}  // namespace

std::optional<Snapshot> Snapshot::ParseCanonical(std::string_view text) {
  CanonicalReader in(text);
  Snapshot snapshot;
  if (!in.Literal("{")) return {};
  std::string previous;
  for (bool first = true; !in.Literal("}"); first = false) {
    std::string path;
    SnapshotEntry entry;
    if ((!first && !in.Literal(",")) || !in.String(&path) || !in.Literal(":") || !ReadCanonicalEntry(&in, &entry)) {
      return {};
    }
    if ((!first && path <= previous) || !IsPlainRelativePath(path)) return {};
    previous = path;
    snapshot.entries_.emplace_hint(snapshot.entries_.end(), std::move(path), std::move(entry));
  }
  if (!in.AtEnd()) return {};
  return snapshot;
}

Status CheckSnapshotLinkGroups(const Snapshot& snapshot) { return CheckLinkGroups(snapshot.entries()); }

Result<Snapshot> Snapshot::Parse(std::string_view text) {
  if (std::optional<Snapshot> fast = ParseCanonical(text)) {
    CAPSULE_RETURN_IF_ERROR(CheckLinkGroups(fast->entries_));
    return std::move(*fast);
  }
  return ParseThroughJson(text);
}

Result<Snapshot> Snapshot::ParseThroughJson(std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, kSnapshotPath, Code::kCorruption));
  if (!json.is_object()) return Status::Corruption(kSnapshotPath, "not a JSON object");
  Snapshot snapshot;
  for (const auto& [path, value] : json.items()) {
    if (!IsPlainRelativePath(path)) return Bad(path, "unsafe path");
    if (!value.is_object()) return Bad(path, "entry is not an object");
    SnapshotEntry entry;
    if (value.contains("type") && !value["type"].is_string()) return Bad(path, "type is not a string");
    std::string type = value.value("type", "file");
    bool known = false;
    for (Type t : {Type::kFile, Type::kDirectory, Type::kSymlink, Type::kFifo, Type::kSocket, Type::kCharDevice,
                   Type::kBlockDevice}) {
      if (type == SnapshotTypeName(t)) {
        entry.type = t;
        known = true;
      }
    }
    if (!known) return Bad(path, "unknown type '" + type + "'");
    if (entry.type == Type::kFile) {
      if (!value.contains("sha256") || !value["sha256"].is_string() ||
          !IsSha256Hex(value["sha256"].get<std::string>()) || !value.contains("size") ||
          !value["size"].is_number_unsigned()) {
        return Bad(path, "a file needs sha256 and size");
      }
      entry.sha256 = value["sha256"];
      entry.size = value["size"];
    } else if (entry.type == Type::kSymlink) {
      if (!value.contains("target") || !value["target"].is_string()) return Bad(path, "a link needs a target");
      entry.target = value["target"];
    }
    if (entry.type != Type::kSymlink) {
      if (!value.contains("mode") || !value["mode"].is_number_unsigned() || value["mode"].get<uint64_t>() > 07777) {
        return Bad(path, "needs a mode (permission bits)");
      }
      entry.mode = static_cast<mode_t>(value["mode"].get<uint64_t>());
    }
    if (IsDevice(entry.type)) {
      if (!value.contains("rdev") || !value["rdev"].is_number_unsigned()) return Bad(path, "a device needs rdev");
      entry.rdev = value["rdev"];
    }
    if (value.contains("link")) {
      if (entry.type == Type::kDirectory) return Bad(path, "a folder cannot be a hard link");
      if (!value["link"].is_number_unsigned() || value["link"].get<uint64_t>() == 0) {
        return Bad(path, "link is not a positive link group number");
      }
      entry.link = value["link"];
    }
    for (auto [key, field] : {std::pair{"uid", &entry.uid}, std::pair{"gid", &entry.gid}}) {
      if (!value.contains(key)) continue;
      if (!value[key].is_number_unsigned() || value[key].get<uint64_t>() > UINT32_MAX) {
        return Bad(path, std::string(key) + " is not a 32-bit owner number");
      }
      *field = static_cast<uint32_t>(value[key].get<uint64_t>());
    }
    snapshot.entries_[path] = std::move(entry);
  }
  CAPSULE_RETURN_IF_ERROR(CheckLinkGroups(snapshot.entries_));
  return snapshot;
}

Result<Snapshot> Snapshot::Load(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(capsule_dir, kSnapshotPath));
  return Parse(text);
}

Result<Snapshot> Snapshot::Load(const DirFd& folder) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, folder.ReadFile(kSnapshotPath));
  return Parse(text);
}

Result<std::string> Snapshot::ToCanonicalText() const {
  // Room for the whole text, so that it is never copied as it grows: an entry is its name,
  // its digest or link text, and at most about 150 bytes of keys and numbers.
  size_t bound = 16;
  for (const auto& [path, entry] : entries_) bound += path.size() + entry.sha256.size() + entry.target.size() + 160;
  CanonicalWriter out;
  out.Reserve(bound);
  out.Raw("{");
  bool first = true;
  for (const auto& [path, entry] : entries_) {
    if (!first) out.Raw(",");
    first = false;
    out.String(path);
    out.Raw(":");
    // Each entry's keys in canonical (byte) order: gid, link, mode, rdev, sha256, size,
    // target, type, uid; each present only for the types that have it, as below.
    const bool file = entry.type == Type::kFile;
    const bool symlink = entry.type == Type::kSymlink;
    char sep = '{';
    auto key = [&](const char* name) {
      out.Raw(std::string_view(&sep, 1));
      sep = ',';
      out.Raw("\"");
      out.Raw(name);
      out.Raw("\":");
    };
    auto number = [&](const char* name, uint64_t value) {
      key(name);
      out.Unsigned(value);
    };
    auto string = [&](const char* name, std::string_view value) {
      key(name);
      out.String(value);
    };
    if (entry.gid) number("gid", *entry.gid);
    if (entry.link != 0) number("link", entry.link);
    if (!symlink) number("mode", entry.mode);
    if (IsDevice(entry.type)) number("rdev", entry.rdev);
    if (file) string("sha256", entry.sha256);
    if (file) number("size", entry.size);
    if (symlink) string("target", entry.target);
    if (!file) string("type", SnapshotTypeName(entry.type));
    if (entry.uid) number("uid", *entry.uid);
    out.Raw("}");
  }
  out.Raw("}");
  if (out.ok()) return out.Take();
  return ToCanonicalTextThroughJson();  // a string that needs escaping
}

Result<std::string> Snapshot::ToCanonicalTextThroughJson() const {
  Json json = Json::object();
  for (const auto& [path, entry] : entries_) {
    Json& out = json[path];
    switch (entry.type) {
      case Type::kFile:
        out = {{"sha256", entry.sha256}, {"size", entry.size}, {"mode", entry.mode}};
        break;
      case Type::kSymlink:
        out = {{"type", "link"}, {"target", entry.target}};
        break;
      default:
        out = {{"type", SnapshotTypeName(entry.type)}, {"mode", entry.mode}};
        if (IsDevice(entry.type)) out["rdev"] = entry.rdev;
        break;
    }
    if (entry.link != 0) out["link"] = entry.link;
    if (entry.uid) out["uid"] = *entry.uid;
    if (entry.gid) out["gid"] = *entry.gid;
  }
  return CanonicalJson(json, kSnapshotPath);
}

Status Snapshot::Save(const std::string& capsule_dir) const {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ToCanonicalText());
  return WriteFileAtomic(JoinPath(capsule_dir, kSnapshotPath), text);
}

const SnapshotEntry* Snapshot::Find(const std::string& path) const {
  auto it = entries_.find(path);
  return it == entries_.end() ? nullptr : &it->second;
}

namespace {

// artifacts/blobs of `capsule_dir`, made when missing, reached without following a link.
Result<DirFd> OpenBlobsDir(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(capsule_dir));
  CAPSULE_RETURN_IF_ERROR(root.MakeDir(DirName(kBlobsDir), 0755));
  CAPSULE_RETURN_IF_ERROR(root.MakeDir(kBlobsDir, 0755));
  return root.OpenDir(kBlobsDir);
}

}  // namespace

Result<std::string> PutBlobFromFd(const std::string& capsule_dir, int source_fd, uint64_t* size) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd blobs, OpenBlobsDir(capsule_dir));
  // Copy into a temporary blob while hashing; its name is known only at the end. 0600: the
  // workspace file's mode is the snapshot's to keep, the mount's to show (capsule(5)).
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile temp, blobs.CreateAtomic("incoming", kBlobMode));
  Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(source_fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("workspace source", errno);
    }
    if (n == 0) break;
    std::string_view chunk(buffer.data(), static_cast<size_t>(n));
    hasher.Update(chunk);
    CAPSULE_RETURN_IF_ERROR(temp.Append(chunk));
    total += static_cast<uint64_t>(n);
  }
  std::string sha = hasher.FinishHex();
  *size = total;
  std::string final_path = JoinPath(capsule_dir, BlobPath(sha));
  struct stat st;
  if (::fstatat(blobs.get(), sha.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return sha;  // stored once by content
  temp.Retarget(final_path);
  Status committed = temp.CommitNoReplace();
  // A blob's content is fixed by its name, so one placed by a racing writer is the same.
  if (!committed.ok() && committed.code() != Code::kAlreadyExists) return committed;
  return sha;
}

Result<std::string> PutBlob(const std::string& capsule_dir, std::string_view data) {
  std::string sha = Sha256Hex(data);
  CAPSULE_ASSIGN_OR_RETURN(DirFd blobs, OpenBlobsDir(capsule_dir));
  struct stat st;
  if (::fstatat(blobs.get(), sha.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return sha;
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile file, blobs.CreateAtomic(sha, kBlobMode));
  CAPSULE_RETURN_IF_ERROR(file.Append(data));
  Status committed = file.CommitNoReplace();
  if (!committed.ok() && committed.code() != Code::kAlreadyExists) return committed;
  return sha;
}

Status PutWorkspaceFile(const std::string& capsule_dir, const std::string& path,
                        const std::string& source_path) {
  CAPSULE_RETURN_IF_ERROR(CheckPlainRelativePath(path, "workspace file"));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(source_path, O_RDONLY));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::IOError(source_path, errno);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(source_path, "not a regular file");
  SnapshotEntry entry;
  CAPSULE_ASSIGN_OR_RETURN(entry.sha256, PutBlobFromFd(capsule_dir, fd.get(), &entry.size));
  entry.mode = st.st_mode & 07777;
  CAPSULE_ASSIGN_OR_RETURN(Snapshot snapshot, Snapshot::Load(capsule_dir));
  snapshot.Set(path, entry);
  return snapshot.Save(capsule_dir);
}

Result<std::string> ReadWorkspaceFile(const std::string& capsule_dir, const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(Snapshot snapshot, Snapshot::Load(capsule_dir));
  const SnapshotEntry* entry = snapshot.Find(path);
  if (entry == nullptr) return Status::NotFound("files/" + path, "not in the workspace");
  if (entry->type != SnapshotEntry::Type::kFile) return Status::InvalidArgument("files/" + path, "not a regular file");
  std::string blob = BlobPath(entry->sha256);
  CAPSULE_ASSIGN_OR_RETURN(std::string data, ReadFileBeneath(capsule_dir, blob));
  if (Sha256Hex(data) != entry->sha256) return Status::Corruption(blob, "digest does not match its name");
  return data;
}

bool IsEmptyBlobPath(const std::string& blob_path) {
  static const std::string kEmptyBlob = BlobPath(Sha256Hex(""));
  return blob_path == kEmptyBlob;
}

namespace {

// The digests the files of `snapshot` name, viewing its entries.
// The digests the snapshot's files name, sorted (for binary_search).
std::vector<std::string_view> SortedNamedDigests(const Snapshot& snapshot) {
  std::vector<std::string_view> named;
  named.reserve(snapshot.entries().size());
  for (const auto& [path, entry] : snapshot.entries()) {
    if (entry.type == SnapshotEntry::Type::kFile) named.push_back(entry.sha256);
  }
  std::sort(named.begin(), named.end());
  return named;
}

}  // namespace

Result<std::vector<std::string>> UnreferencedBlobs(const std::string& capsule_dir, const Snapshot& snapshot) {
  const std::vector<std::string_view> named = SortedNamedDigests(snapshot);
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> blobs, root.ListFileNames(kBlobsDir));
  std::vector<std::string> unreferenced;
  for (const std::string& name : blobs) {
    std::string path = std::string(kBlobsDir) + "/" + name;
    if (!IsBlobPath(path) || IsEmptyBlobPath(path)) continue;
    if (!std::binary_search(named.begin(), named.end(), std::string_view(name))) unreferenced.push_back(std::move(path));
  }
  return unreferenced;
}

std::vector<std::string> UnreferencedBlobsOf(const Manifest& manifest, const Snapshot& snapshot) {
  const std::vector<std::string_view> named = SortedNamedDigests(snapshot);
  const std::string prefix = std::string(kBlobsDir) + "/";
  std::vector<std::string> unreferenced;
  for (auto it = manifest.files.lower_bound(prefix); it != manifest.files.end() && it->first.starts_with(prefix); ++it) {
    const std::string& path = it->first;
    if (!IsBlobPath(path) || IsEmptyBlobPath(path)) continue;
    if (!std::binary_search(named.begin(), named.end(), std::string_view(path).substr(prefix.size()))) {
      unreferenced.push_back(path);
    }
  }
  return unreferenced;
}

Status RemoveBlobs(const std::string& capsule_dir, const std::vector<std::string>& blob_paths) {
  if (blob_paths.empty()) return Status::Ok();
  // Reached without a link: a blobs folder swapped for one fails the removal, never removes
  // what the link points to.
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(DirFd blobs, root.OpenDir(kBlobsDir));
  for (const std::string& path : blob_paths) {
    if (DirName(path) != kBlobsDir) return Status::InvalidArgument(path, "not a blob");
    if (::unlinkat(blobs.get(), BaseName(path).c_str(), 0) != 0 && errno != ENOENT) {
      return Status::IOError(blobs.PathOf(BaseName(path)), errno);
    }
  }
  return blobs.SyncDir();
}

}  // namespace capsule
