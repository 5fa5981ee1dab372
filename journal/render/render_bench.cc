// Rendering benchmark: a journal of N events (default 100,000: users, Claude's signed
// thinking, texts, parallel calls and their results, a model switch every 1,000 events)
// rendered for each provider into a 128k-token window, against reading the same journal
// file alone (Journal::Read: parse and check every line). Both are measured in the same run,
// best of R rounds each, with a warm page cache; the ratio is render time / read time.
//
//   bazel run -c opt //journal/render:render_bench -- [--events N] [--rounds R] [--dir D]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/render/render.h"
#include "journal/render/test_util.h"
#include "journal/test_util.h"

namespace capsule::journal::render {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void Check(const Status& status, const char* what) {
  if (!status.ok()) {
    std::cerr << what << ": " << status.message() << "\n";
    std::exit(1);
  }
}

// The journal's text: chained events of one machine.
std::string Generate(uint64_t count) {
  std::mt19937 rng(42);
  auto words = [&](size_t n) {
    static const char* kWords[] = {"oven", "flour", "order", "delivery", "the", "a", "check", "stock", "recipe", "rye"};
    std::string text;
    for (size_t i = 0; i < n; ++i) text += std::string(i ? " " : "") + kWords[rng() % 10];
    return text;
  };
  const char* models[][2] = {{"anthropic", "claude-sonnet-4-5"}, {"openai", "gpt-4.1"}, {"gemini", "gemini-2.5-pro"}};
  std::string text;
  Event previous;
  bool first = true;
  uint64_t made = 0, call = 0;
  auto add = [&](const std::string& type, Json data) {
    Event event = testing::MakeEvent(type, std::move(data), testing::TimestampAfter(made), first ? nullptr : &previous);
    text += *event.CanonicalLine() + "\n";
    previous = std::move(event);
    first = false;
    ++made;
  };
  add("system", {{"text", "You run a bakery's back office. " + words(40)}});
  add("tool_defined", {{"name", "stock"}, {"description", "Stock of an item"},
                       {"parameters", {{"type", "object"}, {"properties", {{"item", {{"type", "string"}}}}}}}});
  while (made < count) {
    const auto& m = models[(made / 1000) % 3];
    if (made % 1000 < 2) add("model_switch", {{"provider", m[0]}, {"model", m[1]}});
    add("user_message", {{"text", words(20 + rng() % 60)}});
    add("reasoning", {{"provider", m[0]}, {"model", m[1]}, {"text", words(30)}, {"signature", std::string(120, 'S')}});
    add("assistant_message", {{"text", words(20 + rng() % 80)}, {"provider", m[0]}, {"model", m[1]}});
    int calls = 1 + rng() % 3;
    for (int c = 0; c < calls; ++c) {
      add("tool_call", {{"call_id", "call_" + std::to_string(call + c)}, {"name", "stock"}, {"arguments", {{"item", words(1)}}}});
    }
    for (int c = 0; c < calls; ++c) {
      add("tool_result", {{"call_id", "call_" + std::to_string(call + c)}, {"content", words(10 + rng() % 100)}, {"is_error", false}});
    }
    call += calls;
  }
  return text;
}

int Main(int argc, char** argv) {
  uint64_t events = 100000;
  int rounds = 3;
  std::string root;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--events") events = std::stoull(argv[i + 1]);
    if (flag == "--rounds") rounds = std::stoi(argv[i + 1]);
    if (flag == "--dir") root = argv[i + 1];
  }
  if (root.empty()) root = journal::testing::MakeTempDir("render-bench");
  std::string dir = root + "/cap";
  Check(journal::testing::MakeTestCapsule(dir, journal::testing::MachineName(1)), "create");
  auto start = Clock::now();
  std::string text = Generate(events);
  std::string path = JoinPath(dir, kJournalPath);
  Check(WriteFileAtomic(path, text), "write");
  std::printf("capsule: %s\njournal: %llu+ events, %.1f MB (generated in %.1f s)\n", dir.c_str(),
              static_cast<unsigned long long>(events), text.size() / 1e6, Seconds(start));

  double read_best = 1e9;
  std::vector<Event> journal;
  for (int r = 0; r < rounds; ++r) {
    start = Clock::now();
    Result<std::vector<Event>> read = Journal::Read(dir);
    double took = Seconds(start);
    Check(read.status(), "read");
    read_best = std::min(read_best, took);
    journal = std::move(*read);
  }
  std::printf("read (parse + check every line):       %8.3f s   %8.0f events/s\n", read_best, journal.size() / read_best);

  constexpr uint64_t kWindow = 128 * 1024;
  for (Provider provider : {Provider::kOpenAI, Provider::kAnthropic, Provider::kGemini}) {
    for (bool windowed : {true, false}) {
      RenderTarget target;
      target.provider = provider;
      target.model = provider == Provider::kAnthropic ? "claude-sonnet-4-5"
                     : provider == Provider::kOpenAI  ? "gpt-4.1"
                                                      : "gemini-2.5-pro";
      if (windowed) target.context_tokens = kWindow;
      double best = 1e9;
      size_t bytes = 0, messages = 0;
      for (int r = 0; r < rounds; ++r) {
        start = Clock::now();
        Result<Json> body = RenderRequest(journal, target);
        Result<std::string> out = body.ok() ? CanonicalJson(*body, "request") : Result<std::string>(body.status());
        double took = Seconds(start);
        Check(out.status(), "render");
        best = std::min(best, took);
        bytes = out->size();
        const Json& list = provider == Provider::kGemini ? (*body)["contents"] : (*body)["messages"];
        messages = list.size();
      }
      std::printf("render %-9s %-14s %8.3f s   %6zu messages, %8.1f KB   render/read = %.2f\n",
                  ProviderName(provider).c_str(), windowed ? "window 128k" : "whole journal", best, messages, bytes / 1e3,
                  best / read_best);
    }
  }
  return 0;
}

}  // namespace
}  // namespace capsule::journal::render

int main(int argc, char** argv) { return capsule::journal::render::Main(argc, argv); }
