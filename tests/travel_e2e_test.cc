// What travels with an agent, through the real binaries: instructions and skills edited
// through a capsulefs mount and rendered for every provider; schedules checked as written,
// refused by a move while they run and carried once paused; a receiver replacing
// instructions, skills, notes, threads and schedules whole (two `capsule serve` sidecars); a
// stream whose conversation does not extend the receiver's refused, naming the first event
// that differs; a thread narrowed before its first event, moved and still narrowed; a recorded
// call outside a thread's narrowing rendered with its result.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/holder.h"
#include "capsule/format/manifest.h"
#include "tests/cli_runner.h"
#include "tests/sidecar_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::Sidecar;
using testing::RunResult;

bool Contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}


class TravelE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("travel-e2e");
    RunResult init = RunCapsule({"init", Src(), "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  std::string Src() const { return root_ + "/a/agent-1"; }
  std::string Dst() const { return root_ + "/b/agent-1"; }

  void Append(const std::string& dir, const std::string& type, const std::string& data) {
    RunResult r = RunCapsule({"log", "append", dir, "--type", type, "--data", data});
    ASSERT_EQ(r.exit_code, 0) << type << ": " << r.err;
  }

  Json Render(const std::string& dir, const std::string& provider, const std::vector<std::string>& more = {}) {
    std::vector<std::string> args = {"render", dir, "--provider", provider, "--model", "m-1"};
    args.insert(args.end(), more.begin(), more.end());
    RunResult r = RunCapsule(args);
    EXPECT_EQ(r.exit_code, 0) << provider << ": " << r.err;
    Result<Json> body = ParseJson(r.out, "render");
    EXPECT_TRUE(body.ok()) << r.out;
    return body.ok() ? *body : Json();
  }

  // The system text of a request body, however the provider spells it.
  static std::string SystemText(const Json& body, const std::string& provider) {
    if (provider == "openai") return body["messages"][0]["role"] == "system" ? body["messages"][0]["content"].get<std::string>() : "";
    if (provider == "anthropic") return body.value("system", "");
    return body["systemInstruction"]["parts"][0]["text"].get<std::string>();
  }

  // The names of the tools a request body declares.
  static std::set<std::string> Declared(const Json& body, const std::string& provider) {
    std::set<std::string> names;
    if (!body.contains("tools")) return names;
    const Json& tools = provider == "gemini" ? body["tools"][0]["functionDeclarations"] : body["tools"];
    for (const Json& tool : tools) {
      names.insert(provider == "openai" ? tool["function"]["name"].get<std::string>() : tool["name"].get<std::string>());
    }
    return names;
  }

  void ExpectVerifies(const std::string& dir) {
    RunResult verify = RunCapsule({"verify", dir});
    EXPECT_EQ(verify.exit_code, 0) << dir << ": " << verify.out << verify.err;
  }

  std::string root_;
};

TEST_F(TravelE2eTest, InstructionsAndASkillEditedThroughTheMountRenderForEveryProvider) {
  std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  {
    Mount mount(Src(), mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(mnt + "/harness/instructions.md", "You are Ada.\n"), 0);
    ASSERT_EQ(::mkdir((mnt + "/harness/skills").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((mnt + "/harness/skills/pdf-fill").c_str(), 0755), 0);
    ASSERT_EQ(Put(mnt + "/harness/skills/pdf-fill/SKILL.md",
                  "---\nname: pdf-fill\ndescription: \"Fill in PDF forms\"\n---\nRun fill.py on the form.\n"), 0);
    ASSERT_EQ(Put(mnt + "/harness/skills/pdf-fill/fill.py", "print('filled')\n"), 0);
    Append(mnt, "user_message", R"({"text":"fill my tax form"})");
    // Edited again, as an editor would: the render reads what the mount holds now.
    ASSERT_EQ(Put(mnt + "/harness/instructions.md", "You are Ada, a careful clerk.\n"), 0);
    for (const std::string provider : {"openai", "anthropic", "gemini"}) {
      std::string system = SystemText(Render(mnt, provider), provider);
      EXPECT_EQ(system.rfind("You are Ada, a careful clerk.", 0), 0u) << provider << ": " << system;
      EXPECT_TRUE(Contains(system, "\n- pdf-fill: Fill in PDF forms")) << provider << ": " << system;
      EXPECT_FALSE(Contains(system, "Run fill.py")) << "the body is the agent's to load: " << system;
    }
    // A skill whose front matter lacks a description: render names it.
    ASSERT_EQ(::mkdir((mnt + "/harness/skills/broken").c_str(), 0755), 0);
    ASSERT_EQ(Put(mnt + "/harness/skills/broken/SKILL.md", "---\nname: broken\n---\nbody\n"), 0);
    RunResult refused = RunCapsule({"render", mnt, "--provider", "openai", "--model", "m-1"});
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_TRUE(Contains(refused.err, "harness/skills/broken/SKILL.md: front matter: no description")) << refused.err;
    // A skill folder with files but no SKILL.md.
    ASSERT_EQ(::mkdir((mnt + "/harness/skills/loose").c_str(), 0755), 0);
    ASSERT_EQ(Put(mnt + "/harness/skills/loose/notes.txt", "no SKILL.md here\n"), 0);
    EXPECT_EQ(mount.Unmount(), 0);
  }
  RunResult verify = RunCapsule({"verify", Src()});
  EXPECT_EQ(verify.exit_code, 1);
  EXPECT_TRUE(Contains(verify.out + verify.err, "harness/skills/broken/SKILL.md: front matter: no description"))
      << verify.out << verify.err;
  EXPECT_TRUE(Contains(verify.out + verify.err, "harness/skills/loose/SKILL.md: missing")) << verify.out << verify.err;
  EXPECT_FALSE(Contains(verify.out + verify.err, "not in manifest")) << "every harness file is digested";
  EXPECT_EQ(*ReadFile(Src() + "/harness/skills/pdf-fill/fill.py"), "print('filled')\n");
}

TEST_F(TravelE2eTest, SchedulesAreCheckedWhenWrittenThroughTheMountAndByVerify) {
  std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  const std::string job = R"({"at":"2026-12-04T08:00:00Z","id":"mail","prompt":"read the mail"})";
  {
    Mount mount(Src(), mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(::mkdir((mnt + "/schedule/waiting").c_str(), 0755), 0);
    ASSERT_EQ(Put(mnt + "/schedule/waiting/mail.json", job), 0);
    // No prompt; an id that is not the file's; a day that is not [day, sent]: EINVAL, old content kept.
    EXPECT_EQ(Put(mnt + "/schedule/waiting/mail.json", R"({"at":"2026-12-04T08:00:00Z","id":"mail"})"), EINVAL);
    EXPECT_EQ(Put(mnt + "/schedule/waiting/mail.json", R"({"at":"2026-12-04T08:00:00Z","id":"other","prompt":"x"})"), EINVAL);
    EXPECT_EQ(*ReadFile(mnt + "/schedule/waiting/mail.json"), job);
    // A shell's redirection closes a duplicate of the truncated file before it writes: that
    // flush of an empty job is refused too.
    EXPECT_NE(testing::Shell("echo '{\"id\":\"mail\"}' > " + mnt + "/schedule/waiting/mail.json 2>/dev/null"), 0);
    EXPECT_EQ(*ReadFile(mnt + "/schedule/waiting/mail.json"), job);
    EXPECT_EQ(Put(mnt + "/schedule/day.json", R"(["2026-12-04"])"), EINVAL);
    EXPECT_EQ(Put(mnt + "/schedule/day.json", R"(["2026-12-04",3])"), 0);
    EXPECT_EQ(Put(mnt + "/schedule/elsewhere.json", R"({"id":"elsewhere"})"), EINVAL) << "not a place of the layout";
    RunResult status = RunCapsule({"schedule", "status", mnt, "--json"});
    EXPECT_EQ(status.exit_code, 0) << status.err;
    EXPECT_EQ(Trim(status.out), R"({"day":true,"jobs":1,"paused":false})");
    EXPECT_EQ(mount.Unmount(), 0);
  }
  ExpectVerifies(Src());
}

// A journal line for machine `machine`, seq `seq`, after `prev`: a well-formed event that
// differs from what the sender appended at the same place (a forged or restored chain).
std::string EventLine(const std::string& machine, uint64_t seq, const Json& prev, uint64_t clock,
                      const std::string& text, std::string* id) {
  Json event = {{"clock", clock}, {"data", {{"text", text}}}, {"machine", machine}, {"prev", prev},
                {"seq", seq},     {"ts", "2026-12-03T10:00:00Z"}, {"type", "user_message"}};
  *id = Sha256Hex(*CanonicalJson(event));
  event["id"] = *id;
  return *CanonicalJson(event) + "\n";
}

TEST_F(TravelE2eTest, AStreamWhoseConversationDoesNotExtendTheReceiversIsRefusedNamingTheFirstEventThatDiffers) {
  std::string dst = root_ + "/dst";
  Append(Src(), "user_message", R"({"text":"one"})");
  Append(Src(), "user_message", R"({"text":"two"})");
  const std::string move = "00112233445566778899aabbccddeeff";
  RunResult pack = RunCapsule({"stream", "pack", Src(), "--phase", "copy", "--move", move, "-o", root_ + "/c1.tar"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/c1.tar", dst});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;

  // The receiver's copy holds a third event of the sender's machine that the sender never
  // wrote (its manifest brought up to date, so that it verifies).
  std::string journal = *ReadFile(dst + "/memory/timeline_events.jsonl");
  Json last = *ParseJson(journal.substr(journal.rfind('\n', journal.size() - 2) + 1), "last");
  std::string forged;
  journal += EventLine(last["machine"], 3, last["id"], last["clock"].get<uint64_t>() + 1, "forged", &forged);
  ASSERT_TRUE(WriteFileAtomic(dst + "/memory/timeline_events.jsonl", journal).ok());
  Manifest manifest = *Manifest::Load(dst);
  ASSERT_TRUE(RefreshManifestEntries(dst, {"memory/timeline_events.jsonl"}, &manifest).ok());
  ASSERT_TRUE(manifest.Save(dst).ok());
  ExpectVerifies(dst);

  Append(Src(), "user_message", R"({"text":"three"})");
  std::string real = Trim(RunCapsule({"log", Src(), "--json"}).out);
  real = ParseJson(real.substr(real.rfind('\n') + 1), "real")->value("id", "");
  pack = RunCapsule({"stream", "pack", Src(), "--phase", "copy", "--move", move, "-o", root_ + "/c2.tar"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  RunResult refused = RunCapsule({"stream", "unpack", root_ + "/c2.tar", dst});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(Contains(refused.err, "conversation main")) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "seq 3")) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "event " + forged + " (user_message) here")) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "event " + real + " (user_message) in the stream")) << refused.err;
  EXPECT_EQ(*ReadFile(dst + "/memory/timeline_events.jsonl"), journal) << "a refused stream changes nothing";

  // A receiver whose own machine's events the stream lacks still takes it: the chains only
  // grew apart, and are merged.
  std::string dst2 = root_ + "/dst2";
  ASSERT_EQ(RunCapsule({"stream", "unpack", root_ + "/c1.tar", dst2}).exit_code, 0);
  std::string other = *ReadFile(dst2 + "/memory/timeline_events.jsonl");
  std::string elsewhere;
  other += EventLine("m-00000000000000ff", 1, Json(), last["clock"].get<uint64_t>() + 1, "elsewhere", &elsewhere);
  ASSERT_TRUE(WriteFileAtomic(dst2 + "/memory/timeline_events.jsonl", other).ok());
  manifest = *Manifest::Load(dst2);
  ASSERT_TRUE(RefreshManifestEntries(dst2, {"memory/timeline_events.jsonl"}, &manifest).ok());
  ASSERT_TRUE(manifest.Save(dst2).ok());
  RunResult merged = RunCapsule({"stream", "unpack", root_ + "/c2.tar", dst2});
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  std::string now = *ReadFile(dst2 + "/memory/timeline_events.jsonl");
  EXPECT_TRUE(Contains(now, elsewhere) && Contains(now, real)) << now;
  ExpectVerifies(dst2);
}

TEST_F(TravelE2eTest, ARecordedCallOutsideTheThreadsNarrowingRendersWithItsResult) {
  Append(Src(), "tool_defined", R"({"name":"search","description":"Search the web","parameters":{"type":"object"}})");
  Append(Src(), "tool_defined", R"({"name":"shell","description":"Run a command","parameters":{"type":"object"}})");
  Append(Src(), "user_message", R"({"text":"how big is the disk?"})");
  Append(Src(), "tool_call", R"({"call_id":"call_1","name":"shell","arguments":{"cmd":"df -h"}})");
  Append(Src(), "tool_result", R"({"call_id":"call_1","content":"41G free","is_error":false})");
  Append(Src(), "assistant_message", R"({"text":"41G are free.","provider":"openai","model":"m-1"})");
  for (const std::string provider : {"openai", "anthropic", "gemini"}) {
    EXPECT_EQ(Declared(Render(Src(), provider), provider), (std::set<std::string>{"search", "shell"})) << provider;
  }
  RunResult narrow = RunCapsule({"narrow", Src(), "main", "--tools", "search"});
  ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
  ExpectVerifies(Src());
  for (const std::string provider : {"openai", "anthropic", "gemini"}) {
    Json body = Render(Src(), provider);
    EXPECT_EQ(Declared(body, provider), (std::set<std::string>{"search"})) << provider;
    std::string text = body.dump();
    EXPECT_TRUE(Contains(text, "df -h")) << provider << ": the call is history: " << text;
    EXPECT_TRUE(Contains(text, "41G free")) << provider << ": with its result: " << text;
  }
  RunResult threads = RunCapsule({"threads", Src(), "--json"});
  ASSERT_EQ(threads.exit_code, 0) << threads.err;
  EXPECT_EQ(Trim(threads.out), R"([{"conversation":"main","events":6,"model":"m-1","provider":"openai","tools":["search"]}])");
}

// Two sidecars: the agent moves from a to b and back. Its schedules stop the move while they
// run, travel once paused; what b changed (instructions, a skill removed and another added,
// notes, a job) replaces what a's retired copy held; a thread narrowed before its first event
// stays narrowed.
TEST_F(TravelE2eTest, AReceiverReplacesInstructionsSkillsNotesThreadsAndSchedulesWhole) {
  std::string pki = root_ + "/pki", seal = root_ + "/seal.key";
  ASSERT_EQ(testing::Shell("tests/make_pki.sh " + pki + " >/dev/null"), 0);
  ASSERT_EQ(RunCapsule({"keygen", "--type", "x25519", "-o", seal}).exit_code, 0);
  ASSERT_TRUE(MakeDirectories(root_ + "/b").ok());
  auto move = [&](const std::string& from, const std::string& to) {
    return RunCapsule({"move", from, "--to", to, "--cert", pki + "/client.pem", "--key", pki + "/client.key", "--ca",
                       pki + "/ca.pem"});
  };
  std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  {
    Mount mount(Src(), mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(mnt + "/harness/instructions.md", "Version one.\n"), 0);
    ASSERT_EQ(::mkdir((mnt + "/harness/skills").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((mnt + "/harness/skills/old-skill").c_str(), 0755), 0);
    ASSERT_EQ(Put(mnt + "/harness/skills/old-skill/SKILL.md", "---\nname: old-skill\ndescription: Old ways\n---\n"), 0);
    ASSERT_EQ(::mkdir((mnt + "/schedule/waiting").c_str(), 0755), 0);
    ASSERT_EQ(Put(mnt + "/schedule/waiting/mail.json", R"({"at":"2026-12-04T08:00:00Z","id":"mail","prompt":"read the mail"})"), 0);
    ASSERT_EQ(Put(mnt + "/schedule/day.json", R"(["2026-12-03",1])"), 0);
    EXPECT_EQ(mount.Unmount(), 0);
  }
  // A thread with no events yet, narrowed to one tool.
  ASSERT_EQ(RunCapsule({"narrow", Src(), "research", "--tools", "search"}).exit_code, 0);
  Append(Src(), "user_message", R"({"text":"hello"})");

  Sidecar sidecar_a(root_ + "/a", pki, seal);
  Sidecar sidecar_b(root_ + "/b", pki, seal);
  RunResult refused = move(Src(), sidecar_b.address());
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(Contains(refused.err, "schedules are running")) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "capsule schedule pause")) << refused.err;
  EXPECT_EQ(HolderRecord::Load(Src())->state, HolderState::kActive) << "refused before anything changed";
  EXPECT_FALSE(PathExists(Dst()));

  ASSERT_EQ(RunCapsule({"schedule", "pause", Src()}).exit_code, 0);
  RunResult there = move(Src(), sidecar_b.address());
  ASSERT_EQ(there.exit_code, 0) << there.err;
  ExpectVerifies(Dst());
  EXPECT_EQ(*ReadFile(Dst() + "/schedule/waiting/mail.json"), R"({"at":"2026-12-04T08:00:00Z","id":"mail","prompt":"read the mail"})");
  EXPECT_EQ(*ReadFile(Dst() + "/schedule/day.json"), R"(["2026-12-03",1])");
  EXPECT_EQ(*ReadFile(Dst() + "/schedule/state.json"), R"({"paused":true})");
  EXPECT_EQ(*ReadFile(Dst() + "/harness/instructions.md"), "Version one.\n");
  RunResult threads = RunCapsule({"threads", Dst(), "--json"});
  EXPECT_TRUE(Contains(threads.out, R"({"conversation":"research","events":0,"model":null,"provider":null,"tools":["search"]})"))
      << threads.out << threads.err;

  // At b: new instructions, the old skill replaced by a new one, other notes, another job.
  {
    Mount mount(Dst(), mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(mnt + "/harness/instructions.md", "Version two.\n"), 0);
    ASSERT_EQ(::unlink((mnt + "/harness/skills/old-skill/SKILL.md").c_str()), 0);
    ASSERT_EQ(::rmdir((mnt + "/harness/skills/old-skill").c_str()), 0);
    ASSERT_EQ(::mkdir((mnt + "/harness/skills/new-skill").c_str(), 0755), 0);
    ASSERT_EQ(Put(mnt + "/harness/skills/new-skill/SKILL.md", "---\nname: new-skill\ndescription: New ways\n---\n"), 0);
    ASSERT_EQ(Put(mnt + "/memory/working_memory.md", "# notes from b\n"), 0);
    ASSERT_EQ(::unlink((mnt + "/schedule/waiting/mail.json").c_str()), 0);
    ASSERT_EQ(::mkdir((mnt + "/schedule/firing").c_str(), 0755), 0);
    ASSERT_EQ(Put(mnt + "/schedule/firing/report.json", R"({"at":"2026-12-05T09:00:00Z","every":86400,"id":"report","prompt":"report"})"), 0);
    EXPECT_EQ(mount.Unmount(), 0);
  }
  ASSERT_EQ(RunCapsule({"narrow", Dst(), "research", "--tools", "search,read"}).exit_code, 0);
  RunResult back = move(Dst(), sidecar_a.address());
  ASSERT_EQ(back.exit_code, 0) << back.err;
  ExpectVerifies(Src());
  EXPECT_EQ(*ReadFile(Src() + "/harness/instructions.md"), "Version two.\n");
  EXPECT_FALSE(PathExists(Src() + "/harness/skills/old-skill")) << "a stale skill on the receiver is gone";
  EXPECT_TRUE(PathExists(Src() + "/harness/skills/new-skill/SKILL.md"));
  EXPECT_EQ(*ReadFile(Src() + "/memory/working_memory.md"), "# notes from b\n");
  EXPECT_FALSE(PathExists(Src() + "/schedule/waiting/mail.json")) << "a job gone at the sender is gone here";
  EXPECT_TRUE(PathExists(Src() + "/schedule/firing/report.json"));
  EXPECT_EQ(*ReadFile(Src() + "/harness/threads/research.json"), R"({"tools":["read","search"]})");
  Json body = Render(Src(), "anthropic");
  EXPECT_EQ(body.value("system", ""), std::string("Version two.\n\n") + "Skills (each is a folder harness/skills/<name>/ "
            "whose SKILL.md tells how; load one when it applies):\n- new-skill: New ways");
}

// A user message carries a PNG and a PDF, stored once by digest: each provider gets them
// inline in its own form, they count in the context budget, and they travel.
TEST_F(TravelE2eTest, AttachmentsRenderInlineForEveryProviderCountInTheBudgetAndTravel) {
  std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + std::string(30000, 'p');
  std::string pdf = "%PDF-1.4\n" + std::string(100, 'd');
  ASSERT_TRUE(WriteFileAtomic(root_ + "/chart.png", png).ok());
  ASSERT_TRUE(WriteFileAtomic(root_ + "/form.pdf", pdf).ok());
  RunResult a = RunCapsule({"attach", Src(), root_ + "/chart.png"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  RunResult b = RunCapsule({"attach", Src(), root_ + "/form.pdf", "--name", "tax form.pdf"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  RunResult again = RunCapsule({"attach", Src(), root_ + "/chart.png"});
  EXPECT_EQ(again.out, a.out) << "stored once by content";
  Json chart = *ParseJson(a.out, "a"), form = *ParseJson(b.out, "b");
  EXPECT_EQ(chart["media_type"], "image/png");
  EXPECT_EQ(form["media_type"], "application/pdf");
  EXPECT_EQ(chart["sha256"], Sha256Hex(png));
  Append(Src(), "user_message", "{\"text\":\"what do these say?\",\"attachments\":[" + a.out + "," + b.out + "]}");
  ExpectVerifies(Src());
  std::string png64 = Trim(testing::RunProgram("base64", {"-w0", root_ + "/chart.png"}).out);
  std::string pdf64 = Trim(testing::RunProgram("base64", {"-w0", root_ + "/form.pdf"}).out);

  Json openai = Render(Src(), "openai")["messages"][0]["content"];
  EXPECT_EQ(openai[0], (Json{{"type", "text"}, {"text", "what do these say?"}}));
  EXPECT_EQ(openai[1]["image_url"]["url"], "data:image/png;base64," + png64);
  EXPECT_EQ(openai[2]["file"]["file_data"], "data:application/pdf;base64," + pdf64);
  EXPECT_EQ(openai[2]["file"]["filename"], "tax form.pdf");
  Json anthropic = Render(Src(), "anthropic")["messages"][0]["content"];
  EXPECT_EQ(anthropic[1], (Json{{"type", "image"}, {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", png64}}}}));
  EXPECT_EQ(anthropic[2]["type"], "document");
  EXPECT_EQ(anthropic[2]["source"]["data"], pdf64);
  Json gemini = Render(Src(), "gemini")["contents"][0]["parts"];
  EXPECT_EQ(gemini[1], (Json{{"inlineData", {{"mimeType", "image/png"}, {"data", png64}}}}));
  EXPECT_EQ(gemini[2], (Json{{"inlineData", {{"mimeType", "application/pdf"}, {"data", pdf64}}}}));

  // A tool result carries the chart too: each provider gets it with the result.
  Append(Src(), "tool_call", R"({"call_id":"call_9","name":"plot","arguments":{}})");
  Append(Src(), "tool_result", "{\"call_id\":\"call_9\",\"content\":\"plotted\",\"is_error\":false,\"attachments\":[" + a.out + "]}");
  Json with_result = Render(Src(), "openai")["messages"];
  ASSERT_EQ(with_result.size(), 4u);
  EXPECT_EQ(with_result[2]["role"], "tool");
  EXPECT_EQ(with_result[2]["content"], "plotted");
  EXPECT_EQ(with_result[3]["role"], "user") << "a tool message holds text only";
  EXPECT_EQ(with_result[3]["content"][1]["image_url"]["url"], "data:image/png;base64," + png64);
  Json result_block = Render(Src(), "anthropic")["messages"][2]["content"][0];
  EXPECT_EQ(result_block["type"], "tool_result");
  EXPECT_EQ(result_block["content"][0]["text"], "plotted");
  EXPECT_EQ(result_block["content"][1]["source"]["data"], png64);
  // Gemini keeps function responses in a content of their own: the image follows in the next.
  Json contents = Render(Src(), "gemini")["contents"];
  ASSERT_EQ(contents.size(), 4u);
  EXPECT_TRUE(contents[2]["parts"][0].contains("functionResponse"));
  EXPECT_EQ(contents[3]["role"], "user");
  EXPECT_TRUE(contents[3]["parts"][0] == (Json{{"inlineData", {{"mimeType", "image/png"}, {"data", png64}}}}));

  // 30 kB of image do not fit in 2000 tokens: the budget counts them.
  RunResult tight = RunCapsule({"render", Src(), "--provider", "openai", "--model", "m-1", "--context-tokens", "2000"});
  EXPECT_EQ(tight.exit_code, 1);
  EXPECT_TRUE(Contains(tight.err, "too small")) << tight.err;

  // They travel: the receiver renders the same request.
  ASSERT_EQ(RunCapsule({"stream", "pack", Src(), "--phase", "copy", "-o", root_ + "/c.tar"}).exit_code, 0);
  RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/c.tar", root_ + "/dst"});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  ExpectVerifies(root_ + "/dst");
  for (const std::string provider : {"openai", "anthropic", "gemini"}) {
    EXPECT_EQ(Render(root_ + "/dst", provider), Render(Src(), provider)) << provider;
  }
  // A malformed reference is refused at append.
  RunResult bad = RunCapsule({"log", "append", Src(), "--type", "user_message", "--data",
                              R"({"text":"x","attachments":[{"sha256":"x","media_type":"image/gif"}]})"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(Contains(bad.err, "data.attachments")) << bad.err;
}

}  // namespace
}  // namespace capsule
