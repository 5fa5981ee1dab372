// What a folder holds, for tests that perform an attack and show nothing outside the capsule
// was created, changed or removed: equal fingerprints before and after mean untouched.
#pragma once

#include <string>

namespace capsule::testing {

// The folder's own inode, times and mode, then every entry beneath it (ListTree, links not
// followed) with its inode, size and times; "<missing>" when nothing is at `dir`.
std::string FolderFingerprint(const std::string& dir);

}  // namespace capsule::testing
