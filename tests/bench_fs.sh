#!/usr/bin/env bash
# Benchmark (not a test): the capsule mount against libfuse's own passthrough_ll (built from
# Debian's examples) as it comes, with -o default_permissions (the kernel checks access
# against each entry's owner and mode, as capsulefs always has it: after a create it asks for
# the folder's attributes again before the next lookup, one more round trip), and with
# capsulefs's whole cache policy (pt_same: default_permissions, entries and attributes kept an
# hour, timeout=3600, the page cache kept across opens, cache=always; no writeback cache in
# either): the yardstick the goals are read against (cap/same). Beside them the native folder,
# in the same run: sequential write and read MB/s, a re-read of the same file through a new
# open,
# small-file create+write+close per second, stat and readdir per second, durable journal
# appends, tar -x + git add + commit of a few thousand files (seconds: lower is better), and the
# cost of committing one small file in a capsule of 10 and of 100,000 files.
#
#   tests/bench_fs.sh [WORKDIR]          SEQ_MIB=256 SMALL=2000 BIG_WS=100000 tests/bench_fs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
seq_mib=${SEQ_MIB:-256}
small=${SMALL:-2000}
big_ws=${BIG_WS:-100000}
work=${1:-$(mktemp -d /tmp/capsulefs-bench.XXXXXX)}
mkdir -p "$work"
bazel build -c opt //:capsulefs //:capsule >/dev/null 2>&1
capsulefs="$PWD/bazel-bin/capsulefs"
capsule="$PWD/bazel-bin/capsule"

examples=/usr/share/doc/libfuse3-dev/examples
cp "$examples/passthrough_ll.c" "$work/"
[ -f "$examples/passthrough_helpers.h" ] && cp "$examples/passthrough_helpers.h" "$work/"
gcc -O2 -o "$work/passthrough_ll" "$work/passthrough_ll.c" $(pkg-config fuse3 --cflags --libs)

pids=()
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do fusermount3 -u "$m" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_mount() { for _ in $(seq 200); do [ "$(stat -f -c %T "$1")" = fuseblk ] || [ "$(stat -f -c %t "$1")" = 65735546 ] && return 0; sleep 0.05; done; echo "no mount at $1" >&2; exit 1; }

# The contenders: a capsule mount (its files/), passthrough_ll over a folder, the folder itself.
rm -rf "$work/ws" "$work/cap" "$work/pt-src" "$work/dp-src" "$work/same-src" "$work/native" "$work/mnt-cap" \
  "$work/mnt-pt" "$work/mnt-dp" "$work/mnt-same"
mkdir -p "$work/ws" "$work/pt-src" "$work/dp-src" "$work/same-src" "$work/native" "$work/mnt-cap" "$work/mnt-pt" \
  "$work/mnt-dp" "$work/mnt-same"
echo seed > "$work/ws/seed"
"$capsule" init "$work/cap" --id bench --name Bench --workspace "$work/ws" >/dev/null
"$capsulefs" "$work/cap" "$work/mnt-cap" -f & pids+=($!); mounts+=("$work/mnt-cap")
"$work/passthrough_ll" -f -o source="$work/pt-src" "$work/mnt-pt" & pids+=($!); mounts+=("$work/mnt-pt")
"$work/passthrough_ll" -f -o source="$work/dp-src",default_permissions "$work/mnt-dp" & pids+=($!); mounts+=("$work/mnt-dp")
"$work/passthrough_ll" -f -o source="$work/same-src",default_permissions,timeout=3600,cache=always "$work/mnt-same" &
pids+=($!); mounts+=("$work/mnt-same")
wait_mount "$work/mnt-cap"
wait_mount "$work/mnt-pt"
wait_mount "$work/mnt-dp"
wait_mount "$work/mnt-same"

measure() {  # prints: seq_write seq_read reread creates stats readdirs
  python3 - "$1" "$seq_mib" "$small" <<'PY'
import os, sys, time
root, seq_mib, small = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = b"\0" * (1 << 20)
path = os.path.join(root, "seq.bin")
t = time.perf_counter()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for _ in range(seq_mib):
    os.write(fd, block)
os.fsync(fd)
os.close(fd)
write = seq_mib / (time.perf_counter() - t)
t = time.perf_counter()
fd = os.open(path, os.O_RDONLY)
while os.read(fd, 1 << 20):
    pass
os.close(fd)
read = seq_mib / (time.perf_counter() - t)
t = time.perf_counter()  # the same file again through a new open: the page cache, if kept
fd = os.open(path, os.O_RDONLY)
while os.read(fd, 1 << 20):
    pass
os.close(fd)
reread = seq_mib / (time.perf_counter() - t)
d = os.path.join(root, "small")
os.mkdir(d)
data = b"x" * 1024
t = time.perf_counter()
for i in range(small):
    fd = os.open(os.path.join(d, "f%d" % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.close(fd)
creates = small / (time.perf_counter() - t)
names = [os.path.join(d, "f%d" % i) for i in range(small)]
t = time.perf_counter()
for _ in range(5):
    for n in names:
        os.stat(n)
stats = 5 * small / (time.perf_counter() - t)
t = time.perf_counter()
for _ in range(20):
    assert len(os.listdir(d)) == small
readdirs = 20 * small / (time.perf_counter() - t)
print("%.1f %.1f %.1f %.0f %.0f %.0f" % (write, read, reread, creates, stats, readdirs))
PY
}

echo "measuring: seq ${seq_mib} MiB (fsync at the end), $small small files of 1 KiB"
read -r c_w c_r c_rr c_c c_s c_d < <(measure "$work/mnt-cap/files")
read -r p_w p_r p_rr p_c p_s p_d < <(measure "$work/mnt-pt")
read -r d_w d_r d_rr d_c d_s d_d < <(measure "$work/mnt-dp")
read -r s_w s_r s_rr s_c s_s s_d < <(measure "$work/mnt-same")
read -r n_w n_r n_rr n_c n_s n_d < <(measure "$work/native")
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
# cap/same is the goal's column: capsulefs against passthrough_ll with the same options.
printf '%-34s %10s %10s %10s %10s %10s %8s %8s %10s\n' "" capsulefs "pt_ll" "pt_ll+dp" "pt_same" native "cap/same" \
  "cap/pt" "cap/native"
row() {  # label capsulefs pt_ll pt_ll+dp pt_same native
  printf '%-34s %10s %10s %10s %10s %10s %8s %8s %10s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$(ratio "$2" "$5")" \
    "$(ratio "$2" "$3")" "$(ratio "$2" "$6")"
}
row "sequential write MB/s" "$c_w" "$p_w" "$d_w" "$s_w" "$n_w"
row "sequential read MB/s" "$c_r" "$p_r" "$d_r" "$s_r" "$n_r"
row "re-read, new open MB/s" "$c_rr" "$p_rr" "$d_rr" "$s_rr" "$n_rr"
row "small create+write+close /s" "$c_c" "$p_c" "$d_c" "$s_c" "$n_c"
row "stat /s" "$c_s" "$p_s" "$d_s" "$s_s" "$n_s"
row "readdir entries /s" "$c_d" "$p_d" "$d_d" "$s_d" "$n_d"

# Journal appends: one line per write(2) on an O_APPEND descriptor; each is chained, canonical
# and fdatasync'ed by the driver before the write returns. The baselines append the same
# lines with write + fdatasync to a plain file through passthrough_ll and natively.
appends() {  # $1 = file, $2 = 1 to fdatasync each line yourself; prints appends per second
  python3 - "$1" "$2" "$journal_lines" <<'PY'
import os, sys, time
path, sync, n = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
t = time.perf_counter()
for i in range(n):
    os.write(fd, b'{"type":"user_message","data":{"text":"message %d"}}\n' % i)
    if sync:
        os.fdatasync(fd)
print("%.0f" % (n / (time.perf_counter() - t)))
os.close(fd)
PY
}
journal_lines=${JOURNAL_LINES:-300}

# A real program's workload: git add + commit of $git_files files (headers from /usr/include),
# the same tree on each contender; seconds, so the ratios read the other way (lower is better).
git_files=${GIT_FILES:-3000}
find /usr/include -type f -name '*.h' | sort | awk -v n="$git_files" 'NR <= n' > "$work/git-files.txt"
git_commit() {  # $1 = folder to work in; prints seconds for copy + git init/add/commit
  local dir=$1/gitbench start end
  rm -rf "$dir"
  mkdir -p "$dir"
  start=$(date +%s.%N)
  tar -c -T "$work/git-files.txt" 2>/dev/null | tar -x -C "$dir"
  (cd "$dir" && git init -q && git -c user.name=bench -c user.email=bench@example.invalid add -A &&
    git -c user.name=bench -c user.email=bench@example.invalid commit -q -m bench)
  end=$(date +%s.%N)
  python3 -c "print('%.2f' % ($end - $start))"
}
g_c=$(git_commit "$work/mnt-cap/files")
g_p=$(git_commit "$work/mnt-pt")
g_d=$(git_commit "$work/mnt-dp")
g_s=$(git_commit "$work/mnt-same")
g_n=$(git_commit "$work/native")
row "tar -x + git add+commit, s ($git_files)" "$g_c" "$g_p" "$g_d" "$g_s" "$g_n"

j_c=$(appends "$work/mnt-cap/memory/timeline_events.jsonl" 0)
j_p=$(appends "$work/mnt-pt/journal.jsonl" 1)
j_d=$(appends "$work/mnt-dp/journal.jsonl" 1)
j_s=$(appends "$work/mnt-same/journal.jsonl" 1)
j_n=$(appends "$work/native/journal.jsonl" 1)
row "journal appends /s (durable each)" "$j_c" "$j_p" "$j_d" "$j_s" "$j_n"
cleanup
mounts=()
pids=()

# Commit cost: one small file written and closed, in a capsule of 10 and of $big_ws files.
commit_cost() {  # $1 = number of workspace files; prints ms per commit
  local n=$1 ws="$work/ws-$1" cap="$work/cap-$1" mnt="$work/mnt-$1"
  rm -rf "$ws" "$cap" "$mnt"
  mkdir -p "$ws" "$mnt"
  python3 -c "
import os, sys
for i in range($n):
    d = os.path.join('$ws', 'd%d' % (i // 1000))
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, 'f%d' % i), 'w').write('content %d\n' % (i % 97))
"
  "$capsule" init "$cap" --id bench --name Bench --workspace "$ws" >/dev/null
  "$capsulefs" "$cap" "$mnt" -f & local pid=$!
  wait_mount "$mnt"
  python3 - "$mnt/files" <<'PY'
import os, sys, time
root = sys.argv[1]
times = []
for i in range(1000):
    t = time.perf_counter()
    fd = os.open(os.path.join(root, "commit.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"version %d\n" % i)
    os.close(fd)
    times.append(time.perf_counter() - t)
times.sort()
print("%.3f" % (times[len(times) // 2] * 1000))  # the median: the machine is shared
PY
  fusermount3 -u "$mnt"
  wait "$pid"
}
echo "commit cost (write + close of one small file; median of 1000 commits):"
c10=$(commit_cost 10)
cbig=$(commit_cost "$big_ws")
echo "  capsule of 10 files:        $c10 ms"
echo "  capsule of $big_ws files: $cbig ms   (ratio $(ratio "$cbig" "$c10"))"
