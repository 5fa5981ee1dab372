#include "journal/block_check.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace capsule::journal {

BlockCheck::BlockCheck(ReadAtFunction read, JournalPosition from, size_t block, unsigned threads)
    : read_(std::move(read)),
      position_(std::move(from)),
      block_(std::max<size_t>(block, 1)),
      threads_(threads),
      read_offset_(position_.offset) {}

void BlockCheck::CompareWith(ReadAtFunction other, std::function<void(const JournalPosition&)> at_end) {
  other_ = std::move(other);
  at_end_of_common_ = std::move(at_end);
}

void BlockCheck::EndOfCommon() {
  if (!at_end_of_common_) return;
  at_end_of_common_(position_);
  at_end_of_common_ = nullptr;
  other_ = nullptr;
  other_buffer_ = std::string();
}

Result<size_t> BlockCheck::EqualBytes(uint64_t offset, const char* buffer, size_t size) {
  if (other_buffer_.size() < size) other_buffer_.resize(size);
  size_t got = 0;
  while (got < size) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, other_(offset + got, other_buffer_.data() + got, size - got));
    if (n == 0) break;
    got += n;
  }
  if (std::memcmp(buffer, other_buffer_.data(), got) == 0) return got;
  return static_cast<size_t>(std::mismatch(buffer, buffer + got, other_buffer_.data()).first - buffer);
}

Result<bool> BlockCheck::Next(CheckedBlock* block) {
  std::string& buffer = block->buffer;
  if (buffer.size() < block_) buffer.resize(block_);
  // The incomplete line the last block left goes first; reads follow it until the buffer
  // holds a complete line or the journal ends.
  size_t held = carried_.size();
  if (held >= buffer.size()) buffer.resize(2 * held);
  std::memcpy(buffer.data(), carried_.data(), held);
  size_t complete = 0;
  for (;;) {
    while (held < buffer.size() && !ended_) {
      CAPSULE_ASSIGN_OR_RETURN(size_t n, read_(read_offset_, buffer.data() + held, buffer.size() - held));
      if (n == 0) ended_ = true;
      read_offset_ += n;
      held += n;
    }
    complete = CompleteLength(std::string_view(buffer.data(), held));
    if (complete > 0 || ended_) break;
    buffer.resize(2 * buffer.size());  // a line longer than a block
  }
  // While the other journal has begun with the same bytes: where do the lines both hold end?
  bool common_ends_here = false;
  bool comparing = at_end_of_common_ != nullptr;
  if (comparing) {
    CAPSULE_ASSIGN_OR_RETURN(size_t equal, EqualBytes(position_.offset, buffer.data(), held));
    if (equal < held || ended_) {
      size_t common = std::min(complete, CompleteLength(std::string_view(buffer.data(), equal)));
      if (common == 0) {
        EndOfCommon();  // at this block's start
      } else {
        complete = common;  // the block ends with the last line both hold
        common_ends_here = true;
      }
    }
  }
  comparing = at_end_of_common_ != nullptr || common_ends_here;  // this block's lines are common
  carried_.assign(buffer.data() + complete, held - complete);
  if (complete == 0) {
    EndOfCommon();
    return false;
  }

  block->text = std::string_view(buffer.data(), complete);
  block->offset = position_.offset;
  // While comparing, the other journal's reader waits: every core checks these lines.
  unsigned threads = comparing ? ScanThreads(SIZE_MAX) : threads_ == 0 ? ScanThreads(complete) : threads_;
  CAPSULE_ASSIGN_OR_RETURN(block->lines, ScanLines(block->text, position_.next_line, threads));
  std::optional<EventLine> previous;
  if (position_.last) previous = FieldsOf(*position_.last, "");
  CAPSULE_RETURN_IF_ERROR(CheckChains(block->lines, &position_.tail, previous));
  position_.next_line += block->lines.size();
  position_.offset += complete;
  // Owned: this block's lines are gone once it is filled again (a block has at least one).
  // Its data is not kept: the next line is checked against the rest.
  position_.last = HeaderOf(*block->lines.last());
  if (common_ends_here) EndOfCommon();
  return true;
}

}  // namespace capsule::journal
