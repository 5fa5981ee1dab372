// Running one piece of work per index on all cores.
#pragma once

#include <cstddef>
#include <functional>

namespace capsule {

// Calls `work(i)` once for every i in [0, count), on up to `threads` threads (0: one per
// core), the calling thread among them; returns when every call has returned. Indexes are
// handed out in order, so putting the largest pieces first makes the threads finish together.
// `work` must be safe to call from several threads at once.
void ParallelFor(size_t count, unsigned threads, const std::function<void(size_t)>& work);

}  // namespace capsule
