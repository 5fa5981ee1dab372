#!/usr/bin/env bash
# Real programs at work in files/ of a real mount, each checked against the same work done in a
# native folder: git (commit, gc, fsck, clones), a python venv with pip installing a local
# wheel, sqlite3 in WAL mode with two writers at once (shared mmap of the -shm), make + gcc
# with an incremental rebuild, tar (with and without hard links) and rsync -a there and back.
# Then the mount is unmounted, capsule verify must accept the folder, and a remount must still
# hold the repository, the database, the build, the venv and the trees.
#
#   tests/real_programs_test.sh CAPSULE CAPSULEFS
#
# Needs /dev/fuse, fusermount3, git, sqlite3, make, gcc, rsync, tar and /usr/bin/python3 with
# venv (tests/setup.sh installs them). Prints "PASS name" or "FAIL name: why" per case and a
# closing "N passed, M failed"; exits 1 when a case failed. Every case runs even when one fails.
# REAL_PROGRAMS_CASE_TIMEOUT (seconds, default 300) bounds each case; REAL_PROGRAMS_KEEP=1
# keeps the temporary folder for a look afterwards.
set -euo pipefail

# ---------------------------------------------------------------------------------------------
# Helpers shared by the cases. A case runs in its own bash process (see the end of this file)
# with set -e; fail records why and stops it.

fail() {
  printf '%s\n' "$*" >"$RP_REASON"
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

# expect_same WHAT FILE_A FILE_B: the two files are byte for byte equal.
expect_same() {
  if ! cmp -s "$2" "$3"; then
    diff -u "$2" "$3" | sed -n '1,40p' >&2 || true
    fail "$1 differ ($2 vs $3)"
  fi
}

# run_logged WHAT COMMAND...: runs it; on a non-zero exit fails naming WHAT, the status and the
# first line of its standard error.
run_logged() {
  local what=$1 err rc=0
  shift
  err=$(mktemp "$RP_WORK/stderr.XXXXXX")
  "$@" 2>"$err" || rc=$?
  cat "$err" >&2
  if ((rc != 0)); then
    fail "$what exited $rc: $(grep -m1 . "$err" || echo 'no message')"
  fi
  rm -f "$err"
}

# listing DIR: one line per entry beneath DIR (DIR itself as "."): type, mode, size (not for
# folders, whose size is the file system's own business), mtime with nanoseconds, and the name
# with a link's target.
listing() {
  (cd "$1" && find . -exec stat -c '%F|%a|%s|%.9Y|%N' {} + |
    awk -F'|' 'BEGIN { OFS = "|" } $1 == "directory" { $3 = "-" } { print }' | LC_ALL=C sort)
}

# ---------------------------------------------------------------------------------------------
# git: init, add and commit of 300 headers (and a script and a link), a second commit that
# edits, removes and renames, gc, fsck, status; clones from it into the mount (local and
# through the pack protocol) and into a native folder. The same commits made natively with the
# same dates have the same ids.

case_git() {
  local src=$RP_WORK/git-src m=$RP_FILES/git n=$RP_WORK/native/git
  mkdir -p "$src" "$m" "$n"
  (cd /usr/include && find . -name '*.h' -type f -size -256k | LC_ALL=C sort | awk 'NR <= 300') \
    >"$RP_WORK/git-list"
  [[ $(wc -l <"$RP_WORK/git-list") -eq 300 ]] || fail "fewer than 300 headers under /usr/include"
  (cd /usr/include && xargs -d '\n' cp --parents -t "$src" <"$RP_WORK/git-list")
  mkdir -p "$src/tools"
  printf '#!/bin/sh\necho tool\n' >"$src/tools/run.sh"
  chmod 0755 "$src/tools/run.sh"
  ln -s tools/run.sh "$src/run"

  export GIT_AUTHOR_NAME="Real Programs" GIT_AUTHOR_EMAIL="real@programs.test"
  export GIT_COMMITTER_NAME="Real Programs" GIT_COMMITTER_EMAIL="real@programs.test"
  local root
  for root in "$m" "$n"; do
    local repo=$root/repo
    mkdir "$repo"
    cp -a "$src/." "$repo/"
    run_logged "git init in $root" git -C "$repo" init -q -b main
    run_logged "git add in $root" git -C "$repo" add -A
    GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z" \
      run_logged "git commit in $root" git -C "$repo" commit -q -m "300 headers"
    # A second commit: edit ten files, remove five, rename five.
    local i=0 f
    while IFS= read -r f; do
      i=$((i + 1))
      if ((i <= 10)); then
        printf '/* edited by real_programs_test */\n' >>"$repo/$f"
      elif ((i <= 15)); then
        git -C "$repo" rm -q "$f"
      elif ((i <= 20)); then
        git -C "$repo" mv "$f" "$f.renamed"
      fi
    done < <(sed -n '101,120p' "$RP_WORK/git-list")
    run_logged "git add in $root" git -C "$repo" add -A
    GIT_AUTHOR_DATE="2026-01-02T00:00:00Z" GIT_COMMITTER_DATE="2026-01-02T00:00:00Z" \
      run_logged "git commit in $root" git -C "$repo" commit -q -m "edit, remove, rename"
    run_logged "git gc in $root" git -C "$repo" gc -q
    run_logged "git fsck --full in $root" git -C "$repo" fsck --full --strict
    local status
    status=$(git -C "$repo" status --porcelain)
    [[ -z $status ]] || fail "git status --porcelain in $root is not empty: $(head -n 3 <<<"$status")"
    [[ $(git -C "$repo" count-objects -v | awk '$1 == "count:" { print $2 }') == 0 ]] ||
      fail "loose objects left after git gc in $root"
  done
  local head
  head=$(git -C "$n/repo" rev-parse HEAD)
  [[ $(git -C "$m/repo" rev-parse HEAD) == "$head" ]] ||
    fail "HEAD in the mount $(git -C "$m/repo" rev-parse HEAD) is not the native $head"
  git -C "$m/repo" count-objects -v | grep -E '^(in-pack|packs):' >"$RP_WORK/git-objects.m"
  git -C "$n/repo" count-objects -v | grep -E '^(in-pack|packs):' >"$RP_WORK/git-objects.n"
  expect_same "packed objects after git gc" "$RP_WORK/git-objects.n" "$RP_WORK/git-objects.m"

  # Committed blob sizes are the file sizes (lstat: a link's blob is its target).
  git -C "$m/repo" ls-tree -r -l HEAD | awk -F'\t' '{ split($1, a, " "); print $2 " " a[4] }' |
    LC_ALL=C sort >"$RP_WORK/git-blob-sizes"
  (cd "$m/repo" && git ls-files -z | xargs -0 stat -c '%n %s' | LC_ALL=C sort) >"$RP_WORK/git-file-sizes"
  [[ $(wc -l <"$RP_WORK/git-blob-sizes") -eq 297 ]] ||
    fail "HEAD holds $(wc -l <"$RP_WORK/git-blob-sizes") blobs, not 297"
  expect_same "blob sizes in HEAD and file sizes in the mount" "$RP_WORK/git-blob-sizes" \
    "$RP_WORK/git-file-sizes"

  # The tree that HEAD should check out: the native repository's work tree.
  local expected=$n/repo clone
  run_logged "git clone into the mount" git clone -q "$m/repo" "$m/clone-local"
  run_logged "git clone --no-local into the mount" git clone -q --no-local "$m/repo" "$m/clone-pack"
  run_logged "git clone into a native folder" git clone -q "$m/repo" "$n/clone"
  for clone in "$m/clone-local" "$m/clone-pack" "$n/clone"; do
    run_logged "git fsck --full in $clone" git -C "$clone" fsck --full
    [[ $(git -C "$clone" rev-parse HEAD) == "$head" ]] || fail "HEAD of $clone is not $head"
    [[ -z $(git -C "$clone" status --porcelain) ]] || fail "git status in $clone is not empty"
    diff -r --no-dereference --exclude=.git "$expected" "$clone" >&2 ||
      fail "the tree checked out in $clone differs from the committed files"
    listing "$expected" | grep -v "|'\./\.git" | cut -d'|' -f1-3,5 | LC_ALL=C sort >"$RP_WORK/git-expected-listing"
    listing "$clone" | grep -v "|'\./\.git" | cut -d'|' -f1-3,5 | LC_ALL=C sort >"$RP_WORK/git-clone-listing"
    expect_same "types, modes and sizes of $clone" "$RP_WORK/git-expected-listing" \
      "$RP_WORK/git-clone-listing"
  done
  # The work trees of the two repositories are the same files.
  diff -r --no-dereference --exclude=.git "$m/repo" "$n/repo" >&2 ||
    fail "the work trees of the mount and the native repository differ"
}

# ---------------------------------------------------------------------------------------------
# python venv + pip: a venv in files/, pip install --no-index of a wheel built here (a console
# script, a data file), the import, pip check, uninstall and install again.

make_wheel() {
  /usr/bin/python3 - "$1" <<'EOF'
import base64, hashlib, sys, zipfile

out = sys.argv[1]
name, version = "capsdemo", "1.0"
info = f"{name}-{version}.dist-info"
files = {
    f"{name}/__init__.py": 'from importlib import resources\n\nVALUE = 42\n\n'
    'def payload():\n    return resources.files(__name__).joinpath("data.txt").read_text()\n\n'
    'def main():\n    print("capsdemo", VALUE, payload().strip())\n',
    f"{name}/data.txt": "payload from the wheel\n",
    f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    "Summary: a wheel built by real_programs_test\n",
    f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: real_programs_test\nRoot-Is-Purelib: true\n"
    "Tag: py3-none-any\n",
    f"{info}/entry_points.txt": "[console_scripts]\ncapsdemo = capsdemo:main\n",
    f"{info}/top_level.txt": f"{name}\n",
}
record = []
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for path, text in files.items():
        data = text.encode()
        z.writestr(path, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
EOF
}

check_capsdemo() {
  local venv=$1 out
  out=$("$venv/bin/python" -c 'import capsdemo, sys; print(capsdemo.VALUE, capsdemo.__file__.startswith(sys.prefix), capsdemo.payload().strip())') ||
    fail "import capsdemo with $venv/bin/python failed"
  [[ $out == "42 True payload from the wheel" ]] || fail "import capsdemo in $venv printed '$out'"
  out=$("$venv/bin/capsdemo") || fail "$venv/bin/capsdemo failed"
  [[ $out == "capsdemo 42 payload from the wheel" ]] || fail "$venv/bin/capsdemo printed '$out'"
}

case_python_venv() {
  local m=$RP_FILES/python n=$RP_WORK/native/python wheel=$RP_WORK/wheels/capsdemo-1.0-py3-none-any.whl
  mkdir -p "$m" "$n" "$RP_WORK/wheels"
  make_wheel "$wheel"
  local root pip=(-m pip --disable-pip-version-check --no-input --no-cache-dir)
  for root in "$m" "$n"; do
    run_logged "python3 -m venv in $root" /usr/bin/python3 -m venv "$root/venv"
    run_logged "pip install --no-index in $root" "$root/venv/bin/python" "${pip[@]}" install -q --no-index "$wheel"
    check_capsdemo "$root/venv"
    run_logged "pip check in $root" "$root/venv/bin/python" "${pip[@]}" check
    "$root/venv/bin/python" "${pip[@]}" list --format=freeze >"$RP_WORK/pip-list.$([[ $root == "$m" ]] && echo m || echo n)"
    run_logged "pip uninstall in $root" "$root/venv/bin/python" "${pip[@]}" uninstall -q -y capsdemo
    ! "$root/venv/bin/python" -c 'import capsdemo' 2>/dev/null || fail "capsdemo still imports after pip uninstall in $root"
    [[ ! -e $root/venv/bin/capsdemo ]] || fail "$root/venv/bin/capsdemo left after pip uninstall"
    run_logged "pip install again in $root" "$root/venv/bin/python" "${pip[@]}" install -q --no-index "$wheel"
    check_capsdemo "$root/venv"
  done
  expect_same "pip list" "$RP_WORK/pip-list.n" "$RP_WORK/pip-list.m"
  # The same files, folders and links with the same modes (sizes differ: scripts and byte code
  # name the venv's path).
  (cd "$m/venv" && find . -printf '%y %m %P\n' | LC_ALL=C sort) >"$RP_WORK/venv-tree.m"
  (cd "$n/venv" && find . -printf '%y %m %P\n' | LC_ALL=C sort) >"$RP_WORK/venv-tree.n"
  expect_same "the venvs' trees" "$RP_WORK/venv-tree.n" "$RP_WORK/venv-tree.m"
}

# ---------------------------------------------------------------------------------------------
# sqlite3 in WAL mode: a python process holds a connection (its -shm mapped shared) while two
# sqlite3 processes insert 200 rows each, one transaction per row, at the same time; then the
# held connection sees all 400 through the shared -shm, integrity_check says ok.

sqlite_workload() {
  /usr/bin/python3 - "$1" <<'EOF'
import os, sqlite3, subprocess, sys, time

folder = sys.argv[1]
db = os.path.join(folder, "wal.db")
con = sqlite3.connect(db, isolation_level=None, timeout=30)
mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
assert mode == "wal", f"journal_mode is {mode}"
con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, writer TEXT NOT NULL, n INTEGER NOT NULL,"
            " pad BLOB, UNIQUE(writer, n))")
assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 0
for suffix in ("-wal", "-shm"):
    assert os.path.isfile(db + suffix), f"no {db}{suffix} while a connection is open"
maps = [line.split() for line in open("/proc/self/maps") if line.rstrip().endswith(db + "-shm")]
assert maps, f"{db}-shm is not mapped"
assert all(m[1][3] == "s" for m in maps), f"{db}-shm is not mapped shared: {maps}"

# Both writers run at once: each round gives each of them one transaction, then waits for both
# to report it done, so that every round they race for the write lock and one of them waits
# (fed all at once, SQLite's busy handler lets one writer finish before the other gets a turn).
writers = [subprocess.Popen(["sqlite3", "-bail", db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for _ in range(2)]
def writers_failed(why):
    for p in writers:
        p.kill()
    errors = " ".join(p.stderr.read().strip() for p in writers)
    sys.exit(f"{why}: {errors}")
for p in writers:
    p.stdin.write(".timeout 20000\n")
for i in range(1, 201):
    for w, p in zip("ab", writers):
        p.stdin.write(f"BEGIN IMMEDIATE;\nINSERT INTO t(writer, n, pad) VALUES('{w}', {i}, randomblob(300));\n"
                      f"COMMIT;\nSELECT 'done {w}{i}';\n")
        p.stdin.flush()
    for w, p in zip("ab", writers):
        line = p.stdout.readline().strip()
        if line != f"done {w}{i}":
            writers_failed(f"writer {w}, transaction {i}: read {line!r}")
for p in writers:
    p.stdin.close()
for p in writers:
    p.wait(timeout=120)
    err = p.stderr.read()
    assert p.returncode == 0 and not err.strip(), f"a writer exited {p.returncode}: {err.strip()}"
writers_order = [w for (w,) in con.execute("SELECT writer FROM t ORDER BY id")]
switches = sum(a != b for a, b in zip(writers_order, writers_order[1:]))
print(f"the writers took turns {switches} times", file=sys.stderr)

# The held connection reads the wal-index the writers updated, through its own mapping.
count = con.execute("SELECT count(*) FROM t").fetchone()[0]
assert count == 400, f"the held connection counts {count} rows"
check = con.execute("PRAGMA integrity_check").fetchall()
assert check == [("ok",)], f"integrity_check: {check}"
for row in con.execute("SELECT writer, count(*), count(DISTINCT n), min(n), max(n), "
                       "sum(length(pad)) FROM t GROUP BY writer ORDER BY writer"):
    print("|".join(map(str, row)))
con.close()
EOF
}

case_sqlite_wal() {
  local m=$RP_FILES/sqlite n=$RP_WORK/native/sqlite root
  mkdir -p "$m" "$n"
  for root in "$m" "$n"; do
    local tag
    tag=$([[ $root == "$m" ]] && echo m || echo n)
    sqlite_workload "$root" >"$RP_WORK/sqlite-summary.$tag" || fail "the WAL workload in $root failed"
    sqlite3 "$root/wal.db" 'PRAGMA integrity_check; SELECT count(*) FROM t; PRAGMA journal_mode;' \
      >"$RP_WORK/sqlite-check.$tag" || fail "sqlite3 could not read $root/wal.db"
    printf 'ok\n400\nwal\n' | cmp -s - "$RP_WORK/sqlite-check.$tag" ||
      fail "sqlite3 on $root/wal.db printed $(tr '\n' ' ' <"$RP_WORK/sqlite-check.$tag")"
    # Once the last connection closed, the same files are left (sqlite removes the -wal).
    (cd "$root" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort) >"$RP_WORK/sqlite-files.$tag"
  done
  expect_same "per-writer row summaries" "$RP_WORK/sqlite-summary.n" "$RP_WORK/sqlite-summary.m"
  printf 'a|200|200|1|200|60000\nb|200|200|1|200|60000\n' | cmp -s - "$RP_WORK/sqlite-summary.m" ||
    fail "per-writer rows in the mount: $(tr '\n' ' ' <"$RP_WORK/sqlite-summary.m")"
  expect_same "files left beside the database" "$RP_WORK/sqlite-files.n" "$RP_WORK/sqlite-files.m"
}

# ---------------------------------------------------------------------------------------------
# make + gcc: three sources and a Makefile; make, run, make again (nothing to do), touch one
# source: make -n and make rebuild only it and relink. The program equals the native build.

write_project() {
  local d=$1
  mkdir -p "$d"
  cat >"$d/greet.h" <<'EOF'
void greet(const char *who);
EOF
  cat >"$d/calc.h" <<'EOF'
int sum_to(int n);
EOF
  cat >"$d/greet.c" <<'EOF'
#include <stdio.h>
#include "greet.h"
void greet(const char *who) { printf("hello, %s\n", who); }
EOF
  cat >"$d/calc.c" <<'EOF'
#include "calc.h"
int sum_to(int n) { int s = 0; for (int i = 1; i <= n; ++i) s += i; return s; }
EOF
  cat >"$d/main.c" <<'EOF'
#include <stdio.h>
#include "calc.h"
#include "greet.h"
int main(void) { greet("capsule"); printf("sum=%d\n", sum_to(10)); return 0; }
EOF
  printf '%s\n' 'CC = gcc' 'CFLAGS = -O2 -Wall' '' \
    'prog: main.o greet.o calc.o' $'\t$(CC) -o $@ main.o greet.o calc.o' '' \
    'main.o: main.c greet.h calc.h' $'\t$(CC) $(CFLAGS) -c -o $@ main.c' '' \
    'greet.o: greet.c greet.h' $'\t$(CC) $(CFLAGS) -c -o $@ greet.c' '' \
    'calc.o: calc.c calc.h' $'\t$(CC) $(CFLAGS) -c -o $@ calc.c' >"$d/Makefile"
}

case_make_gcc() {
  local m=$RP_FILES/make n=$RP_WORK/native/make root
  local link='gcc -o prog main.o greet.o calc.o'
  local want_full=$'gcc -O2 -Wall -c -o main.o main.c\ngcc -O2 -Wall -c -o greet.o greet.c\ngcc -O2 -Wall -c -o calc.o calc.c\n'"$link"
  local want_greet=$'gcc -O2 -Wall -c -o greet.o greet.c\n'"$link"
  for root in "$m" "$n"; do
    write_project "$root/proj"
    local out
    out=$(make -C "$root/proj" --no-print-directory 2>&1) || fail "make in $root failed: $out"
    [[ $out == "$want_full" ]] || fail "make in $root printed: $out"
    out=$("$root/proj/prog") || fail "$root/proj/prog failed"
    [[ $out == $'hello, capsule\nsum=55' ]] || fail "$root/proj/prog printed: $out"
    make -q -C "$root/proj" || fail "make -q in $root: not up to date right after make"
    out=$(make -C "$root/proj" --no-print-directory 2>&1)
    [[ $out == "make: 'prog' is up to date." ]] || fail "a second make in $root printed: $out"
    touch "$root/proj/greet.c"
    out=$(make -n -C "$root/proj" --no-print-directory 2>&1)
    [[ $out == "$want_greet" ]] || fail "make -n after touch greet.c in $root printed: $(tr '\n' ';' <<<"$out")"
    out=$(make -C "$root/proj" --no-print-directory 2>&1) || fail "make after touch in $root failed: $out"
    [[ $out == "$want_greet" ]] || fail "make after touch greet.c in $root printed: $(tr '\n' ';' <<<"$out")"
    out=$("$root/proj/prog") || fail "$root/proj/prog failed after the rebuild"
    [[ $out == $'hello, capsule\nsum=55' ]] || fail "$root/proj/prog printed after the rebuild: $out"
    make -q -C "$root/proj" || fail "make -q in $root: not up to date after the rebuild"
  done
  local f
  for f in main.o greet.o calc.o prog; do
    cmp "$n/proj/$f" "$m/proj/$f" >&2 || fail "$f built in the mount differs from the native build"
  done
}

# ---------------------------------------------------------------------------------------------
# tar: a native tree archived, extracted with -p into the mount and into a native folder, both
# archived again (sorted, numeric owners) and compared byte for byte. tar_hardlinks does the
# same with hard links in the tree.

make_tree() {
  local d=$1 hard=$2
  mkdir -p "$d/a/b/c" "$d/empty-folder" "$d/mode700"
  printf 'hello\n' >"$d/hello.txt"
  head -c 300000 /dev/urandom >"$d/a/random.bin"
  : >"$d/empty.txt"
  printf 'deep\n' >"$d/a/b/c/deep.txt"
  printf '#!/bin/sh\necho run\n' >"$d/a/run.sh"
  chmod 0755 "$d/a/run.sh"
  printf 'private\n' >"$d/mode700/private.txt"
  chmod 0600 "$d/mode700/private.txt"
  chmod 0700 "$d/mode700"
  printf 'read only\n' >"$d/a/b/readonly.txt"
  chmod 0444 "$d/a/b/readonly.txt"
  printf 'long\n' >"$d/a/$(printf 'n%.0s' {1..150}).txt"
  ln -s hello.txt "$d/relative-link"
  ln -s ../../hello.txt "$d/a/b/up-link"
  ln -s /etc/hostname "$d/absolute-link"
  ln -s does/not/exist "$d/dangling-link"
  ln -s a/b "$d/folder-link"
  if [[ $hard == hard ]]; then
    ln "$d/hello.txt" "$d/a/hard-hello"
    ln "$d/hello.txt" "$d/a/b/c/hard-hello-2"
    ln "$d/a/random.bin" "$d/random-hard.bin"
  fi
  # Times of all kinds, set last: folders and links too.
  local i=0 p
  while IFS= read -r -d '' p; do
    i=$((i + 1))
    touch -h -d "@$((1700000000 + i * 3601)).$((i * 7919 % 1000000000))" "$p"
  done < <(find "$d" -depth -print0)
}

tar_case() {
  local name=$1 hard=$2
  local src=$RP_WORK/$name-src m=$RP_FILES/$name n=$RP_WORK/native/$name
  make_tree "$src" "$hard"
  tar -cf "$RP_WORK/$name.tar" -C "$src" .
  mkdir -p "$m" "$n"
  local root start stale where stale_note=
  for root in "$n" "$m"; do
    where=$([[ $root == "$m" ]] && echo "the mount" || echo "a native folder")
    # Every entry's status change time is the extraction's (tar sets only the mtime), give or
    # take the coarse clock of file times.
    start=$(($(date +%s) - 2))
    run_logged "tar -xpf into $where" tar -xpf "$RP_WORK/$name.tar" -C "$root"
    stale=$(cd "$root" && find . ! -newerct "@$start" -printf '%p: ctime %C@, mtime %T@\n')
    # Noted here, failed at the end, so that the archives are compared as well.
    [[ -n $stale_note || -z $stale ]] ||
      stale_note="status change times from before the extraction in $where: $(head -n 2 <<<"$stale" | tr '\n' ';')"
  done
  (cd "$n" && run_logged "tar -c of the tree extracted into a native folder" \
    tar -c --sort=name --numeric-owner -f "$RP_WORK/$name-native.tar" .)
  # Exit 1 is "file changed as we read it": noted, and the archive is compared all the same.
  local rc=0
  (cd "$m" && tar -c --sort=name --numeric-owner -f "$RP_WORK/$name-mount.tar" . 2>"$RP_WORK/$name-mount.err") ||
    rc=$?
  cat "$RP_WORK/$name-mount.err" >&2
  ((rc <= 1)) || fail "tar -c of the tree extracted into the mount exited $rc: $(head -n 1 "$RP_WORK/$name-mount.err")"
  ((rc == 0)) || stale_note="tar -c of the tree extracted into the mount exited $rc: $(head -n 1 "$RP_WORK/$name-mount.err")${stale_note:+; $stale_note}"
  if ! cmp "$RP_WORK/$name-native.tar" "$RP_WORK/$name-mount.tar" >&2; then
    diff <(tar -tvf "$RP_WORK/$name-native.tar" --full-time) \
      <(tar -tvf "$RP_WORK/$name-mount.tar" --full-time) >&2 || true
    fail "the archive of the tree extracted into the mount differs from the native one"
  fi
  : >"$RP_WORK/archived.$name"  # the remount compares the tree again
  diff -r --no-dereference "$src" "$m" >&2 || fail "the tree extracted into the mount differs from the source"
  listing "$n" >"$RP_WORK/$name-listing.n"
  listing "$m" >"$RP_WORK/$name-listing.m"
  expect_same "types, modes, sizes and times of the extracted trees" "$RP_WORK/$name-listing.n" \
    "$RP_WORK/$name-listing.m"
  [[ -z $stale_note ]] || fail "$stale_note"
}

case_tar() { tar_case tar soft; }
case_tar_hardlinks() { tar_case tar_hardlinks hard; }

# ---------------------------------------------------------------------------------------------
# rsync -a: a native tree (links, modes, times with nanoseconds) into the mount and from there
# into another native folder; the three the same. A second rsync has nothing to do; after one
# file changes, it sends only that file.

case_rsync() {
  local src=$RP_WORK/rsync-src m=$RP_FILES/rsync back=$RP_WORK/native/rsync-back
  mkdir -p "$src/bin" "$src/private" "$src/shared/deeper" "$src/empty"
  printf 'config\n' >"$src/config.txt"
  printf '#!/bin/sh\necho tool\n' >"$src/bin/tool"
  head -c 200000 /dev/urandom >"$src/shared/deeper/data.bin"
  printf 'key\n' >"$src/private/key"
  : >"$src/empty.txt"
  printf 'ro\n' >"$src/shared/ro.txt"
  chmod 0644 "$src/config.txt" "$src/shared/deeper/data.bin" "$src/empty.txt"
  chmod 0755 "$src/bin/tool" "$src/bin" "$src/shared"
  chmod 0600 "$src/private/key"
  chmod 0444 "$src/shared/ro.txt"
  chmod 0700 "$src/private"
  chmod 0750 "$src/shared/deeper"
  ln -s config.txt "$src/config-link"
  ln -s ../config.txt "$src/bin/up-link"
  ln -s /etc/hostname "$src/absolute-link"
  ln -s nowhere/at/all "$src/dangling-link"
  local i=0 p
  while IFS= read -r -d '' p; do
    i=$((i + 1))
    touch -h -d "@$((1500000000 + i * 86413)).$((i * 104729 % 1000000000))" "$p"
  done < <(find "$src" -depth -print0)

  mkdir -p "$m" "$back"
  run_logged "rsync -a into the mount" rsync -a "$src/" "$m/"
  run_logged "rsync -a out of the mount" rsync -a "$m/" "$back/"
  diff -r --no-dereference "$src" "$m" >&2 || fail "the tree rsynced into the mount differs from the source"
  diff -r --no-dereference "$src" "$back" >&2 || fail "the tree rsynced back out differs from the source"
  listing "$src" >"$RP_WORK/rsync-listing.src"
  listing "$m" >"$RP_WORK/rsync-listing.m"
  listing "$back" >"$RP_WORK/rsync-listing.back"
  expect_same "types, modes, sizes and times in the source and the mount" "$RP_WORK/rsync-listing.src" \
    "$RP_WORK/rsync-listing.m"
  expect_same "types, modes, sizes and times in the source and the copy back" \
    "$RP_WORK/rsync-listing.src" "$RP_WORK/rsync-listing.back"

  local out
  out=$(rsync -a -i "$src/" "$m/") || fail "a second rsync -a into the mount failed"
  [[ -z $out ]] || fail "a second rsync -a into the mount found changes: $(head -n 3 <<<"$out" | tr '\n' ';')"
  printf 'config, changed\n' >"$src/config.txt"
  touch -d "@1600000000.5" "$src/config.txt" "$src"
  out=$(rsync -a -i "$src/" "$m/") || fail "rsync -a of one changed file into the mount failed"
  out=$(grep -v '^\.d' <<<"$out" || true)
  [[ $out == ">f.st...... config.txt" ]] || fail "rsync -a of one changed file sent: $(tr '\n' ';' <<<"$out")"
  listing "$src" >"$RP_WORK/rsync-listing.src"
  listing "$m" >"$RP_WORK/rsync-listing.m"
  expect_same "listings after the change" "$RP_WORK/rsync-listing.src" "$RP_WORK/rsync-listing.m"
}

# ---------------------------------------------------------------------------------------------
# After a remount: what the cases above left still holds (for each case that passed; for tar,
# each whose archive matched the native one).

case_remount() {
  local checked=0 n=$RP_WORK/native
  if [[ -e $RP_WORK/passed.git ]]; then
    local repo=$RP_FILES/git/repo
    run_logged "git fsck --full after the remount" git -C "$repo" fsck --full --strict
    [[ -z $(git -C "$repo" status --porcelain) ]] || fail "git status after the remount is not empty"
    [[ $(git -C "$repo" rev-parse HEAD) == $(git -C "$n/git/repo" rev-parse HEAD) ]] ||
      fail "HEAD changed across the remount"
    diff -r --no-dereference --exclude=.git "$n/git/repo" "$repo" >&2 || fail "the git work tree changed across the remount"
    checked=$((checked + 1))
  fi
  if [[ -e $RP_WORK/passed.sqlite_wal ]]; then
    local out
    out=$(sqlite3 "$RP_FILES/sqlite/wal.db" 'PRAGMA integrity_check; SELECT count(*) FROM t;') ||
      fail "sqlite3 could not read the database after the remount"
    [[ $out == $'ok\n400' ]] || fail "sqlite3 after the remount printed: $(tr '\n' ' ' <<<"$out")"
    checked=$((checked + 1))
  fi
  if [[ -e $RP_WORK/passed.make_gcc ]]; then
    make -q -C "$RP_FILES/make/proj" || fail "make -q after the remount: the build is out of date (times lost?)"
    [[ $("$RP_FILES/make/proj/prog") == $'hello, capsule\nsum=55' ]] || fail "prog after the remount"
    checked=$((checked + 1))
  fi
  if [[ -e $RP_WORK/passed.python_venv ]]; then
    check_capsdemo "$RP_FILES/python/venv"
    checked=$((checked + 1))
  fi
  local t
  for t in tar tar_hardlinks; do
    [[ -e $RP_WORK/archived.$t ]] || continue
    (cd "$RP_FILES/$t" && tar -c --sort=name --numeric-owner -f "$RP_WORK/$t-remount.tar" .)
    cmp "$RP_WORK/$t-native.tar" "$RP_WORK/$t-remount.tar" >&2 || fail "the $t tree changed across the remount"
    checked=$((checked + 1))
  done
  if [[ -e $RP_WORK/passed.rsync ]]; then
    listing "$RP_FILES/rsync" >"$RP_WORK/rsync-listing.remount"
    expect_same "the rsync tree across the remount" "$RP_WORK/rsync-listing.src" "$RP_WORK/rsync-listing.remount"
    checked=$((checked + 1))
  fi
  ((checked > 0)) || fail "no earlier case passed: nothing to check"
  echo "checked $checked cases' files after the remount"
}

case_verify() {
  local out
  out=$("$RP_CAPSULE" verify "$RP_CAP" 2>&1) || fail "capsule verify exited non-zero: $(head -n 5 <<<"$out" | tr '\n' ';')"
  echo "$out"
  [[ $out == ok:* ]] || fail "capsule verify printed: $out"
}

# ---------------------------------------------------------------------------------------------
# One case in a process of its own: tests/real_programs_test.sh --case NAME (internal).

if [[ ${1:-} == --case ]]; then
  set -eE
  RP_REASON=$RP_WORK/reason.$2
  trap 'rc=$?; [[ -s $RP_REASON ]] || printf "line %s: \`%s\` exited %s\n" "$LINENO" "$BASH_COMMAND" "$rc" >"$RP_REASON"' ERR
  cd "$RP_WORK"
  "case_$2"
  echo "took $SECONDS s"
  exit 0
fi

if [[ $# -ne 2 ]]; then
  echo "usage: $0 CAPSULE CAPSULEFS" >&2
  exit 2
fi
self=$(readlink -f "${BASH_SOURCE[0]}")
capsule=$(readlink -f "$1")
capsulefs=$(readlink -f "$2")
for tool in "$capsule" "$capsulefs" fusermount3 mountpoint git sqlite3 make gcc rsync tar cmp diff \
  /usr/bin/python3 timeout; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found (tests/setup.sh installs it)" >&2; exit 2; }
done

work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/real_programs.XXXXXX")
mnt=$work/mnt
driver=

is_mounted() { mountpoint -q "$mnt" 2>/dev/null; }

cleanup() {
  local i
  if is_mounted; then
    for ((i = 0; i < 50; i++)); do
      fusermount3 -u "$mnt" 2>/dev/null && break
      sleep 0.1
    done
    is_mounted && fusermount3 -u -z "$mnt" 2>/dev/null
  fi
  if [[ -n $driver ]]; then
    for ((i = 0; i < 100; i++)); do
      kill -0 "$driver" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$driver" 2>/dev/null || true
    wait "$driver" 2>/dev/null || true
  fi
  if [[ ${REAL_PROGRAMS_KEEP:-0} == 1 ]]; then
    echo "kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

export RP_WORK=$work RP_MNT=$mnt RP_FILES=$mnt/files RP_CAP=$work/capsule RP_CAPSULE=$capsule
# The same environment natively and in the mount, and nothing from the user's configuration.
export HOME=$work/home LC_ALL=C TZ=UTC
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_COUNT=2
export GIT_CONFIG_KEY_0=gc.autoDetach GIT_CONFIG_VALUE_0=false
export GIT_CONFIG_KEY_1=init.defaultBranch GIT_CONFIG_VALUE_1=main
export PIP_CONFIG_FILE=/dev/null
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV PYTHONSTARTUP
umask 022
mkdir -p "$HOME" "$mnt" "$work/native"

passed=0
failed=0
report() {  # report NAME STATUS REASON [LOG]
  if [[ $2 -eq 0 ]]; then
    echo "PASS $1"
    passed=$((passed + 1))
    : >"$work/passed.$1"
  else
    echo "FAIL $1: $3"
    failed=$((failed + 1))
    if [[ -n ${4:-} && -s $4 ]]; then
      tail -n 15 "$4" | sed 's/^/    | /'
    fi
  fi
}

# run_child NAME CASE: case_CASE in a process of its own, reported as NAME.
run_child() {
  local name=$1 rc=0 why
  rm -f "$work/reason.$2"
  timeout -k 10 "${REAL_PROGRAMS_CASE_TIMEOUT:-300}" bash "$self" --case "$2" \
    </dev/null >"$work/log.$name" 2>&1 || rc=$?
  why=$(head -n 1 "$work/reason.$2" 2>/dev/null || true)
  ((rc == 124)) && why="timed out after ${REAL_PROGRAMS_CASE_TIMEOUT:-300} s${why:+ ($why)}"
  [[ -n $why ]] || why="exited $rc"
  report "$name" "$rc" "$why" "$work/log.$name"
}

# run_case NAME: a case that works in the mount.
run_case() {
  if is_mounted; then
    run_child "$1" "$1"
  else
    report "$1" 1 "not mounted"
  fi
}

# mount_capsule: starts the driver in the foreground mode, in the background; 0 once mounted.
mount_capsule() {
  local i
  "$capsulefs" "$work/capsule" "$mnt" -f </dev/null >>"$work/capsulefs.log" 2>&1 &
  driver=$!
  for ((i = 0; i < 200; i++)); do
    is_mounted && return 0
    kill -0 "$driver" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$driver" 2>/dev/null; then
    mount_error="not mounted after 10 s"
  else
    local rc=0
    wait "$driver" || rc=$?
    driver=
    mount_error="capsulefs exited $rc before mounting"
  fi
  mount_error+=": $(tail -n 1 "$work/capsulefs.log" 2>/dev/null)"
  return 1
}

# unmount_capsule: fusermount3 -u, then the driver must finish its checkpoint and exit 0.
unmount_capsule() {
  local i rc=0
  for ((i = 0; i < 100; i++)); do
    fusermount3 -u "$mnt" 2>>"$work/capsulefs.log" && break
    sleep 0.1
  done
  if is_mounted; then
    unmount_error="fusermount3 -u kept failing (busy?)"
    return 1
  fi
  for ((i = 0; i < 600; i++)); do
    kill -0 "$driver" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$driver" 2>/dev/null; then
    unmount_error="the driver did not exit within 60 s of the unmount"
    return 1
  fi
  wait "$driver" || rc=$?
  driver=
  if ((rc != 0)); then
    unmount_error="the driver exited $rc: $(tail -n 1 "$work/capsulefs.log")"
    return 1
  fi
}

init_out=$("$capsule" init "$work/capsule" --id real-programs --name "real programs" 2>&1) || true
mount_error=
if [[ ! -d $work/capsule ]]; then
  report mount 1 "capsule init failed: $init_out"
elif mount_capsule; then
  report mount 0 ""
else
  report mount 1 "$mount_error" "$work/capsulefs.log"
fi

for name in git python_venv sqlite_wal make_gcc tar tar_hardlinks rsync; do
  run_case "$name"
done

# Unmount, then capsule verify of the folder.
unmount_error=
if ! is_mounted; then
  report verify 1 "not mounted"
elif unmount_capsule; then
  run_child verify verify
else
  report verify 1 "unmount: $unmount_error" "$work/capsulefs.log"
fi

# Remount: the files still hold. Then unmount and verify once more.
if is_mounted; then
  report remount 1 "still mounted: the unmount failed"
  report verify_after_remount 1 "not unmounted"
elif mount_capsule; then
  run_case remount
  if unmount_capsule; then
    run_child verify_after_remount verify
  else
    report verify_after_remount 1 "unmount after the remount: $unmount_error" "$work/capsulefs.log"
  fi
else
  report remount 1 "$mount_error" "$work/capsulefs.log"
  report verify_after_remount 1 "not remounted"
fi

echo "$passed passed, $failed failed"
((failed == 0))
