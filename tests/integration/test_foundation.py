"""Foundation: health, auth, routing errors, request ids, the node registry,
and the faults the stack must survive (agent, worker, Redis).

Every test leaves the stack as it found it (healthy, all agents up), so the
order of tests does not matter.
"""

import os
import re
import signal
import subprocess
import time

import pytest
import requests

from conftest import ROOT, api_run, assert_error, error_of
from sbxproc import children, scaled

SANDBOX_ID_OK = "a" * 63
BAD_IDS = ["{", "}", "ABC", "a" * 64, "a..b", "-a", "a-", "a_b", "a.b"]


def wall_ms(v):
    """A timestamp of the API (ms since the epoch, or ISO-8601 UTC) in ms."""
    if isinstance(v, int):
        return v
    import datetime
    assert isinstance(v, str) and v.endswith("Z"), "timestamp %r is neither ms nor ISO UTC" % v
    t = datetime.datetime.fromisoformat(v[:-1]).replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp() * 1000)


def nodes_by_name(stack):
    r = stack.api("GET", "/v1/nodes", key=stack.admin_key)
    assert r.status_code == 200, "GET /v1/nodes (admin): %d %r" % (r.status_code, r.text[:300])
    body = r.json()
    assert isinstance(body.get("nodes"), list), "expected {nodes:[...]}, got %r" % body
    return {n["name"]: n for n in body["nodes"]}


# ---- health and the shipped configuration ------------------------------------

def test_healthz(api):
    r = api("GET", "/healthz", key=None)
    assert r.status_code == 200, "healthz: %d %r" % (r.status_code, r.text)


def test_shipped_config_matches_the_table(stack):
    """conf/sbx.conf parses, and lists exactly the keys both binaries know."""
    def keys(binary):
        r = subprocess.run([os.path.join(stack.build, binary), "-c",
                            os.path.join(ROOT, "conf", "sbx.conf"), "--print-config"],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, "%s --print-config on conf/sbx.conf failed: %s" % (
            binary, r.stderr)
        out, section = set(), None
        for line in r.stdout.splitlines():
            m = re.match(r"^\[(\w+)\]$", line)
            if m:
                section = m.group(1)
            elif "=" in line:
                out.add("%s.%s" % (section, line.split("=", 1)[0].strip()))
        return out

    shipped, section = set(), None
    with open(os.path.join(ROOT, "conf", "sbx.conf")) as f:
        for line in f:
            m = re.match(r"^\[(\w+)\]", line)
            if m:
                section = m.group(1)
            m = re.match(r"^([a-z0-9_]+)\s*=", line)
            if m:
                shipped.add("%s.%s" % (section, m.group(1)))
    for binary in ("sbx-api", "sbx-agent"):
        known = keys(binary)
        assert known == shipped, "%s knows %s, conf/sbx.conf lists %s" % (
            binary, sorted(known - shipped), sorted(shipped - known))


# ---- authentication -----------------------------------------------------------

@pytest.mark.parametrize("auth", [None, "Bearer sbx_" + "0" * 40, "Bearer nonsense",
                                  "Basic Zm9vOmJhcg==", "Bearer "])
def test_unauthorized(api, auth):
    headers = {"Authorization": auth} if auth is not None else {}
    r = api("GET", "/v1/nodes", key=None, headers=headers)
    assert_error(r, 401, "UNAUTHORIZED")


def test_unauthorized_on_the_data_path(api):
    r = api("POST", "/v1/sandboxes/%s/exec" % SANDBOX_ID_OK, key=None, json={"command": "true"})
    assert_error(r, 401, "UNAUTHORIZED")
    r = api("POST", "/v1/sandboxes/%s/exec" % SANDBOX_ID_OK, key="sbx_" + "f" * 40,
            json={"command": "true"})
    assert_error(r, 401, "UNAUTHORIZED")


def test_new_tenant_key_authenticates(stack, new_key):
    key = new_key("it-tenant")
    r = stack.api("GET", "/healthz", key=key)
    assert r.status_code == 200
    # Not an admin: the node list is refused, but as 403, not 401.
    assert_error(stack.api("GET", "/v1/nodes", key=key), 403, "FORBIDDEN")


def test_keys_are_stored_hashed(stack, redis_cli):
    import hashlib
    digest = hashlib.sha256(stack.key.encode()).hexdigest()
    assert redis_cli("HGET", "sbx:apikey:" + digest, "tenant") == "dev", \
        "sbx:apikey:<sha256 of the key> must hold tenant dev"
    assert redis_cli("HGET", "sbx:apikey:" + digest, "admin") == "0"
    admin = hashlib.sha256(stack.admin_key.encode()).hexdigest()
    assert redis_cli("HGET", "sbx:apikey:" + admin, "admin") == "1"
    assert stack.key not in redis_cli("KEYS", "sbx:apikey:*"), "the raw key must not be stored"


# ---- routing errors ------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v1/nope", "/v1/sandboxes/x/nope/deeper", "/nope", "/",
                                  "/agent/v1/sandboxes"])
def test_unknown_route_is_404(api, path):
    assert_error(api("GET", path), 404, "NOT_FOUND")


@pytest.mark.parametrize("path", ["/_sbx_route", "/_sbx_error"])
def test_internal_locations_are_not_public(api, path):
    """The routing subrequests exist only inside nginx."""
    r = api("GET", path, headers={"X-Sbx-Status": "200", "X-Sbx-Code": "OK"})
    assert_error(r, 404, "NOT_FOUND")


def test_method_not_allowed(stack):
    r = stack.api("DELETE", "/v1/nodes", key=stack.admin_key)
    assert_error(r, 405, "METHOD_NOT_ALLOWED")
    allow = r.headers.get("Allow", "")
    assert "GET" in allow, "405 must carry an Allow header listing GET, got %r" % allow


def test_oversized_body_is_413(api):
    body = b"{" + b" " * (2 << 20) + b"}"
    r = api("PUT", "/v1/sandboxes/big", data=body, headers={"Content-Type": "application/json"})
    assert_error(r, 413, "PAYLOAD_TOO_LARGE")


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_sandbox_id_on_the_data_path(api, bad):
    r = api("POST", "/v1/sandboxes/%s/exec" % bad, json={"command": "true"})
    assert_error(r, 400, "VALIDATION_FAILED")


def test_dot_dot_id_never_reaches_a_sandbox(api):
    # nginx normalizes /v1/sandboxes/../exec to /v1/exec: a 4xx, never a 2xx or 5xx.
    r = api("POST", "/v1/sandboxes/../exec", json={"command": "true"})
    assert r.status_code in (400, 404), "got %d %r" % (r.status_code, r.text[:200])
    error_of(r)


def test_well_formed_unknown_sandbox_is_404(api):
    r = api("POST", "/v1/sandboxes/%s/exec" % SANDBOX_ID_OK, json={"command": "true"})
    assert_error(r, 404, "SANDBOX_NOT_FOUND")


def test_client_cannot_forge_the_routing_headers(api):
    """X-Sbx-* headers from a client change nothing on the data path."""
    forged = {"X-Sbx-Agent": "127.0.0.1:1", "X-Sbx-Tenant": "other", "X-Sbx-Epoch": "999",
              "X-Sbx-Status": "200", "X-Sbx-Code": "OK", "X-Sbx-Internal": "1"}
    r = api("POST", "/v1/sandboxes/%s/exec" % SANDBOX_ID_OK, json={"command": "true"},
            headers=forged)
    assert_error(r, 404, "SANDBOX_NOT_FOUND")
    r = api("POST", "/v1/sandboxes/%s/exec" % SANDBOX_ID_OK, key=None, headers=forged)
    assert_error(r, 401, "UNAUTHORIZED")


@pytest.mark.parametrize("body", [b"{", b"[1,2", b"{\"labels\":", b"\xff\xfe", b"nul\x00l"])
def test_malformed_json_is_400(api, body):
    r = api("PUT", "/v1/sandboxes/it-malformed", data=body,
            headers={"Content-Type": "application/json"})
    assert_error(r, 400, "VALIDATION_FAILED")


def test_unknown_field_is_400(api):
    r = api("PUT", "/v1/sandboxes/it-unknown-field", json={"bogus": 1})
    assert_error(r, 400, "VALIDATION_FAILED")


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_sandbox_id_on_the_control_path(api, bad):
    r = api("PUT", "/v1/sandboxes/%s" % bad, json={})
    assert_error(r, 400, "VALIDATION_FAILED")


# ---- request ids ----------------------------------------------------------------

@pytest.mark.parametrize("method,path,auth", [
    ("GET", "/healthz", False), ("GET", "/v1/nodes", False), ("GET", "/nope", True),
    ("GET", "/v1/nope", True), ("DELETE", "/v1/nodes", True),
    ("POST", "/v1/sandboxes/ABC/exec", True), ("POST", "/v1/sandboxes/%s/exec" % SANDBOX_ID_OK, True),
])
def test_request_id_on_every_answer(stack, method, path, auth):
    key = stack.admin_key if auth else None
    r = stack.api(method, path, key=key)
    rid = r.headers.get("X-Request-Id", "")
    assert re.match(r"^[A-Za-z0-9._-]{1,128}$", rid), \
        "%s %s (%d) has no usable X-Request-Id: %r" % (method, path, r.status_code, rid)
    sent = "it-%d.abc_X" % time.monotonic_ns()
    r = stack.api(method, path, key=key, headers={"X-Request-Id": sent})
    assert r.headers.get("X-Request-Id") == sent, "%s %s: sent %r, got %r" % (
        method, path, sent, r.headers.get("X-Request-Id"))
    assert r.headers.get("X-Request-Id", "").count(",") == 0, "X-Request-Id added twice"


def test_request_id_on_413(api):
    r = api("PUT", "/v1/sandboxes/big", data=b" " * (2 << 20), headers={"X-Request-Id": "big-1"})
    assert r.status_code == 413
    assert r.headers.get("X-Request-Id") == "big-1"


@pytest.mark.parametrize("bad", ["has space", "a/b", "x" * 129, "\u00e9t\u00e9".encode("utf-8")])
def test_unsafe_request_id_is_replaced(api, bad):
    r = api("GET", "/healthz", key=None, headers={"X-Request-Id": bad})
    rid = r.headers.get("X-Request-Id", "")
    assert rid and rid != bad and re.match(r"^[A-Za-z0-9._-]{1,128}$", rid), \
        "an unsafe X-Request-Id must be replaced by nginx's own, got %r" % rid


# ---- the node registry ------------------------------------------------------------

def test_nodes_registered(stack, redis_cli):
    nodes = stack.wait("both agents up in /v1/nodes", lambda: (
        lambda n: n if all(n.get("agent-%d" % i, {}).get("state") == "up"
                           for i in (1, 2)) else None)(nodes_by_name(stack)))
    for i in (1, 2):
        name = "agent-%d" % i
        n = nodes[name]
        assert n["address"] == stack.env["SBX_AGENT_%d" % i], "%s: address %r" % (name, n)
        for field in ("capacity", "load", "sandboxes", "lastHeartbeat"):
            assert field in n, "%s lacks %s: %r" % (name, field, n)
        assert abs(wall_ms(n["lastHeartbeat"]) - time.time() * 1000) < 10000, \
            "stale lastHeartbeat %r" % n
    members = set(redis_cli("SMEMBERS", "sbx:nodes").split())
    assert {"agent-1", "agent-2"} <= members, "sbx:nodes = %r" % members
    for i in (1, 2):
        h = redis_cli("HGET", "sbx:node:{agent-%d}" % i, "address")
        assert h == stack.env["SBX_AGENT_%d" % i], "sbx:node:{agent-%d}.address = %r" % (i, h)
        pttl = int(redis_cli("PTTL", "sbx:node:{agent-%d}:alive" % i))
        assert 0 < pttl <= 3000, "alive key must carry PX = node_ttl (3s), PTTL %d" % pttl


def test_nodes_needs_admin(api):
    assert_error(api("GET", "/v1/nodes"), 403, "FORBIDDEN")


def test_agent_refuses_requests_without_the_node_secret(stack):
    import requests
    addr = stack.env["SBX_AGENT_1"]
    for headers in ({}, {"X-Sbx-Node-Secret": "wrong"},
                    {"X-Sbx-Node-Secret": stack.secret + "x"}):
        r = requests.get("http://%s/agent/v1/sandboxes" % addr, headers=headers, timeout=5)
        assert_error(r, 401, "UNAUTHORIZED")
    r = requests.get("http://%s/agent/v1/sandboxes" % addr,
                     headers={"X-Sbx-Node-Secret": stack.secret}, timeout=5)
    assert r.status_code == 200, "with the secret: %d %r" % (r.status_code, r.text[:200])
    assert isinstance(r.json().get("sandboxes"), list)


def test_every_agent_route_needs_the_node_secret(stack):
    """Every row of the agent's route table (and its health path), straight
    at the agent without the secret: 401 UNAUTHORIZED."""
    import requests
    from test_docs import table_routes
    addr = stack.env["SBX_AGENT_1"]
    tried = 0
    for (method, path), where in sorted(table_routes().items()):
        if method == "*" or where.startswith("fcgi/"):
            continue
        url = "http://%s%s" % (addr, re.sub(r"\{\}", "x", path))
        r = requests.request(method, url, data=b"{}", timeout=5)
        assert_error(r, 401, "UNAUTHORIZED")
        tried += 1
    assert tried > 30, tried


# ---- faults -------------------------------------------------------------------------

def test_killed_agent_goes_down_after_ttl(stack):
    name = "agent-2"
    pid = stack.pid(name)
    try:
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        stack.wait("%s to show as down in /v1/nodes" % name,
                   lambda: nodes_by_name(stack).get(name, {}).get("state") == "down",
                   timeout=10)
        took = time.monotonic() - t0
        assert took > 1.0, "%s went down after %.1fs: before the TTL (3s)?" % (name, took)
        assert stack.redis_cli("EXISTS", "sbx:node:{%s}:alive" % name) == "0"
        # The other node is not affected.
        assert nodes_by_name(stack)["agent-1"]["state"] == "up"
    finally:
        stack.run("restart-agent", "2")
        stack.wait_healthy()
    assert nodes_by_name(stack)[name]["state"] == "up"


# A clean agent stop: tests/integration/test_node_stop.py.


def test_killed_api_worker_is_survived(stack, api):
    master = stack.pid("api")
    workers = stack.wait("sbx-api workers", lambda: children(master), timeout=5)
    n = len(workers)
    os.kill(workers[0], signal.SIGKILL)
    for i in range(20):
        r = api("GET", "/healthz", key=None)
        assert r.status_code == 200, "request %d after killing a worker: %d %r" % (
            i, r.status_code, r.text[:200])
        r = stack.api("GET", "/v1/nodes", key=stack.admin_key)
        assert r.status_code == 200, "request %d after killing a worker: %d %r" % (
            i, r.status_code, r.text[:200])
    stack.wait("the master to replace the killed worker (%d workers)" % n,
               lambda: len(children(master)) == n and workers[0] not in children(master),
               timeout=5)


def listener_paths():
    """{socket inode: path} of the unix sockets with a path (/proc/net/unix)."""
    out = {}
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            parts = line.split()
            if len(parts) >= 8:
                out[parts[6]] = parts[7]
    return out


def worker_pool(pid, paths):
    """The socket path of the pool worker pid listens on, or None."""
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m and paths.get(m.group(1), "").endswith(("/api.sock", "/route.sock")):
            return os.path.basename(paths[m.group(1)])
    return None


def test_routing_checks_have_workers_of_their_own(stack, api):
    """With every worker of the control pool stopped (as a burst of creates
    holds them all), a data call on a sandbox nginx has no cached decision
    for, and the refusal of an unknown one, are still decided: by the
    routing checks' own workers (api.route_listen)."""
    sid, _ = stack.create("route-pool")
    master = stack.pid("api")
    paths = listener_paths()
    pools = {}
    for pid in stack.wait("sbx-api workers", lambda: children(master), timeout=5):
        pools.setdefault(worker_pool(pid, paths), []).append(pid)
    assert len(pools.get("route.sock", [])) == int(stack.conf_value("api", "route_workers")), pools
    assert pools.get("api.sock"), pools
    try:
        for pid in pools["api.sock"]:
            os.kill(pid, signal.SIGSTOP)
        # the control pool really answers nothing now
        with pytest.raises(requests.exceptions.Timeout):
            api("GET", "/healthz", key=None, timeout=1.5)
        r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid,
                      json={"argv": ["/bin/echo", "routed"]}, timeout=scaled(10))
        assert r.status_code == 200 and r.json()["stdout"] == "routed\n", r.text[:300]
        r = stack.api("POST", "/v1/sandboxes/%s-none/exec" % sid,
                      json={"argv": ["/bin/true"]}, timeout=scaled(10))
        assert_error(r, 404, "SANDBOX_NOT_FOUND")
    finally:
        for pid in pools["api.sock"]:
            os.kill(pid, signal.SIGCONT)
    r = stack.api("DELETE", "/v1/sandboxes/" + sid)
    assert r.status_code in (200, 204), r.text


def voluntary_switches(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(next(l for l in f if l.startswith("voluntary_ctxt_switches")).split()[1])


def test_a_new_connection_wakes_one_idle_worker(stack, api):
    """The workers of a pool wait on one listener; a connection wakes one
    of them, not every idle one (EPOLLEXCLUSIVE): a refused data call, two
    connections to the route pool (the check, its error page), wakes at
    most two of its workers. Each worker also wakes once a second on its
    own, so a trial may catch one such tick: most trials must hold."""
    master = stack.pid("api")
    paths = listener_paths()
    route = [pid for pid in children(master) if worker_pool(pid, paths) == "route.sock"]
    assert len(route) == int(stack.conf_value("api", "route_workers")) >= 3, route
    url = "/v1/sandboxes/%s/exec" % SANDBOX_ID_OK
    assert_error(api("POST", url, json={"command": "true"}), 404, "SANDBOX_NOT_FOUND")
    woke = []
    for _ in range(10):
        before = {pid: voluntary_switches(pid) for pid in route}
        assert_error(api("POST", url, json={"command": "true"}), 404, "SANDBOX_NOT_FOUND")
        woke.append(sum(voluntary_switches(pid) > n for pid, n in before.items()))
    assert sum(n <= 2 for n in woke) >= 7, "route workers woken per refused call: %s" % woke


def test_bad_route_pool_settings_are_refused(tmp_path):
    """sbx-api refuses one address for both pools (the checks would queue
    behind control calls again) and a route pool of no worker; a route
    address of no usable form stops the start, naming its key, and leaves
    no socket of the other pool behind."""
    r = api_run("api.route_listen=unix:/run/sbx-api/api.sock")
    assert r.returncode != 0, r.stdout
    assert "api.route_listen" in r.stderr and "address of their own" in r.stderr, r.stderr
    for bad in ("0", "65", "two"):
        r = api_run("api.route_workers=" + bad)
        assert r.returncode != 0 and "api.route_workers" in r.stderr, (bad, r.stderr)
    sock = tmp_path / "api.sock"
    for bad in ("nonsense", "unix:relative.sock"):
        r = api_run("redis.url=redis://127.0.0.1:1", "api.listen=unix:%s" % sock,
                    "api.route_listen=" + bad, "api.metrics_listen=", args=())
        assert r.returncode == 1, (bad, r.stderr)
        assert "api.route_listen '%s'" % bad in r.stderr, r.stderr
        assert not sock.exists(), "api.sock left behind"


def test_redis_down_is_503_fast_and_recovers(stack, api):
    try:
        stack.run("stop", "redis")
        for path, key in (("/healthz", None), ("/v1/nodes", stack.admin_key),
                          ("/v1/sandboxes/%s/exec" % SANDBOX_ID_OK, stack.key)):
            t0 = time.monotonic()
            method = "POST" if path.endswith("/exec") else "GET"
            r = stack.api(method, path, key=key)
            took = time.monotonic() - t0
            assert_error(r, 503, "REDIS_UNAVAILABLE")
            assert took < scaled(2.0), "%s took %.2fs with Redis down (must fail fast)" % (path, took)
    finally:
        stack.run("start", "redis")
    stack.wait("healthz 200 after Redis is back",
               lambda: api("GET", "/healthz", key=None, timeout=2).status_code == 200)
    stack.wait_healthy()
    r = stack.api("GET", "/v1/nodes", key=stack.admin_key)
    assert r.status_code == 200, "after Redis came back: %d %r" % (r.status_code, r.text[:200])


def test_api_pool_down_is_503_json(stack, api):
    """With sbx-api gone, nginx itself answers 503 JSON with Retry-After,
    on the control path and on the data path (whose routing subrequest fails)."""
    try:
        stack.run("stop", "api")
        for method, path in (("GET", "/healthz"), ("GET", "/v1/nodes"),
                             ("POST", "/v1/sandboxes/%s/exec" % SANDBOX_ID_OK)):
            r = api(method, path)
            assert_error(r, 503, "NODE_UNAVAILABLE")
            assert r.headers.get("Retry-After") == "1", "%s: no Retry-After" % path
            assert r.headers.get("X-Request-Id"), "%s: no X-Request-Id" % path
    finally:
        stack.run("start", "api")
    stack.wait_healthy()


@pytest.mark.parametrize("where", ["uri", "header"])
def test_oversized_request_line_or_header_is_json_400(stack, where):
    big = "a" * 20000
    if where == "uri":
        r = stack.api("GET", "/v1/" + big)
    else:
        r = stack.api("GET", "/healthz", headers={"X-Big": big})
    assert_error(r, 400, "VALIDATION_FAILED")
    assert r.headers.get("X-Request-Id"), "no X-Request-Id on the 400"


def test_unparsable_request_is_json_400(stack):
    import socket
    from urllib.parse import urlsplit
    u = urlsplit(stack.url)
    with socket.create_connection((u.hostname, u.port), timeout=5) as s:
        s.sendall(b"GARBAGE\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), "got %r" % data[:200]
    assert b'"code":"VALIDATION_FAILED"' in body, "got %r" % body
