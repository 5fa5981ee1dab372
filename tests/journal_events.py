"""Journal lines for the benchmarks (tests/bench_journal.sh, tests/bench_scale.sh): events in
canonical form with correct ids and chains, as capsule writes them, about 330 bytes each, and
the manifest entry that names a journal placed by hand."""
import hashlib
import json
import os

WORDS = ("the build finished and 214 tests passed; the report is in files/report.md, "
         "next: look at the flaky mount test and the slow merge").split()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def data(i):
    kind = i % 4
    text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(3 + i % 5))
    if kind == 0:
        return "user_message", {"text": text}
    if kind == 1:
        return "assistant_message", {"text": text, "provider": "anthropic", "model": "claude"}
    if kind == 2:
        return "tool_call", {"call_id": "c%d" % i, "name": "grep", "arguments": {"pattern": text[:24]}}
    return "tool_result", {"call_id": "c%d" % (i - 1), "content": text, "is_error": False}


class Chains:
    """Each machine's last seq and id; line() appends the next event of a machine's chain."""

    def __init__(self, tails=None):
        self.tails = dict(tails or {})

    def copy(self):
        return Chains(self.tails)

    def line(self, machine, clock, i):
        seq, prev = self.tails.get(machine, (0, None))
        kind, body = data(i)
        e = {"clock": clock, "data": body, "machine": machine, "prev": prev, "seq": seq + 1,
             "ts": "2026-12-02T16:40:%02dZ" % (i % 60), "type": kind}
        e["id"] = hashlib.sha256(canonical(e).encode()).hexdigest()
        self.tails[machine] = (seq + 1, e["id"])
        return (canonical(e) + "\n").encode()


def name_in_manifest(cap, sha256_hex, size, rel="memory/timeline_events.jsonl"):
    """Names the journal at `rel` in the capsule's manifest, as an append would have left it."""
    path = os.path.join(cap, "manifest.json")
    with open(path, "rb") as f:
        text = f.read()
    manifest = json.loads(text)
    manifest["files"][rel] = {"sha256": sha256_hex, "size": size}
    out = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    with open(path + ".tmp-bench", "wb") as f:
        f.write(out + (b"\n" if text.endswith(b"\n") else b""))
    os.rename(path + ".tmp-bench", path)
