#!/usr/bin/env bash
# Measures capsule seal and capsule open against OpenSSL's raw AES-256-GCM speed.
# Not a test: run it by hand after building the program.
#
#   bazel build -c opt //:capsule
#   tests/bench_seal.sh            # 512 MiB
#   tests/bench_seal.sh 64         # 64 MiB
#
# Seals a file of random bytes through bazel-bin/capsule seal (file to file, then file to
# /dev/null), opens it
# (file to /dev/null; a second, untimed pass checks the result), and prints MB/s (10^6 bytes
# per second of plaintext) for each, next to `openssl speed -evp aes-256-gcm -bytes 16384
# -seconds 3` and the ratio. Files live in a temporary folder under ${TMPDIR:-/tmp}.
set -euo pipefail

mib=${1:-512}
top=$(cd "$(dirname "$0")/.." && pwd)
bin=$top/bazel-bin/capsule
[ -x "$bin" ] || { echo "bench_seal: $bin missing; run bazel build //:capsule first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bytes=$((mib * 1024 * 1024))
head -c "$bytes" /dev/urandom >"$tmp/plain"
pub=$("$bin" keygen --type x25519 -o "$tmp/key.pem")

now() { date +%s.%N; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f", b / 1e6 / s }'; }

cat "$tmp/plain" >/dev/null  # warm the page cache
t0=$(now); "$bin" seal --to "$pub" <"$tmp/plain" >"$tmp/sealed"; t1=$(now)
"$bin" open --key "$tmp/key.pem" <"$tmp/sealed" >/dev/null; t2=$(now)
"$bin" seal --to "$pub" <"$tmp/plain" >/dev/null; t3=$(now)
"$bin" open --key "$tmp/key.pem" <"$tmp/sealed" | cmp -s - "$tmp/plain" || { echo "bench_seal: round trip differs" >&2; exit 1; }

seal_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
open_s=$(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }')
null_s=$(awk -v a="$t2" -v b="$t3" 'BEGIN { print b - a }')
seal_mbps=$(mbps "$bytes" "$seal_s")
null_mbps=$(mbps "$bytes" "$null_s")
open_mbps=$(mbps "$bytes" "$open_s")
# "AES-256-GCM    3907376.85k": thousands of bytes per second.
openssl_mbps=$(openssl speed -evp aes-256-gcm -bytes 16384 -seconds 3 2>/dev/null |
  awk '/^(AES-256-GCM|aes-256-gcm)/ { sub(/k$/, "", $NF); printf "%.0f", $NF / 1000 }')

echo "plaintext:                       $mib MiB ($bytes bytes), sealed $(stat -c %s "$tmp/sealed") bytes"
echo "capsule seal (file -> file):     $seal_mbps MB/s (${seal_s}s)"
echo "capsule seal (file -> /dev/null): $null_mbps MB/s (${null_s}s)"
echo "capsule open (file -> /dev/null): $open_mbps MB/s (${open_s}s)"
echo "openssl speed aes-256-gcm 16 KiB: $openssl_mbps MB/s"
awk -v s="$seal_mbps" -v n="$null_mbps" -v o="$open_mbps" -v r="$openssl_mbps" \
  'BEGIN { printf "ratio to openssl:                seal to file %.2f, seal to /dev/null %.2f, open %.2f\n", s / r, n / r, o / r }'
echo "load average:                    $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
