#!/usr/bin/env bash
# Every manual page is clean under mandoc's linter (warnings count as failures).
set -u
status=0
for page in "$@"; do
  out=$(mandoc -Tlint -W warning "$page" 2>&1)
  if [ -n "$out" ]; then
    echo "$out"
    status=1
  else
    echo "clean: $page"
  fi
done
exit $status
