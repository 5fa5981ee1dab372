#include "journal/event.h"

#include <algorithm>
#include <ctime>
#include <tuple>

#include "capsule/base/sha256.h"
#include "capsule/format/attachments.h"

namespace capsule::journal {

namespace {

enum class Kind { kString, kObject, kBoolean, kAny, kTextOrJson, kConfidence, kEventId, kAttachments, kNameList, kEdits };

struct Field {
  const char* name;
  Kind kind;
  bool required;
};

struct TypeRule {
  const char* type;
  std::vector<Field> fields;
};

const std::vector<TypeRule>& Rules() {
  static const std::vector<TypeRule> rules = {
      {"system", {{"text", Kind::kString, true}}},
      {"user_message", {{"text", Kind::kString, true}, {"attachments", Kind::kAttachments, false}}},
      {"assistant_message",
       {{"text", Kind::kString, true}, {"provider", Kind::kString, true}, {"model", Kind::kString, true}}},
      {"reasoning",
       {{"provider", Kind::kString, true},
        {"model", Kind::kString, true},
        {"text", Kind::kString, true},
        {"signature", Kind::kString, false},
        {"encrypted", Kind::kString, false}}},
      {"tool_call",
       {{"call_id", Kind::kString, true}, {"name", Kind::kString, true}, {"arguments", Kind::kObject, true}}},
      {"tool_result",
       {{"call_id", Kind::kString, true},
        {"content", Kind::kTextOrJson, true},
        {"is_error", Kind::kBoolean, true},
        {"attachments", Kind::kAttachments, false}}},
      {"tool_defined",
       {{"name", Kind::kString, true}, {"description", Kind::kString, true}, {"parameters", Kind::kObject, true}}},
      {"model_switch", {{"provider", Kind::kString, true}, {"model", Kind::kString, true}}},
      {"fact_remembered",
       {{"subject", Kind::kString, true},
        {"key", Kind::kString, true},
        {"value", Kind::kAny, true},
        {"confidence", Kind::kConfidence, true},
        {"source", Kind::kEventId, true}}},
      {"fact_expired",
       {{"subject", Kind::kString, true}, {"key", Kind::kString, true}, {"source", Kind::kEventId, true}}},
      {"run_opened",
       {{"run_id", Kind::kString, true}, {"framework", Kind::kString, true}, {"thread_key", Kind::kString, true}}},
      {"run_awaiting", {{"run_id", Kind::kString, true}, {"awaiting", Kind::kString, true}}},
      {"run_closed", {{"run_id", Kind::kString, true}, {"status", Kind::kString, true}}},
      // A run (capsule exec) was given these secrets from the host's keychain: names only.
      {"secrets_used", {{"secrets", Kind::kNameList, true}, {"sandbox", Kind::kString, true}}},
      // capsule accept took files edited behind the manifest: each path, its digest before and after.
      {"edits_accepted", {{"edits", Kind::kEdits, true}}},
  };
  return rules;
}

// Empty when `value` is of `kind`; otherwise what it must be.
std::string KindProblem(Kind kind, const Json& value) {
  switch (kind) {
    case Kind::kString: return value.is_string() ? "" : "must be a string";
    case Kind::kObject: return value.is_object() ? "" : "must be a JSON object";
    case Kind::kBoolean: return value.is_boolean() ? "" : "must be true or false";
    case Kind::kAny: return value.is_null() ? "must not be null" : "";
    case Kind::kTextOrJson:
      return value.is_string() || value.is_array() || value.is_object() ? ""
                                                                        : "must be a string, a JSON array or a JSON object";
    case Kind::kConfidence:
      return value.is_number() && value.get<double>() >= 0 && value.get<double>() <= 1 ? ""
                                                                                       : "must be a number from 0 to 1";
    case Kind::kEventId:
      return value.is_string() && IsSha256Hex(value.get<std::string>()) ? "" : "must be an event id (64 hex digits)";
    case Kind::kAttachments: {
      const char* what = "must be an array of {\"sha256\": 64 hex digits, \"media_type\": image/png, image/jpeg, "
                         "image/webp, application/pdf or text/plain, \"name\"?: a string}";
      if (!value.is_array()) return what;
      for (const Json& item : value) {
        if (!item.is_object()) return what;
        auto sha = item.find("sha256");
        auto type = item.find("media_type");
        auto name = item.find("name");
        if (sha == item.end() || !sha->is_string() || !IsSha256Hex(sha->get<std::string>())) return what;
        if (type == item.end() || !type->is_string() || !IsAttachmentMediaType(type->get<std::string>())) return what;
        if (name != item.end() && !name->is_string()) return what;
      }
      return "";
    }
    case Kind::kNameList:
      return value.is_array() && !value.empty() &&
                     std::all_of(value.begin(), value.end(), [](const Json& name) { return name.is_string() && !name.get<std::string>().empty(); })
                 ? ""
                 : "must be a non-empty list of names";
    case Kind::kEdits: {
      const char* what = "must be a non-empty list of {\"path\": a string, \"before\" and \"after\": null or "
                         "{\"sha256\": 64 hex digits, \"size\": a byte count}}";
      auto digest_ok = [](const Json& digest) {
        if (digest.is_null()) return true;
        return digest.is_object() && digest.size() == 2 && digest.contains("sha256") && digest["sha256"].is_string() &&
               IsSha256Hex(digest["sha256"].get<std::string>()) && digest.contains("size") &&
               digest["size"].is_number_integer() && digest["size"].get<int64_t>() >= 0;
      };
      if (!value.is_array() || value.empty()) return what;
      for (const Json& edit : value) {
        if (!edit.is_object() || !edit.contains("path") || !edit["path"].is_string() ||
            edit["path"].get<std::string>().empty() || !edit.contains("before") || !edit.contains("after") ||
            !digest_ok(edit["before"]) || !digest_ok(edit["after"])) {
          return what;
        }
      }
      return "";
    }
  }
  return "unknown kind";
}

}  // namespace

Json Event::ToJson(bool with_id) const {
  Json out = {{"clock", clock}, {"data", data}, {"machine", machine}, {"seq", seq}, {"ts", ts}, {"type", type}};
  out["prev"] = prev ? Json(*prev) : Json(nullptr);
  if (with_id) out["id"] = id;
  return out;
}

Result<std::string> Event::CanonicalLine() const { return CanonicalJson(ToJson(true), "event"); }

Result<std::string> Event::ComputeId() const {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(ToJson(false), "event"));
  return Sha256Hex(text);
}

std::string Event::Conversation() const {
  auto it = data.find("conversation");
  return it != data.end() && it->is_string() ? it->get<std::string>() : std::string("main");
}

bool EventOrderLess(const Event& a, const Event& b) {
  return std::tie(a.clock, a.machine, a.seq) < std::tie(b.clock, b.machine, b.seq);
}

std::string DescribeEvent(const Event& event) {
  return "event " + event.id + " (machine " + event.machine + ", seq " + std::to_string(event.seq) + ")";
}

const std::vector<std::string>& KnownEventTypes() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> out;
    for (const TypeRule& rule : Rules()) out.push_back(rule.type);
    return out;
  }();
  return types;
}

std::string EventTypesHelp() {
  std::string out;
  for (const TypeRule& rule : Rules()) {
    std::string line = "  " + std::string(rule.type);
    line.resize(std::max<size_t>(line.size() + 1, 21), ' ');
    for (const Field& field : rule.fields) line += std::string(" ") + field.name + (field.required ? "*" : "");
    out += line + "\n";
  }
  return out + "  Any type may add conversation (default main).";
}

bool IsKnownEventType(std::string_view type) {
  for (const TypeRule& rule : Rules()) {
    if (type == rule.type) return true;
  }
  return false;
}

Status CheckEventData(const std::string& type, const Json& data) {
  const TypeRule* rule = nullptr;
  for (const TypeRule& candidate : Rules()) {
    if (type == candidate.type) rule = &candidate;
  }
  if (rule == nullptr) {
    std::string known;
    for (const std::string& name : KnownEventTypes()) known += (known.empty() ? "" : ", ") + name;
    return Status::InvalidArgument("type " + type, "unknown event type (known: " + known + ")");
  }
  if (!data.is_object()) return Status::InvalidArgument(type + ": data", "must be a JSON object");
  for (const Field& field : rule->fields) {
    auto it = data.find(field.name);
    if (it == data.end()) {
      if (field.required) return Status::InvalidArgument(type + ": data." + field.name, "missing");
      continue;
    }
    std::string problem = KindProblem(field.kind, *it);
    if (!problem.empty()) return Status::InvalidArgument(type + ": data." + field.name, problem);
  }
  auto conversation = data.find("conversation");
  if (conversation != data.end() && (!conversation->is_string() || conversation->get<std::string>().empty())) {
    return Status::InvalidArgument(type + ": data.conversation", "must be a non-empty string");
  }
  return Status::Ok();
}

Result<Event> ParseEventLine(std::string_view line, const std::string& where) {
  Result<Json> parsed = ParseJson(line, where, Code::kCorruption);
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  if (!json.is_object() || json.size() != 8) {
    return Status::Corruption(where, "not an event: needs exactly clock, data, id, machine, prev, seq, ts, type");
  }
  auto field = [&](const char* name) -> const Json& { return json[name]; };
  auto has = [&](const char* name) { return json.contains(name); };
  for (const char* name : {"clock", "data", "id", "machine", "prev", "seq", "ts", "type"}) {
    if (!has(name)) return Status::Corruption(where, std::string("not an event: no \"") + name + "\"");
  }
  if (!field("clock").is_number_unsigned() || field("clock").get<uint64_t>() == 0) {
    return Status::Corruption(where, "clock: must be a positive integer");
  }
  if (!field("seq").is_number_unsigned() || field("seq").get<uint64_t>() == 0) {
    return Status::Corruption(where, "seq: must be a positive integer");
  }
  if (!field("data").is_object()) return Status::Corruption(where, "data: must be a JSON object");
  if (!field("id").is_string() || !IsSha256Hex(field("id").get<std::string>())) {
    return Status::Corruption(where, "id: must be 64 lowercase hex digits");
  }
  if (!field("machine").is_string() || field("machine").get<std::string>().empty()) {
    return Status::Corruption(where, "machine: must be a non-empty string");
  }
  if (!field("prev").is_null() && !(field("prev").is_string() && IsSha256Hex(field("prev").get<std::string>()))) {
    return Status::Corruption(where, "prev: must be null or an event id");
  }
  if (!field("ts").is_string() || !IsRfc3339Utc(field("ts").get<std::string>())) {
    return Status::Corruption(where, "ts: must be UTC RFC 3339 (2026-12-02T16:40:00Z)");
  }
  if (!field("type").is_string() || field("type").get<std::string>().empty()) {
    return Status::Corruption(where, "type: must be a non-empty string");
  }
  Result<std::string> canonical = CanonicalJson(json, where);
  if (!canonical.ok() || *canonical != line) return Status::Corruption(where, "not in canonical JSON form");

  Event event;
  event.clock = field("clock").get<uint64_t>();
  event.data = field("data");
  event.id = field("id").get<std::string>();
  event.machine = field("machine").get<std::string>();
  if (field("prev").is_string()) event.prev = field("prev").get<std::string>();
  event.seq = field("seq").get<uint64_t>();
  event.ts = field("ts").get<std::string>();
  event.type = field("type").get<std::string>();
  if ((event.seq == 1) != !event.prev.has_value()) {
    return Status::Corruption(where + ": " + DescribeEvent(event),
                              event.seq == 1 ? "seq 1 must have prev null" : "prev is null but seq is not 1");
  }

  // The canonical form without "id" is the line with its top-level `,"id":"<hex>"` taken out:
  // keys are sorted, so it follows data's closing brace, and nothing after it can hold a quote.
  std::string member = ",\"id\":\"" + event.id + "\"";
  size_t at = line.rfind(member);
  if (at == std::string_view::npos) return Status::Corruption(where, "id: not found where canonical form puts it");
  Sha256 hasher;
  hasher.Update(line.substr(0, at));
  hasher.Update(line.substr(at + member.size()));
  if (hasher.FinishHex() != event.id) {
    return Status::Corruption(where + ": " + DescribeEvent(event), "id does not match the event's content");
  }
  return event;
}

Status CheckEventFields(const Event& event) {
  auto fail = [&](const std::string& why) { return Status::Corruption(DescribeEvent(event), why); };
  if (event.clock == 0 || event.seq == 0) return fail("clock and seq must be positive");
  if (event.machine.empty()) return fail("machine: must be a non-empty string");
  if (!event.data.is_object()) return fail("data: must be a JSON object");
  if (event.type.empty()) return fail("type: must be a non-empty string");
  if (!IsRfc3339Utc(event.ts)) return fail("ts: must be UTC RFC 3339 (2026-12-02T16:40:00Z)");
  if ((event.seq == 1) != !event.prev.has_value()) {
    return fail(event.seq == 1 ? "seq 1 must have prev null" : "prev is null but seq is not 1");
  }
  if (event.prev && !IsSha256Hex(*event.prev)) return fail("prev: must be an event id");
  Result<std::string> id = event.ComputeId();
  if (!id.ok()) return fail(id.status().message());
  if (*id != event.id) return fail("id does not match the event's content");
  return Status::Ok();
}

Status CheckEventLineSize(uint64_t line_bytes, const std::string& what) {
  if (line_bytes <= kMaxEventLineBytes) return Status::Ok();
  return Status::InvalidArgument(
      what, "an event of " + std::to_string(line_bytes) + " bytes (its canonical line) is over the journal's limit of " +
                std::to_string(kMaxEventLineBytes) +
                " bytes (16 MiB): store large content as an attachment (capsule attach) and reference it in "
                "data.attachments");
}

std::string UtcNowRfc3339() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

bool IsRfc3339Utc(std::string_view ts) {
  // YYYY-MM-DDTHH:MM:SS with an optional fraction, then Z.
  if (ts.size() < 20 || ts.back() != 'Z') return false;
  static constexpr char kShape[] = "dddd-dd-ddTdd:dd:dd";
  for (size_t i = 0; i < 19; ++i) {
    char c = ts[i];
    if (kShape[i] == 'd' ? (c < '0' || c > '9') : c != kShape[i]) return false;
  }
  if (ts.size() == 20) return true;
  if (ts[19] != '.' || ts.size() < 22) return false;
  for (size_t i = 20; i + 1 < ts.size(); ++i) {
    if (ts[i] < '0' || ts[i] > '9') return false;
  }
  return true;
}

}  // namespace capsule::journal
