// The project's mutexes: std::mutex and std::shared_mutex as clang's thread-safety analysis
// sees them (capsule/base/thread_annotations.h). libstdc++'s mutexes and locks carry no
// annotations, so these are the standard ones with annotated lock and unlock, and the
// standard lock types are specialised for them (a specialisation for a program-defined type
// is allowed): `std::lock_guard lock(mu_)`, `std::unique_lock lock(mu_)` and
// `std::shared_lock lock(mu_)` are then understood as taking `mu_`, and a
// std::unique_lock<Mutex> is still the std::unique_lock<std::mutex> a
// std::condition_variable waits with.
#pragma once

#include <mutex>
#include <shared_mutex>

#include "capsule/base/thread_annotations.h"

namespace capsule {

class CAPABILITY("mutex") Mutex : public std::mutex {
 public:
  void lock() ACQUIRE() { std::mutex::lock(); }
  void unlock() RELEASE() { std::mutex::unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return std::mutex::try_lock(); }
};

class CAPABILITY("shared mutex") SharedMutex : public std::shared_mutex {
 public:
  void lock() ACQUIRE() { std::shared_mutex::lock(); }
  void unlock() RELEASE() { std::shared_mutex::unlock(); }
  void lock_shared() ACQUIRE_SHARED() { std::shared_mutex::lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { std::shared_mutex::unlock_shared(); }
};

}  // namespace capsule

template <>
class SCOPED_CAPABILITY std::lock_guard<capsule::Mutex> {
 public:
  explicit lock_guard(capsule::Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~lock_guard() RELEASE() { mu_.unlock(); }
  lock_guard(const lock_guard&) = delete;
  lock_guard& operator=(const lock_guard&) = delete;

 private:
  capsule::Mutex& mu_;
};

template <>
class SCOPED_CAPABILITY std::unique_lock<capsule::Mutex> : public std::unique_lock<std::mutex> {
 public:
  explicit unique_lock(capsule::Mutex& mu) ACQUIRE(mu) : std::unique_lock<std::mutex>(mu) {}
  ~unique_lock() RELEASE() {}
  void lock() ACQUIRE() { std::unique_lock<std::mutex>::lock(); }
  void unlock() RELEASE() { std::unique_lock<std::mutex>::unlock(); }
};

template <>
class SCOPED_CAPABILITY std::unique_lock<capsule::SharedMutex> : public std::unique_lock<std::shared_mutex> {
 public:
  explicit unique_lock(capsule::SharedMutex& mu) ACQUIRE(mu) : std::unique_lock<std::shared_mutex>(mu) {}
  ~unique_lock() RELEASE() {}
  void lock() ACQUIRE() { std::unique_lock<std::shared_mutex>::lock(); }
  void unlock() RELEASE() { std::unique_lock<std::shared_mutex>::unlock(); }
};

template <>
class SCOPED_CAPABILITY std::shared_lock<capsule::SharedMutex> : public std::shared_lock<std::shared_mutex> {
 public:
  explicit shared_lock(capsule::SharedMutex& mu) ACQUIRE_SHARED(mu) : std::shared_lock<std::shared_mutex>(mu) {}
  ~shared_lock() RELEASE_GENERIC() {}
  void lock() ACQUIRE_SHARED() { std::shared_lock<std::shared_mutex>::lock(); }
  void unlock() RELEASE_GENERIC() { std::shared_lock<std::shared_mutex>::unlock(); }
};
