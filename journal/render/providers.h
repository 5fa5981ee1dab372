// The three providers' request bodies, built from a conversation and its window. Internal to
// journal/render; RenderRequest (render.h) is the entry point.
//
// Each renderer walks the same sequence of turns (Turns): the window's lead, then each user
// unit, each assistant step, and right after a step the results of its calls, in call order.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "journal/render/conversation.h"
#include "journal/render/render.h"
#include "journal/render/trim.h"

namespace capsule::journal::render {

struct Turn {
  enum class Kind { kUser, kAssistant, kResults };
  Kind kind = Kind::kUser;
  std::string text;                 // kUser: the text
  std::vector<const Unit*> units;   // kAssistant: the step's units; kResults: those with calls;
                                    // kUser: the user's unit (none for a digest)
};

std::vector<Turn> Turns(const Conversation& conversation, const Window& window);

// OpenAI Chat Completions: {model, messages, tools?}.
Json RenderOpenAI(const Conversation& conversation, const Window& window, const RenderTarget& target);
// Anthropic Messages: {model, max_tokens, system?, messages, tools?}.
Json RenderAnthropic(const Conversation& conversation, const Window& window, const RenderTarget& target);
// Gemini generateContent: {contents, systemInstruction?, tools?} (the model is in the URL).
Json RenderGemini(const Conversation& conversation, const Window& window, const RenderTarget& target);

}  // namespace capsule::journal::render
