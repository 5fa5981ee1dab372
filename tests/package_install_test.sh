#!/usr/bin/env bash
# The Debian package on a bare Debian 12: tests/package.sh builds it, mmdebstrap makes a fresh
# bookworm (variant minbase: the required packages and apt) from the machine's Debian mirror,
# and inside it
#   - `apt-get install ./capsulefs_*.deb` installs it with what it depends on;
#   - `capsule --version` and `capsulefs --version` name the package's version;
#   - a capsule made there mounts with `mount -t fuse.capsulefs` (mount.fuse3 from the fuse3
#     it pulled in), a file reads through the mount, and umount lets the driver go;
#   - an upgrade (the same package with a higher version) keeps the admin's edit of
#     /etc/default/capsule-sidecar;
#   - `apt-get purge` then `apt-get autoremove --purge` leave no file of it (dpkg -L before,
#     each path checked after), its conffile gone too, and the tree as it was before the
#     install but for apt's and dpkg's own records and logs.
# Needs root, network to the mirror, mmdebstrap; takes minutes: tests/run.sh --long runs it,
# CI runs //tests:package_test (lintian, contents) instead.
#
#   tests/package_install_test.sh [CAPSULE CAPSULEFS]     (default: bazel build, bazel-bin/)
# CAPSULE_DEBIAN_MIRROR names the mirror (default: the first of the machine's apt sources).
# Prints "PASS name" or "FAIL name: why" per check, the time it took, "N passed, M failed".
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/package_install.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ $# -eq 2 ]; then
  export CAPSULE=$(realpath "$1") CAPSULEFS=$(realpath "$2")
fi
deb=$(bash "$here/tests/package.sh" "$work" | tail -n 1)
if [ ! -f "$deb" ]; then
  echo "FAIL build: tests/package.sh made no package"
  echo "0 passed, 1 failed"
  exit 1
fi
version=$(dpkg-deb --field "$deb" Version)
# The next version, for the upgrade: the same files under a higher version.
dpkg-deb -R "$deb" "$work/next"
sed -i "s/^Version: .*/Version: $version+next/" "$work/next/DEBIAN/control"
next=$work/capsulefs_${version}+next_$(dpkg --print-architecture).deb
dpkg-deb --root-owner-group -b "$work/next" "$next" >/dev/null

mirror=${CAPSULE_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *\(http[^ ]*\/debian\)\/* *$/\1/p' | head -n 1)
  [ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(http[^ ]*\/debian\)\/* bookworm .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n 1)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

# Runs inside mmdebstrap's customize hook: $1 is the new system's root, with /proc, /sys and
# /dev mounted. Each check prints PASS or FAIL to the results file.
cat >"$work/in_chroot.sh" <<'EOF'
set -uo pipefail
root=$1 deb=$2 version=$3 results=$4 next=$5
pass() { echo "PASS $1" >>"$results"; }
fail() { echo "FAIL $1: $2" >>"$results"; }
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
# Every path of the tree but what dpkg and apt keep of their own work.
tree() {
  (cd "$root" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./tmp -o -path ./run \
    -o -path ./var/lib/dpkg -o -path ./var/lib/apt -o -path ./var/cache -o -path ./var/log \) -prune -o -print |
    LC_ALL=C sort)
}

tree >"$root/../before.tree"
cp "$deb" "$root/tmp/"
if out=$(in_root apt-get install -y -q --no-install-recommends "/tmp/$(basename "$deb")" 2>&1); then
  pass install
else
  fail install "apt-get install exited: $(tail -n 5 <<<"$out" | tr '\n' ' ')"
  exit 0
fi

said=$(in_root capsule --version 2>&1)
said_fs=$(in_root capsulefs --version 2>&1)
if [ "$said" = "capsule $version" ] && [ "$said_fs" = "capsulefs $version" ]; then
  pass version
else
  fail version "capsule --version: '$said', capsulefs --version: '$said_fs'"
fi

# mmdebstrap makes the usual devices; the mount needs /dev/fuse too.
if [ ! -c "$root/dev/fuse" ]; then
  touch "$root/dev/fuse" && mount --bind /dev/fuse "$root/dev/fuse"
fi
mkdir -p "$root/root/src" "$root/mnt/agent"
echo "in the chroot" >"$root/root/src/hello.txt"
if ! out=$(in_root capsule init /root/agent --id chroot-agent --name Chroot --workspace /root/src 2>&1); then
  fail mount "capsule init: $out"
elif ! out=$(in_root mount -t fuse.capsulefs /root/agent /mnt/agent 2>&1); then
  fail mount "mount -t fuse.capsulefs exited: $out"
else
  read_back=$(cat "$root/mnt/agent/files/hello.txt" 2>&1)
  in_root umount /mnt/agent
  in_root flock -w 30 /root/agent/.capsule/mount.lock true
  if [ "$read_back" = "in the chroot" ] && in_root capsule verify /root/agent >/dev/null 2>&1; then
    pass mount
  else
    fail mount "files/hello.txt read '$read_back', or capsule verify refused the folder after umount"
  fi
fi
rm -rf "$root/root/agent" "$root/root/src" "$root/mnt/agent" "$root/tmp/$(basename "$deb")"

echo "# edited by the admin" >>"$root/etc/default/capsule-sidecar"
cp "$next" "$root/tmp/"
if ! out=$(in_root apt-get install -y -q --no-install-recommends "/tmp/$(basename "$next")" 2>&1); then
  fail upgrade "apt-get install of the next version exited: $(tail -n 5 <<<"$out" | tr '\n' ' ')"
elif [ "$(in_root dpkg-query -W -f='${Version}' capsulefs)" != "$version+next" ]; then
  fail upgrade "dpkg says version $(in_root dpkg-query -W -f='${Version}' capsulefs) after the upgrade"
elif ! grep -qx "# edited by the admin" "$root/etc/default/capsule-sidecar"; then
  fail upgrade "the upgrade replaced the admin's /etc/default/capsule-sidecar"
elif [ "$(in_root capsule --version 2>&1)" != "capsule $version" ]; then
  fail upgrade "capsule --version after the upgrade: $(in_root capsule --version 2>&1)"
else
  pass upgrade
fi
rm -f "$root/tmp/$(basename "$next")"

in_root dpkg -L capsulefs >"$root/../listed" 2>&1
if ! grep -qx /usr/bin/capsulefs "$root/../listed" || ! grep -qx /etc/default/capsule-sidecar "$root/../listed"; then
  fail listed "dpkg -L capsulefs: $(head -n 5 "$root/../listed" | tr '\n' ' ')"
fi
if out=$(in_root apt-get purge -y -q capsulefs 2>&1) && out+=$(in_root apt-get autoremove --purge -y -q 2>&1); then
  pass purge
else
  fail purge "apt-get purge or autoremove exited: $(tail -n 5 <<<"$out" | tr '\n' ' ')"
fi
left=""
while read -r path; do
  [ -e "$root$path" ] || continue
  [ -d "$root$path" ] && continue  # a folder other packages share (or /lib, a link to one)
  left="$left $path"
done <"$root/../listed"
if in_root dpkg -s capsulefs >/dev/null 2>&1; then
  fail nothing_left "dpkg still knows capsulefs: $(in_root dpkg -s capsulefs | grep Status)"
elif [ -n "$left" ]; then
  fail nothing_left "left after the purge:$left"
else
  tree >"$root/../after.tree"
  if diff -u "$root/../before.tree" "$root/../after.tree" >"$root/../tree.diff"; then
    pass nothing_left
  else
    fail nothing_left "the tree differs from before the install: $(grep '^[-+]\.' "$root/../tree.diff" | head -n 10 | tr '\n' ' ')"
  fi
fi
EOF

results=$work/results
: >"$results"
# The chroot's mounts (and the capsule's) stay in a mount namespace of the test's own.
unshare -m --propagation private mmdebstrap --variant=minbase --components=main --quiet \
  --customize-hook="bash $work/in_chroot.sh \"\$1\" $deb $version $results $next" \
  bookworm "$work/chroot" "$mirror" >"$work/mmdebstrap.log" 2>&1
rc=$?
cat "$results"
passed=$(grep -c '^PASS ' "$results")
failed=$(grep -c '^FAIL ' "$results")
if [ "$rc" -ne 0 ]; then
  echo "FAIL mmdebstrap: exit $rc: $(tail -n 5 "$work/mmdebstrap.log" | tr '\n' ' ')"
  failed=$((failed + 1))
fi
[ "$passed" -eq 6 ] || [ "$failed" -gt 0 ] || failed=1  # a check that never reported
echo "took $(($(date +%s) - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -eq 6 ]
