#include "capsule/base/background_sha256.h"

namespace capsule {

BackgroundSha256::~BackgroundSha256() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    finished_ = true;
  }
  changed_.notify_one();
  thread_.join();
}

void BackgroundSha256::Update(std::string_view piece) {
  if (piece.empty()) return;
  batch_.push_back(piece);
  batch_bytes_ += piece.size();
  if (batch_bytes_ >= kBatchBytes) HandOver();
}

void BackgroundSha256::HandOver() {
  if (batch_.empty()) return;
  if (!thread_.joinable()) thread_ = std::thread(&BackgroundSha256::Run, this);
  {
    std::lock_guard lock(mu_);
    queued_.insert(queued_.end(), batch_.begin(), batch_.end());
  }
  handed_ += batch_.size();
  changed_.notify_one();
  batch_.clear();
  batch_bytes_ = 0;
}

void BackgroundSha256::Run() {
  std::vector<std::string_view> pieces;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [this]() REQUIRES(mu_) { return !queued_.empty() || finished_; });
      if (queued_.empty()) return;  // finished, and everything hashed
      pieces.swap(queued_);
    }
    for (std::string_view piece : pieces) sha_.Update(piece);
    {
      std::lock_guard lock(mu_);
      hashed_ += pieces.size();
    }
    hashed_changed_.notify_all();
    pieces.clear();
  }
}

void BackgroundSha256::Wait() {
  HandOver();
  std::unique_lock lock(mu_);
  hashed_changed_.wait(lock, [this]() REQUIRES(mu_) { return hashed_ == handed_; });
}

std::string BackgroundSha256::FinishHex() {
  HandOver();
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      finished_ = true;
    }
    changed_.notify_one();
    thread_.join();
  }
  return sha_.FinishHex();
}

}  // namespace capsule
