#!/usr/bin/env bash
# Benchmark (not a test): rendering a 100,000-event journal into a 128k-token window for
# each provider, against reading (parsing and checking) the same journal file alone, as a
# ratio measured in the same run; then the same through the `capsule` program: `capsule
# render --context-tokens 131072` against `capsule log --json` of the same capsule.
#
#   tests/bench_render.sh [WORKDIR]
#   EVENTS=100000 ROUNDS=3 tests/bench_render.sh
#   BAZEL="bazel --output_base=DIR" tests/bench_render.sh    # a build of your own
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/bench_common.sh
events=${EVENTS:-100000}
rounds=${ROUNDS:-3}
work=${1:-$(mktemp -d /tmp/render-bench.XXXXXX)}
mkdir -p "$work"
rm -rf "$work/cap"

bazel=${BAZEL:-bazel}
$bazel build -c opt //:capsule //journal/render:render_bench >/dev/null 2>&1
bin=$($bazel info -c opt bazel-bin 2>/dev/null)
capsule="$bin/capsule"

echo "== library: render (window 128k and whole) against Journal::Read, best of $rounds"
"$bin/journal/render/render_bench" --events "$events" --rounds "$rounds" --dir "$work"

echo "== the program: capsule render against capsule log --json (both read the journal first)"
cat "$work/cap/memory/timeline_events.jsonl" > /dev/null
t=$(now); "$capsule" log "$work/cap" --json > /dev/null; log_s=$(elapsed "$t")
printf 'capsule log --json                               %6.2fs\n' "$log_s"
for provider in openai anthropic gemini; do
  case $provider in
    openai) model=gpt-4.1 ;;
    anthropic) model=claude-sonnet-4-5 ;;
    gemini) model=gemini-2.5-pro ;;
  esac
  t=$(now); "$capsule" render "$work/cap" --provider $provider --model $model --context-tokens 131072 > "$work/out.json"
  render_s=$(elapsed "$t")
  printf 'capsule render --provider %-9s window 128k %6.2fs  %8d bytes   render/log = %s\n' \
    "$provider" "$render_s" "$(stat -c %s "$work/out.json")" "$(ratio "$render_s" "$log_s")"
done
[ -n "${KEEP:-}" ] || rm -rf "$work"
