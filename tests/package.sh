#!/usr/bin/env bash
# Builds the Debian package capsulefs_<version>_<arch>.deb from this checkout, with dpkg-deb:
#   /usr/bin/capsule, /usr/bin/capsulefs            stripped, as Bazel built them
#   /usr/share/man/man{1,5,7,8}/*.gz                every page of man/, in its section
#   /usr/share/doc/capsulefs/copyright, changelog.gz
#   /lib/systemd/system/capsulefs@.service, capsule-sidecar.service
#   /etc/default/capsule-sidecar                    a conffile: the sidecar's options
# Depends is what dpkg-shlibdeps finds the two programs linked against, and fuse3 (mount.fuse3
# and fusermount3, which the mount and its units run). The files come from packaging/.
#
# usage: tests/package.sh [OUTDIR]      (OUTDIR defaults to the current folder)
# Builds the programs with `bazel build //:capsule //:capsulefs` first, unless CAPSULE and
# CAPSULEFS name programs already built (the suite's tests pass their own; MAN_DIR likewise).
# PACKAGE_COMPRESSION: dpkg-deb's -Z (default xz, as Debian's packages).
# Prints the path of the package on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-.}")
[ $# -le 1 ] || { echo "usage: tests/package.sh [OUTDIR]" >&2; exit 2; }
packaging=${PACKAGING_DIR:-$here/packaging}
man_dir=${MAN_DIR:-$here/man}

if [ -z "${CAPSULE:-}" ] || [ -z "${CAPSULEFS:-}" ]; then
  (cd "$here" && bazel build //:capsule //:capsulefs >&2)
  CAPSULE=$here/bazel-bin/capsule
  CAPSULEFS=$here/bazel-bin/capsulefs
fi
for program in "$CAPSULE" "$CAPSULEFS"; do
  [ -x "$program" ] || { echo "package.sh: $program: not built" >&2; exit 1; }
done

# One version: the programs' (capsule --version), which the changelog's newest entry must name.
version=$("$CAPSULE" --version | sed -n 's/^capsule \([0-9][0-9A-Za-z.+~]*\)$/\1/p')
[ -n "$version" ] || { echo "package.sh: $CAPSULE --version names no version" >&2; exit 1; }
changelog_version=$(sed -n '1s/^capsulefs (\([^)]*\)).*/\1/p' "$packaging/changelog")
if [ "$changelog_version" != "$version" ]; then
  echo "package.sh: packaging/changelog's newest entry is $changelog_version, the programs are $version:" \
    "add an entry for $version" >&2
  exit 1
fi
arch=$(dpkg --print-architecture)

work=$(mktemp -d "${TMPDIR:-/tmp}/capsulefs-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
umask 022

install -d "$root/usr/bin"
for program in "$CAPSULE" "$CAPSULEFS"; do
  name=$(basename "$program")
  # As dh_strip does: no debugging symbols, no build notes.
  strip --strip-unneeded --remove-section=.comment --remove-section=.note -o "$root/usr/bin/$name" "$program"
  chmod 0755 "$root/usr/bin/$name"
done

pages=0
for page in "$man_dir"/*.[1-8]; do
  [ -e "$page" ] || continue
  section=${page##*.}
  install -d "$root/usr/share/man/man$section"
  gzip -9n <"$page" >"$root/usr/share/man/man$section/$(basename "$page").gz"
  chmod 0644 "$root/usr/share/man/man$section/$(basename "$page").gz"
  pages=$((pages + 1))
done
[ "$pages" -gt 0 ] || { echo "package.sh: $man_dir: no manual pages" >&2; exit 1; }

doc=$root/usr/share/doc/capsulefs
install -d "$doc"
install -m 0644 "$packaging/copyright" "$doc/copyright"
gzip -9n <"$packaging/changelog" >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"

install -d "$root/lib/systemd/system" "$root/etc/default"
install -m 0644 "$packaging/systemd/capsulefs@.service" "$packaging/systemd/capsule-sidecar.service" \
  "$root/lib/systemd/system/"
install -m 0644 "$packaging/default/capsule-sidecar" "$root/etc/default/capsule-sidecar"

# Depends: the shared libraries' packages, as dpkg-shlibdeps reads them from the programs.
install -d "$work/src/debian"
printf 'Source: capsulefs\n\nPackage: capsulefs\nArchitecture: any\n' >"$work/src/debian/control"
shlibs=$(cd "$work/src" && dpkg-shlibdeps -O "$root/usr/bin/capsule" "$root/usr/bin/capsulefs" 2>"$work/shlibdeps.err") || {
  cat "$work/shlibdeps.err" >&2
  exit 1
}
depends=${shlibs#shlibs:Depends=}
[ "$depends" != "$shlibs" ] && [ -n "$depends" ] || { echo "package.sh: dpkg-shlibdeps said: $shlibs" >&2; exit 1; }
depends="$depends, fuse3"

install -d "$root/DEBIAN"
size=$(du -k -s --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/$depends/" \
  "$packaging/control.in" >"$root/DEBIAN/control"
echo /etc/default/capsule-sidecar >"$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

mkdir -p "$out"
deb=$out/capsulefs_${version}_${arch}.deb
dpkg-deb --root-owner-group "-Z${PACKAGE_COMPRESSION:-xz}" --build "$root" "$deb" >&2
echo "$deb"
