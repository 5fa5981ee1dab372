#!/usr/bin/env bash
# Benchmark (not a test): moving a running agent between two `capsule serve` sidecars over
# TLS 1.3 on loopback, on a generated capsule of about 1 GiB, all measured in the same run:
#   1. capsule move of the whole capsule against `tar c | openssl s_client` into
#      `openssl s_server | tar x` of the same workspace files (TLS 1.3, both ends with
#      certificates, as the sidecars), in MOVE_ROUNDS rounds (2) taking turns at going first;
#   2. the move back after ~1% of the workspace files changed: bytes sent against bytes
#      changed (the old holder's retired copy is the have);
#   3. the frozen time of a move from a live capsulefs mount with 1 MiB (and, for contrast,
#      64 MiB) written through the mount while the copy ran, and its parts: the mount's
#      freeze (commit + verify of what changed since its preverify), the sealed switch
#      (send, apply, check), activate;
#   4. the frozen time of a move of a capsule whose journal holds 100,000 events, against
#      `capsule verify` of it (which checks the journal whole).
#
#   tests/bench_move.sh [WORKDIR]
#   SMALL_FILES=20000 SMALL_KIB=24 LARGE_FILES=4 LARGE_MIB=128 JOURNAL_EVENTS=100000 tests/bench_move.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/bench_common.sh
small_files=${SMALL_FILES:-20000}
small_kib=${SMALL_KIB:-24}
large_files=${LARGE_FILES:-4}
large_mib=${LARGE_MIB:-128}
change_percent=${CHANGE_PERCENT:-1}
work=${1:-$(mktemp -d /tmp/move-bench.XXXXXX)}
mkdir -p "$work"

bazel build -c opt //:capsule //:capsulefs //move:move_bench >/dev/null 2>&1
cp -f bazel-bin/capsule bazel-bin/capsulefs bazel-bin/move/move_bench "$work/"
capsule="$work/capsule"

pids=()
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do fusermount3 -u "$m" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

ws="$work/ws"
rm -rf "$ws" "$work/a" "$work/b" "$work"/r[0-9]* "$work"/tls-x* "$work/mnt"
generate_workspace "$ws" "$small_files" "$small_kib" "$large_files" "$large_mib"
tests/make_pki.sh "$work/pki" >/dev/null
pki="$work/pki"
"$capsule" keygen --type x25519 -o "$work/seal.key" >/dev/null
mkdir -p "$work/a"
"$capsule" init "$work/a/bench" --id bench --name Bench --workspace "$ws" >/dev/null
ws_bytes=$(du -sb --apparent-size "$ws" | cut -f1)
ws_files=$(find "$ws" -type f | wc -l)
echo "workspace: $ws_files files, $((ws_bytes / 1024 / 1024)) MiB"

# serve ROOT: starts a sidecar, sets $addr to its address.
serve() {
  local root=$1 out="$1.serve.out"
  "$capsule" serve --root "$root" --listen 127.0.0.1:0 --cert "$pki/server.pem" --key "$pki/server.key" \
    --ca "$pki/ca.pem" --seal-key "$work/seal.key" >"$out" 2>"$root.serve.err" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$out" ] && break; sleep 0.05; done
  addr=$(head -1 "$out" | sed 's/^listening on //')
}
serve "$work/a"; addr_a=$addr
move() { "$capsule" move "$1" --to "$2" --cert "$pki/client.pem" --key "$pki/client.key" --ca "$pki/ca.pem" --json; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

find "$ws" "$work/a" -type f -print0 | xargs -0 cat > /dev/null  # a warm page cache for everyone

echo "== 1. the whole capsule: capsule move against tar | openssl s_client -> openssl s_server | tar x"
# Rounds taking turns (tar first, then the move first, ...), each after a sync and a pause:
# the side that runs second inherits the write-back and the freshly filled inode tables of
# the first, so one order alone favours one side. Nothing is deleted before the last round
# (ext4 allocates inodes slower for a while after large deletions). Each round moves the
# capsule on to a fresh sidecar root, so every move copies the whole capsule.
move_rounds=${MOVE_ROUNDS:-2}
mkdir -p "$work/end"
echo 1 > "$work/end/zz-end"  # archived last: once it is extracted, everything is
settle() { sync; sleep 2; }
tar_round() {  # $1 = destination; sets tls_s
  local dest=$1 port=$((40000 + RANDOM % 20000)) t server_group client_group
  mkdir -p "$dest"
  t=$(now)
  { sleep 3600 | openssl s_server -accept "127.0.0.1:$port" -naccept 1 -cert "$pki/server.pem" -key "$pki/server.key" \
      -CAfile "$pki/ca.pem" -Verify 1 -verify_return_error -tls1_3 -quiet 2>/dev/null | tar x -C "$dest"; } 2>/dev/null &
  server_group=$!
  sleep 0.3
  { tar c -C "$ws" . -C "$work/end" zz-end | openssl s_client -connect "127.0.0.1:$port" -cert "$pki/client.pem" \
      -key "$pki/client.key" -CAfile "$pki/ca.pem" -verify_return_error -tls1_3 -quiet 2>/dev/null >/dev/null; } 2>/dev/null &
  client_group=$!
  until [ -s "$dest/zz-end" ]; do sleep 0.02; done
  sync -f "$dest"
  tls_s=$(echo "$(elapsed "$t") - 0.3" | bc -l)
  { pkill -P "$client_group"; pkill -P "$server_group"; wait "$client_group" "$server_group"; } 2>/dev/null || true
}
holder="$work/a/bench"
move_round() {  # $1 = round; moves $holder to a fresh sidecar root; sets move_s, out, holder
  local root="$work/r$1" t
  mkdir -p "$root"
  serve "$root"
  t=$(now); out=$(move "$holder" "$addr"); move_s=$(elapsed "$t")
  holder="$root/bench"
}
best_move="" best_tls=""
for round in $(seq 1 "$move_rounds"); do
  if [ $((round % 2)) -eq 1 ]; then
    settle; tar_round "$work/tls-x$round"; settle; move_round "$round"
  else
    settle; move_round "$round"; settle; tar_round "$work/tls-x$round"
  fi
  printf 'round %d (%s first): capsule move %6.2fs  %7.1f MB/s (copy %s bytes in %.2fs, frozen %.3fs); tar | s_client -> s_server | tar x %6.2fs  %7.1f MB/s; %sx\n' \
    "$round" "$([ $((round % 2)) -eq 1 ] && echo tar || echo move)" "$move_s" "$(mbps "$ws_bytes" "$move_s")" \
    "$(field "$out" copy_bytes)" "$(field "$out" copy_seconds)" "$(field "$out" frozen_seconds)" "$tls_s" "$(mbps "$ws_bytes" "$tls_s")" \
    "$(ratio "$move_s" "$tls_s")"
  best_move=$(smaller "$best_move" "$move_s")
  best_tls=$(smaller "$best_tls" "$tls_s")
  "$capsule" verify "$holder" >/dev/null || { echo "the moved capsule does not verify"; exit 1; }
done
move_s=$best_move
printf 'capsule move (copy+switch+activate), best of %d  %6.2fs  %7.1f MB/s\n' "$move_rounds" "$move_s" "$(mbps "$ws_bytes" "$move_s")"
printf 'tar | s_client -> s_server | tar x, best of %d   %6.2fs  %7.1f MB/s   capsule move takes %sx as long\n' \
  "$move_rounds" "$best_tls" "$(mbps "$ws_bytes" "$best_tls")" "$(ratio "$move_s" "$best_tls")"
echo "(capsule move also hashes every file it receives, checks the staged capsule, seals the switch and syncs before activating)"
echo "target verifies"
rm -rf "$work"/tls-x*
# The last round's sidecar holds a retired copy from here on: the moves below go to it.
addr_b=$addr
root_b=$(dirname "$holder")

echo "== 2. the move back after ${change_percent}% of the workspace files changed on the new holder"
changed=$(python3 - "$holder" "$change_percent" <<'PY'
import hashlib, json, os, sys
cap, percent = sys.argv[1], float(sys.argv[2])
def load(rel):
    with open(os.path.join(cap, rel), "rb") as f:
        text = f.read()
    return json.loads(text), text.endswith(b"\n")
def save(rel, obj, newline):
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + (b"\n" if newline else b"")
    with open(os.path.join(cap, rel) + ".tmp-bench", "wb") as f:
        f.write(text)
    os.rename(os.path.join(cap, rel) + ".tmp-bench", os.path.join(cap, rel))
    return text
snapshot, snl = load("artifacts/snapshot.json")
manifest, mnl = load("manifest.json")
files = sorted(p for p, e in snapshot.items() if "sha256" in e)
step = max(1, round(100 / percent))
changed = 0
for p in files[::step]:
    e = snapshot[p]
    data = os.urandom(e["size"])
    sha = hashlib.sha256(data).hexdigest()
    blob = "artifacts/blobs/" + sha
    with open(os.path.join(cap, blob), "wb") as f:
        f.write(data)
    os.chmod(os.path.join(cap, blob), 0o444)
    manifest["files"][blob] = {"sha256": sha, "size": len(data)}
    e["sha256"] = sha
    changed += len(data)
# A blob no file names any more goes, as a commit does it (capsule verify refuses it).
named = {e["sha256"] for e in snapshot.values() if "sha256" in e}
for blob in [b for b in manifest["files"] if b.startswith("artifacts/blobs/")]:
    if blob[len("artifacts/blobs/"):] not in named:
        del manifest["files"][blob]
        os.remove(os.path.join(cap, blob))
text = save("artifacts/snapshot.json", snapshot, snl)
manifest["files"]["artifacts/snapshot.json"] = {"sha256": hashlib.sha256(text).hexdigest(), "size": len(text)}
save("manifest.json", manifest, mnl)
print(changed, len(files[::step]))
PY
)
read -r changed_bytes changed_files <<<"$changed"
"$capsule" verify "$holder" >/dev/null || { echo "the changed capsule does not verify"; exit 1; }
t=$(now); out=$(move "$holder" "$addr_a"); back_s=$(elapsed "$t")
sent=$(field "$out" copy_bytes)
printf 'changed: %s files, %s bytes; sent: %s stream bytes in the copy (%s files), %s in the switch\n' "$changed_files" \
  "$changed_bytes" "$sent" "$(field "$out" copy_files)" "$(field "$out" switch_bytes)"
printf 'bytes sent / bytes changed = %s; the move back took %.2fs (the first %.2fs)\n' \
  "$(ratio "$sent" "$changed_bytes")" "$back_s" "$move_s"
"$capsule" verify "$work/a/bench" >/dev/null && echo "the old holder verifies, active again at epoch $(
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["epoch"])' "$work/a/bench/.capsule/holder.json")"

echo "== 3. frozen time: a move from a live mount, with N MiB written through it while the copy runs"
mkdir -p "$work/mnt"
for mib in 1 64; do
  "$work/capsulefs" "$work/a/bench" "$work/mnt" -f &
  driver=$!
  mounts+=("$work/mnt")
  for _ in $(seq 200); do [ -e "$work/a/bench/.capsule/control.sock" ] && break; sleep 0.05; done
  report=$("$work/move_bench" "$work/mnt" "$addr_b" "$pki/client.pem" "$pki/client.key" "$pki/ca.pem" "$mib")
  fusermount3 -u "$work/mnt"
  wait "$driver"  # the driver checkpoints and exits after the unmount
  get() { echo "$report" | sed -n "s/^$1 //p"; }
  printf '%3s MiB changed: frozen %.3fs = freeze (mount: commit, checkpoint, verify what changed) %.3fs + switch %.3fs + activate %.3fs; switch carried %s bytes; the mount hashed its blobs beforehand, still running, in %.3fs\n' \
    "$mib" "$(get frozen_seconds)" "$(get freeze_seconds)" "$(get switch_seconds)" "$(get activate_seconds)" "$(get switch_bytes)" "$(get preverify_seconds)"
  # Back to a, plainly, for the next round.
  move "$root_b/bench" "$addr_a" >/dev/null
done

echo "== 4. frozen time with a long journal, against checking that journal alone"
journal_events=${JOURNAL_EVENTS:-100000}
bazel build -c opt //journal/render:render_bench >/dev/null 2>&1
rm -rf "$work/j"
bazel-bin/journal/render/render_bench --events "$journal_events" --rounds 1 --dir "$work/j" >/dev/null
journal_mb=$(( $(stat -c %s "$work/j/cap/memory/timeline_events.jsonl") / 1000000 ))
t=$(now); "$capsule" verify "$work/j/cap" >/dev/null; verify_s=$(elapsed "$t")
out=$(move "$work/j/cap" "$addr_b")
printf '%s events (%s MB): frozen %.3fs, switch carried %s bytes; capsule verify of it (the journal checked whole) %.3fs; frozen/verify = %s\n' \
  "$journal_events" "$journal_mb" "$(field "$out" frozen_seconds)" "$(field "$out" switch_bytes)" "$verify_s" \
  "$(ratio "$(field "$out" frozen_seconds)" "$verify_s")"
[ -n "${KEEP:-}" ] || rm -rf "$work"
