#!/usr/bin/python3
"""sbx benchmarks (`make bench`): brings up its own stack, measures every
figure of FIGURES, and writes the table into docs/PERFORMANCE.md.

A figure is one function returning a Result; each names its baseline, so
the report shows the ratio (our path / its baseline). Add a figure by
writing a function and listing it in FIGURES.

Peak figures use wrk (closed loop, --latency) and are repeated RUNS times:
the table shows the median req/s, the spread (min..max) and the median
p50/p99. "p99 at half the peak": Debian's wrk has no -R and wrk2 is not
packaged, so wrk is paced with a Lua delay() per connection and enough
connections for half the measured peak; the achieved rate is reported.

Environment: BENCH_DURATION (s per wrk run, default 5), BENCH_RUNS (3),
BENCH_CONNECTIONS (32), SBX_BUILD.
"""

import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from conftest import stack_down, stack_up  # noqa: E402

DURATION = int(os.environ.get("BENCH_DURATION", "5"))
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
CONNS = int(os.environ.get("BENCH_CONNECTIONS", "32"))
OUT = os.path.join(ROOT, "docs", "PERFORMANCE.md")


class Result:
    def __init__(self, name, what, baseline=None):
        self.name = name            # short id, used as a baseline reference
        self.what = what            # one line: what is measured
        self.baseline = baseline    # name of the figure this one is compared to
        self.rps = []               # req/s of each run
        self.p50 = []               # ms, each run
        self.p99 = []
        self.errors = 0             # non-2xx or socket errors, all runs
        self.half = None            # (rate, p50 ms, p99 ms, errors) at half the peak

    @property
    def rps_median(self):
        return statistics.median(self.rps) if self.rps else 0.0


# ---- wrk ---------------------------------------------------------------------

def to_ms(v, unit):
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk(url, headers=(), method="GET", body=None):
    """One wrk run: (req/s, p50 ms, p99 ms, errors)."""
    args = ["wrk", "-t2", "-c%d" % CONNS, "-d%ds" % DURATION, "--latency", "--timeout", "5s"]
    for h in headers:
        args += ["-H", h]
    script = None
    if method != "GET" or body is not None:
        script = "/tmp/sbx-bench-%d.lua" % os.getpid()
        with open(script, "w") as f:
            f.write('wrk.method = "%s"\n' % method)
            if body is not None:
                f.write("wrk.body = %s\n" % lua_string(body))
                f.write('wrk.headers["Content-Type"] = "application/json"\n')
        args += ["-s", script]
    try:
        out = subprocess.run(args + [url], capture_output=True, text=True, check=True,
                             timeout=DURATION + 30).stdout
    finally:
        if script:
            os.unlink(script)
    return parse_wrk(out)


def parse_wrk(out):
    """(req/s, p50 ms, p99 ms, errors) from wrk --latency output."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))
    def ms(s):
        m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
        return to_ms(m.group(1), m.group(2))
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    return rps, ms(lat["50"]), ms(lat["99"]), errors


def lua_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def peak(res, url, **kw):
    for _ in range(RUNS):
        rps, p50, p99, errors = wrk(url, **kw)
        res.rps.append(rps)
        res.p50.append(p50)
        res.p99.append(p99)
        res.errors += errors
    return res


# ---- half the peak ----------------------------------------------------------------

PACE_MS = 10


def half_peak(res, url, headers=()):
    """wrk paced by a Lua delay(): each connection waits PACE_MS after every
    answer, with enough connections for half the median peak. The achieved
    rate is what wrk reports (a little under the target: the delay comes on
    top of each answer's latency)."""
    target = max(100.0, res.rps_median / 2)
    conns = max(2, int(round(target * PACE_MS / 1000.0)))
    script = "/tmp/sbx-bench-pace-%d.lua" % os.getpid()
    with open(script, "w") as f:
        f.write("function delay() return %d end\n" % PACE_MS)
    args = ["wrk", "-t2", "-c%d" % conns, "-d%ds" % DURATION, "--latency", "--timeout", "5s",
            "-s", script]
    for h in headers:
        args += ["-H", h]
    try:
        out = subprocess.run(args + [url], capture_output=True, text=True, check=True,
                             timeout=DURATION + 30).stdout
    finally:
        os.unlink(script)
    rps, p50, p99, errors = parse_wrk(out)
    res.half = (rps, p50, p99, errors)
    return res


# ---- the figures -----------------------------------------------------------------

def fig_nginx_static(st):
    res = Result("nginx-static", "nginx `return 200` on the baseline server (no backend)")
    peak(res, st.static_url)
    return half_peak(res, st.static_url)


def fig_healthz(st):
    # No authenticated route does exactly one Redis round trip yet: /healthz
    # (no auth, one PING) stands in for "nginx -> worker -> one Redis call".
    res = Result("healthz", "`GET /healthz`: nginx -> FastCGI worker -> one Redis PING "
                 "(stand-in for a one-round-trip route; no auth)", baseline="nginx-static")
    peak(res, st.url + "/healthz")
    return half_peak(res, st.url + "/healthz")


def fig_nodes(st):
    auth = ("Authorization: Bearer " + st.admin_key,)
    res = Result("nodes", "`GET /v1/nodes` (admin key): auth lookup + node registry "
                 "reads, %d nodes" % st.agents, baseline="nginx-static")
    peak(res, st.url + "/v1/nodes", headers=auth)
    return half_peak(res, st.url + "/v1/nodes", headers=auth)


def fig_route_refusal(st):
    auth = ("Authorization: Bearer " + st.key,)
    url = st.url + "/v1/sandboxes/%s/exec" % ("b" * 40)
    res = Result("data-route-404", "data path `POST /v1/sandboxes/{unknown}/exec`: "
                 "auth_request (auth + owner lookup) -> 403 -> error render (404)",
                 baseline="nginx-static")
    # A 404 is this figure's expected answer: errors are counted, not failures.
    return peak(res, url, headers=auth, method="POST", body='{"command":"true"}')


FIGURES = [fig_nginx_static, fig_healthz, fig_nodes, fig_route_refusal]


# ---- report -------------------------------------------------------------------------

def machine():
    mem = "?"
    with open("/proc/meminfo") as f:
        m = re.search(r"MemTotal:\s+(\d+) kB", f.read())
        if m:
            mem = "%.1f GiB" % (int(m.group(1)) / 1048576)
    return "%d CPUs (nproc), %s RAM, kernel %s" % (os.cpu_count() or 0, mem, platform.release())


def fmt_ms(v):
    return "%.2f" % v


def report(results):
    by = {r.name: r for r in results}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# sbx performance",
        "",
        "Written by `make bench` (tests/bench/run.py); numbers from one machine, one run.",
        "",
        "- date: %s" % now,
        "- machine: %s" % machine(),
        "- load: wrk 2 threads, %d connections, %d s per run, %d runs per figure; "
        "client and server share the machine" % (CONNS, DURATION, RUNS),
        "- req/s: median of the runs (spread = min..max); p50/p99: median of the runs' wrk "
        "percentiles (closed loop)",
        "- p99 @ half peak: wrk paced by a Lua `delay()` of %d ms per connection, with "
        "connections for half the median peak (achieved rate shown). Closed loop per "
        "connection, so a stall is under-counted (coordinated omission): Debian's wrk has "
        "no `-R` and wrk2 is not packaged" % PACE_MS,
        "",
        "| figure | req/s (median) | spread | p50 ms | p99 ms | ratio to baseline | "
        "p99 ms @ half peak | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        base = by.get(r.baseline)
        ratio = ("%.2f of %s" % (r.rps_median / base.rps_median, base.name)
                 if base and base.rps_median else "baseline")
        half = ("%s (at %d req/s)" % (fmt_ms(r.half[2]), r.half[0]) if r.half else "-")
        lines.append("| %s | %.0f | %.0f..%.0f | %s | %s | %s | %s | %d |" % (
            r.name, r.rps_median, min(r.rps), max(r.rps), fmt_ms(statistics.median(r.p50)),
            fmt_ms(statistics.median(r.p99)), ratio, half, r.errors + (r.half[3] if r.half else 0)))
    lines += ["", "## What each figure measures", ""]
    for r in results:
        lines.append("- **%s**: %s" % (r.name, r.what))
    lines += ["", "Errors: non-2xx answers and socket errors. The data-route figure answers "
              "404 SANDBOX_NOT_FOUND by design, so all its answers count there.", ""]
    return "\n".join(lines)


def main():
    st = stack_up(agents=1)
    try:
        results = []
        for fig in FIGURES:
            print("bench: %s ..." % fig.__name__, flush=True)
            results.append(fig(st))
    finally:
        stack_down(st)
    text = report(results)
    with open(OUT, "w") as f:
        f.write(text)
    print(text)
    print("bench: written to %s" % os.path.relpath(OUT, ROOT))


if __name__ == "__main__":
    main()
