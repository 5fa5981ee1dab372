#!/usr/bin/env bash
# Benchmark (not a test): the owned-state database (.capsule/owned.db).
#  1. capsule reindex of a generated 1,000,000-event journal, against a bare SQLite bulk
#     insert of the same rows into the same schema (prepared statements, one transaction,
#     synced), and against INSERT ... SELECT (SQLite copying them itself), in the same run;
#  2. what following the journal adds to one append (with and without fdatasync), and what a
#     query pays to find the database already current.
# Then the same reindex through the real binary, for the figure a user sees.
#
#   tests/bench_owned.sh [WORKDIR]
#   EVENTS=1000000 APPENDS=1000 tests/bench_owned.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/bench_common.sh
events=${EVENTS:-1000000}
appends=${APPENDS:-1000}
work=${1:-$(mktemp -d /tmp/owned-bench.XXXXXX)}
mkdir -p "$work"

bazel build -c opt //journal/owned:owned_bench //:capsule >/dev/null 2>&1
echo "== owned_bench: $events events, $appends appends"
KEEP=1 bazel-bin/journal/owned/owned_bench "$work" "$events" "$appends"

echo "== the same journal through the binary"
t=$(now); bazel-bin/capsule reindex "$work/cap"; reindex_s=$(elapsed "$t")
printf 'capsule reindex (binary) %6.2fs\n' "$reindex_s"
t=$(now); bazel-bin/capsule sql "$work/cap" "SELECT count(*) FROM agent_runs WHERE closed_at IS NULL" >/dev/null; query_s=$(elapsed "$t")
printf 'capsule sql, runs in flight (process start included) %6.3fs\n' "$query_s"
bazel-bin/capsule sql "$work/cap" "SELECT (SELECT count(*) FROM journal_events), (SELECT count(*) FROM messages), (SELECT count(*) FROM agent_facts), (SELECT count(*) FROM agent_runs), (SELECT count(*) FROM blobs)" |
  awk -F'\t' '{printf "rows: %s events, %s messages, %s facts, %s runs, %s blobs\n", $1, $2, $3, $4, $5}'
[ -n "${KEEP:-}" ] || rm -rf "$work"
