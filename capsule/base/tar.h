// Streaming tar (POSIX pax interchange format), written deterministically and read
// defensively. Used by capsule export and import and by the Move Stream.
//
// Writer: ustar headers with fixed owner (0/0, root/root) and time (0); a pax extended header
// ('x') before any entry whose path or link is longer than the ustar fields hold, whose size
// is 8 GiB or more, or that carries extra records (such as LNK.sha256); folders end in '/';
// the archive ends with two zero blocks padded to a 10240-byte record.
//
// Reader: checks every header's checksum and magic, applies pax ('x') and GNU long-name
// ('L', 'K') headers, and reports a stream that ends early as Corruption "cut short". It does
// not judge paths or types: callers refuse what their format forbids.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "capsule/base/byte_stream.h"
#include "capsule/base/status.h"

namespace capsule {

struct TarEntry {
  enum class Type { kFile, kDirectory, kSymlink, kHardLink, kFifo, kCharDevice, kBlockDevice, kOther };
  std::string path;  // as stored, a leading "./" and a folder's trailing '/' taken off
  Type type = Type::kFile;
  char type_flag = '0';  // the raw ustar type, for error messages
  uint64_t size = 0;
  mode_t mode = 0644;
  std::string link_target;  // kSymlink: the target; kHardLink: the earlier entry's path
  uint32_t dev_major = 0, dev_minor = 0;  // kCharDevice, kBlockDevice
  std::map<std::string, std::string> pax;  // every pax record that applied to this entry
};

const char* TarTypeName(const TarEntry& entry);

class TarWriter {
 public:
  explicit TarWriter(ByteSink* sink) : sink_(sink) {}

  Status AddDirectory(const std::string& path, mode_t mode = 0755,
                      const std::map<std::string, std::string>& pax = {});
  Status AddSymlink(const std::string& path, const std::string& target,
                    const std::map<std::string, std::string>& pax = {});
  // Another name of the earlier entry `earlier` (a hard link: no data).
  Status AddHardLink(const std::string& path, const std::string& earlier,
                     const std::map<std::string, std::string>& pax = {});
  // A FIFO or a device node (kFifo, kCharDevice, kBlockDevice of `entry`): a header only.
  Status AddSpecial(const TarEntry& entry);
  // A regular file of exactly `size` bytes, given by WriteFileData calls, then EndFile.
  Status BeginFile(const std::string& path, uint64_t size, mode_t mode = 0644,
                   const std::map<std::string, std::string>& pax = {});
  Status WriteFileData(std::string_view data);
  Status EndFile();
  Status AddFile(const std::string& path, std::string_view data, mode_t mode = 0644,
                 const std::map<std::string, std::string>& pax = {});
  // The end-of-archive marker. The writer is spent afterwards.
  Status Finish();

  uint64_t bytes_written() const { return offset_; }

 private:
  Status WriteHeader(const TarEntry& entry);
  Status Emit(std::string_view data);

  ByteSink* sink_;
  uint64_t offset_ = 0;
  uint64_t file_remaining_ = 0;
  uint64_t file_size_ = 0;
  bool in_file_ = false;
  bool finished_ = false;
};

class TarReader {
 public:
  explicit TarReader(ByteSource* source) : source_(source) {}

  // Reads the next entry's header into `entry`; false at the end-of-archive marker. The rest
  // of the previous file's data is skipped.
  Result<bool> Next(TarEntry* entry);
  // Reads the current file's data; 0 once all of it was read.
  Result<size_t> ReadData(char* buffer, size_t size);
  // After Next returned false: Corruption unless only zero bytes follow.
  Status ExpectOnlyZerosAfterEnd();

 private:
  Status SkipRestOfEntry();
  Result<std::string> ReadSpecialBody(uint64_t size, const std::string& what);

  ByteSource* source_;
  uint64_t data_remaining_ = 0;
  uint64_t padding_remaining_ = 0;
  std::string current_path_;
};

}  // namespace capsule
