#!/usr/bin/env bash
# Mounting as admins mount, through the real mount(8) and mount.fuse3 with the built capsulefs:
#   - mount -t fuse.capsulefs DIR MNT -o OPTIONS, with the options an fstab line usually
#     carries (defaults, nofail, _netdev, relatime, noatime, x-systemd.*): a file of the
#     workspace reads through the mount, a write lands, the mount is nosuid,nodev although
#     `defaults` asks for suid and dev; umount ends the driver and the folder verifies;
#   - an /etc/fstab line, mounted with `mount MNT` (`mount --fstab` where /etc/fstab is missing).
# mount(8) runs its helpers without the caller's PATH, so capsulefs is put where the shell's
# default path finds it: /usr/local/sbin, a tmpfs in a mount namespace of the test's own
# (unshare -m), as is the fstab (bound over /etc/fstab there): nothing of the machine changes.
#
#   tests/mount_helper_test.sh CAPSULE CAPSULEFS
# Prints "PASS name" or "FAIL name: why" per check and a closing "N passed, M failed".
set -uo pipefail
capsule=$(realpath "$1") capsulefs=$(realpath "$2")
for tool in mount.fuse3 unshare flock; do
  command -v "$tool" >/dev/null || { echo "FAIL setup: no $tool"; echo "0 passed, 1 failed"; exit 1; }
done
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/mount_helper.XXXXXX")
work=$(realpath "$work")
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/src" "$work/mnt" "$work/mnt2"
echo "hello from the workspace" >"$work/src/hello.txt"
"$capsule" init "$work/agent" --id helper-agent --name Helper --workspace "$work/src" >/dev/null ||
  { echo "FAIL setup: capsule init"; echo "0 passed, 1 failed"; exit 1; }
printf '%s  %s  fuse.capsulefs  defaults,nofail,relatime  0  0\n' "$work/agent" "$work/mnt2" >"$work/fstab"

# The checks run in a mount namespace of their own; each prints PASS or FAIL lines.
cat >"$work/inside.sh" <<'EOF'
set -uo pipefail
work=$1 capsule=$2 capsulefs=$3
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
# mount(8) keeps what it knows of user-space options in /run/mount: a place of our own.
mkdir -p /run/mount 2>/dev/null
mount -t tmpfs capsule-test /run/mount 2>/dev/null
mount -t tmpfs capsule-test /usr/local/sbin || { fail setup "tmpfs on /usr/local/sbin"; exit 0; }
cp "$capsulefs" /usr/local/sbin/capsulefs
# The fstab bound over /etc/fstab; a machine without one (a bare container) reads it with
# mount --fstab, the same parser.
fstab_option=()
if [ -f /etc/fstab ]; then
  mount --bind "$work/fstab" /etc/fstab || { fail setup "bind the fstab"; exit 0; }
else
  fstab_option=(--fstab "$work/fstab")
fi

# mount_options MNT: the kernel's options of the mount at MNT ("" when none).
mount_options() { awk -v m="$1" '$5 == m { print $6 }' /proc/self/mountinfo; }
# unmounted MNT: umount, then wait (30 s at most) for the driver to let go of the folder.
unmounted() {
  umount "$1" || return 1
  flock -w 30 "$work/agent/.capsule/mount.lock" true
}

out=$(mount -t fuse.capsulefs "$work/agent" "$work/mnt" \
  -o defaults,nofail,_netdev,relatime,noatime,x-systemd.device-timeout=5s 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  fail mount_t "mount -t fuse.capsulefs exited $rc: $out"
else
  options=$(mount_options "$work/mnt")
  type=$(awk -v m="$work/mnt" '$5 == m { for (i = 7; $i != "-"; i++); print $(i + 1) }' /proc/self/mountinfo)
  if [ "$(cat "$work/mnt/files/hello.txt" 2>&1)" = "hello from the workspace" ] && [ "$type" = fuse.capsulefs ]; then
    pass mount_t
  else
    fail mount_t "type '$type', files/hello.txt: $(cat "$work/mnt/files/hello.txt" 2>&1)"
  fi
  case ",$options," in
    *,nosuid,*nodev,* | *,nodev,*nosuid,*) pass nosuid_nodev ;;
    *) fail nosuid_nodev "defaults (suid, dev) left the mount $options" ;;
  esac
  echo "written through the mount" >"$work/mnt/files/new.txt"
  status=$("$capsule" status "$work/mnt" 2>&1)
  if unmounted "$work/mnt"; then
    if [ -z "$(mount_options "$work/mnt")" ] && verify=$("$capsule" verify "$work/agent" 2>&1); then
      pass umount
    else
      fail umount "still mounted, or capsule verify: $verify"
    fi
  else
    fail umount "umount or the driver's exit failed (status was: $status)"
  fi
fi

out=$(mount "${fstab_option[@]}" "$work/mnt2" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  fail fstab "mount $work/mnt2 exited $rc: $out"
else
  if [ "$(cat "$work/mnt2/files/new.txt" 2>&1)" = "written through the mount" ]; then
    pass fstab
  else
    fail fstab "files/new.txt through the fstab mount: $(cat "$work/mnt2/files/new.txt" 2>&1)"
  fi
  unmounted "$work/mnt2" || fail fstab_umount "umount $work/mnt2"
fi
EOF

result=$(unshare -m --propagation private bash "$work/inside.sh" "$work" "$capsule" "$capsulefs" 2>&1)
echo "$result"
passed=$(grep -c '^PASS ' <<<"$result")
failed=$(grep -c '^FAIL ' <<<"$result")
[ "$passed" -eq 4 ] || [ "$failed" -gt 0 ] || failed=1  # a check that never reported
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -eq 4 ]
