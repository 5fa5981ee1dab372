#!/usr/bin/env bash
# The quickest way to see capsulefs work: sets up what is missing, builds, and walks through
# the main job on a sample agent, printing each command before it runs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/setup.sh
echo "== building"
bazel build //:capsule //:capsulefs 2>&1 | grep -vE "^[0-9]+\.[0-9]+: src/main/tools/linux-sandbox" | tail -n 3
capsule="$PWD/bazel-bin/capsule"
capsulefs="$PWD/bazel-bin/capsulefs"
samples="$PWD/tests/agentfile"

work=$(mktemp -d /tmp/capsule-demo.XXXXXX)
cd "$work"
# Prints a command as one would type it: plain words bare, others in single quotes.
show() {
  local line='$' word
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z0-9_./:=@+-]+$ ]]; then line+=" $word"; else line+=" '$word'"; fi
  done
  echo
  echo "$line"
}
step() { show "$@"; "$@"; }
step_may_fail() { show "$@"; "$@" || echo "(exit $?)"; }

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
echo "== the journal: hash-chained events, appended durably"
step "$capsule" log append agent --type system --data '{"text":"You plan trips."}'
step "$capsule" log append agent --type user_message --data '{"text":"Three days in Lisbon?"}'
step "$capsule" log append agent --type tool_call --data '{"call_id":"c1","name":"search","arguments":{"q":"Lisbon"}}'
step_may_fail "$capsule" log append agent --type tool_call --data '{"call_id":"c2","name":"search","arguments":"not an object"}'
step "$capsule" log agent
step "$capsule" verify agent

echo
echo "== moving the state: a Move Stream copy, then a sealed switch with only what changed"
"$capsule" keygen --type x25519 -o target.key > target.pub
step "$capsule" stream pack agent --phase copy -o copy.stream
step "$capsule" stream unpack copy.stream target
move=$(grep -ao '"move":"[0-9a-f]*"' copy.stream | head -n 1 | cut -d'"' -f4)
"$capsule" stream have target > target.have
step "$capsule" log append agent --type user_message --data '{"text":"And a day trip to Sintra."}'
step "$capsule" stream pack agent --phase switch --move "$move" --have target.have --seal-to "$(cat target.pub)" -o switch.stream
step head -c 8 switch.stream
echo
step "$capsule" stream unpack switch.stream target --open-with target.key
step "$capsule" log target
step "$capsule" verify target

echo
echo "== an import verifies before it places anything"
step "$capsule" import agent.tar restored
step "$capsule" verify restored
echo
echo "== the live mount: ls and cat the agent, write its workspace and journal directly"
mkdir -p mnt
cleanup() { fusermount3 -u "$work/mnt" 2>/dev/null || true; }
trap cleanup EXIT
step "$capsulefs" agent mnt
step ls mnt mnt/files mnt/memory
step cat mnt/files/README.md
step "$capsule" status mnt
echo
echo '$ echo "print(plan(\"Kyoto\"))" >> mnt/files/src/plan.py'
echo 'print(plan("Kyoto"))' >> mnt/files/src/plan.py
step cat mnt/files/src/plan.py
echo
echo "\$ echo '{\"type\":\"user_message\",\"data\":{\"text\":\"Written through the mount.\"}}' >> mnt/memory/timeline_events.jsonl"
echo '{"type":"user_message","data":{"text":"Written through the mount."}}' >> mnt/memory/timeline_events.jsonl
step tail -n 1 mnt/memory/timeline_events.jsonl
step_may_fail bash -c 'echo "not json" >> mnt/memory/timeline_events.jsonl'
step_may_fail bash -c 'echo "{\"env\":{\"API_KEY\":\"sk-1\"}}" > mnt/environment/spec.json'
step cat mnt/environment/spec.json
echo

echo
echo "== instructions, a skill, a narrowed thread and a job: plain files any editor opens"
echo "\$ printf 'You plan trips for busy people. Keep answers short.\\n' > mnt/harness/instructions.md"
printf 'You plan trips for busy people. Keep answers short.\n' > mnt/harness/instructions.md
step mkdir -p mnt/harness/skills/itinerary
echo "\$ printf -- '---\\nname: itinerary\\ndescription: Write a day-by-day itinerary\\n---\\nOne heading per day ...\\n' > mnt/harness/skills/itinerary/SKILL.md"
printf -- '---\nname: itinerary\ndescription: Write a day-by-day itinerary\n---\nOne heading per day, then morning, afternoon, evening.\n' \
  > mnt/harness/skills/itinerary/SKILL.md
step "$capsule" narrow mnt research --tools search
step mkdir -p mnt/schedule/waiting
echo "\$ echo '{\"id\":\"fares\",\"prompt\":\"Check the Lisbon fares\",\"at\":\"2026-12-04T08:00:00Z\"}' > mnt/schedule/waiting/fares.json"
echo '{"id":"fares","prompt":"Check the Lisbon fares","at":"2026-12-04T08:00:00Z"}' > mnt/schedule/waiting/fares.json
step_may_fail bash -c 'echo "{\"id\":\"fares\"}" > mnt/schedule/waiting/fares.json'
step "$capsule" threads mnt
echo

echo
echo "== freeze: writes wait, reads go on (a new entry is refused after a second: EBUSY); thaw lets them go"
step "$capsule" freeze mnt
step "$capsule" verify agent
echo '$ (echo later >> mnt/files/README.md; echo "writer done") &'
(echo later >> mnt/files/README.md; echo "writer done") &
sleep 1
step ls mnt/files
step cat mnt/files/README.md
step_may_fail touch mnt/files/new.txt
step "$capsule" thaw mnt
wait
step cat mnt/files/README.md

echo
echo "== unmount: the folder is a complete capsule again"
step fusermount3 -u mnt
for _ in $(seq 50); do pgrep -f "capsulefs agent mnt" >/dev/null || break; sleep 0.1; done
step "$capsule" log agent
step "$capsule" verify agent

echo
echo "== render: the same journal as each provider's request; the model switches, nothing is lost"
step "$capsule" log append agent --type model_switch --data '{"provider":"anthropic","model":"claude-sonnet-4-5"}'
step "$capsule" log append agent --type reasoning --data '{"provider":"anthropic","model":"claude-sonnet-4-5","text":"Plan the route.","signature":"sig-demo"}'
step "$capsule" log append agent --type tool_call --data '{"call_id":"toolu_1","name":"route","arguments":{"to":"Lisbon"}}'
step "$capsule" render agent --pretty
step "$capsule" render agent --provider gemini --model gemini-2.5-pro --pretty
step "$capsule" render agent --provider openai --model gpt-4.1 --context-tokens 200
echo
echo "== an agent from Letta's Agent File: blocks, tools and history in a capsule, rendered, and back"
step "$capsule" import "$samples/lighthouse.af" lighthouse --agent Scribe
step cat lighthouse/memory/blocks/human.md
echo
step "$capsule" render lighthouse --provider openai --model gpt-4.1 --pretty
step "$capsule" export lighthouse --format af -o lighthouse.af
echo
echo "== owned state: history, facts with provenance and runs, in SQL, projected from the journal"
said=$("$capsule" log append agent --type user_message --data '{"text":"I only fly in the morning."}')
show "$capsule" log append agent --type user_message --data '{"text":"I only fly in the morning."}'
echo "$said"
step "$capsule" log append agent --type fact_remembered --data "{\"subject\":\"user\",\"key\":\"flight_time\",\"value\":\"morning\",\"confidence\":0.9,\"source\":\"$said\"}"
step "$capsule" log append agent --type run_opened --data '{"run_id":"book-1","framework":"langgraph","thread_key":"kyoto"}'
step "$capsule" log append agent --type run_awaiting --data '{"run_id":"book-1","awaiting":"approval of the booking"}'
step "$capsule" facts agent user
step "$capsule" why agent user flight_time
step "$capsule" runs agent --in-flight
step "$capsule" sql agent "SELECT seq, role, content, tokens FROM messages ORDER BY seq"
step_may_fail "$capsule" sql agent "DELETE FROM messages"
step rm agent/.capsule/owned.db
step "$capsule" sql agent "SELECT count(*) FROM agent_facts"
echo
echo "== one run of a command: the spec's secrets from the kernel keyring, in the agent's sandbox"
step "$capsule" init runner --id demo-runner --name "Runner"
mkdir -p rmnt
"$capsulefs" runner rmnt
echo "\$ echo '{\"env\":{\"CITY\":\"Lisbon\"},\"image\":\"debian:12\",\"packages\":[\"hello\"],\"secrets\":[\"BOOKING_API_KEY\"]}' > environment/spec.json (through a mount)"
echo '{"env":{"CITY":"Lisbon"},"image":"debian:12","packages":["hello"],"secrets":["BOOKING_API_KEY"]}' > rmnt/environment/spec.json
fusermount3 -u rmnt
"$capsule" secret rm demo-runner BOOKING_API_KEY >/dev/null 2>&1 || true
step_may_fail "$capsule" exec --no-sandbox runner -- sh -c 'echo "$CITY"'
echo
echo '$ echo sk-demo-4f1c9b | capsule secret set demo-runner BOOKING_API_KEY'
echo sk-demo-4f1c9b | "$capsule" secret set demo-runner BOOKING_API_KEY
step "$capsule" secret ls demo-runner
step "$capsule" exec --no-sandbox runner -- sh -c 'echo "a key of ${#BOOKING_API_KEY} characters for $CITY" > booking.txt; cat booking.txt'
step_may_fail grep -rl sk-demo-4f1c9b runner
step "$capsule" log runner
if "$capsule" sandbox build runner; then
  step "$capsule" exec runner -- hello
  step command -v hello || echo "(the host has no hello: it is the sandbox's)"
  step "$capsule" exec runner -- sh -c 'pwd; ls; ls -a /root; cut -d: -f1 /proc/net/dev | tail -n +3; echo "key: ${#BOOKING_API_KEY} chars"; hello -g "written in the sandbox" > greeting.txt'
  step "$capsule" exec --no-sandbox runner -- cat greeting.txt
  step "$capsule" sandbox ls
  step "$capsule" verify runner
else
  echo "(sandbox part skipped: the sandbox could not be built here; mmdebstrap needs the Debian mirror)"
fi
"$capsule" secret rm demo-runner BOOKING_API_KEY >/dev/null
echo
echo "== move: another machine's sidecar takes the agent over (TLS 1.3, both ends by certificate)"
repo=$(dirname "$(dirname "$capsule")")
"$repo/tests/make_pki.sh" pki >/dev/null
step "$capsule" keygen --type x25519 -o seal.key
mkdir -p machine-b
show "$capsule" serve --root machine-b --listen 127.0.0.1:0 --cert pki/server.pem --key pki/server.key \
  --ca pki/ca.pem --seal-key seal.key "&"
"$capsule" serve --root machine-b --listen 127.0.0.1:0 --cert pki/server.pem --key pki/server.key \
  --ca pki/ca.pem --seal-key seal.key >serve.out 2>serve.err &
serve_pid=$!
for _ in $(seq 50); do [ -s serve.out ] && break; sleep 0.1; done
cat serve.out
addr=$(head -1 serve.out | sed 's/^listening on //')
step_may_fail "$capsule" move agent --to "$addr" --cert pki/client.pem --key pki/client.key --ca pki/ca.pem
step "$capsule" schedule pause agent
step "$capsule" move agent --to "$addr" --cert pki/client.pem --key pki/client.key --ca pki/ca.pem
step "$capsule" status agent
step "$capsule" status machine-b/trip-planner
step "$capsule" verify machine-b/trip-planner
step "$capsule" threads machine-b/trip-planner
step ls -R machine-b/trip-planner/harness machine-b/trip-planner/schedule
step "$capsule" schedule status machine-b/trip-planner
step_may_fail "$capsule" log append agent --type user_message --data '{"text":"from the old machine"}'
kill "$serve_pid"
echo
echo "demo files are in $work"
