// Memory a long-lived process no longer uses, given back to the system.
#pragma once

namespace capsule {

// Gives the heap's free pages back to the system (glibc's malloc_trim). A long-lived process
// (the mount, the sidecar) calls it after work that built large passing structures (a
// checkpoint, a freeze's verify, a move's copy): glibc keeps what a thread freed in that
// thread's arena, where another thread's next large piece of work cannot use it, so without
// this the resident set grows to the sum of the peaks of the threads that did such work.
void ReturnFreedMemory();

}  // namespace capsule
