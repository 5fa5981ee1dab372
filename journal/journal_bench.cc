// Journal benchmark: appends per second (unsynced and durable), verify speed against
// sha256sum of the same file, and merging two journals of N events each against GNU
// `sort -m -u` of the same lines. Ratios are measured in the same run.
//
//   bazel-bin/journal/journal_bench [--events N] [--appends N] [--durable-appends N] [--dir D]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/test_util.h"

namespace capsule::journal {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void Check(const Status& status, const char* what) {
  if (!status.ok()) {
    std::cerr << what << ": " << status.message() << "\n";
    std::exit(1);
  }
}

double TimeShell(const std::string& command) {
  auto start = Clock::now();
  if (std::system(command.c_str()) != 0) {
    std::cerr << "failed: " << command << "\n";
    std::exit(1);
  }
  return Seconds(start);
}

double AppendRate(const std::string& dir, int count, bool sync) {
  Result<Journal> journal = Journal::OpenForWrite(dir, testing::FixedTimeOptions(sync));
  Check(journal.status(), "open");
  auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    Check(journal->Append("user_message", {{"text", "benchmark event " + std::to_string(i)}}).status(), "append");
  }
  return count / Seconds(start);
}

// Appends `count` events of `machine` to `text`, chained after `*tail`, with clocks from
// `first_clock`.
void Generate(const std::string& machine, uint64_t count, uint64_t first_clock, MachineTail* tail, std::string* text) {
  for (uint64_t i = 0; i < count; ++i) {
    Event event;
    event.clock = first_clock + i;
    event.data = {{"text", "generated event " + std::to_string(tail->seq + 1) + " of " + machine}};
    event.machine = machine;
    event.seq = tail->seq + 1;
    if (tail->seq > 0) event.prev = tail->id;
    event.ts = "2026-12-02T16:40:00Z";
    event.type = "user_message";
    event.id = *event.ComputeId();
    *text += *event.CanonicalLine() + "\n";
    *tail = MachineTail{event.seq, event.id, event.clock};
  }
}

int Main(int argc, char** argv) {
  uint64_t events = 1000000;
  int appends = 20000, durable_appends = 1000;
  std::string root;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--events") events = std::stoull(argv[i + 1]);
    if (flag == "--appends") appends = std::stoi(argv[i + 1]);
    if (flag == "--durable-appends") durable_appends = std::stoi(argv[i + 1]);
    if (flag == "--dir") root = argv[i + 1];
  }
  if (root.empty()) root = testing::MakeTempDir("journal-bench");
  std::cout << "scratch folder: " << root << "\n";

  std::string append_dir = root + "/append";
  Check(testing::MakeTestCapsule(append_dir, testing::MachineName(1)), "create");
  double unsynced = AppendRate(append_dir, appends, false);
  double durable = AppendRate(append_dir, durable_appends, true);
  std::printf("append, unsynced:      %10.0f events/s (%d appends)\n", unsynced, appends);
  std::printf("append, durable:       %10.0f events/s (%d appends, write + fdatasync each)\n", durable,
              durable_appends);

  // Two journals of `events` each: half a shared history, then each machine's own half.
  auto start = Clock::now();
  std::string shared, a_text, b_text;
  MachineTail shared_tail, a_tail, b_tail;
  Generate(testing::MachineName(1), events / 2, 1, &shared_tail, &shared);
  Generate(testing::MachineName(2), events - events / 2, events / 2 + 1, &a_tail, &a_text);
  Generate(testing::MachineName(3), events - events / 2, events / 2 + 1, &b_tail, &b_text);
  a_text = shared + a_text;
  b_text = shared + b_text;
  shared.clear();
  std::printf("generated 2 x %llu events in %.1f s (%.0f MB each)\n", static_cast<unsigned long long>(events),
              Seconds(start), a_text.size() / 1e6);
  std::string a_dir = root + "/a", b_dir = root + "/b";
  Check(testing::MakeTestCapsule(a_dir, testing::MachineName(2)), "create a");
  Check(testing::MakeTestCapsule(b_dir, testing::MachineName(3)), "create b");
  std::string a_path = JoinPath(a_dir, kJournalPath), b_path = JoinPath(b_dir, kJournalPath);
  Check(WriteFileAtomic(a_path, a_text), "write a");
  Check(WriteFileAtomic(b_path, b_text), "write b");
  b_text.clear();

  start = Clock::now();
  Check(Journal::Verify(a_dir), "verify");
  double verify = Seconds(start);
  double sha = TimeShell("sha256sum " + a_path + " > /dev/null");
  std::printf("verify %llu events:    %10.2f s; sha256sum %.2f s; ratio %.1fx\n",
              static_cast<unsigned long long>(events), verify, sha, verify / sha);

  std::string sorted = root + "/sorted.jsonl";
  double sort = TimeShell("LC_ALL=C sort -m -u " + a_path + " " + b_path + " > " + sorted);
  start = Clock::now();
  Result<std::vector<Event>> theirs = Journal::Read(b_dir);
  Check(theirs.status(), "read b");
  Result<Journal> journal = Journal::OpenForWrite(a_dir);
  Check(journal.status(), "open a");
  Result<MergeResult> merged = journal->MergeFrom(std::move(*theirs));
  Check(merged.status(), "merge");
  double merge = Seconds(start);
  std::printf("merge 2 x %llu events: %10.2f s (%zu added, %zu in all); sort -m -u %.2f s; ratio %.1fx\n",
              static_cast<unsigned long long>(events), merge, merged->added, merged->total, sort, merge / sort);
  return 0;
}

}  // namespace
}  // namespace capsule::journal

int main(int argc, char** argv) { return capsule::journal::Main(argc, argv); }
