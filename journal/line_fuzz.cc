// libFuzzer target: arbitrary bytes as one journal line, read by the fast reader
// (ReadEventLine) and by ParseEventLine. The fast reader must never accept a line the slow
// path refuses, and what it accepts must carry the same fields and id. Before the check the
// line's id is set to what its content digests (when it has an id member), so that the
// mutations reach the canonical-form checks and not only the id. Built and run by
// tests/fuzz.sh journal; seeded with a few real lines when FUZZ_SEED_DIR is set.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "capsule/base/sha256.h"
#include "journal/event_line.h"

namespace {

std::string WithFreshId(std::string line) {
  size_t at = line.rfind(",\"id\":\"");
  if (at == std::string::npos || line.size() < at + 7 + 65 || line[at + 7 + 64] != '"') return line;
  capsule::Sha256 hasher;
  hasher.Update(std::string_view(line).substr(0, at));
  hasher.Update(std::string_view(line).substr(at + 7 + 65));
  line.replace(at + 7, 64, hasher.FinishHex());
  return line;
}

void WriteSeeds(const std::string& dir) {
  using capsule::Json;
  capsule::journal::Event event;
  event.clock = 7;
  event.machine = "m-0000000000000001";
  event.seq = 2;
  event.prev = std::string(64, 'a');
  event.ts = "2026-12-02T16:40:00Z";
  event.type = "tool_call";
  int n = 0;
  for (const Json& data : {Json{{"text", "hello"}}, Json{{"call_id", "c1"}, {"name", "ls"}, {"arguments", {{"path", "/"}}}},
                           Json{{"a", Json::array({1, -2, 0.5, 1e300, nullptr, true})}, {"b\n\"", "\xc3\xa9\x01"}}}) {
    event.data = data;
    event.id = *event.ComputeId();
    std::ofstream(dir + "/seed-" + std::to_string(++n), std::ios::binary) << *event.CanonicalLine();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_SEED_DIR")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line = WithFreshId(std::string(reinterpret_cast<const char*>(data), size));
  capsule::journal::EventLine fast;
  if (!capsule::journal::ReadEventLine(line, &fast)) return 0;
  auto slow = capsule::journal::ParseEventLine(line, "line");
  if (!slow.ok()) std::abort();  // accepted what the slow path refuses
  if (fast.id != slow->id || fast.clock != slow->clock || fast.seq != slow->seq || fast.machine != slow->machine ||
      fast.ts != slow->ts || fast.type != slow->type || std::string(fast.prev) != slow->prev.value_or("")) {
    std::abort();
  }
  auto built = capsule::journal::ToEvent(fast, "line");
  if (!built.ok() || built->data != slow->data) std::abort();
  return 0;
}
