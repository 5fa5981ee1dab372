// Journal benchmark, driven by tests/bench_journal.sh, which measures the baselines (sha256sum,
// sort -m -u, a C write + fdatasync loop) in the same run and prints the ratios:
//
//   journal_bench verify DIR                      Journal::Verify of DIR's journal: seconds
//   journal_bench read DIR                        Journal::Read (every event built): seconds
//   journal_bench merge DIR OTHER                 what capsule merge does to the journal: seconds
//   journal_bench append DIR COUNT [WRITERS] [--unsynced]
//                                                 COUNT appends in all by WRITERS threads,
//                                                 each with its own Journal: events/s
//
// Each prints one line "<what> <figure>" on standard output for the script to read.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

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

// A message of about the size a conversation's events have.
Json Message(size_t writer, size_t i) {
  return {{"text", "writer " + std::to_string(writer) + " says event " + std::to_string(i) +
                       ": the build finished, 214 tests passed, and the report is in files/report.md"}};
}

int Append(const std::string& dir, size_t count, size_t writers, bool sync) {
  std::vector<Journal> journals;
  for (size_t w = 0; w < writers; ++w) {
    Result<Journal> journal = Journal::OpenForWrite(dir, testing::FixedTimeOptions(sync));
    Check(journal.status(), "open");
    journals.push_back(std::move(journal).value());
  }
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      for (size_t i = w; i < count; i += writers) Check(journals[w].Append("user_message", Message(w, i)).status(), "append");
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::printf("append %.0f\n", count / Seconds(start));
  return 0;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool sync = true;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--unsynced") {
      sync = false;
      args.erase(args.begin() + static_cast<long>(i));
      break;
    }
  }
  if (args.size() == 2 && args[0] == "verify") {
    auto start = Clock::now();
    Check(Journal::Verify(args[1]), "verify");
    std::printf("verify %.3f\n", Seconds(start));
    return 0;
  }
  if (args.size() == 2 && args[0] == "read") {
    auto start = Clock::now();
    Result<std::vector<Event>> events = Journal::Read(args[1]);
    Check(events.status(), "read");
    std::printf("read %.3f\n", Seconds(start));
    return 0;
  }
  if (args.size() == 3 && args[0] == "merge") {
    auto start = Clock::now();
    Result<OtherJournal> theirs = OtherJournal::Load(args[2]);
    Check(theirs.status(), "read the other journal");
    Result<Journal> journal = Journal::OpenForWrite(args[1]);
    Check(journal.status(), "open");
    Result<MergeResult> merged = journal->MergeFrom(*theirs);
    Check(merged.status(), "merge");
    std::printf("merge %.3f %zu %zu\n", Seconds(start), merged->added, merged->total);
    return 0;
  }
  if ((args.size() == 3 || args.size() == 4) && args[0] == "append") {
    return Append(args[1], std::stoull(args[2]), args.size() == 4 ? std::stoull(args[3]) : 1, sync);
  }
  std::cerr << "usage: journal_bench verify DIR | read DIR | merge DIR OTHER | append DIR COUNT [WRITERS] [--unsynced]\n";
  return 2;
}

}  // namespace
}  // namespace capsule::journal

int main(int argc, char** argv) { return capsule::journal::Main(argc, argv); }
