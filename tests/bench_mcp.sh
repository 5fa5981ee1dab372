#!/usr/bin/env bash
# Benchmark (not a test): tool calls per second through `capsule mcp`, for append
# (history_append) and recall (memory_recall of 20 facts), against the same operations through
# the C++ ports directly, measured in the same run on fresh capsules of the same disk:
#  1. mcp_bench: the ports in process, then a real `capsule mcp` process over pipes, one call
#     answered before the next is sent;
#  2. the same calls from the official MCP TypeScript SDK's client (what a framework sees),
#     when tests/setup.sh has installed it.
# Appends are durable in every column (fdatasync before the answer).
#
#   tests/bench_mcp.sh [CALLS] [WORKDIR]       (CALLS defaults to 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/bench_common.sh
calls=${1:-2000}
work=${2:-$(mktemp -d /tmp/mcp-bench.XXXXXX)}
mkdir -p "$work"

bazel build -c opt //mcp:mcp_bench //:capsule >/dev/null 2>&1
echo "== the C++ ports vs capsule mcp over pipes: $calls calls each"
bazel-bin/mcp/mcp_bench bazel-bin/capsule "$work/pipes" "$calls" | tee "$work/pipes.txt"
ports_append=$(awk '/^append/ {print $(NF-2)}' "$work/pipes.txt")
ports_recall=$(awk '/^recall/ {print $(NF-2)}' "$work/pipes.txt")

if [ -d tests/mcp/node_modules/@modelcontextprotocol/sdk ] && command -v node >/dev/null; then
  echo "== capsule mcp from the official MCP TypeScript SDK's client: $calls calls each"
  bazel-bin/capsule init "$work/sdk" --id bench --name Bench >/dev/null
  node tests/mcp/bench_client.mjs bazel-bin/capsule "$work/sdk" "$calls" > "$work/sdk.txt"
  sdk_append=$(awk '/^append/ {print $2}' "$work/sdk.txt")
  sdk_recall=$(awk '/^recall/ {print $2}' "$work/sdk.txt")
  printf '%-32s %12s %12s %8s\n' "operation" "ports/s" "sdk/s" "sdk/ports"
  printf '%-32s %12s %12s %8.2f\n' "append (history_append)" "$ports_append" "$sdk_append" "$(ratio "$sdk_append" "$ports_append")"
  printf '%-32s %12s %12s %8.2f\n' "recall 20 facts (memory_recall)" "$ports_recall" "$sdk_recall" "$(ratio "$sdk_recall" "$ports_recall")"
else
  echo "== no MCP TypeScript SDK in tests/mcp/node_modules (tests/setup.sh installs it): SDK figures skipped"
fi
[ -n "${KEEP:-}" ] || rm -rf "$work"
