#!/usr/bin/python3
"""Soak: a steady mixed load for a while, watching for leaks.

  make soak                       (SOAK_ARGS="--duration 120 --fraction 0.6")
  SBX_BUILD=build /usr/bin/python3 tests/soak/run.py [--duration S] [--fraction F]

Brings up its own stack (deploy/stack, 2 agents), measures the peak rate
of the mixed workload (create, exec, file write + read, get, delete) for a
few seconds, then runs --fraction of that rate for --duration seconds.
Every 10 s it samples the RSS and open fds of the sbx-api master and
workers and of every agent, prints the samples, and judges whether they
are flat (last samples vs the first ones after warm-up). Exit status 1 when
they grow, when calls fail (> 0.5 %), or when a process died.
"""

import argparse
import os
import statistics
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from conftest import stack_down, stack_up  # noqa: E402
from sbxproc import api_workers, fd_count, rss_kib  # noqa: E402

SAMPLE_EVERY = 10.0


class Load:
    """The mixed workload against one stack; counts calls and failures."""

    def __init__(self, st, pool):
        self.st = st
        self.pool = pool
        self.lock = threading.Lock()
        self.calls = 0
        self.failed = []

    def one(self, sess, method, path, ok, **kw):
        h = {"Authorization": "Bearer " + self.st.key}
        try:
            r = sess.request(method, self.st.url + path, headers=h, timeout=30, **kw)
            good = r.status_code in ok
            what = r.status_code
        except Exception as ex:  # counted, reported
            good, what = False, repr(ex)[:120]
        with self.lock:
            self.calls += 1
            if not good:
                self.failed.append((method, path, what))
        return good

    def cycle(self, sess, n):
        """One unit of the mix: 7 calls."""
        box = self.pool[n % len(self.pool)]
        b = "/v1/sandboxes/" + box
        self.one(sess, "POST", b + "/exec", (200,), json={"command": "echo soak-%d" % n})
        self.one(sess, "PUT", b + "/files/f%d.txt" % (n % 50), (200, 201), data=b"x" * 4096)
        self.one(sess, "GET", b + "/files/f%d.txt" % (n % 50), (200,))
        self.one(sess, "GET", b, (200,))
        tmp = "soak-t-%s" % uuid.uuid4().hex[:10]
        if self.one(sess, "PUT", "/v1/sandboxes/" + tmp, (201,), json={}):
            self.one(sess, "POST", "/v1/sandboxes/%s/exec" % tmp, (200,), json={"command": "true"})
        self.one(sess, "DELETE", "/v1/sandboxes/" + tmp, (204,))


def run_threads(load, threads, seconds, rate=None):
    """Run cycles from `threads` threads for `seconds`; paced to `rate`
    cycles/s in total when given. Returns cycles done."""
    import requests
    stop = time.monotonic() + seconds
    done = [0] * threads

    def worker(i):
        sess = requests.Session()
        n = i * 100000
        interval = threads / rate if rate else 0
        next_at = time.monotonic()
        while time.monotonic() < stop:
            load.cycle(sess, n)
            n += 1
            done[i] += 1
            if interval:
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(min(delay, max(0, stop - time.monotonic())))

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 120)
    return sum(done)


def sample(st):
    api = st.pid("api")
    workers = api_workers(api)
    s = {
        "api_master_rss": rss_kib(api),
        "api_master_fds": fd_count(api),
        "workers": len(workers),
        "worker_rss_sum": sum(rss_kib(w) for w in workers),
        "worker_rss_max": max([rss_kib(w) for w in workers] or [0]),
        "worker_fds_max": max([fd_count(w) for w in workers] or [0]),
    }
    for i in range(1, st.agents + 1):
        pid = st.pid("agent-%d" % i)
        s["agent%d_rss" % i] = rss_kib(pid)
        s["agent%d_fds" % i] = fd_count(pid)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--fraction", type=float, default=0.6)
    ap.add_argument("--threads", type=int, default=6)
    ap.add_argument("--peak-seconds", type=float, default=8.0)
    args = ap.parse_args()

    st = stack_up(agents=2)
    ok = True
    try:
        import requests
        pool = []
        for i in range(8):
            sid = "soak-%d-%s" % (i, uuid.uuid4().hex[:6])
            r = requests.put(st.url + "/v1/sandboxes/" + sid, json={"keepAlive": True},
                             headers={"Authorization": "Bearer " + st.key}, timeout=30)
            assert r.status_code == 201, r.text
            pool.append(sid)

        peak_load = Load(st, pool)
        t0 = time.monotonic()
        cycles = run_threads(peak_load, args.threads, args.peak_seconds)
        peak = cycles / (time.monotonic() - t0)
        rate = peak * args.fraction
        print("peak: %.1f cycles/s (%.0f calls/s) with %d threads; soak at %.1f cycles/s "
              "(%.0f%%) for %.0f s" % (peak, peak * 7, args.threads, rate,
                                        args.fraction * 100, args.duration), flush=True)

        load = Load(st, pool)
        samples = []
        stop = threading.Event()

        def sampler():
            t_start = time.monotonic()
            while not stop.is_set():
                s = sample(st)
                s["t"] = time.monotonic() - t_start
                s["calls"] = load.calls
                samples.append(s)
                print("  t=%5.0fs calls=%6d workers=%d worker_rss_sum=%6d KiB "
                      "worker_rss_max=%6d KiB worker_fds_max=%3d api_master_rss=%5d KiB | %s" % (
                          s["t"], s["calls"], s["workers"], s["worker_rss_sum"],
                          s["worker_rss_max"], s["worker_fds_max"], s["api_master_rss"],
                          " ".join("agent%d rss=%d KiB fds=%d" % (i, s["agent%d_rss" % i],
                                                                  s["agent%d_fds" % i])
                                   for i in range(1, st.agents + 1))), flush=True)
                stop.wait(SAMPLE_EVERY)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        t0 = time.monotonic()
        run_threads(load, args.threads, args.duration, rate=rate)
        elapsed = time.monotonic() - t0
        stop.set()
        th.join(15)
        samples.append(dict(sample(st), t=elapsed, calls=load.calls))

        print("soak: %d calls in %.0f s (%.0f calls/s), %d failed" % (
            load.calls, elapsed, load.calls / elapsed, len(load.failed)))
        for f in load.failed[:10]:
            print("  failed:", f)
        if load.calls == 0 or len(load.failed) > 0.005 * load.calls:
            ok = False

        # Flat: the mean of the last two samples vs the first two after
        # warm-up (the first sample is taken before the load starts).
        body = samples[1:] if len(samples) > 4 else samples
        head, tail = body[:2], body[-2:]
        verdicts = []
        for key in sorted(k for k in body[0] if k.endswith("_rss") or k.endswith("_rss_sum")
                          or k.endswith("_rss_max")):
            a = statistics.mean(s[key] for s in head)
            b = statistics.mean(s[key] for s in tail)
            grew = b - a
            flat = grew <= max(0.15 * a, 4096)
            verdicts.append((key, a, b, flat))
        for key in sorted(k for k in body[0] if k.endswith("_fds") or k.endswith("_fds_max")):
            a = statistics.mean(s[key] for s in head)
            b = statistics.mean(s[key] for s in tail)
            flat = b - a <= 8
            verdicts.append((key, a, b, flat))
        print("flatness (first samples -> last samples):")
        for key, a, b, flat in verdicts:
            print("  %-16s %9.0f -> %9.0f  %s" % (key, a, b, "flat" if flat else "GROWS"))
            ok = ok and flat
        if any(s["workers"] != samples[0]["workers"] for s in samples):
            print("  the worker count changed during the soak (a worker died?)")
        for name in ["redis", "api", "nginx"] + ["agent-%d" % i for i in range(1, st.agents + 1)]:
            if not os.path.exists("/proc/%d" % st.pid(name)):
                print("  %s died" % name)
                ok = False
        for sid in pool:
            requests.delete(st.url + "/v1/sandboxes/" + sid,
                            headers={"Authorization": "Bearer " + st.key}, timeout=30)
    finally:
        stack_down(st)
    print("soak:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
