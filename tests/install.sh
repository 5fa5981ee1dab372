#!/bin/sh
# Installs the two programs and every manual page under PREFIX, as `make install` would:
#   PREFIX/bin/capsule, PREFIX/bin/capsulefs
#   PREFIX/share/man/man1/capsule.1, man5/capsule.5 capsule-envelope.5 capsule-move.5,
#   man7/capsule-mcp.7 capsule-protocol.7, man8/capsulefs.8
# so that `MANPATH=PREFIX/share/man man capsule` (and every page it names) works.
#
# usage: tests/install.sh PREFIX        after `bazel build //:capsule //:capsulefs`
# CAPSULE, CAPSULEFS and MAN_DIR name other programs or pages (the suite's test passes its own).
set -eu
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: tests/install.sh PREFIX" >&2
  exit 2
fi
prefix=$1
here=$(cd "$(dirname "$0")/.." && pwd)
capsule=${CAPSULE:-$here/bazel-bin/capsule}
capsulefs=${CAPSULEFS:-$here/bazel-bin/capsulefs}
man_dir=${MAN_DIR:-$here/man}
for program in "$capsule" "$capsulefs"; do
  if [ ! -x "$program" ]; then
    echo "install.sh: $program: not built (bazel build //:capsule //:capsulefs)" >&2
    exit 1
  fi
done
install -d "$prefix/bin"
install -m 0755 "$capsule" "$prefix/bin/capsule"
install -m 0755 "$capsulefs" "$prefix/bin/capsulefs"
count=0
for page in "$man_dir"/*.[1-8]; do
  [ -e "$page" ] || continue
  section=${page##*.}
  install -d "$prefix/share/man/man$section"
  install -m 0644 "$page" "$prefix/share/man/man$section/"
  count=$((count + 1))
done
if [ "$count" -eq 0 ]; then
  echo "install.sh: $man_dir: no manual pages" >&2
  exit 1
fi
echo "installed capsule, capsulefs and $count manual pages under $prefix"
