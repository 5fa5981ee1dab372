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

# The sources a target links: its fuzz source and, following project includes through headers
# and sources alike, the .cc beside every header it reaches. Derived, not listed, so that a
# reader that starts using another file does not break the build here. A quoted include is
# the project's (from the top, or beside the file that includes it); one found nowhere stops
# the build here, naming it.
sources_of() {
  local -A seen=()
  local queue=("$1") f inc found
  while ((${#queue[@]})); do
    f=${queue[0]}
    queue=("${queue[@]:1}")
    [[ -n ${seen[$f]:-} ]] && continue
    seen[$f]=1
    [[ $f == *.cc ]] && echo "$f"
    while read -r inc; do
      if [[ -f $inc ]]; then
        found=$inc
      elif [[ -f $(dirname "$f")/$inc ]]; then
        found=$(dirname "$f")/$inc
      else
        echo "tests/fuzz.sh: $f includes \"$inc\", which is not in the tree" >&2
        return 1
      fi
      queue+=("$found")
      [[ $found == *.h && -f ${found%.h}.cc ]] && queue+=("${found%.h}.cc")
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  done
}

case "$target" in
  envelope) fuzz_source=move/seal/envelope_fuzz.cc; max_len=140000 ;;
  stream) fuzz_source=move/stream/stream_fuzz.cc; max_len=65536 ;;
  wire) fuzz_source=move/wire_fuzz.cc; max_len=65536 ;;
  control) fuzz_source=fs/control_fuzz.cc; max_len=4096 ;;
  journal) fuzz_source=journal/line_fuzz.cc; max_len=4096 ;;
  format) fuzz_source=capsule/format/format_fuzz.cc; max_len=8192 ;;
  *)
    echo "tests/fuzz.sh: no fuzz target '$target' (envelope, stream, wire, control, journal, format)" >&2
    exit 2 ;;
esac

cd "$top"
sources_of "$fuzz_source" > "$dir/sources"  # fails here, not in the compiler, on a missing include
mapfile -t sources < "$dir/sources"
echo "building $dir/${target}_fuzz"
clang++-14 -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$top" "${sources[@]}" -lcrypto -lpthread -o "$dir/${target}_fuzz"

echo "fuzzing for ${seconds}s, corpus $dir/corpus"
cd "$dir"
FUZZ_SEED_DIR="$dir/corpus" "./${target}_fuzz" \
  -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -print_final_stats=1 corpus
