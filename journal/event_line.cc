#include "journal/event_line.h"

#include <cstring>

#include "capsule/base/canonical_scan.h"
#include "capsule/base/sha256.h"

namespace capsule::journal {

namespace {

// The id's 64 lowercase hex digits equal `digest`: the digest written in hex and compared,
// with no branch per digit (ids are random, such branches mispredict).
bool IdMatches(std::string_view hex, const Sha256Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char written[64];
  for (size_t i = 0; i < digest.size(); ++i) {
    written[2 * i] = kDigits[digest[i] >> 4];
    written[2 * i + 1] = kDigits[digest[i] & 0xF];
  }
  return hex.size() == sizeof written && std::memcmp(hex.data(), written, sizeof written) == 0;
}

// A string field whose value is its raw bytes (no escape among them), non-empty.
bool PlainString(CanonicalScanner& scan, std::string_view* value) {
  bool escaped = false;
  return scan.String(value, &escaped) && !escaped && !value->empty();
}

}  // namespace

bool ReadEventLine(std::string_view line, EventLine* out) {
  CanonicalScanner scan(line);
  EventLine event;
  event.line = line;
  if (!scan.Literal("{\"clock\":") || !scan.PositiveInteger(&event.clock)) return false;
  if (!scan.Literal(",\"data\":")) return false;
  size_t data_start = scan.offset();
  if (!scan.Object(2)) return false;  // the event itself is nesting level 1
  event.data = line.substr(data_start, scan.offset() - data_start);
  size_t id_member = scan.offset();  // ,"id":"<hex>" is left out of what the id digests
  if (!scan.Literal(",\"id\":") || !scan.HexString64(&event.id)) return false;
  size_t id_member_end = scan.offset();
  if (!scan.Literal(",\"machine\":") || !PlainString(scan, &event.machine)) return false;
  if (!scan.Literal(",\"prev\":")) return false;
  if (!scan.Literal("null") && !scan.HexString64(&event.prev)) return false;
  if (!scan.Literal(",\"seq\":") || !scan.PositiveInteger(&event.seq)) return false;
  if (!scan.Literal(",\"ts\":") || !PlainString(scan, &event.ts) || !IsRfc3339Utc(event.ts)) return false;
  if (!scan.Literal(",\"type\":") || !PlainString(scan, &event.type)) return false;
  if (!scan.Literal("}") || !scan.AtEnd()) return false;
  if ((event.seq == 1) != event.prev.empty()) return false;

  thread_local Sha256 hasher;
  hasher.Reset();
  hasher.Update(line.substr(0, id_member));
  hasher.Update(line.substr(id_member_end));
  if (!IdMatches(event.id, hasher.Finish())) return false;
  *out = event;
  return true;
}

EventLine FieldsOf(const Event& event, std::string_view line) {
  EventLine fields;
  fields.clock = event.clock;
  fields.seq = event.seq;
  fields.machine = event.machine;
  fields.id = event.id;
  if (event.prev) fields.prev = *event.prev;
  fields.ts = event.ts;
  fields.type = event.type;
  fields.line = line;
  return fields;  // data stays in the event; ToEvent is not asked for such fields
}

Result<Event> ToEvent(const EventLine& fields, const std::string& where) {
  Event event = HeaderOf(fields);
  event.data = Json::parse(fields.data.begin(), fields.data.end(), nullptr, /*allow_exceptions=*/false);
  if (event.data.is_discarded()) return ParseEventLine(fields.line, where);  // never for a line read above
  return event;
}

Event HeaderOf(const EventLine& fields) {
  Event event;
  event.clock = fields.clock;
  event.id.assign(fields.id);
  event.machine.assign(fields.machine);
  if (!fields.prev.empty()) event.prev.emplace(fields.prev);
  event.seq = fields.seq;
  event.ts.assign(fields.ts);
  event.type.assign(fields.type);
  return event;
}

std::string DescribeLine(const EventLine& event) {
  std::string text = "event ";
  text.append(event.id);
  text += " (machine ";
  text.append(event.machine);
  text += ", seq " + std::to_string(event.seq) + ")";
  return text;
}

}  // namespace capsule::journal
