// What a capsule folder's modes let other users read on disk. The mount decides who reads a
// workspace file by its own mode and owner; on disk the same bytes sit in a blob, so the
// capsule folder is made 0700 (kCapsuleFolderMode) and blobs 0600 (kBlobMode): nobody the
// workspace would refuse reads them around the mount (capsule(5), ON-DISK MODES).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace capsule {

inline constexpr mode_t kCapsuleFolderMode = 0700;

// One line per way the folder at `dir` exposes more than that: the folder itself open to
// group or others, and then the blobs they may read. Empty for a folder as created. Warnings,
// not problems: the capsule's content is intact (capsule verify prints them apart).
std::vector<std::string> FolderModeWarnings(const std::string& dir);

}  // namespace capsule
