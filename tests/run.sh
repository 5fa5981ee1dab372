#!/usr/bin/env bash
# Sets up what is missing, builds, and runs the whole test suite.
# Prints one closing line "N passed, M failed" and exits non-zero on any failure.
#
#   tests/run.sh            the suite
#   tests/run.sh --asan     the suite under AddressSanitizer + UndefinedBehaviorSanitizer too
set -uo pipefail
cd "$(dirname "$0")/.."

bash tests/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

configs=("")
[ "${1:-}" = "--asan" ] && configs+=("--config=asan")

targets=$(bazel query 'tests(//...)' 2>/dev/null | sort)
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

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
