#!/usr/bin/python3
"""The code-context figures of `make bench`: context creation, a warm `1+1`
round trip through nginx, a run that plots one figure, the memory of an idle
context; beside them `python3 -c 1` cold start and a plain exec round trip
through the same path.

fig_interp(st, ctx) appends Lat/Value records to ctx (sandbox_figs.Ctx), as
the other figure modules do. Alone: `BENCH_ONLY=interp make bench` (run.py;
it does not touch docs/PERFORMANCE.md then).

Environment: BENCH_N_INTERP (runs per latency figure, default 200),
BENCH_N_CTX (contexts created for the creation and memory figures, 10).
"""

import os
import time

import requests

from benchlib import Lat, Value, timed

N_RUN = int(os.environ.get("BENCH_N_INTERP", "200"))
N_CTX = int(os.environ.get("BENCH_N_CTX", "10"))
SID = "bench-interp"
DRIVER_MARK = {"python": b"sbx_mpl_backend", "javascript": b"stripTypes"}


def post(s, url, body):
    r = s.post(url, json=body, timeout=60)
    if r.status_code not in (200, 201):
        raise AssertionError("POST %s: %d %s" % (url, r.status_code, r.text[:200]))
    return r.json()


def run_ok(s, url, code):
    out = post(s, url, {"code": code})
    if out.get("error"):
        raise AssertionError("run %r: %s" % (code, out["error"]))
    return out


def driver_pids(lang):
    """Host pids of the running drivers of lang (their argv holds the driver)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if DRIVER_MARK[lang] in f.read():
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def pss(pid):
    """Proportional set size of pid in bytes (shared pages split between users)."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def fig_interp(st, ctx):
    s = requests.Session()
    s.headers["Authorization"] = "Bearer " + st.key
    base = st.url + "/v1/sandboxes/" + SID
    r = s.put(base, json={}, timeout=30)
    if r.status_code not in (200, 201):
        raise AssertionError("PUT %s: %d %s" % (SID, r.status_code, r.text[:200]))
    try:
        exec_url = base + "/exec"
        if ctx.get("exec-nginx") is None:
            ctx.lat.append(Lat("interp-exec-true", "plain exec of `true` through nginx, the "
                               "same client and sandbox (N=%d)" % N_RUN,
                               samples=timed(lambda: post(s, exec_url, {"argv": ["true"]}),
                                             N_RUN, warmup=10)))
        exec_base = "exec-nginx" if ctx.get("exec-nginx") else "interp-exec-true"
        ctx.lat.append(Lat("python-cold", "exec of `python3 -c 1` through nginx: a cold "
                           "interpreter per call (N=%d)" % (N_RUN // 4), baseline=exec_base,
                           samples=timed(lambda: post(s, exec_url,
                                                      {"argv": ["python3", "-c", "1"]}),
                                         N_RUN // 4, warmup=2)))
        # Creation: the 201 (the interpreter is spawned, not yet imported),
        # and until a first `1+1` has answered (IPython loaded).
        created, ready, ids = [], [], []
        for i in range(N_CTX):
            t0 = time.perf_counter()
            cid = post(s, base + "/contexts", {"language": "python"})["id"]
            t1 = time.perf_counter()
            run_ok(s, base + "/contexts/%s/run" % cid, "1+1")
            t2 = time.perf_counter()
            created.append((t1 - t0) * 1000.0)
            ready.append((t2 - t0) * 1000.0)
            ids.append(cid)
        ctx.lat.append(Lat("interp-create", "`POST …/contexts {language: python}` until its "
                           "201 (the driver spawned) (N=%d)" % N_CTX, baseline=exec_base,
                           samples=created))
        ctx.lat.append(Lat("interp-create-ready", "create a Python context and run `1+1` in "
                           "it: until the answer (IPython imported) (N=%d)" % N_CTX,
                           baseline="python-cold", samples=ready))
        time.sleep(1.0)
        pids = driver_pids("python")
        if pids:
            per = sum(pss(p) for p in pids) / len(pids) / 1048576.0
            ctx.values.append(Value("interp-idle-pss", "PSS of one idle Python context's "
                                    "driver (IPython loaded, after one `1+1`), mean of %d" %
                                    len(pids), per, "MiB"))
        else:
            ctx.skipped.append(("interp-idle-pss", "no driver process found in /proc"))
        for cid in ids[1:]:
            s.delete(base + "/contexts/" + cid, timeout=30)
        run_url = base + "/contexts/%s/run" % ids[0]
        ctx.lat.append(Lat("interp-rtt", "`1+1` in a warm Python context through nginx "
                           "(`POST …/contexts/{ctx}/run`, JSON answer) (N=%d)" % N_RUN,
                           baseline=exec_base, target_ms=5.0,
                           samples=timed(lambda: run_ok(s, run_url, "1+1"), N_RUN, warmup=20)))
        run_ok(s, run_url, "import matplotlib.pyplot as plt")
        plot = "plt.figure(figsize=(4, 3), dpi=80); plt.plot([1, 3, 2, 4]); None"
        ctx.lat.append(Lat("interp-plot", "a run drawing one matplotlib line plot (4×3 in at "
                           "80 dpi), its PNG in the answer (N=%d)" % (N_RUN // 4),
                           baseline="interp-rtt",
                           samples=timed(lambda: run_ok(s, run_url, plot), N_RUN // 4,
                                         warmup=3)))
        js = post(s, base + "/contexts", {"language": "javascript"})["id"]
        js_url = base + "/contexts/%s/run" % js
        run_ok(s, js_url, "1+1")
        ctx.lat.append(Lat("interp-rtt-js", "`1+1` in a warm JavaScript context through "
                           "nginx (N=%d)" % N_RUN, baseline=exec_base,
                           samples=timed(lambda: run_ok(s, js_url, "1+1"), N_RUN, warmup=20)))
        pids = driver_pids("javascript")
        if pids:
            ctx.values.append(Value("interp-idle-pss-js", "PSS of one idle JavaScript "
                                    "context's driver, mean of %d" % len(pids),
                                    sum(pss(p) for p in pids) / len(pids) / 1048576.0, "MiB"))
    finally:
        s.delete(base, timeout=30)
