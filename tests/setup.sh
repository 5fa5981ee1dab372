#!/usr/bin/env bash
# Installs what capsulefs needs to build and test, from Debian's packages only.
# Safe to run again: it installs only what is missing. Needs root (or sudo).
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-cc bazel-rules-java bazel-skylib bazel-platforms
  g++ libfuse3-dev fuse3 libsqlite3-dev libssl-dev openssl nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libspdlog-dev libfmt-dev
  mandoc libarchive-tools tar coreutils python3 bc clang-14 libclang-rt-14-dev
  git sqlite3 make gcc rsync python3-venv diffutils
  libkeyutils-dev keyutils mmdebstrap bubblewrap
  libseccomp-dev libhnswlib-dev
  lintian dpkg-dev file libsystemd-dev systemd
  etcd-server etcd-client libcurl4-openssl-dev
  python3-prometheus-client
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm run the MCP end-to-end test's client (tests/mcp/). Debian's, unless the
# machine already has both commands (a Node.js package that ships its own npm conflicts with
# Debian's npm, so the commands are what is checked, not the package names).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# The MCP client the end-to-end test drives the server with, and the MCP Inspector whose
# command line checks the server's tool schemas (--strict), at the versions
# tests/mcp/package-lock.json pins; again only when it is missing or the lock file changed. No
# package's install script runs: none is needed (the Inspector's only installs its own clients
# from a source checkout). The Inspector declares Node.js 22; its command line runs on Node.js
# 20 as well (npm warns of the engine, and goes on).
mcp="$(cd "$(dirname "$0")" && pwd)/mcp"
if [ ! -f "$mcp/node_modules/.package-lock.json" ] || [ "$mcp/package-lock.json" -nt "$mcp/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci in tests/mcp"
  npm ci --prefix "$mcp" --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
fi

# The agent file test's type checker (tests/agentfile/): TypeScript, the Letta client whose
# serialization types describe an agent file, and the OpenAI and Anthropic SDKs whose request
# types a rendered body must fit, at the versions tests/agentfile/package-lock.json pins.
agentfile="$(cd "$(dirname "$0")" && pwd)/agentfile"
if [ ! -f "$agentfile/node_modules/.package-lock.json" ] || [ "$agentfile/package-lock.json" -nt "$agentfile/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci in tests/agentfile"
  npm ci --prefix "$agentfile" --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
fi
