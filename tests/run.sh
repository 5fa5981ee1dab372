#!/usr/bin/env bash
# Sets up what is missing, builds, and runs the whole test suite.
# Prints one closing line "N passed, M failed" and exits non-zero on any failure.
#
#   tests/run.sh            the suite
#   tests/run.sh --asan     the suite under AddressSanitizer + UndefinedBehaviorSanitizer too
#   tests/run.sh --tsan     the suite, then the concurrent tests under ThreadSanitizer, built by
#                           clang with its thread-safety analysis (--config=tsan; a build of its own)
#   tests/run.sh --long     the suite, the ThreadSanitizer pass, then the long yardsticks: the
#                           Debian package installed, used and purged in a fresh Debian 12
#                           (tests/package_install_test.sh)
set -uo pipefail
cd "$(dirname "$0")/.."

bash tests/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

configs=("")
long=false
tsan=false
for arg in "$@"; do
  case $arg in
    --asan) configs+=("--config=asan") ;;
    --tsan) tsan=true ;;
    --long) long=true; tsan=true ;;
  esac
done

# Tagged manual: the tests of a configuration of their own, run below.
targets=$(bazel query 'tests(//...) except attr(tags, manual, //...)' 2>/dev/null | sort)
if [ -z "$targets" ]; then
  echo "no test targets found"; echo "0 passed, 1 failed"; exit 1
fi

passed=0
failed=0
skipped=0
for config in "${configs[@]}"; do
  label=${config:-default}
  echo "== bazel test ($label)"
  # Results of an earlier run must never count: remove them first.
  for t in $targets; do rm -f "bazel-testlogs/$(echo "${t#//}" | tr ':' '/')/test.xml"; done
  bazel test $config --keep_going --nocache_test_results //... 2>&1 | grep -vE "^[0-9]+\.[0-9]+: src/main/tools/linux-sandbox" | tail -n 60
  read -r p f s < <(python3 tests/count_results.py $targets)
  echo "== $label: $p passed, $f failed, $s skipped"
  passed=$((passed + p))
  failed=$((failed + f))
  skipped=$((skipped + s))
done

# The tests whose threads share state (the mount's FUSE threads, its journal appends, the
# sidecar's connections, the move's pipes): under ThreadSanitizer, built by clang with
# -Wthread-safety -Werror, with the two programs (which the tests start, so a race in them
# fails the test too).
if $tsan; then
  tsan_targets=(
    //fs:fs_unit_test //fs:document_writes_test //tests:capsulefs_test //tests:mount_writes_test
    //move:byte_pipe_test //move:door_test //move:move_protocol_test //tests:sidecar_door_test
    //journal:journal_test //journal:merge_stream_test
  )
  echo "== bazel test (--config=tsan: ThreadSanitizer, clang's thread-safety analysis)"
  for t in "${tsan_targets[@]}"; do rm -f "bazel-testlogs/$(echo "${t#//}" | tr ':' '/')/test.xml"; done
  bazel test --config=tsan --keep_going --nocache_test_results //:capsule //:capsulefs "${tsan_targets[@]}" 2>&1 |
    grep -vE "^[0-9]+\.[0-9]+: src/main/tools/linux-sandbox" | tail -n 60
  read -r p f s < <(python3 tests/count_results.py "${tsan_targets[@]}")
  echo "== tsan: $p passed, $f failed, $s skipped"
  passed=$((passed + p))
  failed=$((failed + f))
  skipped=$((skipped + s))
fi

if $long; then
  echo "== long: tests/package_install_test.sh"
  read -r p f < <(bash tests/package_install_test.sh 2>&1 | tee /dev/stderr | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' | tail -n 1)
  [ -n "${p:-}" ] || { p=0; f=1; }
  echo "== long: $p passed, $f failed"
  passed=$((passed + p))
  failed=$((failed + f))
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
