#include "capsule/format/verify.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <future>
#include <iterator>
#include <set>
#include <string_view>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/parallel.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "capsule/format/attachments.h"
#include "capsule/format/documents.h"
#include "capsule/format/harness.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/keys.h"
#include "capsule/format/folder_modes.h"
#include "capsule/format/layout.h"
#include "capsule/format/workspace.h"

namespace capsule {

namespace {

const char* const kRequiredFiles[] = {kWorkingMemoryPath, kJournalPath, kVectorIndexPath,
                                      kSnapshotPath, kEnvironmentSpecPath};

// The files read whole for their content to be checked; the journal is read apart, a block
// at a time (VerifyOptions::check_journal).
bool IsDocument(const std::string& path) { return path == kSnapshotPath || IsCheckedDocument(path); }

bool InBlobsFolder(std::string_view path) {
  constexpr std::string_view kPrefix = "artifacts/blobs/";
  static_assert(kPrefix.substr(0, kPrefix.size() - 1) == std::string_view(kBlobsDir));
  return path.substr(0, kPrefix.size()) == kPrefix;
}

// Appends the blobs among `files` (each named by its digest) to `found`, in digest order.
void AddObservedBlobs(const std::map<std::string, ObservedFile>& files, std::vector<FoundBlob>* found) {
  const size_t digest_at = std::string_view(kBlobsDir).size() + 1;
  for (auto it = files.lower_bound(std::string(kBlobsDir) + "/"); it != files.end() && InBlobsFolder(it->first);
       ++it) {
    if (IsBlobPath(it->first)) found->push_back(FoundBlob{std::string_view(it->first).substr(digest_at), it->second.size});
  }
}

void CheckSnapshot(const std::string& text, const std::map<std::string, ObservedFile>& files,
                   std::vector<std::string>* problems) {
  Result<Snapshot> snapshot = Snapshot::Parse(text);
  if (!snapshot.ok()) {
    problems->push_back(snapshot.status().message());
    return;
  }
  // The blobs found, in digest order (their paths' order).
  std::vector<FoundBlob> blobs;
  AddObservedBlobs(files, &blobs);
  CheckSnapshotBlobs(*snapshot, blobs, problems);
}

// With a public key to check against: the export signature (signature.json beside the
// manifest, in a tar or in a folder extracted from one) must be there and verify.
void CheckSignature(const std::string& manifest_text, const std::optional<std::string>& signature_text,
                    const VerifyOptions& options, const char* missing, VerifyReport* report) {
  if (!options.public_key_hex) return;
  if (!signature_text) {
    report->problems.push_back(std::string(kSignaturePath) + ": missing (" + missing + ")");
    return;
  }
  Result<Json> sig = ParseJson(*signature_text, kSignaturePath, Code::kCorruption);
  Result<std::string> raw = Status::Corruption(kSignaturePath, "no signature");
  if (sig.ok() && sig->is_object() && sig->value("signature", Json()).is_string()) {
    raw = HexDecode(sig->value("signature", ""), kSignaturePath);
  }
  if (!raw.ok()) {
    report->problems.push_back(std::string(kSignaturePath) + ": malformed");
  } else if (!Ed25519Verify(*options.public_key_hex, ExportSignatureMessage(manifest_text), *raw).ok()) {
    report->problems.push_back(std::string(kSignaturePath) + ": signature does not verify with the given public key");
  } else {
    report->signer = *options.public_key_hex;
  }
}

// A regular file listed by name only.
TreeEntry ListedFile(std::string path) {
  TreeEntry entry;
  entry.path = std::move(path);
  entry.type = TreeEntry::Type::kFile;
  return entry;
}

// The blobs folder of `dir` (a real folder) listed by name, without a stat of each blob
// where the file system gives entry types, for VerifyOptions::trust_remembered_blobs: its
// regular files join `entries` (their size unknown) where ListTree would have put them.
// Anything else there is listed as ListTree lists it, to be judged the same way.
Status AddBlobsByName(const DirFd& root, std::vector<TreeEntry>* entries) {
  std::vector<std::string> others;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> names, root.ListFileNames(kBlobsDir, &others));
  std::vector<TreeEntry> listed;
  listed.reserve(names.size());
  for (std::string& name : names) listed.push_back(ListedFile(std::string(kBlobsDir) + "/" + name));
  if (!others.empty()) {
    CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, root.ListTree(kBlobsDir));
    for (TreeEntry& entry : tree) {
      if (entry.type == TreeEntry::Type::kFile && entry.path.find('/') == std::string::npos) continue;  // named above
      entry.path = std::string(kBlobsDir) + "/" + entry.path;
      listed.push_back(std::move(entry));
    }
    std::sort(listed.begin(), listed.end(), [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });
  }
  // In path order among the rest, as ListTree would list them.
  auto at = std::lower_bound(entries->begin(), entries->end(), std::string(kBlobsDir) + "/",
                             [](const TreeEntry& entry, const std::string& path) { return entry.path < path; });
  entries->insert(at, std::make_move_iterator(listed.begin()), std::make_move_iterator(listed.end()));
  return Status::Ok();
}

}  // namespace

bool IsAppendOnlyPath(const std::string& path) { return path == kJournalPath; }

void CheckSnapshotBlobs(const Snapshot& snapshot, const std::vector<FoundBlob>& blobs,
                        std::vector<std::string>* problems) {
  // As Snapshot::Parse would refuse it, for a snapshot that was never parsed.
  if (Status groups = CheckSnapshotLinkGroups(snapshot); !groups.ok()) {
    problems->push_back(groups.message());
    return;
  }
  std::vector<char> named(blobs.size(), 0);
  for (const auto& [path, entry] : snapshot.entries()) {
    if (entry.type != SnapshotEntry::Type::kFile) continue;
    auto blob = std::lower_bound(blobs.begin(), blobs.end(), std::string_view(entry.sha256),
                                 [](const FoundBlob& found, std::string_view sha256) { return found.sha256 < sha256; });
    if (blob == blobs.end() || blob->sha256 != entry.sha256) {
      problems->push_back(std::string(kSnapshotPath) + ": files/" + path + ": blob " + entry.sha256 + " missing");
      continue;
    }
    named[blob - blobs.begin()] = 1;
    if (blob->size != entry.size) {
      problems->push_back(std::string(kSnapshotPath) + ": files/" + path + ": size differs from its blob");
    }
  }
  // Deleted content that stayed: it would travel with the agent.
  static const std::string kEmptyDigest = Sha256Hex("");
  for (size_t i = 0; i < blobs.size(); ++i) {
    if (named[i] || blobs[i].sha256 == kEmptyDigest) continue;
    problems->push_back(BlobPath(std::string(blobs[i].sha256)) +
                        ": unreferenced blob: no file of the snapshot names it (capsule gc removes it)");
  }
}

// Whether `path` is read whole to have its content checked; a document too large for that is
// reported instead of passed over.
bool ReadToCheck(const std::string& path, uint64_t size, const VerifyOptions& options,
                 std::vector<std::string>* problems) {
  if (!IsDocument(path)) return false;
  if (size <= options.max_document_size) return true;
  problems->push_back(path + ": too large to check (" + std::to_string(size) + " bytes; documents are read up to " +
                      std::to_string(options.max_document_size) + ")");
  return false;
}

std::string ExportSignatureMessage(const std::string& manifest_text) {
  return "capsule export signature v1\n" + manifest_text;
}

namespace {

// Each path of `listed_files` (manifest entries) against what was found at it, worded as
// capsule verify words it: missing, not in manifest, truncated, altered, a blob or attachment
// whose name is not its digest. Appends (path, problem) pairs.
void CompareWithManifest(const std::map<std::string, FileDigest>& listed_files,
                         const std::map<std::string, ObservedFile>& files,
                         std::vector<std::pair<std::string, std::string>>* found_out) {
  auto& found = *found_out;
  // Both maps are sorted by path: one walk side by side finds what each lacks.
  auto listed = listed_files.begin();
  auto seen = files.begin();
  while (listed != listed_files.end() || seen != files.end()) {
    const bool only_listed = seen == files.end() || (listed != listed_files.end() && listed->first < seen->first);
    const bool only_seen = !only_listed && (listed == listed_files.end() || seen->first < listed->first);
    if (only_listed) {
      found.emplace_back(listed->first, "missing");
      ++listed;
      continue;
    }
    const auto& [path, observed] = *seen;
    if (only_seen) {
      found.emplace_back(path, "not in manifest");
    } else {
      const FileDigest& expected = listed->second;
      if (IsAppendOnlyPath(path)) {
        if (observed.size < expected.size) {
          found.emplace_back(path, "truncated (" + std::to_string(observed.size) + " of " +
                                       std::to_string(expected.size) + " bytes)");
        } else if ((observed.size == expected.size ? observed.sha256 : observed.prefix_sha256) != expected.sha256) {
          found.emplace_back(path, "digest mismatch (in the part the manifest covers)");
        }
      } else if (observed.size < expected.size) {
        found.emplace_back(path, "truncated (" + std::to_string(observed.size) + " of " +
                                     std::to_string(expected.size) + " bytes)");
      } else if (observed.size > expected.size) {
        found.emplace_back(path, "size mismatch (" + std::to_string(observed.size) + " bytes, manifest says " +
                                     std::to_string(expected.size) + ")");
      } else if (observed.sha256 != expected.sha256) {
        found.emplace_back(path, "digest mismatch");
      }
      ++listed;
    }
    if (InBlobsFolder(path)) {
      if (!IsBlobPath(path)) {
        found.emplace_back(path, "not a blob name (64 hex digits of its SHA-256)");
      } else if (path.compare(path.size() - 64, 64, observed.sha256) != 0) {
        found.emplace_back(path, "blob digest does not match its name");
      }
    } else if (IsAttachmentsPath(path)) {
      // Events name attachments by digest: a name that lies would render other bytes.
      if (std::optional<std::string> problem = AttachmentNameProblem(path, observed.sha256, observed.size)) {
        found.emplace_back(path, std::move(*problem));
      }
    }
    ++seen;
  }
}

}  // namespace

void CheckAgainstManifest(const Manifest& manifest, const std::map<std::string, ObservedFile>& files,
                          const std::map<std::string, std::string>& documents, const ReadAtFunction& journal,
                          const VerifyOptions& options, std::vector<std::string>* problems,
                          const std::vector<std::string>* snapshot_problems) {
  std::vector<std::pair<std::string, std::string>> found;  // (path, problem) to sort by path
  for (const char* required : kRequiredFiles) {
    if (!manifest.files.count(required)) found.emplace_back(required, "missing from the manifest (the layout requires it)");
  }
  CompareWithManifest(manifest.files, files, &found);
  std::sort(found.begin(), found.end());
  for (auto& [path, why] : found) problems->push_back(path + ": " + why);

  if (snapshot_problems != nullptr) {
    problems->insert(problems->end(), snapshot_problems->begin(), snapshot_problems->end());
  } else if (auto snapshot = documents.find(kSnapshotPath); snapshot != documents.end()) {
    CheckSnapshot(snapshot->second, files, problems);
  }
  // Every skill folder holds a SKILL.md.
  std::set<std::string> skills_without;
  const std::string skills = std::string(kSkillsDir) + "/";
  for (const auto& [path, observed] : files) {
    if (path.rfind(skills, 0) != 0 || path.find('/', skills.size()) == std::string::npos) continue;
    std::string folder = path.substr(0, path.find('/', skills.size()));
    if (files.count(folder + "/" + kSkillFileName) == 0) skills_without.insert(folder + "/" + kSkillFileName);
  }
  for (const std::string& path : skills_without) problems->push_back(path + ": missing: every skill folder holds a SKILL.md");
  // The environment spec, schedules, threads and skills (documents.h).
  for (const auto& [path, text] : documents) {
    if (!IsCheckedDocument(path)) continue;
    Status checked = CheckDocument(path, text);
    if (!checked.ok()) problems->push_back(checked.message());
  }
  if (journal && options.check_journal) {
    for (std::string& line : options.check_journal(journal)) problems->push_back(std::move(line));
  }
}

namespace {

// What was found on disk at the paths a verify of a folder read.
struct Observed {
  std::map<std::string, ObservedFile> files;
  std::map<std::string, std::string> documents;  // the texts checked by their content
  std::optional<std::string> signature_text;     // signature.json, read with a public key to check
  UniqueFd journal_fd;
  ReadAtFunction journal;  // for VerifyOptions::check_journal
  bool snapshot_checked = false;  // the snapshot was found, and is not too large to check
  bool read_documents = true;     // set false before ObserveFiles: files hashed, no text kept
};

// Hashes the files of `dir` listed in `entries` (in path order) as a verify does, skipping
// the manifest, debris and folders (anything else but a regular file is a problem), with the
// prefix of the journal `manifest` covers. `trust_blobs`: VerifyOptions::trust_remembered_blobs
// holds, and the blobs in `entries` were listed by name only. `read_snapshot`: the snapshot's
// text joins the documents.
Status ObserveFiles(const DirFd& root, const std::vector<TreeEntry>& entries, const Manifest& manifest,
                    bool trust_blobs, bool read_snapshot, const VerifyOptions& options, Observed* out,
                    std::vector<std::string>* problems) {
  // Every file is read beneath the folder held open, never through a link: one put where a
  // file was listed is refused, naming it, instead of read.
  const std::string& dir = root.path();
  auto open = [&](const std::string& path) { return root.OpenFile(path, O_RDONLY); };
  auto read = [&](const std::string& path) -> Result<std::string> {
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, open(path));
    return ReadFd(fd.get(), JoinPath(dir, path));
  };
  std::vector<const TreeEntry*> to_hash;
  for (const TreeEntry& entry : entries) {
    if (entry.path == kManifestPath || IsTempDebris(entry.path)) continue;
    if (entry.path == kSignaturePath && entry.type == TreeEntry::Type::kFile && !manifest.files.count(entry.path)) {
      // A folder extracted from a signed export (tar -x) holds its signature beside the
      // manifest: checked as in the tar, not a file of the capsule (unless a manifest
      // written since lists it, as any other file).
      if (options.public_key_hex) {
        CAPSULE_ASSIGN_OR_RETURN(out->signature_text, read(entry.path));
      }
      continue;
    }
    if (entry.type == TreeEntry::Type::kDirectory) continue;
    if (entry.type != TreeEntry::Type::kFile) {
      problems->push_back(entry.path + ": not a regular file");
      continue;
    }
    to_hash.push_back(&entry);
  }
  // Largest first, so that the threads finish together; ties stay in path order, so that
  // the problems found come in the same order whatever else was listed.
  std::stable_sort(to_hash.begin(), to_hash.end(),
                   [](const TreeEntry* a, const TreeEntry* b) { return a->size > b->size; });
  if (options.progress != nullptr) {
    uint64_t total = 0;
    for (const TreeEntry* entry : to_hash) total += entry->size;
    options.progress->Begin("verify", total, to_hash.size());
  }
  std::vector<Result<std::string>> digests(to_hash.size(), Result<std::string>(std::string()));
  std::vector<uint64_t> sizes(to_hash.size());
  std::vector<std::string> prefixes(to_hash.size());
  // The blobs a trusted cache remembers need no thread: answered here, in one pass.
  std::vector<size_t> to_read;
  to_read.reserve(to_hash.size());
  for (size_t i = 0; i < to_hash.size(); ++i) {
    const std::string& path = to_hash[i]->path;
    std::optional<DigestCache::Digest> remembered;
    if (trust_blobs && IsBlobPath(path)) remembered = options.blob_digests->Remembered(JoinPath(dir, path));
    if (!remembered) {
      to_read.push_back(i);
      continue;
    }
    digests[i] = std::move(remembered->sha256);
    sizes[i] = remembered->size;
    if (options.progress != nullptr) options.progress->Add(sizes[i], 1);
  }
  ParallelFor(to_read.size(), options.threads, [&](size_t k) {
    const size_t i = to_read[k];
    const std::string& path = to_hash[i]->path;
    const std::string full = JoinPath(dir, path);
    Result<UniqueFd> fd = open(path);
    if (!fd.ok()) {
      digests[i] = fd.status();
      return;
    }
    auto listed = IsAppendOnlyPath(path) ? manifest.files.find(path) : manifest.files.end();
    if (listed != manifest.files.end() && trust_blobs) {
      digests[i] = options.blob_digests->Sha256GrowingOpened(fd->get(), full, listed->second.size, &prefixes[i],
                                                             &sizes[i]);
    } else if (listed != manifest.files.end()) {
      digests[i] = Sha256FdWithPrefix(fd->get(), full, listed->second.size, &prefixes[i], &sizes[i], options.progress);
    } else if (options.blob_digests != nullptr && IsBlobPath(path)) {
      digests[i] = trust_blobs  // listed by name only: its identity comes from a stat
                       ? options.blob_digests->Sha256Opened(fd->get(), full, &sizes[i])
                       : options.blob_digests->Sha256Opened(fd->get(), full, *to_hash[i], &sizes[i]);
      if (options.progress != nullptr) options.progress->Add(sizes[i], 0);
    } else {
      digests[i] = Sha256FdWithPrefix(fd->get(), full, UINT64_MAX, nullptr, &sizes[i], options.progress);
    }
    if (options.progress != nullptr) options.progress->Add(0, 1);
  });

  for (size_t i = 0; i < to_hash.size(); ++i) {
    const std::string& path = to_hash[i]->path;
    if (!digests[i].ok()) {
      problems->push_back(path + ": unreadable: " + digests[i].status().message());
      continue;
    }
    out->files[path] = ObservedFile{*digests[i], sizes[i], prefixes[i]};
    if (!out->read_documents) continue;
    if (!ReadToCheck(path, sizes[i], options, problems)) continue;
    if (path == kSnapshotPath) out->snapshot_checked = true;
    if (read_snapshot || path != kSnapshotPath) {
      CAPSULE_ASSIGN_OR_RETURN(out->documents[path], read(path));
    }
  }
  if (out->files.count(kJournalPath) && options.check_journal) {
    std::string path = JoinPath(dir, kJournalPath);
    Result<UniqueFd> opened = open(kJournalPath);
    if (!opened.ok()) {
      problems->push_back(std::string(kJournalPath) + ": unreadable: " + opened.status().message());
    } else {
      out->journal_fd = std::move(*opened);
      out->journal = FileReadAt(out->journal_fd.get(), path);
    }
  }
  return Status::Ok();
}

// Whether the blobs folder of the capsule folder `root` holds is a real folder (not a link to
// one, not a file), looked at beneath `root`.
bool BlobsFolderIsReal(const DirFd& root) {
  Result<struct stat> st = root.Stat(kBlobsDir);
  return st.ok() && S_ISDIR(st->st_mode);
}

}  // namespace

Result<VerifyReport> VerifyFolder(const std::string& dir, const VerifyOptions& options) {
  VerifyReport report;
  // The folder is opened once; every file of it is read beneath it, never through a link.
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  Result<std::string> manifest_text = root.ReadFile(kManifestPath);
  if (!manifest_text.ok()) {
    if (manifest_text.status().code() == Code::kNotFound) {
      report.problems.push_back(std::string(kManifestPath) + ": missing");
      return report;
    }
    return manifest_text.status();
  }
  Result<Manifest> manifest = Manifest::Parse(*manifest_text);
  if (!manifest.ok()) {
    report.problems.push_back(manifest.status().message());
    return report;
  }
  // A blobs "folder" that is not a real one is listed as ListTree lists it, untrusted.
  const bool trust_blobs = options.blob_digests != nullptr && options.trust_remembered_blobs && BlobsFolderIsReal(root);
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, trust_blobs ? root.ListTree("", {kLocalDir, kBlobsDir})
                                                                       : root.ListTree("", {kLocalDir}));
  if (trust_blobs) CAPSULE_RETURN_IF_ERROR(AddBlobsByName(root, &entries));
  Observed observed;
  CAPSULE_RETURN_IF_ERROR(ObserveFiles(root, entries, *manifest, trust_blobs, /*read_snapshot=*/true, options,
                                       &observed, &report.problems));
  CheckAgainstManifest(*manifest, observed.files, observed.documents, observed.journal, options, &report.problems);
  CheckSignature(*manifest_text, observed.signature_text, options,
                 "a folder holds one only when extracted from a signed export (capsule export --sign)", &report);
  report.files_checked = manifest->files.size();
  report.manifest = std::move(*manifest);
  report.warnings = FolderModeWarnings(dir);
  return report;
}

Result<NonBlobReport> VerifyNonBlobFiles(const std::string& dir, const Manifest& manifest) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  return VerifyNonBlobFiles(root, manifest);
}

Result<NonBlobReport> VerifyNonBlobFiles(const DirFd& root, const Manifest& manifest) {
  NonBlobReport report;
  // The blobs are listed by name only (never read): a listed blob that is gone is named.
  std::vector<std::string> blob_others;
  Result<std::vector<std::string>> blob_names = root.ListFileNames(kBlobsDir, &blob_others);
  if (!blob_names.ok() && blob_names.status().code() != Code::kNotFound) return blob_names.status();
  std::set<std::string_view> blobs_here;
  if (blob_names.ok()) blobs_here.insert(blob_names->begin(), blob_names->end());
  std::map<std::string, FileDigest> non_blobs;
  std::vector<std::pair<std::string, std::string>> found;
  const std::string blob_prefix = std::string(kBlobsDir) + "/";
  for (const auto& [path, digest] : manifest.files) {
    if (!InBlobsFolder(path)) {
      non_blobs.insert(non_blobs.end(), {path, digest});
    } else if (!blobs_here.count(std::string_view(path).substr(blob_prefix.size()))) {
      found.emplace_back(path, "missing");
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, root.ListTree("", {kLocalDir, kBlobsDir}));
  VerifyOptions options;
  options.max_document_size = UINT64_MAX;  // compared by digest only: no document is too large
  Observed observed;
  observed.read_documents = false;
  std::vector<std::string> unreadable;  // "<path>: <why>", as ObserveFiles words them
  CAPSULE_RETURN_IF_ERROR(ObserveFiles(root, entries, manifest, /*trust_blobs=*/false, /*read_snapshot=*/false,
                                       options, &observed, &unreadable));
  for (const std::string& problem : unreadable) {
    const size_t colon = problem.find(": ");
    found.emplace_back(problem.substr(0, colon), colon == std::string::npos ? "unreadable" : problem.substr(colon + 2));
  }
  CompareWithManifest(non_blobs, observed.files, &found);
  std::sort(found.begin(), found.end());
  for (auto& [path, why] : found) {
    if (report.paths.empty() || report.paths.back() != path) report.paths.push_back(path);
    report.problems.push_back(path + ": " + why);
  }
  report.files = std::move(observed.files);
  return report;
}

void ListedBlobs::Remove(const std::vector<std::string>& paths) {
  if (paths.empty()) return;
  const std::string prefix = std::string(kBlobsDir) + "/";
  std::vector<std::string_view> gone;
  gone.reserve(paths.size());
  for (const std::string& path : paths) {
    if (path.starts_with(prefix)) gone.push_back(std::string_view(path).substr(prefix.size()));
  }
  std::sort(gone.begin(), gone.end());
  size_t kept = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::binary_search(gone.begin(), gone.end(), std::string_view(names[i]))) continue;
    if (kept != i) {
      names[kept] = std::move(names[i]);
      if (i < remembered.size()) remembered[kept] = std::move(remembered[i]);
    }
    ++kept;
  }
  names.resize(kept);
  if (remembered.size() > kept) remembered.resize(kept);
}

Result<ListedBlobs> ListBlobsToVerify(const std::string& dir, const VerifyOptions& options) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  return ListBlobsToVerify(root, options);
}

Result<ListedBlobs> ListBlobsToVerify(const DirFd& root, const VerifyOptions& options) {
  ListedBlobs listed;
  const std::string blobs_dir = root.PathOf(kBlobsDir);
  CAPSULE_ASSIGN_OR_RETURN(listed.names, root.ListFileNames(kBlobsDir, &listed.others));
  if (options.blob_digests == nullptr || !options.trust_remembered_blobs) return listed;
  listed.remembered.reserve(listed.names.size());
  std::string full_path = blobs_dir + "/";
  const size_t name_at = full_path.size();
  for (const std::string& name : listed.names) {
    full_path.resize(name_at);
    full_path += name;
    listed.remembered.push_back(options.blob_digests->Remembered(full_path));
  }
  return listed;
}

namespace {

// What VerifySavedFolder adds to the problems ObserveFiles found: `observed` against `compared`
// as CheckAgainstManifest judges it, but with the snapshot saved checked against `found` (every
// blob found, in digest order) where CheckAgainstManifest would check the snapshot's text.
void CheckSavedAgainstManifest(const Manifest& compared, const SavedCapsule& saved, const std::vector<FoundBlob>& found,
                               const Observed& observed, const VerifyOptions& options,
                               std::vector<std::string>* problems) {
  std::vector<std::string> snapshot_problems;
  if (observed.snapshot_checked) CheckSnapshotBlobs(saved.snapshot, found, &snapshot_problems);
  CheckAgainstManifest(compared, observed.files, observed.documents, observed.journal, options, problems,
                       &snapshot_problems);
}

// VerifySavedFolder without remembered digests to trust: every file is listed and read as
// VerifyFolder reads it (through the digest cache, when given, which checks each file's
// identity), but the manifest and the snapshot are taken as saved, once their files hash to
// the digests saved, instead of being read back and parsed again (at a mount's first freeze,
// a third of the verify's memory). `manifest_sha256`: the manifest file's digest, under way.
Result<VerifyReport> VerifySavedFolderReadingBlobs(const std::string& dir, const SavedCapsule& saved,
                                                   const VerifyOptions& options,
                                                   std::future<Result<std::string>> manifest_sha256) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, root.ListTree("", {kLocalDir}));
  Result<std::string> manifest_digest = manifest_sha256.get();
  if (!manifest_digest.ok() || *manifest_digest != saved.manifest_sha256) return VerifyFolder(dir, options);
  const Manifest& manifest = *saved.manifest;
  VerifyReport report;
  Observed observed;
  CAPSULE_RETURN_IF_ERROR(ObserveFiles(root, entries, manifest, /*trust_blobs=*/false, /*read_snapshot=*/false,
                                       options, &observed, &report.problems));
  auto snapshot_found = observed.files.find(kSnapshotPath);
  if (snapshot_found == observed.files.end() || snapshot_found->second.sha256 != saved.snapshot_sha256) {
    return VerifyFolder(dir, options);  // not the snapshot saved
  }
  std::vector<FoundBlob> found;
  AddObservedBlobs(observed.files, &found);
  CheckSavedAgainstManifest(manifest, saved, found, observed, options, &report.problems);
  report.files_checked = manifest.files.size();
  return report;
}

}  // namespace

Result<VerifyReport> VerifySavedFolder(const std::string& dir, const SavedCapsule& saved,
                                       const VerifyOptions& options) {
  if (saved.manifest == nullptr) return VerifyFolder(dir, options);
  const Manifest& manifest = *saved.manifest;
  auto snapshot_listed = manifest.files.find(kSnapshotPath);
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  if (options.public_key_hex || snapshot_listed == manifest.files.end() ||
      snapshot_listed->second.sha256 != saved.snapshot_sha256 || !BlobsFolderIsReal(root)) {
    return VerifyFolder(dir, options);
  }
  // The manifest is hashed while the folders are listed.
  std::future<Result<std::string>> manifest_sha256 =
      std::async(std::launch::async, [&root]() -> Result<std::string> {
        CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, root.OpenFile(kManifestPath, O_RDONLY | O_CLOEXEC));
        return Sha256Fd(fd.get(), root.PathOf(kManifestPath));
      });
  if (options.blob_digests == nullptr || !options.trust_remembered_blobs) {
    return VerifySavedFolderReadingBlobs(dir, saved, options, std::move(manifest_sha256));
  }
  ListedBlobs listed_now;
  if (!saved.blobs) {
    CAPSULE_ASSIGN_OR_RETURN(listed_now, ListBlobsToVerify(root, options));
  }
  const ListedBlobs& blobs = saved.blobs ? *saved.blobs : listed_now;
  const std::vector<std::string>& names = blobs.names;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, root.ListTree("", {kLocalDir, kBlobsDir}));
  Result<std::string> manifest_digest = manifest_sha256.get();
  if (!manifest_digest.ok() || *manifest_digest != saved.manifest_sha256 || !blobs.others.empty() ||
      blobs.remembered.size() != names.size()) {
    return VerifyFolder(dir, options);
  }

  // The blobs listed and found as the cache remembers them (the name is their digest, the
  // size the manifest's) are done here; every other blob, listed or found, joins `compared`
  // and `entries` to be judged as VerifyFolder judges it.
  Manifest compared;
  std::vector<FoundBlob> found;
  found.reserve(names.size());
  std::vector<TreeEntry> blob_entries;
  const std::string prefix = std::string(kBlobsDir) + "/";
  auto listed = manifest.files.lower_bound(prefix);
  auto listed_end = listed;
  while (listed_end != manifest.files.end() && InBlobsFolder(listed_end->first)) ++listed_end;
  for (auto it = manifest.files.begin(); it != listed; ++it) compared.files.insert(compared.files.end(), *it);
  for (auto it = listed_end; it != manifest.files.end(); ++it) compared.files.insert(compared.files.end(), *it);
  auto name = names.begin();
  while (listed != listed_end || name != names.end()) {
    const std::string_view listed_name =
        listed == listed_end ? std::string_view() : std::string_view(listed->first).substr(prefix.size());
    if (name == names.end() || (listed != listed_end && listed_name < *name)) {
      compared.files.insert(*listed++);  // missing
      continue;
    }
    if (listed == listed_end || *name < listed_name) {
      if (!IsTempDebris(*name)) blob_entries.push_back(ListedFile(prefix + *name));
      ++name;
      continue;
    }
    const std::optional<DigestCache::Digest>& remembered = blobs.remembered[name - names.begin()];
    if (remembered && remembered->sha256 == *name && remembered->size == listed->second.size &&
        listed->second.sha256 == *name && IsBlobPath(listed->first)) {
      found.push_back(FoundBlob{*name, listed->second.size});
    } else {
      compared.files.insert(*listed);
      blob_entries.push_back(ListedFile(listed->first));
    }
    ++listed;
    ++name;
  }
  // In path order among the rest, as VerifyFolder lists them.
  std::vector<TreeEntry> all;
  all.reserve(entries.size() + blob_entries.size());
  std::merge(std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()),
             std::make_move_iterator(blob_entries.begin()), std::make_move_iterator(blob_entries.end()),
             std::back_inserter(all), [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });

  VerifyReport report;
  Observed observed;
  CAPSULE_RETURN_IF_ERROR(ObserveFiles(root, all, manifest, /*trust_blobs=*/true, /*read_snapshot=*/false, options,
                                       &observed, &report.problems));
  auto snapshot_found = observed.files.find(kSnapshotPath);
  if (snapshot_found == observed.files.end() || snapshot_found->second.sha256 != saved.snapshot_sha256) {
    return VerifyFolder(dir, options);  // not the snapshot saved
  }
  // The snapshot is checked as saved, against every blob found: those done above and those
  // observed (a blob named by its digest).
  // Both parts come in digest order (the listing's names; the observed paths): one merge.
  const size_t remembered_count = found.size();
  AddObservedBlobs(observed.files, &found);
  std::inplace_merge(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(remembered_count), found.end(),
                     [](const FoundBlob& a, const FoundBlob& b) { return a.sha256 < b.sha256; });
  CheckSavedAgainstManifest(compared, saved, found, observed, options, &report.problems);
  report.files_checked = manifest.files.size();
  return report;
}

Result<VerifyReport> VerifyTar(const std::string& tar_path, const VerifyOptions& options) {
  VerifyReport report;
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(tar_path, O_RDONLY));
  FdSource file_source(fd.get(), tar_path);
  CountingSource source(&file_source, options.progress);
  if (options.progress != nullptr) {
    struct stat st;
    uint64_t size = ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
    options.progress->Begin("verify", size, 0);
  }
  TarReader reader(&source);
  std::map<std::string, ObservedFile> files;
  std::map<std::string, std::string> documents;
  std::optional<std::string> manifest_text, signature_text;
  std::vector<char> buffer(1 << 20);
  for (;;) {
    TarEntry entry;
    Result<bool> more = reader.Next(&entry);
    if (!more.ok()) {
      report.problems.push_back(tar_path + ": " + more.status().message());
      return report;
    }
    if (!*more) break;
    if (entry.type == TarEntry::Type::kDirectory) continue;
    if (entry.type != TarEntry::Type::kFile) {
      report.problems.push_back(entry.path + ": not a regular file (" + TarTypeName(entry) + ")");
      continue;
    }
    if (files.count(entry.path) || (entry.path == kManifestPath && manifest_text) ||
        (entry.path == kSignaturePath && signature_text)) {
      report.problems.push_back(entry.path + ": appears twice in the tar");
      continue;
    }
    bool keep = entry.path == kManifestPath || entry.path == kSignaturePath ||
                (entry.path == kJournalPath && options.check_journal) ||
                ReadToCheck(entry.path, entry.size, options, &report.problems);
    std::string text;
    Sha256 hasher;
    uint64_t size = 0;
    // The digest of an append-only file's first N bytes, N from a manifest already read.
    std::string prefix;
    uint64_t prefix_length = UINT64_MAX;
    if (IsAppendOnlyPath(entry.path) && manifest_text) {
      Result<Manifest> early = Manifest::Parse(*manifest_text);
      if (early.ok() && early->files.count(entry.path)) prefix_length = early->files.at(entry.path).size;
    }
    if (prefix_length == 0) prefix = Sha256().FinishHex();
    for (;;) {
      Result<size_t> n = reader.ReadData(buffer.data(), buffer.size());
      if (!n.ok()) {
        report.problems.push_back(tar_path + ": " + n.status().message());
        return report;
      }
      if (*n == 0) break;
      std::string_view chunk(buffer.data(), *n);
      if (size < prefix_length && size + chunk.size() > prefix_length) {
        size_t head = static_cast<size_t>(prefix_length - size);
        hasher.Update(chunk.substr(0, head));
        Sha256 copy = hasher;
        prefix = copy.FinishHex();
        hasher.Update(chunk.substr(head));
      } else {
        hasher.Update(chunk);
        if (size + chunk.size() == prefix_length) {
          Sha256 copy = hasher;
          prefix = copy.FinishHex();
        }
      }
      if (keep) text.append(chunk);
      size += *n;
    }
    if (options.progress != nullptr) options.progress->Add(0, 1);
    if (entry.path == kManifestPath) {
      manifest_text = std::move(text);
    } else if (entry.path == kSignaturePath) {
      signature_text = std::move(text);
    } else {
      files[entry.path] = ObservedFile{hasher.FinishHex(), size, prefix};
      if (keep) documents[entry.path] = std::move(text);
    }
  }
  Status trailer = reader.ExpectOnlyZerosAfterEnd();
  if (!trailer.ok()) report.problems.push_back(tar_path + ": " + trailer.message());
  if (!manifest_text) {
    report.problems.push_back(std::string(kManifestPath) + ": missing");
    return report;
  }
  Result<Manifest> manifest = Manifest::Parse(*manifest_text);
  if (!manifest.ok()) {
    report.problems.push_back(manifest.status().message());
    return report;
  }
  if (signature_text && manifest->files.count(kSignaturePath) && !files.count(kSignaturePath)) {
    // A capsule whose manifest lists a signature.json of its own (a folder extracted from a
    // signed export, checkpointed since) exports it as a file.
    files[kSignaturePath] = ObservedFile{Sha256Hex(*signature_text), signature_text->size(), ""};
  }
  auto journal_text = documents.find(kJournalPath);
  ReadAtFunction journal;
  if (journal_text != documents.end()) journal = TextReadAt(journal_text->second);
  CheckAgainstManifest(*manifest, files, documents, journal, options, &report.problems);
  CheckSignature(*manifest_text, signature_text, options,
                 "the export is not signed", &report);
  report.files_checked = manifest->files.size();
  report.manifest = std::move(*manifest);
  return report;
}

}  // namespace capsule
