"""What a preview app cannot do through nginx and the agent's forwarders
(docs/SECURITY.md "Preview URLs and forwarders"): steer nginx with
X-Accel-* headers, show our X-Sbx-* headers to a client, set cookies for
other previews, be reached without the node secret, or hold an unbounded
number of the agent's connections.

The app runs inside a sandbox (python3 from the host's /usr), as in
test_ports.py.
"""

import json
import os
import re
import resource
import socket
import subprocess
import time

import pytest
import requests

from conftest import ROOT, assert_error, stack_down, stack_up
from test_ports import agent_forwards, expose, host_of, make_sandbox, via, wait_serving

APP = r'''
import http.server, json, socketserver, sys, time

DOMAIN = sys.argv[2]

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self, status, data, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/who":
            with open("/workspace/who", "rb") as f:
                self.body(200, f.read())
        elif self.path == "/headers":
            self.body(200, json.dumps({k.lower(): v for k, v in self.headers.items()}).encode())
        elif self.path == "/accel":
            self.body(200, b"app-body\n", [
                ("X-Accel-Redirect", "/_sbx_preview"),
                ("X-Accel-Buffering", "yes"),
                ("X-Accel-Expires", "60"),
                ("X-Accel-Limit-Rate", "1"),
                ("X-Accel-Charset", "koi8-r"),
                ("X-Sbx-Forward", "10.9.9.9:1"),
                ("X-Sbx-Agent", "10.9.9.9:2"),
                ("X-Sbx-Tenant", "other"),
                ("X-Sbx-Node-Secret", "leak"),
                ("X-Sbx-Status", "200"),
                ("X-Sbx-Code", "OK"),
                ("X-Sbx-Message", "hi"),
                ("X-Sbx-Epoch", "1"),
                ("X-Sbx-Generation", "1"),
                ("X-Sbx-Internal", "1"),
                ("X-App", "kept")])
        elif self.path == "/cookie":
            self.body(200, b"cookies\n", [
                ("Set-Cookie", "s=1; Domain=%s; Path=/" % DOMAIN),
                ("Set-Cookie", "t=2; path=/; domain=.%s; HttpOnly" % DOMAIN),
                ("Set-Cookie", "u=3; Path=/")])
        elif self.path == "/hold":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"held\n")
            self.wfile.flush()
            # Until the client goes (a write then fails), at most 60 s.
            try:
                for _ in range(200):
                    time.sleep(0.3)
                    self.wfile.write(b".")
                    self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True
        else:
            self.body(200, b"app-body\n")

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''

PORT = 8100


def start(st, sid, key=None):
    kw = {} if key is None else {"key": key}
    make_sandbox(st.api, sid, key=key)
    r = st.api("POST", "/v1/sandboxes/%s/exec" % sid,
               json={"command": "cat > /workspace/edge.py && echo %s > /workspace/who" % sid,
                     "stdin": APP}, **kw)
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    r = st.api("POST", "/v1/sandboxes/%s/processes" % sid,
               json={"command": "python3 /workspace/edge.py %d %s" % (
                   PORT, st.env["SBX_PREVIEW_DOMAIN"])}, **kw)
    assert r.status_code == 201, r.text
    p = expose(lambda *a, **k: st.api(*a, **dict(kw, **k)), sid, PORT)
    wait_serving(st, p["url"], "/headers")
    return p


def raw(address, request, timeout=5):
    """Send request bytes to host:port (or unix:path), return everything
    read until EOF."""
    if address.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(address[5:])
    else:
        host, port = address.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=timeout)
    with s:
        s.sendall(request)
        out = b""
        while True:
            data = s.recv(65536)
            if not data:
                return out
            out += data


def test_app_cannot_steer_nginx_or_show_our_headers(stack):
    p = start(stack, "edge-accel")
    r = via(stack, p["url"], "/accel")
    assert r.status_code == 200 and r.text == "app-body\n", (r.status_code, r.text[:300])
    assert r.headers["X-App"] == "kept"
    leaked = [k for k in r.headers if k.lower().startswith(("x-accel-", "x-sbx-"))]
    assert not leaked, leaked


def test_cookie_domain_is_removed(stack):
    p = start(stack, "edge-cookie")
    r = via(stack, p["url"], "/cookie")
    assert r.status_code == 200
    cookies = r.raw.headers.getlist("Set-Cookie")
    host = host_of(p["url"]).split(":")[0]
    assert cookies == ["s=1; Domain=%s; Path=/" % host, "t=2; path=/; domain=%s; HttpOnly" % host,
                       "u=3; Path=/"], cookies
    # The preview domain (and any parent of the host) is never set.
    assert stack.env["SBX_PREVIEW_DOMAIN"] not in ";".join(cookies).replace(host, "")


def test_forwarder_needs_the_node_secret(stack):
    p = start(stack, "edge-direct")
    [fwd] = [f for f in agent_forwards(stack, "edge-direct") if f["port"] == PORT]
    req = b"GET /headers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n"
    for extra in (b"", b"X-Sbx-Node-Secret: wrong\r\n",
                  b"X-Sbx-Node-Secret: " + stack.secret.encode() + b"x\r\n"):
        out = raw(fwd["address"], req % extra)
        head, _, body = out.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401 "), out[:300]
        assert json.loads(body)["error"]["code"] == "UNAUTHORIZED"
        assert b"app-body" not in out and b"x-forwarded" not in out
    # A refused client that goes on sending is cut off after a bounded drain.
    host, port = fwd["address"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
        sent, chunk = 0, b"x" * 65536
        with pytest.raises(OSError):
            while sent < 64 * 1024 * 1024:
                s.sendall(chunk)
                sent += len(chunk)
        assert sent < 64 * 1024 * 1024
    # With it, the app answers, and never sees the secret.
    out = raw(fwd["address"], req % (b"X-Sbx-Node-Secret: " + stack.secret.encode() + b"\r\n"))
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), out[:300]
    assert not any(k.startswith("x-sbx-") for k in json.loads(body)), body
    # Through nginx the preview works as ever.
    r = via(stack, p["url"], "/headers")
    assert r.status_code == 200 and not any(k.startswith("x-sbx-") for k in r.json())


# ---- caps on forwarded connections ------------------------------------------

CAPS = {"sandbox": 2, "tenant": 3, "node": 4}


@pytest.fixture(scope="module")
def capped():
    st = stack_up(agents=1, overrides=[
        "agent.max_forward_conns_per_sandbox=%d" % CAPS["sandbox"],
        "agent.max_forward_conns_per_tenant=%d" % CAPS["tenant"],
        "agent.max_forward_conns=%d" % CAPS["node"]])
    try:
        yield st
    finally:
        stack_down(st)


def hold(st, url):
    """A preview request the app keeps open; the streaming response."""
    r = requests.get(st.url + "/hold", headers={"Host": host_of(url)}, stream=True, timeout=10)
    if r.status_code == 200:
        assert r.raw.readline() == b"held\n"
    return r


def counts(st, sid, tenant="dev"):
    addr = st.env["SBX_AGENT_1"]
    r = requests.get("http://%s/agent/v1/sandboxes/%s/%s/forwards" % (addr, tenant, sid),
                     headers={"X-Sbx-Node-Secret": st.secret}, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()["connections"]


def refused(r, scope):
    err = assert_error(r, 503, "NO_CAPACITY")
    assert r.headers.get("Retry-After") == "1"
    assert err["details"] == {"scope": scope, "limit": CAPS[scope]}, err


def test_connections_are_capped_per_sandbox_tenant_and_node(capped):
    other = capped.new_key("edge-other")
    a = start(capped, "cap-a")
    b = start(capped, "cap-b")
    c = start(capped, "cap-c", key=other)
    held = []
    try:
        held += [hold(capped, a["url"]) for _ in range(CAPS["sandbox"])]
        assert all(r.status_code == 200 for r in held)
        refused(hold(capped, a["url"]), "sandbox")
        n = counts(capped, "cap-a")
        assert n["sandbox"] == {"open": 2, "limit": 2}
        assert n["tenant"] == {"open": 2, "limit": 3}
        assert n["node"]["open"] == 2 and n["node"]["limit"] == 4

        held.append(hold(capped, b["url"]))
        assert held[-1].status_code == 200
        refused(hold(capped, b["url"]), "tenant")

        held.append(hold(capped, c["url"]))
        assert held[-1].status_code == 200
        refused(hold(capped, c["url"]), "node")
        assert counts(capped, "cap-c", tenant="edge-other")["node"]["open"] == 4
    finally:
        for r in held:
            r.close()
    # Once they are closed, there is room again.
    capped.wait("the held connections to close",
                lambda: counts(capped, "cap-a")["node"]["open"] == 0)
    r = via(capped, a["url"], "/")
    assert r.status_code == 200 and r.text == "app-body\n"


# ---- the preview gateway (on the 1-agent stack: one node, one gateway) -------

GW_APPS = {}


def gw_app(st, sid):
    """start(), once per sandbox of these tests."""
    if sid not in GW_APPS:
        GW_APPS[sid] = start(st, sid)
    return GW_APPS[sid]


def gateway(st):
    return counts(st, "gw-a")["gateway"]


def target_of(st, sid, tenant="dev"):
    rec = json.loads(st.redis_cli("HGET", "sbx:sb:{%s/%s}:ports" % (tenant, sid), str(PORT)))
    assert rec["gateway"] == st.env["SBX_GATEWAY_1"], rec
    return "%s/%s/%d/%d" % (tenant, sid, rec["generation"], PORT)


def test_gateway_serves_previews_of_two_sandboxes_over_kept_connections(capped):
    """nginx keeps its connections to the node's gateway: requests for two
    sandboxes, alternating on one client connection, each get their own
    app's answer, and the gateway accepts (almost) no new connection."""
    a, b = gw_app(capped, "gw-a"), gw_app(capped, "gw-b")
    s = requests.Session()
    for _ in range(3):   # nginx's worker has its kept connection now
        assert s.get(capped.url + "/who", headers={"Host": host_of(a["url"])}, timeout=5).ok
    before = gateway(capped)
    for i in range(10):
        sid, p = ("gw-a", a) if i % 2 == 0 else ("gw-b", b)
        r = s.get(capped.url + "/who", headers={"Host": host_of(p["url"])}, timeout=5)
        assert r.status_code == 200 and r.text == sid + "\n", (i, r.status_code, r.text[:200])
    after = gateway(capped)
    assert after["requests"] - before["requests"] == 10, (before, after)
    # One client connection is one nginx worker, which reuses its own.
    assert after["accepted"] - before["accepted"] <= 1, (before, after)
    assert after["kept"] >= 1, after


def test_client_cannot_steer_the_gateway(capped):
    """A client's own X-Sbx-Target (or secret) never reaches the gateway:
    nginx sets the target of the host's check, or none. Straight at the
    gateway, a request needs the node secret and one well-formed target of
    a forwarded port."""
    a, b = gw_app(capped, "gw-a"), gw_app(capped, "gw-b")
    forged = target_of(capped, "gw-b")
    for hdrs in ({"X-Sbx-Target": forged},
                 {"X-Sbx-Target": forged, "X-Sbx-Node-Secret": "guess"},
                 # Not sent to the gateway (a body): the forwarder of a's port.
                 {"X-Sbx-Target": forged, "Content-Length": "0"}):
        r = requests.get(capped.url + "/who", headers=dict(hdrs, Host=host_of(a["url"])),
                         timeout=5)
        assert r.status_code == 200 and r.text == "gw-a\n", (hdrs, r.text[:200])
    r = via(capped, a["url"], "/headers")
    assert r.status_code == 200 and not any(k.startswith("x-sbx-") for k in r.json()), r.text
    gw = capped.env["SBX_GATEWAY_1"]
    req = b"GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n"
    secret = b"X-Sbx-Node-Secret: " + capped.secret.encode() + b"\r\n"
    cases = [
        (b"X-Sbx-Target: " + forged.encode() + b"\r\n", 401, "UNAUTHORIZED"),
        (secret, 400, "VALIDATION_FAILED"),
        (secret + b"X-Sbx-Target: " + forged.encode() + b"\r\nX-Sbx-Target: " +
         target_of(capped, "gw-a").encode() + b"\r\n", 400, "VALIDATION_FAILED"),
        (secret + b"X-Sbx-Target: dev/gw-b/1/9\r\n", 503, "NODE_UNAVAILABLE"),
        (secret + b"X-Sbx-Target: " + forged.encode() + b"\r\nContent-Length: 2\r\n", 400,
         "VALIDATION_FAILED"),
    ]
    for extra, status, code in cases:
        out = raw(gw, req % extra)
        head, _, body = out.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d " % status), (extra, out[:300])
        assert json.loads(body)["error"]["code"] == code, body
        assert b"edge-gw" not in body
    # With both, the gateway serves that sandbox (and the target goes no further).
    out = raw(gw, req % (secret + b"X-Sbx-Target: " + forged.encode() + b"\r\n"))
    assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(b"\r\n\r\ngw-b\n"), out[:300]
    # Its unix socket (this host's nginx uses it) asks for the same.
    sock = "unix:" + os.path.join(capped.dir, "run", "gateway-1.sock")   # deploy/stack
    with open(os.path.join(capped.dir, "conf", "sbx-agents.conf")) as f:
        assert "server %s max_fails=0;" % sock in f.read()
    out = raw(sock, req % (b"X-Sbx-Target: " + forged.encode() + b"\r\n"))
    assert out.startswith(b"HTTP/1.1 401 "), out[:300]
    out = raw(sock, req % (secret + b"X-Sbx-Target: " + forged.encode() + b"\r\n"))
    assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(b"\r\n\r\ngw-b\n"), out[:300]


def lowest_free_fd(pid):
    used = {int(n) for n in os.listdir("/proc/%d/fd" % pid)}
    return min(set(range(len(used) + 1)) - used)


def test_out_of_fds_is_no_capacity(capped):
    """An accept that fails for want of fds (EMFILE) answers 503 NO_CAPACITY
    (the node's limit), not NODE_UNAVAILABLE, and serving resumes after."""
    a = gw_app(capped, "gw-a")
    pid = capped.pid("agent-1")
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    req = b"GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    got = None
    try:
        # The agent's next fd is over the limit (retried if one of its fds
        # closed meanwhile and the accept got that number).
        for _ in range(5):
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest_free_fd(pid), hard))
            got = raw(capped.env["SBX_GATEWAY_1"], req)
            if not got.startswith(b"HTTP/1.1 401 "):
                break
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), got[:300]
    err = json.loads(body)["error"]
    assert err["code"] == "NO_CAPACITY" and "file descriptors" in err["message"], err
    assert b"Retry-After: 1" in head
    r = via(capped, a["url"], "/who")
    assert r.status_code == 200 and r.text == "gw-a\n"


def test_agents_gen_lists_the_gateway_from_the_registry(capped):
    """sbx-agents-gen --redis gives the node's gateway a kept-alive upstream
    of its own, as the dev stack's file does (docs/DEPLOY.md)."""
    gen = os.path.join(ROOT, "deploy", "nginx", "sbx-agents-gen")
    r = subprocess.run([gen, "--redis", "-h", "127.0.0.1", "-p", str(capped.redis_port)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    for addr in (capped.env["SBX_AGENT_1"], capped.env["SBX_GATEWAY_1"]):
        assert "server %s max_fails=0;" % addr in r.stdout, r.stdout
        assert re.search(r'"%s"\s+sbx_node_\d+;' % re.escape(addr), r.stdout), r.stdout
