// capsule search through the real binary: words from a message's middle, an exact phrase
// first, soft expiry, notes, long texts cut; vectors of two models never mixed; a damaged
// vector index named by verify and rebuilt by reindex; the same answers after export and
// import on another folder.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunResult;

std::string Trim(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

class SearchCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("search-cli");
    cap_ = root_ + "/cap";
    RunResult init = RunCapsule({"init", cap_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  std::string Append(const std::string& type, const Json& data) {
    RunResult run = RunCapsule({"log", "append", cap_, "--type", type, "--data", data.dump()});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return Trim(run.out);
  }
  std::string Say(const std::string& text) { return Append("user_message", {{"text", text}}); }
  std::string SayWith(const std::string& text, const std::string& model, const std::vector<double>& vector) {
    return Append("user_message",
                  {{"text", text}, {"embedding", {{"model", model}, {"dims", vector.size()}, {"vector", vector}}}});
  }
  Json Search(const std::string& dir, std::vector<std::string> args, const std::string& stdin_text = "") {
    args.insert(args.begin(), {"search", dir});
    args.push_back("--json");
    RunResult run = RunCapsule(args, stdin_text);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    Result<Json> out = ParseJson(run.out, "search");
    EXPECT_TRUE(out.ok()) << run.out;
    return out.ok() ? *out : Json::array();
  }
  std::string root_, cap_;
};

std::vector<std::string> Ids(const Json& hits) {
  std::vector<std::string> ids;
  for (const Json& hit : hits) ids.push_back(hit["event_id"].is_string() ? hit["event_id"].get<std::string>() : "");
  return ids;
}

TEST_F(SearchCliTest, WordsFromTheMiddlePhraseFirstAndSoftExpiry) {
  std::string fox = Say("The morning report said the quick brown fox jumps over the lazy dog near the river bank.");
  std::string shuffled = Say("fox brown quick, fox fox brown quick quick fox brown, brown fox quick; quick fox brown");
  std::string other = Say("Nothing about animals here, only the weather.");

  // Words from the middle of a message find it.
  Json middle = Search(cap_, {"jumps over"});
  ASSERT_EQ(middle.size(), 1u) << middle.dump();
  EXPECT_EQ(middle[0]["event_id"], fox);
  EXPECT_EQ(middle[0]["kind"], "message");
  EXPECT_EQ(middle[0]["role"], "user");
  EXPECT_EQ(middle[0]["match"], "phrase");
  EXPECT_EQ(middle[0]["text"], "The morning report said the quick brown fox jumps over the lazy dog near the river bank.");

  // The exact phrase ranks first, above a message holding its words many times out of order
  // (which BM25 alone would put first).
  Json phrase = Search(cap_, {"quick brown fox"});
  ASSERT_EQ(phrase.size(), 2u) << phrase.dump();
  EXPECT_EQ(phrase[0]["event_id"], fox);
  EXPECT_EQ(phrase[0]["match"], "phrase");
  EXPECT_EQ(phrase[1]["event_id"], shuffled);
  EXPECT_EQ(phrase[1]["match"], "all");
  Json bare = Search(cap_, {"quick brown fox", "--k", "1"});
  ASSERT_EQ(bare.size(), 1u);
  EXPECT_EQ(bare[0]["event_id"], fox);

  // Soft expiry: an expired fact is not returned unless --all.
  std::string fact = Append("fact_remembered", {{"subject", "user"}, {"key", "colour"}, {"value", "teal"},
                                                {"confidence", 0.9}, {"source", other}});
  Json found = Search(cap_, {"teal", "--kind", "facts"});
  ASSERT_EQ(found.size(), 1u) << found.dump();
  EXPECT_EQ(found[0]["event_id"], fact);
  EXPECT_EQ(found[0]["kind"], "fact");
  EXPECT_EQ(found[0]["source"], other);  // provenance
  EXPECT_EQ(found[0]["subject"], "user");
  EXPECT_EQ(found[0]["key"], "colour");  // what `capsule why DIR user colour` follows
  EXPECT_EQ(found[0]["text"], "user colour: teal");
  EXPECT_TRUE(found[0]["valid_to"].is_null());
  RunResult why = RunCapsule({"why", cap_, found[0]["subject"], found[0]["key"], "--json"});
  ASSERT_EQ(why.exit_code, 0) << why.err;
  EXPECT_EQ((*ParseJson(why.out, "why"))["fact"]["id"], fact);

  std::string ended = Say("Forget my colour");
  Append("fact_expired", {{"subject", "user"}, {"key", "colour"}, {"source", ended}});
  EXPECT_EQ(Search(cap_, {"teal"}).size(), 0u);
  Json all = Search(cap_, {"teal", "--all"});
  ASSERT_EQ(all.size(), 1u) << all.dump();
  EXPECT_EQ(all[0]["event_id"], fact);
  EXPECT_TRUE(all[0]["valid_to"].is_string());

  // --kind: messages only leaves the fact out even with --all; facts only leaves messages out.
  EXPECT_EQ(Search(cap_, {"teal", "--all", "--kind", "messages"}).size(), 0u);
  EXPECT_EQ(Search(cap_, {"fox", "--kind", "facts,notes"}).size(), 0u);
  RunResult bad_kind = RunCapsule({"search", cap_, "fox", "--kind", "messages,mails"});
  EXPECT_EQ(bad_kind.exit_code, 1);
  EXPECT_NE(bad_kind.err.find("--kind messages,mails: each kind must be messages, facts or notes, got 'mails'"),
            std::string::npos) << bad_kind.err;
  RunResult no_words = RunCapsule({"search", cap_, "?!"});
  EXPECT_EQ(no_words.exit_code, 1);
  EXPECT_NE(no_words.err.find("the query '?!' holds no words"), std::string::npos) << no_words.err;
}

TEST_F(SearchCliTest, NotesAndLongTextsCut) {
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/memory/working_memory.md", "# Notes\n\nThe deploy key lives in vault.\n\n"
                                                                   "Ask Mirela before the release freeze.\n").ok());
  Json notes = Search(cap_, {"release freeze"});
  ASSERT_EQ(notes.size(), 1u) << notes.dump();
  EXPECT_EQ(notes[0]["kind"], "note");
  EXPECT_EQ(notes[0]["source"], "memory/working_memory.md:5");
  EXPECT_TRUE(notes[0]["event_id"].is_null());
  EXPECT_EQ(notes[0]["text"], "Ask Mirela before the release freeze.");
  EXPECT_EQ(Search(cap_, {"release freeze", "--kind", "messages,facts"}).size(), 0u);

  std::string body = "needle " + std::string(6000, 'x') + " tail";
  std::string id = Say(body);
  Json cut = Search(cap_, {"needle", "--kind", "messages"});
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0]["event_id"], id);
  EXPECT_EQ(cut[0]["cut"], true);
  const std::string text = cut[0]["text"];
  EXPECT_EQ(text, body.substr(0, 4096) + " [...cut]");
}

TEST_F(SearchCliTest, TwoModelsNeverMixAndHybridFuses) {
  // Model a and model b give the same 4-number vectors to different messages.
  std::string a1 = SayWith("alpha one", "model-a", {1, 0, 0, 0});
  std::string a2 = SayWith("alpha two", "model-a", {0, 1, 0, 0});
  std::string b1 = SayWith("beta one", "model-b", {1, 0, 0, 0});
  std::string b2 = SayWith("beta two", "model-b", {0.9, 0.1, 0, 0});
  std::string plain = Say("no vector at all, but alpha");

  Json by_b = Search(cap_, {"", "--vector", "-", "--model", "model-b", "--k", "10"}, "[1, 0, 0, 0]");
  EXPECT_EQ(Ids(by_b), (std::vector<std::string>{b1, b2})) << by_b.dump();
  EXPECT_EQ(by_b[0]["match"], "vector");
  EXPECT_NEAR(by_b[0]["score"].get<double>(), 1.0, 1e-6);
  Json by_a = Search(cap_, {"", "--vector", "-", "--model", "model-a"}, "[1, 0, 0, 0]");
  EXPECT_EQ(Ids(by_a), (std::vector<std::string>{a1, a2})) << by_a.dump();

  RunResult dims = RunCapsule({"search", cap_, "", "--vector", "-", "--model", "model-a"}, "[1, 0, 0]");
  EXPECT_EQ(dims.exit_code, 1);
  EXPECT_NE(dims.err.find("the query vector: has 3 numbers; model model-a's vectors have 4 dims"), std::string::npos)
      << dims.err;
  RunResult unknown = RunCapsule({"search", cap_, "", "--vector", "-", "--model", "model-c"}, "[1, 0, 0, 0]");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("model model-c: no event carries an embedding of it (models here: model-a (4 dims), "
                             "model-b (4 dims))"), std::string::npos) << unknown.err;
  RunResult no_model = RunCapsule({"search", cap_, "", "--vector", "-"}, "[1, 0, 0, 0]");
  EXPECT_EQ(no_model.exit_code, 1);
  EXPECT_NE(no_model.err.find("the query vector: needs the embedding model that made it (--model; model in memory_search)"), std::string::npos) << no_model.err;

  // Hybrid: "alpha" by words finds a1, a2 and the plain message; the vector puts a2 first.
  Json hybrid = Search(cap_, {"alpha", "--vector", "-", "--model", "model-a"}, "[0, 1, 0, 0]");
  ASSERT_EQ(hybrid.size(), 3u) << hybrid.dump();
  EXPECT_EQ(hybrid[0]["event_id"], a2);
  EXPECT_EQ(hybrid[0]["match"], "hybrid");
  for (const Json& hit : hybrid) EXPECT_NE(hit["event_id"], b1);
}

std::vector<std::string> IndexFiles(const std::string& cap, const std::string& ext) {
  std::vector<std::string> found;
  Result<std::vector<std::string>> names = ListFileNames(cap + "/.capsule/vector_index");
  if (!names.ok()) return found;
  for (const std::string& name : *names) {
    if (name.size() > ext.size() && name.substr(name.size() - ext.size()) == ext) found.push_back(name);
  }
  return found;
}

TEST_F(SearchCliTest, DamagedIndexFoundByVerifyRebuiltByReindexAndTheSameAfterImport) {
  for (int i = 0; i < 40; ++i) {
    std::vector<double> v(8);
    for (int d = 0; d < 8; ++d) v[d] = ((i * 7 + d * 13) % 17) / 17.0 - 0.4;
    SayWith("message number " + std::to_string(i) + (i % 3 ? " about rivers" : " about mountains"), "m8", v);
  }
  const std::string query = "[0.1, -0.2, 0.3, 0.05, -0.4, 0.2, 0.0, 0.15]";
  Json before = Search(cap_, {"rivers", "--vector", "-", "--model", "m8", "--k", "7"}, query);
  ASSERT_EQ(before.size(), 7u);
  std::vector<std::string> graphs = IndexFiles(cap_, ".hnsw");
  ASSERT_EQ(graphs.size(), 1u);
  EXPECT_EQ(RunCapsule({"verify", cap_}).exit_code, 0);

  // One byte of the graph changed: verify names the file; reindex rebuilds it.
  const std::string graph = cap_ + "/.capsule/vector_index/" + graphs[0];
  std::string bytes = *ReadFile(graph);
  bytes[bytes.size() / 2] ^= 0x5a;
  ASSERT_TRUE(WriteFileAtomic(graph, bytes, 0600).ok());
  RunResult damaged = RunCapsule({"verify", cap_});
  EXPECT_EQ(damaged.exit_code, 1);
  EXPECT_NE(damaged.out.find(".capsule/vector_index/" + graphs[0] + ": damaged: its SHA-256 is not the one " +
                             graphs[0].substr(0, 16) + ".json names; capsule reindex rebuilds the vector index"),
            std::string::npos) << damaged.out;
  RunResult reindex = RunCapsule({"reindex", cap_});
  ASSERT_EQ(reindex.exit_code, 0) << reindex.err;
  RunResult fixed = RunCapsule({"verify", cap_});
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out;
  EXPECT_EQ(Search(cap_, {"rivers", "--vector", "-", "--model", "m8", "--k", "7"}, query), before);

  // A damaged graph is also found and rebuilt by the search itself.
  ASSERT_TRUE(WriteFileAtomic(graph, bytes, 0600).ok());
  EXPECT_EQ(Search(cap_, {"rivers", "--vector", "-", "--model", "m8", "--k", "7"}, query), before);

  // The index travels as the journal it derives from: exported, imported into another folder,
  // which never had an index, it answers the same.
  const std::string tar = root_ + "/cap.tar";
  RunResult exported = RunCapsule({"export", cap_, "-o", tar});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const std::string there = root_ + "/there";
  RunResult imported = RunCapsule({"import", tar, there});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_TRUE(IndexFiles(there, ".hnsw").empty());
  EXPECT_EQ(Search(there, {"rivers", "--vector", "-", "--model", "m8", "--k", "7"}, query), before);
  EXPECT_EQ(Search(there, {"", "--vector", "-", "--model", "m8", "--k", "12"}, query),
            Search(cap_, {"", "--vector", "-", "--model", "m8", "--k", "12"}, query));
  EXPECT_EQ(Search(there, {"mountains", "--k", "20"}), Search(cap_, {"mountains", "--k", "20"}));
  ASSERT_EQ(IndexFiles(there, ".hnsw").size(), 1u);
  EXPECT_EQ(*ReadFile(there + "/.capsule/vector_index/" + graphs[0]), *ReadFile(graph))
      << "the same journal builds the same graph, byte for byte";
}

}  // namespace
}  // namespace capsule
