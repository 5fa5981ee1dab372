#!/usr/bin/env bash
# `capsule mcp` end to end through the official MCP TypeScript SDK's client, and its tool
# schemas through the MCP Inspector's --strict check: runs a script of tests/mcp/
# (mcp_e2e_test.mjs, mcp_limits_test.mjs) with node against the built binaries.
#
#   tests/mcp_e2e_test.sh CAPSULE CAPSULEFS tests/mcp/mcp_e2e_test.mjs
#   tests/mcp_e2e_test.sh CAPSULE CAPSULEFS tests/mcp/mcp_limits_test.mjs
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
for package in sdk inspector; do
  if [ ! -d "$modules/@modelcontextprotocol/$package" ]; then
    echo "mcp_e2e_test: $modules has no @modelcontextprotocol/$package; run tests/setup.sh (npm ci --prefix tests/mcp)"
    exit 1
  fi
done
version() { node -p "require('$modules/@modelcontextprotocol/$1/package.json').version"; }
echo "mcp_e2e_test: node $(node --version), @modelcontextprotocol/sdk $(version sdk), @modelcontextprotocol/inspector $(version inspector)"
exec node "$script" "$capsule" "$capsulefs"
