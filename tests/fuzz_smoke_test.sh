#!/usr/bin/env bash
# A short libFuzzer run of each fuzz target, as part of the test suite: every reader of
# outside bytes (the envelope, the Move Stream, the wire, the control channel, a journal
# line, the manifest and the snapshot), FUZZ_SECONDS
# each (default 10). Longer runs: tests/fuzz.sh TARGET SECONDS. A crash fails the test.
set -euo pipefail
seconds=${FUZZ_SECONDS:-10}
here=$(cd "$(dirname "$0")" && pwd)
base=${TEST_TMPDIR:-$(mktemp -d)}
for target in envelope stream wire control journal format; do
  FUZZ_DIR="$base/$target" bash "$here/fuzz.sh" "$target" "$seconds"
done
echo "fuzz smoke: no crash in ${seconds}s per target"
