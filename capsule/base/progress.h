// Progress of a long job (export, import, verify, a Move Stream, a reindex, a workspace
// imported by init, a move): bytes and files done of a total, the rate and the time left.
//
// The code that does the work counts through the `Progress` interface, from any thread; the
// command line gives it the one reporter, `ProgressReporter`, which prints on standard error
// lines of one form (man capsule.1, PROGRESS):
//
//   export     12.0 MiB of 40.0 MiB, 3 of 10 files, 24.0 MiB/s, 1.2 s left
//   export     40.0 MiB of 40.0 MiB, 10 of 10 files, 25.1 MiB/s, done in 1.6 s
//
// A total not known beforehand (0) is left out ("3 files"), and so is the time left.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "capsule/base/mutex.h"
#include "capsule/base/byte_stream.h"

namespace capsule {

class Progress {
 public:
  virtual ~Progress() = default;
  // A new phase of the job, with what it will do (0: not known); the previous phase, if
  // any, is finished. `unit` names what is counted beside bytes ("files", "events"); empty
  // when nothing is.
  virtual void Begin(const std::string& phase, uint64_t total_bytes, uint64_t total_items,
                     const std::string& unit = "files") = 0;
  // `bytes` more done and `items` more finished, in the current phase.
  virtual void Add(uint64_t bytes, uint64_t items) = 0;
};

// Prints progress lines on a stdio stream: at most one every `interval` while counts rise,
// and always one when a phase ends (Begin of the next, or Finish). On a terminal (`rewrite`)
// each line overwrites the previous one ("\r") and the phase's last line ends it.
//
// Thread-safety: every method may be called from any thread (one mutex).
class ProgressReporter : public Progress {
 public:
  struct Options {
    FILE* out = stderr;
    bool rewrite = false;
    std::chrono::milliseconds interval{200};
  };
  explicit ProgressReporter(Options options);
  // A phase still open (the job failed) gets no last line.
  ~ProgressReporter() override;

  void Begin(const std::string& phase, uint64_t total_bytes, uint64_t total_items,
             const std::string& unit = "files") override;
  void Add(uint64_t bytes, uint64_t items) override;
  // Counts of the current phase set outright (for a job that reports totals so far).
  void Set(uint64_t bytes, uint64_t items);
  // Prints the current phase's last line, once; a later Begin starts a new phase.
  void Finish();

  // One line of the form above (no line end). `done` gives "done in S s" for the time left.
  static std::string Line(const std::string& phase, uint64_t bytes, uint64_t total_bytes, uint64_t items,
                          uint64_t total_items, const std::string& unit, double seconds, bool done);

 private:
  using Clock = std::chrono::steady_clock;
  void PrintLocked(bool done);  // REQUIRES: mu_ held

  const Options options_;
  Mutex mu_;
  std::string phase_;  // empty: no phase open
  std::string unit_ = "files";
  uint64_t bytes_ = 0, total_bytes_ = 0, items_ = 0, total_items_ = 0;
  Clock::time_point start_, last_print_;
};

// A source that counts every byte read through it into a Progress (for a job whose total is
// the size of the file it reads, such as a tar or a stream).
class CountingSource : public ByteSource {
 public:
  CountingSource(ByteSource* in, Progress* progress) : in_(in), progress_(progress) {}
  Result<size_t> Read(char* buffer, size_t size) override;

 private:
  ByteSource* in_;
  Progress* progress_;
};

}  // namespace capsule
