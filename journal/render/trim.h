// Fitting a conversation into a context window (rule 3 of render.h).
//
// The window is a contiguous run of the newest units: trimming drops the oldest units until
// the estimate of the request fits the budget. A unit is a user message, an assistant text
// or a tool call with its result, so a call is never split from its result. The system
// instructions and the tool declarations are always kept.
//
// When units are dropped, a digest opens the conversation as a user message:
//
//   [Earlier conversation omitted to fit the context window: 3 user messages, 2 assistant
//   messages and 4 tool calls (tools: grep, ls), from 2026-12-02T16:40:00Z to
//   2026-12-02T16:52:10Z.]
//
// (one line; counts of what was dropped, the distinct tools called in name order, at most 8
// then "and N more", and the first and last timestamps of the dropped events). The digest is
// counted in the budget; only when not even the newest unit fits beside it is it left out.
// When the window opens with an assistant's output and there is no digest, kOpeningText
// opens the conversation instead, since Anthropic and Gemini require the user to speak first.
// When it ends with an assistant's text, Gemini (which refuses a request that ends with a
// model turn) gets kContinueText as a last user turn; the window counts it for every
// provider, so that every provider keeps the same events.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "capsule/base/status.h"
#include "journal/render/conversation.h"
#include "journal/render/tokens.h"

namespace capsule::journal::render {

inline constexpr char kOpeningText[] = "[The conversation continues from an earlier turn.]";
inline constexpr char kContinueText[] = "[Continue from where the conversation left off.]";

struct Window {
  size_t first = 0;        // the first unit kept; the rest up to the end are kept too
  std::string lead;        // the digest, kOpeningText, or empty: a user message before the units
  std::string trail;       // kContinueText when the units end with an assistant's text, else empty
  uint64_t tokens = 0;     // the estimate of the whole request
};

// The window of `conversation` within `budget` (none: everything). FailedPrecondition when
// the system instructions, tool declarations and newest unit alone exceed the budget.
Result<Window> ChooseWindow(const Conversation& conversation, std::optional<uint64_t> budget,
                            const TokenEstimator& estimator);

// The digest of units [0, end) (see above).
std::string DigestText(const Conversation& conversation, size_t end);

}  // namespace capsule::journal::render
