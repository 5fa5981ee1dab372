#!/usr/bin/env bash
# Benchmark (not a test): capsule verify against sha256sum and openssl dgst, and capsule
# export against GNU tar, on a generated capsule of about 1 GiB (20,000 small files and a few
# large ones), measured in the same run with a warm page cache for every contender.
#
#   tests/bench_capsule.sh [WORKDIR]
#   SMALL_FILES=20000 SMALL_KIB=24 LARGE_FILES=4 LARGE_MIB=128 tests/bench_capsule.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/bench_common.sh
small_files=${SMALL_FILES:-20000}
small_kib=${SMALL_KIB:-24}
large_files=${LARGE_FILES:-4}
large_mib=${LARGE_MIB:-128}
work=${1:-$(mktemp -d /tmp/capsule-bench.XXXXXX)}
mkdir -p "$work"

bazel build -c opt //:capsule >/dev/null 2>&1
capsule="$PWD/bazel-bin/capsule"


ws="$work/ws"
rm -rf "$ws" "$work/cap" "$work"/*.tar
generate_workspace "$ws" "$small_files" "$small_kib" "$large_files" "$large_mib"

t=$(now); "$capsule" init "$work/cap" --id bench --name Bench --workspace "$ws" >/dev/null; init_s=$(elapsed "$t")
bytes=$(du -sb "$work/cap" | cut -f1)
files=$(find "$work/cap" -type f -not -path '*/.capsule/*' | wc -l)
echo "capsule: $files files, $((bytes / 1024 / 1024)) MiB (init took ${init_s}s: blobs written, staging folder synced once, placed by rename)"

# Warm the page cache for everyone.
find "$work/cap" -type f -not -path '*/.capsule/*' -print0 | xargs -0 cat > /dev/null

echo "== verify against sha256sum of the same files"
t=$(now); "$capsule" verify "$work/cap" >/dev/null; verify_s=$(elapsed "$t")
t=$(now); (cd "$work/cap" && find . -type f -not -path './.capsule/*' -print0 | xargs -0 sha256sum > /dev/null); sha_s=$(elapsed "$t")
t=$(now); (cd "$work/cap" && find . -type f -not -path './.capsule/*' -print0 | xargs -0 -P 2 -n 500 sha256sum > /dev/null); sha2_s=$(elapsed "$t")
# OpenSSL's SHA-256 (the one capsule uses, with the CPU's SHA instructions where it has them).
t=$(now); (cd "$work/cap" && find . -type f -not -path './.capsule/*' -print0 | xargs -0 -P 2 -n 500 openssl dgst -sha256 > /dev/null); dgst2_s=$(elapsed "$t")
printf 'capsule verify        %6.2fs  %7.1f MB/s\n' "$verify_s" "$(echo "$bytes / 1000000 / $verify_s" | bc -l)"
printf 'sha256sum (1 process) %6.2fs  %7.1f MB/s   verify speed = %sx sha256sum\n' "$sha_s" "$(echo "$bytes / 1000000 / $sha_s" | bc -l)" "$(ratio "$sha_s" "$verify_s")"
printf 'sha256sum (xargs -P2) %6.2fs  %7.1f MB/s   verify speed = %sx that\n' "$sha2_s" "$(echo "$bytes / 1000000 / $sha2_s" | bc -l)" "$(ratio "$sha2_s" "$verify_s")"
printf 'openssl dgst -sha256 (xargs -P2) %6.2fs  %7.1f MB/s   verify takes %sx its time\n' "$dgst2_s" "$(echo "$bytes / 1000000 / $dgst2_s" | bc -l)" "$(ratio "$verify_s" "$dgst2_s")"

echo "== export against GNU tar of the same folder"
t=$(now); "$capsule" export "$work/cap" -o "$work/capsule.tar" >/dev/null; export_s=$(elapsed "$t")
t=$(now); tar -cf "$work/gnu.tar" -C "$work/cap" --exclude=./.capsule .; tar_s=$(elapsed "$t")
t=$(now); tar -cf "$work/gnu-sync.tar" -C "$work/cap" --exclude=./.capsule . && sync -f "$work/gnu-sync.tar"; tar_sync_s=$(elapsed "$t")
printf 'capsule export        %6.2fs  (hashes every file, fsyncs the tar)\n' "$export_s"
printf 'GNU tar               %6.2fs   export speed = %sx GNU tar\n' "$tar_s" "$(ratio "$tar_s" "$export_s")"
printf 'GNU tar + sync        %6.2fs   export speed = %sx GNU tar + sync\n' "$tar_sync_s" "$(ratio "$tar_sync_s" "$export_s")"
echo "tar sizes: capsule $(stat -c %s "$work/capsule.tar"), GNU $(stat -c %s "$work/gnu.tar")"
[ -n "${KEEP:-}" ] || rm -rf "$work"
