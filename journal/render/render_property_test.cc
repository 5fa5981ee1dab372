// Properties of rendering on random journals, for every provider and many budgets:
//  - the same events give the same bytes, and a switch to another model and back gives the
//    first model the same bytes again;
//  - every call is answered by its result right after it, in the provider's form, and no
//    result is sent without its call (no dangling call, no orphan result);
//  - each provider's ordering and role rules hold (alternation, first turn, ids, names,
//    Anthropic's thinking blocks before any other block of their message, no empty Gemini
//    thought part);
//  - reasoning reaches only the provider and model that made it, and Anthropic's thinking
//    goes back whole per turn or not at all;
//  - the window keeps the newest units that fit and stays within the budget whenever the
//    system instructions, the tool declarations and the newest unit alone fit.
#include <algorithm>
#include <cctype>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "journal/render/conversation.h"
#include "journal/render/render.h"
#include "journal/render/test_util.h"
#include "journal/render/trim.h"

namespace capsule::journal::render {
namespace {

struct Model {
  const char* provider;
  const char* model;
};
const Model kModels[] = {{"anthropic", "claude-a"},      {"anthropic", "claude-b"}, {"gemini", "gemini-3-pro"},
                         {"gemini", "gemini-2.5-flash"}, {"openai", "gpt-x"},       {"openai", "o-y"}};

// A random journal: turns of users and assistants, reasoning from random models (signature
// "sig|provider|model|n", at times two in a row, at times with no text), parallel calls,
// results late, lost or out of order, orphan results, odd and repeated call ids, odd tool
// names, switches, system and side-conversation events.
std::vector<Event> RandomJournal(std::mt19937& rng) {
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const std::vector<std::string> tools = {"read", "write", "web.search", "2fast", "a-very-long-tool-name-" + std::string(60, 'x')};
  std::vector<Event> events;
  auto add = [&](const std::string& type, Json data) {
    if (chance(0.05)) data["conversation"] = "side";
    events.push_back(testing::MakeEvent(type, std::move(data), testing::TimestampAfter(7 * events.size()),
                                        events.empty() ? nullptr : &events.back()));
  };
  auto text = [&](const char* what) {
    std::string out = std::string(what) + " " + std::to_string(pick(1000));
    size_t extra = pick(200);
    for (size_t i = 0; i < extra; ++i) out += static_cast<char>('a' + pick(26));
    if (chance(0.05)) out = " \n";
    return out;
  };
  std::vector<std::string> late;  // call ids whose results come later
  int calls = 0, n = 0;
  const size_t steps = pick(40);
  for (size_t step = 0; step < steps; ++step) {
    double roll = std::uniform_real_distribution<double>(0, 1)(rng);
    const Model& m = kModels[pick(std::size(kModels))];
    if (roll < 0.05) {
      add("system", {{"text", text("system")}});
    } else if (roll < 0.1) {
      add("tool_defined", {{"name", tools[pick(tools.size())]}, {"description", "a tool"},
                           {"parameters", {{"type", "object"}}}});
    } else if (roll < 0.15) {
      add("model_switch", {{"provider", m.provider}, {"model", m.model}});
    } else if (roll < 0.4) {
      add("user_message", {{"text", text("user")}});
    } else if (roll < 0.45) {
      add("tool_result", {{"call_id", "orphan" + std::to_string(pick(5))}, {"content", text("orphan")}, {"is_error", false}});
    } else if (roll < 0.5 && !late.empty()) {
      add("tool_result", {{"call_id", late.back()}, {"content", text("late")}, {"is_error", chance(0.3)}});
      late.pop_back();
    } else {
      // An assistant step.
      size_t pieces = 1 + pick(4);
      std::vector<std::string> ids;
      for (size_t p = 0; p < pieces; ++p) {
        for (int thoughts = chance(0.4) ? 1 + (chance(0.3) ? 1 : 0) : 0; thoughts > 0; --thoughts) {
          const Model& r = kModels[pick(std::size(kModels))];
          Json data = {{"provider", r.provider}, {"model", r.model}, {"text", chance(0.5) ? text("thought") : ""}};
          std::string mark = std::string("sig|") + r.provider + "|" + r.model + "|" + std::to_string(n++);
          if (chance(0.7)) data["signature"] = mark;
          if (chance(0.3)) data["encrypted"] = "enc" + mark;
          add("reasoning", data);
        }
        if (chance(0.4)) {
          add("assistant_message", {{"text", text("assistant")}, {"provider", m.provider}, {"model", m.model}});
        } else {
          std::string id = chance(0.1) && calls > 0 ? "c" + std::to_string(calls - 1)
                           : chance(0.1)            ? "odd id/" + std::to_string(calls) + std::string(pick(50), 'z')
                                                    : "c" + std::to_string(calls);
          ++calls;
          add("tool_call", {{"call_id", id}, {"name", tools[pick(tools.size())]}, {"arguments", {{"k", pick(9)}}}});
          ids.push_back(id);
        }
      }
      std::shuffle(ids.begin(), ids.end(), rng);
      for (const std::string& id : ids) {
        double fate = std::uniform_real_distribution<double>(0, 1)(rng);
        if (fate < 0.15) continue;  // lost: the machine died
        if (fate < 0.3) {
          late.push_back(id);
          continue;
        }
        Json content = chance(0.2) ? Json{{"rows", pick(9)}} : Json(text("result"));
        add("tool_result", {{"call_id", id}, {"content", content}, {"is_error", chance(0.2)}});
      }
    }
  }
  return events;
}

bool IsIdChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }
// Anthropic's tool_use id: ^[a-zA-Z0-9_-]+$.
bool IsAnthropicId(const std::string& id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), IsIdChar);
}
// A function name all three accept: ^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$.
bool IsToolName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
         std::all_of(name.begin(), name.end(), IsIdChar);
}

// The signatures ("sig|provider|model|n" or "encsig|...") in `json`, wherever they are.
void CollectMarks(const Json& json, std::vector<std::string>* marks) {
  if (json.is_string()) {
    const std::string& s = json.get_ref<const std::string&>();
    size_t at = s.find("sig|");
    if (at != std::string::npos) marks->push_back(s.substr(at));
  } else if (json.is_structured()) {
    for (const Json& item : json) CollectMarks(item, marks);
  }
}

std::set<std::string> DeclaredNames(const Json& tools, Provider provider) {
  std::set<std::string> names;
  for (const Json& tool : tools) {
    if (provider == Provider::kOpenAI) names.insert(tool["function"]["name"].get<std::string>());
    if (provider == Provider::kAnthropic) names.insert(tool["name"].get<std::string>());
    if (provider == Provider::kGemini) {
      for (const Json& decl : tool["functionDeclarations"]) names.insert(decl["name"].get<std::string>());
    }
  }
  return names;
}

// Returns the number of calls; checks the OpenAI rules.
size_t CheckOpenAI(const Json& body) {
  const Json& messages = body["messages"];
  std::set<std::string> declared = DeclaredNames(body.value("tools", Json::array()), Provider::kOpenAI);
  std::set<std::string> all_ids;
  size_t calls = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (m["role"] == "system") {
      EXPECT_EQ(i, 0u) << "system only first";
    } else if (m["role"] == "tool") {
      ADD_FAILURE() << "tool message " << i << " without the assistant message of its call right before";
    } else if (m["role"] == "assistant") {
      EXPECT_TRUE(m["content"].is_string() || (m["content"].is_null() && m.contains("tool_calls")));
      if (!m.contains("tool_calls")) continue;
      const Json& tool_calls = m["tool_calls"];
      EXPECT_FALSE(tool_calls.empty());
      for (size_t k = 0; k < tool_calls.size(); ++k) {
        const Json& call = tool_calls[k];
        std::string id = call["id"];
        EXPECT_LE(id.size(), 40u);
        EXPECT_TRUE(all_ids.insert(id).second) << "id reused: " << id;
        EXPECT_EQ(call["type"], "function");
        EXPECT_TRUE(call["function"]["arguments"].is_string());
        if (call["function"]["arguments"].is_string()) {
          EXPECT_TRUE(Json::parse(call["function"]["arguments"].get<std::string>()).is_object());
        }
        EXPECT_TRUE(IsToolName(call["function"]["name"].get<std::string>()));
        EXPECT_EQ(declared.count(call["function"]["name"]), 1u);
        if (i + 1 + k >= messages.size()) {
          ADD_FAILURE() << "call " << id << " has no result";
          return calls;
        }
        const Json& result = messages[i + 1 + k];
        EXPECT_EQ(result["role"], "tool");
        EXPECT_EQ(result["tool_call_id"], id);
        EXPECT_TRUE(result["content"].is_string());
        ++calls;
      }
      i += tool_calls.size();
    } else {
      EXPECT_EQ(m["role"], "user");
      EXPECT_TRUE(m["content"].is_string());
    }
  }
  return calls;
}

size_t CheckAnthropic(const Json& body) {
  const Json& messages = body["messages"];
  std::set<std::string> declared = DeclaredNames(body.value("tools", Json::array()), Provider::kAnthropic);
  EXPECT_TRUE(body["max_tokens"].is_number_unsigned());
  EXPECT_FALSE(messages.empty());
  EXPECT_EQ(messages[0]["role"], "user");
  std::set<std::string> all_ids;
  size_t calls = 0;
  std::vector<std::string> open;  // tool_use ids of the previous assistant message
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    EXPECT_EQ(m["role"], i % 2 == 0 ? "user" : "assistant") << "roles alternate, user first";
    EXPECT_FALSE(m["content"].empty());
    std::vector<std::string> answered, uses;
    bool seen_other = false, seen_output = false;
    for (const Json& block : m["content"]) {
      std::string type = block["type"];
      if (type == "thinking" || type == "redacted_thinking") {
        EXPECT_FALSE(seen_output) << "message " << i << ": a thinking block after text or tool_use";
      } else {
        seen_output = true;
      }
      if (type == "text") {
        EXPECT_NE(block["text"].get<std::string>().find_first_not_of(" \t\r\n"), std::string::npos) << "blank text";
        seen_other = true;
      } else if (type == "tool_result") {
        EXPECT_EQ(m["role"], "user");
        EXPECT_FALSE(seen_other) << "tool_result blocks come first";
        answered.push_back(block["tool_use_id"]);
      } else if (type == "tool_use") {
        EXPECT_EQ(m["role"], "assistant");
        std::string id = block["id"];
        EXPECT_TRUE(IsAnthropicId(id)) << id;
        EXPECT_TRUE(all_ids.insert(id).second) << "id reused: " << id;
        EXPECT_TRUE(IsToolName(block["name"].get<std::string>()));
        EXPECT_EQ(declared.count(block["name"]), 1u);
        EXPECT_TRUE(block["input"].is_object());
        uses.push_back(id);
        ++calls;
      } else if (type == "thinking") {
        EXPECT_EQ(m["role"], "assistant");
        EXPECT_FALSE(block["signature"].get<std::string>().empty());
      } else if (type == "redacted_thinking") {
        EXPECT_EQ(m["role"], "assistant");
        EXPECT_FALSE(block["data"].get<std::string>().empty());
      } else {
        ADD_FAILURE() << "unknown block " << type;
      }
    }
    if (m["role"] == "user") {
      EXPECT_EQ(answered, open) << "message " << i << " answers exactly the calls before it";
      open.clear();
    } else {
      open = uses;
    }
  }
  EXPECT_TRUE(open.empty()) << "calls with no result at the end";
  if (!messages.empty() && messages.back()["role"] == "assistant") {
    const Json& last = messages.back()["content"].back();
    if (last["type"] == "text") {
      std::string text = last["text"];
      EXPECT_TRUE(text.find_last_not_of(" \t\r\n") + 1 == text.size()) << "prefill ends in white space";
    }
  }
  return calls;
}

// Anthropic's thinking goes back whole per turn or not at all: for each turn (a user message
// and all up to the next), the thinking blocks sent are none, or every reasoning of the
// target's own model in that turn, in journal order. Counts the turns sent whole with more
// than one block, and those whose own sendable reasoning was withheld.
void CheckAnthropicThinking(const std::vector<Event>& events, const RenderTarget& target, const Json& body,
                            int* whole, int* withheld) {
  std::map<uint64_t, std::vector<std::string>> own;  // turn -> its own reasoning, in order
  std::map<std::string, uint64_t> turn_of;
  uint64_t turn = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& event = events[i];
    if (event.Conversation() != target.conversation) continue;
    if (event.type == "user_message" &&
        event.data["text"].get<std::string>().find_first_not_of(" \t\r\n") != std::string::npos) {
      ++turn;
    }
    if (event.type != "reasoning" || event.data["provider"] != ProviderName(target.provider) ||
        event.data["model"] != target.model) {
      continue;
    }
    // What the request shows of it: the signature, else the payload's mark; else nothing can.
    std::string mark = event.data.value("signature", event.data.value("encrypted", "unsendable#" + std::to_string(i)));
    if (mark.rfind("enc", 0) == 0) mark = mark.substr(3);
    own[turn].push_back(mark);
    turn_of[mark] = turn;
  }
  std::map<uint64_t, std::vector<std::string>> sent;
  for (const Json& message : body["messages"]) {
    for (const Json& block : message["content"]) {
      std::string mark = block["type"] == "thinking"            ? block["signature"].get<std::string>()
                         : block["type"] == "redacted_thinking" ? block["data"].get<std::string>().substr(3)
                                                                : std::string();
      if (mark.empty()) continue;
      ASSERT_EQ(turn_of.count(mark), 1u) << mark;
      sent[turn_of[mark]].push_back(mark);
    }
  }
  for (const auto& [t, marks] : sent) EXPECT_EQ(marks, own[t]) << "turn " << t << " sent in part";
  for (const auto& [t, marks] : own) {
    bool sendable = std::none_of(marks.begin(), marks.end(), [](const std::string& m) { return m.rfind("unsendable#", 0) == 0; });
    if (sent.count(t) > 0 && marks.size() > 1) ++*whole;
    if (sent.count(t) == 0 && sendable) ++*withheld;
  }
}

size_t CheckGemini(const Json& body, bool checks_signatures) {
  const Json& contents = body["contents"];
  std::set<std::string> declared = DeclaredNames(body.value("tools", Json::array()), Provider::kGemini);
  EXPECT_FALSE(body.contains("model"));
  EXPECT_FALSE(contents.empty());
  size_t calls = 0;
  std::vector<std::string> open;
  EXPECT_EQ(contents.back()["role"], "user") << "a request never ends with a model turn";
  bool previous_responses = false;
  for (size_t i = 0; i < contents.size(); ++i) {
    const Json& c = contents[i];
    // Roles alternate, the user first; the one exception is a user's text right after a
    // content of function responses, which never share a content with text.
    if (i == 0) {
      EXPECT_EQ(c["role"], "user");
    } else if (c["role"] == contents[i - 1]["role"]) {
      EXPECT_EQ(c["role"], "user");
      EXPECT_TRUE(previous_responses) << "content " << i << " repeats a role";
    }
    EXPECT_FALSE(c["parts"].empty());
    size_t response_parts = 0;
    for (const Json& part : c["parts"]) response_parts += part.contains("functionResponse") ? 1 : 0;
    EXPECT_TRUE(response_parts == 0 || response_parts == c["parts"].size()) << "responses mixed with text";
    previous_responses = response_parts > 0;
    std::vector<std::string> responses, names;
    bool seen_other = false, first_call = true;
    for (const Json& part : c["parts"]) {
      if (part.contains("functionResponse")) {
        EXPECT_EQ(c["role"], "user");
        EXPECT_FALSE(seen_other) << "responses come first";
        EXPECT_TRUE(part["functionResponse"]["response"].is_object());
        responses.push_back(part["functionResponse"]["name"]);
      } else if (part.contains("functionCall")) {
        EXPECT_EQ(c["role"], "model");
        std::string name = part["functionCall"]["name"];
        EXPECT_TRUE(IsToolName(name));
        EXPECT_EQ(declared.count(name), 1u);
        EXPECT_TRUE(part["functionCall"]["args"].is_object());
        if (first_call && checks_signatures) {
          EXPECT_TRUE(part.contains("thoughtSignature"));
        }
        first_call = false;
        names.push_back(name);
        ++calls;
      } else {
        EXPECT_TRUE(part["text"].is_string());
        if (part.value("thought", false)) {
          EXPECT_EQ(c["role"], "model");
          EXPECT_FALSE(part["text"].get<std::string>().empty()) << "an empty thought part";
        }
        seen_other = true;
      }
    }
    if (c["role"] == "user") {
      EXPECT_EQ(responses, open) << "content " << i << " answers the calls before it, same order and count";
      open.clear();
    } else {
      open = names;
    }
  }
  EXPECT_TRUE(open.empty());
  return calls;
}

TEST(RenderPropertyTest, RandomJournals) {
  ByteTokenEstimator estimator;
  int trimmed = 0, refused = 0, rendered = 0, whole_turns = 0, withheld_turns = 0;
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    std::mt19937 rng(seed);
    std::vector<Event> events = RandomJournal(rng);
    for (const Model& m : kModels) {
      for (int b = 0; b < 4; ++b) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " target " + m.provider + "/" + m.model + " budget #" +
                     std::to_string(b));
        RenderTarget target;
        target.provider = *ParseProvider(m.provider);
        target.model = m.model;
        if (b > 0) target.context_tokens = std::uniform_int_distribution<uint64_t>(20, 2500)(rng);
        Conversation conversation = BuildConversation(events, target, estimator);
        Result<Json> body = RenderRequest(events, target);
        Result<Json> again = RenderRequest(std::vector<Event>(events), target);
        ASSERT_EQ(body.ok(), again.ok());
        if (conversation.units.empty()) {
          EXPECT_EQ(body.status().code(), Code::kInvalidArgument);
          continue;
        }

        // The window: the newest units that fit, within the budget when the newest can fit.
        const Unit& newest = conversation.units.back();
        const uint64_t opening_cost = estimator.PerMessage() + estimator.Text(kOpeningText);
        const uint64_t trail_cost =
            newest.from_user || newest.call ? 0 : estimator.PerMessage() + estimator.Text(kContinueText);
        bool newest_fits = !target.context_tokens || conversation.fixed_tokens + trail_cost + newest.tokens +
                                                             (newest.from_user ? 0 : opening_cost) <=
                                                         *target.context_tokens;
        Result<Window> window = ChooseWindow(conversation, target.context_tokens, estimator);
        ASSERT_EQ(window.ok(), newest_fits) << (window.ok() ? "" : window.status().message());
        ASSERT_EQ(body.ok(), newest_fits);
        if (!body.ok()) {
          EXPECT_EQ(body.status().code(), Code::kFailedPrecondition);
          ++refused;
          continue;
        }
        ++rendered;
        EXPECT_EQ(*CanonicalJson(*body), *CanonicalJson(*again)) << "not deterministic";
        uint64_t kept = 0;
        size_t kept_calls = 0;
        for (size_t i = window->first; i < conversation.units.size(); ++i) {
          kept += conversation.units[i].tokens;
          kept_calls += conversation.units[i].call ? 1 : 0;
        }
        uint64_t lead = window->lead.empty() ? 0 : estimator.PerMessage() + estimator.Text(window->lead);
        EXPECT_EQ(window->trail.empty(), trail_cost == 0);
        EXPECT_EQ(window->tokens, conversation.fixed_tokens + trail_cost + kept + lead);
        if (target.context_tokens) {
          EXPECT_LE(window->tokens, *target.context_tokens);
          if (window->first > 0) {
            ++trimmed;
            // The digest of exactly what was dropped, unless not even it fit.
            if (window->lead != kOpeningText && !window->lead.empty()) {
              EXPECT_EQ(window->lead, DigestText(conversation, window->first));
            }
            // Keeping one more unit, with the smaller digest, would not have fit.
            size_t more = window->first - 1;
            std::string digest = more > 0 ? DigestText(conversation, more) : std::string();
            uint64_t with_more = conversation.fixed_tokens + trail_cost + kept + conversation.units[more].tokens +
                                 (digest.empty() ? (conversation.units[more].from_user ? 0 : opening_cost)
                                                 : estimator.PerMessage() + estimator.Text(digest));
            EXPECT_GT(with_more, *target.context_tokens) << "dropped a unit that fit";
          }
        } else {
          EXPECT_EQ(window->first, 0u);
        }

        // The provider's rules; every kept call is sent with its result.
        size_t calls = 0;
        switch (target.provider) {
          case Provider::kOpenAI: calls = CheckOpenAI(*body); break;
          case Provider::kAnthropic:
            calls = CheckAnthropic(*body);
            CheckAnthropicThinking(events, target, *body, &whole_turns, &withheld_turns);
            break;
          case Provider::kGemini: calls = CheckGemini(*body, target.model == std::string("gemini-3-pro")); break;
        }
        EXPECT_EQ(calls, kept_calls);

        // Reasoning only for its own provider and model, never in Chat Completions.
        std::vector<std::string> marks;
        CollectMarks(*body, &marks);
        std::string own = std::string("sig|") + m.provider + "|" + m.model + "|";
        for (const std::string& mark : marks) {
          EXPECT_EQ(mark.rfind(own, 0), 0u) << mark;
          EXPECT_NE(target.provider, Provider::kOpenAI) << mark;
        }
      }
    }
    if (::testing::Test::HasFatalFailure()) return;

    // Switching to another model and back changes nothing for the first one.
    for (const Model& a : kModels) {
      RenderTarget target;
      target.provider = *ParseProvider(a.provider);
      target.model = a.model;
      std::vector<Event> switched = events;
      for (const Model* to : {&kModels[(&a - kModels + 1) % std::size(kModels)], &a}) {
        switched.push_back(testing::MakeEvent("model_switch", {{"provider", to->provider}, {"model", to->model}},
                                              testing::TimestampAfter(7 * switched.size()),
                                              switched.empty() ? nullptr : &switched.back()));
      }
      Result<Json> before = RenderRequest(events, target);
      Result<Json> after = RenderRequest(switched, target);
      ASSERT_EQ(before.ok(), after.ok());
      if (before.ok()) {
        EXPECT_EQ(*CanonicalJson(*before), *CanonicalJson(*after)) << "seed " << seed << " " << a.model;
      }
    }
  }
  // The random journals reach every case.
  EXPECT_GT(trimmed, 100);
  EXPECT_GT(refused, 10);
  EXPECT_GT(rendered, 1000);
  EXPECT_GT(whole_turns, 100);
  EXPECT_GT(withheld_turns, 200);
}

}  // namespace
}  // namespace capsule::journal::render
