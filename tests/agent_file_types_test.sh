#!/usr/bin/env bash
# What capsule writes, checked by the types of those who read it: an agent imported from
# tests/agentfile/lighthouse.af, exported with `capsule export --format af`, must be an
# AgentFileSchema as the Letta client's serialization types give it (the JSON form of an agent
# file); its renders for OpenAI and Anthropic must be the SDKs' request bodies. Each JSON is
# written into a TypeScript file as an object literal of that type, so tsc --strict refuses a
# missing member, a wrong type and a member the type does not name.
#
#   tests/agent_file_types_test.sh CAPSULE tests/agentfile/package.json tests/agentfile/lighthouse.af
#
# The types come from tests/agentfile/node_modules, which tests/setup.sh installs with npm ci
# from tests/agentfile/package-lock.json (found through the runfiles link to the source tree).
set -euo pipefail
capsule=$(readlink -f "$1")
modules="$(dirname "$(readlink -f "$2")")/node_modules"
af=$(readlink -f "$3")
if ! command -v node >/dev/null || [ ! -x "$modules/.bin/tsc" ] || [ ! -d "$modules/@letta-ai/letta-client" ]; then
  echo "agent_file_types_test: $modules lacks typescript or @letta-ai/letta-client; run tests/setup.sh"
  exit 1
fi
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/aftypes.XXXXXX")
trap 'rm -rf "$work"' EXIT
ln -s "$modules" "$work/node_modules"

"$capsule" import "$af" "$work/lighthouse" >/dev/null 2>&1
for agent in Scribe Lamp-helper; do
  "$capsule" export "$work/lighthouse/$agent" --format af -o "$work/$agent.af" >/dev/null
  "$capsule" render "$work/lighthouse/$agent" --provider openai --model gpt-4.1-mini >"$work/$agent.openai.json"
  "$capsule" render "$work/lighthouse/$agent" --provider anthropic --model claude-sonnet-4-5 >"$work/$agent.anthropic.json"
done

{
  echo 'import type { AgentFileSchema } from "@letta-ai/letta-client/serialization/types/AgentFileSchema";'
  echo 'import type { ChatCompletionCreateParamsNonStreaming } from "openai/resources/chat/completions";'
  echo 'import type { MessageCreateParamsNonStreaming } from "@anthropic-ai/sdk/resources/messages";'
  for agent in Scribe Lamp-helper; do
    name=${agent//-/_}
    echo "export const ${name}_af: AgentFileSchema.Raw = $(cat "$work/$agent.af");"
    echo "export const ${name}_openai: ChatCompletionCreateParamsNonStreaming = $(cat "$work/$agent.openai.json");"
    echo "export const ${name}_anthropic: MessageCreateParamsNonStreaming = $(cat "$work/$agent.anthropic.json");"
  done
} >"$work/check.ts"
cat >"$work/tsconfig.json" <<'JSON'
{"compilerOptions": {"strict": true, "noEmit": true, "target": "es2022", "module": "commonjs",
 "moduleResolution": "node", "skipLibCheck": true, "types": []}, "files": ["check.ts"]}
JSON
version() { node -p "require('$modules/$1/package.json').version"; }
echo "agent_file_types_test: typescript $(version typescript), @letta-ai/letta-client $(version @letta-ai/letta-client), openai $(version openai), @anthropic-ai/sdk $(version @anthropic-ai/sdk)"
cd "$work"
node "$modules/typescript/bin/tsc" -p tsconfig.json
# The checker itself: a member the agent file type does not name must be refused.
sed -i '0,/"agents":\[{/s//"agents":[{"not_a_member":1,/' check.ts
if node "$modules/typescript/bin/tsc" -p tsconfig.json >/dev/null 2>&1; then
  echo "agent_file_types_test: tsc took a member AgentFileSchema does not name: the check checks nothing"
  exit 1
fi
echo "agent_file_types_test: ok"
