# Shared by the benchmark scripts (sourced, not run): timing helpers and the generated
# workspace of about 1 GiB (SMALL_FILES files of ~SMALL_KIB KiB, LARGE_FILES of LARGE_MIB MiB).

now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc -l; }
ratio() { echo "scale=2; $1 / $2" | bc -l; }
mbps() { echo "$1 / 1000000 / $2" | bc -l; }
# The best of rounds so far: smaller A B (times) and larger A B (rates); A empty before the first.
smaller() { if [ -z "$1" ] || awk -v a="$2" -v b="$1" 'BEGIN { exit !(a < b) }'; then echo "$2"; else echo "$1"; fi; }
larger() { if [ -z "$1" ] || awk -v a="$2" -v b="$1" 'BEGIN { exit !(a > b) }'; then echo "$2"; else echo "$1"; fi; }

# generate_workspace DIR SMALL_FILES SMALL_KIB LARGE_FILES LARGE_MIB
generate_workspace() {
  local ws=$1 small_files=$2 small_kib=$3 large_files=$4 large_mib=$5
  echo "== generating a workspace: $small_files files of ~${small_kib} KiB, $large_files of ${large_mib} MiB"
  mkdir -p "$ws"
  head -c $((large_mib * 1024 * 1024)) /dev/urandom > "$ws.seed"
  for i in $(seq 1 "$large_files"); do
    { echo "$i"; cat "$ws.seed"; } > "$ws/large-$i.bin"
  done
  rm -f "$ws.seed"
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
}
