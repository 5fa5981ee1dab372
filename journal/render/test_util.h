// For the rendering tests, the golden updater and the benchmark: journals written by hand as
// scripts, and the golden cases.
//
// A script is one JSON object a line, {"type", "data", "ts"?}; blank lines and lines that
// start with '#' are comments. Each line becomes an event of machine "m1" with seq and clock
// its position, chained, with ts 2026-12-02T16:40:00Z plus one minute a line unless given.
//
// Thread-safety: plain functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "capsule/base/status.h"
#include "journal/event.h"
#include "journal/render/render.h"

namespace capsule::journal::render::testing {

Result<std::vector<Event>> EventsFromScript(const std::string& text, const std::string& name);

// The event at `position` (1-based) of a generated journal: chains `seq`, `clock` and `prev`
// after `previous` (null for the first) and computes the id.
Event MakeEvent(const std::string& type, Json data, const std::string& ts, const Event* previous);

// "2026-12-02T16:40:00Z" plus `seconds`.
std::string TimestampAfter(uint64_t seconds);

// One golden: a script of testdata/, rendered for a target, compared with testdata/NAME.json.
struct GoldenCase {
  std::string name;    // testdata/<name>.json
  std::string script;  // testdata/<script>.jsonl
  TargetRequest request;
};
const std::vector<GoldenCase>& GoldenCases();

// The golden text of a case from the script's text: the request indented by 2, newline-ended.
Result<std::string> RenderGolden(const GoldenCase& golden, const std::string& script_text);

}  // namespace capsule::journal::render::testing
