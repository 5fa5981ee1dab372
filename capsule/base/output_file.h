// Where a command writes the file a user names with -o:
//
//   "-"                            standard output
//   a FIFO or a character device   written in place, never renamed over (a pipe, a terminal,
//                                  /dev/null, /dev/stdout when it is one of those)
//   a regular file, or no file     the durable-write path: replaced whole at Commit, or left
//                                  untouched when the command fails
//   anything else                  refused, naming it: a symbolic link (it would be replaced,
//                                  not followed), a directory, a socket, a block device
//
// Thread-safety: a single-owner object.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "capsule/base/byte_stream.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule {

class OutputFile {
 public:
  static Result<OutputFile> Open(const std::string& path, mode_t mode = 0644);

  // Where the bytes go until Commit.
  ByteSink* sink() { return sink_.get(); }
  // Makes the output complete: the durable-write path's rename, or the last bytes flushed
  // (standard output, a FIFO or a device).
  Status Commit();
  // True when the output is written in place (standard output, a FIFO, a device).
  bool in_place() const { return !atomic_.has_value(); }

 private:
  OutputFile() = default;

  std::string path_;
  std::optional<AtomicFile> atomic_;  // a regular file, replaced whole
  UniqueFd fd_;                       // a FIFO or a device opened here (not standard output)
  std::unique_ptr<FdSink> sink_;
};

}  // namespace capsule
