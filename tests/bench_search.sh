#!/usr/bin/env bash
# Benchmark (not a test): search over the owned state (journal/owned/search_bench.cc).
#  1. capsule reindex of a generated journal of 1,000,000 messages, FTS5 included, beside a
#     bare FTS5 build of the same texts (the reindex without FTS is the difference);
#  2. lexical query latency, p50 and p99, through Search and of the FTS5 query alone;
#  3. 100,000 random 384-dimension vectors: HNSW build, query p50 and p99 beside brute force
#     in the same run, recall at 10;
#  4. peak resident memory.
# Then a search through the binary, for the figure a user sees (process start included).
#
#   tests/bench_search.sh [WORKDIR]
#   MESSAGES=1000000 VECTORS=100000 tests/bench_search.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/bench_common.sh
messages=${MESSAGES:-1000000}
vectors=${VECTORS:-100000}
work=${1:-$(mktemp -d /tmp/search-bench.XXXXXX)}
mkdir -p "$work"

bazel build -c opt //journal/owned:search_bench //:capsule >/dev/null 2>&1
echo "== search_bench: $messages messages, $vectors vectors"
KEEP=1 bazel-bin/journal/owned/search_bench "$work" "$messages" "$vectors"

echo "== through the binary"
t=$(now); bazel-bin/capsule search "$work/cap" "w1 w2" --k 10 >/dev/null; search_s=$(elapsed "$t")
printf 'capsule search (process start included) %6.3fs\n' "$search_s"
[ -n "${KEEP:-}" ] || rm -rf "$work"
