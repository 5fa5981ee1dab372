#!/usr/bin/env bash
# Fuzzes one reader of outside bytes with libFuzzer:
#
#   envelope   the sealed envelope's reader           move/seal/envelope_fuzz.cc
#   stream     the Move Stream reader                  move/stream/stream_fuzz.cc
#   wire       the move protocol's wire, both ends     move/wire_fuzz.cc
#   control    a mount's control channel, both ends    fs/control_fuzz.cc
#   journal    a journal line: fast reader vs slow one  journal/line_fuzz.cc
#   format     manifest and snapshot: fast vs general   capsule/format/format_fuzz.cc
#
# Builds the target with Debian's clang++-14 -fsanitize=fuzzer,address,undefined directly (not
# through Bazel), then runs it for SECONDS seconds (default 60) on a corpus that the target
# seeds with real inputs where it can (FUZZ_SEED_DIR). Needs clang-14 and libclang-rt-14-dev
# (apt-get install clang-14 libclang-rt-14-dev), libssl-dev and nlohmann-json3-dev.
#
#   tests/fuzz.sh wire                 # one minute
#   tests/fuzz.sh stream 3600          # an hour; the corpus is kept, so runs add up
#   FUZZ_DIR=/tmp/fz tests/fuzz.sh envelope 600
#
# Exit status 0: no crash in that time. A crash leaves crash-* in FUZZ_DIR (default
# .cache/fuzz-TARGET in the worktree); replay it with: $FUZZ_DIR/TARGET_fuzz crash-...
set -euo pipefail

target=${1:?usage: tests/fuzz.sh envelope|stream|wire|control|journal|format [SECONDS]}
seconds=${2:-60}
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${FUZZ_DIR:-$top/.cache/fuzz-$target}
mkdir -p "$dir/corpus"

base=(capsule/base/byte_stream.cc capsule/base/canonical_json.cc capsule/base/file_io.cc
      capsule/base/openssl_handles.cc capsule/base/progress.cc capsule/base/sha256.cc
      capsule/base/status.cc)
case "$target" in
  envelope)
    sources=(move/seal/envelope_fuzz.cc move/seal/envelope.cc move/seal/hpke.cc move/seal/aead.cc
             move/seal/hkdf.cc "${base[@]}")
    max_len=140000 ;;
  stream)
    sources=(move/stream/stream_fuzz.cc move/stream/digest_check.cc move/stream/format.cc
             move/stream/reader.cc move/stream/writer.cc capsule/base/parallel.cc capsule/base/tar.cc
             capsule/format/create.cc capsule/format/digest_cache.cc
             capsule/format/environment_spec.cc capsule/format/holder.cc capsule/format/keys.cc
             capsule/format/layout.cc capsule/format/manifest.cc capsule/format/verify.cc
             capsule/format/workspace.cc capsule/format/workspace_times.cc
             capsule/format/attachments.cc capsule/format/documents.cc capsule/format/harness.cc
             capsule/format/schedule.cc "${base[@]}")
    max_len=65536 ;;
  wire)
    sources=(move/wire_fuzz.cc move/serve.cc move/remote_target.cc move/net/wire.cc
             move/stream/format.cc capsule/format/layout.cc capsule/format/attachments.cc
             capsule/format/harness.cc "${base[@]}")
    max_len=65536 ;;
  control)
    sources=(fs/control_fuzz.cc fs/control_client.cc "${base[@]}")
    max_len=4096 ;;
  journal)
    sources=(journal/line_fuzz.cc journal/event_line.cc journal/event.cc capsule/base/canonical_scan.cc
             capsule/format/attachments.cc "${base[@]}")
    max_len=4096 ;;
  format)
    sources=(capsule/format/format_fuzz.cc capsule/format/manifest.cc capsule/format/workspace.cc
             capsule/format/digest_cache.cc
             capsule/format/layout.cc "${base[@]}")
    max_len=8192 ;;
  *)
    echo "tests/fuzz.sh: no fuzz target '$target' (envelope, stream, wire, control, journal, format)" >&2
    exit 2 ;;
esac

cd "$top"
echo "building $dir/${target}_fuzz"
clang++-14 -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$top" "${sources[@]}" -lcrypto -lpthread -o "$dir/${target}_fuzz"

echo "fuzzing for ${seconds}s, corpus $dir/corpus"
cd "$dir"
FUZZ_SEED_DIR="$dir/corpus" "./${target}_fuzz" \
  -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -print_final_stats=1 corpus
