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

The sandbox figures (sequential latencies with median/p99/spread, the
process baselines, 500 live sandboxes, concurrent streams) are in
sandbox_figs.py; the preview and tunnel figures in tunnel_figs.py; the 1 GiB
file upload/download figures in files_figs.py; the terminal figures
(keystroke echo over the WebSocket, terminal creation) in terminal_figs.py; the
code-context figures in interp_figs.py; the watch latency in watch_figs.py;
the image figures in image_figs.py; the snapshot figures in
snapshot_figs.py; the API tier (fcgi-hello, its ceiling, and healthz, nodes,
get-record as ratios to it) in api_figs.py; shared helpers and the C spawn
harness in benchlib.py. `BENCH_ONLY=watch,snapshots make bench` runs only
the groups named (the names run_fig prints).
docs/PERFORMANCE.md is regenerated except what follows NOTES_MARKER, which
is hand-written and kept.

Environment: BENCH_DURATION (s per wrk run, default 5), BENCH_RUNS (3),
BENCH_CONNECTIONS (32), BENCH_EXEC_DURATION (s per exec wrk run, 3),
BENCH_N (create/first-command repetitions, 50), BENCH_N_RTT (exec round
trips, 300), BENCH_N_SPAWN (fork/exec baseline runs, 200), BENCH_LIVE (500),
BENCH_STREAMS_MAX (1000), BENCH_POOL (warm pool size of the pool figures,
16), BENCH_OUT (output file), SBX_BUILD.
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
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import stack_down, stack_up  # noqa: E402
import sandbox_figs  # noqa: E402
import tunnel_figs  # noqa: E402
import files_figs  # noqa: E402
import interp_figs  # noqa: E402
import snapshot_figs  # noqa: E402
import terminal_figs  # noqa: E402
import image_figs  # noqa: E402
import watch_figs  # noqa: E402
import api_figs  # noqa: E402
from benchlib import Harness  # noqa: E402

DURATION = int(os.environ.get("BENCH_DURATION", "5"))
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
CONNS = int(os.environ.get("BENCH_CONNECTIONS", "32"))
# BENCH_ONLY=name,name: run only those figure groups (the run_fig names;
# "baselines" always runs) and write to BENCH_OUT or a temp file, never over
# docs/PERFORMANCE.md. A figure that compares to another needs that one too.
ONLY = set(filter(None, os.environ.get("BENCH_ONLY", "").split(",")))
OUT = os.environ.get("BENCH_OUT") or (
    "/tmp/sbx-bench-only.md" if ONLY else os.path.join(ROOT, "docs", "PERFORMANCE.md"))


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
        self.target = None          # least ratio to the baseline's req/s, if any

    @property
    def rps_median(self):
        return statistics.median(self.rps) if self.rps else 0.0


# ---- wrk ---------------------------------------------------------------------

def to_ms(v, unit):
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk(url, headers=(), method="GET", body=None, conns=None, lua=None, duration=None):
    """One wrk run: (req/s, p50 ms, p99 ms, errors). lua: a whole script
    (then method/body are ignored); conns: connections (default CONNS)."""
    conns = conns or CONNS
    duration = duration or DURATION
    args = ["wrk", "-t%d" % min(2, conns), "-c%d" % conns, "-d%ds" % duration, "--latency",
            "--timeout", "5s"]
    for h in headers:
        args += ["-H", h]
    script = None
    if lua is not None or method != "GET" or body is not None:
        script = "/tmp/sbx-bench-%d.lua" % os.getpid()
        with open(script, "w") as f:
            if lua is not None:
                f.write(lua)
            else:
                f.write('wrk.method = "%s"\n' % method)
            if lua is None and body is not None:
                f.write("wrk.body = %s\n" % lua_string(body))
                f.write('wrk.headers["Content-Type"] = "application/json"\n')
        args += ["-s", script]
    try:
        out = subprocess.run(args + [url], capture_output=True, text=True, check=True,
                             timeout=duration + 30).stdout
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


def peak(res, url, runs=None, **kw):
    for _ in range(runs or RUNS):
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


def fig_route_refusal(st):
    auth = ("Authorization: Bearer " + st.key,)
    url = st.url + "/v1/sandboxes/%s/exec" % ("b" * 40)
    res = Result("data-route-404", "data path `POST /v1/sandboxes/{unknown}/exec`: "
                 "auth_request (auth + owner lookup) -> 403 -> error render (404)",
                 baseline="nginx-static")
    # A 404 is this figure's expected answer: errors are counted, not failures.
    return peak(res, url, headers=auth, method="POST", body='{"command":"true"}')


FIGURES = [fig_nginx_static, fig_route_refusal]


EXEC_DURATION = int(os.environ.get("BENCH_EXEC_DURATION", "3"))


def exec_lua(paths):
    """wrk script: POST {"argv":["true"]} round-robin over paths."""
    return ("local paths = {%s}\nlocal i = 0\n"
            'wrk.method = "POST"\n'
            "wrk.body = %s\n"
            'wrk.headers["Content-Type"] = "application/json"\n'
            "request = function()\n  i = i + 1\n"
            "  return wrk.format(nil, paths[(i %% #paths) + 1])\nend\n" %
            (", ".join(lua_string(p) for p in paths), lua_string('{"argv":["true"]}')))


def fig_exec_throughput(st):
    auth = ("Authorization: Bearer " + st.key,)
    one = ["/v1/sandboxes/%s/exec" % sandbox_figs.EXEC_SANDBOXES[0]]
    spread = ["/v1/sandboxes/%s/exec" % s for s in sandbox_figs.EXEC_SANDBOXES]
    out = []
    for conns, paths, where in ((1, one, "1 sandbox"), (8, one, "1 sandbox"),
                                (64, one, "1 sandbox"), (8, spread, "8 sandboxes"),
                                (64, spread, "8 sandboxes")):
        res = Result("exec-c%d-%s" % (conns, "1sb" if len(paths) == 1 else "8sb"),
                     "exec of `true` through nginx, wrk %d connection(s) (closed loop), %s" %
                     (conns, where), baseline="fork-exec-rate")
        peak(res, st.url + paths[0], runs=RUNS, conns=conns, lua=exec_lua(paths),
             duration=EXEC_DURATION, headers=auth)
        out.append(res)
    # One connection straight at the agent (no nginx, no pool): wrk is a C
    # client, so its p50 is the server side without Python's own cost.
    rec = st.http.get(st.url + "/v1/sandboxes/" + sandbox_figs.EXEC_SANDBOXES[0],
                      headers={"Authorization": "Bearer " + st.key}, timeout=10).json()
    res = Result("exec-agent-c1", "exec of `true` straight at the agent (X-Sbx-Node-Secret, "
                 "X-Sbx-Tenant, X-Sbx-Epoch), wrk 1 connection", baseline="fork-exec-rate")
    peak(res, "http://%s%s" % (st.env["SBX_AGENT_1"], one[0]), runs=RUNS, conns=1,
         lua=exec_lua(one), duration=EXEC_DURATION,
         headers=("X-Sbx-Node-Secret: " + st.secret, "X-Sbx-Tenant: dev",
                  "X-Sbx-Epoch: %d" % rec["epoch"]))
    out.append(res)
    return out


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


NOTES_MARKER = "<!-- Everything below this line is hand-written; `make bench` keeps it. -->"

PUBLISHED = [("Daytona", 186), ("E2B", 491), ("Vercel Sandbox", 671), ("Modal", 1700),
             ("Cloudflare Sandbox", 2100)]


def fmt_target_lat(r):
    if r.target_ms is None:
        return "-", "-"
    ratio = r.p50 / r.target_ms
    return "≤ %g" % r.target_ms, "%.2f%s" % (ratio, " ✗" if ratio > 1 else " ✓")


def report_latency(ctx):
    by = {r.name: r for r in ctx.lat}
    lines = ["## Latency figures (sequential repetitions, ms)", "",
             "Median (p50), p99 (nearest rank) and spread (min..max) of N samples. "
             "ratio to baseline = p50 / baseline p50; ratio to target = p50 / target "
             "(> 1: slower than the target). load1 = 1-minute load average when the figure "
             "started (2 cores; other engineers' builds and tests share the machine).", "",
             "| figure | N | p50 | p99 | spread | ratio to baseline | target p50 | "
             "ratio to target | load1 | notes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in ctx.lat:
        base = by.get(r.baseline)
        ratio = ("%.2f× %s (%s ms)" % (r.p50 / base.p50, base.name, fmt_ms(base.p50))
                 if base and base.p50 else "baseline" if r.baseline is None else "-")
        tgt, tr = fmt_target_lat(r)
        spread = ("%s..%s" % (fmt_ms(min(r.samples)), fmt_ms(max(r.samples)))
                  if r.samples else "-")
        note = r.note + ("; %d failed" % r.errors if r.errors else "")
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %.2f | %s |" % (
            r.name, len(r.samples), fmt_ms(r.p50), fmt_ms(r.p99), spread, ratio, tgt, tr,
            r.load, note))
    return lines


def report_values(ctx):
    lines = ["## Capacity and memory figures", "",
             "| figure | value | target | ratio to target | comparison | load1 |",
             "|---|---|---|---|---|---|"]
    for v in ctx.values:
        tr = v.target_ratio()
        if v.target is None:
            tgt, trs = "-", "-"
        else:
            tgt = ("≤ %g" if v.sense == "le" else "≥ %g") % v.target
            trs = "%.2f%s" % (tr, " ✗" if tr > 1.0001 else " ✓") if tr is not None else "✗ (0)"
        val = ("%.3f" % v.value if isinstance(v.value, float) and abs(v.value) < 10
               else "%.0f" % v.value if isinstance(v.value, float) else str(v.value))
        lines.append("| %s | %s %s | %s | %s | %s | %.2f |" % (
            v.name, val, v.unit, tgt, trs, v.compare or "-", v.load))
    return lines


def report_wrk(results):
    by = {r.name: r for r in results}
    lines = [
        "## Throughput figures (wrk)", "",
        "- load: wrk 2 threads (1 for one connection), %d connections unless the figure says "
        "otherwise, %d s per run (%d s for exec), %d runs per figure; client and server share "
        "the machine" % (CONNS, DURATION, EXEC_DURATION, RUNS),
        "- req/s: median of the runs (spread = min..max); p50/p99: median of the runs' wrk "
        "percentiles (closed loop)",
        "- p99 @ half peak: wrk paced by a Lua `delay()` of %d ms per connection, with "
        "connections for half the median peak (achieved rate shown). Closed loop per "
        "connection, so a stall is under-counted (coordinated omission): Debian's wrk has "
        "no `-R` and wrk2 is not packaged" % PACE_MS,
        "- exec rows: ratio to `fork-exec-rate` = 1000 / fork-exec p50, the serial rate of "
        "the C harness on this machine",
        "",
        "| figure | req/s (median) | spread | p50 ms | p99 ms | ratio to baseline | target | "
        "p99 ms @ half peak | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.name == "fork-exec-rate":
            continue
        base = by.get(r.baseline)
        ratio = ("%.3f of %s" % (r.rps_median / base.rps_median, base.name)
                 if base and base.rps_median else "baseline")
        target = "-"
        if getattr(r, "target", None) and base and base.rps_median:
            got = r.rps_median / base.rps_median
            target = "≥ %.2f of %s: %s" % (r.target, base.name, "✓" if got >= r.target else
                                            "✗ (%.1f× short)" % (r.target / got if got else 0))
        half = ("%s (at %d req/s)" % (fmt_ms(r.half[2]), r.half[0]) if r.half else "-")
        lines.append("| %s | %.0f | %.0f..%.0f | %s | %s | %s | %s | %s | %d |" % (
            r.name, r.rps_median, min(r.rps), max(r.rps), fmt_ms(statistics.median(r.p50)),
            fmt_ms(statistics.median(r.p99)), ratio, target, half,
            r.errors + (r.half[3] if r.half else 0)))
    return lines


def report(results, ctx, loads, started, took):
    lines = [
        "# sbx performance",
        "",
        "Written by `make bench` (tests/bench/run.py, sandbox_figs.py, benchlib.py); numbers "
        "from one machine, one run, one stack with 1 agent (`deploy/stack up --agents 1`, "
        "pool of 4 FastCGI workers).",
        "",
        "- date: %s, the whole run took %.0f s" % (started, took),
        "- machine: %s" % machine(),
        "- load average (1/5/15 min) at start: %s; at end: %s" % (
            "/".join("%.2f" % x for x in loads[0]), "/".join("%.2f" % x for x in loads[1])),
        "- client: Python (`/usr/bin/python3`): `requests.Session` (one persistent keep-alive "
        "connection) for the sequential latencies; its own cost is the `http-floor` row",
        "- baselines are measured in the same run; the process baselines are fork+execv from "
        "a C harness compiled at bench time into a temp dir (not `os.posix_spawn`)",
        "",
    ]
    lines += report_latency(ctx) + [""] + report_values(ctx) + [""] + report_wrk(results)
    lines += ["", "## Published time-to-first-command figures (not measured here)", "",
              "Numbers the vendors or third parties published, for context only; measured on "
              "other hardware, networks and definitions. Our `first-command` p50 on this "
              "machine was %s ms." % fmt_ms(ctx.get("first-command").p50 if
                                            ctx.get("first-command") else 0), "",
              "| service | published ms |", "|---|---|"]
    lines += ["| %s | %d |" % x for x in PUBLISHED]
    if ctx.skipped:
        lines += ["", "## Not measured", ""]
        lines += ["- %s: %s" % x for x in ctx.skipped]
    lines += ["", "## What each figure measures", ""]
    for r in ctx.lat:
        lines.append("- **%s**: %s" % (r.name, r.what))
    for v in ctx.values:
        lines.append("- **%s**: %s" % (v.name, v.what))
    for r in results:
        if r.name != "fork-exec-rate":
            lines.append("- **%s**: %s" % (r.name, r.what))
    lines += ["", "Errors (wrk): non-2xx answers and socket errors. The data-route figure "
              "answers 404 SANDBOX_NOT_FOUND by design, so all its answers count there.", ""]
    return "\n".join(lines)


def kept_notes():
    """The hand-written part of docs/PERFORMANCE.md (from the marker on)."""
    try:
        with open(OUT) as f:
            text = f.read()
    except OSError:
        text = ""
    i = text.find(NOTES_MARKER)
    if i < 0:
        return NOTES_MARKER + "\n\n## Notes\n\n(none yet)\n"
    return text[i:]


def run_fig(name, fn, *args):
    """Runs one figure group; returns its Results as a list (none when the
    group writes into ctx, or BENCH_ONLY leaves it out)."""
    if ONLY and name not in ONLY and name != "baselines":
        return []
    t0 = time.monotonic()
    print("bench: %s (load %.2f) ..." % (name, os.getloadavg()[0]), end="", flush=True)
    out = fn(*args)
    print(" %.1f s" % (time.monotonic() - t0), flush=True)
    return [o for o in (out if isinstance(out, list) else [out]) if o is not None]


def main():
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    t_start = time.monotonic()
    load0 = os.getloadavg()
    harness = Harness()
    ctx = sandbox_figs.Ctx(harness)
    st = stack_up(agents=1, overrides=sandbox_figs.live_overrides())
    results = []
    try:
        try:
            # Sequential latencies first, while wrk has not loaded the machine yet.
            run_fig("baselines", sandbox_figs.fig_baselines, st, ctx)
            fe = Result("fork-exec-rate", "1000 / fork-exec p50 (serial)")
            fe.rps = [1000.0 / ctx.get("fork-exec").p50]
            results.append(fe)
            run_fig("first-command", sandbox_figs.fig_first_command, st, ctx)
            run_fig("create", sandbox_figs.fig_create, st, ctx)
            sandbox_figs.setup_exec_sandboxes(st, ctx)
            run_fig("exec-rtt", sandbox_figs.fig_exec_rtt, st, ctx)
            run_fig("exec-during-builds", sandbox_figs.fig_exec_during_builds, st, ctx)
            run_fig("first-byte", sandbox_figs.fig_first_byte, st, ctx)
            run_fig("interp", interp_figs.fig_interp, st, ctx)
            run_fig("terminals", terminal_figs.fig_terminals, st, ctx)
            for fig in FIGURES:
                results += run_fig(fig.__name__, fig, st)
            results += run_fig("exec-throughput", fig_exec_throughput, st)
            # fcgi-hello (the API tier's ceiling), healthz, nodes, get-record.
            results += run_fig("api", api_figs.fig_api, st, sys.modules[__name__])
            results += run_fig("preview", tunnel_figs.fig_preview, st, sys.modules[__name__])
            results += run_fig("tunnel-lookup", tunnel_figs.fig_tunnel_lookup, st, ctx,
                               sys.modules[__name__])
            tunnel_figs.teardown(st)
            sandbox_figs.teardown_exec_sandboxes(st, ctx)
            # 1 GiB up and down through nginx beside cat; nginx/agent peak RSS.
            run_fig("files", files_figs.fig_files, st, ctx)
            # a 100 MiB registry image: cold pull + first command beside skopeo, warm creates
            run_fig("images", image_figs.fig_images, st, ctx)
            # write in a sandbox → its watch event at a client.
            run_fig("watch", watch_figs.fig_watch, st, ctx)
            # 200 MiB snapshot / restore beside tar | zstd; persisted wakes.
            run_fig("snapshots", snapshot_figs.fig_snapshots, st, ctx)
            run_fig("streams", sandbox_figs.fig_streams, st, ctx)
            # The node's capacity is 500: every other sandbox is gone by now.
            run_fig("live-memory", sandbox_figs.fig_live_memory, st, ctx)
        finally:
            stack_down(st)
        # The warm pool figures, on a second stack with agent.warm_pool set.
        if not ONLY or "warm-pool" in ONLY:
            run_fig("warm-pool", sandbox_figs.fig_warm_pool, ctx)
    finally:
        harness.close()
    text = report(results, ctx, (load0, os.getloadavg()), started, time.monotonic() - t_start)
    text += "\n" + kept_notes()
    with open(OUT, "w") as f:
        f.write(text)
    print(text)
    print("bench: written to %s" % os.path.relpath(OUT, ROOT))


if __name__ == "__main__":
    main()
