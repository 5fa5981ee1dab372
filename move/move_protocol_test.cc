// The move protocol under every failure: a FaultyTarget loses one named call's request or
// reply, corrupts a stream, partitions the target or crashes it around a call; the source is
// crashed after each step and recovered from disk. After each: at most one machine runs the
// agent (none only while the source waits for an answer), the target's staging area is
// empty unless a move is still waiting, and the capsule verifies wherever it is held.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/process_lock.h"
#include "capsule/base/sha256.h"
#include "capsule/base/temp_dir.h"
#include "capsule/format/create.h"
#include "capsule/format/export.h"
#include "capsule/format/holder.h"
#include "capsule/format/import.h"
#include "capsule/format/keys.h"
#include "capsule/format/layout.h"
#include "capsule/format/verify.h"
#include "capsule/format/workspace.h"
#include "journal/check.h"
#include "journal/journal.h"
#include "move/faulty_target.h"
#include "move/move_source.h"
#include "move/move_target.h"
#include "move/remote_target.h"
#include "move/serve.h"
#include "move/tls_dialer.h"

namespace capsule::move {
namespace {

using ::capsule::testing::MakeTempDir;

constexpr char kAgent[] = "agent-1";

std::string StateOf(const std::string& dir) {
  Result<HolderRecord> record = HolderRecord::Load(dir);
  if (!record.ok()) return PathExists(dir) ? "none" : "absent";
  return std::string(HolderStateName(record->state)) + "@" + std::to_string(record->epoch);
}

class MoveProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("move");
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws + "/src").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/src/big.bin", std::string(200 << 10, 'x')).ok());
    src_ = root_ + "/src";
    CreateOptions options;
    options.agent = {kAgent, "Sample", std::nullopt};
    options.workspace_source = ws;
    ASSERT_TRUE(CreateCapsule(src_, options).ok());
    Append(src_, "user_message", "hello");
    key_ = root_ + "/seal.key";
    ASSERT_TRUE(GenerateKeyFile(KeyType::kX25519, key_).ok());
    target_root_ = root_ + "/target";
    target_ = std::make_unique<FaultyTarget>([this]() -> std::unique_ptr<TargetApi> {
      Result<EvpPkeyPtr> key = LoadPrivateKey(key_, KeyType::kX25519);
      EXPECT_TRUE(key.ok());
      Result<std::unique_ptr<MoveTarget>> target = MoveTarget::Open(target_root_, std::move(*key));
      EXPECT_TRUE(target.ok()) << target.status().ToString();
      return std::move(*target);
    });
    options_.to = "target";
    options_.query_attempts = 3;
    options_.query_interval = std::chrono::milliseconds(1);
  }

  static void Append(const std::string& dir, const std::string& type, const std::string& text) {
    Result<journal::Journal> journal = journal::Journal::OpenForWrite(dir);
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    ASSERT_TRUE(journal->Append(type, Json{{"text", text}}).ok());
  }

  std::string Held() const { return target_root_ + "/" + kAgent; }
  std::string Staging() const { return target_root_ + "/.staging/" + kAgent; }

  static void ExpectVerifies(const std::string& dir) {
    if (!PathExists(JoinPath(dir, kManifestPath))) return;
    VerifyOptions verify;
    verify.check_journal = journal::CheckJournalAt;
    Result<VerifyReport> report = VerifyFolder(dir, verify);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->ok()) << dir << ": " << report->problems.front();
  }

  // The invariant, and whether the move left someone waiting.
  void ExpectInvariant(bool waiting = false) {
    std::string source = StateOf(src_), target = StateOf(Held());
    int active = (source.rfind("active", 0) == 0) + (target.rfind("active", 0) == 0);
    EXPECT_LE(active, 1) << "two machines run the agent: source " << source << ", target " << target;
    if (!waiting) {
      EXPECT_EQ(active, 1) << "no machine runs the agent: source " << source << ", target " << target;
      EXPECT_FALSE(PathExists(Staging())) << "the target's staging area was left behind";
      Result<std::optional<OutgoingMove>> left = LoadOutgoingMove(src_);
      ASSERT_TRUE(left.ok());
      EXPECT_FALSE(left->has_value()) << "the source still records a move in progress";
    } else {
      EXPECT_EQ(source.rfind("frozen", 0), 0u) << "only a frozen source may wait: " << source;
    }
    ExpectVerifies(src_);
    ExpectVerifies(Held());
  }

  void ExpectMoved() {
    EXPECT_EQ(StateOf(src_), "retired@1");
    EXPECT_EQ(StateOf(Held()), "active@2");
    ExpectInvariant();
  }

  void ExpectStayed() {
    EXPECT_EQ(StateOf(src_), "active@1");
    EXPECT_NE(StateOf(Held()).rfind("active", 0), 0u);
    ExpectInvariant();
  }

  std::string root_, src_, key_, target_root_;
  std::unique_ptr<FaultyTarget> target_;
  MoveOptions options_;
};

// Forwards every call to `inner`, and runs `then` once the copy has been answered: what the
// agent does while the source prepares to freeze.
struct AfterCopy : TargetApi {
  TargetApi* inner = nullptr;
  std::function<void()> then;
  Result<OfferReply> Offer(const OfferRequest& r) override { return inner->Offer(r); }
  Result<HaveMap> Copy(const std::string& a, const std::string& m, ByteSource* s) override {
    Result<HaveMap> have = inner->Copy(a, m, s);
    then();
    return have;
  }
  Status Switch(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Switch(a, m, s); }
  Status Activate(const std::string& a, const std::string& m, uint64_t e) override { return inner->Activate(a, m, e); }
  Result<QueryReply> Query(const std::string& a, const std::string& m) override { return inner->Query(a, m); }
  Status Abort(const std::string& a, const std::string& m) override { return inner->Abort(a, m); }
};

// Events said after the copy cross the switch alone to a target whose offer says it takes a
// journal's appended events; a target that does not say so (one built before) gets the
// journal whole. Either way the target's journal is the source's.
class JournalAppendTest : public MoveProtocolTest {
 protected:
  // Moves src_ while an event is said after the copy; the switch's file bytes.
  uint64_t MoveSayingAnEventDuringTheCopy(bool target_takes_appends) {
    for (int i = 0; i < 300; ++i) Append(src_, "user_message", "history " + std::to_string(i));
    struct Announcing : AfterCopy {
      bool takes = true;
      Result<OfferReply> Offer(const OfferRequest& r) override {
        Result<OfferReply> reply = inner->Offer(r);
        if (reply.ok()) reply->journal_append = reply->journal_append && takes;
        return reply;
      }
    } target;
    target.inner = target_.get();
    target.takes = target_takes_appends;
    target.then = [&] { Append(src_, "user_message", "said during the copy"); };
    Result<MoveReport> report = RunMove(src_, &target, options_);
    EXPECT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(*ReadFile(JoinPath(Held(), kJournalPath)), *ReadFile(JoinPath(src_, kJournalPath)));
    ExpectMoved();
    return report.ok() ? report->switch_file_bytes : 0;
  }
};

TEST_F(JournalAppendTest, ATargetThatTakesAppendsGetsOnlyTheEventsSaidSinceTheCopy) {
  const uint64_t sent = MoveSayingAnEventDuringTheCopy(true);
  const std::string journal = *ReadFile(JoinPath(src_, kJournalPath));
  EXPECT_EQ(sent, journal.size() - (journal.rfind('\n', journal.size() - 2) + 1)) << "the last event alone";
}

TEST_F(JournalAppendTest, ATargetThatDoesNotSaySoGetsTheJournalWhole) {
  const uint64_t sent = MoveSayingAnEventDuringTheCopy(false);
  EXPECT_EQ(sent, ReadFile(JoinPath(src_, kJournalPath))->size());
}

TEST_F(MoveProtocolTest, MoveWithoutFaultsHandsOverAtTheNextEpoch) {
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->epoch, 2u);
  EXPECT_GE(report->copy_files, 2u);
  EXPECT_EQ(report->switch_files, 0u) << "nothing changed since the copy, so the switch carries no file";
  ExpectMoved();
  // The target runs it now: it may write; the source may not.
  EXPECT_TRUE(CheckHeldForWrite(Held()).ok());
  EXPECT_FALSE(CheckHeldForWrite(src_).ok());
  Result<std::vector<journal::Event>> events = journal::Journal::Read(Held());
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u);
}

TEST_F(MoveProtocolTest, WhatChangesWhileTheCopyRunsCrossesInTheSwitch) {
  // The agent keeps running during the copy: an event appended then must arrive.
  AfterCopy during;
  during.inner = target_.get();
  during.then = [&] { Append(src_, "user_message", "written during the copy"); };
  Result<MoveReport> report = RunMove(src_, &during, options_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->switch_files, 1u) << "only the journal changed";
  ExpectMoved();
  Result<std::vector<journal::Event>> events = journal::Journal::Read(Held());
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ(events->back().data.value("text", ""), "written during the copy");
}

// Files removed or rewritten while the copy runs: the switch carries the change, and their
// old content leaves the target too (deleted means deleted, on both machines).
TEST_F(MoveProtocolTest, ContentRemovedWhileTheCopyRunsLeavesTheTargetAtTheSwitch) {
  const std::string big_blob = BlobPath(Sha256Hex(std::string(200 << 10, 'x')));
  const std::string readme_blob = BlobPath(Sha256Hex("# sample\n"));
  AfterCopy after;
  after.inner = target_.get();
  after.then = [&] {
    ASSERT_TRUE(PathExists(JoinPath(Staging(), big_blob))) << "the copy carried it";
    ASSERT_TRUE(WriteFileAtomic(root_ + "/readme-2", "# sample, second\n").ok());
    ASSERT_TRUE(PutWorkspaceFile(src_, "README.md", root_ + "/readme-2").ok());
    Result<Snapshot> snapshot = Snapshot::Load(src_);
    ASSERT_TRUE(snapshot.ok());
    snapshot->Remove("src/big.bin");
    ASSERT_TRUE(snapshot->Save(src_).ok());
    Result<Manifest> manifest = Manifest::Load(src_);
    ASSERT_TRUE(manifest.ok());
    std::vector<std::string> gone = UnreferencedBlobsOf(*manifest, *snapshot);
    std::vector<std::string> expected = {big_blob, readme_blob};
    std::sort(expected.begin(), expected.end());
    ASSERT_EQ(gone, expected);
    for (const std::string& blob : gone) manifest->files.erase(blob);
    ASSERT_TRUE(RefreshManifestEntries(src_, {kSnapshotPath, BlobPath(Sha256Hex("# sample, second\n"))},
                                       &*manifest).ok());
    ASSERT_TRUE(manifest->Save(src_).ok());
    ASSERT_TRUE(RemoveBlobs(src_, {big_blob, readme_blob}).ok());
    ExpectVerifies(src_);
  };
  Result<MoveReport> report = RunMove(src_, &after, options_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->removed, 1u);
  ExpectMoved();
  EXPECT_FALSE(PathExists(JoinPath(Held(), big_blob)));
  EXPECT_FALSE(PathExists(JoinPath(Held(), readme_blob)));
  EXPECT_EQ(*ReadWorkspaceFile(Held(), "README.md"), "# sample, second\n");
  Result<Manifest> held = Manifest::Load(Held());
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->files.count(big_blob), 0u);
  EXPECT_EQ(held->files.count(readme_blob), 0u);
}

// The switch checks the journal's new lines against what the copy checked: a line appended
// twice after the copy, or a switch to a model this machine cannot render for, is refused
// before the point of no return.
TEST_F(MoveProtocolTest, JournalLinesAddedAfterTheCopyAreCheckedAtTheSwitch) {
  AfterCopy after;
  after.inner = target_.get();
  std::string journal_path = JoinPath(src_, kJournalPath);
  std::string before = *ReadFile(journal_path);
  after.then = [&] {
    Append(src_, "user_message", "once");
    std::string text = *ReadFile(journal_path);
    std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
    ASSERT_TRUE(WriteFileAtomic(journal_path, text + last).ok());  // the same line again
  };
  Result<MoveReport> duplicated = RunMove(src_, &after, options_);
  ASSERT_FALSE(duplicated.ok());
  EXPECT_NE(duplicated.status().message().find("duplicate"), std::string::npos) << duplicated.status().ToString();
  EXPECT_EQ(StateOf(src_), "active@1");
  EXPECT_FALSE(PathExists(Staging()));

  ASSERT_TRUE(WriteFileAtomic(journal_path, before).ok());
  after.then = [&] {
    Result<journal::Journal> journal = journal::Journal::OpenForWrite(src_);
    ASSERT_TRUE(journal.ok());
    ASSERT_TRUE(journal->Append("model_switch", Json{{"provider", "acme"}, {"model", "a1"}}).ok());
  };
  Result<MoveReport> unknown = RunMove(src_, &after, options_);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("switch"), std::string::npos) << unknown.status().ToString();
  EXPECT_NE(unknown.status().message().find("acme"), std::string::npos) << unknown.status().ToString();
  EXPECT_EQ(StateOf(src_), "active@1");
  EXPECT_FALSE(PathExists(Staging()));
}

TEST_F(MoveProtocolTest, MovingBackSendsOnlyWhatChanged) {
  ASSERT_TRUE(RunMove(src_, target_.get(), options_).ok());
  // Back the other way: the old source's retired copy is the have.
  std::string back_root = root_ + "/back";
  ASSERT_TRUE(MakeDirectories(back_root).ok());
  ASSERT_EQ(::rename(src_.c_str(), (back_root + "/" + kAgent).c_str()), 0);
  Append(Held(), "user_message", "on the target");
  Result<EvpPkeyPtr> key = LoadPrivateKey(key_, KeyType::kX25519);
  ASSERT_TRUE(key.ok());
  Result<std::unique_ptr<MoveTarget>> back = MoveTarget::Open(back_root, std::move(*key));
  ASSERT_TRUE(back.ok());
  Result<MoveReport> report = RunMove(Held(), back->get(), options_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->epoch, 3u);
  EXPECT_EQ(report->copy_files, 1u) << "only the journal differs from the retired copy";
  EXPECT_LT(report->copy_bytes, 100u << 10) << "the 200 KiB file was not sent again";
  EXPECT_EQ(StateOf(back_root + "/" + kAgent), "active@3");
  EXPECT_EQ(StateOf(Held()), "retired@2");
  ExpectVerifies(back_root + "/" + kAgent);
}

// Every call, its request lost or its reply lost. Calls that only run on a failure path
// (query, abort) are armed behind a fault that leads there.
struct CallFault {
  const char* call;
  Fault fault;
  bool moves;  // whether the move completes
};

std::string CallFaultName(const ::testing::TestParamInfo<CallFault>& info) {
  static const char* const kNames[] = {"None", "RequestLost", "ReplyLost", "CrashBefore", "CrashAfter", "Corrupt"};
  return std::string(info.param.call) + kNames[static_cast<int>(info.param.fault)];
}

class EveryCallTest : public MoveProtocolTest, public ::testing::WithParamInterface<CallFault> {};

TEST_P(EveryCallTest, OneLostCallKeepsTheInvariant) {
  const CallFault& param = GetParam();
  target_->Arm(param.call, param.fault);
  std::string call = param.call;
  if (call == "query") {
    // Reached only when activate's reply is lost first.
    struct Twice : TargetApi {
      FaultyTarget* inner;
      Fault query_fault;
      bool lost = false;
      Result<OfferReply> Offer(const OfferRequest& r) override { return inner->Offer(r); }
      Result<HaveMap> Copy(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Copy(a, m, s); }
      Status Switch(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Switch(a, m, s); }
      Status Activate(const std::string& a, const std::string& m, uint64_t e) override {
        Status done = inner->Activate(a, m, e);
        return done.ok() ? Status::Unavailable("target", "activate's reply lost") : done;
      }
      Result<QueryReply> Query(const std::string& a, const std::string& m) override { return inner->Query(a, m); }
      Status Abort(const std::string& a, const std::string& m) override { return inner->Abort(a, m); }
    } twice;
    twice.inner = target_.get();
    Result<MoveReport> report = RunMove(src_, &twice, options_);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(target_->faults_fired(), 1);
    ExpectMoved();
    return;
  }
  if (call == "abort") target_->Arm("copy", Fault::kLoseReply);  // a failure, so a rollback
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  if (call == "abort") {
    target_->Arm("abort", param.fault);
    // The copy's lost reply rolled back; now with the abort lost as well.
    report = RunMove(src_, target_.get(), options_);  // moves: the first rollback left it clean
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ExpectMoved();
    return;
  }
  EXPECT_EQ(target_->faults_fired(), 1);
  if (param.moves) {
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ExpectMoved();
  } else {
    ASSERT_FALSE(report.ok());
    ExpectStayed();
    // And a retry, with nothing lost, completes: a rollback leaves nothing in the way.
    Result<MoveReport> again = RunMove(src_, target_.get(), options_);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    ExpectMoved();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Calls, EveryCallTest,
    ::testing::Values(CallFault{"offer", Fault::kLoseRequest, false}, CallFault{"offer", Fault::kLoseReply, false},
                      CallFault{"copy", Fault::kLoseRequest, false}, CallFault{"copy", Fault::kLoseReply, false},
                      CallFault{"switch", Fault::kLoseRequest, false}, CallFault{"switch", Fault::kLoseReply, false},
                      // activate lost: the query finds the old epoch, so the source thaws
                      CallFault{"activate", Fault::kLoseRequest, false},
                      // activate's reply lost: the query finds the new epoch, so the source retires
                      CallFault{"activate", Fault::kLoseReply, true},
                      CallFault{"query", Fault::kLoseRequest, true}, CallFault{"query", Fault::kLoseReply, true},
                      CallFault{"abort", Fault::kLoseRequest, true}, CallFault{"abort", Fault::kLoseReply, true},
                      // the target crashes (and restarts from disk) around each call
                      CallFault{"offer", Fault::kCrashBefore, false}, CallFault{"offer", Fault::kCrashAfter, false},
                      CallFault{"copy", Fault::kCrashBefore, false}, CallFault{"copy", Fault::kCrashAfter, false},
                      CallFault{"switch", Fault::kCrashBefore, false}, CallFault{"switch", Fault::kCrashAfter, false},
                      CallFault{"activate", Fault::kCrashBefore, false}, CallFault{"activate", Fault::kCrashAfter, true}),
    CallFaultName);

// Prepare resolves every conversation's provider and model: an agent talking to a model
// this machine cannot render for is refused before the point of no return; one it can is
// taken.
TEST_F(MoveProtocolTest, PrepareRendersTheJournalForItsModelAndRefusesOneItCannot) {
  {
    Result<journal::Journal> journal = journal::Journal::OpenForWrite(src_);
    ASSERT_TRUE(journal.ok());
    ASSERT_TRUE(journal->Append("model_switch", Json{{"provider", "anthropic"}, {"model", "claude-x"}}).ok());
    ASSERT_TRUE(journal->Append("assistant_message", Json{{"provider", "anthropic"}, {"model", "claude-x"}, {"text", "hi"}}).ok());
    ASSERT_TRUE(journal->Append("model_switch", Json{{"conversation", "side"}, {"provider", "acme"}, {"model", "a1"}}).ok());
  }
  Result<MoveReport> refused = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rendering the staged journal"), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("acme"), std::string::npos) << refused.status().ToString();
  ExpectStayed();

  {
    Result<journal::Journal> journal = journal::Journal::OpenForWrite(src_);
    ASSERT_TRUE(journal.ok());
    ASSERT_TRUE(journal->Append("model_switch", Json{{"conversation", "side"}, {"provider", "gemini"}, {"model", "g1"}}).ok());
  }
  Result<MoveReport> taken = RunMove(src_, target_.get(), options_);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  ExpectMoved();
}

// Reads a socket, giving up after `deadline` without a byte, as a sidecar's TLS link does
// after 300 seconds (kLinkTimeoutSeconds); no deadline when it is zero.
class DeadlineSource : public ByteSource {
 public:
  DeadlineSource(int fd, std::chrono::milliseconds deadline) : fd_(fd), deadline_(deadline), in_(fd, "socket") {}
  Result<size_t> Read(char* buffer, size_t size) override {
    pollfd ready{fd_, POLLIN, 0};
    if (deadline_.count() > 0 && ::poll(&ready, 1, static_cast<int>(deadline_.count())) == 0) {
      return Status::Unavailable("socket", "no byte within the deadline");
    }
    return in_.Read(buffer, size);
  }

 private:
  int fd_;
  std::chrono::milliseconds deadline_;
  FdSource in_;
};

// One end of a socketpair as a wire connection.
class SocketConnection : public Connection {
 public:
  explicit SocketConnection(int fd, std::chrono::milliseconds deadline = {})
      : fd_(fd), in_(fd, deadline), out_(fd, "socket") {}
  ~SocketConnection() override { ::close(fd_); }
  ByteSource* in() override { return &in_; }
  ByteSink* out() override { return &out_; }
  void Close() override { ::shutdown(fd_, SHUT_RDWR); }

 private:
  int fd_;
  DeadlineSource in_;
  FdSink out_;
};

struct WireOptions {
  std::chrono::milliseconds max_idle = std::chrono::seconds(60);  // the source dials again after
  std::chrono::milliseconds deadline{};                          // the source's read deadline
  std::chrono::milliseconds working_interval = kWorkingInterval;  // the target's
  std::chrono::milliseconds max_call_wait = kMaxCallWait;         // the source's, for a reply
};

// Moves src to the target over the wire (RemoteTarget -> socketpair -> ServeConnection): the
// move's result and how many connections were dialled.
std::pair<Result<MoveReport>, int> MoveOverTheWire(TargetApi* target, const std::string& src, const MoveOptions& options,
                                                   const WireOptions& wire) {
  std::vector<std::thread> servers;
  int dials = 0;
  Result<MoveReport> moved = Status::Unavailable("move", "not run");
  {
    RemoteTarget remote("target", [&](int) -> Result<std::unique_ptr<Connection>> {
      int fds[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return Status::IOError("socketpair", errno);
      ++dials;
      servers.emplace_back([target, fd = fds[1], interval = wire.working_interval] {
        SocketConnection server(fd);
        (void)ServeConnection(&server, target, interval);
      });
      return std::unique_ptr<Connection>(new SocketConnection(fds[0], wire.deadline));
    });
    remote.set_max_idle(wire.max_idle);
    remote.set_max_call_wait(wire.max_call_wait);
    moved = RunMove(src, &remote, options);
  }  // the last connection closes: its server returns
  for (std::thread& server : servers) server.join();
  return {std::move(moved), dials};
}

// A target that takes `slow` to answer a copy once it has applied it.
struct SlowCopy : TargetApi {
  FaultyTarget* inner = nullptr;
  std::chrono::milliseconds slow{800};
  Result<OfferReply> Offer(const OfferRequest& r) override { return inner->Offer(r); }
  Result<HaveMap> Copy(const std::string& a, const std::string& m, ByteSource* s) override {
    Result<HaveMap> have = inner->Copy(a, m, s);
    std::this_thread::sleep_for(slow);
    return have;
  }
  Status Switch(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Switch(a, m, s); }
  Status Activate(const std::string& a, const std::string& m, uint64_t e) override { return inner->Activate(a, m, e); }
  Result<QueryReply> Query(const std::string& a, const std::string& m) override { return inner->Query(a, m); }
  Status Abort(const std::string& a, const std::string& m) override { return inner->Abort(a, m); }
};
TEST_F(MoveProtocolTest, OverTheWireOneConnectionCarriesTheMove) {
  auto [moved, dials] = MoveOverTheWire(target_.get(), src_, options_, WireOptions{});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(dials, 1);
  ExpectMoved();
}

// A link left idle longer than max_idle (the source busy between calls; a sidecar hangs up on
// a silent link) is dialled again before the next call, and the move goes on.
TEST_F(MoveProtocolTest, OverTheWireAnIdleLinkIsDialledAgain) {
  WireOptions wire;
  wire.max_idle = std::chrono::milliseconds(0);
  auto [moved, dials] = MoveOverTheWire(target_.get(), src_, options_, wire);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_GE(dials, 4) << "offer, copy, switch and activate each on a fresh connection";
  ExpectMoved();
}

// A target slower at a call than the source's read deadline (a copy of a million files applies
// for minutes; the deadline is 300 s): its working messages keep the call alive, and the move
// completes. Without them (an interval past the deadline) the same move fails as a dead link
// and rolls back, which is what the messages are for; and a target at work past the longest
// wait the source allows (stuck, not gone) is given up the same way.
TEST_F(MoveProtocolTest, OverTheWireASlowTargetKeepsTheCallAliveWhileItWorks) {
  SlowCopy slow;
  slow.inner = target_.get();
  slow.slow = std::chrono::milliseconds(800);  // four deadlines
  ::signal(SIGPIPE, SIG_IGN);  // the silent target's late reply meets a closed socket, as a sidecar's may
  WireOptions wire;
  wire.deadline = std::chrono::milliseconds(200);

  wire.working_interval = std::chrono::seconds(30);
  auto [silent, silent_dials] = MoveOverTheWire(&slow, src_, options_, wire);
  ASSERT_FALSE(silent.ok()) << "a target silent past the deadline is taken for a dead link";
  EXPECT_EQ(silent.status().code(), Code::kUnavailable) << silent.status().ToString();
  EXPECT_NE(silent.status().message().find("copy"), std::string::npos) << silent.status().ToString();
  ExpectStayed();

  wire.working_interval = std::chrono::milliseconds(50);
  wire.max_call_wait = std::chrono::milliseconds(300);
  auto [stuck, stuck_dials] = MoveOverTheWire(&slow, src_, options_, wire);
  ASSERT_FALSE(stuck.ok()) << "a call past the longest wait is given up";
  EXPECT_EQ(stuck.status().code(), Code::kUnavailable) << stuck.status().ToString();
  EXPECT_NE(stuck.status().message().find("saying it is at work"), std::string::npos) << stuck.status().ToString();
  ExpectStayed();

  wire.max_call_wait = kMaxCallWait;
  auto [moved, dials] = MoveOverTheWire(&slow, src_, options_, wire);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  ExpectMoved();
}

// Working messages go only to a source that asks for them: one from before them would take the
// first for its reply.
TEST_F(MoveProtocolTest, WorkingMessagesGoOnlyToASourceThatAsksForThem) {
  struct SlowAbort : SlowCopy {
    Status Abort(const std::string& a, const std::string& m) override {
      std::this_thread::sleep_for(slow);
      return inner->Abort(a, m);
    }
  } slow;
  slow.inner = target_.get();
  slow.slow = std::chrono::milliseconds(300);
  for (bool asks : {false, true}) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    std::thread server([&slow, fd = fds[1]] {
      SocketConnection conn(fd);
      (void)ServeConnection(&conn, &slow, std::chrono::milliseconds(20));
    });
    {
      SocketConnection source(fds[0]);
      Json request = {{"call", "abort"}, {"agent", kAgent}, {"move", "00112233445566778899aabbccddeeff"}};
      if (asks) request["working_messages"] = true;
      ASSERT_TRUE(WriteMessage(source.out(), request).ok());
      Result<Json> first = ReadMessage(source.in());
      ASSERT_TRUE(first.ok()) << first.status().ToString();
      EXPECT_EQ(IsWorkingMessage(*first), asks) << first->dump();
      Result<Json> last = first;
      while (last.ok() && IsWorkingMessage(*last)) last = ReadMessage(source.in());
      ASSERT_TRUE(last.ok()) << last.status().ToString();
      EXPECT_TRUE(last->contains("ok")) << last->dump();
    }  // closed: the server returns
    server.join();
  }
}

// A have larger than a message may be (a million files' is a hundred megabytes) crosses after
// its reply as a body, whole; a source that does not ask for that gets it in the reply.
TEST_F(MoveProtocolTest, AHaveOfAnySizeCrossesTheWire) {
  struct BigHave : TargetApi {
    HaveMap have;
    Result<OfferReply> Offer(const OfferRequest&) override { return OfferReply{have, std::string(64, 'a'), 0, false}; }
    Result<HaveMap> Copy(const std::string&, const std::string&, ByteSource* s) override {
      std::vector<char> buffer(1 << 16);
      for (;;) {
        CAPSULE_ASSIGN_OR_RETURN(size_t n, s->Read(buffer.data(), buffer.size()));
        if (n == 0) return have;
      }
    }
    Status Switch(const std::string&, const std::string&, ByteSource*) override { return Status::Ok(); }
    Status Activate(const std::string&, const std::string&, uint64_t) override { return Status::Ok(); }
    Result<QueryReply> Query(const std::string&, const std::string&) override { return QueryReply{0, "none"}; }
    Status Abort(const std::string&, const std::string&) override { return Status::Ok(); }
  } target;
  const std::string sha = Sha256Hex("content");
  for (int i = 0; target.have.size() * 110 <= kMaxMessage; ++i) {
    char path[64];
    std::snprintf(path, sizeof path, "files/folder-%04d/a-file-with-a-longer-name-%07d.txt", i / 1000, i);
    target.have[path] = sha;
  }
  std::vector<std::thread> servers;
  {
    RemoteTarget remote("target", [&](int) -> Result<std::unique_ptr<Connection>> {
      int fds[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return Status::IOError("socketpair", errno);
      servers.emplace_back([&target, fd = fds[1]] {
        SocketConnection server(fd);
        (void)ServeConnection(&server, &target);
      });
      return std::unique_ptr<Connection>(new SocketConnection(fds[0]));
    });
    Result<OfferReply> offer = remote.Offer(OfferRequest{kAgent, 1, "00112233445566778899aabbccddeeff", ""});
    ASSERT_TRUE(offer.ok()) << offer.status().ToString();
    EXPECT_TRUE(offer->have == target.have) << offer->have.size() << " of " << target.have.size() << " paths";
    StringSource stream("some stream bytes");
    Result<HaveMap> copied = remote.Copy(kAgent, "00112233445566778899aabbccddeeff", &stream);
    ASSERT_TRUE(copied.ok()) << copied.status().ToString();
    EXPECT_TRUE(*copied == target.have);
  }
  for (std::thread& server : servers) server.join();

  // Without asking: the have in the reply, which a have this large does not fit.
  target.have = {{"files/a", sha}};
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::thread server([&target, fd = fds[1]] {
    SocketConnection conn(fd);
    (void)ServeConnection(&conn, &target);
  });
  {
    SocketConnection source(fds[0]);
    ASSERT_TRUE(WriteMessage(source.out(), Json{{"call", "offer"}, {"agent", kAgent}, {"epoch", 1},
                                                {"move", "00112233445566778899aabbccddeeff"}})
                    .ok());
    Result<Json> reply = ReadMessage(source.in());
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->value("have", Json()), (Json{{"files/a", sha}})) << reply->dump();
  }
  server.join();
}

// The same over the sidecars' real transport (TLS, its read deadline cut to a second): the
// working messages come from a thread of their own on a TLS connection the serving thread
// leaves alone meanwhile.
TEST_F(MoveProtocolTest, OverTlsASlowTargetKeepsTheCallAliveWhileItWorks) {
  std::string pki = MakeTempDir("pki");
  ASSERT_EQ(std::system(("tests/make_pki.sh " + pki + " >/dev/null").c_str()), 0);
  TlsCredentials server{pki + "/server.pem", pki + "/server.key", pki + "/ca.pem"};
  TlsCredentials client{pki + "/client.pem", pki + "/client.key", pki + "/ca.pem"};
  Result<std::unique_ptr<TlsListener>> listener = TlsListener::Listen("127.0.0.1:0", server);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  SlowCopy slow;
  slow.inner = target_.get();
  slow.slow = std::chrono::milliseconds(2500);
  std::thread serving([&] {
    for (;;) {
      Result<std::unique_ptr<TlsConnection>> conn = (*listener)->Accept();
      if (!conn.ok()) return;  // shut down
      TlsLink link(std::move(*conn));
      (void)ServeConnection(&link, &slow, std::chrono::milliseconds(200));
    }
  });
  std::string to = "127.0.0.1:" + std::to_string((*listener)->port());
  Result<MoveReport> moved = Status::Unavailable("move", "not run");
  {
    RemoteTarget remote(to, [&](int) -> Result<std::unique_ptr<Connection>> {
      CAPSULE_ASSIGN_OR_RETURN(std::unique_ptr<TlsConnection> conn, TlsConnect(to, client, 5));
      conn->set_timeout_seconds(1);
      return std::unique_ptr<Connection>(new TlsLink(std::move(conn)));
    });
    moved = RunMove(src_, &remote, options_);
  }  // its connection closes: the server goes back to Accept
  (*listener)->Shutdown();
  serving.join();
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  ExpectMoved();
}

TEST_F(MoveProtocolTest, CorruptedCopyChunkRollsBack) {
  target_->Arm("copy", Fault::kCorrupt);
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("copy"), std::string::npos) << report.status().ToString();
  ExpectStayed();
}

// A move's source sends blobs as read; the target's hash is the check. A blob damaged in
// place at the source (same size) makes the target refuse the copy, naming the file; nothing
// is staged and the source keeps the agent. Once the blob is whole again the move goes.
TEST_F(MoveProtocolTest, ABlobDamagedAtTheSourceIsRefusedByTheTargetAndTheSourceKeepsTheAgent) {
  const std::string whole(200 << 10, 'x');
  const std::string blob = JoinPath(src_, BlobPath(Sha256Hex(whole)));
  ASSERT_TRUE(PathExists(blob)) << blob;
  std::string damaged = whole;
  damaged[150 << 10] = 'y';
  ASSERT_TRUE(WriteFileAtomic(blob, damaged).ok());
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("files/src/big.bin"), std::string::npos) << report.status().ToString();
  EXPECT_NE(report.status().message().find("digest differs"), std::string::npos) << report.status().ToString();
  // The source tells its own damage from damage in transit.
  EXPECT_NE(report.status().message().find("damaged at the source, not in transit: " + BlobPath(Sha256Hex(whole))),
            std::string::npos)
      << report.status().ToString();
  EXPECT_EQ(StateOf(src_), "active@1");
  EXPECT_NE(StateOf(Held()).rfind("active", 0), 0u);
  EXPECT_FALSE(PathExists(Staging())) << "the refused copy left its staging area";

  ASSERT_TRUE(WriteFileAtomic(blob, whole).ok());
  report = RunMove(src_, target_.get(), options_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ExpectMoved();
}

TEST_F(MoveProtocolTest, CorruptedSealedSwitchRollsBackAndThaws) {
  target_->Arm("switch", Fault::kCorrupt);
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("sealed envelope"), std::string::npos) << report.status().ToString();
  ExpectStayed();
}

TEST_F(MoveProtocolTest, ActivateReplyLostAndTargetUnreachableStaysFrozenUntilItAnswers) {
  struct Cut : TargetApi {
    FaultyTarget* inner;
    Result<OfferReply> Offer(const OfferRequest& r) override { return inner->Offer(r); }
    Result<HaveMap> Copy(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Copy(a, m, s); }
    Status Switch(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Switch(a, m, s); }
    Status Activate(const std::string& a, const std::string& m, uint64_t e) override {
      Status done = inner->Activate(a, m, e);
      inner->set_partitioned(true);  // the link dies with the reply
      return done.ok() ? Status::Unavailable("target", "reply lost") : done;
    }
    Result<QueryReply> Query(const std::string& a, const std::string& m) override { return inner->Query(a, m); }
    Status Abort(const std::string& a, const std::string& m) override { return inner->Abort(a, m); }
  } cut;
  cut.inner = target_.get();
  Result<MoveReport> report = RunMove(src_, &cut, options_);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), Code::kUnavailable) << report.status().ToString();
  EXPECT_EQ(StateOf(src_), "frozen@1") << "waiting costs availability, never correctness";
  EXPECT_EQ(StateOf(Held()), "active@2");
  ExpectInvariant(/*waiting=*/true);
  // Still no answer: still frozen.
  EXPECT_EQ(RecoverMove(src_, target_.get(), options_).code(), Code::kUnavailable);
  EXPECT_EQ(StateOf(src_), "frozen@1");
  // A new move cannot start while this one is unresolved.
  EXPECT_FALSE(RunMove(src_, target_.get(), options_).ok());
  target_->set_partitioned(false);
  ASSERT_TRUE(RecoverMove(src_, target_.get(), options_).ok());
  ExpectMoved();
}

TEST_F(MoveProtocolTest, TargetThatMovedTheAgentOnStillCountsAsHavingTakenOver) {
  // Activate's reply is lost and the link with it; by the time the source can ask, the
  // target has moved the agent on to a third machine (it is retired there at epoch 2).
  struct Cut : TargetApi {
    FaultyTarget* inner;
    Result<OfferReply> Offer(const OfferRequest& r) override { return inner->Offer(r); }
    Result<HaveMap> Copy(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Copy(a, m, s); }
    Status Switch(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Switch(a, m, s); }
    Status Activate(const std::string& a, const std::string& m, uint64_t e) override {
      Status done = inner->Activate(a, m, e);
      inner->set_partitioned(true);
      return done.ok() ? Status::Unavailable("target", "reply lost") : done;
    }
    Result<QueryReply> Query(const std::string& a, const std::string& m) override { return inner->Query(a, m); }
    Status Abort(const std::string& a, const std::string& m) override { return inner->Abort(a, m); }
  } cut;
  cut.inner = target_.get();
  ASSERT_FALSE(RunMove(src_, &cut, options_).ok());
  EXPECT_EQ(StateOf(src_), "frozen@1");
  std::string third_root = root_ + "/third";
  Result<EvpPkeyPtr> key = LoadPrivateKey(key_, KeyType::kX25519);
  ASSERT_TRUE(key.ok());
  Result<std::unique_ptr<MoveTarget>> third = MoveTarget::Open(third_root, std::move(*key));
  ASSERT_TRUE(third.ok());
  ASSERT_TRUE(RunMove(Held(), third->get(), options_).ok());
  EXPECT_EQ(StateOf(Held()), "retired@2");
  target_->set_partitioned(false);
  ASSERT_TRUE(RecoverMove(src_, target_.get(), options_).ok());
  EXPECT_EQ(StateOf(src_), "retired@1") << "thawing here would make two holders with the third machine";
  EXPECT_EQ(StateOf(third_root + "/" + kAgent), "active@3");
}

TEST_F(MoveProtocolTest, LateActivateAfterTheQueryIsRefused) {
  // The source gave up on activate (its request may still be in flight) and asked: the
  // answer is final, so the late activate must not make a second holder.
  struct Late : TargetApi {
    FaultyTarget* inner;
    std::string agent, move;
    uint64_t epoch = 0;
    Result<OfferReply> Offer(const OfferRequest& r) override { return inner->Offer(r); }
    Result<HaveMap> Copy(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Copy(a, m, s); }
    Status Switch(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Switch(a, m, s); }
    Status Activate(const std::string& a, const std::string& m, uint64_t e) override {
      agent = a, move = m, epoch = e;
      return Status::Unavailable("target", "activate still in flight");
    }
    Result<QueryReply> Query(const std::string& a, const std::string& m) override { return inner->Query(a, m); }
    Status Abort(const std::string& a, const std::string& m) override { return inner->Abort(a, m); }
  } late;
  late.inner = target_.get();
  Result<MoveReport> report = RunMove(src_, &late, options_);
  ASSERT_FALSE(report.ok());
  ExpectStayed();
  EXPECT_FALSE(target_->Activate(late.agent, late.move, late.epoch).ok());
  ExpectStayed();
}

// The source crashes after each step (no rollback runs) and restarts: RecoverMove resolves.
std::string StepName(const ::testing::TestParamInfo<const char*>& info) {
  std::string name;
  for (const char* c = info.param; *c; ++c) name += *c == '-' ? '_' : *c;
  return name;
}

class SourceCrashTest : public MoveProtocolTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(SourceCrashTest, RestartResolvesWithoutGuessing) {
  std::string step = GetParam();
  options_.crash_after = step;
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(IsSimulatedCrash(report.status())) << report.status().ToString();
  options_.crash_after.clear();
  Status recovered = RecoverMove(src_, target_.get(), options_);
  EXPECT_TRUE(recovered.ok()) << recovered.ToString();
  if (step == "activated") {
    ExpectMoved();  // the target took over before the crash: the source retires
  } else {
    ExpectStayed();
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, SourceCrashTest,
                         ::testing::Values("offered", "copied", "frozen", "switched", "activate-sent", "activated"),
                         StepName);

TEST_F(MoveProtocolTest, TargetRestartBetweenSwitchAndActivateRollsBack) {
  target_->Arm("activate", Fault::kCrashBefore);
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  ExpectStayed();
}

TEST_F(MoveProtocolTest, StaleEpochIsRefusedAndStagesNothing) {
  ASSERT_TRUE(RunMove(src_, target_.get(), options_).ok());
  // A partitioned old holder wakes up believing it still runs the agent at epoch 1.
  HolderRecord stale = *HolderRecord::Load(src_);
  stale.state = HolderState::kActive;
  ASSERT_TRUE(stale.Save(src_).ok());
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("holds the agent"), std::string::npos) << report.status().ToString();
  EXPECT_EQ(StateOf(Held()), "active@2");
  EXPECT_FALSE(PathExists(Staging()));
  // Also when the target has moved on (retired at a newer epoch): compared, never waited on.
  HolderRecord moved_on = *HolderRecord::Load(Held());
  moved_on.state = HolderState::kRetired;
  moved_on.epoch = 5;
  ASSERT_TRUE(moved_on.Save(Held()).ok());
  report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("knows epoch 5"), std::string::npos) << report.status().ToString();
  EXPECT_EQ(StateOf(src_), "active@1");
  EXPECT_FALSE(PathExists(Staging()));
}

// Every call checks the agent id before it touches anything, and the target keeps no state
// for an agent it refused or that no move of is in progress: a path in the id never reaches
// the file system (Drop would have emptied ROOT/.staging/../../victim), and many ids sent
// leave nothing behind.
TEST_F(MoveProtocolTest, EveryCallChecksTheAgentIdAndKeepsNothingForARefusedOne) {
  Result<EvpPkeyPtr> key = LoadPrivateKey(key_, KeyType::kX25519);
  ASSERT_TRUE(key.ok());
  Result<std::unique_ptr<MoveTarget>> opened = MoveTarget::Open(target_root_, std::move(*key));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  MoveTarget& target = **opened;
  std::string victim = root_ + "/victim";
  ASSERT_TRUE(MakeDirectories(victim).ok());
  ASSERT_TRUE(WriteFileAtomic(victim + "/keep.txt", "mine").ok());
  const std::string move = "0123456789abcdef0123456789abcdef";
  for (const std::string& agent : {std::string("../../victim"), std::string("a/b"), std::string(""),
                                  std::string(".staging"), std::string(200, 'x')}) {
    StringSource empty("");
    EXPECT_EQ(target.Offer({agent, 2, move, ""}).status().code(), Code::kInvalidArgument) << agent;
    EXPECT_EQ(target.Copy(agent, move, &empty).status().code(), Code::kInvalidArgument) << agent;
    EXPECT_EQ(target.Switch(agent, move, &empty).code(), Code::kInvalidArgument) << agent;
    EXPECT_EQ(target.Activate(agent, move, 2).code(), Code::kInvalidArgument) << agent;
    EXPECT_EQ(target.Query(agent, move).status().code(), Code::kInvalidArgument) << agent;
    EXPECT_EQ(target.Abort(agent, move).code(), Code::kInvalidArgument) << agent;
  }
  EXPECT_EQ(*ReadFile(victim + "/keep.txt"), "mine");
  // Well-formed ids with no move in progress: refused, and no lock kept for any of them.
  for (int i = 0; i < 100; ++i) {
    std::string agent = "stranger-" + std::to_string(i);
    EXPECT_FALSE(target.Activate(agent, move, 2).ok());
    EXPECT_TRUE(target.Query(agent, move).ok());
  }
  EXPECT_EQ(target.agent_locks_kept(), 0u);
  EXPECT_FALSE(PathExists(target_root_ + "/stranger-0"));
}

// One move out of a capsule at a time: a second, or a --recover, while one runs is refused
// and says so (it used to be told to --recover, which aborted the first).
TEST_F(MoveProtocolTest, ASecondMoveOrRecoverWhileOneRunsIsRefusedAndSaysSo) {
  Result<ProcessLock> running = ProcessLock::Acquire(src_ + "/.capsule/move-out.lock", "a move in another process");
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  Result<MoveReport> second = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("a move of this agent is running here"), std::string::npos)
      << second.status().ToString();
  EXPECT_NE(second.status().message().find("held by pid " + std::to_string(::getpid())), std::string::npos)
      << second.status().ToString();
  Status recover = RecoverMove(src_, target_.get(), options_);
  EXPECT_NE(recover.message().find("a move of this agent is running here"), std::string::npos) << recover.ToString();
  EXPECT_EQ(StateOf(src_), "active@1");
  // Once it ends, moves go on.
  running = Status::Unavailable("test", "released");
  ASSERT_TRUE(RunMove(src_, target_.get(), options_).ok());
  ExpectMoved();
}

TEST_F(MoveProtocolTest, TheAgentIsKeyedByTheManifestsIdOnBothEnds) {
  // The seed's bug: source and target keyed the agent differently. A holder record for
  // another agent is refused here rather than moved under the wrong key.
  HolderRecord record = *HolderRecord::Load(src_);
  record.agent = "someone-else";
  ASSERT_TRUE(record.Save(src_).ok());
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  EXPECT_FALSE(PathExists(Held()));
  // And the target answers for the manifest's id: a move lands under ROOT/<agent id>.
  record.agent = kAgent;
  ASSERT_TRUE(record.Save(src_).ok());
  ASSERT_TRUE(RunMove(src_, target_.get(), options_).ok());
  ExpectMoved();
}

TEST_F(MoveProtocolTest, LostHolderRecordNeverRunsAndAdoptionBringsItBack) {
  // The source crashes and loses its holder record: it never runs the agent again by itself.
  ASSERT_EQ(::unlink((src_ + "/.capsule/holder.json").c_str()), 0);
  EXPECT_FALSE(CheckHeldForWrite(src_).ok());
  Result<MoveReport> report = RunMove(src_, target_.get(), options_);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("not held by this machine"), std::string::npos);
  EXPECT_FALSE(PathExists(Held()));
  // Back in step: no machine holds it, so the operator adopts it at a fresh epoch
  // (capsule export, then capsule import --adopt), and it can move again.
  std::string tar = root_ + "/src.tar", adopted = root_ + "/adopted";
  ASSERT_TRUE(ExportCapsule(src_, tar, {}).ok());
  ImportOptions import;
  import.adopt = true;
  ASSERT_TRUE(ImportCapsule(tar, adopted, import).ok());
  EXPECT_EQ(StateOf(adopted), "active@2");
  Result<MoveReport> moved = RunMove(adopted, target_.get(), options_);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(StateOf(Held()), "active@3");
  EXPECT_EQ(StateOf(adopted), "retired@2");
}

TEST_F(MoveProtocolTest, TargetThatLostItsRecordNeverRunsAndRefusesOlderEpochs) {
  // Activate's reply is lost and the target then loses its record (a crash): asked, it holds
  // nothing, so the source thaws; the target never runs the agent without a record.
  struct LoseRecord : TargetApi {
    FaultyTarget* inner;
    std::string held;
    Result<OfferReply> Offer(const OfferRequest& r) override { return inner->Offer(r); }
    Result<HaveMap> Copy(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Copy(a, m, s); }
    Status Switch(const std::string& a, const std::string& m, ByteSource* s) override { return inner->Switch(a, m, s); }
    Status Activate(const std::string& a, const std::string& m, uint64_t e) override {
      EXPECT_TRUE(inner->Activate(a, m, e).ok());
      ::unlink((held + "/.capsule/holder.json").c_str());
      inner->Restart();
      return Status::Unavailable("target", "crashed before answering");
    }
    Result<QueryReply> Query(const std::string& a, const std::string& m) override { return inner->Query(a, m); }
    Status Abort(const std::string& a, const std::string& m) override { return inner->Abort(a, m); }
  } lose;
  lose.inner = target_.get();
  lose.held = Held();
  Result<MoveReport> report = RunMove(src_, &lose, options_);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(StateOf(src_), "active@1");
  EXPECT_EQ(StateOf(Held()), "none");
  EXPECT_FALSE(CheckHeldForWrite(Held()).ok());
  ExpectInvariant();
  // Its copy names epoch 2, so a move at epoch 2 is refused there: it cannot tell this
  // holder from a stale one. The operator's adoption (a fresh epoch) brings them in step.
  EXPECT_FALSE(RunMove(src_, target_.get(), options_).ok());
  std::string tar = root_ + "/src.tar", adopted = root_ + "/adopted";
  ASSERT_TRUE(ExportCapsule(src_, tar, {}).ok());
  HolderRecord retire = *HolderRecord::Load(src_);
  retire.state = HolderState::kRetired;
  ASSERT_TRUE(retire.Save(src_).ok());
  ImportOptions import;
  import.adopt = true;
  ASSERT_TRUE(ImportCapsule(tar, adopted, import).ok());
  HolderRecord bumped = *HolderRecord::Load(adopted);
  EXPECT_EQ(bumped.epoch, 2u);
  Result<MoveReport> moved = RunMove(adopted, target_.get(), options_);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(StateOf(Held()), "active@3");
  EXPECT_EQ(StateOf(adopted), "retired@2");
}

}  // namespace
}  // namespace capsule::move
