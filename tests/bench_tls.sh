#!/usr/bin/env bash
# Benchmark (not a test): the sidecar transport (TLS 1.3, both ends authenticated) against
# plain TCP over 127.0.0.1 in the same run: bulk throughput one way, and the cost of setting
# up a connection (mutual-certificate handshake against a TCP connect).
#
#   tests/bench_tls.sh [MIB] [CONNECTIONS]      defaults: 1024 MiB, 200 connections
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}
connections=${2:-200}
work=$(mktemp -d /tmp/tls-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

# BAZEL="bazel --output_base=..." to build with an output base of your own.
${BAZEL:-bazel} build -c opt //move:tls_channel_bench >/dev/null 2>&1
tests/make_pki.sh "$work/pki"
echo "openssl: $(openssl version)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
bazel-bin/move/tls_channel_bench "$work/pki" "$mib" "$connections"
