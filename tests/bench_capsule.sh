#!/usr/bin/env bash
# Benchmark (not a test): capsule verify against sha256sum, and capsule export against GNU tar,
# on a generated capsule of about 1 GiB (20,000 small files and a few large ones), measured in
# the same run with a warm page cache for every contender.
#
#   tests/bench_capsule.sh [WORKDIR]
#   SMALL_FILES=20000 SMALL_KIB=24 LARGE_FILES=4 LARGE_MIB=128 tests/bench_capsule.sh
set -euo pipefail
cd "$(dirname "$0")/.."
small_files=${SMALL_FILES:-20000}
small_kib=${SMALL_KIB:-24}
large_files=${LARGE_FILES:-4}
large_mib=${LARGE_MIB:-128}
work=${1:-$(mktemp -d /tmp/capsule-bench.XXXXXX)}
mkdir -p "$work"

bazel build -c opt //:capsule >/dev/null 2>&1
capsule="$PWD/bazel-bin/capsule"

now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc -l; }
ratio() { echo "scale=2; $1 / $2" | bc -l; }

echo "== generating a workspace: $small_files files of ~${small_kib} KiB, $large_files of ${large_mib} MiB"
ws="$work/ws"
rm -rf "$ws" "$work/cap" "$work"/*.tar
mkdir -p "$ws"
head -c $((large_mib * 1024 * 1024)) /dev/urandom > "$work/seed"
for i in $(seq 1 "$large_files"); do
  { echo "$i"; cat "$work/seed"; } > "$ws/large-$i.bin"
done
python3 - "$ws" "$small_files" "$small_kib" <<'PY'
import os, sys
ws, n, kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seed = os.urandom(kib * 2048)
for i in range(n):
    d = os.path.join(ws, "dir%03d" % (i % 200))
    os.makedirs(d, exist_ok=True)
    size = (i * 7919) % (kib * 2048) + 1
    with open(os.path.join(d, "f%05d.dat" % i), "wb") as f:
        f.write(b"%d" % i + seed[:size])
PY

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
printf 'capsule verify        %6.2fs  %7.1f MB/s\n' "$verify_s" "$(echo "$bytes / 1000000 / $verify_s" | bc -l)"
printf 'sha256sum (1 process) %6.2fs  %7.1f MB/s   verify speed = %sx sha256sum\n' "$sha_s" "$(echo "$bytes / 1000000 / $sha_s" | bc -l)" "$(ratio "$sha_s" "$verify_s")"
printf 'sha256sum (xargs -P2) %6.2fs  %7.1f MB/s   verify speed = %sx that\n' "$sha2_s" "$(echo "$bytes / 1000000 / $sha2_s" | bc -l)" "$(ratio "$sha2_s" "$verify_s")"

echo "== export against GNU tar of the same folder"
t=$(now); "$capsule" export "$work/cap" -o "$work/capsule.tar" >/dev/null; export_s=$(elapsed "$t")
t=$(now); tar -cf "$work/gnu.tar" -C "$work/cap" --exclude=./.capsule .; tar_s=$(elapsed "$t")
t=$(now); tar -cf "$work/gnu-sync.tar" -C "$work/cap" --exclude=./.capsule . && sync -f "$work/gnu-sync.tar"; tar_sync_s=$(elapsed "$t")
printf 'capsule export        %6.2fs  (hashes every file, fsyncs the tar)\n' "$export_s"
printf 'GNU tar               %6.2fs   export speed = %sx GNU tar\n' "$tar_s" "$(ratio "$tar_s" "$export_s")"
printf 'GNU tar + sync        %6.2fs   export speed = %sx GNU tar + sync\n' "$tar_sync_s" "$(ratio "$tar_sync_s" "$export_s")"
echo "tar sizes: capsule $(stat -c %s "$work/capsule.tar"), GNU $(stat -c %s "$work/gnu.tar")"
[ -n "${KEEP:-}" ] || rm -rf "$work"
