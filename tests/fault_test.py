#!/usr/bin/env python3
"""A randomized fault test of the real processes of a move.

Two or three sidecars (`capsule serve --mount-to`) and an agent mounted with capsulefs, all on
loopback, each sidecar behind a TCP proxy of this script's own, driven by a seeded schedule of
steps: moves in every direction, with faults at random moments or at chosen points of the
protocol (kill -9 of the mover, of a sidecar or of a mount driver; a link cut, cut after N bytes,
held, or partitioned, on any connection, including the one that carries activate; an admin's
freeze or thaw, or a storm of thaws, of the source mount), and between moves appends, freezes,
thaws, kills, restarts and `capsule move --recover`.

After every step the world settles (dead mounts are unmounted, the capsule a machine holds is
mounted again, as a supervisor would) and is checked:
  - never two active holders (holder records, and the mounts' own states);
  - some machine holds the agent (active, or frozen waiting for a move to be resolved);
  - the active copy verifies (capsule freeze, capsule verify, capsule thaw);
  - every journal event whose append was acknowledged (write(2) returned) is in the holder's
    journal, once;
  - no staging area is left once recovery ran (a sidecar's restart, a successful move, a
    successful `capsule move --recover`), and no move is left recorded once resolved.
While a move runs, a monitor reads every holder record every few milliseconds and flags two
active records seen twice in a row. Each schedule ends with a full recovery (every sidecar
restarted, every unfinished move resolved), strict checks (exactly one active holder, nothing
frozen, nothing staged) and a clean move that must succeed.

Usage:
  fault_test.py --capsule BIN --capsulefs BIN --make-pki tests/make_pki.sh \\
      [--seed N] [--schedules N] [--steps N] [--budget-seconds S] [--min-schedules N]
      [--min-steps N] [--max-seconds S] [--keep] [--verbose]
      [--keep-going] [--tolerate NAME]... [--without KIND]...
The binaries may also come from the environment: CAPSULE, CAPSULEFS, MAKE_PKI. The suite runs
it through tests/fault_test.sh with a budget; a long run is --schedules 1000 without one.

A failure prints "VIOLATION seed=X schedule=K step=J: ..." with the schedule's last events and
the command that replays it (same seed, that schedule alone, --verbose). Each step draws from
its own generator (seed, schedule, step), so a replay runs the same ops with the same faults;
the interleaving of real processes is not replayed, so a race may need a few replays.
The run ends with "fault_test: S schedules, T steps, V violations (seed X)"; exit 0 only
when V is 0, nothing went wrong in the harness and at least --min-schedules schedules and
--min-steps steps were run (the budget ends a run only past the minimum; --max-seconds ends it
in any case, and a run short of the minimum fails: it tested too little to pass).

Named findings (contract breaks that are not one of the invariants above) can be let through
a long run with --tolerate NAME (a schedule that cannot go on then ends early):
  frozen-mount           capsulefs refuses to mount a capsule whose record is frozen
  thaw-of-admin-freeze   a move's rollback or --recover thaws a freeze it did not make
  lingering-driver       a capsulefs runs on after its mount is gone
--without KIND leaves a kind of fault out, to look past a known bug: thaw-during-move,
restart-during-move. Drivers kept alive by copies of our mounts in other mount namespaces
(Bazel's linux-sandbox, unshare -m) are environment, not findings: they are ended and counted.
Needs root (FUSE mounts), fusermount3 and openssl; Python 3 standard library only.
"""

import argparse
import collections
import errno
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

AGENT = "agent-1"
NAMES = "abc"

# Caps on every blocking call, so that a stuck process costs seconds, not the suite.
MOVE_TIMEOUT = 14.0      # a mover asks 20 times, every half second, before giving up
RECOVER_TIMEOUT = 14.0
CLI_TIMEOUT = 20.0
MOUNT_STATE_GRACE = 1.3  # a mount reads its holder record every half second


class Violation(Exception):
    """A broken invariant of the protocol (or of the tools' contracts)."""


class Finding(Violation):
    """A violation with a name, that --tolerate NAME lets a long run go past."""

    def __init__(self, key, text):
        super().__init__(f"[{key}] {text}")
        self.key = key


class EndSchedule(Exception):
    """A tolerated finding left the agent where no step can go on: the schedule ends early."""


class HarnessError(Exception):
    """Something this script could not do: not a finding about capsulefs."""


def mono():
    return time.monotonic()


# ----------------------------------------------------------------------------------------------
# Processes this script started: every one is ended by its id (its process group) at the end.

class Procs:
    def __init__(self):
        self.lock = threading.Lock()
        self.live = []

    def popen(self, args, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw["start_new_session"] = True
        p = subprocess.Popen(args, **kw)
        with self.lock:
            self.live.append(p)
        return p

    def kill(self, p):
        if p is None:
            return
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def run(self, args, timeout=CLI_TIMEOUT, input_text=None):
        """(rc, out, err); rc None when it had to be killed at the timeout."""
        p = self.popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL)
        try:
            out, err = p.communicate(input=input_text.encode() if input_text else None, timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            self.kill(p)
            out, err = p.communicate()
            rc = None
        self.forget(p)
        return rc, out.decode(errors="replace"), err.decode(errors="replace")

    def forget(self, p):
        with self.lock:
            if p in self.live:
                self.live.remove(p)

    def kill_all(self):
        with self.lock:
            live = list(self.live)
            self.live.clear()
        for p in live:
            if p.poll() is None:
                self.kill(p)


PROCS = Procs()


def pids_of(binary, needle):
    """Processes running `binary` (by its name) whose arguments contain `needle`."""
    found = []
    base = os.path.basename(binary)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0]:
            continue
        if os.path.basename(argv[0].decode(errors="replace")) != base:
            continue
        if any(needle.encode() in a for a in argv[1:]):
            found.append(int(entry))
    return found


def mounts_under(prefix):
    points = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                point = fields[4].replace("\\040", " ")
                if point == prefix or point.startswith(prefix + "/"):
                    points.append(point)
    except OSError:
        pass
    return points


def is_mountpoint(path):
    return path in mounts_under(path)


def control(socket_path, command, timeout=5.0):
    """One command on a capsulefs control socket; the reply as a dict, None when no one answers."""
    try:
        dfd = os.open(os.path.dirname(socket_path), os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(f"/proc/self/fd/{dfd}/{os.path.basename(socket_path)}")  # paths over 108 bytes
        s.sendall((command + "\n").encode())
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return json.loads(data.decode())
    except (OSError, ValueError):
        return None
    finally:
        s.close()
        os.close(dfd)


def lock_holders(path):
    """The processes /proc/locks names as holding a lock on `path` (flock or POSIX), with the
    command line of each."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    found = []
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and fields[5] == key:
                    pid = fields[4]
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as c:
                            cmd = c.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
                    except OSError:
                        cmd = "?"
                    found.append(f"{pid} {fields[1]} {fields[3]} ({cmd})")
    except OSError:
        pass
    return found


def foreign_copies(prefix):
    """Mount points under `prefix` that processes in other mount namespaces see: a copy of a
    FUSE mount made when another namespace was created (Bazel's linux-sandbox, unshare -m)
    keeps its driver running after fusermount3 -u here, until that namespace ends."""
    try:
        mine = os.readlink("/proc/self/ns/mnt")
    except OSError:
        return []
    seen = set()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = os.readlink(f"/proc/{entry}/ns/mnt")
            if ns == mine or ns in seen:
                continue
            seen.add(ns)
            with open(f"/proc/{entry}/mountinfo") as f:
                for line in f:
                    point = line.split()[4]
                    if prefix in point:
                        found.append(f"{point} in {ns} (pid {entry})")
        except OSError:
            continue
    return found


def read_json(path):
    for _ in range(3):
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            time.sleep(0.005)
    return {"state": "unreadable"}


# ----------------------------------------------------------------------------------------------
# The proxy in front of each sidecar: passes TLS records through, and cuts, holds or acts at a
# chosen record, byte count or protocol phase of a chosen connection.

class Rule:
    """One fault on a proxy. at: ("record", n) | ("bytes", n) | ("phase", name).
    kind: "cut" | "hold" | "action". conn: connection index since arming (None: any)."""

    def __init__(self, kind, direction, at, conn=None, secs=0.0, action=None, after=False, rst=True, label=""):
        self.kind, self.direction, self.at, self.conn = kind, direction, at, conn
        self.secs, self.action, self.after, self.rst = secs, action, after, rst
        self.label = label or kind
        self.fired = False

    def describe(self):
        where = f"{self.at[0]} {self.at[1]}"
        conn = "any conn" if self.conn is None else f"conn {self.conn}"
        extra = f" {self.secs:.2f}s" if self.kind == "hold" else ""
        return f"{self.label}{extra} at {self.direction} {where} of {conn}"


class Conn:
    def __init__(self, proxy, index, client, upstream, rules):
        self.proxy, self.index, self.rules = proxy, index, rules
        self.client, self.upstream = client, upstream
        self.lock = threading.Lock()
        self.dead = False
        self.ended = 0

    def start(self):
        for direction, src, dst in (("c2s", self.client, self.upstream), ("s2c", self.upstream, self.client)):
            threading.Thread(target=self.pump, args=(direction, src, dst), daemon=True).start()

    def cut(self, rst=True):
        with self.lock:
            if self.dead:
                return
            self.dead = True
        for s in (self.client, self.upstream):
            try:
                if rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        self.proxy.forget(self)

    def pump(self, direction, src, dst):
        buf = b""
        records = 0
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    break
                buf += data
                while len(buf) >= 5:
                    length = 5 + int.from_bytes(buf[3:5], "big")
                    if len(buf) < length:
                        break
                    record, buf = buf[:length], buf[length:]
                    if not self.forward(direction, records, sent, record, dst):
                        return
                    records += 1
                    sent += len(record)
        except OSError:
            pass
        finally:
            with self.lock:
                self.ended += 1
                both = self.ended == 2
            if both:
                self.cut(rst=False)
        self.proxy.note_records(direction, records)

    def forward(self, direction, index, sent, record, dst):
        for rule in self.rules:
            if rule.direction != direction or rule.fired:
                continue
            at, n = rule.at
            if at == "record" and index != n:
                continue
            if at == "bytes" and sent + len(record) <= n:
                continue
            if at == "phase" and self.proxy.phase() != n:
                continue
            if not self.proxy.claim(rule):
                continue
            self.proxy.fired(rule, self.index)
            if rule.kind == "cut":
                if at == "bytes" and n > sent:
                    try:
                        dst.sendall(record[: n - sent])
                    except OSError:
                        pass
                self.cut(rst=rule.rst)
                return False
            if rule.kind == "hold":
                time.sleep(rule.secs)
            elif rule.kind == "action":
                if rule.after:
                    dst.sendall(record)
                    rule.action()
                    return True
                rule.action()
        dst.sendall(record)
        return True


class Proxy:
    def __init__(self, name, world):
        self.name, self.world = name, world
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.upstream = None
        self.lock = threading.Lock()
        self.rules = []
        self.index = 0
        self.partition_until = 0.0
        self.live = set()
        self.closed = False
        self.phase_dir = None  # the capsule folder whose move-out.json names the phase
        self.max_records = {"c2s": 0, "s2c": 0}
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def arm(self, rules, phase_dir):
        with self.lock:
            self.rules = list(rules)
            self.index = 0
            self.phase_dir = phase_dir

    def disarm(self):
        with self.lock:
            self.rules = []
            self.partition_until = 0.0

    def partition(self, secs):
        with self.lock:
            self.partition_until = mono() + secs
            live = list(self.live)
        self.world.log(f"proxy {self.name}: partition for {secs:.2f}s, cutting {len(live)} connection(s)")
        self.world.stats["partition"] += 1
        for c in live:
            c.cut(rst=True)

    def cut_all(self):
        with self.lock:
            live = list(self.live)
        for c in live:
            c.cut(rst=True)

    def claim(self, rule):
        with self.lock:
            if rule.fired:
                return False
            rule.fired = True
            return True

    def phase(self):
        if not self.phase_dir:
            return "none"
        record = read_json(os.path.join(self.phase_dir, ".capsule", "move-out.json"))
        return record.get("phase", "?") if record else "none"

    def fired(self, rule, index):
        phase = self.phase()
        self.world.log(f"proxy {self.name}: {rule.describe()} fired on conn {index} (source phase {phase})")
        self.world.stats[f"fault {rule.label} @{phase}"] += 1

    def note_records(self, direction, n):
        with self.lock:
            self.max_records[direction] = max(self.max_records[direction], n)

    def forget(self, conn):
        with self.lock:
            self.live.discard(conn)

    def accept_loop(self):
        while not self.closed:
            try:
                client, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            with self.lock:
                index = self.index
                self.index += 1
                partitioned = mono() < self.partition_until
                upstream_port = self.upstream
                rules = [r for r in self.rules if r.conn is None or r.conn == index]
            if partitioned or upstream_port is None:
                try:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.close()
                except OSError:
                    pass
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", upstream_port), timeout=3)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            conn = Conn(self, index, client, upstream, rules)
            with self.lock:
                self.live.add(conn)
            conn.start()

    def close(self):
        self.closed = True
        try:
            self.lsock.close()
        except OSError:
            pass
        self.cut_all()


# ----------------------------------------------------------------------------------------------
# A machine: a sidecar root, its mount folder, its proxy.

class Machine:
    def __init__(self, world, index):
        self.world = world
        self.name = NAMES[index]
        self.root = os.path.join(world.dir, f"root-{self.name}")
        self.mount_to = os.path.join(world.dir, f"mnt-{self.name}")
        self.dir = os.path.join(self.root, AGENT)
        self.mnt = os.path.join(self.mount_to, AGENT)
        self.seal = world.cfg.seal_keys[index]
        self.proxy = Proxy(self.name, world)
        self.proc = None
        # One sidecar per root, as on a real machine: a kill that comes while a restart is still
        # starting waits for it, so two starts never race for the root's lock.
        self.lifecycle = threading.RLock()
        self.starts = 0
        self.keep_unmounted = None  # the epoch at which the harness unmounted it on purpose
        self.unmountable = False  # capsulefs refused to mount it while its record was frozen
        self.resolver_possible = False
        os.makedirs(self.root)
        os.makedirs(self.mount_to)

    # -- the sidecar
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self, check_staging=True):
        with self.lifecycle:
            self.start_locked(check_staging)

    def start_if_down(self):
        """A fault's delayed restart: a later fault's restart may have come first."""
        with self.lifecycle:
            if not self.alive():
                self.start_locked(check_staging=False)

    def start_locked(self, check_staging):
        cfg = self.world.cfg
        n = self.starts
        self.starts += 1
        out_path = os.path.join(self.world.dir, f"serve-{self.name}-{n}.out")
        err_path = os.path.join(self.world.dir, f"serve-{self.name}-{n}.err")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            self.proc = PROCS.popen([cfg.capsule, "serve", "--root", self.root, "--listen", "127.0.0.1:0",
                                     "--cert", cfg.pki("server.pem"), "--key", cfg.pki("server.key"),
                                     "--ca", cfg.pki("ca.pem"), "--seal-key", self.seal,
                                     "--mount-to", self.mount_to],
                                    stdout=out, stderr=err, cwd=self.world.dir)
        deadline = mono() + 15
        port = None
        while mono() < deadline:
            with open(out_path, "rb") as f:
                m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", f.read())
            if m:
                port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        if port is None:
            with open(err_path, "rb") as f:
                err = f.read().decode(errors="replace")[-600:]
            raise Violation(f"sidecar {self.name} did not start (exit {self.proc.poll()}): {err.strip()}")
        self.proxy.upstream = port
        # A sidecar that starts with a move out recorded resolves it on a thread of its own,
        # retrying every two seconds until it finds no move recorded.
        self.resolver_possible = bool(self.move_out())
        self.world.log(f"sidecar {self.name} started (pid {self.proc.pid}, port {port})")
        if check_staging:
            left = self.staging_entries()
            if left:
                raise Violation(f"sidecar {self.name} restarted but {self.root}/.staging still holds {left}")

    def kill(self):
        with self.lifecycle:
            self.kill_locked()

    def kill_locked(self):
        if self.proc is None:
            return
        pid = self.proc.pid
        PROCS.kill(self.proc)
        PROCS.forget(self.proc)
        self.proc = None
        self.proxy.upstream = None
        self.world.log(f"sidecar {self.name} killed -9 (pid {pid})")

    # -- the capsule as this machine sees it
    def record(self):
        return read_json(os.path.join(self.dir, ".capsule", "holder.json"))

    def state(self):
        r = self.record()
        return r.get("state") if r else None

    def move_out(self):
        return read_json(os.path.join(self.dir, ".capsule", "move-out.json"))

    def staging_entries(self):
        try:
            return sorted(os.listdir(os.path.join(self.root, ".staging")))
        except FileNotFoundError:
            return []

    def mount_state(self, wait=2.0):
        """('none' | 'dead' | 'live' | 'busy', status dict or None). Dead: the kernel says so
        (ENOTCONN) or no driver runs; busy: a driver runs but its control channel does not answer
        (it is starting, or serving a long command) within `wait` seconds."""
        if not is_mountpoint(self.mnt):
            return "none", None
        deadline = mono() + wait
        while True:
            try:
                os.stat(self.mnt)
            except OSError as e:
                if e.errno == errno.ENOTCONN:
                    return "dead", None
            status = control(os.path.join(self.dir, ".capsule", "control.sock"), "status", timeout=max(0.2, wait))
            if status is not None and status.get("ok"):
                return "live", status
            if not self.drivers():
                return "dead", None
            if mono() >= deadline:
                return "busy", None
            time.sleep(0.05)

    def drivers(self):
        return pids_of(self.world.cfg.capsulefs, self.dir)

    def kill_driver(self):
        """kill -9 every capsulefs of this capsule, also a child it forks as it daemonises."""
        killed = []
        quiet = 0
        while quiet < 2 and len(killed) < 20:
            pids = self.drivers()
            if not pids:
                quiet += 1
                time.sleep(0.01)
                continue
            quiet = 0
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        if killed:
            self.world.log(f"capsulefs of {self.name} killed -9 (pid {killed})")
        return bool(killed)

    def describe(self):
        r = self.record()
        rec = f"{r.get('state')}@{r.get('epoch')}" if r else "none"
        if r and r.get("move"):
            rec += "(move)"
        ms, st = self.mount_state()
        mount = f"{ms}:{st.get('state')}@{st.get('epoch')}" if st else ms
        mo = self.move_out()
        out = f" move-out:{mo.get('phase')}" if mo else ""
        staged = self.staging_entries()
        return (f"{self.name}[{'up' if self.alive() else 'DOWN'} rec={rec} mount={mount}{out}"
                f"{' staging=' + ','.join(staged) if staged else ''}]")


# ----------------------------------------------------------------------------------------------
# Journal events: every append the harness made, and which were acknowledged.

class Events:
    def __init__(self, world):
        self.world = world
        self.lock = threading.Lock()
        self.n = 0
        self.acked = {}     # text -> (machine, step)
        self.closed = False

    def new_text(self):
        with self.lock:
            self.n += 1
            return f"s{self.world.schedule}-e{self.n}"

    def ack(self, text, machine):
        with self.lock:
            if self.closed:
                return
            self.acked[text] = (machine, self.world.step)
        self.world.stats["appends acked"] += 1

    def snapshot(self):
        with self.lock:
            return dict(self.acked)


def event_line(text):
    return (json.dumps({"type": "user_message", "data": {"text": text}}, separators=(",", ":")) + "\n").encode()


def append_through_mount(world, m, text):
    """True when write(2) of the whole line returned: the event is then durable (capsulefs(8))."""
    path = os.path.join(m.mnt, "memory", "timeline_events.jsonl")
    line = event_line(text)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as e:
        world.stats[f"append refused ({errno.errorcode.get(e.errno, e.errno)})"] += 1
        return False
    acked = False
    try:
        acked = os.write(fd, line) == len(line)
    except OSError as e:
        world.stats[f"append refused ({errno.errorcode.get(e.errno, e.errno)})"] += 1
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    if acked:
        world.events.ack(text, m.name)
    return acked


def append_to_folder(world, m, text):
    rc, _, _ = PROCS.run([world.cfg.capsule, "log", "append", m.dir, "--type", "user_message",
                          "--data", json.dumps({"text": text})], timeout=10)
    if rc == 0:
        world.events.ack(text, m.name)
        return True
    world.stats["folder append refused"] += 1
    return False


class Writer(threading.Thread):
    """Appends events to one machine's capsule, through its mount (or its folder when it has no
    live mount), until stopped or `count` appends are done. A write may block while the mount
    is frozen: its outcome is recorded whenever it comes."""

    def __init__(self, world, m, seed, count=None, interval=(0.003, 0.015), folder=False):
        super().__init__(daemon=True)
        self.world, self.m, self.count, self.interval, self.folder = world, m, count, interval, folder
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.done = 0

    def run(self):
        while not self.stop.is_set() and (self.count is None or self.done < self.count):
            text = self.world.events.new_text()
            if self.folder:
                append_to_folder(self.world, self.m, text)
            else:
                append_through_mount(self.world, self.m, text)
            self.done += 1
            time.sleep(self.rng.uniform(*self.interval))


class Monitor(threading.Thread):
    """Reads every holder record every few ms; two active records seen in two reads in a row is
    a violation (one read alone could straddle a move)."""

    def __init__(self, world):
        super().__init__(daemon=True)
        self.world = world
        self.stop = threading.Event()
        self.found = None
        self.polls = 0

    def run(self):
        previous = None
        while not self.stop.is_set():
            actives = []
            for m in self.world.machines:
                r = m.record()
                if r and r.get("state") == "active":
                    actives.append((m.name, r.get("epoch")))
            actives = tuple(actives)
            self.polls += 1
            if len(actives) >= 2 and actives == previous and self.found is None:
                self.found = f"two active holder records at once (seen twice in a row): {actives}"
                self.world.log("MONITOR: " + self.found)
            previous = actives
            time.sleep(0.004)


# ----------------------------------------------------------------------------------------------

class Config:
    def __init__(self, args, workdir):
        self.capsule = args.capsule
        self.capsulefs = args.capsulefs
        self.workdir = workdir
        self.pki_dir = os.path.join(workdir, "pki")
        self.seal_keys = [os.path.join(workdir, f"seal-{n}.key") for n in NAMES]

    def pki(self, name):
        return os.path.join(self.pki_dir, name)


class World:
    """One schedule: its machines, its agent, its steps."""

    def __init__(self, cfg, seed, schedule, steps, stats, verbose, tolerate=(), without=()):
        self.cfg, self.seed, self.schedule, self.steps = cfg, seed, schedule, steps
        self.tolerate = set(tolerate)
        self.without = set(without)
        self.rng = random.Random(f"{seed}/{schedule}")
        self.stats = stats
        self.verbose = verbose
        self.dir = os.path.join(cfg.workdir, f"s{schedule}")
        os.makedirs(self.dir)
        self.lines = []
        self.t0 = mono()
        self.step = 0
        self.events = Events(self)
        self.machines = []
        self.writers = []
        self.async_found = []
        self.forced = []          # steps a scenario asks for next: ("move_back", machine, settle_until)
        self.settle_until = 0.0
        self.move_seconds = 0.15  # the typical length of a clean move, learnt as moves run
        self.logfile = open(os.path.join(self.dir, "log.txt"), "w")

    # -- logging
    def log(self, text):
        line = f"{mono() - self.t0:8.3f} [step {self.step}] {text}"
        self.lines.append(line)
        try:
            self.logfile.write(line + "\n")
            self.logfile.flush()
        except ValueError:
            pass
        if self.verbose:
            print("    " + line, flush=True)

    def world_line(self):
        return " ".join(m.describe() for m in self.machines)

    # -- set up and tear down
    def setup(self):
        count = self.rng.choice([2, 3, 3])
        self.machines = [Machine(self, i) for i in range(count)]
        a = self.machines[0]
        ws = os.path.join(self.dir, "workspace")
        os.makedirs(os.path.join(ws, "src"))
        with open(os.path.join(ws, "README.md"), "w") as f:
            f.write("# fault test agent\n")
        with open(os.path.join(ws, "src", "data.bin"), "wb") as f:
            f.write(os.urandom(self.rng.choice([1000, 50_000, 400_000])))
        rc, out, err = PROCS.run([self.cfg.capsule, "init", a.dir, "--id", AGENT, "--name", "Fault agent",
                                  "--workspace", ws])
        if rc != 0:
            raise HarnessError(f"capsule init failed: {err}")
        if not self.mount(a)[0]:
            raise HarnessError("the first mount failed")
        for m in self.machines:
            m.start()
        self.log(f"{count} machines; agent {AGENT} at {a.name}; {self.world_line()}")

    def diagnose(self):
        """What each sidecar said last, and where each capsulefs driver waits, for a failure's report."""
        for m in self.machines:
            holders = lock_holders(os.path.join(m.dir, ".capsule", "mount.lock"))
            if holders:
                self.log(f"{m.name}: mount.lock held by {holders}")
            for pid in ([m.proc.pid] if m.alive() else []) + m.drivers():
                waits = collections.Counter()
                try:
                    for tid in os.listdir(f"/proc/{pid}/task"):
                        try:
                            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                                waits[f.read().strip() or "running"] += 1
                        except OSError:
                            pass
                except OSError:
                    continue
                what = "sidecar" if m.alive() and pid == m.proc.pid else "capsulefs"
                self.log(f"{what} {pid} of {m.name} (mount {m.mount_state(wait=0.3)[0]}): threads waiting in "
                         f"{dict(waits)}")
            if m.starts == 0:
                continue
            path = os.path.join(self.dir, f"serve-{m.name}-{m.starts - 1}.err")
            try:
                with open(path, "rb") as f:
                    tail = f.read().decode(errors="replace").strip().splitlines()[-6:]
            except OSError:
                tail = []
            for line in tail:
                self.log(f"sidecar {m.name} said: {line[:300]}")

    def teardown(self):
        self.events.closed = True
        for w in self.writers:
            w.stop.set()
        for m in self.machines:
            m.proxy.disarm()
            m.kill()
        for pid in pids_of(self.cfg.capsulefs, self.dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for point in sorted(mounts_under(self.dir), key=len, reverse=True):
            subprocess.run(["fusermount3", "-u", "-z", point], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=20)
        for m in self.machines:
            m.proxy.close()
        try:
            self.logfile.close()
        except OSError:
            pass

    # -- mounts
    def mount(self, m):
        os.makedirs(m.mnt, exist_ok=True)
        rc, out, err = PROCS.run([self.cfg.capsulefs, m.dir, m.mnt], timeout=30)
        self.log(f"capsulefs {m.name}: exit {rc} {err.strip()[-200:]}")
        return rc == 0, err

    def end_lingering(self, m):
        """A capsulefs of m's capsule that runs with no mount of it here, for over 2 s: when other
        mount namespaces hold copies of our mounts, that is why it cannot exit (environment), and
        it is ended; otherwise it is a finding."""
        if is_mountpoint(m.mnt) or not m.drivers():
            return
        deadline = mono() + 2
        while mono() < deadline and m.drivers() and not is_mountpoint(m.mnt):
            time.sleep(0.05)
        if is_mountpoint(m.mnt) or not m.drivers():
            return
        copies = foreign_copies(self.dir)
        if copies:
            self.log(f"{m.name}: capsulefs {m.drivers()} outlives its unmount because other mount namespaces hold "
                     f"copies of our mounts ({copies[:2]}): environment; ending it")
            self.stats["environment: drivers kept alive by other namespaces, ended"] += 1
            m.kill_driver()
            return
        self.finding("lingering-driver", f"capsulefs {m.drivers()} of {m.name}'s capsule runs on with no mount "
                     f"of it (no other namespace holds a copy)")

    def repair_mounts(self):
        """As a supervisor would: unmount dead mounts; mount again the capsule a machine holds."""
        for m in self.machines:
            self.end_lingering(m)
            state, _ = m.mount_state()
            if state == "dead":
                if m.drivers():  # a driver still starting or checkpointing: give it a moment
                    time.sleep(0.3)
                    state, _ = m.mount_state()
                if state == "dead":
                    subprocess.run(["fusermount3", "-u", "-z", m.mnt], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, timeout=20)
                    self.log(f"{m.name}: dead mount unmounted")
                    self.stats["dead mounts repaired"] += 1
                    state = "none"
            if state in ("live", "busy"):
                if state == "busy":
                    self.log(f"{m.name}: the mount's control channel does not answer; left alone")
                continue
            rec = m.record()
            if m.keep_unmounted is not None and (not rec or rec.get("epoch") != m.keep_unmounted):
                m.keep_unmounted = None
            if m.unmountable and m.state() != "frozen":
                m.unmountable = False
            if m.state() in ("active", "frozen") and m.keep_unmounted is None and not m.unmountable:
                for _ in range(30):  # a sidecar may be mounting it right now
                    if not m.drivers():
                        break
                    time.sleep(0.1)
                if m.mount_state()[0] == "live":
                    continue
                if m.drivers():  # detached and stuck: as a supervisor, end it
                    self.log(f"{m.name}: capsulefs {m.drivers()} runs without a mount for 3 s; killing it")
                    self.stats["orphan drivers killed"] += 1
                    m.kill_driver()
                ok, err = self.mount(m)
                if not ok and m.mount_state()[0] != "live":
                    if m.state() == "frozen" and "thaw it first" in err:
                        m.unmountable = True
                        self.finding("frozen-mount", f"capsulefs refuses to mount {m.name}'s capsule, whose "
                                     f"holder record is frozen ({err.strip()[-160:]}); capsulefs(8) says such a "
                                     f"capsule is mounted frozen")
                        continue
                    raise Violation(f"capsulefs could not mount the capsule {m.name} holds "
                                    f"({m.state()}): {err.strip()[-200:]} {self.world_line()}")
                self.stats["remounts"] += 1

    def finding(self, key, text):
        self.stats[f"finding {key}"] += 1
        if key in self.tolerate:
            self.log(f"FINDING (tolerated) [{key}] {text}")
            return
        raise Finding(key, f"{text}: {self.world_line()}")

    def stuck(self):
        """A tolerated finding left the holder frozen with no mount and no move to resolve: no
        tool can thaw it (capsule thaw needs a mount)."""
        h = self.holder()
        return h is not None and h.unmountable and h.state() == "frozen" and not h.move_out()

    # -- who holds the agent
    def holder(self):
        """The machine whose record is active, else the frozen one of the highest epoch."""
        actives = [m for m in self.machines if m.state() == "active"]
        if actives:
            return actives[0]
        frozen = [(m.record().get("epoch", 0), m) for m in self.machines if m.state() == "frozen"]
        if frozen:
            return max(frozen, key=lambda x: x[0])[1]
        return None

    def by_addr(self, addr):
        for m in self.machines:
            if m.proxy.addr == addr:
                return m
        return None

    # -- the checks
    def check(self, final=False):
        if mono() < self.settle_until:  # a scenario's held answer is still to come
            time.sleep(self.settle_until - mono())
        for found in self.async_found:
            raise Violation(found)
        self.repair_mounts()
        self.check_one_runs()
        h = self.holder()
        if h is None:
            raise Violation(f"no machine holds the agent (none active or frozen): {self.world_line()}")
        self.check_verifies(h)
        self.check_journal(h)
        if self.stuck():
            raise EndSchedule(f"{h.name} stays frozen: its capsule cannot be mounted to thaw it")
        if final:
            self.check_final()

    def runners(self):
        run = set()
        for m in self.machines:
            if m.state() == "active":
                run.add(m.name)
            ms, st = m.mount_state()
            if ms == "live" and st.get("state") == "active":
                run.add(m.name)
        return run

    def check_one_runs(self):
        run = self.runners()
        if len(run) > 1:
            self.log(f"two run? {sorted(run)}: {self.world_line()}; waiting for the mounts' watch")
            time.sleep(MOUNT_STATE_GRACE)
            run = self.runners()
            if len(run) > 1:
                raise Violation(f"two machines run the agent (active record or active mount): "
                                f"{sorted(run)}: {self.world_line()}")
        for m in self.machines:  # a mount that takes writes for a record that is not active
            ms, st = m.mount_state()
            if ms == "live" and st.get("state") == "active" and m.state() != "active":
                time.sleep(MOUNT_STATE_GRACE)
                ms, st = m.mount_state()
                if ms == "live" and st.get("state") == "active" and m.state() != "active":
                    raise Violation(f"{m.name}'s mount is active but its holder record says "
                                    f"{m.state()}: {self.world_line()}")

    def check_verifies(self, h):
        cap = self.cfg.capsule
        ms, st = h.mount_state()
        froze = False
        if ms == "busy":
            self.log(f"{h.name}: the mount does not answer: not verified this time")
            return
        if h.state() == "active" and ms == "live":
            rc, out, err = PROCS.run([cap, "freeze", h.mnt])
            if rc != 0:
                raise Violation(f"capsule freeze of the active copy at {h.name} failed: {err.strip()} "
                                f"{self.world_line()}")
            froze = True
        rc, out, err = PROCS.run([cap, "verify", h.dir])
        if froze:
            # A thaw of a thawed mount succeeds (capsule(1), CONVENTIONS): whether someone else
            # thawed this check's freeze meanwhile is read from the status first.
            src, sout, _ = PROCS.run([cap, "status", h.mnt, "--json"])
            thawed_meanwhile = src == 0 and '"state":"active"' in sout
            trc, _, terr = PROCS.run([cap, "thaw", h.mnt])
            if thawed_meanwhile:
                self.finding("thaw-of-admin-freeze", f"an admin's freeze of {h.name} (this check's, around capsule "
                             f"verify) was thawed by someone else meanwhile: a move's rollback or recovery thaws "
                             f"any frozen record, also one it did not freeze")
            elif trc != 0 and "retired" in terr:
                raise Violation(f"the holder {h.name} was retired while no move of it ran (between this check's "
                                f"freeze and thaw): {terr.strip()[-200:]}; {self.world_line()}")
            elif trc != 0:
                raise Violation(f"capsule thaw after the check's freeze at {h.name} failed: {terr.strip()}")
        if rc != 0:
            raise Violation(f"the holder's copy at {h.name} ({h.state()}) does not verify: "
                            f"{(out + err).strip()[-500:]}")
        self.stats["verified"] += 1

    def check_journal(self, h):
        acked = self.events.snapshot()
        texts = collections.Counter()
        try:
            with open(os.path.join(h.dir, "memory", "timeline_events.jsonl"), "rb") as f:
                for raw in f:
                    try:
                        e = json.loads(raw)
                    except ValueError:
                        continue
                    t = (e.get("data") or {}).get("text") if isinstance(e, dict) else None
                    if isinstance(t, str):
                        texts[t] += 1
        except OSError as e:
            raise Violation(f"cannot read the holder's journal at {h.name}: {e}")
        missing = sorted((t for t in acked if texts[t] == 0), key=lambda t: int(t.split("-e")[1]))
        if missing:
            where = collections.Counter(acked[t] for t in missing)
            raise Violation(f"{len(missing)} acknowledged journal event(s) missing from the holder "
                            f"{h.name} ({h.state()}@{h.record().get('epoch')}): {missing[:6]}; acked by "
                            f"(machine, step): {dict(where)}; {self.world_line()}")
        doubled = [t for t, n in texts.items() if n > 1 and t.startswith(f"s{self.schedule}-")]
        if doubled:
            raise Violation(f"journal events twice in the holder's journal at {h.name}: {doubled[:6]}")
        self.stats["events checked"] += len(acked)

    def staged_move(self, m):
        """The move whose copy reached m's staging area of the agent (its .capsule/move.json), or
        None: a staging area that only took an offer is a clone of the retired copy, whose
        move.json (if any) names the move that brought that copy."""
        record = read_json(os.path.join(m.root, ".staging", AGENT, ".capsule", "move.json"))
        return record.get("move") if isinstance(record, dict) else None

    def check_staging_gone(self, m, why, move=None):
        """m's staging area of the agent must be gone (of `move` only, when named: an earlier
        move whose abort was lost may stay staged until the next offer or restart, as
        capsule-protocol(7) allows). A .replaced- copy is removed on a thread: it gets 3 s."""
        deadline = mono() + 3
        while True:
            left = [e for e in m.staging_entries() if e == AGENT or e.startswith(".replaced-")]
            if AGENT in left and move is not None and self.staged_move(m) != move:
                self.log(f"{m.name}: a staging area of another move stays (staged {self.staged_move(m)}), allowed")
                left.remove(AGENT)
            if not left:
                return
            if AGENT not in left and mono() < deadline:
                time.sleep(0.05)
                continue
            raise Violation(f"{why}, but {m.root}/.staging still holds {left}: {self.world_line()}")

    def check_final(self):
        states = collections.Counter(m.state() for m in self.machines)
        if states["active"] != 1 or states["frozen"]:
            raise Violation(f"after full recovery the agent is not active on exactly one machine: "
                            f"{self.world_line()}")
        for m in self.machines:
            if m.move_out():
                raise Violation(f"after full recovery {m.name} still records a move out: {self.world_line()}")

    # -- steps ---------------------------------------------------------------------------------
    def run(self):
        self.setup()
        self.step = 0
        self.check()
        for step in range(1, self.steps + 1):
            self.step = step
            # Each step draws from its own generator: a step that went another way (timing is
            # not replayed) does not change what the next steps draw.
            self.rng = random.Random(f"{self.seed}/{self.schedule}/{step}")
            forced = self.forced.pop(0) if self.forced else None
            op = "move_back" if forced else self.pick_op()
            self.log(f"== {op}   {self.world_line()}")
            self.stats[f"op {op}"] += 1
            began = mono()
            if forced:
                self.settle_until = forced[2]
                self.op_move(to=forced[1])
            else:
                getattr(self, "op_" + op)()
            self.check()
            self.stats["steps"] += 1
            took = mono() - began
            self.stats[f"seconds in {op}"] += round(took, 1)
            if took > 5:
                self.stats["steps over 5 s"] += 1
                self.log(f"step {op} took {took:.1f}s")
        self.step = self.steps + 1
        self.rng = random.Random(f"{self.seed}/{self.schedule}/end")
        self.log(f"== full recovery   {self.world_line()}")
        self.full_recovery()
        self.check(final=True)
        self.log(f"== closing move   {self.world_line()}")
        self.op_move(clean=True)
        self.check(final=True)

    def pick_op(self):
        """Fixed weights, whatever the state (an op that does not apply does nothing), so that
        a replay draws the same ops."""
        r = self.rng
        weights = {
            "move": 50,
            "append": 10,
            "stale_append": 4,
            "freeze": 5,
            "thaw": 8,
            "kill_sidecar": 4,
            "restart": 10,
            "recover": 10,
            "kill_driver": 4,
            "unmount": 2,
            "bad_move": 3,
        }
        ops = list(weights)
        return r.choices(ops, [weights[o] for o in ops])[0]

    # ops between moves
    def op_append(self):
        h = self.holder()
        if h is None:
            return
        live = h.mount_state()[0] == "live"
        w = Writer(self, h, self.rng.random(), count=self.rng.randint(1, 6), folder=not live)
        self.writers.append(w)
        w.start()
        w.join(timeout=1)
        self.log(f"append: {w.done} to {h.name} via {'mount' if live else 'folder'}"
                 f"{' (still blocked)' if w.is_alive() else ''}")

    def op_stale_append(self):
        others = [m for m in self.machines if m.state() not in ("active",)]
        if not others:
            return
        m = self.rng.choice(others)
        text = self.events.new_text()
        if m.mount_state()[0] == "live" and self.rng.random() < 0.7:
            result = [None]

            def go():
                result[0] = append_through_mount(self, m, text)
            t = threading.Thread(target=go, daemon=True)
            t.start()
            t.join(timeout=2)
            self.log(f"stale append to {m.name}'s mount ({m.state()}): {result[0]}")
        elif os.path.exists(os.path.join(m.dir, "manifest.json")):
            ok = append_to_folder(self, m, text)
            self.log(f"stale append to {m.name}'s folder ({m.state()}): {ok}")

    def live_mounts(self):
        return [m for m in self.machines if m.mount_state()[0] == "live"]

    def op_freeze(self):
        h = self.holder()
        m = h if h and h.mount_state()[0] == "live" and self.rng.random() < 0.8 else None
        if m is None:
            live = self.live_mounts()
            if not live:
                return
            m = self.rng.choice(live)
        rc, out, err = PROCS.run([self.cfg.capsule, "freeze", m.mnt])
        self.log(f"capsule freeze {m.name}: exit {rc} {err.strip()[-160:]}")

    def op_thaw(self):
        frozen = [m for m in self.live_mounts() if (m.mount_state()[1] or {}).get("state") == "frozen"]
        pool = frozen if frozen and self.rng.random() < 0.85 else self.live_mounts()
        if "thaw-during-move" in self.without:  # only an admin's own freezes
            pool = [m for m in pool if not m.move_out()]
        if not pool:
            return
        m = self.rng.choice(pool)
        rc, out, err = PROCS.run([self.cfg.capsule, "thaw", m.mnt])
        self.log(f"capsule thaw {m.name}: exit {rc} {err.strip()[-160:]}")
        self.stats[f"admin thaw exit {rc}"] += 1

    def op_kill_sidecar(self):
        alive = [m for m in self.machines if m.alive()]
        if alive:
            self.rng.choice(alive).kill()

    def op_restart(self):
        dead = [m for m in self.machines if not m.alive()]
        if not dead:
            return
        for m in (dead if self.rng.random() < 0.5 else [self.rng.choice(dead)]):
            m.start()
            self.stats["sidecar restarts"] += 1
        self.settle_resolvers()

    def settle_resolvers(self, limit=4.0):
        """A restarted sidecar resolves its moves out in the background: give it a moment."""
        deadline = mono() + limit
        while mono() < deadline:
            pending = [m for m in self.machines if m.move_out() and m.alive()
                       and self.by_addr(m.move_out().get("to", "")) and self.by_addr(m.move_out()["to"]).alive()]
            if not pending:
                return
            time.sleep(0.1)

    def op_recover(self, all_of_them=False):
        left = [m for m in self.machines if m.move_out()]
        if not left:
            return
        for m in (left if all_of_them else [self.rng.choice(left)]):
            self.recover(m)

    def recover(self, m):
        mo = m.move_out()
        if not mo:
            return None
        to = mo.get("to", "")
        target = self.by_addr(to)
        target_pid = target.proc.pid if target and target.alive() else None
        src = m.mnt if m.mount_state()[0] == "live" else m.dir
        cfg = self.cfg
        # A move recorded as only offered never froze the capsule: a freeze there is an admin's.
        admin_frozen = mo.get("phase") == "offered" and m.state() == "frozen"
        rc, out, err = PROCS.run([cfg.capsule, "move", src, "--recover", "--to", to, "--cert", cfg.pki("client.pem"),
                                  "--key", cfg.pki("client.key"), "--ca", cfg.pki("ca.pem")], timeout=RECOVER_TIMEOUT)
        self.log(f"recover {m.name} (phase {mo.get('phase')} to {target.name if target else to}): exit {rc} "
                 f"{(out + err).strip()[-200:]}")
        self.stats[f"recover exit {rc}"] += 1
        if rc == 0 and admin_frozen and m.state() == "active":
            self.finding("thaw-of-admin-freeze", f"capsule move --recover at {m.name} rolled back a move recorded "
                         f"as only offered (it never froze) and thawed the admin's freeze")
        if rc == 0:
            if m.move_out():
                raise Violation(f"capsule move --recover at {m.name} exited 0 but the move is still recorded")
            still_up = target and target.alive() and target.proc.pid == target_pid
            if m.alive() and m.resolver_possible:
                # The sidecar's own resolver may have resolved it first, its abort lost on a link.
                self.log(f"{m.name}'s sidecar may be resolving too: its target's staging is not checked")
            elif still_up and target_pid is not None:
                self.check_staging_gone(target, f"capsule move --recover at {m.name} resolved move "
                                                f"{mo.get('move')} with {target.name}", move=mo.get("move"))
        return rc

    def op_kill_driver(self):
        live = [m for m in self.machines if m.drivers()]
        if live:
            self.rng.choice(live).kill_driver()
            time.sleep(0.05)

    def op_unmount(self):
        h = self.holder()
        if h is None or h.mount_state()[0] != "live":
            return
        rc = subprocess.run(["fusermount3", "-u", h.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=20).returncode
        h.keep_unmounted = (h.record() or {}).get("epoch") if rc == 0 else None
        for _ in range(100):
            if not h.drivers():
                break
            time.sleep(0.05)
        self.log(f"unmounted {h.name}'s mount (exit {rc}); its folder is the agent now")

    def op_bad_move(self):
        """A move that must be refused: from a machine that does not hold the agent, or to the
        machine that holds it."""
        h = self.holder()
        cfg = self.cfg
        if h is not None and self.rng.random() < 0.5:
            src, tgt = h, h
        else:
            others = [m for m in self.machines if m.state() != "active"
                      and os.path.exists(os.path.join(m.dir, "manifest.json"))]
            if not others:
                return
            src = self.rng.choice(others)
            tgt = self.rng.choice([m for m in self.machines if m is not src])
        path = src.mnt if src.mount_state()[0] == "live" else src.dir
        before = src.record()
        rc, out, err = PROCS.run([cfg.capsule, "move", path, "--to", tgt.proxy.addr, "--cert", cfg.pki("client.pem"),
                                  "--key", cfg.pki("client.key"), "--ca", cfg.pki("ca.pem")], timeout=MOVE_TIMEOUT)
        self.log(f"bad move {src.name}({(before or {}).get('state')}) -> {tgt.name}: exit {rc} "
                 f"{(out + err).strip()[-200:]}")
        if rc == 0:
            raise Violation(f"a move from {src.name} (record {before}) to {tgt.name} succeeded: {self.world_line()}")

    # the move, with its faults
    def op_move(self, clean=False, to=None):
        r = self.rng
        h = self.holder()
        if h is None or h.state() != "active":
            self.log("no active holder: nothing to move")
            return
        tgt = to if to is not None and to is not h else r.choice([m for m in self.machines if m is not h])
        # Mostly as an operator would: resolve a move left unfinished, start a sidecar that is
        # down; else the move meets them (refused: a move is unresolved; no one answers).
        if h.move_out() and (clean or r.random() < 0.7):
            self.recover(h)
            if self.holder() is not h or h.state() != "active":
                self.log("the recovered move changed the holder: nothing to move this step")
                return
        if not tgt.alive() and (clean or r.random() < 0.7):
            tgt.start()
            self.stats["sidecar restarts"] += 1
        live = h.mount_state()[0] == "live"
        src_path = h.mnt if live and r.random() < 0.85 else h.dir
        epoch = h.record().get("epoch")
        faults = [] if clean or to is not None else self.draw_faults(h, tgt)
        timers = []
        threads = []
        rules = []
        mover = {"p": None}

        def act(name, fn):
            def run():
                self.log(f"fault: {name}")
                self.stats[f"fault {name}"] += 1
                try:
                    fn()
                except Exception as e:  # a fault that cannot happen now is no error
                    self.log(f"fault {name} raised {e!r}")
            return run

        for f in faults:
            kind = f["kind"]
            if kind in ("cut", "hold"):
                rules.append(Rule(kind, f["dir"], f["at"], conn=f["conn"], secs=f.get("secs", 0), rst=f.get("rst", True),
                                  label=f"{kind}-{f['at'][0]}"))
                continue
            fn = self.fault_fn(f, h, tgt, mover, threads)
            if f["trigger"][0] == "time":
                timers.append((f["trigger"][1], act(f["name"], fn)))
            else:
                _, direction, at = f["trigger"]
                rules.append(Rule("action", direction, at, conn=None, action=act(f["name"], fn), after=f.get("after", False),
                                  label=f["name"]))
        tgt.proxy.arm(rules, h.dir)
        for m in self.machines:
            if m is not tgt:
                m.proxy.arm([], h.dir)
        self.log(f"move {h.name}@{epoch} -> {tgt.name} from {'mount' if src_path == h.mnt else 'folder'}; faults: "
                 + ("; ".join(self.describe_fault(f) for f in faults) or "none"))

        writer = None
        if clean or r.random() < 0.85:
            writer = Writer(self, h, r.random(), folder=not live)
            self.writers.append(writer)
            writer.start()
        monitor = Monitor(self)
        monitor.start()
        cfg = self.cfg
        out_path = os.path.join(self.dir, f"move-{self.step}.out")
        start = mono()
        with open(out_path, "wb") as out:
            p = PROCS.popen([cfg.capsule, "move", src_path, "--to", tgt.proxy.addr, "--cert", cfg.pki("client.pem"),
                             "--key", cfg.pki("client.key"), "--ca", cfg.pki("ca.pem"), "--json", "--progress"],
                            stdout=out, stderr=subprocess.STDOUT)
        mover["p"] = p
        handles = []
        for delay, fn in timers:
            t = threading.Timer(delay, fn)
            t.daemon = True
            t.start()
            handles.append(t)
        try:
            rc = p.wait(timeout=MOVE_TIMEOUT)
        except subprocess.TimeoutExpired:
            with open(out_path, "rb") as f:
                said = f.read().decode(errors="replace").strip().splitlines()
            self.log(f"mover timed out (phase {h.move_out() and h.move_out().get('phase')}, said "
                     f"{said[-3:]}): killed -9; {self.world_line()}")
            self.diagnose()
            copies = foreign_copies(self.dir)
            if copies:
                self.log(f"other mount namespaces hold copies of our mounts: {copies[:3]}")
            self.stats["mover timed out"] += 1
            PROCS.kill(p)
            rc = None
        PROCS.forget(p)
        seconds = mono() - start
        for t in handles:
            t.cancel()
        for t in handles:
            t.join(timeout=20)
        for t in threads:
            t.join(timeout=20)
        for m in self.machines:
            m.proxy.disarm()
        if writer:
            writer.stop.set()
            writer.join(timeout=0.5)
        monitor.stop.set()
        monitor.join()
        with open(out_path, "rb") as f:
            said = f.read().decode(errors="replace").strip()
        if rc is not None and rc < 0:
            rc = f"signal {-rc}"
        self.log(f"mover exit {rc} after {seconds:.3f}s: {said[-300:]}")
        if seconds > 3 and not any(f["kind"] in ("hold", "partition") for f in faults):
            self.log(f"slow mover said: {said[:600]!r}")
            self.diagnose()
        self.stats[f"move exit {rc}"] += 1
        if monitor.found:
            also = ""
            try:
                self.check_journal(self.holder() or tgt)
            except Violation as v:
                also = f"; and {v}"
            raise Violation(monitor.found + f"; {self.world_line()}{also}")
        if rc == 0:
            if not faults:
                self.move_seconds = 0.8 * self.move_seconds + 0.2 * seconds
            trec, srec = tgt.record(), h.record()
            if not trec or trec.get("epoch") != epoch + 1 or trec.get("state") not in ("active", "frozen"):
                raise Violation(f"capsule move exited 0 but {tgt.name} does not hold epoch {epoch + 1}: "
                                f"{self.world_line()}")
            if not srec or srec.get("state") != "retired":
                raise Violation(f"capsule move exited 0 but the source {h.name} is not retired: {self.world_line()}")
            if h.move_out():
                raise Violation(f"capsule move exited 0 but {h.name} still records the move")
            if tgt.alive():
                self.check_staging_gone(tgt, f"move to {tgt.name} succeeded")
        elif clean:
            copies = foreign_copies(self.dir)
            if copies:
                # Not the code under test: another process's mount namespace copied a mount of
                # ours, so the driver of the target's retired copy cannot exit after its unmount,
                # and the offer waits for it (WaitForDriverToExit).
                self.stats["environment: mounts copied into other namespaces"] += 1
                raise EndSchedule(f"the closing move waited on a capsulefs kept alive by mount copies in other "
                                  f"namespaces ({copies[:2]}): environment, not a finding")
            raise Violation(f"after full recovery a move with no fault failed (exit {rc}): {said[-300:]}; "
                            f"{self.world_line()}")

    def describe_fault(self, f):
        if f["kind"] in ("cut", "hold"):
            secs = f" {f['secs']:.2f}s" if f["kind"] == "hold" else ""
            return f"{f['kind']}{secs} {f['dir']} at {f['at'][0]} {f['at'][1]} of conn {f['conn']}"
        trig = f["trigger"]
        when = f"after {trig[1]:.3f}s" if trig[0] == "time" else f"at {trig[1]} {trig[2][0]} {trig[2][1]}"
        return f"{f['name']} {when}"

    def draw_faults(self, src, tgt):
        r = self.rng
        n = r.choices([0, 1, 2, 3], [20, 45, 25, 10])[0]
        faults = []
        racing = "restart-during-move" not in self.without
        if racing and r.random() < 0.06:
            # A stale resolver: the source's sidecar restarts once the move is past activate-sent,
            # its start-up resolver asks the target, and that answer is held for seconds while the
            # mover finishes and the agent is moved back: the answer then names an old epoch.
            hold = r.choice([2.5, 3.5])
            faults.append({"kind": "kill", "name": "kill src_sidecar (restart after 0.0s)", "who": "src_sidecar",
                           "restart_after": 0.0, "after": True,
                           "trigger": ("rule", "c2s", ("phase", "activate-sent"))})
            faults.append({"kind": "hold", "dir": "s2c", "at": ("phase", "activate-sent"), "conn": 0, "secs": 0.4})
            faults.append({"kind": "hold", "dir": "s2c", "at": ("record", r.choice([0, 0, 1, 2])), "conn": 1,
                           "secs": hold})
            self.forced.append(("move_back", src, mono() + hold + 1.5))
            self.stats["stale resolver drawn"] += 1
            return faults
        if racing and r.random() < 0.12:
            # The source's sidecar restarts while the mover still runs: its start-up resolver
            # finds the move recorded and resolves it too. The activate reply is held, so that
            # the mover is slow to retire.
            direction = r.choice(["c2s", "s2c"])
            faults.append({"kind": "kill", "name": "kill src_sidecar (restart after 0.0s)", "who": "src_sidecar",
                           "restart_after": 0.0, "after": r.random() < 0.5,
                           "trigger": ("rule", direction, r.choice([("phase", "frozen"), ("phase", "frozen"),
                                                                    ("record", r.randint(8, 20))]))})
            faults.append({"kind": "hold", "dir": "s2c", "at": ("phase", "activate-sent"), "conn": None,
                           "secs": r.choice([0.2, 0.6, 1.2])})
            self.stats["resolver race drawn"] += 1
            return faults
        for _ in range(n):
            kind = r.choices(["cut", "hold", "partition", "kill", "admin"], [30, 12, 8, 35, 15])[0]
            if kind == "admin" and "thaw-during-move" in self.without:
                kind = "kill"
            if kind in ("cut", "hold"):
                direction = r.choice(["c2s", "s2c"])
                at = self.draw_point(direction)
                conn = r.choice([0, None]) if at[0] == "phase" else r.choices([0, 1, None], [75, 10, 15])[0]
                f = {"kind": kind, "dir": direction, "at": at, "conn": conn,
                     "rst": r.random() < 0.5}
                if kind == "hold":
                    f["secs"] = r.choice([0.05, 0.3, 1.0, 2.5])
                    f["at"] = at if at[0] != "bytes" else ("record", r.randint(0, 12))
                faults.append(f)
                continue
            if kind == "partition":
                f = {"kind": "partition", "name": "partition", "secs": r.choice([0.2, 1.0, 3.0])}
            elif kind == "kill":
                who = r.choices(["mover", "src_sidecar", "tgt_sidecar", "src_driver", "tgt_driver"],
                                [35, 15, 25, 15, 10])[0]
                f = {"kind": "kill", "name": f"kill {who}", "who": who}
                if who.endswith("sidecar") and r.random() < 0.6 and (racing or who == "tgt_sidecar"):
                    f["restart_after"] = r.choice([0.0, 0.1, 0.5, 1.5])
                    f["name"] += f" (restart after {f['restart_after']}s)"
            else:
                what = r.choices(["thaw", "thaw_storm", "freeze"], [40, 40, 20])[0]
                f = {"kind": "admin", "name": f"admin {what} of source", "what": what}
            f["trigger"] = self.draw_trigger()
            f["after"] = r.random() < 0.5
            faults.append(f)
        return faults

    def draw_point(self, direction):
        r = self.rng
        c = r.random()
        if c < 0.5:  # a protocol phase: the first record after the source recorded it
            return ("phase", r.choices(["offered", "frozen", "activate-sent"], [15, 30, 55])[0])
        if c < 0.8:
            top = max(8, self.machines[0].proxy.max_records[direction] + 2,
                      *(m.proxy.max_records[direction] + 2 for m in self.machines))
            return ("record", r.randint(0, top))
        return ("bytes", r.randint(0, 40_000 if direction == "c2s" else 6_000))

    def draw_trigger(self):
        r = self.rng
        if r.random() < 0.5:
            span = max(0.05, self.move_seconds * 1.5)
            return ("time", r.choice([r.uniform(0, 0.01), r.uniform(0, span), r.uniform(0, span)]))
        direction = r.choice(["c2s", "s2c"])
        return ("rule", direction, self.draw_point(direction))

    def fault_fn(self, f, src, tgt, mover, threads):
        kind = f["kind"]
        if kind == "partition":
            return lambda: tgt.proxy.partition(f["secs"])
        if kind == "kill":
            who = f["who"]

            def kill():
                if who == "mover":
                    if mover["p"] is not None:
                        PROCS.kill(mover["p"])
                        self.log("mover killed -9")
                    return
                if who.endswith("driver"):
                    (src if who.startswith("src") else tgt).kill_driver()
                    return
                m = src if who.startswith("src") else tgt
                m.kill()
                if "restart_after" in f:
                    def restart():
                        time.sleep(f["restart_after"])
                        try:
                            m.start_if_down()
                        except Violation as e:
                            self.async_found.append(str(e))
                    t = threading.Thread(target=restart, daemon=True)
                    t.start()
                    threads.append(t)
            return kill
        what = f["what"]
        sock = os.path.join(src.dir, ".capsule", "control.sock")
        if what == "thaw_storm":
            def storm():
                def go():
                    end = mono() + 0.4
                    n = ok = 0
                    while mono() < end:
                        reply = control(sock, "thaw", timeout=1)
                        n += 1
                        ok += bool(reply and reply.get("ok"))
                        time.sleep(0.001)
                    self.log(f"thaw storm: {n} thaws sent, {ok} accepted")
                    self.stats["storm thaws accepted"] += ok
                t = threading.Thread(target=go, daemon=True)
                t.start()
                threads.append(t)
            return storm

        def admin():
            def go():
                if src.mount_state()[0] != "live":
                    return
                rc, out, err = PROCS.run([self.cfg.capsule, what, src.mnt])
                self.log(f"admin capsule {what} {src.name} during the move: exit {rc} {err.strip()[-160:]}")
                self.stats[f"admin {what} during move exit {rc}"] += 1
            t = threading.Thread(target=go, daemon=True)
            t.start()
            threads.append(t)
        return admin

    def full_recovery(self):
        for m in self.machines:
            m.proxy.disarm()
            m.keep_unmounted = None
        for w in self.writers:
            w.stop.set()
        for m in self.machines:
            if not m.alive():
                m.start()
        deadline = mono() + 40
        while mono() < deadline:
            self.repair_mounts()
            left = [m for m in self.machines if m.move_out()]
            if not left:
                break
            self.settle_resolvers(limit=2.5)
            for m in left:
                if m.move_out():
                    self.recover(m)
        else:
            raise Violation(f"moves still unresolved after 40 s of recovery: {self.world_line()}")
        # An admin's freeze (a record frozen with no move out recorded) is the admin's to thaw.
        for m in self.machines:
            if m.state() == "frozen" and not m.move_out() and m.mount_state()[0] == "live":
                rc, _, err = PROCS.run([self.cfg.capsule, "thaw", m.mnt])
                self.log(f"final thaw {m.name}: exit {rc} {err.strip()[-160:]}")
        # Every sidecar restarted: nothing may stay staged.
        for m in self.machines:
            m.kill()
            m.start(check_staging=True)
        self.repair_mounts()


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capsule", default=os.environ.get("CAPSULE"))
    ap.add_argument("--capsulefs", default=os.environ.get("CAPSULEFS"))
    ap.add_argument("--make-pki", default=os.environ.get("MAKE_PKI"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--schedules", type=int, default=1000)
    ap.add_argument("--first-schedule", type=int, default=0, help="start at this schedule (replay)")
    ap.add_argument("--steps", type=int, default=10, help="steps per schedule")
    ap.add_argument("--budget-seconds", type=float, default=None,
                    help="start no new schedule after this many seconds")
    ap.add_argument("--min-schedules", type=int, default=0,
                    help="run at least this many schedules whatever the budget; fewer (--max-seconds passed "
                         "first) fail the run")
    ap.add_argument("--min-steps", type=int, default=0,
                    help="fail the run when fewer steps than this were taken (schedules ended early count "
                         "only the steps they took)")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="never start a schedule after this many seconds, minimum or not")
    ap.add_argument("--keep", action="store_true", help="keep the work folder on failure")
    ap.add_argument("--keep-going", action="store_true", help="count violations and go on")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--tolerate", action="append", default=[], metavar="NAME",
                    help="a known finding (its [NAME] in the message) that does not fail the run: the "
                         "schedule ends early instead, when it must")
    ap.add_argument("--without", action="append", default=[], choices=["thaw-during-move", "restart-during-move"],
                    help="leave a kind of fault out of the schedules: thaw-during-move (an admin's thaw of "
                         "a mount a move froze, during the move or after a killed mover); restart-during-move "
                         "(the source's sidecar restarted while its mover still runs)")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    if not args.make_pki and os.path.exists(os.path.join(here, "make_pki.sh")):
        args.make_pki = os.path.join(here, "make_pki.sh")
    for name in ("capsule", "capsulefs", "make_pki"):
        value = getattr(args, name)
        if not value or not os.path.exists(value):
            ap.error(f"--{name.replace('_', '-')} (or ${name.upper()}) must name an existing file, not {value!r}")
        setattr(args, name, os.path.abspath(value))
    # A sidecar runs capsulefs from beside itself, else from PATH.
    os.environ["PATH"] = os.path.dirname(args.capsulefs) + os.pathsep + os.environ.get("PATH", "")
    if shutil.which("fusermount3") is None:
        ap.error("fusermount3 is missing")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    base = os.environ.get("TEST_TMPDIR") or "/tmp"
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="fault-test.", dir=base))
    cfg = Config(args, workdir)
    stats = collections.Counter()
    failed = []
    start = mono()
    schedules = 0
    replay = (f"{sys.executable} {os.path.abspath(__file__)} --capsule {args.capsule} --capsulefs {args.capsulefs} "
              f"--make-pki {args.make_pki} --seed {seed} --steps {args.steps}"
              + "".join(f" --tolerate {t}" for t in args.tolerate)
              + "".join(f" --without {w}" for w in args.without))
    print(f"fault_test: seed {seed}, work folder {workdir}", flush=True)
    world = None
    try:
        rc = subprocess.run(["bash", args.make_pki, cfg.pki_dir], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, timeout=120)
        if rc.returncode != 0:
            raise HarnessError(f"make_pki.sh failed: {rc.stderr.decode(errors='replace')}")
        for key in cfg.seal_keys:
            rc, _, err = PROCS.run([cfg.capsule, "keygen", "--type", "x25519", "-o", key])
            if rc != 0:
                raise HarnessError(f"keygen failed: {err}")
        for k in range(args.first_schedule, args.first_schedule + args.schedules):
            over_budget = args.budget_seconds is not None and mono() - start > args.budget_seconds
            if over_budget and schedules >= args.min_schedules:
                break
            if args.max_seconds is not None and mono() - start > args.max_seconds:
                break
            world = World(cfg, seed, k, args.steps, stats, args.verbose, args.tolerate, args.without)
            t0 = mono()
            try:
                world.run()
            except EndSchedule as e:
                world.log(f"schedule ends early: {e}")
                stats["schedules ended early"] += 1
                print(f"fault_test: schedule {k} ended early at step {world.step}: {e}", flush=True)
            except Violation as v:
                failed.append((k, world.step, str(v)))
                world.diagnose()
                print(f"VIOLATION seed={seed} schedule={k} step={world.step}: {v}", flush=True)
                print(f"  replay: {replay} --first-schedule {k} --schedules 1 --verbose", flush=True)
                print("  the schedule's last events:", flush=True)
                for line in world.lines[-60:]:
                    print("    " + line, flush=True)
            finally:
                world.teardown()
            schedules += 1
            if args.verbose or k % 10 == 0:
                print(f"fault_test: schedule {k} done in {mono() - t0:.1f}s ({stats['steps']} steps so far, "
                      f"{len(failed)} violation(s))", flush=True)
            this_failed = bool(failed) and failed[-1][0] == k
            if this_failed and not args.keep_going:
                break
            if not (this_failed and args.keep):
                shutil.rmtree(world.dir, ignore_errors=True)
            world = None
    except KeyboardInterrupt as e:
        print(f"fault_test: interrupted ({e})", flush=True)
        if world is not None:
            world.teardown()
        failed.append((-1, -1, "interrupted"))
    except HarnessError as e:
        print(f"fault_test: harness error: {e}", flush=True)
        traceback.print_exc()
        if world is not None:
            world.teardown()
        failed.append((-1, -1, f"harness error: {e}"))
    finally:
        PROCS.kill_all()
        for point in sorted(mounts_under(workdir), key=len, reverse=True):
            subprocess.run(["fusermount3", "-u", "-z", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for pid in pids_of(cfg.capsulefs, workdir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if failed and args.keep:
            print(f"fault_test: work folder kept: {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    elapsed = mono() - start
    interesting = sorted((k, v) for k, v in stats.items() if not k.startswith("op "))
    ops = sorted((k[3:], v) for k, v in stats.items() if k.startswith("op "))
    print("fault_test: ops: " + ", ".join(f"{k} {v}" for k, v in ops), flush=True)
    print("fault_test: coverage: " + ", ".join(f"{k}: {v}" for k, v in interesting), flush=True)
    violations = sum(1 for k, _, _ in failed if k >= 0)
    print(f"fault_test: {elapsed:.0f} s; {sum(1 for k, _, _ in failed if k < 0)} harness problem(s)", flush=True)
    print(f"fault_test: {schedules} schedules, {stats['steps']} steps, {violations} violations (seed {seed})",
          flush=True)
    # A run too short to have tested anything passes by luck: the machine must reach the minimum.
    short = []
    if schedules < args.min_schedules:
        short.append(f"{schedules} schedules, the minimum is {args.min_schedules}")
    if stats["steps"] < args.min_steps:
        short.append(f"{stats['steps']} steps, the minimum is {args.min_steps}")
    if short:
        print(f"fault_test: too little was tested in {elapsed:.0f} s: {'; '.join(short)} (a machine too slow or "
              f"too loaded for this test)", flush=True)
    return 1 if failed or short else 0


if __name__ == "__main__":
    sys.exit(main())
