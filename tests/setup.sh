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
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
