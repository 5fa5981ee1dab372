#include "journal/block_check.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace capsule::journal {

BlockCheck::BlockCheck(ReadAtFunction read, JournalPosition from, size_t block, unsigned threads)
    : read_(std::move(read)),
      position_(std::move(from)),
      block_(std::max<size_t>(block, 1)),
      threads_(threads),
      read_offset_(position_.offset) {}

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
  carried_.assign(buffer.data() + complete, held - complete);
  if (complete == 0) return false;

  block->text = std::string_view(buffer.data(), complete);
  block->offset = position_.offset;
  unsigned threads = threads_ == 0 ? ScanThreads(complete) : threads_;
  CAPSULE_ASSIGN_OR_RETURN(block->lines, ScanLines(block->text, position_.next_line, threads));
  std::optional<EventLine> previous;
  if (position_.last) previous = FieldsOf(*position_.last, "");
  CAPSULE_RETURN_IF_ERROR(CheckChains(block->lines, &position_.tail, previous));
  position_.next_line += block->lines.size();
  position_.offset += complete;
  for (auto part = block->lines.parts.rbegin(); part != block->lines.parts.rend(); ++part) {
    if (part->lines.empty()) continue;
    // Owned: this block's lines are gone once it is filled again.
    CAPSULE_ASSIGN_OR_RETURN(Event event, ToEvent(part->lines.back(), "journal"));
    position_.last = std::move(event);
    break;
  }
  return true;
}

}  // namespace capsule::journal
