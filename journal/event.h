// One event of the journal (memory/timeline_events.jsonl): its fields, its canonical line,
// its id, and the check of each type's `data`.
//
// A line is the canonical JSON of
//   {"clock","data","id","machine","prev","seq","ts","type"}
// where `id` is the SHA-256 (hex) of the canonical form of the same object without `id`.
// Event is the parsed form that every reader of the journal (verify, merge, the provider
// rendering, the SQL projection) works on.
//
// Thread-safety: values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"

namespace capsule::journal {

// The largest event a journal takes: its canonical line, without the newline, at most 16 MiB.
// Larger content belongs in an attachment (memory/attachments/), which an event references.
inline constexpr uint64_t kMaxEventLineBytes = uint64_t{16} << 20;

// Refuses (InvalidArgument, naming `what`) an event whose canonical line, without its
// newline, is `line_bytes` long when that is over kMaxEventLineBytes: the message gives the
// size and the limit, and points at attachments. Every writer of the journal asks it (an
// append, a merge's added events); readers take any size a journal already holds.
Status CheckEventLineSize(uint64_t line_bytes, const std::string& what);

struct Event {
  uint64_t clock = 0;                // Lamport clock
  Json data = Json::object();        // type-specific fields; may carry "conversation"
  std::string id;                    // SHA-256 hex of the event without "id"
  std::string machine;               // the machine that appended it
  std::optional<std::string> prev;   // id of the same machine's previous event; none for seq 1
  uint64_t seq = 0;                  // 1, 2, 3 ... per machine
  std::string ts;                    // UTC, RFC 3339: 2026-12-02T16:40:00Z
  std::string type;                  // user_message, tool_call, ...

  // The canonical JSON of the event, with or without its id.
  Json ToJson(bool with_id = true) const;
  // The journal line: the canonical JSON with its id, without the newline.
  Result<std::string> CanonicalLine() const;
  // The id the event's content gives: SHA-256 of the canonical form without "id".
  Result<std::string> ComputeId() const;
  // The conversation this event belongs to ("main" when data does not say).
  std::string Conversation() const;
};

// The journal's order: (clock, machine, seq).
bool EventOrderLess(const Event& a, const Event& b);

// "event <id> (machine m1, seq 7)": how problems name an event.
std::string DescribeEvent(const Event& event);

// The types this build knows and checks, in the order of man/capsule.5.
const std::vector<std::string>& KnownEventTypes();
bool IsKnownEventType(std::string_view type);
// The same table in words, one line per type, for `capsule log append --help`:
// "  tool_call          call_id* name* arguments*" (* required; every type may add conversation).
std::string EventTypesHelp();

// Checks `data` for `type` on append: InvalidArgument naming the field, for example
// "tool_call: data.arguments: must be a JSON object". An unknown type is refused.
Status CheckEventData(const std::string& type, const Json& data);

// Parses one stored line (without its newline). Any fault is Corruption naming `where`
// (e.g. "journal line 12"): not canonical JSON, a missing or ill-typed field, an id that
// does not match the content.
Result<Event> ParseEventLine(std::string_view line, const std::string& where);

// Checks an event given as a struct (for example one received from another machine): the
// fields' shapes and that its id matches its content. Corruption naming the event.
Status CheckEventFields(const Event& event);

// The current time as UTC RFC 3339 with seconds: 2026-12-02T16:40:00Z.
std::string UtcNowRfc3339();
bool IsRfc3339Utc(std::string_view ts);

}  // namespace capsule::journal
