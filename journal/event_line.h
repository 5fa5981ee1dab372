// Reading a journal line in one pass over its bytes: the canonical form checked, the fields
// taken out and the id recomputed, without building a JSON document or writing the line
// again (ParseEventLine does both, at several times the cost).
//
// A canonical event line is
//   {"clock":N,"data":{...},"id":"<64 hex>","machine":"...","prev":null|"<64 hex>","seq":N,
//    "ts":"...","type":"..."}
// in exactly that order (keys sorted), so its id member `,"id":"<hex>"` sits between data and
// machine, and the line with that member left out is the canonical form Event::ComputeId
// hashes.
//
// ReadEventLine accepts only what ParseEventLine accepts, with the same fields and id. It may
// refuse a line ParseEventLine would accept (a machine or type written with escapes): its
// callers then ask ParseEventLine, which also names the fault of a line that has one.
//
// Thread-safety: pure functions; EventLine holds views into the caller's text.
#pragma once

#include <cstdint>
#include <string_view>

#include "journal/event.h"

namespace capsule::journal {

// The fields of one event line, as views into the line (or into the Event they came from).
struct EventLine {
  uint64_t clock = 0;
  uint64_t seq = 0;
  std::string_view machine;
  std::string_view id;    // 64 lowercase hex digits
  std::string_view prev;  // 64 lowercase hex digits; empty for null (seq 1)
  std::string_view ts;
  std::string_view type;
  std::string_view data;  // the canonical text of data's object
  std::string_view line;  // the whole line, without its newline
};

// True, with `out` filled, when `line` (without its newline) is a canonical event line whose
// id matches its content and whose seq and prev agree (seq 1 has prev null). False when it is
// not, or when this reader cannot tell: ask ParseEventLine.
bool ReadEventLine(std::string_view line, EventLine* out);

// The fields of `event` as views into it (`line`, its canonical text, is the caller's).
EventLine FieldsOf(const Event& event, std::string_view line);

// The whole event: data parsed into a document. `fields` came from ReadEventLine or FieldsOf.
Result<Event> ToEvent(const EventLine& fields, const std::string& where);

// The event without its data (left null): what orders and chains the line after it, kept
// without parsing data, which may be megabytes.
Event HeaderOf(const EventLine& fields);

// "event <id> (machine m1, seq 7)", as DescribeEvent says it.
std::string DescribeLine(const EventLine& event);

// The journal's order, (clock, machine, seq), as EventOrderLess.
inline bool LineOrderLess(const EventLine& a, const EventLine& b) {
  if (a.clock != b.clock) return a.clock < b.clock;
  if (a.machine != b.machine) return a.machine < b.machine;
  return a.seq < b.seq;
}

}  // namespace capsule::journal
