#!/usr/bin/env bash
# `capsule mcp` end to end through the official MCP TypeScript SDK's client: runs
# tests/mcp/mcp_e2e_test.mjs with node against the built binaries.
#
#   tests/mcp_e2e_test.sh CAPSULE CAPSULEFS tests/mcp/mcp_e2e_test.mjs
#
# The client comes from tests/mcp/node_modules, which tests/setup.sh installs with npm ci from
# tests/mcp/package-lock.json. The script is found through its runfiles link, resolved to the
# source tree, so that node finds node_modules beside it.
set -euo pipefail
capsule=$(readlink -f "$1")
capsulefs=$(readlink -f "$2")
script=$(readlink -f "$3")
modules="$(dirname "$script")/node_modules"
if ! command -v node >/dev/null; then
  echo "mcp_e2e_test: node is not installed; run tests/setup.sh"
  exit 1
fi
if [ ! -d "$modules/@modelcontextprotocol/sdk" ]; then
  echo "mcp_e2e_test: $modules has no @modelcontextprotocol/sdk; run tests/setup.sh (npm ci --prefix tests/mcp)"
  exit 1
fi
echo "mcp_e2e_test: node $(node --version), @modelcontextprotocol/sdk $(node -p "require('$modules/@modelcontextprotocol/sdk/package.json').version")"
exec node "$script" "$capsule" "$capsulefs"
