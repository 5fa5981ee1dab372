// The merged journal of Journal::MergeFrom, written through the durable-write path
// (AtomicFile): pieces gathered many to a writev(2) and handed to the disk as they go, our
// lines before the first added event copied by the kernel, and the digest for the manifest
// taken on a thread of its own. Internal to journal/.
//
// Thread-safety: one caller thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/background_sha256.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"
#include "capsule/format/manifest.h"

namespace capsule::journal {

class MergedJournalWriter {
 public:
  // The journal `rel` beneath the held capsule folder `folder` (which outlives the writer):
  // its temporary file is made and renamed there, never through a link.
  MergedJournalWriter(const DirFd& folder, std::string rel)
      : folder_(folder), rel_(std::move(rel)), path_(folder.PathOf(rel_)) {}

  // Digests `piece` as the merged text's next bytes, to be written by CopyFrom: a view, kept
  // until the next Settle.
  void Hash(std::string_view piece);

  // Writes the first `bytes` of the journal open at `fd`, the bytes given to Hash, copied by
  // the kernel (copy_file_range(2); read and written where it cannot).
  Status CopyFrom(int fd, uint64_t bytes);

  // Writes `piece` next: a view, kept until the next Settle (or Commit).
  Status Write(std::string_view piece);

  // Done with every piece given so far: written and digested.
  Status Settle();

  // Makes the merged text the journal at `rel`; its manifest entry.
  Result<FileDigest> Commit();

 private:
  Status Open();  // the temporary file, made on first use
  Status Flush();

  const DirFd& folder_;
  std::string rel_;
  std::string path_;  // for messages
  std::optional<AtomicFile> out_;
  std::vector<std::string_view> pieces_;
  size_t pieces_bytes_ = 0;
  uint64_t written_ = 0;
  uint64_t hashed_ahead_ = 0;  // bytes given to Hash, to be written by CopyFrom
  BackgroundSha256 digest_;
};

}  // namespace capsule::journal
