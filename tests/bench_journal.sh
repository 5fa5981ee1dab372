#!/usr/bin/env bash
# Benchmark (not a test): the journal, each figure next to a baseline measured in the same run
# with a warm page cache.
#   1. the merge of two copies' journals (what capsule merge does to the journal, the owned
#      state's projection left out) of EVENTS events each (a shared history of both
#      machines' chains interleaved, then each copy's own events, ~300 bytes an event), against
#      LC_ALL=C sort -m -u of the same two files;
#   2. Journal::Verify of one of them (every line's canonical form and id, every chain, the
#      order), against sha256sum of the file; and capsule verify of the whole capsule;
#   3. durable appends (Journal::Append, write + fdatasync each) by 1, 4 and 16 writers,
#      against a small C loop of write + fdatasync of lines of the same size, compiled here;
#      APPEND_ROUNDS rounds (3) taking turns at going first, the best of each side compared.
#
#   tests/bench_journal.sh [WORKDIR]
#   EVENTS=1000000 APPENDS=2000 APPEND_ROUNDS=3 tests/bench_journal.sh
#   ONLY=append tests/bench_journal.sh   # the durable appends alone
#   CAPSULE=/path/capsule JOURNAL_BENCH=/path/journal_bench tests/bench_journal.sh  # other builds
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/bench_common.sh
events=${EVENTS:-1000000}
appends=${APPENDS:-2000}
append_rounds=${APPEND_ROUNDS:-3}
work=${1:-$(mktemp -d /tmp/journal-bench.XXXXXX)}
mkdir -p "$work"

if [ -z "${CAPSULE:-}" ] || [ -z "${JOURNAL_BENCH:-}" ]; then
  bazel build -c opt //:capsule //journal:journal_bench >/dev/null 2>&1
fi
capsule=${CAPSULE:-bazel-bin/capsule}
journal_bench=${JOURNAL_BENCH:-bazel-bin/journal/journal_bench}

rm -rf "$work/a" "$work/b" "$work/append" "$work"/*.jsonl
if [ "${ONLY:-}" != append ]; then  # sections 1 and 2
"$capsule" init "$work/a" --id bench --name Bench >/dev/null
cp -a "$work/a" "$work/b"
"$capsule" adopt "$work/b" >/dev/null
ma=$(cat "$work/a/.capsule/machine")
mb=$(cat "$work/b/.capsule/machine")

echo "== generating 2 x $events events"
python3 - "$work" "$ma" "$mb" "$events" <<'PY'
import sys
sys.path.insert(0, "tests")
from journal_events import Chains
work, ma, mb, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
chains = Chains()
shared = n // 2
with open(work + "/shared.jsonl", "wb") as out:
    for c in range(1, shared + 1):  # both machines' chains, interleaved
        out.write(chains.line(ma if c % 2 else mb, c, c))
for side, machine in (("a", ma), ("b", mb)):
    own = chains.copy()
    with open(work + "/" + side + "-own.jsonl", "wb") as out:
        for k in range(n - shared):
            out.write(own.line(machine, shared + 1 + k, shared + k + (0 if side == "a" else 7)))
PY
cat "$work/shared.jsonl" "$work/a-own.jsonl" > "$work/a/memory/timeline_events.jsonl"
cat "$work/shared.jsonl" "$work/b-own.jsonl" > "$work/b/memory/timeline_events.jsonl"
rm -f "$work/shared.jsonl" "$work/a-own.jsonl" "$work/b-own.jsonl"
# The manifests name the journals placed by hand, as an append would have left them.
python3 - "$work/a" "$work/b" <<'PY'
import hashlib, os, sys
sys.path.insert(0, "tests")
from journal_events import name_in_manifest
for cap in sys.argv[1:]:
    with open(os.path.join(cap, "memory/timeline_events.jsonl"), "rb") as f:
        data = f.read()
    name_in_manifest(cap, hashlib.sha256(data).hexdigest(), len(data))
PY
cp "$work/a/memory/timeline_events.jsonl" "$work/a.jsonl"
cp "$work/b/memory/timeline_events.jsonl" "$work/b.jsonl"
cp "$work/a/manifest.json" "$work/a-manifest.json"  # the merge rewrites a: each round puts these back
bytes=$(stat -c %s "$work/a.jsonl")
echo "$events events, $bytes bytes each ($((bytes / events)) bytes an event)"
cat "$work/a.jsonl" "$work/b.jsonl" > /dev/null

echo "== verify"
t=$(now); sha256sum "$work/a.jsonl" > /dev/null; sha_s=$(elapsed "$t")
verify_s=$("$journal_bench" verify "$work/a" | awk '/^verify/ {print $2}')
t=$(now); "$capsule" verify "$work/a" > /dev/null || { echo "capsule verify refused the generated capsule"; exit 1; }
cverify_s=$(elapsed "$t")
printf 'Journal::Verify  %6.2fs   sha256sum %6.2fs   ratio %sx\n' "$verify_s" "$sha_s" "$(ratio "$verify_s" "$sha_s")"
printf 'capsule verify   %6.2fs   (the whole capsule: manifest digests and the journal)  ratio %sx\n' \
  "$cverify_s" "$(ratio "$cverify_s" "$sha_s")"

echo "== merge"
# Two rounds, sort and merge taking turns; the better time of each is the figure (on a VM the
# first to touch memory another program freed pays for it). Each starts with nothing left to
# write back: sort leaves its output unsynced, and the disk writing it back would slow the
# merge's own writes and fsync.
sort_s= merge_s=
for round in 1 2; do
  sync
  t=$(now); LC_ALL=C sort -m -u "$work/a.jsonl" "$work/b.jsonl" > "$work/sorted.jsonl"; s=$(elapsed "$t")
  sort_lines=$(wc -l < "$work/sorted.jsonl")
  rm -f "$work/sorted.jsonl"
  cp "$work/a.jsonl" "$work/a/memory/timeline_events.jsonl"
  cp "$work/a-manifest.json" "$work/a/manifest.json"
  rm -f "$work/a/.capsule/journal.tail"
  sync
  read -r _ m added total < <("$journal_bench" merge "$work/a" "$work/b")
  "$journal_bench" verify "$work/a" > /dev/null || { echo "the merged journal does not verify"; exit 1; }
  sort_s=$(smaller "$sort_s" "$s")
  merge_s=$(smaller "$merge_s" "$m")
  printf '  round %d: merge %6.2fs   sort -m -u %6.2fs\n' "$round" "$m" "$s"
done
printf 'journal merge    %6.2fs   sort -m -u %6.2fs   ratio %sx   (%s added, %s in all; sort gave %s lines)\n' \
  "$merge_s" "$sort_s" "$(ratio "$merge_s" "$sort_s")" "$added" "$total" "$sort_lines"
fi

echo "== durable appends, $appends each, best of $append_rounds rounds taking turns at going first"
cat > "$work/append_loop.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char** argv) {
  int n = atoi(argv[2]);
  int size = atoi(argv[3]);
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
  char* line = malloc(size);
  memset(line, 'x', size);
  line[size - 1] = '\n';
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; ++i) {
    if (write(fd, line, size) != size || fdatasync(fd) != 0) return 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("loop %.0f\n", n / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9));
  return 0;
}
C
cc -O2 -o "$work/append_loop" "$work/append_loop.c"
"$capsule" init "$work/append" --id append --name Append >/dev/null
# The loop writes lines as long as the journal's: measured on a few appends first.
"$journal_bench" append "$work/append" 16 1 >/dev/null
line_bytes=$(tail -n 16 "$work/append/memory/timeline_events.jsonl" | wc -c)
line_bytes=$((line_bytes / 16))
echo "(lines of $line_bytes bytes)"
for writers in 1 4 16; do
  best_rate="" best_loop=""
  for round in $(seq 1 "$append_rounds"); do
    loop_first=$((round % 2))
    [ "$loop_first" = 1 ] && loop=$("$work/append_loop" "$work/append/loop.bin" "$appends" "$line_bytes" | awk '{print $2}')
    rate=$("$journal_bench" append "$work/append" "$appends" "$writers" | awk '{print $2}')
    [ "$loop_first" = 1 ] || loop=$("$work/append_loop" "$work/append/loop.bin" "$appends" "$line_bytes" | awk '{print $2}')
    printf '  %2d writer(s), round %d: %8.0f events/s   loop %8.0f/s   %sx\n' "$writers" "$round" "$rate" "$loop" "$(ratio "$rate" "$loop")"
    best_rate=$(larger "$best_rate" "$rate")
    best_loop=$(larger "$best_loop" "$loop")
  done
  printf 'append, %2d writer(s)  %8.0f events/s   C write+fdatasync loop %8.0f/s   ratio %sx   (best of %d each)\n' \
    "$writers" "$best_rate" "$best_loop" "$(ratio "$best_rate" "$best_loop")" "$append_rounds"
done
rm -f "$work/append/loop.bin"
[ -n "${KEEP:-}" ] || rm -rf "$work"
