// Hostile input through the real `capsule` binary: a table of inputs a careless or hostile
// user hands the command line, each with the exit status and the message it must get. None
// may crash (this suite also runs under AddressSanitizer and UndefinedBehaviorSanitizer), and
// after all of them the capsule still verifies and its journal is as it was.
//
// Endless inputs (/dev/zero where a file or standard input is read whole) and files past
// their kind's limit are refused as they are read; text that is not UTF-8 still comes out
// as valid JSON; an event over the journal's limit is refused, and one that an older journal
// already holds (64 MiB) does not hold up the next append.
//
// The mount's hostile journal lines and spec writes are in capsulefs_test; hostile peers of
// a sidecar in move_e2e_test; bytes to every reader of outside bytes in the fuzzers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "journal/event.h"
#include "tests/cli_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunProgram;

struct Hostile {
  const char* name;
  std::vector<std::string> args;  // {CAP} and {ROOT} stand for the test's capsule and folder
  std::string stdin_text;
  int exit_code;
  std::string message;  // a part of standard error
  std::string stdin_file = "";  // standard input from this file instead (/dev/zero)
};

// Runs ./capsule with `args`, then prints the CPU time it took (the shell's `times`: user and
// system seconds of its children) as the last line of standard output.
testing::RunResult RunCapsuleTimed(const std::vector<std::string>& args, double* cpu_seconds) {
  std::vector<std::string> sh = {"-c", "./capsule \"$@\" || exit $?; times", "sh"};
  sh.insert(sh.end(), args.begin(), args.end());
  testing::RunResult run = RunProgram("/bin/sh", sh);
  // "0m0.01s 0m0.00s\n0m1.45s 0m1.16s\n": the shell's, then its children's.
  size_t last = run.out.rfind('\n', run.out.size() - 2);
  int user_m = 0, sys_m = 0;
  double user_s = 0, sys_s = 0;
  *cpu_seconds = -1;
  if (last != std::string::npos &&
      std::sscanf(run.out.c_str() + last + 1, "%dm%lfs %dm%lfs", &user_m, &user_s, &sys_m, &sys_s) == 4) {
    *cpu_seconds = 60.0 * (user_m + sys_m) + user_s + sys_s;
  }
  return run;
}

// Runs ./capsule with standard input from `path`.
testing::RunResult RunCapsuleReading(const std::string& path, const std::vector<std::string>& args) {
  std::vector<std::string> sh = {"-c", "exec ./capsule \"$@\" < " + path, "sh"};
  sh.insert(sh.end(), args.begin(), args.end());
  return RunProgram("/bin/sh", sh);
}

// Event data whose text makes the journal's second event (seq 2, clock 2) one line over the
// journal's limit, though the data alone is under it; and that line's length.
std::string OversizeEventData() { return R"({"text":")" + std::string(journal::kMaxEventLineBytes - 100, 'x') + R"("})"; }
uint64_t OversizeEventLineBytes() {
  journal::Event probe;
  probe.clock = 2;
  probe.data = *ParseJson(OversizeEventData(), "data");
  probe.machine = "m-0000000000000000";  // every machine's id has this length
  probe.prev = std::string(64, '0');
  probe.seq = 2;
  probe.ts = "2026-12-02T16:40:00Z";
  probe.type = "user_message";
  probe.id = std::string(64, '0');
  return probe.CanonicalLine()->size();
}

// A sparse file of `size` bytes: a file past a limit without the disk it would take.
void MakeSparse(const std::string& path, off_t size) {
  UniqueFd fd = *OpenFile(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_EQ(::ftruncate(fd.get(), size), 0);
}

std::string Trimmed(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string Deep(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("hostile");
    cap_ = root_ + "/cap";
    auto init = RunCapsule({"init", cap_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    ASSERT_EQ(RunCapsule({"log", "append", cap_, "--type", "user_message", "--data", R"({"text":"hi"})"}).exit_code, 0);
    ASSERT_TRUE(WriteFileAtomic(root_ + "/garbage", std::string(4096, '\x7f')).ok());
    ASSERT_TRUE(WriteFileAtomic(root_ + "/empty", "").ok());
    ASSERT_TRUE(WriteFileAtomic(root_ + "/deep.json", "{\"files/a\":" + Deep(100000) + "}").ok());
    ASSERT_EQ(::symlink((root_ + "/garbage").c_str(), (root_ + "/link").c_str()), 0);
    ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0600), 0);
    MakeSparse(root_ + "/big_key", (64 << 10) + 1);
    MakeSparse(root_ + "/big_attachment", (64 << 20) + 1);
    auto seal_key = RunCapsule({"keygen", "--type", "x25519", "-o", root_ + "/seal.key"});
    ASSERT_EQ(seal_key.exit_code, 0) << seal_key.err;
  }
  // `capsule serve` with these TLS credentials (the rest of what it needs is sound).
  static std::vector<std::string> Serve(const std::string& cert, const std::string& key, const std::string& ca) {
    return {"serve", "--root", "{ROOT}/srv", "--listen", "127.0.0.1:0", "--seal-key", "{ROOT}/seal.key",
            "--cert", cert, "--key", key, "--ca", ca};
  }
  std::string Expand(const std::string& arg) const {
    std::string out = arg;
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"{CAP}", cap_}, {"{ROOT}", root_}}) {
      for (size_t at; (at = out.find(key)) != std::string::npos;) out.replace(at, key.size(), value);
    }
    return out;
  }
  std::string root_, cap_;
};

TEST_F(HostileInputTest, EveryHostileInputGetsAClearErrorAndChangesNothing) {
  const std::string journal_before = *ReadFile(cap_ + "/memory/timeline_events.jsonl");
  const std::vector<Hostile> table = {
      // The journal's data.
      {"a number out of range",
       {"log", "append", "{CAP}", "--type", "user_message", "--data", R"({"text":"x","n":1e999})"}, "", 1,
       "the number 1e999 is too large for a double"},
      {"an integer wider than 64 bits",
       {"log", "append", "{CAP}", "--type", "user_message", "--data", R"({"text":"x","n":123456789012345678901234567890})"},
       "", 1, "does not fit in 64 bits"},
      {"nesting 100,000 deep", {"log", "append", "{CAP}", "--type", "user_message"},
       "{\"text\":\"x\",\"d\":" + Deep(100000) + "}", 1, "nested deeper than 256 levels"},
      {"data that is not JSON", {"log", "append", "{CAP}", "--type", "user_message", "--data", "{"}, "", 1,
       "not valid JSON"},
      {"an unknown event type", {"log", "append", "{CAP}", "--type", "chat", "--data", "{}"}, "", 1,
       "unknown event type"},
      {"arguments that are not an object",
       {"log", "append", "{CAP}", "--type", "tool_call", "--data", R"({"call_id":"c","name":"n","arguments":"x"})"}, "",
       1, "data.arguments: must be a JSON object"},
      // Paths and folders.
      {"init over a non-empty folder", {"init", "{CAP}", "--id", "x", "--name", "y"}, "", 1, "is not empty"},
      {"an agent id with a path in it", {"init", "{ROOT}/new", "--id", "../evil", "--name", "y"}, "", 1, "agent id"},
      {"a workspace that is a file",
       {"init", "{ROOT}/new2", "--id", "a", "--name", "y", "--workspace", "{ROOT}/garbage"}, "", 1,
       "workspace source is not a folder"},
      // Outputs.
      {"an export over a symbolic link", {"export", "{CAP}", "-o", "{ROOT}/link"}, "", 1, "is a symbolic link"},
      {"an export into a directory", {"export", "{CAP}", "-o", "{ROOT}"}, "", 1, "is a directory"},
      {"an export into the capsule", {"export", "{CAP}", "-o", "{CAP}/memory/x.tar"}, "", 1, "is inside the capsule"},
      // Foreign bytes.
      {"a tar that is garbage", {"import", "{ROOT}/garbage", "{ROOT}/imported"}, "", 1, "capsule: "},
      {"an empty tar", {"import", "{ROOT}/empty", "{ROOT}/imported"}, "", 1, "capsule: "},
      {"a stream that is garbage", {"stream", "unpack", "{ROOT}/garbage", "{ROOT}/unpacked"}, "", 1, "capsule: "},
      {"a have nested 100,000 deep",
       {"stream", "pack", "{CAP}", "--phase", "copy", "--have", "{ROOT}/deep.json", "-o", "{ROOT}/s"}, "", 1,
       "nested deeper than 256 levels"},
      {"an envelope that is garbage", {"open", "--key", "{ROOT}/garbage"}, std::string(200, 'x'), 1, "capsule: "},
      {"a seal key that is not hex", {"seal", "--to", "zz"}, "data", 1, "capsule: "},
      {"a signing key that is garbage", {"export", "{CAP}", "-o", "{ROOT}/signed.tar", "--sign", "{ROOT}/garbage"}, "",
       1, "not a PEM private key"},
      // Queries.
      {"SQL that writes", {"sql", "{CAP}", "DELETE FROM messages"}, "", 1, "capsule: "},
      {"SQL that is not SQL", {"sql", "{CAP}", "SELEKT"}, "", 1, "capsule: "},
      // Endless inputs and files past their kind's limit, refused as they are read.
      {"/dev/zero as a signing key", {"export", "{CAP}", "-o", "{ROOT}/signed.tar", "--sign", "/dev/zero"}, "", 1,
       "/dev/zero: not a regular file (a character device): a private key is read from a regular file"},
      {"/dev/zero as a key to open with", {"open", "--key", "/dev/zero"}, "x", 1,
       "/dev/zero: not a regular file (a character device): a private key is read from a regular file"},
      {"a FIFO as a key (not waited on)", {"open", "--key", "{ROOT}/fifo"}, "x", 1,
       "/fifo: not a regular file (a FIFO): a private key is read from a regular file"},
      {"a key file past 64 KiB", {"open", "--key", "{ROOT}/big_key"}, "x", 1,
       "/big_key: larger than a private key may be: at most 64 KiB (65536 bytes)"},
      {"/dev/zero as a public key", {"verify", "{CAP}", "--pubkey", "/dev/zero"}, "", 1,
       "/dev/zero: not a regular file (a character device): a public key is read from a regular file"},
      {"/dev/zero as a have",
       {"stream", "pack", "{CAP}", "--phase", "copy", "--have", "/dev/zero", "-o", "{ROOT}/s"}, "", 1,
       "/dev/zero: not a regular file (a character device): a have is read from a regular file"},
      {"/dev/zero attached", {"attach", "{CAP}", "/dev/zero"}, "", 1,
       "attach: /dev/zero: not a regular file (a character device): an attachment is read from a regular file"},
      {"an attachment past 64 MiB", {"attach", "{CAP}", "{ROOT}/big_attachment"}, "", 1,
       "/big_attachment: larger than an attachment may be: at most 64 MiB (67108864 bytes)"},
      {"/dev/zero as a sidecar's certificate", Serve("/dev/zero", "{ROOT}/garbage", "{ROOT}/garbage"), "", 1,
       "certificate: /dev/zero: not a regular file (a character device): a certificate is read from a regular file"},
      {"a FIFO as a sidecar's key (not waited on)", Serve("{ROOT}/garbage", "{ROOT}/fifo", "{ROOT}/garbage"), "", 1,
       "private key: " + root_ + "/fifo: not a regular file (a FIFO): a private key is read from a regular file"},
      {"/dev/zero as a sidecar's CA file", Serve("{ROOT}/garbage", "{ROOT}/garbage", "/dev/zero"), "", 1,
       "CA file: /dev/zero: not a regular file (a character device): a CA file is read from a regular file"},
      {"a sidecar's key past 64 KiB", Serve("{ROOT}/garbage", "{ROOT}/big_key", "{ROOT}/garbage"), "", 1,
       "private key: " + root_ + "/big_key: larger than a private key may be: at most 64 KiB (65536 bytes)"},
      {"a certificate past 1 MiB", Serve("{ROOT}/big_attachment", "{ROOT}/garbage", "{ROOT}/garbage"), "", 1,
       "certificate: " + root_ + "/big_attachment: larger than a certificate may be: at most 1 MiB (1048576 bytes)"},
      {"a FIFO as a mover's CA file",
       {"move", "{CAP}", "--to", "127.0.0.1:1", "--cert", "{ROOT}/garbage", "--key", "{ROOT}/garbage", "--ca",
        "{ROOT}/fifo"},
       "", 1, "CA file: " + root_ + "/fifo: not a regular file (a FIFO): a CA file is read from a regular file"},
      {"a query from /dev/zero", {"sql", "{CAP}", "-"}, "", 1,
       "standard input: larger than a SQL query may be: at most 1 MiB (1048576 bytes)", "/dev/zero"},
      {"event data from /dev/zero", {"log", "append", "{CAP}", "--type", "user_message"}, "", 1,
       "log append: standard input: larger than an event's data may be: at most 16 MiB (16777216 bytes)", "/dev/zero"},
      {"an event over the journal's limit", {"log", "append", "{CAP}", "--type", "user_message"},
       OversizeEventData(), 1,
       "user_message: an event of " + std::to_string(OversizeEventLineBytes()) +
           " bytes (its canonical line) is over the journal's limit of 16777216 bytes (16 MiB): store large content "
           "as an attachment (capsule attach) and reference it in data.attachments"},
      // The command line's own words (usage: exit 2).
      {"a mistyped command", {"verfy", "{CAP}"}, "", 2, "'verfy' is not a command; did you mean 'verify'?"},
      {"a count of zero", {"render", "{CAP}", "--context-tokens", "0"}, "", 2,
       "--context-tokens: must be a positive whole number, got 0"},
      {"a negative count", {"render", "{CAP}", "--max-tokens", "-5"}, "", 2,
       "--max-tokens: must be a positive whole number, got -5"},
      {"a choice not offered", {"keygen", "--type", "rsa", "-o", "{ROOT}/k"}, "", 2,
       "--type: must be ed25519 or x25519, got rsa"},
      {"a capsule that is not there", {"status", "{ROOT}/absent"}, "", 1, "absent: no such file or folder"},
      // The MCP server.
      {"an MCP server for a folder that is no capsule", {"mcp", "{ROOT}"}, "", 1,
       "not a capsule folder (no manifest.json)"},
  };
  for (const Hostile& row : table) {
    std::vector<std::string> args;
    for (const std::string& arg : row.args) args.push_back(Expand(arg));
    auto run = row.stdin_file.empty() ? RunCapsule(args, row.stdin_text) : RunCapsuleReading(row.stdin_file, args);
    EXPECT_EQ(run.exit_code, row.exit_code) << row.name << "\n" << run.err;
    EXPECT_NE(run.err.find(row.message), std::string::npos) << row.name << ": " << run.err;
    // One line per problem, in the form the command line promises.
    EXPECT_EQ(run.err.rfind("capsule: ", 0), 0u) << row.name << ": " << run.err;
  }
  EXPECT_EQ(*ReadFile(cap_ + "/memory/timeline_events.jsonl"), journal_before);
  for (const char* made : {"imported", "unpacked", "new", "new2", "s", "signed.tar", "srv"}) {
    EXPECT_FALSE(PathExists(root_ + "/" + made)) << made << " was left behind";
  }
  auto verify = RunCapsule({"verify", cap_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// An attachment the journal names is read back bounded, like the file `capsule attach` took:
// a FIFO in its place is refused, not waited on, and one past 64 MiB is refused as it is read.
TEST_F(HostileInputTest, AnAttachmentIsReadBackBounded) {
  ASSERT_TRUE(WriteFileAtomic(root_ + "/note.txt", "a note\n").ok());
  auto attach = RunCapsule({"attach", cap_, root_ + "/note.txt"});
  ASSERT_EQ(attach.exit_code, 0) << attach.err;
  auto named = RunCapsule({"log", "append", cap_, "--type", "user_message", "--data",
                           R"({"text":"see","attachments":[)" + Trimmed(attach.out) + "]}"});
  ASSERT_EQ(named.exit_code, 0) << named.err;
  auto rendered = RunCapsule({"render", cap_, "--provider", "anthropic", "--model", "m"});
  ASSERT_EQ(rendered.exit_code, 0) << rendered.err;
  ASSERT_NE(rendered.out.find("a note"), std::string::npos) << rendered.out;
  const std::string stored = cap_ + "/memory/attachments/" + Sha256Hex("a note\n");
  ASSERT_TRUE(PathExists(stored));

  ASSERT_EQ(::unlink(stored.c_str()), 0);
  ASSERT_EQ(::mkfifo(stored.c_str(), 0600), 0);
  auto fifo = RunCapsule({"render", cap_, "--provider", "anthropic", "--model", "m"});
  EXPECT_EQ(fifo.exit_code, 1) << fifo.err;
  EXPECT_NE(fifo.err.find(stored + ": not a regular file (a FIFO): an attachment is read from a regular file"),
            std::string::npos)
      << fifo.err;

  ASSERT_EQ(::unlink(stored.c_str()), 0);
  MakeSparse(stored, (64 << 20) + 1);
  auto huge = RunCapsule({"render", cap_, "--provider", "anthropic", "--model", "m"});
  EXPECT_EQ(huge.exit_code, 1) << huge.err;
  EXPECT_NE(huge.err.find(stored + ": larger than an attachment may be: at most 64 MiB (67108864 bytes)"),
            std::string::npos)
      << huge.err;
}

// Text that is not UTF-8 (a SQLite text cast from a blob, a path named by an error) comes
// out of --json as valid JSON, each invalid byte as U+FFFD, instead of aborting the command.
TEST_F(HostileInputTest, BytesThatAreNotUtf8ComeOutAsValidJson) {
  auto sql = RunCapsule({"sql", cap_, "SELECT CAST(x'ff' AS TEXT) AS t, 'ok' AS u", "--json"});
  ASSERT_EQ(sql.exit_code, 0) << sql.err;
  Result<Json> rows = ParseJson(sql.out, "sql --json");  // refuses invalid UTF-8
  ASSERT_TRUE(rows.ok()) << rows.status().message() << "\n" << sql.out;
  EXPECT_NE(sql.out.find("\"\xEF\xBF\xBD\""), std::string::npos) << sql.out;
  EXPECT_NE(sql.out.find("\"ok\""), std::string::npos) << sql.out;

  auto error = RunCapsule({"verify", root_ + "/\xff\xfe", "--json"});
  EXPECT_EQ(error.exit_code, 1) << error.err;
  Result<Json> answer = ParseJson(error.out, "verify --json");
  ASSERT_TRUE(answer.ok()) << answer.status().message() << "\n" << error.out;
  ASSERT_TRUE(answer->contains("error")) << error.out;
  const std::string message = (*answer)["error"]["message"].get<std::string>();
  EXPECT_NE(message.find("/\xEF\xBF\xBD\xEF\xBF\xBD: no such file or folder"), std::string::npos) << message;
}

// An event of 64 MiB that an older journal holds (its chain sound) is checked once, then the
// next append finds the journal's last line in bounded reads, and leaves projecting the event
// into the owned state to the next query. The append's CPU time is compared with that of
// `capsule verify` on the same journal, measured in the same run (it checks the same line the
// same way), whatever the machine's load: the append checks the new line and writes its own;
// parsing the event's data into a document or projecting it (2.7 s of CPU against verify's
// 0.4 s) fails the bound. The last line's reads are counted in journal/last_line_test.
TEST_F(HostileInputTest, AnAppendAfterA64MiBEventIsNotHeldUp) {
  journal::Event big;
  big.clock = 2;  // after SetUp's event
  big.data = {{"text", std::string(64 << 20, 'x')}};
  big.machine = "m-00000000000000ff";  // another machine's first event
  big.seq = 1;
  big.ts = "2026-12-02T16:40:00Z";
  big.type = "user_message";
  big.id = *big.ComputeId();
  const std::string line = *big.CanonicalLine() + "\n";
  ASSERT_GT(line.size(), 64u << 20);
  {
    UniqueFd fd = *OpenFile(cap_ + "/memory/timeline_events.jsonl", O_WRONLY | O_APPEND | O_CLOEXEC);
    ASSERT_TRUE(WriteAll(fd.get(), line, "journal").ok());
    ASSERT_EQ(::fdatasync(fd.get()), 0);  // the append's own fdatasync then flushes its line only
  }
  double verify_cpu = 0;
  auto verified = RunCapsuleTimed({"verify", cap_}, &verify_cpu);
  ASSERT_EQ(verified.exit_code, 0) << verified.out << verified.err;
  ASSERT_GE(verify_cpu, 0) << verified.out;
  auto started = std::chrono::steady_clock::now();
  double cpu = 0;
  auto append =
      RunCapsuleTimed({"log", "append", cap_, "--type", "user_message", "--data", R"({"text":"after"})"}, &cpu);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(append.exit_code, 0) << append.err;
  ASSERT_GE(cpu, 0) << append.out;
  // About as much as verify (0.4 s each here, optimised).
  EXPECT_LT(cpu, 2 * verify_cpu + 0.3) << "the append after a 64 MiB line took " << cpu
                                       << " s of CPU time; verify took " << verify_cpu << " s";
  std::cerr << "append after a 64 MiB event: " << cpu << " s of CPU time, " << seconds << " s in all; verify: "
            << verify_cpu << " s of CPU time\n";
  // Chained after it: the largest clock was the big event's.
  auto log = RunCapsule({"log", cap_, "--json"});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  EXPECT_NE(log.out.find("\"clock\":3"), std::string::npos) << log.out.substr(0, 300);
  auto verify = RunCapsule({"verify", cap_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// Hostile lines to `capsule mcp`: each gets exactly one JSON-RPC reply on standard output (an
// error, or a tool result with isError), nothing on standard error, exit 0 at the end of the
// input, and the journal as it was.
TEST_F(HostileInputTest, McpAnswersEveryHostileLineAndWritesNothing) {
  const std::string journal_before = *ReadFile(cap_ + "/memory/timeline_events.jsonl");
  auto call = [](const std::string& arguments) {
    return R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"history_append","arguments":)" +
           arguments + "}}";
  };
  const std::vector<std::string> lines = {
      "not json",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":" + Deep(100000) + "}",
      R"({"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"})",
      R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":1e999}})",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"s\":\"\xC0\xAF\"}}",
      R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])",
      R"({"jsonrpc":"1.0","id":1,"method":"ping"})",
      R"({"jsonrpc":"2.0","id":{},"method":"ping"})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["history_append"]}})",
      call(R"({"role":"user","content":"x","extra":1})"),
      call(R"({"role":"user","content":["x"]})"),
      call(R"({"role":"tool_call","content":"{","tool_call_id":"c","tool_name":"t"})"),
      call(R"({"role":"user","content":"x","conversation":""})"),
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_remember","arguments":{"subject":"u","key":"k","value":1}}})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"history_load","arguments":{"limit":1e300}}})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"history_load","arguments":{"before_seq":-1}}})",
      R"({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"capsule://agent-1/conversations/%"}})",
      R"({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"capsule://agent-1/../../etc/passwd"}})",
      R"({"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"cursor":"99999999999999999999"}})",
  };
  std::string input;
  for (const std::string& line : lines) input += line + "\n";
  auto run = RunCapsule({"mcp", cap_}, input);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  size_t replies = 0;
  for (size_t start = 0, end; (end = run.out.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string reply = run.out.substr(start, end - start);
    EXPECT_TRUE(reply.find("\"error\":{\"code\":-32") != std::string::npos ||
                reply.find("\"isError\":true") != std::string::npos)
        << "line " << replies + 1 << ": " << reply;
    ++replies;
  }
  EXPECT_EQ(replies, lines.size()) << run.out;
  EXPECT_EQ(*ReadFile(cap_ + "/memory/timeline_events.jsonl"), journal_before);
}

}  // namespace
}  // namespace capsule
