#include "journal/merge_pipe.h"

#include <algorithm>
#include <utility>

namespace capsule::journal {

void CommonLines::Publish(Result<JournalPosition> end) {
  {
    std::lock_guard lock(mu_);
    if (position_) return;
    if (end.ok()) end_.store(end->offset, std::memory_order_release);
    position_ = std::move(end);
  }
  published_.notify_all();
}

Result<JournalPosition> CommonLines::Wait() {
  std::unique_lock lock(mu_);
  published_.wait(lock, [this]() REQUIRES(mu_) { return position_.has_value(); });
  return *position_;
}

StreamedSide::StreamedSide(ReadAtFunction read, size_t block, size_t blocks, Role role,
                           std::shared_ptr<CommonLines> common, ReadAtFunction other)
    : role_(role), common_(std::move(common)), read_(std::move(read)), block_size_(block) {
  for (size_t i = 0; i < std::max<size_t>(blocks, 2); ++i) {
    blocks_.push_back(std::make_unique<CheckedBlock>());
    free_.push_back(blocks_.back().get());
  }
  if (role_ != Role::kTheirs) {
    check_.emplace(read_, JournalPosition{}, block_size_, 1);
    if (role_ == Role::kOurs) {
      check_->CompareWith(std::move(other), [common = common_](const JournalPosition& end) { common->Publish(end); });
    }
  }
  thread_ = std::thread(&StreamedSide::Read, this);
}

StreamedSide::~StreamedSide() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  // Wakes theirs waiting for where the common lines end (ours stopped before it knew).
  if (common_) common_->Publish(Status::Unavailable("merge", "stopped before the lines both journals hold were read"));
  thread_.join();
}

void StreamedSide::Read() {
  if (role_ == Role::kTheirs) {
    // After the lines both begin with, as ours' check of them left things.
    Result<JournalPosition> start = common_->Wait();
    std::lock_guard lock(mu_);
    if (!start.ok()) {
      fault_ = start.status();
      done_ = true;
      changed_.notify_all();
      return;
    }
    first_line_ = start->next_line;
    check_.emplace(read_, std::move(start).value(), block_size_, 1);
  }
  for (;;) {
    CheckedBlock* block = nullptr;
    {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [this]() REQUIRES(mu_) { return stop_ || !free_.empty(); });
      if (stop_) return;
      block = free_.front();
      free_.pop_front();
    }
    Result<bool> more = check_->Next(block);
    if (!more.ok() && common_) common_->Publish(more.status());  // theirs is not read: a fault of ours is named first
    {
      std::lock_guard lock(mu_);
      if (!more.ok()) {
        fault_ = more.status();
        done_ = true;
      } else if (!*more) {
        end_ = check_->position();
        done_ = true;
      } else {
        ready_.push_back(block);
      }
    }
    changed_.notify_all();
    if (!more.ok() || !*more) return;
  }
}

Result<CheckedBlock*> StreamedSide::Take() {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [this]() REQUIRES(mu_) { return !ready_.empty() || done_; });
  if (!ready_.empty()) {
    CheckedBlock* block = ready_.front();
    ready_.pop_front();
    return block;
  }
  if (!fault_.ok()) {
    failed_ = true;
    return fault_;
  }
  return nullptr;
}

Status StreamedSide::Ready() {
  if (opened_) return Status::Ok();
  opened_ = true;
  CAPSULE_RETURN_IF_ERROR(NextBlock());
  std::lock_guard lock(mu_);
  position_ = first_line_ - 1;  // theirs: after the lines both begin with
  return Status::Ok();
}

Status StreamedSide::NextBlock() {
  if (current_ != nullptr) {
    {
      std::lock_guard lock(mu_);
      free_.push_back(current_);
    }
    changed_.notify_all();
    current_ = nullptr;
  }
  CAPSULE_ASSIGN_OR_RETURN(current_, Take());
  part_ = index_ = mark_ = 0;
  Settle();
  return Status::Ok();  // a block holds at least one line: head_ is set unless at the end
}

void StreamedSide::Settle() {
  head_ = nullptr;
  if (current_ == nullptr) return;
  const std::vector<ScannedPart>& parts = current_->lines.parts;
  while (part_ < parts.size() && index_ >= parts[part_].lines.size()) {
    ++part_;
    index_ = 0;
  }
  if (part_ < parts.size()) head_ = &parts[part_].lines[index_];
}

Status StreamedSide::Advance(const std::function<Status()>& before_release) {
  ++index_;
  ++position_;
  Settle();
  if (head_ != nullptr || current_ == nullptr) return Status::Ok();
  // Past the block's last line: the merge is done with the block before it is filled again.
  CAPSULE_RETURN_IF_ERROR(before_release());
  return NextBlock();
}

std::string_view StreamedSide::TakePassed() {
  if (current_ == nullptr) return {};
  size_t end = head_ ? static_cast<size_t>(head_->line.data() - current_->text.data()) : current_->text.size();
  std::string_view passed = current_->text.substr(mark_, end - mark_);
  mark_ = end;
  return passed;
}

uint64_t StreamedSide::offset() const {
  if (head_ == nullptr) return end_.offset;
  return current_->offset + static_cast<uint64_t>(head_->line.data() - current_->text.data());
}

}  // namespace capsule::journal
