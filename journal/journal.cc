#include "journal/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <unordered_map>

#include "capsule/base/sha256.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/manifest.h"
#include "journal/journal_file.h"
#include "journal/merge_pipe.h"
#include "journal/merged_journal_writer.h"
#include "journal/merge_stream.h"
#include "journal/scan.h"
#include "journal/merge_text.h"

namespace capsule::journal {

namespace {

std::string JournalFile(const std::string& dir) { return JoinPath(dir, kJournalPath); }

// Beneath the capsule folder held open: a link in the journal's place is refused, naming it.
Result<UniqueFd> OpenJournalForWrite(const DirFd& folder) {
  return folder.OpenFile(kJournalPath, O_RDWR | O_APPEND | O_CREAT, 0644);
}

// Splits complete lines of `text` (each without its newline).
std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) break;
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Appends the canonical line of `event` with its newline to `lines` and sets its id: the same
// bytes as Event::CanonicalLine, and the text without the id member that ComputeId digests,
// written directly from data's canonical text.
Status AppendLine(Event* event, std::string* lines) {
  CAPSULE_ASSIGN_OR_RETURN(std::string data, CanonicalJson(event->data, "event"));
  CAPSULE_ASSIGN_OR_RETURN(std::string machine, CanonicalJson(Json(event->machine), "event"));
  CAPSULE_ASSIGN_OR_RETURN(std::string ts, CanonicalJson(Json(event->ts), "event"));
  CAPSULE_ASSIGN_OR_RETURN(std::string type, CanonicalJson(Json(event->type), "event"));
  std::string head = "{\"clock\":" + std::to_string(event->clock) + ",\"data\":" + data;
  std::string rest = ",\"machine\":" + machine + ",\"prev\":" + (event->prev ? "\"" + *event->prev + "\"" : "null") +
                     ",\"seq\":" + std::to_string(event->seq) + ",\"ts\":" + ts + ",\"type\":" + type + "}";
  Sha256 hasher;
  hasher.Update(head);
  hasher.Update(rest);
  event->id = hasher.FinishHex();
  size_t start = lines->size();
  lines->append(head).append(",\"id\":\"").append(event->id).append("\"").append(rest).push_back('\n');
  return CheckEventLineSize(lines->size() - start - 1, event->type);
}

// After a merge that added nothing the journal is left as it is. But a crash of an earlier
// merge between its rename and its manifest update leaves a manifest entry that no longer
// describes the journal's first bytes: that is repaired here, so running the merge again
// finishes it.
Status RepairManifestEntry(const std::string& dir, const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir));
  auto entry = manifest.files.find(kJournalPath);
  if (entry == manifest.files.end()) return Status::Ok();
  std::string prefix;
  uint64_t file_size = 0;
  CAPSULE_ASSIGN_OR_RETURN(std::string whole, Sha256FileWithPrefix(path, entry->second.size, &prefix, &file_size));
  if ((entry->second.size == file_size ? whole : prefix) != entry->second.sha256) {
    CAPSULE_RETURN_IF_ERROR(RefreshManifestEntries(dir, {kJournalPath}, &manifest));
    CAPSULE_RETURN_IF_ERROR(manifest.Save(dir));
  }
  return Status::Ok();
}

// How many blocks a streaming merge reads of each journal ahead of the merging.
constexpr size_t kMergeBlocksAhead = 3;

}  // namespace

Result<Journal> Journal::OpenForWrite(const std::string& capsule_dir, JournalOptions options) {
  // Frozen is fine to open (a mount of a frozen capsule waits for its thaw); every append
  // checks that the capsule is active, under the lock. Checked before the folder is opened, so
  // that a folder that is no capsule is named as such.
  CAPSULE_RETURN_IF_ERROR(CheckHeldHere(capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(DirFd folder, DirFd::OpenGiven(capsule_dir));
  return OpenForWrite(std::move(folder), std::move(options));
}

Result<Journal> Journal::OpenForWrite(DirFd folder, JournalOptions options) {
  const std::string capsule_dir = folder.path();
  CAPSULE_RETURN_IF_ERROR(CheckHeldHere(capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(std::string machine, LoadOrCreateMachineId(capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd lock_fd, folder.OpenFile(local::kJournalLock, O_RDWR | O_CREAT, 0644));
  {
    CAPSULE_ASSIGN_OR_RETURN(JournalLock lock, JournalLock::Acquire(lock_fd.get()));
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenJournalForWrite(folder));
    CAPSULE_ASSIGN_OR_RETURN(uint64_t size, CutTornTail(fd.get(), JournalFile(capsule_dir)));
    (void)size;
  }
  return Journal(std::move(folder), std::move(machine), std::move(lock_fd), std::move(options));
}

Result<std::vector<Event>> Journal::Read(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(capsule_dir, kJournalPath));
  return ReadJournalText(text);
}

Status Journal::Verify(const std::string& capsule_dir) {
  std::string path = JournalFile(capsule_dir);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneathGiven(capsule_dir, kJournalPath, O_RDONLY));
  return VerifyJournalAt(FileReadAt(fd.get(), path));
}

Result<Event> Journal::Append(const std::string& type, const Json& data) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> appended, AppendAll({NewEvent{type, data}}));
  return std::move(appended.front());
}

Result<std::vector<Event>> Journal::AppendAll(const std::vector<NewEvent>& events) {
  if (events.empty()) return std::vector<Event>();
  for (size_t i = 0; i < events.size(); ++i) {
    Status checked = CheckEventData(events[i].type, events[i].data);
    if (!checked.ok()) {
      return events.size() == 1 ? checked : checked.WithContext("event " + std::to_string(i + 1) + " of " +
                                                                std::to_string(events.size()));
    }
  }
  std::vector<Event> appended;
  CAPSULE_ASSIGN_OR_RETURN(int fd, WriteLocked(events, &appended));
  // Outside both locks: writers that wait share one flush (the kernel joins concurrent
  // fdatasyncs of a file into one journal commit), and a freeze waits only for the write. A
  // freeze that comes meanwhile finds the lines in the file, so a move carries them; they
  // are acknowledged only once durable.
  if (options_.sync && ::fdatasync(fd) != 0) {
    int err = errno;
    journal_fd_.Reset();  // the next append looks at the file afresh
    return Status::IOError(JournalFile(dir_) + ": fdatasync", err);
  }
  return appended;
}

Result<int> Journal::WriteLocked(const std::vector<NewEvent>& events, std::vector<Event>* appended) {
  CAPSULE_ASSIGN_OR_RETURN(JournalLock lock, JournalLock::Acquire(lock_fd_.get()));
  // Checked under the lock each time: a move may have frozen or retired the capsule since.
  // The holder record stays as checked until the lines are written.
  CAPSULE_ASSIGN_OR_RETURN(HolderGate::Hold held, gate_.HoldForWrite());
  CAPSULE_RETURN_IF_ERROR(CatchUp());
  std::string path = JournalFile(dir_);

  std::string lines;
  JournalTail tail = tail_;
  size_t last_start = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const NewEvent& next = events[i];
    Event event;
    const MachineTail* mine = nullptr;
    if (auto it = tail.machines.find(machine_); it != tail.machines.end()) mine = &it->second;
    event.clock = tail.max_clock + 1;
    event.data = next.data;
    event.machine = machine_;
    event.seq = mine ? mine->seq + 1 : 1;
    if (mine) event.prev = mine->id;
    event.ts = options_.now();
    event.type = next.type;
    last_start = lines.size();
    Status line = AppendLine(&event, &lines);
    if (!line.ok()) {
      return events.size() == 1 ? line
                                : line.WithContext("event " + std::to_string(i + 1) + " of " + std::to_string(events.size()));
    }
    tail.Add(event);  // the next event chains to this one
    appended->push_back(std::move(event));
  }

  // One write(2) of every line on the O_APPEND descriptor; a short write is undone.
  int fd = journal_fd_.get();
  ssize_t wrote = ::write(fd, lines.data(), lines.size());
  if (wrote != static_cast<ssize_t>(lines.size())) {
    int err = wrote < 0 ? errno : ENOSPC;
    bool undone = ::ftruncate(fd, static_cast<off_t>(size_)) == 0;
    int undo_err = errno;
    journal_fd_.Reset();  // the next append looks at the file afresh
    if (!undone) return Status::IOError(path + ": undoing a short append (the next writer cuts it off)", undo_err);
    return Status::IOError(path + ": appending an event", err);
  }
  size_ += lines.size();
  tail_ = std::move(tail);
  last_line_.assign(lines, last_start, lines.size() - last_start - 1);
  // The cache is for other writers and later opens, which read only the lines after what it
  // covers: rewritten on this Journal's first append, every kAppendsPerTailCache after, and
  // when it closes. Failing to write it costs them a read.
  if (++appends_since_cache_ >= kAppendsPerTailCache || !cache_written_) SaveTailCache();
  return fd;
}

void Journal::SaveTailCache() {
  if (!tail_fd_.valid() || last_line_.empty()) return;
  TailCache cache{inode_, size_, last_line_.size() + 1, "", tail_};
  Sha256 hasher;
  hasher.Update(last_line_);
  hasher.Update("\n");
  cache.last_line_sha256 = hasher.FinishHex();
  if (WriteTailCache(tail_fd_.get(), cache).ok()) {
    appends_since_cache_ = 0;
    cache_written_ = true;
  }
}

Journal::~Journal() {
  if (!tail_fd_.valid() || appends_since_cache_ == 0) return;
  // Under the lock, and only while the journal is still the one this Journal appended to (a
  // merge since replaced it, with a cache of its own).
  Result<JournalLock> lock = JournalLock::Acquire(lock_fd_.get());
  Result<struct stat> found = folder_.valid() ? folder_.Stat(kJournalPath) : Status::NotFound(dir_, "moved from");
  if (!lock.ok() || !found.ok()) return;
  const struct stat& st = *found;
  if (static_cast<uint64_t>(st.st_ino) == inode_ && static_cast<uint64_t>(st.st_dev) == device_ &&
      static_cast<uint64_t>(st.st_size) >= size_) {
    SaveTailCache();
  }
}

Status Journal::CatchUp() {
  std::string path = JournalFile(dir_);
  // Looked at beneath the folder held open (lstat: a link put in its place is another file,
  // and Reopen refuses it).
  Result<struct stat> found = journal_fd_.valid() ? folder_.Stat(kJournalPath) : Status::NotFound(path, "not open");
  if (!found.ok() || static_cast<uint64_t>(found->st_ino) != inode_ ||
      static_cast<uint64_t>(found->st_dev) != device_ || static_cast<uint64_t>(found->st_size) < size_) {
    return Reopen();  // first use, replaced (a merge), or cut short
  }
  uint64_t size = static_cast<uint64_t>(found->st_size);
  if (size == size_) return Status::Ok();  // as this Journal left it
  // Another writer appended: only the new lines are read and checked (a torn one is cut).
  std::string grown(size - size_, '\0');
  CAPSULE_ASSIGN_OR_RETURN(size_t got, ReadAt(journal_fd_.get(), grown.data(), grown.size(), static_cast<off_t>(size_), path));
  grown.resize(got);
  if (grown.empty() || grown.back() != '\n') {
    CAPSULE_ASSIGN_OR_RETURN(size, CutTornTail(journal_fd_.get(), path));
    grown.resize(size - size_);
  }
  Result<ScannedLines> lines = ScanLines(grown, 1, 1);
  if (!lines.ok()) return Reopen();  // named with its line number by a whole read
  std::optional<Event> slow;
  std::optional<EventLine> last;
  if (!last_line_.empty()) {
    EventLine fields;
    if (ReadEventLine(last_line_, &fields)) {
      last = fields;
    } else {
      CAPSULE_ASSIGN_OR_RETURN(slow, ParseEventLine(last_line_, "journal"));
      last = FieldsOf(*slow, last_line_);
    }
  }
  JournalTail tail = tail_;
  if (!CheckChains(*lines, &tail, last).ok()) return Reopen();
  if (const EventLine* line = lines->last()) last_line_.assign(line->line);
  tail_ = std::move(tail);
  size_ = size;
  return Status::Ok();
}

Status Journal::Reopen() {
  std::string path = JournalFile(dir_);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenJournalForWrite(folder_));
  CAPSULE_ASSIGN_OR_RETURN(uint64_t size, CutTornTail(fd.get(), path));
  CAPSULE_ASSIGN_OR_RETURN(JournalTail tail, LoadJournalTail(dir_, fd.get(), size));
  CAPSULE_ASSIGN_OR_RETURN(last_line_, ReadLastLine(FileReadAt(fd.get(), path), size, path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::IOError(path, errno);
  if (!tail_fd_.valid()) {
    Result<UniqueFd> cache = folder_.OpenFile(local::kJournalTail, O_RDWR | O_CREAT, 0644);
    if (cache.ok()) tail_fd_ = std::move(cache).value();
  }
  journal_fd_ = std::move(fd);
  inode_ = static_cast<uint64_t>(st.st_ino);
  device_ = static_cast<uint64_t>(st.st_dev);
  size_ = size;
  tail_ = std::move(tail);
  return Status::Ok();
}

struct OtherJournalText {
  std::string dir;
  std::string path;
  UniqueFd fd;
};

Result<OtherJournal> OtherJournal::Load(const std::string& capsule_dir) {
  auto loaded = std::make_shared<OtherJournalText>();
  loaded->dir = capsule_dir;
  loaded->path = JournalFile(capsule_dir);
  CAPSULE_ASSIGN_OR_RETURN(loaded->fd, OpenBeneathGiven(capsule_dir, kJournalPath, O_RDONLY));
  return OtherJournal(std::move(loaded));
}

Result<MergeResult> Journal::MergeFrom(const OtherJournal& other) {
  CAPSULE_ASSIGN_OR_RETURN(JournalLock lock, JournalLock::Acquire(lock_fd_.get()));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd held, HoldForWrite(dir_));
  std::string path = JournalFile(dir_);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenJournalForWrite(folder_));  // no writer meanwhile: we hold the lock
  CAPSULE_RETURN_IF_ERROR(CutTornTail(fd.get(), path).status());
  auto finish = [&](const MergeCounts& counts, MergedJournalWriter* writer) -> Result<MergeResult> {
    MergeResult result{counts.added, counts.total};
    if (counts.added == 0) {
      CAPSULE_RETURN_IF_ERROR(RepairManifestEntry(dir_, path));
      return result;
    }
    CAPSULE_ASSIGN_OR_RETURN(FileDigest digest, writer->Commit());
    // The journal was rewritten, not appended to: its manifest entry covers the new bytes.
    CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(folder_));
    manifest.files[kJournalPath] = std::move(digest);
    CAPSULE_RETURN_IF_ERROR(manifest.Save(folder_));
    journal_fd_.Reset();  // replaced: the next append opens the merged journal
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd merged, OpenJournalForWrite(folder_));
    (void)SaveJournalTail(dir_, merged.get(), counts.last_line + "\n", counts.tail);
    return result;
  };

  // Streamed: both journals read and checked a block at a time, each on a thread of its own,
  // and merged as they come. Our lines before the first added event are copied from our file.
  {
    // The lines both begin with are read and checked once, by ours, which compares as it reads.
    auto common = std::make_shared<CommonLines>();
    ReadAtFunction their_file = FileReadAt(other.text_->fd.get(), other.text_->path);
    StreamedSide ours(FileReadAt(fd.get(), path), options_.merge_block_bytes, kMergeBlocksAhead,
                      StreamedSide::Role::kOurs, common, their_file);
    StreamedSide theirs(their_file, options_.merge_block_bytes, kMergeBlocksAhead, StreamedSide::Role::kTheirs, common);
    // After the sides, so destroyed before them: on an error it still digests pieces that
    // point into their blocks, which must outlive it.
    MergedJournalWriter writer(folder_, kJournalPath);
    MergeOutput output{[&](std::string_view text) {
                         writer.Hash(text);
                         return Status::Ok();
                       },
                       [&](uint64_t bytes) { return writer.CopyFrom(fd.get(), bytes); },
                       [&](std::string_view piece) { return writer.Write(piece); }, [&] { return writer.Settle(); }};
    Result<MergeCounts> counts = MergeSides(ours, theirs, output);
    if (counts.ok()) return finish(*counts, &writer);
    if (!ours.failed() && !theirs.failed()) return counts.status();  // a conflict, or the writing failed
  }

  // A side is not a sound journal: read whole and checked as Journal::Read checks it, its
  // fault is named with its line (for ours first). Should both pass now (the other copy was
  // being written), they are merged from the texts read.
  CAPSULE_ASSIGN_OR_RETURN(FileBytes text, FileBytes::Read(fd.get(), path));
  CAPSULE_ASSIGN_OR_RETURN(FileBytes their_text, FileBytes::Read(other.text_->fd.get(), other.text_->path));
  CAPSULE_ASSIGN_OR_RETURN(MergeInput input, CheckMergeSides(text.view(), their_text.view(), "merge: this journal",
                                                             "merge: the journal of " + other.text_->dir));
  MergedJournalWriter writer(folder_, kJournalPath);
  CAPSULE_ASSIGN_OR_RETURN(MergeCounts counts, MergeSides(input.ours, input.theirs,
                                                          [&](std::string_view piece) { return writer.Write(piece); }));
  return finish(counts, &writer);
}

Result<MergeResult> Journal::MergeFrom(std::vector<Event> events) {
  // The other side, checked on its own first.
  std::vector<Event> theirs = std::move(events);
  for (const Event& event : theirs) {
    Status fields = CheckEventFields(event);
    if (!fields.ok()) return fields.WithContext("merge: the other journal");
  }
  std::sort(theirs.begin(), theirs.end(), EventOrderLess);
  Status their_status = CheckEvents(theirs);
  if (!their_status.ok()) return their_status.WithContext("merge: the other journal");

  CAPSULE_ASSIGN_OR_RETURN(JournalLock lock, JournalLock::Acquire(lock_fd_.get()));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd held, HoldForWrite(dir_));
  std::string path = JournalFile(dir_);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenJournalForWrite(folder_));
  CAPSULE_ASSIGN_OR_RETURN(uint64_t size, CutTornTail(fd.get(), path));
  std::string text(size, '\0');
  CAPSULE_ASSIGN_OR_RETURN(size_t got, ReadAt(fd.get(), text.data(), size, 0, path));
  text.resize(got);
  Result<std::vector<Event>> read = ReadJournalText(text);
  if (!read.ok()) return read.status().WithContext("merge: this journal");
  std::vector<Event>& ours = *read;
  std::vector<std::string_view> our_lines = SplitLines(text);

  CAPSULE_ASSIGN_OR_RETURN(std::vector<const Event*> added, EventsToAdd(ours, theirs));
  MergeResult result{added.size(), ours.size() + added.size()};
  if (added.empty()) {
    CAPSULE_RETURN_IF_ERROR(RepairManifestEntry(dir_, path));
    return result;
  }

  // Both sides are in order: merge them like sort -m, writing our lines as they are.
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path, 0644));
  std::string buffer;
  std::string last_line;
  JournalTail tail;
  size_t i = 0, j = 0;
  auto flush = [&](bool force) -> Status {
    if (buffer.size() < (1 << 20) && !force) return Status::Ok();
    Status status = out.Append(buffer);
    buffer.clear();
    return status;
  };
  while (i < ours.size() || j < added.size()) {
    bool take_ours = j == added.size() || (i < ours.size() && EventOrderLess(ours[i], *added[j]));
    const Event& event = take_ours ? ours[i] : *added[j];
    if (take_ours) {
      last_line.assign(our_lines[i]);
      ++i;
    } else {
      CAPSULE_ASSIGN_OR_RETURN(last_line, event.CanonicalLine());
      CAPSULE_RETURN_IF_ERROR(CheckEventLineSize(last_line.size(), "merge: " + DescribeEvent(event)));
      ++j;
    }
    last_line += '\n';
    buffer += last_line;
    tail.Add(event);
    CAPSULE_RETURN_IF_ERROR(flush(false));
  }
  CAPSULE_RETURN_IF_ERROR(flush(true));
  CAPSULE_RETURN_IF_ERROR(out.Commit());

  // The journal was rewritten, not appended to: its manifest entry must cover the new bytes.
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(folder_));
  CAPSULE_RETURN_IF_ERROR(RefreshManifestEntries(folder_, {kJournalPath}, &manifest));
  CAPSULE_RETURN_IF_ERROR(manifest.Save(folder_));

  journal_fd_.Reset();  // replaced: the next append opens the merged journal
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd merged, OpenJournalForWrite(folder_));
  (void)SaveJournalTail(dir_, merged.get(), last_line, tail);
  return result;
}

}  // namespace capsule::journal
