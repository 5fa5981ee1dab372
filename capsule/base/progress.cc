#include "capsule/base/progress.h"

#include <cinttypes>

namespace capsule {

namespace {

std::string Mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1 << 20));
  return text;
}

}  // namespace

ProgressReporter::ProgressReporter(Options options) : options_(options) {}

ProgressReporter::~ProgressReporter() {
  // A job that failed is not "done": a terminal's line is only ended.
  if (!phase_.empty() && options_.rewrite) std::fputc('\n', options_.out);
}

std::string ProgressReporter::Line(const std::string& phase, uint64_t bytes, uint64_t total_bytes, uint64_t items,
                                   uint64_t total_items, const std::string& unit, double seconds, bool done) {
  char head[64];
  std::snprintf(head, sizeof head, "%-8s ", phase.c_str());
  std::string line = head + Mib(static_cast<double>(bytes));
  if (total_bytes > 0) line += " of " + Mib(static_cast<double>(total_bytes));
  if (!unit.empty()) {
    line += ", " + std::to_string(items);
    if (total_items > 0) line += " of " + std::to_string(total_items);
    line += " " + unit;
  }
  double rate = seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  line += ", " + Mib(rate) + "/s";
  char tail[64];
  if (done) {
    std::snprintf(tail, sizeof tail, ", done in %.1f s", seconds);
    line += tail;
  } else if (total_bytes > 0 && rate > 0) {
    double left = static_cast<double>(total_bytes > bytes ? total_bytes - bytes : 0) / rate;
    std::snprintf(tail, sizeof tail, ", %.1f s left", left);
    line += tail;
  }
  return line;
}

void ProgressReporter::PrintLocked(bool done) {
  double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string line = Line(phase_, bytes_, total_bytes_, items_, total_items_, unit_, seconds, done);
  if (options_.rewrite) {
    // Spaces clear what a longer line before left behind.
    std::fprintf(options_.out, "\r%-78s%s", line.c_str(), done ? "\n" : "");
  } else {
    std::fprintf(options_.out, "%s\n", line.c_str());
  }
  std::fflush(options_.out);
  last_print_ = Clock::now();
}

void ProgressReporter::Begin(const std::string& phase, uint64_t total_bytes, uint64_t total_items,
                             const std::string& unit) {
  std::lock_guard lock(mu_);
  if (!phase_.empty()) PrintLocked(true);
  phase_ = phase.empty() ? "working" : phase;
  unit_ = unit;
  bytes_ = items_ = 0;
  total_bytes_ = total_bytes;
  total_items_ = total_items;
  start_ = last_print_ = Clock::now();
}

void ProgressReporter::Add(uint64_t bytes, uint64_t items) {
  std::lock_guard lock(mu_);
  if (phase_.empty()) return;
  bytes_ += bytes;
  items_ += items;
  if (Clock::now() - last_print_ >= options_.interval) PrintLocked(false);
}

void ProgressReporter::Set(uint64_t bytes, uint64_t items) {
  std::lock_guard lock(mu_);
  if (phase_.empty()) return;
  bytes_ = bytes;
  items_ = items;
  if (Clock::now() - last_print_ >= options_.interval) PrintLocked(false);
}

void ProgressReporter::Finish() {
  std::lock_guard lock(mu_);
  if (phase_.empty()) return;
  PrintLocked(true);
  phase_.clear();
}

Result<size_t> CountingSource::Read(char* buffer, size_t size) {
  Result<size_t> n = in_->Read(buffer, size);
  if (n.ok() && *n > 0 && progress_ != nullptr) progress_->Add(*n, 0);
  return n;
}

}  // namespace capsule
