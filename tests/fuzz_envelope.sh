#!/usr/bin/env bash
# Fuzzes the sealed envelope's reader (move/seal/envelope_fuzz.cc) with libFuzzer.
#
# Builds the target with Debian's clang++-14 -fsanitize=fuzzer,address,undefined directly (not
# through Bazel), then runs it for SECONDS seconds (default 60) on a corpus seeded with valid
# envelopes. Needs clang-14 and libclang-rt-14-dev (apt-get install clang-14 libclang-rt-14-dev)
# and libssl-dev.
#
#   tests/fuzz_envelope.sh            # one minute
#   tests/fuzz_envelope.sh 3600       # an hour; the corpus is kept, so runs add up
#   FUZZ_DIR=/tmp/fz tests/fuzz_envelope.sh 600
#
# Exit status 0: no crash in that time. A crash leaves crash-* in FUZZ_DIR (default
# .cache/fuzz-envelope in the worktree); replay it with: $FUZZ_DIR/envelope_fuzz crash-...
set -euo pipefail

seconds=${1:-60}
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${FUZZ_DIR:-$top/.cache/fuzz-envelope}
mkdir -p "$dir/corpus"

sources=(
  move/seal/envelope_fuzz.cc
  move/seal/envelope.cc
  move/seal/hpke.cc
  move/seal/aead.cc
  move/seal/hkdf.cc
  capsule/base/byte_stream.cc
  capsule/base/file_io.cc
  capsule/base/openssl_handles.cc
  capsule/base/status.cc
)

cd "$top"
echo "building $dir/envelope_fuzz"
clang++-14 -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$top" "${sources[@]}" -lcrypto -o "$dir/envelope_fuzz"

echo "fuzzing for ${seconds}s, corpus $dir/corpus"
cd "$dir"
ENVELOPE_FUZZ_SEED_DIR="$dir/corpus" ./envelope_fuzz \
  -max_total_time="$seconds" -max_len=140000 -timeout=10 -print_final_stats=1 corpus
