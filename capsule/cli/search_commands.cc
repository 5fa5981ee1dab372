// capsule search: what the agent owns, by words (FTS5, BM25) or by vector (hnswlib), or both
// fused by reciprocal rank. See man/capsule.1 and man/capsule.5, SEARCH.
#include <unistd.h>

#include <iostream>
#include <memory>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/cli/cli.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/search.h"
#include "journal/owned/vector_index.h"

namespace capsule::cli {

namespace {

// A query vector of 8192 numbers written out in full fits well within this.
constexpr uint64_t kMaxVectorBytes = 1 << 20;

struct SearchArgs {
  std::string dir, query, vector_file, model, kinds = "messages,facts,notes";
  size_t k = 10;
  bool all = false;
};

// Newlines and tabs shown as \n and \t, so that one hit is one line.
std::string OneLine(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += c;
    }
  }
  return out;
}

Result<std::vector<float>> ReadVector(const std::string& file) {
  std::string text;
  if (file == "-") {
    CAPSULE_ASSIGN_OR_RETURN(text, ReadStreamBounded(STDIN_FILENO, "standard input", kMaxVectorBytes, "a query vector"));
  } else {
    CAPSULE_ASSIGN_OR_RETURN(text, ReadFileBounded(file, kMaxVectorBytes, "a query vector"));
  }
  return owned::ParseQueryVector(text, "--vector " + file);
}

int RunSearch(const SearchArgs& args) {
  owned::SearchRequest request;
  request.text = args.query;
  request.k = args.k;
  request.all = args.all;
  request.model = args.model;
  Status kinds = owned::ParseSearchKinds(args.kinds, &request);
  if (!kinds.ok()) return Fail(kinds);
  if (!args.vector_file.empty()) {
    Result<std::vector<float>> vector = ReadVector(args.vector_file);
    if (!vector.ok()) return Fail(vector.status());
    request.vector = std::move(*vector);
  } else if (!args.model.empty()) {
    return Fail(Status::InvalidArgument("--model " + args.model, "names the model of a --vector; give one"));
  }
  Result<std::string> folder = ResolveCapsule(args.dir);
  if (!folder.ok()) return Fail(folder.status());
  Result<std::vector<owned::SearchHit>> hits = owned::Search(*folder, request);
  if (!hits.ok()) return Fail(hits.status());
  if (JsonOutput()) {
    Json out = Json::array();
    for (const owned::SearchHit& hit : *hits) out.push_back(owned::SearchHitToJson(hit));
    return PrintJson(out);
  }
  for (const owned::SearchHit& hit : *hits) {
    char score[32];
    std::snprintf(score, sizeof score, "%.4f", hit.score);
    std::string where = hit.event_id ? *hit.event_id : hit.source;
    std::string what = hit.kind == "fact" ? *hit.subject + "/" + *hit.key : hit.role.value_or(hit.source);
    std::cout << score << "\t" << hit.kind << "\t" << where << "\t" << what << "\t" << OneLine(hit.text) << "\n";
  }
  return kExitOk;
}

}  // namespace

Status RebuildVectorIndexesOf(const std::string& folder) {
  CAPSULE_ASSIGN_OR_RETURN(owned::Database db, owned::OpenForQuery(folder));
  return owned::RebuildVectorIndexes(folder, db).status();
}

void RegisterSearchCommands(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SearchArgs>();
  CLI::App* search = app.add_subcommand(
      "search", "Search messages, facts and notes by words (BM25), by --vector, or both (reciprocal rank fusion)");
  search->add_option("DIR", args->dir, "Capsule folder or its mountpoint")->required();
  search->add_option("QUERY", args->query, "Words to find (an exact phrase ranks first); may be \"\" with --vector");
  search->add_option("--k", args->k, "How many results, at most (default 10, up to 1000)")->check(PositiveWholeNumber());
  search->add_option("--vector", args->vector_file, "The query's embedding: a JSON array of numbers in FILE, or - (stdin)")
      ->type_name("FILE|-");
  search->add_option("--model", args->model, "The embedding model that made --vector; only its vectors are compared");
  search->add_option("--kind", args->kinds, "Which to search: a list of messages, facts, notes (default: all three)")
      ->type_name("KINDS");
  search->add_flag("--all", args->all, "Facts no longer valid (expired or superseded) too");
  AddJsonFlag(search, "Print a JSON array of results (an error as JSON)");
  search->callback([args, exit_code] { *exit_code = RunSearch(*args); });
}

}  // namespace capsule::cli
