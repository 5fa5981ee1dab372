#!/usr/bin/env bash
# The mount in one sitting: mounts a sample capsule, looks at it with ls and cat, writes a
# workspace file through it, freezes and thaws it, unmounts and verifies. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== building"
bazel --output_base=/root/.cache/bazel-fs build //:capsule //:capsulefs 2>&1 | tail -n 1
capsule="$PWD/bazel-bin/capsule"
capsulefs="$PWD/bazel-bin/capsulefs"

work=$(mktemp -d /tmp/capsulefs-demo.XXXXXX)
cd "$work"
step() { echo; echo "\$ $*"; "$@"; }
step_may_fail() { echo; echo "\$ $*"; "$@" || echo "(exit $?)"; }
cleanup() { fusermount3 -u "$work/mnt" 2>/dev/null || true; }
trap cleanup EXIT

mkdir -p workspace/src mnt
printf '# Trip planner\nPlans trips.\n' > workspace/README.md
printf 'def plan(city):\n    return f"3 days in {city}"\n' > workspace/src/plan.py
step "$capsule" init agent --id trip-planner --name "Trip planner" --workspace workspace

echo; echo "== mount it (in the background; -f keeps it in the foreground)"
step "$capsulefs" agent mnt
step ls -la mnt mnt/files mnt/memory
step cat mnt/files/README.md
step "$capsule" status mnt

echo; echo "== write through the mount: visible whole at close"
echo '$ echo "print(plan(\"Kyoto\"))" >> mnt/files/src/plan.py'
echo 'print(plan("Kyoto"))' >> mnt/files/src/plan.py
step cat mnt/files/src/plan.py
step cat mnt/artifacts/snapshot.json
step_may_fail sh -c 'echo "{}" > mnt/manifest.json'
step_may_fail sh -c 'echo "{}" >> mnt/memory/timeline_events.jsonl'
step_may_fail python3 -c 'f = open("mnt/environment/spec.json", "w"); f.write("{\"env\":{\"API_KEY\":\"sk-1\"}}"); f.close()'
step cat mnt/environment/spec.json

echo; echo "== freeze: writes wait, reads go on; thaw lets them go"
step "$capsule" freeze mnt
step "$capsule" verify agent
echo '$ (echo later > mnt/files/later.txt; echo "writer done") &'
(echo later > mnt/files/later.txt; echo "writer done") &
sleep 1
step cat mnt/files/README.md
step "$capsule" thaw mnt
wait
step cat mnt/files/later.txt

echo; echo "== unmount; the folder is a complete capsule"
step fusermount3 -u mnt
for _ in $(seq 50); do pgrep -f "capsulefs agent mnt" >/dev/null || break; sleep 0.1; done
step "$capsule" verify agent
step "$capsule" status agent
echo; echo "demo folder: $work"
