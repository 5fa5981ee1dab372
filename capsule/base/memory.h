// How a long-lived process (the mount, the sidecar) keeps its resident memory near what it
// holds: the large passing structures of a checkpoint, a verify or a move's call are given back
// when that work ends, not kept as the peak.
#pragma once

namespace capsule {

// Called once, at the start of a long-lived process: every allocation of 256 KiB or more is
// mapped on its own and unmapped when freed. glibc otherwise raises that threshold to the
// largest block freed (up to 32 MiB) and from then on serves such blocks from the heap, where,
// once freed, they leave holes among the allocations that last.
void ReturnLargeBlocksAtOnce();

// Gives the heap's free pages back to the system (glibc's malloc_trim), called after work that
// built large passing structures. glibc keeps what a thread freed in that thread's arena, where
// another thread's next large piece of work cannot use it: without this the resident set grows
// towards the sum of the peaks of the threads that did such work.
void ReturnFreedMemory();

}  // namespace capsule
