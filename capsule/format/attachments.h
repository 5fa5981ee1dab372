// Attachments: images and documents a user message or tool result carries, stored once by
// digest under memory/attachments/<sha256> and named from the event's data:
//   "attachments": [{"sha256": HEX, "media_type": TYPE, "name"?: TEXT}, ...]
// with TYPE one of image/png, image/jpeg, image/webp, application/pdf, text/plain
// (man/capsule.5, ATTACHMENTS). They travel under memory/ like the notes.
//
// Thread-safety: pure functions and reads; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
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

// Whether `path` (capsule-relative) lies under memory/attachments/.
bool IsAttachmentsPath(std::string_view path);

// For a file under memory/attachments/ (`path`, capsule-relative) whose content has digest
// `sha256_hex` and `size` bytes: why it may not be there (its name is not 64 lowercase hex
// digits, or not its content's digest), or nullopt when it may. An empty one is a file
// created and not yet written (through a mount): it has no content to match.
std::optional<std::string> AttachmentNameProblem(std::string_view path, std::string_view sha256_hex, uint64_t size);
// The same for the bytes of `file` (read and hashed), to be placed at `path`: InvalidArgument
// naming `path` and the problem.
Status CheckAttachmentFile(const std::string& file, const std::string& path);
// The same for the file open as `fd` (named `file` in errors), read from its start.
Status CheckAttachmentFile(int fd, const std::string& file, const std::string& path);

// The largest attachment: what `capsule attach` stores and what is read back (a provider
// takes far less inline).
inline constexpr uint64_t kMaxAttachmentBytes = 64 << 20;

// The bytes of an attachment, checked against its digest; NotFound or Corruption naming it.
// Read bounded (ReadFileBounded): anything but a regular file, or more than
// kMaxAttachmentBytes, is InvalidArgument naming it.
Result<std::string> LoadAttachment(const std::string& capsule_dir, const std::string& sha256_hex);

// Standard base64 (RFC 4648, with padding), as every provider's inline data takes it.
std::string Base64(std::string_view bytes);

}  // namespace capsule
