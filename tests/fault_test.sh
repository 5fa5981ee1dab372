#!/usr/bin/env bash
# The randomized fault test of real processes (tests/fault_test.py) as a test of the suite:
# sidecars, a mounted agent and seeded schedules of moves, kills, restarts and cut or held
# links, for a short budget (FAULT_TEST_BUDGET seconds, default 75, past which no schedule
# starts once FAULT_TEST_MIN_SCHEDULES, default 5, are done; fewer than that by 220 s, or fewer
# than FAULT_TEST_MIN_STEPS steps, default 40, fail the test) from one seed
# (FAULT_TEST_SEED, default 20261203: the suite replays the same schedules each run; random
# seeds belong to the long run below). Needs root, /dev/fuse, fusermount3 and openssl.
#   tests/fault_test.sh CAPSULE CAPSULEFS MAKE_PKI [fault_test.py options...]
# Longer, by hand (a failure prints its seed and the command that replays it):
#   python3 tests/fault_test.py --capsule bazel-bin/capsule --capsulefs bazel-bin/capsulefs \
#       --make-pki tests/make_pki.sh --schedules 1000
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 CAPSULE CAPSULEFS MAKE_PKI [fault_test.py options...]" >&2
  exit 2
fi
capsule=$1 capsulefs=$2 make_pki=$3
shift 3

here=$(cd "$(dirname "$0")" && pwd)
script=
for candidate in "$here/fault_test.py" "tests/fault_test.py" \
    "${TEST_SRCDIR:-/nonexistent}/${TEST_WORKSPACE:-capsulefs}/tests/fault_test.py"; do
  if [[ -f $candidate ]]; then
    script=$candidate
    break
  fi
done
if [[ -z $script ]]; then
  echo "$0: fault_test.py not found beside this script" >&2
  exit 2
fi

seed=(--seed "${FAULT_TEST_SEED:-20261203}")
exec python3 "$script" --capsule "$capsule" --capsulefs "$capsulefs" --make-pki "$make_pki" \
  --budget-seconds "${FAULT_TEST_BUDGET:-75}" --schedules 1000 --steps 10 \
  --min-schedules "${FAULT_TEST_MIN_SCHEDULES:-5}" --min-steps "${FAULT_TEST_MIN_STEPS:-40}" --max-seconds 220 \
  "${seed[@]}" "$@"
