#include "move/net/wire.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "capsule/base/big_endian.h"

namespace capsule::move {

namespace {

// The first read of a message's text; each next read is as long as what came before it.
constexpr size_t kFirstMessageRead = 64 << 10;

const std::pair<Code, const char*> kCodes[] = {
    {Code::kInvalidArgument, "InvalidArgument"}, {Code::kCorruption, "Corruption"},
    {Code::kIOError, "IOError"},                 {Code::kNotFound, "NotFound"},
    {Code::kAlreadyExists, "AlreadyExists"},     {Code::kFailedPrecondition, "FailedPrecondition"},
    {Code::kPermissionDenied, "PermissionDenied"}, {Code::kUnavailable, "Unavailable"},
};

}  // namespace

Status WriteMessage(ByteSink* out, const Json& message) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(message, "message"));
  if (text.size() > kMaxMessage) return Status::InvalidArgument("message", "larger than 64 MiB");
  return out->Write(BigEndian(text.size(), 4) + text);
}

Result<Json> ReadMessage(ByteSource* in) {
  char length[4];
  CAPSULE_ASSIGN_OR_RETURN(size_t first, in->Read(length, sizeof length));
  if (first == 0) return Status::NotFound("connection", "ended");
  if (first < sizeof length) CAPSULE_RETURN_IF_ERROR(ReadExactly(in, length + first, sizeof length - first, "message length"));
  uint32_t size = GetBigEndian32(length);
  if (size > kMaxMessage) return Status::Corruption("message", "longer than 64 MiB");
  // The buffer grows with the bytes that arrive (at most twice what came, plus 64 KiB), never
  // to the length the peer declared: a peer that says 64 MiB and sends 4 bytes costs 64 KiB.
  std::string text;
  size_t step = kFirstMessageRead;
  while (text.size() < size) {
    const size_t from = text.size();
    const size_t to = from + std::min<size_t>(step, size - from);
    text.resize(to);
    CAPSULE_RETURN_IF_ERROR(ReadExactly(in, text.data() + from, to - from, "message"));
    step = to;  // doubles what is held
  }
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, "message", Code::kCorruption));
  if (!json.is_object()) return Status::Corruption("message", "not a JSON object");
  return json;
}

std::optional<std::string> StringField(const Json& message, const char* key) {
  auto it = message.find(key);
  if (it == message.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<uint64_t> U64Field(const Json& message, const char* key) {
  auto it = message.find(key);
  if (it == message.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

std::optional<bool> BoolField(const Json& message, const char* key) {
  auto it = message.find(key);
  if (it == message.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

std::string PeerWords(std::string_view text) {
  constexpr size_t kMaxWords = 1000;
  std::string words;
  const size_t end = std::min(text.size(), kMaxWords);
  auto escape = [&words](unsigned char c) {
    static constexpr char kHex[] = "0123456789abcdef";
    words += "\\x";
    words += kHex[c >> 4];
    words += kHex[c & 15];
  };
  for (size_t i = 0; i < end; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9f;  // U+0080..U+009F in UTF-8
    if (c1) {
      escape(c);
      escape(static_cast<unsigned char>(text[++i]));
    } else if (c < 0x20 || c == 0x7f) {
      escape(c);
    } else {
      words += static_cast<char>(c);
    }
  }
  if (text.size() > end) words += "... (" + std::to_string(text.size()) + " bytes in all)";
  return words;
}

Json WorkingMessage() { return Json{{"working", true}}; }

bool IsWorkingMessage(const Json& message) { return !message.contains("ok") && message.contains("working"); }

Json StatusReply(const Status& status) {
  if (status.ok()) return Json{{"ok", true}};
  std::string code = "IOError";
  for (const auto& [c, name] : kCodes) {
    if (c == status.code()) code = name;
  }
  return Json{{"ok", false}, {"code", code}, {"error", status.message()}};
}

Status ReplyStatus(const Json& reply) {
  auto ok = reply.find("ok");
  if (ok != reply.end() && ok->is_boolean() && ok->get<bool>()) return Status::Ok();
  std::string code = StringField(reply, "code").value_or("");
  std::string error = PeerWords(StringField(reply, "error").value_or("refused without a reason"));
  for (const auto& [c, name] : kCodes) {
    if (code == name) return Status::Make(c, "target", error);
  }
  return Status::Corruption("target", "a reply that is neither ok nor an error: " + error);
}

Status ChunkSink::Write(std::string_view data) {
  while (!data.empty()) {
    size_t n = std::min<size_t>(data.size(), kMaxChunk);
    frame_ = BigEndian(n, 4);
    frame_.append(data.substr(0, n));
    CAPSULE_RETURN_IF_ERROR(out_->Write(frame_));
    data.remove_prefix(n);
  }
  return Status::Ok();
}

Status ChunkSink::Close() { return out_->Write(BigEndian(0, 4)); }

Status ChunkSink::Abort() { return out_->Write(BigEndian(kChunkAbort, 4)); }

Result<size_t> ChunkSource::Read(char* buffer, size_t size) {
  if (!error_.ok()) return error_;
  if (finished_ || size == 0) return size_t{0};
  while (left_ == 0) {
    char length[4];
    Status read = ReadExactly(in_, length, sizeof length, "stream chunk");
    if (!read.ok()) return error_ = read;
    uint32_t n = GetBigEndian32(length);
    if (n == 0) {
      Finish();
      return size_t{0};
    }
    if (n == kChunkAbort) {
      Finish();  // the body ends here all the same
      return error_ = Status::Corruption("stream", "the sender's stream failed part-way");
    }
    if (n > kMaxChunk) return error_ = Status::Corruption("stream chunk", "longer than 1 MiB");
    left_ = n;
  }
  CAPSULE_ASSIGN_OR_RETURN(size_t n, in_->Read(buffer, std::min<size_t>(size, left_)));
  if (n == 0) return error_ = Status::Corruption("stream chunk", "cut short");
  left_ -= static_cast<uint32_t>(n);
  return n;
}

void ChunkSource::Finish() {
  finished_ = true;
  if (at_end_) std::exchange(at_end_, nullptr)();
}

Status ChunkSource::Drain() {
  std::vector<char> buffer(64 << 10);
  for (;;) {
    if (finished_) return Status::Ok();
    Result<size_t> n = Read(buffer.data(), buffer.size());
    if (!n.ok()) return finished_ ? Status::Ok() : n.status();
    if (*n == 0) return Status::Ok();
  }
}

}  // namespace capsule::move
