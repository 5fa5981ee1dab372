// The capsule files whose content is checked, not only digested: the environment spec, every
// file under schedule/, thread files and skills' SKILL.md. capsule verify checks each; a mount
// checks those a program writes (all but SKILL.md, which a person edits and verify reports).
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule {

// True for a file whose content capsule verify checks.
bool IsCheckedDocument(const std::string& path);
// True for a file a mount refuses (EINVAL, old content kept) when its content is bad.
bool IsCheckedWhenWritten(const std::string& path);
// The check of one such file; the error names the path and the fault. An empty file under
// schedule/ or harness/ counts as absent (created, never written) and passes.
Status CheckDocument(const std::string& path, std::string_view text);
// As CheckDocument, but an empty text is refused: what a mount commits over a file is its
// new content (a truncation then a close would otherwise empty a job), never a placeholder.
Status CheckWrittenDocument(const std::string& path, std::string_view text);

}  // namespace capsule
