// Rendering the journal as the request body of a model provider's API: OpenAI Chat
// Completions, Anthropic Messages or Gemini generateContent.
//
// The journal records what happened (a user message, a tool call, a result), not how one
// vendor spells it, so a conversation can move from one model to another and back. Rendering
// is a pure function of the events and the target: the same events and target give the same
// bytes, and model_switch events themselves render as nothing, so switching A -> B -> A gives
// A the very request it had before the switches.
//
// The rules (also in man/capsule.1, RENDERING):
//  1. Private reasoning goes back only to the provider AND model that produced it, with its
//     signature (Anthropic thinking, Gemini thoughtSignature) or encrypted payload (Anthropic
//     redacted_thinking). Reasoning from anyone else is dropped. OpenAI Chat Completions has no
//     field for reasoning (encrypted reasoning belongs to the Responses API), so it gets none.
//     Reasoning with neither signature nor payload is never replayed: no provider accepts it;
//     nor is reasoning with no output after it in its step (the assistant events between two
//     user messages, tool results or model switches), since it has no part to go with.
//     Anthropic gets a turn's thinking whole or not at all. A turn is a user message and all
//     the assistant did up to the next one: a tool-use loop is one turn. The API requires the
//     thinking of the step that made a call, and of the step that continues after its result,
//     to come back complete and unmodified, and refuses thinking blocks that differ from what
//     the model produced. So a turn's thinking blocks are all sent, unmodified and in journal
//     order, unless some of the target model's own reasoning in that turn cannot be (neither
//     signature nor payload, no output after it) or the context window cuts the turn (drops
//     some of its assistant output): then none are. Rendering does not know whether the caller
//     enables thinking; with thinking enabled, the API may refuse, or answer without
//     thinking, a request whose last turn lost its thinking this way. Models that check what
//     precedes a thinking block likewise refuse or drop (as the request chooses) the blocks
//     after a digest or after a turn sent without its thinking.
//  2. A tool call with no result (the machine died mid-call) gets an error result saying the
//     result was lost (kLostResultText). A result whose call is not in the conversation is
//     not sent as a tool result: it becomes a user note (OrphanNoteText) where it happened.
//  3. With a context budget, the newest units that fit are kept (a unit is a user message, an
//     assistant text, or a tool call together with its result: a call is never split from its
//     result), the system instructions and tool declarations are always kept, and a digest of
//     what was dropped opens the conversation (see trim.h for its form).
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "journal/event.h"
#include "journal/render/tokens.h"

namespace capsule::journal::render {

enum class Provider { kOpenAI, kAnthropic, kGemini };

// "openai", "anthropic", "gemini": the names the journal's provider fields and --provider use.
std::string ProviderName(Provider provider);
Result<Provider> ParseProvider(std::string_view name);

// Anthropic requires max_tokens; this is the value when the caller gives none.
inline constexpr uint64_t kDefaultAnthropicMaxTokens = 4096;

// A skill as the system text lists it: its body is the agent's to load (capsule(5), HARNESS).
struct SkillSummary {
  std::string name;
  std::string description;
};

// The line that opens the list of skills in the system text.
inline constexpr char kSkillsHeading[] =
    "Skills (each is a folder harness/skills/<name>/ whose SKILL.md tells how; load one when it applies):";

struct RenderTarget {
  Provider provider = Provider::kOpenAI;
  std::string model;                       // decides, with provider, which reasoning is kept
  std::string conversation = "main";       // events whose data.conversation is this
  std::optional<uint64_t> context_tokens;  // the input budget, as the estimator counts
  uint64_t max_tokens = kDefaultAnthropicMaxTokens;  // Anthropic's max_tokens
  // The agent's standing instructions: they open the system text.
  std::string instructions;
  // The agent's skills, listed by name and description after the instructions.
  std::vector<SkillSummary> skills;
  // The thread's narrowing: only these tools (by their journal names) are declared; nullopt
  // declares every tool the conversation defines or calls.
  std::optional<std::set<std::string>> tools;
  // The bytes of the attachments the conversation's events name, by SHA-256; an attachment
  // whose bytes are not here is left out.
  std::map<std::string, std::string> attachments;
};

// What the caller asked for; the journal fills in the rest (see ResolveTarget).
struct TargetRequest {
  std::optional<std::string> provider;
  std::optional<std::string> model;
  std::string conversation = "main";
  std::optional<uint64_t> context_tokens;
  std::optional<uint64_t> max_tokens;
};

// The target for `request` against the conversation's events:
//  - neither provider nor model given: the latest model_switch or assistant_message of the
//    conversation names both;
//  - a model alone: the journal's current provider, that model;
//  - a provider alone: if it is the current provider, the current model; otherwise the model
//    of the latest model_switch or assistant_message of that provider; if the conversation
//    never names one, InvalidArgument asking for --model (a request needs a model, and the
//    model decides which reasoning is kept).
Result<RenderTarget> ResolveTarget(const std::vector<Event>& events, const TargetRequest& request);

// What ResolveTarget reads of a journal, gathered one event at a time, so that a journal of
// any length is resolved in a little memory: for each conversation, the provider the latest
// event that names a model names, and each provider's latest model.
class ModelChoices {
 public:
  // Whether events of `type` name a provider and model (model_switch, assistant_message):
  // the only ones Add keeps anything of.
  static bool NamesModel(std::string_view type);

  // The next event in journal order.
  void Add(const Event& event);

  // The conversations some event names a model in.
  std::vector<std::string> Conversations() const;

  // As ResolveTarget of the events added so far.
  Result<RenderTarget> Resolve(const TargetRequest& request) const;

 private:
  struct Named {
    std::string current_provider;                       // of the latest event naming a model
    std::map<std::string, std::string> latest_model;  // by provider: its latest model named
  };
  std::map<std::string, Named> conversations_;
};

// The request body for `target` from the journal's events (in journal order). InvalidArgument
// when the conversation has nothing to send; FailedPrecondition when context_tokens cannot
// hold the system instructions, the tool declarations and the newest unit.
Result<Json> RenderRequest(const std::vector<Event>& events, const RenderTarget& target,
                           const TokenEstimator& estimator);
Result<Json> RenderRequest(const std::vector<Event>& events, const RenderTarget& target);

}  // namespace capsule::journal::render
