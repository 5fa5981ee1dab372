// The pipe between a pack and the call that sends it: everything written is read once, in
// order, and the pipe holds at most a bounded amount whatever went through it.
#include "move/byte_pipe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <thread>

namespace capsule::move {
namespace {

// The byte at `offset` of the test's stream: not periodic in any power of two.
char ByteAt(uint64_t offset) { return static_cast<char>((offset * 131 + offset / 4099) & 0xff); }

TEST(BytePipe, AStreamMuchLargerThanThePipeGoesThroughInOrderInBoundedMemory) {
  constexpr size_t kCapacity = 64 << 10;
  constexpr uint64_t kTotal = 64 << 20;  // a thousand capacities
  BytePipe pipe(kCapacity);
  const size_t allocated_at_start = pipe.allocated();
  std::thread writer([&] {
    // A writer that keeps ahead of its reader: the buffer is never read empty.
    std::string piece(3000, '\0');
    for (uint64_t done = 0; done < kTotal;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(piece.size(), kTotal - done));
      for (size_t i = 0; i < n; ++i) piece[i] = ByteAt(done + i);
      if (!pipe.Write(std::string_view(piece.data(), n)).ok()) return;
      done += n;
    }
    pipe.CloseWrite(Status::Ok());
  });
  uint64_t read = 0, wrong = 0;
  size_t largest = 0;
  char buffer[1000];  // reads smaller than the writes
  for (;;) {
    Result<size_t> n = pipe.Read(buffer, sizeof buffer);
    ASSERT_TRUE(n.ok()) << n.status().message();
    if (*n == 0) break;
    for (size_t i = 0; i < *n; ++i) wrong += buffer[i] != ByteAt(read + i);
    read += *n;
    if (read % (1 << 20) < sizeof buffer) largest = std::max(largest, pipe.allocated());
  }
  writer.join();
  EXPECT_EQ(read, kTotal);
  EXPECT_EQ(wrong, 0u);
  largest = std::max(largest, pipe.allocated());
  EXPECT_EQ(largest, allocated_at_start) << "the pipe grew: it kept what was read";
  EXPECT_LT(largest, 3 * kCapacity);
}

TEST(BytePipe, AWriterLearnsThatTheReaderStoppedAndTheReaderGetsTheWritersError) {
  BytePipe stopped(16);
  stopped.CloseRead();
  EXPECT_FALSE(stopped.Write("more than sixteen bytes").ok());

  BytePipe failed(16);
  ASSERT_TRUE(failed.Write("part").ok());
  failed.CloseWrite(Status::IOError("blob", EIO));
  char buffer[16];
  Result<size_t> first = failed.Read(buffer, sizeof buffer);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(std::string(buffer, *first), "part");
  Result<size_t> second = failed.Read(buffer, sizeof buffer);
  EXPECT_FALSE(second.ok());
}

}  // namespace
}  // namespace capsule::move
