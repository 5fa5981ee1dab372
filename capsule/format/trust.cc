#include "capsule/format/trust.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/mount_lock.h"
#include "capsule/format/verify.h"

namespace capsule {

namespace {

// The refusal: every problem, then what to do about them.
Status Untrusted(const std::string& dir, const std::vector<std::string>& problems) {
  std::string why = "edited behind its manifest (" + std::to_string(problems.size()) +
                    (problems.size() == 1 ? " difference" : " differences") + "): ";
  for (size_t i = 0; i < problems.size(); ++i) why += (i == 0 ? "" : "; ") + problems[i];
  why += "; if the edits are meant, capsule accept " + dir + " takes them (recorded in the journal)";
  return Status::Corruption(dir, why);
}

// The last write recorded for each path: its digest, or nullopt when removed. A torn last
// line (a crash mid-append) is ignored; so is anything after it.
std::map<std::string, std::optional<FileDigest>> LoadMountWrites(const DirFd& folder) {
  std::map<std::string, std::optional<FileDigest>> writes;
  Result<std::string> text = folder.ReadFile(local::kMountWrites);
  if (!text.ok()) return writes;
  size_t at = 0;
  while (at < text->size()) {
    size_t end = text->find('\n', at);
    if (end == std::string::npos) break;
    Result<Json> line = ParseJson(std::string_view(*text).substr(at, end - at), local::kMountWrites, Code::kCorruption);
    at = end + 1;
    if (!line.ok() || !line->is_object() || !line->value("path", Json()).is_string()) break;
    std::string path = line->value("path", "");
    const Json& sha = line->value("sha256", Json());
    const Json& size = line->value("size", Json());
    if (sha.is_string() && size.is_number_integer() && size.get<int64_t>() >= 0) {
      writes[path] = FileDigest{sha.get<std::string>(), size.get<uint64_t>()};
    } else {
      writes[path] = std::nullopt;
    }
  }
  return writes;
}

// Whether the file at `path` is found as `written` says the mount left it.
bool AsWritten(const std::optional<FileDigest>& written, const NonBlobReport& report, const std::string& path) {
  auto found = report.files.find(path);
  if (!written) return found == report.files.end();
  return found != report.files.end() && found->second.sha256 == written->sha256 && found->second.size == written->size;
}

}  // namespace

Status CheckTrusted(const std::string& dir) {
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir));
  return CheckTrustedForMount(dir, manifest);
}

Status CheckTrustedForMount(const std::string& dir, const Manifest& manifest) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd folder, DirFd::OpenGiven(dir));
  return CheckTrustedForMount(folder, manifest);
}

Status CheckTrustedForMount(const DirFd& folder, const Manifest& manifest) {
  const std::string& dir = folder.path();
  CAPSULE_ASSIGN_OR_RETURN(NonBlobReport report, VerifyNonBlobFiles(folder, manifest));
  if (report.problems.empty()) return Status::Ok();
  const std::map<std::string, std::optional<FileDigest>> writes = LoadMountWrites(folder);
  std::vector<std::string> left;
  for (const std::string& problem : report.problems) {
    std::string path = problem.substr(0, problem.find(": "));
    auto written = writes.find(path);
    if (written != writes.end() && AsWritten(written->second, report, path)) continue;  // the crashed mount's own
    left.push_back(problem);
  }
  return left.empty() ? Status::Ok() : Untrusted(dir, left);
}

void SetAsidePendingWrites(const DirFd& folder, VerifyReport* report) {
  const std::map<std::string, std::optional<FileDigest>> writes = LoadMountWrites(folder);
  auto ends_with = [](const std::string& text, std::string_view tail) {
    return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
  };
  std::vector<std::string> left;
  for (std::string& problem : report->problems) {
    const size_t colon = problem.find(": ");
    const std::string path = problem.substr(0, colon);
    bool pending = false;
    if (IsBlobPath(path)) {
      // Stored by a commit since the checkpoint; "blob digest does not match its name" stays.
      pending = ends_with(problem, ": not in manifest") ||
                problem.find(": unreferenced blob: ", colon) == colon;
    } else if (auto written = writes.find(path); written != writes.end()) {
      Result<std::optional<FileDigest>> found = DigestBeneath(folder, path);
      pending = found.ok() && *found == written->second;
    }
    (pending ? report->pending : left).push_back(std::move(problem));
  }
  report->problems = std::move(left);
}

Status RecordMountWrite(const DirFd& folder, const std::string& path, const std::optional<FileDigest>& written) {
  Json line = {{"path", path}};
  if (written) {
    line["sha256"] = written->sha256;
    line["size"] = written->size;
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(line, local::kMountWrites));
  text += '\n';
  // Beneath the capsule folder held open: a .capsule swapped for a link is refused, not followed.
  const std::string log = folder.PathOf(local::kMountWrites);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, folder.OpenFile(local::kMountWrites, O_WRONLY | O_CREAT | O_APPEND, 0600));
  CAPSULE_RETURN_IF_ERROR(WriteAll(fd.get(), text, log));  // one write: lines never interleave
  if (::fdatasync(fd.get()) != 0) return Status::IOError(log, errno);
  return Status::Ok();
}

Result<std::vector<std::string>> RefreshMountWrites(const DirFd& folder, const std::vector<std::string>& paths,
                                                    Manifest* manifest, DigestCache* growing) {
  const std::map<std::string, std::optional<FileDigest>> writes = LoadMountWrites(folder);
  std::vector<std::string> edited;
  for (const std::string& path : paths) {
    Result<std::optional<FileDigest>> hashed = DigestBeneath(folder, path, growing);
    if (!hashed.ok() && hashed.status().code() == Code::kInvalidArgument) {
      // A link (or a folder) where a file belongs: never read, never sealed.
      edited.push_back(path + ": " + hashed.status().message());
      continue;
    }
    if (!hashed.ok()) return hashed.status();
    std::optional<FileDigest> found = std::move(hashed).value();
    auto listed_at = manifest->files.find(path);
    const std::optional<FileDigest> listed =
        listed_at == manifest->files.end() ? std::nullopt : std::optional<FileDigest>(listed_at->second);
    auto written = writes.find(path);
    const bool as_listed = found == listed;
    const bool as_written = written != writes.end() && written->second == found;
    if (path != kJournalPath && !as_listed && !as_written) {
      std::string why = !found ? "removed" : !listed ? "added" : "edited";
      edited.push_back(path + ": " + why + " beside the mount, not written by it");
      continue;  // the manifest keeps what it had
    }
    if (found) {
      manifest->files[path] = std::move(*found);
    } else {
      manifest->files.erase(path);
    }
  }
  return edited;
}

Status ClearMountWrites(const DirFd& folder) {
  Status removed = folder.Unlink(local::kMountWrites);
  if (!removed.ok() && removed.code() != Code::kNotFound) return removed;
  return Status::Ok();
}

Result<std::vector<AcceptedEdit>> FindEdits(const std::string& dir) {
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir));
  CAPSULE_ASSIGN_OR_RETURN(NonBlobReport report, VerifyNonBlobFiles(dir, manifest));
  std::map<std::string, std::string> whys;
  for (const std::string& problem : report.problems) {
    const size_t colon = problem.find(": ");
    std::string& why = whys[problem.substr(0, colon)];
    why += (why.empty() ? "" : "; ") + (colon == std::string::npos ? problem : problem.substr(colon + 2));
  }
  std::vector<AcceptedEdit> edits;
  for (const std::string& path : report.paths) {
    AcceptedEdit edit;
    edit.path = path;
    edit.why = whys[path];
    if (auto listed = manifest.files.find(path); listed != manifest.files.end()) edit.before = listed->second;
    if (auto found = report.files.find(path); found != report.files.end()) {
      edit.after = FileDigest{found->second.sha256, found->second.size};
    }
    edits.push_back(std::move(edit));
  }
  return edits;
}

Status AcceptEdits(const std::string& dir, const std::vector<AcceptedEdit>& edits,
                   const std::function<Status()>& record) {
  // Held while the manifest is re-sealed: no mount starts meanwhile.
  Result<UniqueFd> lock = LockForMount(dir);
  if (!lock.ok()) {
    if (lock.status().code() != Code::kAlreadyExists) return lock.status();
    return Status::FailedPrecondition(dir, "mounted: capsule accept takes the edits of a capsule at rest; unmount it "
                                           "first (fusermount3 -u MOUNTPOINT)");
  }
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir));
  for (const AcceptedEdit& edit : edits) {
    if (edit.after) {
      manifest.files[edit.path] = *edit.after;
    } else {
      manifest.files.erase(edit.path);
    }
  }
  if (record) CAPSULE_RETURN_IF_ERROR(record());
  CAPSULE_RETURN_IF_ERROR(manifest.Save(dir));
  CAPSULE_ASSIGN_OR_RETURN(DirFd folder, DirFd::Open(dir));
  return ClearMountWrites(folder);
}

}  // namespace capsule
