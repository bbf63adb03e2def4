#!/usr/bin/python3
"""File watch figures of `make bench` (run.py calls fig_watch): the latency
from a write inside a sandbox to its `create` event at a client of
GET …/watch through nginx, beside the kernel's own floor (inotify on the
host, read by the writer's neighbour).

- writer: a background process in the sandbox (python3) creates one file
  every 100 ms in /workspace/lat, named by time.time_ns() just before the
  open(2); sandbox and bench share the kernel's CLOCK_REALTIME.
- reader: the test suite's Watch client (tests/integration/test_watch.py,
  HTTP/1.0 on a socket); latency = time.time_ns() when the event is taken
  from its queue − the name. The writes are further apart than the
  coalescing window (WATCH_COALESCE_MS, 50 ms in agent_watch.h), so each
  event waits one whole window: the figure is window + transport.
- baseline: the same write on the host into a temp dir watched with
  inotify(7) by this process (ctypes), write → read of the event.
- target: p50 ≤ window + 10 ms.

Environment: BENCH_WATCH_N (events, default 100).

Alone: `BENCH_ONLY=watch make bench` (run.py).
"""

import ctypes
import os
import select
import statistics
import tempfile
import time

from benchlib import Value

N = int(os.environ.get("BENCH_WATCH_N", "100"))
WINDOW_MS = 50          # WATCH_COALESCE_MS
SID = "bench-watch"
IN_CREATE = 0x100

WRITER = """
import os, time
os.makedirs('/workspace/lat', exist_ok=True)
time.sleep(0.5)
for i in range(%d):
    open('/workspace/lat/%%d' %% time.time_ns(), 'w').close()
    time.sleep(0.1)
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def host_floor(n):
    """write → inotify read on the host, ms each."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    d = tempfile.mkdtemp(prefix="sbx-bench-watch-")
    out = []
    try:
        if fd < 0 or libc.inotify_add_watch(fd, d.encode(), IN_CREATE) < 0:
            raise OSError(ctypes.get_errno(), "inotify")
        for i in range(n):
            t0 = time.perf_counter_ns()
            open(os.path.join(d, str(i)), "w").close()
            select.select([fd], [], [], 5)
            os.read(fd, 4096)
            out.append((time.perf_counter_ns() - t0) / 1e6)
    finally:
        os.close(fd)
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)
    return out


def fig_watch(st, ctx):
    """Appends the watch Values to ctx.values."""
    from test_watch import Watch
    auth = {"Authorization": "Bearer " + st.key}
    base = st.url + "/v1/sandboxes/" + SID
    r = st.http.put(base, json={}, headers=auth, timeout=60)
    if r.status_code not in (200, 201):
        raise AssertionError("create %s: %d %s" % (SID, r.status_code, r.text[:200]))
    try:
        st.http.post(base + "/exec", json={"command": "mkdir -p /workspace/lat"}, headers=auth,
                     timeout=30)
        w = Watch(st, SID, "path=/workspace/lat")
        if w.status != 200 or w.next()[0] != "ready":
            raise AssertionError("watch did not start: %d" % w.status)
        r = st.http.post(base + "/processes", json={"id": "writer", "argv": [
            "python3", "-c", WRITER % N]}, headers=auth, timeout=30)
        if r.status_code != 201:
            raise AssertionError("writer: %d %s" % (r.status_code, r.text[:200]))
        lat = []
        while len(lat) < N:
            name, d = w.next(lambda n, d: n == "create", timeout=30)
            lat.append((time.time_ns() - int(d["path"].rsplit("/", 1)[1])) / 1e6)
        w.close()
    finally:
        st.http.delete(base, headers=auth, timeout=60)
    floor = host_floor(N)
    cmp = "host inotify write→read p50 %.3f ms; coalescing window %d ms; p99 %.1f ms" % (
        statistics.median(floor), WINDOW_MS, pct(lat, 99))
    ctx.values.append(Value("watch-latency-p50", "write in the sandbox → its `create` event at "
                            "a watch client through nginx, p50 of %d" % N,
                            statistics.median(lat), "ms", target=WINDOW_MS + 10, compare=cmp))
    ctx.values.append(Value("watch-latency-p99", "the same, p99", pct(lat, 99), "ms",
                            target=WINDOW_MS + 40,
                            compare="max %.1f ms, min %.1f ms" % (max(lat), min(lat))))
