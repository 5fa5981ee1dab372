#!/usr/bin/env bash
# The manual pages as a reader gets them: installed with tests/install.sh under a prefix,
# found by `man` through MANPATH, and rendered to text, where the known breakages of mdoc
# show (mandoc -Tlint passes them all):
#   - a .Qq list on one line, rendered {"ok, "files, ...""""} (each Qq runs to the line's end)
#   - options nested in a synopsis, [--owner OWNER [--workspace SRC]] (each Op does too)
#   - a cross-reference to a page of the project that is not installed
#   - a page without the sections a reader looks for
# usage: man_render_test.sh INSTALL_SH CAPSULE CAPSULEFS PAGE...
set -u
install_sh=$1 capsule=$2 capsulefs=$3
shift 3
pages=("$@")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
prefix=$tmp/prefix
rm -rf "$prefix"
status=0
fail() {
  echo "FAIL: $*"
  status=1
}

export MAN_DISABLE_SECCOMP=1 MANWIDTH=80 MANPAGER=cat PAGER=cat
CAPSULE=$capsule CAPSULEFS=$capsulefs MAN_DIR=$(dirname "${pages[0]}") "$install_sh" "$prefix" || {
  echo "FAIL: install.sh"
  exit 1
}
for program in capsule capsulefs; do
  "$prefix/bin/$program" --version >/dev/null || fail "$prefix/bin/$program --version"
done
"$install_sh" >/dev/null 2>&1
[ $? -eq 2 ] || fail "install.sh without PREFIX: not a usage error"

for page in "${pages[@]}"; do
  file=$(basename "$page")
  name=${file%.*} section=${file##*.}
  found=$(MANPATH=$prefix/share/man man -w "$section" "$name" 2>&1)
  [ "$found" = "$prefix/share/man/man$section/$file" ] || fail "man -w $section $name: '$found'"
  text=$(MANPATH=$prefix/share/man man "$section" "$name" 2>"$tmp/man.err" | col -b)
  [ -s "$tmp/man.err" ] && fail "$file: man said: $(cat "$tmp/man.err")"
  [ -n "$text" ] || { fail "$file: man rendered nothing"; continue; }
  mandoc_text=$(mandoc -Tutf8 "$page" | col -b)
  for rendered in "$text" "$mandoc_text"; do
    # A list whose quotes never close: {"ok, "files, "signer""""}  or  {"mode: bits, ...
    bad=$(grep -nE '\{"[A-Za-z_]+[,:]( |$)' <<<"$rendered")
    [ -n "$bad" ] && fail "$file: a quoted list broken (Qq runs to the line's end):"$'\n'"$bad"
    bad=$(grep -nE '"""' <<<"$rendered")
    [ -n "$bad" ] && fail "$file: quotes piled up:"$'\n'"$bad"
    # An option bracket opened inside another: [--owner OWNER [--workspace SRC]], across lines too.
    bad=$(tr '\n' ' ' <<<"$rendered" | grep -oE '\[-[^][]*\[-[^]]*\]' | head -3)
    [ -n "$bad" ] && fail "$file: nested option brackets: $bad"
  done
  # Every page of the project it names is installed.
  for ref in $(grep -oE '\bcapsule[a-z-]*\([1-8]\)' <<<"$text" | sort -u); do
    ref_name=${ref%(*} ref_section=${ref#*(}
    ref_section=${ref_section%)}
    [ -e "$prefix/share/man/man$ref_section/$ref_name.$ref_section" ] ||
      fail "$file names $ref, which is not installed"
  done
  echo "rendered: $file"
done

# The sections a reader of a program's page looks for.
for file in capsule.1 capsulefs.8; do
  section=${file##*.}
  text=$(MANPATH=$prefix/share/man man "$section" "${file%.*}" | col -b)
  for heading in NAME SYNOPSIS DESCRIPTION FILES "EXIT STATUS" EXAMPLES "SEE ALSO"; do
    grep -q "^$heading\$" <<<"$text" || fail "$file: no $heading section"
  done
done
# The synopsis of capsule.1 names every command `capsule --help` lists.
synopsis=$(MANPATH=$prefix/share/man man 1 capsule | col -b | sed -n '/^SYNOPSIS/,/^DESCRIPTION/p')
for command in $("$prefix/bin/capsule" --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }'); do
  grep -qE "capsule ([a-z-]+ \| )*$command( |$)" <<<"$synopsis" || fail "capsule.1 SYNOPSIS: no capsule $command"
done
[ $status -eq 0 ] && echo "all pages render clean"
exit $status
