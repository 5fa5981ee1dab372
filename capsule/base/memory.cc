#include "capsule/base/memory.h"

#include <malloc.h>

namespace capsule {

void ReturnFreedMemory() { ::malloc_trim(0); }

}  // namespace capsule
