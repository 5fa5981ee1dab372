// Benchmark (not a test; tests/bench_move.sh runs it): moves the agent mounted at SOURCE to
// the sidecar at TO over TLS, writing CHANGE_MIB MiB through the mount while the copy runs
// (the agent keeps working), and prints the frozen time and where it went, one figure a line,
// and the peak resident set of this process, which is the move's source.
//
//   move_bench SOURCE TO CERT KEY CA CHANGE_MIB [EVENTS]
//
// EVENTS (0 when absent) events are appended to the journal through the mount after the copy
// too, as an agent that goes on talking does.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "capsule/base/file_io.h"
#include "move/move_source.h"
#include "move/tls_dialer.h"

namespace capsule::move {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Passes every call through, timing switch and activate, and writes the change after the copy.
class ChangeAfterCopy : public TargetApi {
 public:
  ChangeAfterCopy(TargetApi* inner, std::string path, size_t bytes, std::string journal, int events)
      : inner_(inner), path_(std::move(path)), bytes_(bytes), journal_(std::move(journal)), events_(events) {}
  Result<OfferReply> Offer(const OfferRequest& r) override { return inner_->Offer(r); }
  Result<HaveMap> Copy(const std::string& a, const std::string& m, ByteSource* s) override {
    Result<HaveMap> have = inner_->Copy(a, m, s);
    std::string data(bytes_, '\0');
    std::mt19937_64 random(42);
    for (size_t i = 0; i + 8 <= data.size(); i += 8) {
      uint64_t word = random();
      std::memcpy(&data[i], &word, 8);
    }
    Result<AtomicFile> file = AtomicFile::Create(path_);  // through the mount, like the agent
    if (file.ok() && file->Append(data).ok()) change_written_ = file->Commit().ok();
    if (events_ > 0) {  // the agent goes on talking: events appended through the mount
      Result<UniqueFd> journal = OpenFile(journal_, O_WRONLY | O_APPEND);
      for (int i = 0; journal.ok() && i < events_; ++i) {
        std::string line = R"({"data":{"text":"said during the copy )" + std::to_string(i) + R"("},"type":"user_message"})" "\n";
        if (!WriteAll(journal->get(), line, journal_).ok()) change_written_ = false;
      }
      if (!journal.ok()) change_written_ = false;
    }
    return have;
  }
  Status Switch(const std::string& a, const std::string& m, ByteSource* s) override {
    Clock::time_point start = Clock::now();
    Status done = inner_->Switch(a, m, s);
    switch_seconds_ = Since(start);
    return done;
  }
  Status Activate(const std::string& a, const std::string& m, uint64_t e) override {
    Clock::time_point start = Clock::now();
    Status done = inner_->Activate(a, m, e);
    activate_seconds_ = Since(start);
    return done;
  }
  Result<QueryReply> Query(const std::string& a, const std::string& m) override { return inner_->Query(a, m); }
  Status Abort(const std::string& a, const std::string& m) override { return inner_->Abort(a, m); }

  bool change_written_ = false;
  double switch_seconds_ = 0, activate_seconds_ = 0;

 private:
  TargetApi* inner_;
  std::string path_;
  size_t bytes_;
  std::string journal_;
  int events_;
};

int Main(int argc, char** argv) {
  if (argc != 7 && argc != 8) {
    std::fprintf(stderr, "usage: move_bench SOURCE TO CERT KEY CA CHANGE_MIB [EVENTS]\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  std::string source = argv[1], to = argv[2];
  TlsCredentials credentials{argv[3], argv[4], argv[5]};
  size_t change = static_cast<size_t>(std::stoul(argv[6])) << 20;
  RemoteTarget remote(to, TlsDialer(to, credentials));
  int events = argc == 8 ? std::stoi(argv[7]) : 0;
  ChangeAfterCopy target(&remote, JoinPath(source, "files/changed-during-copy.bin"), change,
                         JoinPath(source, "memory/timeline_events.jsonl"), events);
  MoveOptions options;
  options.to = to;
  Clock::time_point start = Clock::now();
  Result<MoveReport> report = RunMove(source, &target, options);
  double total = Since(start);
  if (!report.ok()) {
    std::fprintf(stderr, "move_bench: %s\n", report.status().message().c_str());
    return 1;
  }
  std::printf("change_written %d\n", target.change_written_ ? 1 : 0);
  std::printf("total_seconds %.3f\n", total);
  std::printf("copy_bytes %llu\n", static_cast<unsigned long long>(report->copy_bytes));
  std::printf("copy_seconds %.3f\n", report->copy_seconds);
  std::printf("switch_bytes %llu\n", static_cast<unsigned long long>(report->switch_bytes));
  std::printf("switch_file_bytes %llu\n", static_cast<unsigned long long>(report->switch_file_bytes));
  std::printf("preverify_seconds %.3f\n", report->preverify_seconds);
  std::printf("frozen_seconds %.3f\n", report->frozen_seconds);
  std::printf("freeze_seconds %.3f\n", report->freeze_seconds);
  std::printf("switch_seconds %.3f\n", target.switch_seconds_);
  std::printf("activate_seconds %.3f\n", target.activate_seconds_);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  std::printf("source_peak_rss_kib %ld\n", usage.ru_maxrss);  // this process: the move's source
  return 0;
}

}  // namespace
}  // namespace capsule::move

int main(int argc, char** argv) { return capsule::move::Main(argc, argv); }
