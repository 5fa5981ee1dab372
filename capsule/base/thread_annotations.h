// Clang's thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html):
// which mutex guards which member, which function needs which mutex held, and the order
// locks are taken in. `bazel build --config=clang` checks them (-Wthread-safety -Werror);
// other compilers read them as nothing.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void AddLocked() REQUIRES(mu_);
//
// A lambda that reads guarded state while its caller holds the lock says so:
// `cv.wait(lock, [&]() REQUIRES(mu_) { return done_; })`.
#pragma once

#if defined(__clang__)
#define CAPSULE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CAPSULE_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) CAPSULE_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY CAPSULE_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) CAPSULE_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) CAPSULE_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) CAPSULE_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) CAPSULE_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) CAPSULE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) CAPSULE_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) CAPSULE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) CAPSULE_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) CAPSULE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) CAPSULE_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) CAPSULE_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) CAPSULE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) CAPSULE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) CAPSULE_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) CAPSULE_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS CAPSULE_THREAD_ANNOTATION(no_thread_safety_analysis)
