#include "fs/entry_notifier.h"

namespace capsule::fs {

EntryNotifier::EntryNotifier(fuse_session* session) : session_(session), thread_([this] { Run(); }) {}

EntryNotifier::~EntryNotifier() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void EntryNotifier::Forget(fuse_ino_t parent, std::string name) {
  {
    std::lock_guard lock(mu_);
    queue_.emplace_back(parent, std::move(name));
  }
  wake_.notify_one();
}

void EntryNotifier::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this]() REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    auto [parent, name] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // ENOENT when the kernel holds nothing of the name: nothing to forget.
    (void)fuse_lowlevel_notify_inval_entry(session_, parent, name.c_str(), name.size());
    lock.lock();
  }
}

}  // namespace capsule::fs
