"""The sandbox figures of `make bench`: process baselines, time to first
command, create until running (sequential and 100 at once), exec round trip
(through nginx and at the agent), first byte of a stream, idle memory with
500 live sandboxes, and concurrent open streams.

Every function takes the Stack (tests/integration/conftest.py) and a Ctx and
appends Lat/Value records to ctx.lat / ctx.values. The HTTP client is
Python's: requests.Session (one persistent keep-alive connection) for the
sequential latencies, raw non-blocking sockets for the stream fan-out.
"""

import concurrent.futures
import json
import os
import re
import selectors
import shutil
import socket
import statistics
import threading
import time
import urllib.parse

import requests

from benchlib import Lat, Value, paced, timed

N_SEQ = int(os.environ.get("BENCH_N", "50"))         # create / first-command repetitions
N_RTT = int(os.environ.get("BENCH_N_RTT", "300"))    # exec round trips
N_SPAWN = int(os.environ.get("BENCH_N_SPAWN", "200"))  # fork/exec baseline runs
N_LIVE = int(os.environ.get("BENCH_LIVE", "500"))    # sandboxes for the memory figure
N_STREAMS_MAX = int(os.environ.get("BENCH_STREAMS_MAX", "1000"))

BWRAP = ["/usr/bin/bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib64", "/lib64",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/bin", "/bin", "--proc", "/proc",
         "--dev", "/dev", "--unshare-all", "/bin/true"]
UNSHARE = ["/usr/bin/unshare", "-m", "-p", "-n", "-i", "-u", "--fork", "/bin/true"]


class Ctx:
    def __init__(self, harness):
        self.harness = harness
        self.lat = []
        self.values = []
        self.skipped = []       # (what, why)
        self.keys = {}          # tenant -> key

    def get(self, name):
        for r in self.lat:
            if r.name == name:
                return r
        return None


def key_for(st, ctx, tenant):
    if tenant == "dev":
        return st.key
    if tenant not in ctx.keys:
        ctx.keys[tenant] = st.new_key(tenant)
    return ctx.keys[tenant]


def session(key):
    s = requests.Session()
    s.headers["Authorization"] = "Bearer " + key
    return s


def put(s, st, sid, expect=(201,)):
    r = s.put(st.url + "/v1/sandboxes/" + sid, json={}, timeout=30)
    if r.status_code not in expect:
        raise AssertionError("PUT %s: %d %s" % (sid, r.status_code, r.text[:200]))
    return r


def delete(s, st, sid):
    r = s.delete(st.url + "/v1/sandboxes/" + sid, timeout=30)
    if r.status_code != 204:
        raise AssertionError("DELETE %s: %d %s" % (sid, r.status_code, r.text[:200]))


def first_command(s, st, sid):
    """ms of `PUT` sid + exec `true` in it; the DELETE after is not timed."""
    t0 = time.perf_counter()
    put(s, st, sid)
    exec_true(s, st.url + "/v1/sandboxes/%s/exec" % sid)
    dt = (time.perf_counter() - t0) * 1000.0
    delete(s, st, sid)
    return dt


def exec_true(s, url):
    r = s.post(url, data=b'{"argv":["true"]}', headers={"Content-Type": "application/json"},
               timeout=30)
    if r.status_code != 200 or r.json().get("exitCode") != 0:
        raise AssertionError("exec: %d %s" % (r.status_code, r.text[:200]))


# ---- 1. baselines ----------------------------------------------------------------

def fig_baselines(st, ctx):
    h = ctx.harness
    ctx.lat.append(Lat("fork-exec", "fork + execv of /bin/true and waitpid, from a C harness "
                       "compiled at bench time (N=%d)" % N_SPAWN,
                       samples=h.run(N_SPAWN, ["/bin/true"])))
    ctx.lat.append(Lat("unshare", "`unshare -m -p -n -i -u --fork true` (util-linux), "
                       "fork+exec'd by the harness (N=%d)" % (N_SPAWN // 4),
                       baseline="fork-exec", samples=h.run(N_SPAWN // 4, UNSHARE)))
    try:
        ctx.lat.append(Lat("bwrap", "`bwrap --ro-bind /usr /usr … --unshare-all /bin/true` "
                           "(host /usr read-only), fork+exec'd by the harness (N=%d)" % (N_SPAWN // 4),
                           baseline="fork-exec", samples=h.run(N_SPAWN // 4, BWRAP)))
    except Exception as ex:  # noqa: BLE001 - a missing bwrap is reported, not fatal
        ctx.skipped.append(("bwrap", str(ex)))
    for tool in ("runc", "crun", "docker"):
        path = shutil.which(tool)
        if not path:
            ctx.skipped.append((tool, "not installed"))
        elif tool == "docker":
            ctx.skipped.append((tool, "only the CLI is installed (%s); no daemon runs and none "
                                "is started by the bench" % path))
        else:
            ctx.skipped.append((tool, "installed (%s) but not measured: needs an OCI bundle" % path))
    # The client's floor: one keep-alive GET of nginx's static `return 200`
    # through the same Python client as every latency figure below.
    s = requests.Session()
    ctx.lat.append(Lat("http-floor", "Python requests.Session keep-alive GET of nginx static "
                       "`return 200` (what the client alone costs per request, N=%d)" % N_RTT,
                       samples=timed(lambda: s.get(st.static_url, timeout=5), N_RTT, warmup=20)))
    # The same after a quiet time, as the paced figures make their calls:
    # what this machine adds to any round trip that follows idleness
    # (caches and idle CPUs to wake), before sbx does anything.
    ctx.lat.append(Lat("http-floor-paced", "`http-floor`, each GET %d ms after the last "
                       "(what a quiet time adds to a round trip here: the pace of the "
                       "`-fresh` and `-pool` figures, N=%d)" % (POOL_PACE_S * 1000, N_SEQ),
                       baseline="http-floor", samples=paced(
                           lambda: s.get(st.static_url, timeout=5), N_SEQ, POOL_PACE_S)))
    # The ceiling of an exec through nginx (issue 22): that round trip plus
    # fork/exec of true and its wait, sample by sample (N = the shorter).
    floor, spawn = ctx.get("http-floor"), ctx.get("fork-exec")
    ctx.lat.append(Lat("exec-ceiling", "`http-floor` + `fork-exec`, sample by sample: a "
                       "keep-alive round trip to nginx static plus fork/exec of true and its "
                       "wait (what an exec through nginx cannot beat, N=%d)"
                       % min(len(floor.samples), len(spawn.samples)),
                       samples=[a + b for a, b in zip(floor.samples, spawn.samples)]))


# ---- 2. time to first command -------------------------------------------------------

def fig_first_command(st, ctx):
    s = session(st.key)
    samples = []
    for i in range(N_SEQ + 3):
        dt = first_command(s, st, "ttfc-%d" % i)
        if i >= 3:                      # the first three warm the pool's connections
            samples.append(dt)
    ctx.lat.append(Lat("first-command", "`PUT /v1/sandboxes/{new id}` + `POST …/exec "
                       "{\"argv\":[\"true\"]}` through nginx, sequential, one keep-alive "
                       "connection; DELETE after each, not timed (N=%d)" % N_SEQ,
                       baseline="bwrap", target_ms=4.0, samples=samples))


# ---- 3. create until running ---------------------------------------------------------

def fig_create(st, ctx):
    s = session(st.key)
    samples = []
    for i in range(N_SEQ):
        sid = "create-%d" % i
        t0 = time.perf_counter()
        put(s, st, sid)
        samples.append((time.perf_counter() - t0) * 1000.0)
        delete(s, st, sid)
    ctx.lat.append(Lat("create", "`PUT /v1/sandboxes/{new id}` → 201 (the API answers once the "
                       "agent started it), sequential, keep-alive (N=%d)" % N_SEQ,
                       baseline="bwrap", target_ms=15.0, samples=samples))

    # 100 at once: one tenant (quota 100), 100 threads each with its own
    # connection, released together by a barrier.
    n = 100
    key = key_for(st, ctx, "bench-burst")
    lat, status, wall = burst_puts(st, key, "burst", n)
    ok = sum(1 for x in status if x == 201)
    res = Lat("create-100", "100 `PUT`s of new ids at once (100 threads, own connection each, "
              "one tenant): per-request latency", baseline="create", target_ms=60.0,
              samples=[x for x, c in zip(lat, status) if c == 201])
    res.errors = n - ok
    res.note = "statuses: %s" % summarize(status)
    ctx.lat.append(res)
    ctx.values.append(Value("create-100-wall", "wall time until all 100 concurrent creates "
                            "answered (%d of 100 were 201)" % ok, wall, "ms",
                            compare="100 × sequential create p50 = %.0f ms" %
                            (100 * ctx.get("create").p50)))
    t0 = time.perf_counter()
    parallel(8, [lambda i=i: delete(session(key), st, "burst-%d" % i) for i in range(n)])
    ctx.values.append(Value("delete-100-wall", "wall time of deleting those 100 (8 threads)",
                            (time.perf_counter() - t0) * 1000.0, "ms"))


def run_released(threads, barrier):
    """Start the threads, release them together through barrier (they wait
    on it; one party is ours); ms until every one has ended."""
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return (time.perf_counter() - t0) * 1000.0


def burst_puts(st, key, prefix, n, before=None):
    """n `PUT`s of new ids PREFIX-0..n-1 at once (n threads, each with its
    own connection opened before the clock starts, released together by a
    barrier; before() runs just ahead of the release): per-request ms,
    statuses (or the client's error), and the wall ms of the whole burst."""
    sessions = [session(key) for _ in range(n)]
    for sess in sessions:
        sess.get(st.url + "/healthz", timeout=10)
    if before:
        before()
    barrier = threading.Barrier(n + 1)
    lat, status = [None] * n, [None] * n

    def one(i):
        barrier.wait()
        t0 = time.perf_counter()
        try:
            r = sessions[i].put(st.url + "/v1/sandboxes/%s-%d" % (prefix, i), json={}, timeout=60)
            status[i] = r.status_code
        except requests.RequestException as ex:
            status[i] = str(ex)[:60]
        lat[i] = (time.perf_counter() - t0) * 1000.0

    wall = run_released([threading.Thread(target=one, args=(i,)) for i in range(n)], barrier)
    return lat, status, wall


def summarize(statuses):
    counts = {}
    for x in statuses:
        counts[x] = counts.get(x, 0) + 1
    return ", ".join("%s×%d" % (k, v) for k, v in sorted(counts.items(), key=str))


def parallel(workers, fns):
    """Run the callables on a pool; the list of their results (raises the first error)."""
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        return [f.result() for f in [ex.submit(fn) for fn in fns]]


# ---- 4. exec round trip --------------------------------------------------------------

EXEC_SANDBOXES = ["rtt-%d" % i for i in range(8)]


def setup_exec_sandboxes(st, ctx):
    s = session(st.key)
    for sid in EXEC_SANDBOXES:
        put(s, st, sid, expect=(200, 201))


def teardown_exec_sandboxes(st, ctx):
    s = session(st.key)
    for sid in EXEC_SANDBOXES:
        delete(s, st, sid)


def fig_exec_rtt(st, ctx):
    sid = EXEC_SANDBOXES[0]
    s = session(st.key)
    url = st.url + "/v1/sandboxes/%s/exec" % sid
    ctx.lat.append(Lat("exec-nginx", "`POST /v1/sandboxes/{id}/exec {\"argv\":[\"true\"]}` "
                       "through nginx (auth_request to the pool, cached for 1 s, + proxy to "
                       "the agent), one keep-alive requests.Session; target ≤ 1.3× "
                       "`exec-ceiling` (N=%d)" % N_RTT,
                       baseline="exec-ceiling", target_ms=round(1.3 * ctx.get("exec-ceiling").p50, 2),
                       samples=timed(lambda: exec_true(s, url), N_RTT, warmup=20)))
    rec = s.get(st.url + "/v1/sandboxes/" + sid, timeout=10).json()
    agent = st.env["SBX_AGENT_1"]
    d = requests.Session()
    d.headers.update({"X-Sbx-Node-Secret": st.secret, "X-Sbx-Tenant": "dev",
                      "X-Sbx-Epoch": str(rec["epoch"]),
                      "X-Sbx-Generation": str(rec["generation"])})
    durl = "http://%s/v1/sandboxes/%s/exec" % (agent, sid)
    ctx.lat.append(Lat("exec-agent", "the same exec straight at the agent (`POST http://<agent>/"
                       "v1/sandboxes/{id}/exec` with X-Sbx-Node-Secret, X-Sbx-Tenant, "
                       "X-Sbx-Epoch), keep-alive (N=%d)" % N_RTT,
                       baseline="fork-exec", target_ms=2.0,
                       samples=timed(lambda: exec_true(d, durl), N_RTT, warmup=20)))


def loop_lag(st):
    """The agent's loop-lag histogram (sbx_agent_loop_lag_seconds): {le: count}."""
    url = st.env["SBX_METRICS"].strip('"').split()[1]
    out = {}
    for line in requests.get(url, timeout=10).text.splitlines():
        if line.startswith("sbx_agent_loop_lag_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[le] = float(line.split()[-1])
    return out


def fig_exec_during_builds(st, ctx):
    """Exec round trips (straight at the agent, and through nginx) while 100
    concurrent creates are being built; the agent's loop lag meanwhile."""
    sid = EXEC_SANDBOXES[0]
    s = session(st.key)
    rec = s.get(st.url + "/v1/sandboxes/" + sid, timeout=10).json()
    d = requests.Session()
    d.headers.update({"X-Sbx-Node-Secret": st.secret, "X-Sbx-Tenant": "dev",
                      "X-Sbx-Epoch": str(rec["epoch"]), "X-Sbx-Generation": str(rec["generation"])})
    durl = "http://%s/v1/sandboxes/%s/exec" % (st.env["SBX_AGENT_1"], sid)
    nurl = st.url + "/v1/sandboxes/%s/exec" % sid
    n = 100
    key = key_for(st, ctx, "bench-burst")
    sessions = [session(key) for _ in range(n)]
    for sess in sessions:
        sess.get(st.url + "/healthz", timeout=10)
    for _ in range(20):
        exec_true(d, durl)
    barrier = threading.Barrier(n + 3)
    status = [None] * n
    running = [n]
    lock = threading.Lock()
    samples = {"agent": [], "nginx": []}

    def create(i):
        barrier.wait()
        try:
            status[i] = sessions[i].put(st.url + "/v1/sandboxes/during-%d" % i, json={},
                                        timeout=60).status_code
        except requests.RequestException as ex:
            status[i] = str(ex)[:60]
        with lock:
            running[0] -= 1

    def execs(name, sess, url):
        barrier.wait()
        while running[0] > 0:
            t0 = time.perf_counter()
            exec_true(sess, url)
            samples[name].append((time.perf_counter() - t0) * 1000.0)

    before = loop_lag(st)
    threads = [threading.Thread(target=create, args=(i,)) for i in range(n)]
    threads += [threading.Thread(target=execs, args=("agent", d, durl)),
                threading.Thread(target=execs, args=("nginx", s, nurl))]
    wall = run_released(threads, barrier)
    after = loop_lag(st)
    ok = sum(1 for x in status if x == 201)
    for name, what in (("agent", "straight at the agent (as `exec-agent`)"),
                       ("nginx", "through nginx (as `exec-nginx`: its routing check goes to the "
                        "route workers, api.route_workers, which the creates do not hold)")):
        res = Lat("exec-%s-during-builds" % name, "exec `true` %s, back to back while 100 "
                  "concurrent creates are being built (%d of 100 were 201, wall %.0f ms)"
                  % (what, ok, wall), baseline="exec-%s" % name,
                  target_ms=None, samples=samples[name])
        res.note = "p99 target ≤ 10 ms"
        ctx.lat.append(res)
    if not after:   # an agent without the probe
        parallel(8, [lambda i=i: delete(session(key), st, "during-%d" % i) for i in range(n)])
        return
    probes = after.get("+Inf", 0) - before.get("+Inf", 0)
    over = probes - (after.get("0.002", 0) - before.get("0.002", 0))
    worst = "0"
    for le in sorted((k for k in after if k != "+Inf"), key=float):
        if after[le] - before.get(le, 0) < probes:
            worst = le
    ctx.values.append(Value("loop-lag-during-builds", "the agent's loop-lag probes (a 10 ms "
                            "timer, sbx_agent_loop_lag_seconds) later than 2 ms while those "
                            "100 creates ran, of %d probes; the worst lag was above %s s"
                            % (probes, worst), over, "probes",
                            compare="target: none (the loop never blocked > 2 ms)"))
    parallel(8, [lambda i=i: delete(session(key), st, "during-%d" % i) for i in range(n)])


# ---- 6. first byte of a stream ------------------------------------------------------

def sse_first_stdout(host, port, path, headers, body):
    """POST an SSE exec; ms until the first `event: stdout` line, then close
    (the command is killed with the connection)."""
    import http.client
    c = http.client.HTTPConnection(host, port, timeout=30)
    try:
        t0 = time.perf_counter()
        c.request("POST", path, body=body, headers=headers)
        r = c.getresponse()
        if r.status != 200:
            raise AssertionError("SSE exec: %d %r" % (r.status, r.read(200)))
        while True:
            line = r.readline()
            if not line:
                raise AssertionError("SSE exec ended without a stdout event")
            if line.startswith(b"event: stdout"):
                return (time.perf_counter() - t0) * 1000.0
    finally:
        c.close()


def fig_first_byte(st, ctx):
    u = urllib.parse.urlsplit(st.url)
    path = "/v1/sandboxes/%s/exec" % EXEC_SANDBOXES[1]
    hdr = {"Authorization": "Bearer " + st.key, "Accept": "text/event-stream",
           "Content-Type": "application/json"}
    body = json.dumps({"command": "echo hi; sleep 1"})
    n = max(10, N_SEQ // 2)
    for _ in range(3):
        sse_first_stdout(u.hostname, u.port, path, hdr, body)
    samples = [sse_first_stdout(u.hostname, u.port, path, hdr, body) for _ in range(n)]
    ctx.lat.append(Lat("stream-first-byte", "SSE exec of `echo hi; sleep 1` through nginx: "
                       "request sent → first `event: stdout` line read (new connection each; "
                       "closed after it, N=%d)" % n, baseline="exec-nginx", samples=samples))


# ---- 8. idle memory with many live sandboxes ------------------------------------------

KERNEL_FIELDS = ("Slab", "KernelStack", "PageTables")


def meminfo(field="MemAvailable"):
    with open("/proc/meminfo") as f:
        m = re.search(r"^%s:\s+(\d+) kB" % field, f.read(), re.M)
    return int(m.group(1)) * 1024


def rss(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            m = re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M)
        return int(m.group(1)) * 1024
    except OSError:
        return 0


def cgroup_dir(st):
    with open(os.path.join(st.dir, "conf", "sbx.conf")) as f:
        m = re.search(r"^\s*cgroup_parent\s*=\s*(\S+)", f.read(), re.M)
    return "/sys/fs/cgroup/memory/%s/agent-1" % m.group(1)


def agent_list(st):
    r = requests.get("http://%s/agent/v1/sandboxes" % st.env["SBX_AGENT_1"],
                     headers={"X-Sbx-Node-Secret": st.secret}, timeout=30)
    r.raise_for_status()
    return r.json()["sandboxes"]


def live_overrides():
    """The bench stack's settings for BENCH_LIVE sandboxes on its one node:
    room for them (agent.capacity, one uid range each) beyond the defaults."""
    if N_LIVE <= 500:
        return []
    return ["agent.capacity=%d" % N_LIVE, "agent.uid_ranges=%d" % (N_LIVE + 64)]


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def exec_ms(st, keys, ids):
    """One `true` through nginx in each sandbox of ids, in turn: the ms of each."""
    out, sessions = [], {}
    for t, sid in ids:
        s = sessions.setdefault(t, session(keys[t]))
        t0 = time.perf_counter()
        r = s.post(st.url + "/v1/sandboxes/%s/exec" % sid, json={"command": "true"}, timeout=30)
        if r.status_code == 200:
            out.append((time.perf_counter() - t0) * 1000.0)
    return out


def fig_live_memory(st, ctx):
    tenants = ["bench-live-%d" % i for i in range((N_LIVE + 99) // 100)]
    ids = [(t, "live-%d" % i) for t in tenants for i in range(100)][:N_LIVE]
    keys = {t: key_for(st, ctx, t) for t in tenants}
    time.sleep(1)
    agent_pid = st.pid("agent-1")
    avail0, rss0 = meminfo(), rss(agent_pid)
    kern0 = sum(meminfo(f) for f in KERNEL_FIELDS)
    fds0 = nfds(agent_pid)
    edge = max(1, min(200, N_LIVE // 2))   # the first and the last `edge` compared
    local = threading.local()

    def create(t, sid):
        if getattr(local, "s", None) is None or local.t != t:
            local.s, local.t = session(keys[t]), t
        t0 = time.perf_counter()
        r = local.s.put(st.url + "/v1/sandboxes/" + sid, json={}, timeout=60)
        return r.status_code, (time.perf_counter() - t0) * 1000.0

    t0 = time.perf_counter()
    res = parallel(4, [lambda t=t, sid=sid: create(t, sid) for t, sid in ids[:edge]])
    create_wall = time.perf_counter() - t0
    exec_first = exec_ms(st, keys, [x for x, (c, _) in zip(ids, res) if c == 201])
    t0 = time.perf_counter()
    res += parallel(4, [lambda t=t, sid=sid: create(t, sid) for t, sid in ids[edge:]])
    create_wall += time.perf_counter() - t0
    created = sum(1 for c, _ in res if c == 201)
    time.sleep(2)                       # let the sandboxes settle to idle
    load_full = os.getloadavg()
    fds1 = nfds(agent_pid)
    exec_last = exec_ms(st, keys, [x for x, (c, _) in zip(ids, res) if c == 201][-edge:])
    listed = agent_list(st)
    running = sum(1 for x in listed if x.get("state") == "running")
    cg = cgroup_dir(st)
    usage, counted = 0, 0
    for t, sid in ids:
        try:
            with open("%s/%s.%s/memory.usage_in_bytes" % (cg, t, sid)) as f:
                usage += int(f.read())
                counted += 1
        except OSError:
            pass
    avail1, rss1 = meminfo(), rss(agent_pid)
    kern1 = sum(meminfo(f) for f in KERNEL_FIELDS)
    n = max(created, 1)
    mib = 1048576.0
    ctx.values.append(Value("live-running", "sandboxes running after %d creates (PUT 201: %d; "
                            "creates took %.1f s with 4 client threads; statuses %s)" %
                            (N_LIVE, created, create_wall, summarize([c for c, _ in res])),
                            running, "running", target=N_LIVE, sense="ge",
                            compare="agent lists %d sandboxes" % len(listed)))
    ctx.values.append(Value("idle-mem-cgroup", "sum of the sandboxes' memory cgroups "
                            "(memory.usage_in_bytes, %d cgroups) / sandboxes" % counted,
                            usage / mib / n, "MiB/sandbox", target=1.0))
    ctx.values.append(Value("idle-mem-host", "host MemAvailable before − after the %d creates, "
                            "per sandbox (kernel objects, page tables, tmpfs, agent; noisy: other "
                            "work shares the machine)" % created,
                            (avail0 - avail1) / mib / n, "MiB/sandbox", target=1.0))
    ctx.values.append(Value("idle-mem-kernel", "host kernel memory growth (%s in /proc/meminfo: "
                            "namespaces, mounts, cgroups, init's stack and page tables) per "
                            "sandbox; less noisy than MemAvailable" % "+".join(KERNEL_FIELDS),
                            (kern1 - kern0) / mib / n, "MiB/sandbox", target=1.0))
    ctx.values.append(Value("idle-mem-agent", "agent RSS growth per sandbox (%.1f → %.1f MiB)" %
                            (rss0 / mib, rss1 / mib), (rss1 - rss0) / mib / n, "MiB/sandbox"))
    with open("/proc/%d/limits" % agent_pid) as f:
        nofile = re.search(r"^Max open files\s+(\S+)", f.read(), re.M).group(1)
    ctx.values.append(Value("live-agent-fds", "agent fds per live sandbox (%d → %d open with %d "
                            "sandboxes; its RLIMIT_NOFILE %s)" % (fds0, fds1, created, nofile),
                            (fds1 - fds0) / n, "fds/sandbox", target=3.0))   # 5000 in 20000
    ms = [x for c, x in res if c == 201]
    for name, what, a, b in (
            ("live-create-last", "PUT (4 client threads)", ms[:edge], ms[-edge:]),
            ("live-exec-last", "exec `true` through nginx (one client, in turn)",
             exec_first, exec_last)):
        if a and b:
            pa, pb = statistics.median(a), statistics.median(b)
            ctx.values.append(Value(name, "%s p50 over the last %d of %d live sandboxes / over "
                                    "the first %d (load %.2f with all of them live)" %
                                    (what, len(b), created, len(a), load_full[0]),
                                    pb / pa, "×", target=1.5,
                                    compare="%.2f ms → %.2f ms" % (pa, pb)))
    ctx.live_create = [ms for c, ms in res if c == 201]

    def remove(t, sid):
        if getattr(local, "d", None) is None or local.dt != t:
            local.d, local.dt = session(keys[t]), t
        r = local.d.delete(st.url + "/v1/sandboxes/" + sid, timeout=60)
        return r.status_code

    local = threading.local()
    t0 = time.perf_counter()
    codes = parallel(4, [lambda t=t, sid=sid: remove(t, sid) for t, sid in ids])
    wall = time.perf_counter() - t0
    left = len(agent_list(st))
    ctx.values.append(Value("delete-%d-wall" % N_LIVE, "deleting all %d (4 client threads; "
                            "statuses %s; %d left on the agent after)" %
                            (N_LIVE, summarize(codes), left), wall, "s",
                            compare="%.1f ms per sandbox" % (wall * 1000.0 / N_LIVE)))


# ---- 9. concurrent open streams --------------------------------------------------------

def dechunk(body):
    out, i = b"", 0
    while True:
        j = body.find(b"\r\n", i)
        if j < 0:
            return out
        try:
            size = int(body[i:j].split(b";")[0], 16)
        except ValueError:
            return out
        if size == 0:
            return out
        out += body[j + 2:j + 2 + size]
        i = j + 2 + size + 2


def open_streams(st, n, sids, control):
    """n SSE execs of `sleep 5; echo done` over the sandboxes sids, all open
    at once on raw non-blocking sockets; control() is called once every
    stream has answered its status line (or after 3 s). Returns (completed,
    statuses summary, wall s, control result)."""
    u = urllib.parse.urlsplit(st.url)
    body = b'{"command":"sleep 5; echo done"}'
    sel = selectors.DefaultSelector()
    conns = []
    for i in range(n):
        req = ("POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
               "Accept: text/event-stream\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n" %
               (sids[i % len(sids)], u.netloc, st.key, len(body))).encode() + body
        sk = socket.socket()
        sk.setblocking(False)
        try:
            sk.connect((u.hostname, u.port))
        except BlockingIOError:
            pass
        c = {"sock": sk, "out": req, "in": b"", "done": False}
        conns.append(c)
        sel.register(sk, selectors.EVENT_WRITE, c)
    t0 = time.perf_counter()
    ctl, open_ = None, 0
    deadline = t0 + 60
    while open_ < n and time.perf_counter() < deadline:
        if ctl is None and (all(b"\r\n\r\n" in c["in"] for c in conns) or
                            time.perf_counter() - t0 > 3):
            ctl = control()
        for k, ev in sel.select(timeout=0.2):
            c = k.data
            if ev & selectors.EVENT_WRITE:
                try:
                    sent = c["sock"].send(c["out"])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    sent = -1
                if sent < 0:
                    sel.unregister(c["sock"])
                    c["sock"].close()
                    c["done"] = True
                    open_ += 1
                    continue
                c["out"] = c["out"][sent:]
                if not c["out"]:
                    sel.modify(c["sock"], selectors.EVENT_READ, c)
            elif ev & selectors.EVENT_READ:
                try:
                    data = c["sock"].recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data:
                    c["in"] += data
                else:
                    sel.unregister(c["sock"])
                    c["sock"].close()
                    c["done"] = True
                    open_ += 1
    if ctl is None:
        ctl = control()
    wall = time.perf_counter() - t0
    for c in conns:
        if not c["done"]:
            sel.unregister(c["sock"])
            c["sock"].close()
    sel.close()
    completed, statuses = 0, []
    for c in conns:
        head, _, rest = c["in"].partition(b"\r\n\r\n")
        m = re.match(rb"HTTP/1\.1 (\d+)", head)
        statuses.append(int(m.group(1)) if m else "none")
        text = dechunk(rest) if b"chunked" in head.lower() else rest
        if m and m.group(1) == b"200" and b'"data":"done\\n"' in text and b"event: exit" in text:
            completed += 1
    return completed, summarize(statuses), wall, ctl


def fig_streams(st, ctx):
    sids = ["stream-%d" % i for i in range(20)]
    key = key_for(st, ctx, "bench-streams")
    s = session(key)
    parallel(4, [lambda sid=sid: put(session(key), st, sid) for sid in sids])
    st_key = st.key
    st.key = key                        # open_streams authenticates with st.key
    agent_pid = st.pid("agent-1")
    try:
        for n in sorted({100, N_STREAMS_MAX}):
            rss0 = rss(agent_pid)
            probe = requests.Session()
            probe.get(st.url + "/healthz", timeout=5)
            peak = {}

            def control():
                peak["rss"] = rss(agent_pid)
                hz = timed(lambda: probe.get(st.url + "/healthz", timeout=10), 10)
                rec = timed(lambda: s.get(st.url + "/v1/sandboxes/" + sids[0], timeout=10), 10)
                return hz, rec

            completed, statuses, wall, (hz, rec) = open_streams(st, n, sids, control)
            ok = completed == n and max(hz + rec) < 50.0
            ctx.values.append(Value(
                "streams-%d" % n, "%d SSE execs of `sleep 5; echo done` open at once through "
                "nginx (pool of 4 workers, %d sandboxes): completed with their output; "
                "statuses %s; wall %.1f s" % (n, len(sids), statuses, wall),
                completed, "completed", target=n, sense="ge",
                compare="agent RSS %.1f → %.1f MiB while open" % (rss0 / 1048576.0,
                                                                  peak["rss"] / 1048576.0)))
            for name, smp in (("healthz", hz), ("record", rec)):
                r = Lat("ctl-%s-during-%d" % (name, n),
                        "`GET %s` while the %d streams are open (N=10, keep-alive)" %
                        ("/healthz" if name == "healthz" else "/v1/sandboxes/{id}", n),
                        target_ms=50.0, samples=smp)
                r.note = "max %.1f ms (all must be < 50 ms: %s)" % (max(smp), "yes" if ok else "no")
                ctx.lat.append(r)
            time.sleep(1)
    finally:
        st.key = st_key
    parallel(4, [lambda sid=sid: delete(session(key), st, sid) for sid in sids])


# ---- 10. the warm pool (agent.warm_pool) -----------------------------------------------

POOL_SIZE = int(os.environ.get("BENCH_POOL", "16"))
POOL_PACE_S = 0.1      # between paced creates: the pool's quiet time (50 ms) + one build


def pool_members(st):
    d = cgroup_dir(st)
    try:
        return sum(1 for n in os.listdir(d) if n.startswith("_pool-"))
    except FileNotFoundError:
        return 0


def wait_pool(st, n, timeout=30.0):
    deadline = time.monotonic() + timeout
    while pool_members(st) < n:
        if time.monotonic() > deadline:
            raise AssertionError("the warm pool did not refill to %d (has %d)" %
                                 (n, pool_members(st)))
        time.sleep(0.02)


def from_pool(st, tenant, sid):
    r = requests.get("http://%s/agent/v1/sandboxes/%s/%s" % (st.env["SBX_AGENT_1"], tenant, sid),
                     headers={"X-Sbx-Node-Secret": st.secret}, timeout=10)
    return r.status_code == 200 and r.json().get("fromPool") is True


# A spec the pool does not serve (disk size differs by 1 MiB) but otherwise
# the same: the control measured in the same minutes on the same stack.
FRESH_BODY = {"resources": {"diskMiB": 255}}


def pool_sequential(st, ctx, with_exec):
    """Sequential creates (+ exec `true` when with_exec) alternating a spec
    the pool serves and one it does not, paced POOL_PACE_S apart."""
    s = session(st.key)
    samples = {"pool": [], "fresh": []}
    hits = 0
    tag = "pttfc" if with_exec else "pcreate"
    for i in range(2 * (N_SEQ + 3)):
        kind = "pool" if i % 2 == 0 else "fresh"
        sid = "%s-%d" % (tag, i)
        t0 = time.perf_counter()
        r = s.put(st.url + "/v1/sandboxes/" + sid, json={} if kind == "pool" else FRESH_BODY,
                  timeout=30)
        if r.status_code != 201:
            raise AssertionError("PUT %s: %d %s" % (sid, r.status_code, r.text[:200]))
        if with_exec:
            exec_true(s, st.url + "/v1/sandboxes/%s/exec" % sid)
        dt = (time.perf_counter() - t0) * 1000.0
        hit = from_pool(st, "dev", sid)
        delete(s, st, sid)
        if i >= 6:                      # the first rounds warm the connections
            samples[kind].append(dt)
            hits += hit and kind == "pool"
            if hit and kind == "fresh":
                raise AssertionError("a non-matching spec was served from the pool")
        time.sleep(POOL_PACE_S)
    return samples, hits


def pool_first_command(st, ctx):
    samples, hits = pool_sequential(st, ctx, True)
    what = ("as `first-command`, on a stack with `agent.warm_pool = %d`, creates paced %d ms "
            "apart so the pool refills; alternating with `-fresh` (N=%d)" %
            (POOL_SIZE, POOL_PACE_S * 1000, len(samples["pool"])))
    r = Lat("first-command-pool", what, baseline="first-command-fresh", target_ms=2.5,
            samples=samples["pool"])
    r.note = "%d of %d served from the pool" % (hits, len(samples["pool"]))
    f = Lat("first-command-fresh", "the control of `first-command-pool`, interleaved with it on "
            "the same stack: a spec the pool does not serve (`diskMiB` 255), built fresh (N=%d)" %
            len(samples["fresh"]), baseline="first-command", target_ms=6.0,
            samples=samples["fresh"])
    ctx.lat += [f, r]


def pool_create(st, ctx):
    samples, hits = pool_sequential(st, ctx, False)
    r = Lat("create-pool", "as `create`, with `agent.warm_pool = %d`, paced %d ms apart, "
            "alternating with `create-fresh` (N=%d)" %
            (POOL_SIZE, POOL_PACE_S * 1000, len(samples["pool"])),
            baseline="create-fresh", samples=samples["pool"])
    r.note = "%d of %d served from the pool" % (hits, len(samples["pool"]))
    f = Lat("create-fresh", "the control of `create-pool`, interleaved with it: `diskMiB` 255, "
            "built fresh (N=%d)" % len(samples["fresh"]), baseline="create",
            samples=samples["fresh"])
    ctx.lat += [f, r]


def pool_unpaced(st, ctx):
    """POOL_SIZE first commands back to back (like `first-command`) from a full pool."""
    s = session(st.key)
    wait_pool(st, POOL_SIZE)
    samples, hits = [], 0
    for i in range(POOL_SIZE):
        sid = "pfast-%d" % i
        t0 = time.perf_counter()
        put(s, st, sid)
        exec_true(s, st.url + "/v1/sandboxes/%s/exec" % sid)
        samples.append((time.perf_counter() - t0) * 1000.0)
        hits += from_pool(st, "dev", sid)
        delete(s, st, sid)
    r = Lat("first-command-pool-unpaced", "as `first-command` (back to back, DELETE after each "
            "untimed), %d times from a full pool of %d" % (POOL_SIZE, POOL_SIZE),
            baseline="first-command", target_ms=2.5, samples=samples)
    r.note = "%d of %d served from the pool" % (hits, len(samples))
    ctx.lat.append(r)


def pool_burst(st, ctx):
    """100 creates at once against a full pool of POOL_SIZE: the pool runs dry."""
    n = 100
    key = key_for(st, ctx, "bench-pburst")
    lat, status, wall = burst_puts(st, key, "pburst", n, before=lambda: wait_pool(st, POOL_SIZE))
    t_end = time.perf_counter()
    hit = [from_pool(st, "bench-pburst", "pburst-%d" % i) for i in range(n)]
    ok = [i for i in range(n) if status[i] == 201]
    res = Lat("create-100-pool", "as `create-100`, against a full pool of %d (it runs dry): "
              "per-request latency" % POOL_SIZE, baseline="create-100",
              samples=[lat[i] for i in ok], target_ms=150.0)
    res.errors = n - len(ok)
    hits = [lat[i] for i in ok if hit[i]]
    res.note = "statuses: %s; %d from the pool (their p50 %.1f ms), %d built fresh" % (
        summarize(status), len(hits), statistics.median(hits) if hits else 0.0,
        len(ok) - len(hits))
    ctx.lat.append(res)
    ctx.values.append(Value("create-100-pool-wall", "wall time until all 100 concurrent creates "
                            "answered, warm pool of %d (%d of 100 were 201)" % (POOL_SIZE, len(ok)),
                            wall, "ms", compare="without the pool: %s" % (
                                "%.0f ms" % next((v.value for v in ctx.values
                                                  if v.name == "create-100-wall"), 0.0))))
    # the refill, timed from the end of the burst (100 sandboxes still live)
    wait_pool(st, POOL_SIZE, timeout=60)
    refill = (time.perf_counter() - t_end) * 1000.0
    ctx.values.append(Value("pool-refill-wall", "time for the pool to refill to %d after the "
                            "burst answered (it ran dry; 100 sandboxes live; the bench reads "
                            "the 100 agent records meanwhile)" % POOL_SIZE, refill, "ms",
                            compare="%.1f ms per sandbox" % (refill / POOL_SIZE)))
    parallel(8, [lambda i=i: delete(session(key), st, "pburst-%d" % i) for i in range(n)])


def fig_warm_pool(ctx):
    """The pool figures, on a stack of their own (1 agent, agent.warm_pool = POOL_SIZE)."""
    from conftest import stack_down, stack_up
    st = stack_up(agents=1, overrides=["agent.warm_pool=%d" % POOL_SIZE])
    try:
        wait_pool(st, POOL_SIZE)
        m = re.search(r"warm pool: %d sandboxes ready \((\d+) ms\)" % POOL_SIZE,
                      st.log("agent-1", 400))
        if m:
            ctx.values.append(Value("pool-fill", "agent start: from the runtime's start until "
                                    "the pool holds %d sandboxes (the agent's log)" % POOL_SIZE,
                                    float(m.group(1)), "ms",
                                    compare="%.1f ms per sandbox" % (float(m.group(1)) / POOL_SIZE)))
        pool_first_command(st, ctx)
        wait_pool(st, POOL_SIZE)
        pool_create(st, ctx)
        pool_unpaced(st, ctx)
        pool_burst(st, ctx)
    finally:
        stack_down(st)
