#!/usr/bin/env bash
# The quickest way to see capsulefs work: sets up what is missing, builds, and walks through
# the main job on a sample agent, printing each command before it runs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/setup.sh
echo "== building"
bazel build //:capsule 2>&1 | grep -vE "^[0-9]+\.[0-9]+: src/main/tools/linux-sandbox" | tail -n 3
capsule="$PWD/bazel-bin/capsule"

work=$(mktemp -d /tmp/capsule-demo.XXXXXX)
cd "$work"
step() { echo; echo "\$ $*"; "$@"; }
step_may_fail() { echo; echo "\$ $*"; "$@" || echo "(exit $?)"; }

echo
echo "== a sample workspace for an agent"
mkdir -p workspace/src
printf '# Trip planner\nPlans trips.\n' > workspace/README.md
printf 'def plan(city):\n    return f"3 days in {city}"\n' > workspace/src/plan.py
cp workspace/src/plan.py workspace/src/plan_copy.py

step "$capsule" init agent --id trip-planner --name "Trip planner" --owner demo --workspace workspace
step ls -R agent
step cat agent/artifacts/snapshot.json
echo
step "$capsule" verify agent

echo
echo "== a deterministic, signed export that any tar reads"
echo
echo "\$ $capsule keygen --type ed25519 -o sign.key > sign.pub"
"$capsule" keygen --type ed25519 -o sign.key | tee sign.pub
step "$capsule" export agent -o agent.tar --sign sign.key
step "$capsule" export agent -o again.tar --sign sign.key
step cmp agent.tar again.tar
step tar -tvf agent.tar
step "$capsule" verify agent.tar --pubkey sign.pub

echo
echo "== damage a copy: flip a byte, truncate a file, add one, remove one"
cp -a agent damaged
blob=$(ls damaged/artifacts/blobs | head -n 1)
printf 'X' | dd of="damaged/artifacts/blobs/$blob" bs=1 seek=0 conv=notrunc status=none
truncate -s 5 damaged/memory/working_memory.md
echo "stray" > damaged/memory/stray.txt
rm damaged/memory/vector_index/index.json
step_may_fail "$capsule" verify damaged

echo
echo "== an import verifies before it places anything"
step "$capsule" import agent.tar restored
step "$capsule" verify restored
echo
echo "demo files are in $work"
