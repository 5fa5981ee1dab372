// The agent's scheduled jobs, under schedule/ (man/capsule.5, SCHEDULES):
//
//   schedule/<place>/<id>.json   a job; place is waiting, firing or ending
//   schedule/day.json            [day, sent]: the day ("YYYY-MM-DD") and how many jobs were sent on it
//   schedule/state.json          {"paused": true|false}; absent means running
//
// A job is a JSON object with at least "id" (its file's <id>), "prompt" (a non-empty string:
// what the agent is asked to do) and "at" (when it fires next, UTC, "YYYY-MM-DDTHH:MM:SSZ");
// optional "every" (a positive whole number of seconds: it repeats) and "conversation" (a
// non-empty string); other fields are kept as written. Every file is checked when written
// (capsule schedule, a mount) and by capsule verify.
//
// A switch carries the schedules only while they are paused, in full; a receiver replaces them
// whole (capsule-move(5)).
//
// Thread-safety: pure functions and reads; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule {

inline constexpr char kScheduleDayPath[] = "schedule/day.json";
inline constexpr char kScheduleStatePath[] = "schedule/state.json";

// True for any path under schedule/.
bool IsSchedulePath(std::string_view path);

// The check of a name under schedule/ alone (a file's place in the layout), for a mount to
// refuse a file that no content could make valid at its create, not at its close:
// schedule/day.json, schedule/state.json or schedule/<waiting|firing|ending>/<id>.json.
// InvalidArgument naming the path otherwise.
Status CheckScheduleName(const std::string& path);

// The check of one file under schedule/: its place in the layout and its content.
// InvalidArgument naming the path and the field otherwise.
Status CheckScheduleFile(const std::string& path, std::string_view text);

struct ScheduleSummary {
  size_t jobs = 0;
  bool has_day = false;
  bool paused = false;
  // Nothing to run: no job and no day.json.
  bool empty() const { return jobs == 0 && !has_day; }
};
Result<ScheduleSummary> LoadScheduleSummary(const std::string& capsule_dir);

// Ok when the schedules of the capsule may travel in a switch: paused, or none at all;
// FailedPrecondition saying to pause them otherwise.
Status CheckSchedulesMayTravel(const std::string& capsule_dir);

// The canonical text of schedule/state.json.
std::string ScheduleStateText(bool paused);

}  // namespace capsule
