#include "journal/owned/search.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/search_index.h"
#include "journal/owned/vector_index.h"

namespace capsule::owned {

namespace {

// The files searched as notes, beneath the capsule folder (never through a link).
const char* const kNoteFiles[] = {kWorkingMemoryPath, "memory/notes.md"};

// The query's words: runs of letters and digits (any byte of a multi-byte character counts as
// a letter), each quoted for FTS5 so that nothing in them is taken as its syntax.
std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c >= 0x80) {
      word += static_cast<char>(c);
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

// The three lexical tiers' FTS5 queries, best first: the phrase, every word, any word.
std::vector<std::pair<std::string, std::string>> Tiers(const std::vector<std::string>& words) {
  std::string phrase, all, any;
  for (const std::string& w : words) {
    const std::string quoted = "\"" + w + "\"";
    phrase += (phrase.empty() ? "" : " ") + w;
    all += (all.empty() ? "" : " AND ") + quoted;
    any += (any.empty() ? "" : " OR ") + quoted;
  }
  std::vector<std::pair<std::string, std::string>> tiers = {{"phrase", "\"" + phrase + "\""}};
  if (words.size() > 1) {
    tiers.push_back({"all", all});
    tiers.push_back({"any", any});
  }
  return tiers;
}

std::string CutText(const std::string& text, bool* cut) {
  *cut = text.size() > kMaxHitTextBytes;
  if (!*cut) return text;
  size_t at = kMaxHitTextBytes;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return text.substr(0, at) + kCutMarker;
}

// One ranked hit before its text is read: an event's position, or a note (position < 0).
struct Ranked {
  int64_t position = 0;
  std::string match;
  double score = 0;
  int tier = 0;
};

std::string EventFilter(const SearchRequest& request) {
  std::string where;
  if (!request.messages) where += " AND e.type = 'fact_remembered'";
  if (!request.facts) where += " AND e.type <> 'fact_remembered'";
  if (!request.all) where += " AND (f.fact_id IS NULL OR f.valid_to IS NULL)";
  return where;
}

Result<std::vector<Ranked>> LexicalEvents(Database& db, const SearchRequest& request, size_t limit) {
  std::vector<Ranked> ranked;
  std::set<int64_t> seen;
  const std::string sql =
      "SELECT s.rowid, -bm25(search_text) FROM search_text s JOIN journal_events e ON e.position = s.rowid "
      "LEFT JOIN agent_facts f ON f.fact_id = e.event_id WHERE search_text MATCH ?" +
      EventFilter(request) + " ORDER BY bm25(search_text) LIMIT ?";
  int tier = 0;
  for (const auto& [match, query] : Tiers(Words(request.text))) {
    CAPSULE_ASSIGN_OR_RETURN(Statement rows, db.Prepare(sql));
    rows.Bind(1, query).Bind(2, static_cast<int64_t>(limit));
    for (;;) {
      CAPSULE_ASSIGN_OR_RETURN(bool row, rows.Step());
      if (!row) break;
      if (!seen.insert(rows.ColumnInt(0)).second) continue;
      ranked.push_back({rows.ColumnInt(0), match, rows.ColumnDouble(1), tier});
    }
    ++tier;
  }
  return ranked;
}

struct Note {
  std::string file;
  int line = 0;
  std::string text;
};

// The notes' paragraphs (blocks between blank lines), each with its first line's number.
std::vector<Note> ReadNotes(const std::string& capsule_dir) {
  std::vector<Note> notes;
  for (const char* file : kNoteFiles) {
    Result<std::string> text = ReadFileBeneath(capsule_dir, file);
    if (!text.ok()) continue;  // absent (memory/notes.md is a stream's name, rarely a file)
    Note note{file, 0, ""};
    int line = 0;
    size_t at = 0;
    while (at <= text->size()) {
      size_t end = text->find('\n', at);
      if (end == std::string::npos) end = text->size();
      std::string_view one(text->data() + at, end - at);
      ++line;
      if (one.find_first_not_of(" \t\r") == std::string_view::npos) {
        if (!note.text.empty()) notes.push_back(note);
        note.text.clear();
      } else {
        if (note.text.empty()) note.line = line;
        note.text += (note.text.empty() ? "" : "\n") + std::string(one);
      }
      at = end + 1;
    }
    if (!note.text.empty()) notes.push_back(note);
  }
  return notes;
}

// The notes ranked as the events are, in a database of their own made for this query.
Result<std::vector<Ranked>> LexicalNotes(const std::vector<Note>& notes, const SearchRequest& request) {
  std::vector<Ranked> ranked;
  if (notes.empty()) return ranked;
  CAPSULE_ASSIGN_OR_RETURN(Database db, Database::Open(":memory:", Database::Mode::kCreate, "notes"));
  CAPSULE_RETURN_IF_ERROR(db.Execute("CREATE VIRTUAL TABLE notes USING fts5 (text, tokenize = 'unicode61 remove_diacritics 2')"));
  CAPSULE_ASSIGN_OR_RETURN(Statement insert, db.Prepare("INSERT INTO notes (rowid, text) VALUES (?, ?)"));
  for (size_t i = 0; i < notes.size(); ++i) {
    CAPSULE_RETURN_IF_ERROR(insert.Bind(1, static_cast<int64_t>(i)).Bind(2, notes[i].text).Run());
  }
  std::set<int64_t> seen;
  int tier = 0;
  for (const auto& [match, query] : Tiers(Words(request.text))) {
    CAPSULE_ASSIGN_OR_RETURN(Statement rows, db.Prepare("SELECT rowid, -bm25(notes) FROM notes WHERE notes MATCH ? "
                                                        "ORDER BY bm25(notes) LIMIT ?"));
    rows.Bind(1, query).Bind(2, static_cast<int64_t>(request.k));
    for (;;) {
      CAPSULE_ASSIGN_OR_RETURN(bool row, rows.Step());
      if (!row) break;
      if (!seen.insert(rows.ColumnInt(0)).second) continue;
      ranked.push_back({-1 - rows.ColumnInt(0), match, rows.ColumnDouble(1), tier});
    }
    ++tier;
  }
  return ranked;
}

// The vector hits that pass the request's kinds and expiry, nearest first.
Result<std::vector<Ranked>> VectorEvents(const std::string& capsule_dir, Database& db, const SearchRequest& request) {
  // More candidates than asked for, since some may not pass the filters.
  const size_t want = std::min(kMaxSearchResults, std::max<size_t>(request.k * 4, 40));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<VectorHit> hits, QueryVectors(capsule_dir, db, request.model, *request.vector, want));
  CAPSULE_ASSIGN_OR_RETURN(Statement pass, db.Prepare("SELECT 1 FROM journal_events e LEFT JOIN agent_facts f ON "
                                                      "f.fact_id = e.event_id WHERE e.position = ?" +
                                                      EventFilter(request)));
  std::vector<Ranked> ranked;
  for (const VectorHit& hit : hits) {
    pass.Reset();
    pass.Bind(1, hit.position);
    CAPSULE_ASSIGN_OR_RETURN(bool ok, pass.Step());
    if (ok) ranked.push_back({hit.position, "vector", hit.similarity, 0});
  }
  return ranked;
}

// Reciprocal rank fusion of two rankings (each best first).
std::vector<Ranked> Fuse(const std::vector<Ranked>& a, const std::vector<Ranked>& b) {
  std::map<int64_t, Ranked> fused;
  for (const std::vector<Ranked>* list : {&a, &b}) {
    for (size_t rank = 0; rank < list->size(); ++rank) {
      Ranked& r = fused[(*list)[rank].position];
      r.position = (*list)[rank].position;
      r.match = "hybrid";
      r.score += 1.0 / (kRrfConstant + static_cast<double>(rank + 1));
    }
  }
  std::vector<Ranked> out;
  for (auto& [position, r] : fused) out.push_back(r);
  std::stable_sort(out.begin(), out.end(), [](const Ranked& x, const Ranked& y) {
    return x.score != y.score ? x.score > y.score : x.position < y.position;
  });
  return out;
}

Status FillEvent(Database& db, int64_t position, SearchHit* hit) {
  CAPSULE_ASSIGN_OR_RETURN(Statement event, db.Prepare(
      "SELECT e.event_id, e.type, e.ts, m.role, m.content, m.conversation_id, f.subject, f.key, f.value, "
      "f.source_message_id, f.valid_to FROM journal_events e LEFT JOIN messages m ON m.message_id = e.event_id "
      "LEFT JOIN agent_facts f ON f.fact_id = e.event_id WHERE e.position = ?"));
  event.Bind(1, position);
  CAPSULE_ASSIGN_OR_RETURN(bool row, event.Step());
  if (!row) return Status::Corruption(db.name(), "search_text names position " + std::to_string(position) +
                                                     " that journal_events lacks; capsule reindex rebuilds it");
  hit->event_id = event.ColumnText(0);
  hit->ts = event.ColumnText(2);
  std::string text;
  if (event.ColumnText(1) == "fact_remembered") {
    hit->kind = "fact";
    hit->subject = event.ColumnText(6);
    hit->key = event.ColumnText(7);
    hit->source = event.ColumnText(9);
    hit->valid_to = event.ColumnOptionalText(10);
    std::string value = event.ColumnText(8);
    Result<Json> parsed = ParseJson(value, "fact value");
    if (parsed.ok() && parsed->is_string()) value = parsed->get<std::string>();
    text = *hit->subject + " " + *hit->key + ": " + value;
  } else {
    hit->kind = "message";
    hit->role = event.ColumnText(3);
    hit->source = event.ColumnText(5);
    text = event.ColumnText(4);
  }
  hit->text = CutText(text, &hit->cut);
  return Status::Ok();
}

bool TierThenScore(const Ranked& x, const Ranked& y) {
  if (x.tier != y.tier) return x.tier < y.tier;
  if (x.score != y.score) return x.score > y.score;
  return x.position > y.position;  // events (position > 0) before notes, later events first
}

}  // namespace

Status ParseSearchKinds(const std::string& kinds, SearchRequest* request) {
  request->messages = request->facts = request->notes = false;
  size_t at = 0;
  while (at <= kinds.size()) {
    size_t end = kinds.find(',', at);
    if (end == std::string::npos) end = kinds.size();
    const std::string kind = kinds.substr(at, end - at);
    if (kind == "messages" || kind == "message") {
      request->messages = true;
    } else if (kind == "facts" || kind == "fact") {
      request->facts = true;
    } else if (kind == "notes" || kind == "note") {
      request->notes = true;
    } else {
      return Status::InvalidArgument("--kind " + kinds, "each kind must be messages, facts or notes, got '" + kind + "'");
    }
    at = end + 1;
  }
  return Status::Ok();
}

Result<std::vector<float>> ParseQueryVector(std::string_view text, const std::string& what) {
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, what));
  if (!json.is_array() || json.empty() || json.size() > kMaxEmbeddingDims) {
    return Status::InvalidArgument(what, "must be a JSON array of 1 to " + std::to_string(kMaxEmbeddingDims) + " numbers");
  }
  std::vector<float> vector;
  for (const Json& x : json) {
    if (!x.is_number() || !std::isfinite(x.get<double>())) {
      return Status::InvalidArgument(what, "must hold only finite numbers, got " + x.dump());
    }
    vector.push_back(static_cast<float>(x.get<double>()));
  }
  return vector;
}

Result<std::vector<SearchHit>> Search(const std::string& capsule_dir, const SearchRequest& request) {
  const bool lexical = !Words(request.text).empty();
  if (!lexical && !request.vector) {
    return Status::InvalidArgument("search", request.text.empty() ? "give words to find, or a vector (--vector)"
                                                                  : "the query '" + request.text + "' holds no words");
  }
  if (request.vector && request.model.empty()) {
    return Status::InvalidArgument("the query vector", "needs the embedding model that made it (--model; model in memory_search)");
  }
  if (request.k == 0 || request.k > kMaxSearchResults) {
    return Status::InvalidArgument("--k " + std::to_string(request.k), "must be from 1 to " + std::to_string(kMaxSearchResults));
  }
  CAPSULE_ASSIGN_OR_RETURN(Database db, OpenForQuery(capsule_dir));
  std::vector<Ranked> words, nearest;
  std::vector<Note> notes;
  if (lexical) {
    if (request.messages || request.facts) {
      CAPSULE_ASSIGN_OR_RETURN(words, LexicalEvents(db, request, request.k));
    }
    if (request.notes) {
      notes = ReadNotes(capsule_dir);
      CAPSULE_ASSIGN_OR_RETURN(std::vector<Ranked> in_notes, LexicalNotes(notes, request));
      words.insert(words.end(), in_notes.begin(), in_notes.end());
    }
    std::stable_sort(words.begin(), words.end(), TierThenScore);
  }
  if (request.vector && (request.messages || request.facts)) {
    CAPSULE_ASSIGN_OR_RETURN(nearest, VectorEvents(capsule_dir, db, request));
  } else if (request.vector) {
    return Status::InvalidArgument("--vector", "notes carry no embeddings: ask for messages or facts too");
  }
  std::vector<Ranked> ranked = !request.vector ? words : !lexical ? nearest : Fuse(words, nearest);
  if (ranked.size() > request.k) ranked.resize(request.k);

  std::vector<SearchHit> hits;
  for (const Ranked& r : ranked) {
    SearchHit hit;
    hit.score = r.score;
    hit.match = r.match;
    if (r.position < 0) {
      const Note& note = notes[static_cast<size_t>(-1 - r.position)];
      hit.kind = "note";
      hit.source = note.file + ":" + std::to_string(note.line);
      hit.text = CutText(note.text, &hit.cut);
    } else {
      CAPSULE_RETURN_IF_ERROR(FillEvent(db, r.position, &hit));
    }
    hits.push_back(std::move(hit));
  }
  return hits;
}

Json SearchHitToJson(const SearchHit& hit) {
  Json out = {{"kind", hit.kind}, {"source", hit.source}, {"score", hit.score}, {"match", hit.match},
              {"text", hit.text}, {"cut", hit.cut}};
  out["event_id"] = hit.event_id ? Json(*hit.event_id) : Json(nullptr);
  if (!hit.ts.empty()) out["ts"] = hit.ts;
  if (hit.role) out["role"] = *hit.role;
  if (hit.subject) out["subject"] = *hit.subject;
  if (hit.key) out["key"] = *hit.key;
  if (hit.kind == "fact") out["valid_to"] = hit.valid_to ? Json(*hit.valid_to) : Json(nullptr);
  return out;
}

}  // namespace capsule::owned
