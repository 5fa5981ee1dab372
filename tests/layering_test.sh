#!/usr/bin/env bash
# The floors of the tree (ARCHITECTURE.md): each folder includes only the floors below it.
# Bazel's deps and visibility refuse most of what would break this; this test reads every
# #include "..." line of the sources it is given and refuses the rest, such as a library that
# names a test helper, or a floor that includes a folder whose target it happens to reach.
#
#   tests/layering_test.sh FILE...    checks FILEs (paths relative to the workspace root)
#
# It first checks itself on a file that breaks the rules, so that a broken checker cannot
# pass silently.
set -uo pipefail

# What a source folder may include, as a regular expression over the included path.
allowed_for() {
  local base='capsule/base/'
  local format="$base|capsule/format/"
  local journal="$format|journal/[a-z_]+\\.h"
  case "$1" in
    capsule/base/*)     echo "^($base)" ;;
    capsule/format/*)   echo "^($format)" ;;
    capsule/cli/*)      echo "^(capsule/|journal/|fs/|mcp/|move/|sandbox/)" ;;
    journal/render/*)   echo "^($journal|journal/render/)" ;;
    journal/owned/*)    echo "^($journal|journal/owned/)" ;;
    journal/interop/*)  echo "^($journal|journal/interop/)" ;;
    journal/*)          echo "^($journal)" ;;
    fs/*)               echo "^($journal|journal/owned/|fs/)" ;;
    mcp/*)              echo "^($journal|journal/owned/|mcp/)" ;;
    sandbox/*)          echo "^($format|sandbox/)" ;;
    move/seal/*)        echo "^($base|move/seal/)" ;;
    move/net/*)         echo "^($base|move/net/)" ;;
    move/stream/*)      echo "^($journal|move/stream/)" ;;
    move/*)             echo "^($journal|journal/render/|fs/control_client\\.h|sandbox/|move/)" ;;
    tests/*)            echo "^(capsule/|journal/|fs/|mcp/|move/|sandbox/|tests/)" ;;
    *)                  echo "" ;;
  esac
}

# Tests, fuzz targets and benchmarks may also use the test helpers.
is_test_code() {
  case "$1" in
    *_test.cc|*_fuzz.cc|*_bench.cc|*test_util.*|*/faulty_target.h|capsule/base/temp_dir.*|tests/*) return 0 ;;
  esac
  return 1
}

# Prints one line per include against the floors; returns 1 when there is any.
check() {
  local bad=0 file allowed line target
  for file in "$@"; do
    case "$file" in *.cc|*.h) ;; *) continue ;; esac
    allowed=$(allowed_for "$file")
    if [ -z "$allowed" ]; then
      echo "$file: not in any floor of ARCHITECTURE.md"
      bad=1
      continue
    fi
    while IFS= read -r line; do
      target=${line#*\"}
      target=${target%%\"*}
      case "$target" in */*) ;; *) continue ;; esac  # <system> and "gtest/..." style only
      case "$target" in gtest/*|gmock/*|CLI/*|nlohmann/*|fuse3/*|openssl/*) continue ;; esac
      if [ "$target" = "capsule/base/temp_dir.h" ] || [[ $target == tests/* ]]; then
        if ! is_test_code "$file"; then
          echo "$file: includes $target, a test helper, outside tests"
          bad=1
        fi
        continue
      fi
      if ! [[ $target =~ $allowed ]]; then
        echo "$file: includes $target, against the floors (ARCHITECTURE.md)"
        bad=1
      fi
    done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file")
  done
  return $bad
}

# The checker must catch a floor that reaches up, and a library that names a test helper.
self=$(mktemp -d)
trap 'rm -rf "$self"' EXIT
mkdir -p "$self/capsule/base" "$self/journal" "$self/move/seal"
printf '#include "journal/journal.h"\n' > "$self/capsule/base/up.cc"
printf '#include "capsule/base/temp_dir.h"\n' > "$self/journal/helper.cc"
printf '#include "move/stream/format.h"\n' > "$self/move/seal/sideways.cc"
printf '#include "capsule/base/status.h"\n' > "$self/move/seal/fine.cc"
caught=$(cd "$self" && check capsule/base/up.cc journal/helper.cc move/seal/sideways.cc move/seal/fine.cc)
if [ "$(printf '%s\n' "$caught" | grep -c .)" -ne 3 ] || printf '%s\n' "$caught" | grep -q fine.cc; then
  echo "layering_test: the checker itself is broken; it reported:"
  printf '%s\n' "$caught"
  exit 1
fi

if [ "$#" -eq 0 ]; then
  echo "layering_test: no files given"
  exit 1
fi
if check "$@"; then
  echo "layering_test: $# files, every include within its floor"
else
  exit 1
fi
