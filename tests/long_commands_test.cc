// The commands that can run long, end to end through the real binary: progress lines on
// standard error (man capsule.1, PROGRESS), `capsule sql` reading its query from standard
// input and stopped by --timeout, a folder extracted with tar from a signed export verifying
// with its signature, and `capsule mcp` keeping the conventions where it reports anything.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "tests/cli_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunProgram;
using testing::RunResult;
using testing::Shell;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// One progress line, parsed.
struct ProgressLine {
  std::string phase, unit;
  double mib = 0, total_mib = -1;  // -1: no total
  long items = 0, total_items = -1;
  bool done = false, has_left = false;
};

// "PHASE  D MiB[ of T MiB][, N[ of M] UNIT], R MiB/s[, S s left | , done in S s]"
bool ParseProgress(const std::string& line, ProgressLine* out) {
  static const std::regex form(
      R"(^(\S+) +(\d+\.\d) MiB(?: of (\d+\.\d) MiB)?(?:, (\d+)(?: of (\d+))? (files|events))?, (\d+\.\d) MiB/s(?:, (\d+\.\d) s left|, done in (\d+\.\d) s)?$)");
  std::smatch m;
  if (!std::regex_match(line, m, form)) return false;
  out->phase = m[1];
  out->mib = std::stod(m[2]);
  if (m[3].matched) out->total_mib = std::stod(m[3]);
  if (m[4].matched) out->items = std::stol(m[4]);
  if (m[5].matched) out->total_items = std::stol(m[5]);
  out->unit = m[6];
  out->has_left = m[8].matched;
  out->done = m[9].matched;
  return true;
}

// Every line of `err` is a progress line; for `phase`: several lines, counts that only rise,
// and a last line "done" at the total (when the total is known).
void ExpectProgress(const RunResult& run, const std::string& phase, size_t at_least_lines, const std::string& what) {
  std::vector<ProgressLine> mine;
  for (const std::string& line : Lines(run.err)) {
    ProgressLine parsed;
    ASSERT_TRUE(ParseProgress(line, &parsed)) << what << ": not a progress line: '" << line << "'\n" << run.err;
    if (parsed.phase == phase) mine.push_back(parsed);
  }
  ASSERT_GE(mine.size(), at_least_lines) << what << ": too few lines of phase " << phase << ":\n" << run.err;
  for (size_t i = 1; i < mine.size(); ++i) {
    EXPECT_GE(mine[i].mib, mine[i - 1].mib) << what << " line " << i;
    EXPECT_GE(mine[i].items, mine[i - 1].items) << what << " line " << i;
    EXPECT_EQ(mine[i].total_mib, mine[0].total_mib) << what << " line " << i;
  }
  for (size_t i = 0; i + 1 < mine.size(); ++i) EXPECT_FALSE(mine[i].done) << what << " line " << i;
  const ProgressLine& last = mine.back();
  EXPECT_TRUE(last.done) << what << ": the last line is not 'done'\n" << run.err;
  if (last.total_mib >= 0) {
    EXPECT_EQ(last.mib, last.total_mib) << what << "\n" << run.err;
  }
  if (last.total_items >= 0) {
    EXPECT_EQ(last.items, last.total_items) << what << "\n" << run.err;
  }
  bool some_left = false;
  for (const ProgressLine& line : mine) some_left |= line.has_left;
  if (last.total_mib > 0) {
    EXPECT_TRUE(some_left) << what << ": no line says the time left\n" << run.err;
  }
}

class LongCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("long");
    cap_ = root_ + "/cap";
    // A line whenever counts change: the test sees every step.
    ::setenv("CAPSULE_PROGRESS_INTERVAL_MS", "0", 1);
  }
  void TearDown() override { ::unsetenv("CAPSULE_PROGRESS_INTERVAL_MS"); }

  // A capsule whose workspace is 24 files, 25 MiB in all.
  void MakeBigCapsule() {
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws + "/sub").ok());
    for (int i = 0; i < 24; ++i) {
      std::string body(i < 4 ? (4 << 20) + i : (512 << 10) + i, static_cast<char>('a' + i));
      ASSERT_TRUE(WriteFileAtomic(ws + (i % 2 ? "/sub/f" : "/f") + std::to_string(i), body).ok());
    }
    RunResult init = RunCapsule({"init", cap_, "--id", "big", "--name", "Big", "--workspace", ws, "--progress"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    ExpectProgress(init, "workspace", 5, "init --workspace");
    for (int i = 0; i < 50; ++i) {
      RunResult append = RunCapsule({"log", "append", cap_, "--type", "user_message", "--data",
                                     R"({"text":"message )" + std::to_string(i) + R"("})"});
      ASSERT_EQ(append.exit_code, 0) << append.err;
    }
  }

  std::string root_, cap_;
};

TEST_F(LongCommandsTest, EveryLongCommandReportsProgressToTheTotalOnStandardError) {
  MakeBigCapsule();
  RunResult verify = RunCapsule({"verify", cap_, "--progress"});
  EXPECT_EQ(verify.exit_code, 0) << verify.err;
  ExpectProgress(verify, "verify", 5, "verify folder");

  RunResult exported = RunCapsule({"export", cap_, "-o", root_ + "/cap.tar", "--progress"});
  EXPECT_EQ(exported.exit_code, 0) << exported.err;
  ExpectProgress(exported, "export", 5, "export");

  RunResult verify_tar = RunCapsule({"verify", root_ + "/cap.tar", "--progress"});
  EXPECT_EQ(verify_tar.exit_code, 0) << verify_tar.err;
  ExpectProgress(verify_tar, "verify", 5, "verify tar");

  RunResult imported = RunCapsule({"import", root_ + "/cap.tar", root_ + "/imported", "--progress"});
  EXPECT_EQ(imported.exit_code, 0) << imported.err;
  ExpectProgress(imported, "extract", 5, "import: extract");
  ExpectProgress(imported, "verify", 5, "import: verify");

  RunResult packed = RunCapsule({"stream", "pack", cap_, "--phase", "copy", "-o", root_ + "/copy.stream", "--progress"});
  EXPECT_EQ(packed.exit_code, 0) << packed.err;
  ExpectProgress(packed, "copy", 5, "stream pack");

  RunResult unpacked = RunCapsule({"stream", "unpack", root_ + "/copy.stream", root_ + "/unpacked", "--progress"});
  EXPECT_EQ(unpacked.exit_code, 0) << unpacked.err;
  ExpectProgress(unpacked, "unpack", 5, "stream unpack");

  RunResult reindexed = RunCapsule({"reindex", cap_, "--progress"});
  EXPECT_EQ(reindexed.exit_code, 0) << reindexed.err;
  ExpectProgress(reindexed, "reindex", 1, "reindex");
  EXPECT_TRUE(Contains(reindexed.err, "of 50 events") || Contains(reindexed.err, ", 50 events")) << reindexed.err;
}

TEST_F(LongCommandsTest, ProgressStaysOffStandardOutputAndAwayWithoutATerminalOrTheFlag) {
  MakeBigCapsule();
  // --json and --progress: standard output is the one JSON value, progress on standard error.
  RunResult exported = RunCapsule({"export", cap_, "-o", root_ + "/a.tar", "--json", "--progress"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  Result<Json> json = ParseJson(exported.out, "export --json");
  ASSERT_TRUE(json.ok()) << exported.out;
  EXPECT_EQ((*json)["output"], root_ + "/a.tar");
  ExpectProgress(exported, "export", 5, "export --json --progress");
  // -o -: the tar is standard output, and only the tar.
  RunResult to_stdout = RunCapsule({"export", cap_, "-o", "-", "--progress"});
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
  EXPECT_EQ(to_stdout.out, *ReadFile(root_ + "/a.tar"));
  // Standard error is a file here, not a terminal: no --progress, no progress.
  RunResult quiet = RunCapsule({"verify", cap_});
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_EQ(quiet.err, "");
  // A failure ends with the error, never a line that says "done".
  ASSERT_TRUE(WriteFileAtomic(root_ + "/bad.tar", std::string(10000, 'x')).ok());
  RunResult bad = RunCapsule({"import", root_ + "/bad.tar", root_ + "/nothing", "--progress"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_FALSE(Contains(bad.err, "done in")) << bad.err;
  EXPECT_TRUE(Contains(bad.err, "capsule: ")) << bad.err;
}

TEST_F(LongCommandsTest, SqlReadsItsQueryFromStandardInputAndStopsARunawayQuery) {
  ASSERT_EQ(RunCapsule({"init", cap_, "--id", "q", "--name", "Q"}).exit_code, 0);
  for (const char* text : {"one", "two", "three"}) {
    ASSERT_EQ(RunCapsule({"log", "append", cap_, "--type", "user_message", "--data",
                          std::string(R"({"text":")") + text + R"("})"})
                  .exit_code,
              0);
  }
  RunResult dash = RunCapsule({"sql", cap_, "-"}, "SELECT count(*) AS n\nFROM messages;\n");
  EXPECT_EQ(dash.exit_code, 0) << dash.err;
  EXPECT_EQ(dash.out, "3\n");
  // No QUERY, and standard input is a file (not a terminal): it is the query.
  RunResult none = RunCapsule({"sql", cap_, "--json"}, "SELECT count(*) AS n FROM messages");
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out, "[{\"n\":3}]\n");
  RunResult empty = RunCapsule({"sql", cap_, "-"}, "  \n");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_TRUE(Contains(empty.err, "capsule: sql: standard input holds no query")) << empty.err;

  const std::string runaway =
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";
  auto start = std::chrono::steady_clock::now();
  RunResult stopped = RunCapsule({"sql", cap_, runaway, "--timeout", "1"});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(stopped.exit_code, 1) << stopped.err;
  EXPECT_TRUE(Contains(stopped.err, "capsule: sql: stopped after 1 s (--timeout 1): the query ran too long"))
      << stopped.err;
  EXPECT_EQ(stopped.out, "");
  EXPECT_LT(seconds, 10) << "the query was not stopped in time";
  RunResult stopped_json = RunCapsule({"sql", cap_, "-", "--timeout", "0.5", "--json"}, runaway);
  EXPECT_EQ(stopped_json.exit_code, 1);
  Result<Json> error = ParseJson(stopped_json.out, "sql --json");
  ASSERT_TRUE(error.ok()) << stopped_json.out;
  EXPECT_EQ((*error)["timeout"], 0.5);
  EXPECT_TRUE(Contains((*error)["error"]["message"].get<std::string>(), "stopped after 0.5 s"));
  // A quick query under a timeout runs as ever.
  RunResult quick = RunCapsule({"sql", cap_, "SELECT count(*) FROM messages", "--timeout", "5"});
  EXPECT_EQ(quick.exit_code, 0) << quick.err;
  EXPECT_EQ(quick.out, "3\n");
  RunResult bad_timeout = RunCapsule({"sql", cap_, "SELECT 1", "--timeout", "0"});
  EXPECT_EQ(bad_timeout.exit_code, 2);
  EXPECT_TRUE(Contains(bad_timeout.err, "must be a positive number of seconds, got 0")) << bad_timeout.err;
}

TEST_F(LongCommandsTest, AFolderExtractedFromASignedExportVerifiesWithItsSignature) {
  ASSERT_EQ(RunCapsule({"init", cap_, "--id", "s", "--name", "Signed"}).exit_code, 0);
  RunResult key = RunCapsule({"keygen", "--type", "ed25519", "-o", root_ + "/sign.key"});
  ASSERT_EQ(key.exit_code, 0) << key.err;
  ASSERT_TRUE(WriteFileAtomic(root_ + "/sign.pub", key.out).ok());
  RunResult other = RunCapsule({"keygen", "--type", "ed25519", "-o", root_ + "/other.key"});
  ASSERT_TRUE(WriteFileAtomic(root_ + "/other.pub", other.out).ok());
  ASSERT_EQ(RunCapsule({"export", cap_, "-o", root_ + "/s.tar", "--sign", root_ + "/sign.key"}).exit_code, 0);
  std::string x = root_ + "/x";
  ASSERT_TRUE(MakeDirectories(x).ok());
  ASSERT_EQ(Shell("tar -xf '" + root_ + "/s.tar' -C '" + x + "'"), 0);
  ASSERT_TRUE(PathExists(x + "/signature.json"));

  RunResult plain = RunCapsule({"verify", x});
  EXPECT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_FALSE(Contains(plain.out, "not in manifest")) << plain.out;
  RunResult good = RunCapsule({"verify", x, "--pubkey", root_ + "/sign.pub", "--json"});
  EXPECT_EQ(good.exit_code, 0) << good.out << good.err;
  Result<Json> report = ParseJson(good.out, "verify --json");
  ASSERT_TRUE(report.ok()) << good.out;
  EXPECT_EQ((*report)["signer"], key.out.substr(0, 64));
  RunResult wrong = RunCapsule({"verify", x, "--pubkey", root_ + "/other.pub"});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_TRUE(Contains(wrong.out, "signature.json: signature does not verify with the given public key")) << wrong.out;

  // The manifest changed after signing: the signature no longer covers it.
  std::string manifest = *ReadFile(x + "/manifest.json");
  size_t at = manifest.find("\"name\":\"Signed\"");
  ASSERT_NE(at, std::string::npos);
  std::string tampered = manifest;
  tampered.replace(at, 15, "\"name\":\"Evil!!\"");
  ASSERT_TRUE(WriteFileAtomic(x + "/manifest.json", tampered).ok());
  RunResult changed = RunCapsule({"verify", x, "--pubkey", root_ + "/sign.pub"});
  EXPECT_EQ(changed.exit_code, 1);
  EXPECT_TRUE(Contains(changed.out, "signature.json: signature does not verify")) << changed.out;
  ASSERT_TRUE(WriteFileAtomic(x + "/manifest.json", manifest).ok());

  // An extracted folder exports again (the old signature stays behind; --sign makes a new one).
  RunResult again = RunCapsule({"export", x, "-o", root_ + "/again.tar", "--sign", root_ + "/sign.key"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(*ReadFile(root_ + "/again.tar"), *ReadFile(root_ + "/s.tar"));
  // A manifest written since that lists signature.json (a checkpoint of the folder) makes it a
  // file of the capsule like any other: it verifies, exports unsigned, and that tar verifies.
  Result<Json> listed = ParseJson(manifest, "manifest.json");
  ASSERT_TRUE(listed.ok());
  std::string signature = *ReadFile(x + "/signature.json");
  (*listed)["files"]["signature.json"] = {{"sha256", Sha256Hex(signature)}, {"size", signature.size()}};
  ASSERT_TRUE(WriteFileAtomic(x + "/manifest.json", listed->dump()).ok());
  RunResult as_file = RunCapsule({"verify", x});
  EXPECT_EQ(as_file.exit_code, 0) << as_file.out << as_file.err;
  ASSERT_EQ(RunCapsule({"export", x, "-o", root_ + "/as-file.tar"}).exit_code, 0);
  RunResult tar_as_file = RunCapsule({"verify", root_ + "/as-file.tar"});
  EXPECT_EQ(tar_as_file.exit_code, 0) << tar_as_file.out << tar_as_file.err;
  RunResult signed_again = RunCapsule({"export", x, "-o", root_ + "/two.tar", "--sign", root_ + "/sign.key"});
  EXPECT_EQ(signed_again.exit_code, 1);
  EXPECT_TRUE(Contains(signed_again.err, "a signed export would carry two")) << signed_again.err;

  // A folder that was never signed: --pubkey says so.
  RunResult unsigned_folder = RunCapsule({"verify", cap_, "--pubkey", root_ + "/sign.pub"});
  EXPECT_EQ(unsigned_folder.exit_code, 1);
  EXPECT_TRUE(Contains(unsigned_folder.out, "signature.json: missing")) << unsigned_folder.out;
}

TEST_F(LongCommandsTest, McpKeepsTheConventionsWhereItReports) {
  ASSERT_EQ(RunCapsule({"init", cap_, "--id", "m", "--name", "M"}).exit_code, 0);
  RunResult help = RunCapsule({"mcp", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(Contains(help.out, "PATH")) << help.out;
  EXPECT_TRUE(Contains(help.out, "Exit status")) << help.out;
  RunResult missing = RunCapsule({"mcp"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(Contains(missing.err, "capsule: ")) << missing.err;
  RunResult absent = RunCapsule({"mcp", root_ + "/absent"});
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_EQ(absent.err, "capsule: " + root_ + "/absent: no such file or folder\n");
  EXPECT_EQ(absent.out, "");  // standard output is the protocol's: never an error there
  ASSERT_TRUE(MakeDirectories(root_ + "/plain").ok());
  RunResult plain = RunCapsule({"mcp", root_ + "/plain"});
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_TRUE(Contains(plain.err, "not a capsule folder (no manifest.json)")) << plain.err;
  // A client that says nothing and closes: the server stops, exit 0, nothing printed.
  RunResult closed = RunCapsule({"mcp", cap_}, "");
  EXPECT_EQ(closed.exit_code, 0) << closed.err;
  EXPECT_EQ(closed.out, "");
  // One request: one JSON-RPC reply on standard output.
  RunResult ping = RunCapsule({"mcp", cap_}, R"({"jsonrpc":"2.0","id":1,"method":"ping"})" "\n");
  EXPECT_EQ(ping.exit_code, 0) << ping.err;
  Result<Json> reply = ParseJson(Lines(ping.out).at(0), "mcp reply");
  ASSERT_TRUE(reply.ok()) << ping.out;
  EXPECT_EQ((*reply)["id"], 1);
}

}  // namespace
}  // namespace capsule
