#!/usr/bin/python3
"""Snapshot figures of `make bench` (run.py calls fig_snapshots):

- snapshot and restore throughput of a workspace of mixed files
  (BENCH_SNAP_MIB, default 200: half incompressible 1 MiB files, half
  small text files of 16 KiB), in MiB of file data per second, beside
  `tar -c | zstd -3` of the same tree in the same sandbox in the same run
  (the same work without sbx: walk, archive, compress; target ≥ 0.8 of it);
- the wake of a sandbox whose `persist` workspace holds BENCH_SNAP_WAKE_MIB
  (default 50) MiB: the first exec after a sleep (which restores it), p50;
- the extra sleep → wake time that persistence costs: the same sleep and
  wake of an equal sandbox without `persist`, p50 of each;
- the cost of one save of that workspace with `persist.intervalS` when
  nothing changed since the last background save (a walk, nothing
  written) and when a file changed (the whole archive), as the extra time
  of a sleep over one without `persist`.

Alone: `BENCH_ONLY=snapshots make bench` (run.py).
"""

import os
import statistics
import time

from benchlib import Value

MIB = int(os.environ.get("BENCH_SNAP_MIB", "200"))
WAKE_MIB = int(os.environ.get("BENCH_SNAP_WAKE_MIB", "50"))
RUNS = int(os.environ.get("BENCH_SNAP_RUNS", "3"))
TARGET_RATIO = 0.8


def fill(mib):
    """Shell that makes /workspace/t: mib/2 MiB of random 1 MiB files and
    mib/2 MiB of 16 KiB text files."""
    half = max(1, mib // 2)
    return ("rm -rf /workspace/t && mkdir -p /workspace/t/bin /workspace/t/txt && "
            "for i in $(seq %d); do head -c 1048576 /dev/urandom > /workspace/t/bin/$i; done && "
            "head -c %d /dev/urandom | base64 -w 100 > /workspace/t/all.txt && "
            "cd /workspace/t/txt && split -b 16384 ../all.txt p && rm ../all.txt"
            % (half, half * 1024 * 768))


def fig_snapshots(st, ctx):
    """Appends the snapshot Values to ctx.values."""
    h = {"Authorization": "Bearer " + st.key}

    def api(method, path, **kw):
        return st.http.request(method, st.url + path, headers=h, timeout=600, **kw)

    def sh(sid, cmd):
        r = api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": cmd, "timeoutMs": 600000})
        res = r.json()
        if r.status_code != 200 or res.get("exitCode") != 0:
            raise AssertionError("%r: %d %s" % (cmd, r.status_code, r.text[:300]))
        return res["stdout"]

    def make(sid, **body):
        r = api("PUT", "/v1/sandboxes/" + sid, json=body)
        if r.status_code not in (200, 201):
            raise AssertionError("create %s: %d %s" % (sid, r.status_code, r.text[:200]))

    big = {"resources": {"memoryMiB": 2048, "diskMiB": MIB * 3 + 200}}
    make("bench-snap", **big)
    try:
        sh("bench-snap", fill(MIB))
        data = int(sh("bench-snap", "find /workspace/t -type f -printf '%s\\n' | "
                                   "awk '{s += $1} END {print s}'"))
        snap_s, rest_s, base_s = [], [], []
        for _ in range(RUNS):
            out = sh("bench-snap", "s=$(date +%s%N); tar -C / -cf - workspace/t | zstd -3 -q "
                                   "> /dev/null; e=$(date +%s%N); echo $(( (e - s) / 1000 ))")
            base_s.append(int(out) / 1e6)
            t0 = time.monotonic()
            r = api("POST", "/v1/sandboxes/bench-snap/snapshots", json={"paths": ["/workspace/t"]})
            snap_s.append(time.monotonic() - t0)
            if r.status_code != 201:
                raise AssertionError("snapshot: %d %s" % (r.status_code, r.text[:200]))
            t0 = time.monotonic()
            q = api("POST", "/v1/sandboxes/bench-snap/restore", json={"snapshot": r.json()["id"]})
            rest_s.append(time.monotonic() - t0)
            if q.status_code != 200:
                raise AssertionError("restore: %d %s" % (q.status_code, q.text[:200]))
            api("DELETE", "/v1/snapshots/" + r.json()["id"])
    finally:
        api("DELETE", "/v1/sandboxes/bench-snap")
    mib = data / 1048576.0
    base = mib / statistics.median(base_s)
    for name, what, samples in (("snapshot", "POST …/snapshots", snap_s),
                                ("restore", "POST …/restore", rest_s)):
        thr = mib / statistics.median(samples)
        ctx.values.append(Value(
            "snap-%s-mibs" % name, "%s of a %.0f MiB mixed workspace, MiB/s of file data, "
            "median of %d" % (what, mib, RUNS), thr, "MiB/s", target=base * TARGET_RATIO,
            sense="ge", compare="tar | zstd -3 in the sandbox: %.0f MiB/s" % base))

    def cycle(sid):
        t0 = time.monotonic()
        r = api("POST", "/v1/sandboxes/%s/sleep" % sid)
        t1 = time.monotonic()
        sh(sid, "true")
        t2 = time.monotonic()
        if r.status_code != 200:
            raise AssertionError("sleep: %d %s" % (r.status_code, r.text[:200]))
        return t1 - t0, t2 - t1

    results = {}
    for sid, body in (("bench-persist", {"persist": {"paths": ["/workspace"]}}),
                      ("bench-plain", {})):
        make(sid, resources={"memoryMiB": 1024, "diskMiB": WAKE_MIB * 2 + 100}, **body)
        try:
            sh(sid, fill(WAKE_MIB))
            results[sid] = [cycle(sid) for _ in range(RUNS)]
        finally:
            api("DELETE", "/v1/sandboxes/" + sid)
    # one save of an unchanged and of a changed persisted workspace (the
    # helper a background save runs), as the extra time of a sleep over a
    # sleep without persist: with intervalS, a background save of the tree
    # is waited for, then the sleep finds it unchanged (a walk, nothing
    # written); after a change the sleep writes it all
    make("bench-interval", resources={"memoryMiB": 1024, "diskMiB": WAKE_MIB * 2 + 100},
         persist={"paths": ["/workspace"], "intervalS": 10})
    unchanged_s, changed_s = [], []
    try:
        sh("bench-interval", fill(WAKE_MIB))
        for i in range(RUNS):
            before = api("GET", "/v1/sandboxes/bench-interval").json().get("persistedSnapshot")
            deadline = time.monotonic() + 60
            while api("GET", "/v1/sandboxes/bench-interval").json().get(
                    "persistedSnapshot") == before:
                if time.monotonic() > deadline:
                    raise AssertionError("no background save in 60 s")
                time.sleep(0.2)
            time.sleep(0.5)   # the agent has the save's answer from Redis too
            unchanged_s.append(cycle("bench-interval")[0])
            sh("bench-interval", "echo %d > /workspace/t/changed" % i)
            changed_s.append(cycle("bench-interval")[0])
    finally:
        api("DELETE", "/v1/sandboxes/bench-interval")
    plain_sleep = statistics.median(s for s, _ in results["bench-plain"]) * 1000
    for name, what, samples in (("unchanged", "nothing changed since the last save: a walk of "
                                 "the tree's metadata, nothing written", unchanged_s),
                                ("changed", "one file changed: the whole archive written and "
                                 "committed", changed_s)):
        ms = statistics.median(samples) * 1000
        ctx.values.append(Value(
            "snap-save-%s-ms" % name, "one save of a %d MiB persisted workspace, %s (the extra "
            "time of a sleep), p50 of %d" % (WAKE_MIB, what, RUNS), ms - plain_sleep, "ms",
            compare="sleep %.0f ms with, %.0f ms without persist" % (ms, plain_sleep)))
    wake = statistics.median(w for _, w in results["bench-persist"]) * 1000
    plain_wake = statistics.median(w for _, w in results["bench-plain"]) * 1000
    both = statistics.median(s + w for s, w in results["bench-persist"]) * 1000
    plain_both = statistics.median(s + w for s, w in results["bench-plain"]) * 1000
    ctx.values.append(Value(
        "snap-wake-ms", "first exec after a sleep, %d MiB persisted workspace restored, p50 "
        "of %d" % (WAKE_MIB, RUNS), wake, "ms", compare="without persist %.0f ms" % plain_wake))
    ctx.values.append(Value(
        "snap-persist-cost-ms", "extra sleep → wake time of persisting %d MiB (save + "
        "restore), p50 of %d" % (WAKE_MIB, RUNS), both - plain_both, "ms",
        compare="sleep + wake %.0f ms with, %.0f ms without" % (both, plain_both)))
