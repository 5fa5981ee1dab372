#include "capsule/base/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace capsule {

void ParallelFor(size_t count, unsigned threads, const std::function<void(size_t)>& work) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(1, count)));
  std::atomic<size_t> next{0};
  auto run = [&] {
    for (size_t i = next++; i < count; i = next++) work(i);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(run);
  run();
  for (std::thread& t : pool) t.join();
}

}  // namespace capsule
