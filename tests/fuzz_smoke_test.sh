#!/usr/bin/env bash
# A short libFuzzer run of each fuzz target, as part of the test suite: the envelope opener
# and the Move Stream reader, FUZZ_SECONDS each (default 10). The longer runs are the scripts
# themselves (tests/fuzz_envelope.sh, tests/fuzz_stream.sh). A crash fails the test.
set -euo pipefail
seconds=${FUZZ_SECONDS:-10}
here=$(cd "$(dirname "$0")" && pwd)
base=${TEST_TMPDIR:-$(mktemp -d)}
FUZZ_DIR="$base/envelope" bash "$here/fuzz_envelope.sh" "$seconds"
FUZZ_DIR="$base/stream" bash "$here/fuzz_stream.sh" "$seconds"
echo "fuzz smoke: no crash in ${seconds}s per target"
