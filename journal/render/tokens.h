// How many tokens a piece of a request costs, for fitting a rendering into a context window.
//
// The estimate is deliberately provider-neutral and a little pessimistic: the window is chosen
// once from the journal, so the same events are kept whichever provider the request is for.
// The default, ByteTokenEstimator, counts ceil(bytes / 4) tokens for each piece of text (a
// message's text, a call's name, id and JSON arguments, a result's content, a reasoning's text
// and signature, a tool's name, description and JSON Schema) plus 4 tokens for each message,
// call, result, reasoning block and tool declaration. English averages about 4 bytes a token
// in the BPE vocabularies of all three providers; code and non-Latin text run denser, which
// is why the budget given to render should leave some room.
//
// TokenEstimator is the replaceable part: a real tokenizer implements Text() (and, if its
// provider bills a different framing cost, PerMessage()) and is passed to RenderRequest.
//
// Thread-safety: implementations must be safe to call from several threads at once (the
// default has no state).
#pragma once

#include <cstdint>
#include <string_view>

namespace capsule::journal::render {

class TokenEstimator {
 public:
  virtual ~TokenEstimator() = default;
  // Tokens for one piece of text (UTF-8), as it appears in the request.
  virtual uint64_t Text(std::string_view text) const = 0;
  // The fixed framing cost of one message, call, result, reasoning block or tool declaration.
  virtual uint64_t PerMessage() const = 0;
};

// ceil(bytes / 4) per piece, 4 per message: see the top of this file.
class ByteTokenEstimator final : public TokenEstimator {
 public:
  static constexpr uint64_t kBytesPerToken = 4;
  static constexpr uint64_t kPerMessage = 4;
  uint64_t Text(std::string_view text) const override {
    return (text.size() + kBytesPerToken - 1) / kBytesPerToken;
  }
  uint64_t PerMessage() const override { return kPerMessage; }
};

}  // namespace capsule::journal::render
