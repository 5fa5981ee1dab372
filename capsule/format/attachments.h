// Attachments: images and documents a user message or tool result carries, stored once by
// digest under memory/attachments/<sha256> and named from the event's data:
//   "attachments": [{"sha256": HEX, "media_type": TYPE, "name"?: TEXT}, ...]
// with TYPE one of image/png, image/jpeg, image/webp, application/pdf, text/plain
// (man/capsule.5, ATTACHMENTS). They travel under memory/ like the notes.
//
// Thread-safety: pure functions and reads; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule {

inline constexpr char kAttachmentsDir[] = "memory/attachments";

// The media types an attachment may have.
bool IsAttachmentMediaType(std::string_view media_type);

// The media type of `bytes` from their first bytes (PNG, JPEG, WebP and PDF signatures), or
// text/plain for valid UTF-8 without NUL; InvalidArgument naming `what` otherwise.
Result<std::string> SniffMediaType(std::string_view bytes, const std::string& what);

// memory/attachments/<sha256>.
std::string AttachmentPath(const std::string& sha256_hex);

// The bytes of an attachment, checked against its digest; NotFound or Corruption naming it.
Result<std::string> LoadAttachment(const std::string& capsule_dir, const std::string& sha256_hex);

// Standard base64 (RFC 4648, with padding), as every provider's inline data takes it.
std::string Base64(std::string_view bytes);

}  // namespace capsule
