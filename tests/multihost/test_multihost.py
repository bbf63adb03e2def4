"""Horizontal deployment, tested on one machine: three hosts (network
namespaces a, b, c, each running nginx + sbx-api + sbx-agent through
`deploy/stack up --bind ... --redis ...`), Redis primary and replica in two
more, all joined by a bridge in a sixth namespace ("lan") where this test
process talks from. tests/multihost/hosts builds and removes all of it.

Run with `make test-multihost` (root). SBX_KEEP=1 leaves everything up
(then: tests/multihost/hosts down).
"""

import collections
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from sbxroute import routed  # noqa: E402

HOSTS_SCRIPT = os.path.join(HERE, "hosts")
DIR = os.environ.get("MH_DIR", "/tmp/sbx-multihost")
CLONE_NEWNET = 0x40000000
HOSTS = ("a", "b", "c")


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if "=" in line:
                k, v = line.split("=", 1)
                env[k] = v
    return env


def setns(path):
    """Move this thread (and threads it starts later) into the network
    namespace at path."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns(%s)" % path)
    finally:
        os.close(fd)


class MH:
    """The running deployment, seen from the lan namespace."""

    def __init__(self, env):
        self.env = env
        self.port = int(env["MH_PORT"])
        self.addr = {h: env["MH_ADDR_" + h.upper()] for h in HOSTS}
        self.url = {h: "http://%s:%d" % (self.addr[h], self.port) for h in HOSTS}
        self.node = {h: env["MH_NODE_" + h.upper()] for h in HOSTS}
        self.agent = {h: env["MH_AGENT_" + h.upper()] for h in HOSTS}
        self.host_of = {v: k for k, v in self.node.items()}
        self.key = env["SBX_API_KEY"]
        self.admin_key = env["SBX_ADMIN_KEY"]
        self.secret = env["SBX_NODE_SECRET"]
        self.vip = env["MH_VIP"]
        self.prefix = env["MH_PREFIX"]

    def ns(self, name):
        return "%s-%s" % (self.prefix, name)

    def api(self, host, method, path, key=None, timeout=15, session=None, **kw):
        h = dict(kw.pop("headers", {}) or {})
        h["Authorization"] = "Bearer " + (key or self.key)
        return (session or requests).request(method, self.url[host] + path, headers=h,
                                             timeout=timeout, **kw)

    def via_host_header(self, host, url, path="/", timeout=10):
        """GET url's path through host's nginx, with url's Host header (the
        preview domain does not resolve here)."""
        rest = url.split("://", 1)[1]
        hosthdr = rest.split("/", 1)[0]
        return requests.get(self.url[host] + path, headers={"Host": hosthdr}, timeout=timeout)

    def agent_call(self, host, method, path, headers=None, timeout=10):
        h = {"X-Sbx-Node-Secret": self.secret}
        h.update(headers or {})
        return requests.request(method, "http://%s%s" % (self.agent[host], path), headers=h,
                                timeout=timeout)

    def redis(self, *args, host=None):
        r = subprocess.run(["redis-cli", "-h", host or self.vip, "-p", "6379"] +
                           [str(a) for a in args], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def ip(self, *args):
        subprocess.run(["ip"] + list(args), check=True, capture_output=True, timeout=10)

    def hosts(self, *args, timeout=60):
        r = subprocess.run([HOSTS_SCRIPT] + list(args[:1]) + ["--dir", DIR] + list(args[1:]),
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, "hosts %s: %s%s" % (args, r.stdout, r.stderr)
        return r

    def record(self, sid):
        r = self.api("a", "GET", "/v1/sandboxes/" + sid)
        assert r.status_code == 200, r.text
        return r.json()

    def data(self, host, method, path, **kw):
        """api() for a data call, with routed()'s one retry."""
        return routed(lambda *a, **k: self.api(host, *a, **k), method, path, **kw)

    def exec_(self, host, sid, command):
        r = self.data(host, "POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command})
        assert r.status_code == 200, "exec via %s: %d %s" % (host, r.status_code, r.text)
        return r.json()

    def node_alive(self, host):
        return self.redis("EXISTS", "sbx:node:{%s}:alive" % self.node[host]) == "1"

    def wait(self, what, cond, timeout=15.0, interval=0.1):
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = cond()
                if last:
                    return last
            except (requests.RequestException, AssertionError) as ex:
                last = ex
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.0fs waiting for %s (last: %r)" %
                                     (timeout, what, last))
            time.sleep(interval)

    def events(self, count=500):
        """The last events, newest first, as dicts."""
        out = subprocess.run(["redis-cli", "-h", self.vip, "--json", "XREVRANGE", "sbx:events",
                              "+", "-", "COUNT", str(count)], capture_output=True, text=True,
                             timeout=10)
        if out.returncode != 0 or not out.stdout.strip():
            return []
        evs = []
        for _id, fields in json.loads(out.stdout):
            evs.append(dict(zip(fields[0::2], fields[1::2])))
        return evs


@pytest.fixture(scope="module")
def mh():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with deployment(DIR) as m:
        yield m


def put(mh, host, sid, **body):
    r = mh.api(host, "PUT", "/v1/sandboxes/" + sid, json=body or None)
    assert r.status_code in (200, 201), "PUT %s via %s: %d %s" % (sid, host, r.status_code, r.text)
    return r.json()


COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /workspace/n; sleep 0.1; done"


def sandbox_on(mh, host, prefix):
    """A new sandbox that placement put on host (the others made on the way
    are deleted: placement takes the less loaded of two random nodes)."""
    mh.wait("every host to be up", lambda: all(
        mh.node_alive(h) and requests.get(mh.url[h] + "/healthz", timeout=2).status_code == 200
        for h in HOSTS), timeout=30)
    sid, others = None, []
    for i in range(30):
        cand = "%s-%d" % (prefix, i)
        # a host back from a fault may answer 503 (retry) for a moment
        r = mh.wait("PUT %s" % cand, lambda: (lambda r: r if r.status_code != 503 else None)(
            mh.api(HOSTS[i % 3], "PUT", "/v1/sandboxes/" + cand)), timeout=10, interval=0.2)
        assert r.status_code in (200, 201), r.text
        if r.json()["node"] == mh.node[host]:
            sid = cand
            break
        others.append(cand)
    for o in others:
        assert mh.api("b", "DELETE", "/v1/sandboxes/" + o).status_code == 204
    assert sid, "placement never chose host %s" % host
    return sid


def copy_procs(node, sid):
    """{pid: freezer cgroup path} of the live host processes of the copy of
    dev.<sid> that node runs (all hosts share this kernel: the node level
    of the cgroup path tells the copies apart)."""
    tail = "/%s/dev.%s" % (node, sid)
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open("/proc/%s/cgroup" % d) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if not any(l.endswith(tail) or (tail + "/") in l for l in lines):
            continue
        found[int(d)] = next((l.split(":", 2)[2] for l in lines if l.split(":")[1] == "freezer"),
                             None)
    return found


def freezer_state(node, sid):
    """freezer.state of node's copy ("none" when it has no freezer cgroup)."""
    paths = {p for p in copy_procs(node, sid).values() if p}
    assert len(paths) == 1, paths
    path = paths.pop()
    if path == "/":
        return "none"
    with open("/sys/fs/cgroup/freezer%s/freezer.state" % path) as f:
        return f.read().strip()


def old_counter(node, sid):
    """The counter the COUNTER loop of node's copy wrote, read through the
    root of one of its processes (None when it has none yet)."""
    for pid in copy_procs(node, sid):
        try:
            with open("/proc/%d/root/workspace/n" % pid) as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
    return None


def start_counter(mh, sid, node):
    r = mh.api("a", "POST", "/v1/sandboxes/%s/processes" % sid,
               json={"id": "count", "command": COUNTER})
    assert r.status_code == 201, r.text
    mh.wait("the counter to run", lambda: (old_counter(node, sid) or 0) > 2)


def assert_frozen(node, sid):
    """node's copy is frozen: its counter stands still, its freezer says so."""
    n1 = old_counter(node, sid)
    time.sleep(1.0)
    n2 = old_counter(node, sid)
    assert n1 is not None and n1 == n2, "the old copy's counter ran on: %r -> %r" % (n1, n2)
    deadline = time.monotonic() + 5
    while freezer_state(node, sid) != "FROZEN":
        assert time.monotonic() < deadline, freezer_state(node, sid)
        time.sleep(0.1)
    return n1


class InFlight(threading.Thread):
    """One exec started through host, answered as JSON or as SSE."""

    def __init__(self, mh, host, sid, command, sse=False):
        super().__init__(daemon=True)
        self.mh, self.host, self.sid, self.command, self.sse = mh, host, sid, command, sse
        self.status, self.text, self.error = None, "", None

    def run(self):
        h = {"Accept": "text/event-stream"} if self.sse else {}
        try:
            r = self.mh.api(self.host, "POST", "/v1/sandboxes/%s/exec" % self.sid,
                            json={"command": self.command}, headers=h, timeout=90)
            self.status, self.text = r.status_code, r.text
        except requests.RequestException as ex:
            self.error = repr(ex)

    def succeeded(self):
        if self.status != 200:
            return False
        if self.sse:
            return "event: exit" in self.text
        return True


# ---------------------------------------------------------------------------


def test_all_nodes_registered_with_private_addresses(mh):
    r = mh.api("b", "GET", "/v1/nodes", key=mh.admin_key)
    assert r.status_code == 200, r.text
    nodes = {n["name"]: n for n in r.json()["nodes"]}
    for h in HOSTS:
        n = nodes[mh.node[h]]
        assert n["state"] == "up"
        assert n["address"] == mh.agent[h]
        assert n["address"].startswith(mh.addr[h] + ":")


def test_agents_refuse_without_the_node_secret(mh):
    r = requests.get("http://%s/agent/v1/sandboxes" % mh.agent["a"], timeout=5)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "UNAUTHORIZED"
    r = requests.get("http://%s/agent/v1/sandboxes" % mh.agent["a"], timeout=5,
                     headers={"X-Sbx-Node-Secret": "x" * 64})
    assert r.status_code == 401
    assert mh.agent_call("a", "GET", "/agent/v1/sandboxes").status_code == 200


def test_sandbox_made_on_one_host_is_served_by_every_host(mh):
    rec = put(mh, "a", "mh-one")
    owner = mh.host_of[rec["node"]]
    # exec through every host, whichever owns it
    for h in HOSTS:
        assert mh.exec_(h, "mh-one", "echo hi-$((40+2))")["stdout"] == "hi-42\n"
    # files: written through b, read through c and a
    r = mh.api("b", "PUT", "/v1/sandboxes/mh-one/files/hello.txt", data=b"hello from b\n")
    assert r.status_code in (200, 201), r.text
    for h in ("c", "a"):
        r = mh.api(h, "GET", "/v1/sandboxes/mh-one/files/hello.txt")
        assert r.status_code == 200 and r.content == b"hello from b\n", (h, r.status_code)
    r = mh.api("c", "GET", "/v1/sandboxes/mh-one/dirs/")
    assert r.status_code == 200 and "hello.txt" in [e["name"] for e in r.json()["entries"]]

    # a web server inside, reached by preview URL through every host
    r = mh.api("b", "POST", "/v1/sandboxes/mh-one/processes",
               json={"id": "web", "command": "exec python3 -m http.server 8000 --bind 127.0.0.1"})
    assert r.status_code == 201, r.text
    r = mh.api("c", "GET", "/v1/sandboxes/mh-one/processes/web/wait?port=8000&timeoutMs=15000",
               timeout=20)
    assert r.status_code == 200, r.text
    r = mh.api("a", "POST", "/v1/sandboxes/mh-one/ports/8000")
    assert r.status_code == 200, r.text
    preview = r.json()["url"]
    # exposing again through another host gives the same URL
    r = mh.api("c", "POST", "/v1/sandboxes/mh-one/ports/8000")
    assert r.status_code == 200 and r.json()["url"] == preview, r.text
    for h in HOSTS:
        r = mh.via_host_header(h, preview, "/hello.txt")
        assert r.status_code == 200 and r.content == b"hello from b\n", (h, r.status_code, r.text)

    # tunnels: made through b, the same URL asked through c and listed through a
    r = mh.api("b", "POST", "/v1/sandboxes/mh-one/tunnels/8000")
    assert r.status_code == 200, r.text
    tunnel = r.json()
    r = mh.api("c", "POST", "/v1/sandboxes/mh-one/tunnels/8000")
    assert r.status_code == 200 and r.json()["url"] == tunnel["url"], r.text
    r = mh.api("a", "GET", "/v1/sandboxes/mh-one/tunnels")
    assert [t["url"] for t in r.json()["tunnels"]] == [tunnel["url"]]
    for h in HOSTS:
        r = mh.via_host_header(h, tunnel["url"], "/hello.txt")
        assert r.status_code == 200 and r.content == b"hello from b\n", (h, r.status_code, r.text)
    print("mh-one lives on host %s; preview %s; tunnel %s" % (owner, preview, tunnel["url"]))


def test_tunnel_after_restart_is_new_and_the_same_everywhere(mh):
    old = mh.api("a", "GET", "/v1/sandboxes/mh-one/tunnels").json()["tunnels"][0]["url"]
    r = mh.api("c", "POST", "/v1/sandboxes/mh-one/restart")
    assert r.status_code == 200, r.text
    r = mh.data("a", "POST", "/v1/sandboxes/mh-one/processes",
                json={"id": "web", "command": "exec python3 -m http.server 8000 --bind 127.0.0.1"})
    assert r.status_code == 201, r.text
    r = mh.data("b", "GET", "/v1/sandboxes/mh-one/processes/web/wait?port=8000&timeoutMs=15000",
                timeout=20)
    assert r.status_code == 200, r.text
    urls = set()
    for h in ("a", "b", "c"):
        r = mh.api(h, "POST", "/v1/sandboxes/mh-one/tunnels/8000")
        assert r.status_code == 200, r.text
        urls.add(r.json()["url"])
    assert len(urls) == 1 and old not in urls
    new = urls.pop()
    for h in HOSTS:
        # a host's nginx may hold the old URL's preview check for < 2 s
        # (the route cache): 503 "retry" meanwhile, then 404
        deadline = time.monotonic() + 3
        while (code := mh.via_host_header(h, old, "/").status_code) == 503 and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        assert code == 404, (h, code)
        assert mh.via_host_header(h, new, "/").status_code == 200


def test_placement_spreads_across_hosts(mh):
    nodes = collections.Counter()
    ids = ["mh-spread-%d" % i for i in range(9)]
    for i, sid in enumerate(ids):
        nodes[put(mh, HOSTS[i % 3], sid)["node"]] += 1
    print("placement of 9 sandboxes:", dict(nodes))
    assert set(nodes) == set(mh.node.values()), dict(nodes)
    for i, sid in enumerate(ids):
        assert mh.api(HOSTS[(i + 1) % 3], "DELETE", "/v1/sandboxes/" + sid).status_code == 204


def test_cut_off_host_is_replaced_then_fenced(mh):
    sid = sandbox_on(mh, "c", "mh-cut")
    before = mh.record(sid)
    assert mh.exec_("b", sid, "echo mark > /workspace/mark; echo ok")["stdout"] == "ok\n"
    start_counter(mh, sid, mh.node["c"])
    # a call in flight across the cut, through another host's nginx
    flying = InFlight(mh, "a", sid, "sleep 4; echo late > /workspace/late; echo done")
    flying.start()
    time.sleep(1.0)

    # cut host c's cable
    t0 = time.monotonic()
    mh.ip("-n", mh.ns("lan"), "link", "set", "ve-c", "down")
    try:
        mh.wait("host c's liveness key to expire", lambda: not mh.node_alive("c"), timeout=15)
        t_down = time.monotonic() - t0
        # the next call through any live host re-places it
        out = mh.exec_("a", sid, "test -e /workspace/mark && echo old || echo new")
        assert out["stdout"] == "new\n"
        # the copy cut off with host c is frozen for the rest of the cut
        frozen_at = assert_frozen(mh.node["c"], sid)
        after = mh.record(sid)
        assert after["node"] != mh.node["c"]
        assert int(after["epoch"]) > int(before["epoch"])
        assert int(after["generation"]) == int(before["generation"]) + 1
        new_owner = mh.host_of[after["node"]]
        # the new owner refuses the old epoch (a stale API caller)
        r = mh.agent_call(new_owner, "POST", "/agent/v1/sandboxes/dev/%s/stop" % sid,
                          headers={"X-Sbx-Epoch": str(before["epoch"])})
        assert r.status_code == 409 and r.json()["error"]["code"] == "STALE_EPOCH", r.text
    finally:
        mh.ip("-n", mh.ns("lan"), "link", "set", "ve-c", "up")
    print("host c counted as down %.1fs after the cut" % t_down)

    # host c comes back: re-registers, finds its copy superseded, destroys it
    mh.wait("host c to be up again", lambda: mh.node_alive("c"), timeout=20)

    def fenced():
        r = mh.agent_call("c", "GET", "/agent/v1/sandboxes")
        assert r.status_code == 200
        return sid not in [s["id"] for s in r.json()["sandboxes"]]
    mh.wait("host c to drop its stale copy", fenced, timeout=20)
    mh.wait("the old copy's processes to be gone",
            lambda: not copy_procs(mh.node["c"], sid), timeout=20)
    flying.join(60)
    assert not flying.is_alive()
    print("call in flight across the cut: %r %s (counter stood at %d)" %
          (flying.status, (flying.error or flying.text)[:200], frozen_at))
    assert not flying.succeeded(), flying.text
    assert mh.exec_("a", sid, "test -e /workspace/late && echo yes || echo no")["stdout"] == "no\n"
    evs = [e for e in mh.events() if e.get("id") == sid]
    types = [e["type"] for e in evs]
    assert "replaced" in types, types
    assert "fenced" in types, types
    # and host c serves it again, from the new owner. Right after the link
    # comes back, a call through c may still answer 503 (retry) while c's
    # connections that died in the cut are found dead and re-made.
    retries = []

    def back():
        r = mh.api("c", "POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo back"})
        if r.status_code == 503:
            retries.append(r.json()["error"]["code"])
            return False
        assert r.status_code == 200, r.text
        return r.json()["stdout"] == "back\n"
    mh.wait("exec through host c after its return", back, timeout=10, interval=0.2)
    print("503s through host c after its return: %r" % retries)
    assert mh.record(sid)["node"] == after["node"]


def test_paused_agent_freezes_its_copy_and_fails_calls_in_flight(mh):
    """SIGSTOP host c's agent past its TTL while an exec (JSON) and an exec
    (SSE) run there; the sandbox is re-placed; the paused agent cannot act,
    so its fence keeper froze the old copy (freezer state, a counter loop
    that stands still); after SIGCONT neither call reports success and the
    old copy is destroyed."""
    node = mh.node["c"]
    sid = sandbox_on(mh, "c", "mh-stop")
    start_counter(mh, sid, node)
    calls = [InFlight(mh, "a", sid, "sleep 5; echo late > /workspace/late; echo done"),
             InFlight(mh, "b", sid, "sleep 5; echo done", sse=True)]
    for c in calls:
        c.start()
    time.sleep(1.0)
    with open(os.path.join(DIR, "c", "pids", "agent-1.pid")) as f:
        agent = int(f.read().strip())
    t0 = time.monotonic()
    os.kill(agent, signal.SIGSTOP)
    try:
        mh.wait("host c's liveness key to expire", lambda: not mh.node_alive("c"), timeout=15)
        out = mh.exec_("a", sid, "cat /workspace/n 2>/dev/null || echo none")
        assert out["stdout"] == "none\n", "re-placed on a fresh copy"
        assert mh.record(sid)["node"] != node
        frozen_at = assert_frozen(node, sid)
    finally:
        os.kill(agent, signal.SIGCONT)
    print("agent paused %.1fs; old counter frozen at %d" % (time.monotonic() - t0, frozen_at))
    for c in calls:
        c.join(60)
        assert not c.is_alive()
        print("in flight (%s): %r %s" % ("sse" if c.sse else "json", c.status,
                                         (c.error or c.text)[:300].replace("\n", " | ")))
        assert not c.succeeded(), c.text
    sse = calls[1]
    if sse.status == 200:
        assert "event: error" in sse.text and "NODE_UNAVAILABLE" in sse.text, sse.text
    if calls[0].status is not None and calls[0].status != 200:
        assert calls[0].status in (404, 409, 503), calls[0].text
    mh.wait("the old copy's processes to be gone", lambda: not copy_procs(node, sid), timeout=20)
    mh.wait("host c to be up again", lambda: mh.node_alive("c"), timeout=20)
    assert mh.exec_("a", sid, "test -e /workspace/late && echo yes || echo no")["stdout"] == "no\n"
    assert mh.api("a", "DELETE", "/v1/sandboxes/" + sid).status_code == 204


class Client(threading.Thread):
    """Loops over control and data requests until stopped. hosts: the hosts
    it may use, in order of preference per request (rotating); a request
    that gets no answer or 502/503 from one host is tried on the next."""

    def __init__(self, mh, sid, hosts):
        super().__init__(daemon=True)
        self.mh, self.sid, self.hosts = mh, sid, hosts
        self.stop = threading.Event()
        self.ok = self.retried = 0
        self.failures = []
        self.sessions = {h: requests.Session() for h in HOSTS}

    def one(self, host, i):
        if i % 2:
            r = self.mh.api(host, "GET", "/v1/sandboxes/" + self.sid, timeout=10,
                            session=self.sessions[host])
            good = r.status_code == 200 and r.json()["id"] == self.sid
        else:
            r = self.mh.api(host, "POST", "/v1/sandboxes/%s/exec" % self.sid,
                            json={"command": "echo %d" % i}, timeout=10,
                            session=self.sessions[host])
            good = r.status_code == 200 and r.json()["stdout"] == "%d\n" % i
        return r.status_code, good, r.text[:200]

    def run(self):
        i = 0
        while not self.stop.is_set():
            i += 1
            start = i % len(self.hosts)
            order = self.hosts[start:] + self.hosts[:start]
            last = None
            for n, h in enumerate(order):
                try:
                    status, good, text = self.one(h, i)
                except requests.RequestException as ex:
                    last = (h, repr(ex))
                    continue
                if good:
                    self.ok += 1
                    self.retried += n > 0
                    break
                last = (h, status, text)
                if status not in (502, 503):
                    break          # a real failure: no retry hides it
            else:
                self.failures.append(last)
                continue
            if last and not good:
                self.failures.append(last)


def test_rolling_restart_of_api_pools_loses_no_request(mh):
    put(mh, "a", "mh-roll")
    # 1. stop/start each host's sbx-api in turn; the client uses every host
    c = Client(mh, "mh-roll", list(HOSTS))
    c.start()
    time.sleep(0.5)
    for h in HOSTS:
        mh.hosts("stack", h, "restart", "api")
        mh.wait("host %s healthy" % h,
                lambda: requests.get(mh.url[h] + "/healthz", timeout=2).status_code == 200)
        time.sleep(0.5)
    c.stop.set()
    c.join(20)
    print("stop/start: %d requests ok, %d answered by another host, failures %r" %
          (c.ok, c.retried, c.failures[:5]))
    assert not c.failures
    assert c.ok > 50

    # 2. SIGHUP (graceful re-exec of the workers) of host a's pool, three
    # times, while a client uses host a only, without retries
    c = Client(mh, "mh-roll", ["a"])
    c.start()
    with open(os.path.join(DIR, "a", "pids", "api.pid")) as f:
        master = int(f.read().strip())
    for _ in range(3):
        time.sleep(0.7)
        os.kill(master, 1)
    time.sleep(1.0)
    c.stop.set()
    c.join(20)
    print("SIGHUP x3: %d requests ok, failures %r" % (c.ok, c.failures[:5]))
    assert not c.failures
    assert c.ok > 30


def test_redis_failover_to_a_promoted_replica(mh):
    """The hosts reach Redis at a service address (VIP) that moves to the
    promoted replica, as keepalived or a Sentinel-aware proxy would do. The
    replica is promoted before the primary dies, so the last acknowledged
    write (a restart) is lost: the epoch still grows (Redis TIME), the
    generation repeats."""
    rec0 = put(mh, "b", "mh-fo")
    assert mh.redis("WAIT", 1, 5000) == "1"
    r2 = mh.env["MH_ADDR_R2"]
    assert mh.redis("REPLICAOF", "NO", "ONE", host=r2) == "OK"
    # acknowledged by the primary only
    r = mh.api("a", "POST", "/v1/sandboxes/mh-fo/restart")
    assert r.status_code == 200, r.text
    rec1 = r.json()
    assert rec1["generation"] == rec0["generation"] + 1
    # the primary dies; the service address moves to the replica
    with open(os.path.join(DIR, "pids", "redis-r1.pid")) as f:
        os.kill(int(f.read().strip()), 9)
    mh.ip("-n", mh.ns("r1"), "addr", "del", mh.vip + "/24", "dev", "eth0")
    mh.ip("-n", mh.ns("r2"), "addr", "add", mh.vip + "/24", "dev", "eth0")
    for n in ("lan", "a", "b", "c", "r1", "r2"):   # what a gratuitous ARP does
        mh.ip("-n", mh.ns(n), "neigh", "flush", "all")
    t0 = time.monotonic()
    assert mh.redis("ROLE").splitlines()[0] == "master"

    def all_up():
        return all(mh.node_alive(h) and
                   requests.get(mh.url[h] + "/healthz", timeout=2).status_code == 200
                   for h in HOSTS)
    mh.wait("every host to reach the new primary", all_up, timeout=30)
    print("hosts healthy on the new primary %.1fs after the switch" % (time.monotonic() - t0))
    # A worker finds its Redis connection dead on its first call after the
    # switch: that call answers 503 REDIS_UNAVAILABLE (with Retry-After) and
    # the worker reconnects for the next one. Clients retry 503s.
    refused = collections.Counter()

    def answer(host, method, path, **kw):
        deadline = time.monotonic() + 10
        while True:
            r = mh.api(host, method, path, **kw)
            if r.status_code != 503 or time.monotonic() > deadline:
                return r
            refused[r.json()["error"]["code"]] += 1
            time.sleep(0.05)
    for h in HOSTS:
        for _ in range(12):     # more calls than each host has workers
            assert answer(h, "GET", "/v1/sandboxes/mh-fo").status_code == 200
    print("503s seen while the workers reconnected: %r" % dict(refused))
    lost = mh.record("mh-fo")
    assert lost["epoch"] == rec0["epoch"] and lost["generation"] == rec0["generation"]
    # The record lost the restart: it names the older epoch. The agent, which
    # has seen the newer one, either still refuses data calls carrying it
    # (503 "retry"), or its fencing sweep (it runs at once on the reconnect)
    # already found the record older than its copy, destroyed the copy and
    # set the record sleeping ("reset"), so the call woke a new container.
    r = mh.api("c", "POST", "/v1/sandboxes/mh-fo/exec", json={"command": "echo x"})
    print("exec after the failover, before a new start: %d %s" % (r.status_code, r.text.strip()))
    if r.status_code == 503:
        assert r.json()["error"]["code"] == "NODE_UNAVAILABLE", r.text
        assert r.headers.get("Retry-After"), r.headers
        r = mh.api("c", "POST", "/v1/sandboxes/mh-fo/restart")
        assert r.status_code == 200, r.text
        rec2 = r.json()
    else:
        assert r.status_code == 200 and r.json()["stdout"] == "x\n", r.text
        types = [e["type"] for e in mh.events() if e.get("id") == "mh-fo"]
        assert "reset" in types, types
        rec2 = mh.record("mh-fo")
    # the next start gets a higher epoch than any the agents have seen ...
    assert int(rec2["epoch"]) > int(rec1["epoch"])
    # ... but the generation of the lost write is handed out again
    assert rec2["generation"] == rec1["generation"]
    assert mh.exec_("a", "mh-fo", "echo ok")["stdout"] == "ok\n"
    # and PUT of an existing sandbox keeps working and creates nothing new
    assert put(mh, "a", "mh-fo")["epoch"] == rec2["epoch"]
    r = mh.api("b", "PUT", "/v1/sandboxes/mh-fo-new")
    assert r.status_code == 201, r.text


@contextlib.contextmanager
def deployment(dir_, env=None):
    """`hosts up` in dir_ (env: its environment), this thread in the lan
    namespace while it is used; the MH, then `hosts down` (unless SBX_KEEP=1)."""
    r = subprocess.run([HOSTS_SCRIPT, "up", "--dir", dir_], capture_output=True, text=True,
                       timeout=180, env=env)
    if r.returncode != 0:
        subprocess.run([HOSTS_SCRIPT, "down", "--dir", dir_], capture_output=True, timeout=120,
                       env=env)
        pytest.fail("hosts up failed:\n%s%s" % (r.stdout, r.stderr))
    orig = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        env_file = read_env(os.path.join(dir_, "env"))
        setns("/run/netns/%s-lan" % env_file["MH_PREFIX"])
        yield MH(env_file)
    finally:
        ctypes.CDLL(None, use_errno=True).setns(orig, CLONE_NEWNET)
        os.close(orig)
        if os.environ.get("SBX_KEEP") != "1":
            subprocess.run([HOSTS_SCRIPT, "down", "--dir", dir_], capture_output=True,
                           timeout=120, env=env)
