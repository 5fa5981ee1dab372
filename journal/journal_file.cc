#include "journal/journal_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"
#include "journal/check.h"
#include "journal/event_line.h"

namespace capsule::journal {

namespace {

std::string TailPath(const std::string& capsule_dir) {
  return JoinPath(capsule_dir, local::kJournalTail);
}

Result<std::string> ReadRange(int fd, uint64_t offset, uint64_t length, const std::string& name) {
  std::string buffer(length, '\0');
  CAPSULE_ASSIGN_OR_RETURN(size_t got, ReadAt(fd, buffer.data(), length, static_cast<off_t>(offset), name));
  buffer.resize(got);
  return buffer;
}

Json TailToJson(const TailCache& cache) {
  Json machines = Json::object();
  for (const auto& [machine, last] : cache.tail.machines) {
    machines[machine] = {{"clock", last.clock}, {"id", last.id}, {"seq", last.seq}};
  }
  return {{"inode", cache.inode},
          {"size", cache.size},
          {"last_line_length", cache.last_line_length},
          {"last_line_sha256", cache.last_line_sha256},
          {"max_clock", cache.tail.max_clock},
          {"machines", machines}};
}

// The cache as it was written, or nothing usable (missing, torn, or failing its checksum).
std::optional<TailCache> ParseTailCache(const std::string& text) {
  size_t newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  std::string body = text.substr(0, newline);
  // What follows the checksum line is left over from a longer older text, written over.
  if (text.substr(newline + 1, 65) != Sha256Hex(body) + "\n") return std::nullopt;
  Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  try {
    TailCache cache;
    cache.inode = json.at("inode").get<uint64_t>();
    cache.size = json.at("size").get<uint64_t>();
    cache.last_line_length = json.at("last_line_length").get<uint64_t>();
    cache.last_line_sha256 = json.at("last_line_sha256").get<std::string>();
    cache.tail.max_clock = json.at("max_clock").get<uint64_t>();
    for (const auto& [machine, last] : json.at("machines").items()) {
      cache.tail.machines[machine] = MachineTail{last.at("seq").get<uint64_t>(), last.at("id").get<std::string>(),
                                                 last.at("clock").get<uint64_t>()};
    }
    return cache;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

std::string TailText(const TailCache& cache) {
  std::string body = TailToJson(cache).dump();
  return body + "\n" + Sha256Hex(body) + "\n";
}

}  // namespace

Status WriteTailCache(int tail_fd, const TailCache& cache) {
  std::string text = TailText(cache);
  if (::pwrite(tail_fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    return Status::IOError(local::kJournalTail, errno);
  }
  return Status::Ok();
}

Result<JournalLock> JournalLock::Acquire(int fd) {
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) return Status::IOError("flock .capsule/journal.lock", errno);
  }
  return JournalLock(fd);
}

JournalLock::~JournalLock() {
  if (fd_ >= 0) ::flock(fd_, LOCK_UN);
}

Result<uint64_t> CutTornTail(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IOError(path, errno);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return size;
  CAPSULE_ASSIGN_OR_RETURN(std::string last, ReadRange(fd, size - 1, 1, path));
  if (last == "\n") return size;
  // Read backward for the last newline.
  constexpr uint64_t kChunk = 64 * 1024;
  uint64_t end = size;
  uint64_t cut = 0;
  while (end > 0) {
    uint64_t begin = end > kChunk ? end - kChunk : 0;
    CAPSULE_ASSIGN_OR_RETURN(std::string chunk, ReadRange(fd, begin, end - begin, path));
    size_t at = chunk.rfind('\n');
    if (at != std::string::npos) {
      cut = begin + at + 1;
      break;
    }
    end = begin;
  }
  if (::ftruncate(fd, static_cast<off_t>(cut)) != 0) return Status::IOError(path + ": cutting a torn last line", errno);
  if (::fdatasync(fd) != 0) return Status::IOError(path, errno);
  return cut;
}

namespace {

// Reads `size` bytes at `offset` through `read`, all of them or an error.
Status ReadExactly(const ReadAtFunction& read, uint64_t offset, char* buffer, size_t size, const std::string& name) {
  size_t got = 0;
  while (got < size) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, read(offset + got, buffer + got, size - got));
    if (n == 0) return Status::IOError(name, "ended before its size (cut short while read?)");
    got += n;
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> ReadLastLine(const ReadAtFunction& read, uint64_t size, const std::string& name,
                                 size_t first_block) {
  constexpr size_t kLargestBlock = 4 << 20;
  if (size == 0) return std::string();
  char final_byte = 0;
  CAPSULE_RETURN_IF_ERROR(ReadExactly(read, size - 1, &final_byte, 1, name));
  uint64_t end = final_byte == '\n' ? size - 1 : size;  // where the line ends
  uint64_t begin = 0;                                    // where it starts
  size_t block = std::max<size_t>(first_block, 1);
  std::string buffer;
  for (uint64_t scanned_to = end; scanned_to > 0;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(block, scanned_to));
    uint64_t from = scanned_to - n;
    if (buffer.size() < n) buffer.resize(n);
    CAPSULE_RETURN_IF_ERROR(ReadExactly(read, from, buffer.data(), n, name));
    if (const void* newline = ::memrchr(buffer.data(), '\n', n)) {
      begin = from + static_cast<uint64_t>(static_cast<const char*>(newline) - buffer.data()) + 1;
      break;
    }
    scanned_to = from;
    block = std::min(block * 2, kLargestBlock);
  }
  std::string line(end - begin, '\0');
  CAPSULE_RETURN_IF_ERROR(ReadExactly(read, begin, line.data(), line.size(), name));
  return line;
}

Result<JournalTail> LoadJournalTail(const std::string& capsule_dir, int fd, uint64_t size) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IOError(kJournalPath, errno);
  // The journal up to `size` (the caller holds the lock: nothing is appended meanwhile).
  ReadAtFunction read = [fd, size](uint64_t offset, char* buffer, size_t n) -> Result<size_t> {
    if (offset >= size) return size_t{0};
    return ReadAt(fd, buffer, static_cast<size_t>(std::min<uint64_t>(n, size - offset)), static_cast<off_t>(offset),
                  kJournalPath);
  };
  JournalPosition from;  // the start, unless the cache describes a prefix of the journal
  Result<std::string> text = ReadFileBeneath(capsule_dir, local::kJournalTail);
  std::optional<TailCache> cache;
  if (text.ok()) cache = ParseTailCache(*text);
  if (cache && cache->inode == static_cast<uint64_t>(st.st_ino) && cache->size <= size &&
      cache->last_line_length >= 1 && cache->last_line_length <= cache->size) {
    // The cache's last line must end at its size, start a line, and match its digest.
    uint64_t begin = cache->size - cache->last_line_length;
    CAPSULE_ASSIGN_OR_RETURN(std::string last, ReadRange(fd, begin, cache->last_line_length, kJournalPath));
    bool starts_line = begin == 0;
    if (!starts_line) {
      CAPSULE_ASSIGN_OR_RETURN(std::string before, ReadRange(fd, begin - 1, 1, kJournalPath));
      starts_line = before == "\n";
    }
    if (starts_line && last.back() == '\n' && Sha256Hex(last) == cache->last_line_sha256) {
      if (cache->size == size) return cache->tail;
      // The journal grew since the cache was written (it is rewritten every few appends and
      // when a writer closes): only the lines after it are read and checked.
      last.pop_back();
      EventLine fields;
      Result<Event> event = ReadEventLine(last, &fields) ? HeaderOf(fields) : ParseEventLine(last, "journal");
      if (event.ok()) from = JournalPosition{cache->size, 1, cache->tail, std::move(event).value()};
    }
  }
  Result<JournalPosition> end = ContinueJournalAt(read, std::move(from));
  if (end.ok()) return std::move(end->tail);
  if (end.status().code() == Code::kIOError) return end.status();
  // A fault: named (with its line number) by a check of the whole journal from its start.
  CAPSULE_ASSIGN_OR_RETURN(std::string journal, ReadRange(fd, 0, size, kJournalPath));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> events, ReadJournalText(journal));
  JournalTail tail;  // sound after all: the cache it continued misled the check
  for (const Event& event : events) tail.Add(event);
  return tail;
}

Status SaveJournalTail(const std::string& capsule_dir, int fd, const std::string& last_line,
                       const JournalTail& tail) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IOError(kJournalPath, errno);
  TailCache cache;
  cache.inode = static_cast<uint64_t>(st.st_ino);
  cache.size = static_cast<uint64_t>(st.st_size);
  cache.last_line_length = last_line.size();
  cache.last_line_sha256 = Sha256Hex(last_line);
  cache.tail = tail;
  std::string text = TailText(cache);
  // Rewritten in place under the journal lock; a torn or stale cache fails its checks.
  std::string path = TailPath(capsule_dir);
  // Beneath the capsule folder: a link in the cache's place is refused, never written through.
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd out, OpenBeneathGiven(capsule_dir, local::kJournalTail, O_WRONLY | O_CREAT, 0644));
  if (::pwrite(out.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    return Status::IOError(path, errno);
  }
  if (::ftruncate(out.get(), static_cast<off_t>(text.size())) != 0) return Status::IOError(path, errno);
  return Status::Ok();
}

}  // namespace capsule::journal
