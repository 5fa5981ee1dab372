// The provider-neutral form of one conversation that every provider's renderer works from:
// the system instructions, the tool declarations, and the conversation as a list of units,
// each call already paired with its result. Building it applies rules 1 and 2 of render.h
// (which reasoning is kept, Anthropic's thinking whole per turn, lost results, orphan
// results; only a turn cut by the window is left to the renderer) and maps ids and tool names
// to the forms every provider accepts, so trimming (trim.h) and the renderers never see a
// journal.
//
// Ids: a journal call_id matching [A-Za-z0-9_-]{1,40} is used as is (Anthropic requires that
// alphabet, OpenAI at most 40 characters); any other becomes "call_" + the first 24 hex
// digits of its SHA-256. A call_id used by two calls gives the later ones "_2", "_3", ... so
// every id in a request is distinct. Gemini requests carry no ids: calls and responses pair
// by order.
// Tool names: a name matching [A-Za-z_][A-Za-z0-9_-]{0,63} (valid for all three) is used as
// is; any other has each other character replaced by '_', a '_' prepended if it starts with
// neither letter nor '_', and "_" + 8 hex digits of its SHA-256 appended, cut to 64.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "journal/event.h"
#include "journal/render/render.h"
#include "journal/render/tokens.h"

namespace capsule::journal::render {

// The result text a call without a result gets (rule 2).
inline constexpr char kLostResultText[] =
    "The result of this tool call was lost: the call was interrupted before its result was recorded.";

struct ToolDeclaration {
  std::string name;         // provider-safe (see above)
  std::string description;
  Json parameters;          // JSON Schema of the arguments object
};

// Reasoning kept for the target (rule 1).
struct KeptReasoning {
  std::string text;
  std::string signature;  // Anthropic thinking signature, Gemini thoughtSignature
  std::string encrypted;  // Anthropic redacted_thinking data
};

// An image or document a user message or tool result carries, inline (capsule/format/attachments.h).
struct AttachmentPart {
  std::string media_type;  // image/png, image/jpeg, image/webp, application/pdf, text/plain
  std::string name;        // as the event names it; may be empty
  std::string sha256;
  std::string base64;      // the bytes, base64
  std::string text;        // text/plain: the text itself
};

struct ToolCall {
  std::string id;       // provider-safe, unique in the conversation
  std::string name;     // provider-safe
  Json arguments;       // a JSON object
  Json result;          // the result's content: a string, array or object
  bool is_error = false;
  bool result_lost = false;  // no result in the journal: `result` is kLostResultText
  std::vector<AttachmentPart> result_attachments;  // images and documents the result carries
};

// One unit of the conversation: what trimming keeps or drops whole.
struct Unit {
  bool from_user = false;  // a user message or an orphan note; else an assistant's output
  // Assistant units of one step (consecutive assistant-side events) share a step number and
  // form one assistant message; the step's results follow it.
  uint64_t step = 0;
  // Each user message opens a turn, which also holds every step, result and orphan note up to
  // the next user message (a tool-use loop is one turn). For Anthropic, a turn's thinking is
  // sent whole or not at all (render.h, rule 1).
  uint64_t turn = 0;
  std::vector<KeptReasoning> reasoning;  // reasoning that preceded this output, kept
  std::string text;                      // user text, note, or assistant text
  std::vector<AttachmentPart> attachments;  // a user message's images and documents
  std::optional<ToolCall> call;          // an assistant's call, with its result

  // For the digest of dropped units.
  uint32_t user_messages = 0, assistant_messages = 0, calls = 0;
  std::string tool;                 // the call's tool as the journal names it
  std::string first_ts, last_ts;    // the span of its events
  uint64_t tokens = 0;              // the estimator's cost of the unit
};

struct Conversation {
  std::string system;                   // every system event's text, joined by blank lines
  std::vector<ToolDeclaration> tools;   // defined, then called but never defined
  std::vector<Unit> units;
  uint64_t fixed_tokens = 0;            // system instructions and tool declarations
};

// The text an orphan result (no call in the conversation) is sent as, in a user message.
std::string OrphanNoteText(const std::string& call_id, const Json& content);

// The content of a result as one string: a string as is, anything else as compact JSON.
std::string ContentText(const Json& content);

// Builds the conversation `target.conversation` of `events` for `target`.
Conversation BuildConversation(const std::vector<Event>& events, const RenderTarget& target,
                               const TokenEstimator& estimator);

}  // namespace capsule::journal::render
