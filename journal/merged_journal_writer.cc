#include "journal/merged_journal_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace capsule::journal {

namespace {
constexpr size_t kGatherBytes = 4 << 20;  // written with one writev(2) once this much is gathered
}  // namespace

Status MergedJournalWriter::Open() {
  if (out_) return Status::Ok();
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile created, folder_.CreateAtomic(rel_, 0644));
  out_.emplace(std::move(created));
  return Status::Ok();
}

void MergedJournalWriter::Hash(std::string_view piece) {
  digest_.Update(piece);
  hashed_ahead_ += piece.size();
}

Status MergedJournalWriter::CopyFrom(int fd, uint64_t bytes) {
  if (bytes != hashed_ahead_ || written_ != 0 || pieces_bytes_ != 0) {
    return Status::IOError(path_, "merge: the merged journal's first bytes are not the ones digested");
  }
  CAPSULE_RETURN_IF_ERROR(Open());
  loff_t from = 0;
  bool by_kernel = true;
  std::string chunk;
  while (static_cast<uint64_t>(from) < bytes) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(64 << 20, bytes - static_cast<uint64_t>(from)));
    ssize_t copied = -1;
    if (by_kernel) {
      copied = ::copy_file_range(fd, &from, out_->fd(), nullptr, want, 0);
      if (copied < 0 && errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        return Status::IOError(path_ + ": copying into the merged journal", errno);
      }
      by_kernel = copied >= 0;
    }
    if (!by_kernel) {  // not between these files: through a buffer
      chunk.resize(4 << 20);
      CAPSULE_ASSIGN_OR_RETURN(size_t got, ReadAt(fd, chunk.data(), std::min(want, chunk.size()), from, path_));
      CAPSULE_RETURN_IF_ERROR(out_->Append(std::string_view(chunk.data(), got)));
      copied = static_cast<ssize_t>(got);
      from += copied;
    }
    if (copied == 0) return Status::IOError(path_, "the journal grew shorter while being merged");
  }
  (void)::sync_file_range(out_->fd(), 0, static_cast<off_t>(bytes), SYNC_FILE_RANGE_WRITE);
  written_ = bytes;
  return Status::Ok();
}

Status MergedJournalWriter::Write(std::string_view piece) {
  CAPSULE_RETURN_IF_ERROR(Open());
  pieces_.push_back(piece);
  pieces_bytes_ += piece.size();
  return pieces_bytes_ >= kGatherBytes ? Flush() : Status::Ok();
}

Status MergedJournalWriter::Settle() {
  CAPSULE_RETURN_IF_ERROR(Flush());
  digest_.Wait();
  return Status::Ok();
}

Result<FileDigest> MergedJournalWriter::Commit() {
  CAPSULE_RETURN_IF_ERROR(Open());
  CAPSULE_RETURN_IF_ERROR(Flush());
  CAPSULE_RETURN_IF_ERROR(out_->Commit());
  return FileDigest{digest_.FinishHex(), written_};
}

Status MergedJournalWriter::Flush() {
  if (pieces_.empty()) return Status::Ok();
  for (std::string_view piece : pieces_) digest_.Update(piece);
  CAPSULE_RETURN_IF_ERROR(out_->Append(pieces_));
  // Handed to the disk at once (sync_file_range starts its writeback without waiting), so the
  // fsync of the commit finds little left to do.
  (void)::sync_file_range(out_->fd(), static_cast<off_t>(written_), static_cast<off_t>(pieces_bytes_),
                          SYNC_FILE_RANGE_WRITE);
  written_ += pieces_bytes_;
  pieces_.clear();
  pieces_bytes_ = 0;
  return Status::Ok();
}

}  // namespace capsule::journal
