#!/usr/bin/env bash
# Benchmark (not a test): the Move Stream on a generated capsule of about 1 GiB (20,000 small
# files and a few large ones), measured in the same run with a warm page cache:
#   - capsule stream pack (copy) and unpack against GNU tar create and extract of the same
#     workspace files, in STREAM_ROUNDS rounds (2) taking turns at going first, best of each;
#   - a second pack with the have of the first receiver, after ~1% of the workspace files
#     changed, showing bytes sent against bytes changed.
#
# The changed capsule is the same agent (a capsule cannot be re-created for the same agent),
# so it is made by copying the source folder and replacing ~1% of its workspace files in
# place: new blobs named by their sha256, the snapshot entries and manifest entries rewritten
# (a small Python script below).
#
#   tests/bench_stream.sh [WORKDIR]
#   SMALL_FILES=20000 SMALL_KIB=24 LARGE_FILES=4 LARGE_MIB=128 CHANGE_PERCENT=1 STREAM_ROUNDS=2 tests/bench_stream.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/bench_common.sh
small_files=${SMALL_FILES:-20000}
small_kib=${SMALL_KIB:-24}
large_files=${LARGE_FILES:-4}
large_mib=${LARGE_MIB:-128}
change_percent=${CHANGE_PERCENT:-1}
stream_rounds=${STREAM_ROUNDS:-2}
work=${1:-$(mktemp -d /tmp/stream-bench.XXXXXX)}
mkdir -p "$work"

bazel build -c opt //:capsule >/dev/null 2>&1
capsule="$work/capsule"
cp -f bazel-bin/capsule "$capsule"


ws="$work/ws"
rm -rf "$ws" "$work/src" "$work/src2" "$work/dst" "$work/gnu-x" "$work"/*.tar "$work"/*.stream
generate_workspace "$ws" "$small_files" "$small_kib" "$large_files" "$large_mib"
"$capsule" init "$work/src" --id bench --name Bench --workspace "$ws" >/dev/null
ws_bytes=$(du -sb --apparent-size "$ws" | cut -f1)
ws_files=$(find "$ws" -type f | wc -l)
echo "workspace: $ws_files files, $((ws_bytes / 1024 / 1024)) MiB"

# Warm the page cache for everyone.
find "$ws" "$work/src" -type f -print0 | xargs -0 cat > /dev/null

echo "== pack and unpack (copy) against GNU tar create and extract of the same files, $stream_rounds rounds taking turns"
# Each step starts with nothing left to write back (unpack and tar -x + sync end with a
# syncfs, which would otherwise also write back what the steps before them left). Odd rounds
# run GNU tar first, even rounds capsule first: neither side always meets the cache the other
# warmed or the write-back it left; each figure is the best of its rounds.
capsule_round() {  # sets pack_s, unpack_s
  local t
  rm -rf "$work/dst" "$work/copy.stream"
  sync
  t=$(now); "$capsule" stream pack "$work/src" --phase copy --move 00000000000000000000000000000001 -o "$work/copy.stream" >/dev/null; pack_s=$(elapsed "$t")
  sync
  t=$(now); "$capsule" stream unpack "$work/copy.stream" "$work/dst" >/dev/null; unpack_s=$(elapsed "$t")
}
tar_round() {  # sets tar_c_s, tar_x_s
  local t
  rm -rf "$work/gnu-x" "$work/gnu.tar"
  mkdir -p "$work/gnu-x"
  sync
  t=$(now); tar -cf "$work/gnu.tar" -C "$ws" .; tar_c_s=$(elapsed "$t")
  sync
  t=$(now); tar -xf "$work/gnu.tar" -C "$work/gnu-x" && sync -f "$work/gnu-x"; tar_x_s=$(elapsed "$t")
}
best_pack="" best_unpack="" best_tar_c="" best_tar_x=""
for round in $(seq 1 "$stream_rounds"); do
  if [ $((round % 2)) -eq 1 ]; then tar_round; capsule_round; else capsule_round; tar_round; fi
  printf 'round %d (%s first): pack %.2fs, tar -c %.2fs: %sx; unpack %.2fs, tar -x + sync %.2fs: %sx\n' "$round" \
    "$([ $((round % 2)) -eq 1 ] && echo tar || echo capsule)" "$pack_s" "$tar_c_s" "$(ratio "$pack_s" "$tar_c_s")" \
    "$unpack_s" "$tar_x_s" "$(ratio "$unpack_s" "$tar_x_s")"
  best_pack=$(smaller "$best_pack" "$pack_s"); best_unpack=$(smaller "$best_unpack" "$unpack_s")
  best_tar_c=$(smaller "$best_tar_c" "$tar_c_s"); best_tar_x=$(smaller "$best_tar_x" "$tar_x_s")
done
pack_s=$best_pack unpack_s=$best_unpack tar_c_s=$best_tar_c tar_x_s=$best_tar_x
echo "best of each:"
printf 'capsule stream pack    %6.2fs  %7.1f MB/s  (hashes every file as it sends it, fsyncs the stream)\n' "$pack_s" "$(mbps "$ws_bytes" "$pack_s")"
printf 'GNU tar -c             %6.2fs  %7.1f MB/s   pack speed = %sx GNU tar\n' "$tar_c_s" "$(mbps "$ws_bytes" "$tar_c_s")" "$(ratio "$tar_c_s" "$pack_s")"
printf 'capsule stream unpack  %6.2fs  %7.1f MB/s  (checks every digest, stages, verifies, syncs, exchanges)\n' "$unpack_s" "$(mbps "$ws_bytes" "$unpack_s")"
printf 'GNU tar -x + sync      %6.2fs  %7.1f MB/s   unpack speed = %sx GNU tar\n' "$tar_x_s" "$(mbps "$ws_bytes" "$tar_x_s")" "$(ratio "$tar_x_s" "$unpack_s")"
echo "stream $(stat -c %s "$work/copy.stream") bytes, GNU tar $(stat -c %s "$work/gnu.tar") bytes"

echo "== second pack with the receiver's have, after ${change_percent}% of the workspace files changed"
cp -a "$work/src" "$work/src2"
changed_bytes=$(python3 - "$work/src2" "$change_percent" <<'PY'
import hashlib, json, os, sys
cap, percent = sys.argv[1], float(sys.argv[2])
def load(rel):
    with open(os.path.join(cap, rel), "rb") as f:
        text = f.read()
    return json.loads(text), text.endswith(b"\n")
def save(rel, obj, newline):
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    with open(os.path.join(cap, rel), "wb") as f:
        f.write(text + (b"\n" if newline else b""))
    return text + (b"\n" if newline else b"")
snapshot, snl = load("artifacts/snapshot.json")
manifest, mnl = load("manifest.json")
files = sorted(p for p, e in snapshot.items() if "sha256" in e)
step = max(1, round(100 / percent))
changed = 0
for p in files[::step]:
    e = snapshot[p]
    data = os.urandom(e["size"])  # same size, new content
    sha = hashlib.sha256(data).hexdigest()
    blob = "artifacts/blobs/" + sha
    with open(os.path.join(cap, blob), "wb") as f:
        f.write(data)
    os.chmod(os.path.join(cap, blob), 0o444)
    manifest["files"][blob] = {"sha256": sha, "size": len(data)}
    e["sha256"] = sha
    changed += len(data)
# Blobs no longer referenced go.
used = {"artifacts/blobs/" + e["sha256"] for e in snapshot.values() if "sha256" in e}
for path in list(manifest["files"]):
    if path.startswith("artifacts/blobs/") and path not in used:
        os.unlink(os.path.join(cap, path))
        del manifest["files"][path]
text = save("artifacts/snapshot.json", snapshot, snl)
manifest["files"]["artifacts/snapshot.json"] = {"sha256": hashlib.sha256(text).hexdigest(), "size": len(text)}
save("manifest.json", manifest, mnl)
print(changed, len(files[::step]))
PY
)
read -r changed_bytes changed_files <<<"$changed_bytes"
"$capsule" verify "$work/src2" >/dev/null || { echo "the changed capsule does not verify"; exit 1; }
"$capsule" stream have "$work/dst" > "$work/dst.have"
t=$(now); out=$("$capsule" stream pack "$work/src2" --phase copy --move 00000000000000000000000000000002 --have "$work/dst.have" -o "$work/delta.stream"); delta_s=$(elapsed "$t")
echo "$out"
t=$(now); "$capsule" stream unpack "$work/delta.stream" "$work/dst" >/dev/null; delta_unpack_s=$(elapsed "$t")
sent=$(echo "$out" | sed -n 's/.*: \([0-9]*\) files (\([0-9]*\) bytes) sent.*/\2/p')
printf 'changed: %s files, %s bytes; sent: %s file bytes, stream %s bytes (%.2f%% of the full stream)\n' \
  "$changed_files" "$changed_bytes" "$sent" "$(stat -c %s "$work/delta.stream")" \
  "$(echo "100 * $(stat -c %s "$work/delta.stream") / $(stat -c %s "$work/copy.stream")" | bc -l)"
printf 'delta pack %.2fs (hashes nothing it skips: digests come from the snapshot), delta unpack %.2fs\n' "$delta_s" "$delta_unpack_s"
"$capsule" verify "$work/dst" >/dev/null && echo "receiver verifies; its have equals the source's: $(
  [ "$("$capsule" stream have "$work/dst")" = "$("$capsule" stream have "$work/src2")" ] && echo yes || echo NO)"
[ -n "${KEEP:-}" ] || rm -rf "$work"
