// Telling the kernel to forget what it cached of a name, from a thread of its own.
//
// The kernel keeps what a lookup told it of a name, an absence too: a missing workspace name
// is answered with a negative entry it may keep an hour (CacheTimeout, tree.cc). When the
// driver's view of a name changes in a way no reply tells the kernel (a create refused whose
// entry had to stay), the driver asks the kernel to forget the name. Never from the request's
// own handler: the kernel holds the folder's lock until that request is answered, and the
// notification needs the same lock.
//
// Thread-safe.
#pragma once

#include <fuse3/fuse_lowlevel.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "capsule/base/mutex.h"

namespace capsule::fs {

class EntryNotifier {
 public:
  explicit EntryNotifier(fuse_session* session);
  // Sends what is queued, then stops.
  ~EntryNotifier();
  EntryNotifier(const EntryNotifier&) = delete;
  EntryNotifier& operator=(const EntryNotifier&) = delete;

  // The kernel is to forget the name `name` in the folder `parent`, soon.
  void Forget(fuse_ino_t parent, std::string name);

 private:
  void Run();

  fuse_session* const session_;
  Mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<fuse_ino_t, std::string>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace capsule::fs
