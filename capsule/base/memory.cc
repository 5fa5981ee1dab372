#include "capsule/base/memory.h"

#include <malloc.h>

namespace capsule {

void ReturnLargeBlocksAtOnce() { ::mallopt(M_MMAP_THRESHOLD, 256 * 1024); }

void ReturnFreedMemory() { ::malloc_trim(0); }

}  // namespace capsule
