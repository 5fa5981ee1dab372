#!/usr/bin/env bash
# Fuzzes the Move Stream reader (move/stream/stream_fuzz.cc) with libFuzzer.
#
# Builds the target with Debian's clang++-14 -fsanitize=fuzzer,address,undefined directly (not
# through Bazel), then runs it for SECONDS seconds (default 60) on a corpus seeded with real
# packed streams (copy, files, switch). Needs clang-14 and libclang-rt-14-dev
# (apt-get install clang-14 libclang-rt-14-dev), libssl-dev and nlohmann-json3-dev.
#
#   tests/fuzz_stream.sh            # one minute
#   tests/fuzz_stream.sh 3600       # an hour; the corpus is kept, so runs add up
#   FUZZ_DIR=/tmp/fz tests/fuzz_stream.sh 600
#
# Exit status 0: no crash in that time. A crash leaves crash-* in FUZZ_DIR (default
# .cache/fuzz-stream in the worktree); replay it with: $FUZZ_DIR/stream_fuzz crash-...
set -euo pipefail

seconds=${1:-60}
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${FUZZ_DIR:-$top/.cache/fuzz-stream}
mkdir -p "$dir/corpus"

sources=(
  move/stream/stream_fuzz.cc
  move/stream/format.cc
  move/stream/reader.cc
  move/stream/writer.cc
  capsule/format/create.cc
  capsule/format/digest_cache.cc
  capsule/base/parallel.cc
  capsule/format/environment_spec.cc
  capsule/format/holder.cc
  capsule/format/keys.cc
  capsule/format/layout.cc
  capsule/format/manifest.cc
  capsule/base/tar.cc
  capsule/format/verify.cc
  capsule/format/workspace.cc
  capsule/base/byte_stream.cc
  capsule/base/canonical_json.cc
  capsule/base/file_io.cc
  capsule/base/openssl_handles.cc
  capsule/base/sha256.cc
  capsule/base/status.cc
)

cd "$top"
echo "building $dir/stream_fuzz"
clang++-14 -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$top" "${sources[@]}" -lcrypto -lpthread -o "$dir/stream_fuzz"

echo "fuzzing for ${seconds}s, corpus $dir/corpus"
cd "$dir"
STREAM_FUZZ_SEED_DIR="$dir/corpus" ./stream_fuzz \
  -max_total_time="$seconds" -max_len=65536 -timeout=10 -print_final_stats=1 corpus
