#!/usr/bin/env bash
# The Debian package as tests/package.sh builds it from the suite's programs, checked without
# installing it (tests/package_install_test.sh installs and purges it, behind run.sh --long):
#   - lintian finds nothing at the warning level or above;
#   - it holds the two programs (stripped, running), every page of man/ gzipped in its
#     section, the copyright and changelog, both units, the default options as a conffile;
#   - Depends names the package of every shared library the programs are linked against, and
#     fuse3;
#   - systemd-analyze verify of both units says nothing;
#   - a changelog whose newest entry is not the programs' version refuses the build.
#
#   tests/package_test.sh PACKAGE_SH CAPSULE CAPSULEFS PACKAGING_FILE... -- MAN_PAGE...
# Prints "PASS name" or "FAIL name: why" per check and a closing "N passed, M failed".
set -uo pipefail
package_sh=$(realpath "$1") capsule=$(realpath "$2") capsulefs=$(realpath "$3")
shift 3
packaging=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in */control.in) packaging=$(dirname "$(realpath "$1")") ;; esac
  shift
done
shift
man_dir=$(dirname "$(realpath "$1")")
pages=("$@")

work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/package_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

# Programs built with AddressSanitizer (the suite's second configuration) are three times the
# size and never shipped: their package is not compressed, and lintian, which takes minutes
# over them, judges the package of the default build only.
sanitized=false
readelf -d "$capsule" | grep -q 'NEEDED.*libasan' && sanitized=true
compression=xz
$sanitized && compression=none

build() {  # build OUTDIR [PACKAGING_DIR]: the package's path on standard output
  CAPSULE=$capsule CAPSULEFS=$capsulefs MAN_DIR=$man_dir PACKAGING_DIR=${2:-$packaging} \
    PACKAGE_COMPRESSION=$compression TMPDIR=$work bash "$package_sh" "$1" 2>"$work/build.err" | tail -n 1
}

deb=$(build "$work/out")
if [ ! -f "$deb" ]; then
  fail build "tests/package.sh made no package: $(tail -n 3 "$work/build.err")"
  echo "$passed passed, $((failed + 1)) failed"
  exit 1
fi
pass build

case $(basename "$deb") in
  capsulefs_$("$capsule" --version | cut -d' ' -f2)_$(dpkg --print-architecture).deb) pass name ;;
  *) fail name "$(basename "$deb") is not capsulefs_VERSION_ARCH.deb" ;;
esac

# lintian: exit 2 on a warning or an error; its output kept for the reader.
if $sanitized; then
  echo "SKIP lintian: programs built with AddressSanitizer (the default build's package is checked)"
else
  lintian --fail-on warning,error "$deb" >"$work/lintian.out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ] && ! grep -qE '^[EW]: ' "$work/lintian.out"; then
    pass lintian
  else
    fail lintian "exit $rc: $(grep -E '^[EW]: ' "$work/lintian.out" | head -n 5 | tr '\n' ';')"
  fi
  sed 's/^/  lintian: /' "$work/lintian.out"
fi

dpkg-deb --contents "$deb" | awk '{print $1, $6}' | sed 's#\./#/#' >"$work/contents"
missing=""
for expected in "-rwxr-xr-x /usr/bin/capsule" "-rwxr-xr-x /usr/bin/capsulefs" \
  "-rw-r--r-- /usr/share/doc/capsulefs/copyright" "-rw-r--r-- /usr/share/doc/capsulefs/changelog.gz" \
  "-rw-r--r-- /lib/systemd/system/capsulefs@.service" "-rw-r--r-- /lib/systemd/system/capsule-sidecar.service" \
  "-rw-r--r-- /etc/default/capsule-sidecar" "-rw-r--r-- /usr/share/bash-completion/completions/capsule" \
  "-rw-r--r-- /usr/share/zsh/vendor-completions/_capsule" \
  "-rw-r--r-- /usr/share/fish/vendor_completions.d/capsule.fish"; do
  grep -qxF -- "$expected" "$work/contents" || missing="$missing [$expected]"
done
[ -z "$missing" ] && pass files || fail files "missing:$missing"

missing=""
for page in "${pages[@]}"; do
  name=$(basename "$page")
  grep -qxF -- "-rw-r--r-- /usr/share/man/man${name##*.}/$name.gz" "$work/contents" || missing="$missing $name"
done
[ -z "$missing" ] && pass man_pages || fail man_pages "not in their section, gzipped:$missing"

root=$work/root
dpkg-deb -x "$deb" "$root"
if [ "$(zcat "$root/usr/share/man/man8/capsulefs.8.gz" | sha256sum)" = "$(sha256sum <"$man_dir/capsulefs.8")" ]; then
  pass man_content
else
  fail man_content "capsulefs.8.gz is not man/capsulefs.8"
fi

# Stripped, and still the programs: they run and say their version.
if file "$root/usr/bin/capsule" "$root/usr/bin/capsulefs" | grep -q 'not stripped'; then
  fail stripped "$(file "$root/usr/bin/capsule" "$root/usr/bin/capsulefs" | grep 'not stripped')"
elif [ "$("$root/usr/bin/capsulefs" --version)" != "$("$capsulefs" --version)" ]; then
  fail stripped "the packaged capsulefs says $("$root/usr/bin/capsulefs" --version)"
else
  pass stripped
fi

# The units as systemd reads them: systemd-analyze verify, in the package's own tree (with the
# machine's units they name, and the programs they run), says nothing at all, not even a
# warning it would ignore (an unknown key, a value it cannot parse).
mkdir -p "$root/usr/lib/systemd" "$root/bin"
cp -a /lib/systemd/system "$root/usr/lib/systemd/"
cp "$(command -v fusermount3)" "$root/bin/fusermount3"
said=""
for unit in capsule-sidecar.service capsulefs@srv-agents-planner.service; do
  said+=$(systemd-analyze verify --man=no --root="$root" "$root/lib/systemd/system/$unit" 2>&1) ||
    said+=" (exit $?)"
done
[ -z "$said" ] && pass units || fail units "systemd-analyze verify: $said"

if [ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles)" = "/etc/default/capsule-sidecar" ]; then
  pass conffiles
else
  fail conffiles "conffiles is not /etc/default/capsule-sidecar alone"
fi

# Depends: each library the programs are linked against (NEEDED; the libraries those load
# are their packages' business) comes from a package it names.
depends=$(dpkg-deb --field "$deb" Depends)
names=$(sed 's/ *([^)]*)//g; s/, */\n/g' <<<"$depends")  # one package name a line
missing=""
needed=$(readelf -d "$capsule" "$capsulefs" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
for lib in $(ldd "$capsule" "$capsulefs" | awk -v needed="$needed" 'BEGIN { split(needed, n, "\n"); for (i in n) want[n[i]] = 1 }
                                                 $1 in want && $3 ~ /^\// { print $3 }' | sort -u); do
  owner=$(dpkg -S "$(realpath "$lib")" 2>/dev/null | head -n 1 | cut -d: -f1) ||
    owner=$(dpkg -S "$lib" 2>/dev/null | head -n 1 | cut -d: -f1)
  [ -n "$owner" ] || { missing="$missing $lib(no package)"; continue; }
  [ "$owner" = libc6 ] && [ "$lib" != "${lib%ld-linux*}" ] && continue
  grep -qxF "$owner" <<<"$names" || missing="$missing $owner"
done
grep -qxF fuse3 <<<"$names" || missing="$missing fuse3"
[ -z "$missing" ] && pass depends || fail depends "Depends ($depends) lacks:$missing"

# A changelog that does not name the programs' version refuses the build, naming both.
cp -r "$packaging" "$work/stale"
sed -i '1s/(\([^)]*\))/(0.0.1)/' "$work/stale/changelog"
stale=$(build "$work/stale-out" "$work/stale")
if [ -z "$stale" ] && grep -q "packaging/changelog's newest entry is 0.0.1, the programs are" "$work/build.err"; then
  pass stale_changelog
else
  fail stale_changelog "built ($stale) or another message: $(cat "$work/build.err")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
