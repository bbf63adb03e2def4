"""Ports, preview URLs and tunnels, through nginx (docs/API.md "Ports and
preview URLs", "Tunnels").

Preview and tunnel hosts are sent as the Host header to the stack's nginx on
127.0.0.1 (the dev stack serves *.preview.localhost). The servers inside the
sandboxes are started as background processes (python3 from the host's /usr).
"""

import concurrent.futures
import time
import urllib.parse

import pytest
import requests

from conftest import assert_error

APP = r'''
import base64, hashlib, http.server, json, socketserver, sys, time

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_body(self, status, ctype, body):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/headers":
            body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
            self.send_body(200, "application/json", body)
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/elsewhere?x=1")
            self.send_header("Set-Cookie", "a=1; Path=/")
            self.send_header("Set-Cookie", "b=2; Path=/; HttpOnly")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"data: first\n\n")
            self.wfile.flush()
            time.sleep(3)
            self.wfile.write(b"data: second\n\n")
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/ws":
            key = self.headers["Sec-WebSocket-Key"]
            acc = base64.b64encode(hashlib.sha1(
                (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", acc)
            self.end_headers()
            self.wfile.flush()
            while True:
                h = self.rfile.read(2)
                if len(h) < 2:
                    break
                op, n = h[0] & 0x0F, h[1] & 0x7F
                if n == 126:
                    n = int.from_bytes(self.rfile.read(2), "big")
                elif n == 127:
                    n = int.from_bytes(self.rfile.read(8), "big")
                mask = self.rfile.read(4) if h[1] & 0x80 else b"\0\0\0\0"
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
                if op == 8:
                    self.wfile.write(b"\x88\x00")
                    self.wfile.flush()
                    break
                hdr = bytes([0x80 | op, n]) if n < 126 else bytes([0x80 | op, 126]) + n.to_bytes(2, "big")
                self.wfile.write(hdr + data)
                self.wfile.flush()
            self.close_connection = True
        else:
            self.send_body(404, "text/plain", b"no such page\n")

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def nginx_port(stack):
    return urllib.parse.urlsplit(stack.url).port


# nginx keeps an allowed preview decision for 1 s (< 2 s: conf/nginx.conf,
# /_sbx_preview): a revoke, restart, sleep or destroy shows within that
# bound; until then the old forwarder answers or, once it is closed, 503
# NODE_UNAVAILABLE ("retry").
PREVIEW_CACHE_S = 2.0


def settled(stack, url, status, code=None, path="/"):
    """The answer of url once nginx's cached decision has expired: asked
    until its status is status (one or a tuple), at the latest by a request
    sent after the bound; asserted to be that (and the error code)."""
    want = status if isinstance(status, tuple) else (status,)
    deadline = time.monotonic() + PREVIEW_CACHE_S + 0.2
    while True:
        late = time.monotonic() > deadline
        r = via(stack, url, path)
        if r.status_code in want or late:
            if code:
                return assert_error(r, status, code)
            assert r.status_code in want, (r.status_code, r.text[:300])
            return r
        time.sleep(0.1)


def host_of(url):
    """The Host header (host:port) of a preview or tunnel URL."""
    return urllib.parse.urlsplit(url).netloc


def via(stack, url, path="/", method="GET", **kw):
    """A request to a preview/tunnel URL: to nginx on 127.0.0.1, Host from the URL."""
    headers = dict(kw.pop("headers", {}))
    headers["Host"] = host_of(url)
    return requests.request(method, stack.url + path, headers=headers, timeout=10,
                            allow_redirects=False, **kw)


CREATED = []   # (sid, key) of every sandbox this module made


@pytest.fixture(scope="module", autouse=True)
def _cleanup(stack):
    """The module's sandboxes go at its end: later modules see a clean node."""
    yield
    for sid, key in CREATED:
        stack.api("DELETE", "/v1/sandboxes/" + sid, **({} if key is None else {"key": key}))


def make_sandbox(api, sid, key=None):
    kw = {} if key is None else {"key": key}
    r = api("PUT", "/v1/sandboxes/" + sid, json={}, **kw)
    assert r.status_code in (200, 201), r.text
    CREATED.append((sid, key))
    return r.json()


def start_http_server(api, sid, port=8000):
    r = api("POST", "/v1/sandboxes/%s/processes" % sid,
            json={"command": "python3 -m http.server %d --bind 127.0.0.1" % port})
    assert r.status_code == 201, r.text


def start_app(api, sid, port=8001):
    r = api("POST", "/v1/sandboxes/%s/exec" % sid,
            json={"command": "cat > /workspace/app.py", "stdin": APP})
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    r = api("POST", "/v1/sandboxes/%s/processes" % sid,
            json={"command": "python3 /workspace/app.py %d" % port})
    assert r.status_code == 201, r.text


def expose(api, sid, port, **body):
    r = api("POST", "/v1/sandboxes/%s/ports/%d" % (sid, port), json=body)
    assert r.status_code == 200, r.text
    return r.json()


def wait_serving(stack, url, path="/"):
    """Until the server behind url answers (it starts in the background)."""
    def ok():
        r = via(stack, url, path)
        return r if r.status_code not in (502, 503) else None
    return stack.wait("the server behind %s" % url, ok, timeout=15)


def state_of(api, sid):
    return api("GET", "/v1/sandboxes/" + sid).json()["state"]


# ---- preview URLs -------------------------------------------------------


def test_expose_serves_and_token_is_durable(stack, api):
    make_sandbox(api, "pv-basic")
    start_http_server(api, "pv-basic")
    p = expose(api, "pv-basic", 8000)
    assert p["port"] == 8000
    assert len(p["token"]) == 16
    assert p["url"] == "http://8000-pv-basic-%s.%s:%d" % (
        p["token"], stack.env["SBX_PREVIEW_DOMAIN"], nginx_port(stack))
    r = wait_serving(stack, p["url"])
    assert r.status_code == 200 and "Directory listing" in r.text
    assert r.headers.get("X-Request-Id")

    # The same token when the port is exposed again; listed once.
    assert expose(api, "pv-basic", 8000) == p
    lst = api("GET", "/v1/sandboxes/pv-basic/ports").json()
    assert lst == {"ports": [p]}

    # A token of one's own choosing replaces it; the old host is then unknown.
    q = expose(api, "pv-basic", 8000, token="mine_1")
    assert q["token"] == "mine_1" and q["url"] != p["url"]
    assert via(stack, q["url"]).status_code == 200
    settled(stack, p["url"], 404, "INVALID_TOKEN")


def test_wrong_token_and_unknown_hosts(stack, api):
    make_sandbox(api, "pv-wrong")
    start_http_server(api, "pv-wrong")
    p = expose(api, "pv-wrong", 8000)
    wait_serving(stack, p["url"])
    dom = stack.env["SBX_PREVIEW_DOMAIN"]
    for label in ("8000-pv-wrong-notthetoken", "8001-pv-wrong-" + p["token"],
                  "8000-nosuchbox-" + p["token"], "garbage", "t-aaaaaaaaaaaaaaaa",
                  "80-pv-wrong-" + p["token"]):
        r = requests.get(stack.url + "/", headers={"Host": "%s.%s" % (label, dom)}, timeout=10)
        assert_error(r, 404, "INVALID_TOKEN")


def test_revoke(stack, api):
    make_sandbox(api, "pv-revoke")
    start_http_server(api, "pv-revoke")
    p = expose(api, "pv-revoke", 8000)
    wait_serving(stack, p["url"])
    assert api("DELETE", "/v1/sandboxes/pv-revoke/ports/8000").status_code == 204
    assert api("DELETE", "/v1/sandboxes/pv-revoke/ports/8000").status_code == 204
    settled(stack, p["url"], 404, "INVALID_TOKEN")
    assert api("GET", "/v1/sandboxes/pv-revoke/ports").json() == {"ports": []}
    # Exposed again after a revoke: a new token.
    q = expose(api, "pv-revoke", 8000)
    assert q["token"] != p["token"]
    assert via(stack, q["url"]).status_code == 200


def test_restart_makes_previews_stale_until_exposed_again(stack, api):
    make_sandbox(api, "pv-restart")
    start_http_server(api, "pv-restart")
    p = expose(api, "pv-restart", 8000)
    wait_serving(stack, p["url"])
    gen = api("GET", "/v1/sandboxes/pv-restart").json()["generation"]
    assert api("POST", "/v1/sandboxes/pv-restart/restart").status_code == 200
    assert api("GET", "/v1/sandboxes/pv-restart").json()["generation"] > gen
    settled(stack, p["url"], 410, "STALE_PREVIEW_URL")
    assert api("GET", "/v1/sandboxes/pv-restart/ports").json() == {"ports": []}
    # Exposed again: the same URL answers again.
    start_http_server(api, "pv-restart")
    assert expose(api, "pv-restart", 8000) == p
    r = wait_serving(stack, p["url"])
    assert r.status_code == 200 and "Directory listing" in r.text


def test_preview_never_wakes_a_sleeping_sandbox(stack, api):
    make_sandbox(api, "pv-sleep")
    start_http_server(api, "pv-sleep")
    p = expose(api, "pv-sleep", 8000)
    wait_serving(stack, p["url"])
    assert api("POST", "/v1/sandboxes/pv-sleep/sleep").status_code == 200
    assert state_of(api, "pv-sleep") == "sleeping"
    settled(stack, p["url"], 410, "STALE_PREVIEW_URL")
    for _ in range(3):
        assert_error(via(stack, p["url"]), 410, "STALE_PREVIEW_URL")
    assert state_of(api, "pv-sleep") == "sleeping"


def test_http_semantics_pass_through(stack, api):
    make_sandbox(api, "pv-app")
    start_app(api, "pv-app")
    p = expose(api, "pv-app", 8001)
    wait_serving(stack, p["url"], "/headers")

    # The app's own 404 is passed on as is (not turned into our JSON).
    r = via(stack, p["url"], "/nope")
    assert r.status_code == 404 and r.text == "no such page\n"

    # Redirect and two Set-Cookie headers unchanged.
    r = via(stack, p["url"], "/redirect")
    assert r.status_code == 302
    assert r.headers["Location"] == "/elsewhere?x=1"
    cookies = r.raw.headers.getlist("Set-Cookie")
    assert cookies == ["a=1; Path=/", "b=2; Path=/; HttpOnly"]

    # X-Forwarded-* reach the app; nothing of ours does.
    r = via(stack, p["url"], "/headers", headers={"X-Sbx-Tenant": "evil",
                                                   "X-Forwarded-For": "6.6.6.6"})
    h = r.json()
    assert h["x-forwarded-host"] == host_of(p["url"])
    assert h["host"] == host_of(p["url"])
    assert h["x-forwarded-proto"] == "http"
    assert h["x-forwarded-for"] == "127.0.0.1"
    assert not any(k.startswith("x-sbx-") for k in h), h


def test_sse_is_not_buffered(stack, api):
    make_sandbox(api, "pv-sse")
    start_app(api, "pv-sse")
    p = expose(api, "pv-sse", 8001)
    wait_serving(stack, p["url"], "/headers")
    t0 = time.monotonic()
    r = requests.get(stack.url + "/sse", headers={"Host": host_of(p["url"])}, stream=True,
                     timeout=10)
    assert r.status_code == 200
    it = r.iter_lines()
    first = next(it)
    assert first == b"data: first"
    assert time.monotonic() - t0 < 2.5, "the first event waited for the end of the stream"
    rest = [line for line in it if line]
    assert rest == [b"data: second"]


def test_websocket_through_preview(stack, api):
    websocket = pytest.importorskip("websocket")
    make_sandbox(api, "pv-ws")
    start_app(api, "pv-ws")
    p = expose(api, "pv-ws", 8001)
    wait_serving(stack, p["url"], "/headers")
    ws = websocket.create_connection("ws://127.0.0.1:%d/ws" % nginx_port(stack),
                                     host=host_of(p["url"]), timeout=10)
    try:
        for msg in ("hello", "x" * 1000):
            ws.send(msg)
            assert ws.recv() == msg
    finally:
        ws.close()


# ---- tunnels --------------------------------------------------------------


def agent_forwards(stack, sid, tenant="dev"):
    """Every forwarder of the sandbox, asked of each agent directly."""
    out = []
    for i in range(1, stack.agents + 1):
        addr = stack.env["SBX_AGENT_%d" % i]
        r = requests.get("http://%s/agent/v1/sandboxes/%s/%s/forwards" % (addr, tenant, sid),
                         headers={"X-Sbx-Node-Secret": stack.secret}, timeout=5)
        if r.status_code == 200:
            out += r.json()["forwards"]
    return out


def test_tunnel_is_cached_and_single_flight(stack, api):
    make_sandbox(api, "tn-one")
    start_http_server(api, "tn-one")

    def post():
        return api("POST", "/v1/sandboxes/tn-one/tunnels/8000")

    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: post(), range(10)))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    bodies = [a.json() for a in answers]
    assert all(b == bodies[0] for b in bodies), bodies
    t = bodies[0]
    assert t["provider"] == "builtin" and t["port"] == 8000
    assert set(t) == {"id", "port", "url", "provider", "generation", "createdAt"}
    assert post().json() == t
    assert api("GET", "/v1/sandboxes/tn-one/tunnels").json() == {"tunnels": [t]}
    fw = [f for f in agent_forwards(stack, "tn-one") if f["port"] == 8000]
    assert len(fw) == 1, fw
    r = wait_serving(stack, t["url"])
    assert r.status_code == 200 and "Directory listing" in r.text


def test_tunnel_dies_with_restart_and_delete(stack, api):
    make_sandbox(api, "tn-life")
    start_http_server(api, "tn-life")
    t = api("POST", "/v1/sandboxes/tn-life/tunnels/8000").json()
    wait_serving(stack, t["url"])

    assert api("POST", "/v1/sandboxes/tn-life/restart").status_code == 200
    settled(stack, t["url"], (404, 410))
    assert api("GET", "/v1/sandboxes/tn-life/tunnels").json() == {"tunnels": []}
    assert via(stack, t["url"]).status_code in (404, 410)

    start_http_server(api, "tn-life")
    t2 = api("POST", "/v1/sandboxes/tn-life/tunnels/8000").json()
    assert t2["url"] != t["url"] and t2["generation"] > t["generation"]
    wait_serving(stack, t2["url"])

    assert api("DELETE", "/v1/sandboxes/tn-life/tunnels/8000").status_code == 204
    assert api("DELETE", "/v1/sandboxes/tn-life/tunnels/8000").status_code == 204
    settled(stack, t2["url"], 404, "INVALID_TOKEN")
    assert api("GET", "/v1/sandboxes/tn-life/tunnels").json() == {"tunnels": []}
    t3 = api("POST", "/v1/sandboxes/tn-life/tunnels/8000").json()
    assert t3["url"] != t2["url"]
    assert via(stack, t3["url"]).status_code == 200


def test_destroy_removes_tokens_and_tunnels(stack, api, redis_cli):
    make_sandbox(api, "pv-gone")
    start_http_server(api, "pv-gone")
    p = expose(api, "pv-gone", 8000)
    t = api("POST", "/v1/sandboxes/pv-gone/tunnels/8000").json()
    wait_serving(stack, p["url"])

    assert api("DELETE", "/v1/sandboxes/pv-gone").status_code == 204
    assert redis_cli("--scan", "--pattern", "sbx:sb:{dev/pv-gone}*") == "", \
        "keys of the destroyed sandbox are left in Redis"
    settled(stack, p["url"], 404, "INVALID_TOKEN")
    settled(stack, t["url"], 404, "INVALID_TOKEN")
    # The same id again is a new sandbox: the old token is not reused.
    make_sandbox(api, "pv-gone")
    start_http_server(api, "pv-gone")
    assert expose(api, "pv-gone", 8000)["token"] != p["token"]
    assert api("DELETE", "/v1/sandboxes/pv-gone").status_code == 204


# ---- isolation and input ------------------------------------------------


def test_other_tenant_gets_404_everywhere(stack, api, new_key):
    make_sandbox(api, "pv-mine")
    other = new_key("other-j")
    calls = [("POST", "/ports/8000"), ("GET", "/ports"), ("DELETE", "/ports/8000"),
             ("POST", "/tunnels/8000"), ("GET", "/tunnels"), ("DELETE", "/tunnels/8000")]
    for method, tail in calls:
        r = api(method, "/v1/sandboxes/pv-mine" + tail, key=other)
        assert_error(r, 404, "SANDBOX_NOT_FOUND")


def test_user_token_taken_by_another_tenant(stack, api, new_key):
    other = new_key("other-k")
    make_sandbox(api, "pv-same")
    make_sandbox(api, "pv-same", key=other)
    expose(api, "pv-same", 8000, token="shared")
    r = api("POST", "/v1/sandboxes/pv-same/ports/8000", key=other, json={"token": "shared"})
    assert_error(r, 409, "CONFLICT")
    r = api("POST", "/v1/sandboxes/pv-same/ports/8000", key=other, json={"token": "notshared"})
    assert r.status_code == 200, r.text


def test_bad_input(stack, api):
    make_sandbox(api, "pv-bad")
    for port in ("80", "1023", "70000", "abc", "08000", "-1"):
        for method, path in (("POST", "ports"), ("DELETE", "ports"), ("POST", "tunnels"),
                             ("DELETE", "tunnels")):
            r = api(method, "/v1/sandboxes/pv-bad/%s/%s" % (path, port), json={})
            assert_error(r, 400, "INVALID_PORT")
    for body in ({"token": "UP"}, {"token": ""}, {"token": "a" * 17}, {"token": "a-b"},
                 {"token": 5}, {"nope": 1}):
        r = api("POST", "/v1/sandboxes/pv-bad/ports/8000", json=body)
        assert_error(r, 400, "VALIDATION_FAILED")
    r = api("POST", "/v1/sandboxes/pv-bad/ports/8000", data="{", headers={
        "Content-Type": "application/json"})
    assert_error(r, 400, "VALIDATION_FAILED")
    r = api("POST", "/v1/sandboxes/pv-bad/tunnels/8000", json={"provider": "x"})
    assert_error(r, 400, "VALIDATION_FAILED")
    assert_error(api("POST", "/v1/sandboxes/nosuch-box/tunnels/8000"), 404, "SANDBOX_NOT_FOUND")
    assert_error(api("GET", "/v1/sandboxes/nosuch-box/ports"), 404, "SANDBOX_NOT_FOUND")


def test_preview_path_is_not_reachable_directly(stack, api):
    r = api("GET", "/_sbx_preview")
    assert r.status_code == 404


PEER_APP = r'''
import http.server, socketserver, sys

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, body, close=False):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        # The app's side of the connection: its peer port.
        self.answer(str(self.client_address[1]).encode(), close=self.path == "/close")

    do_HEAD = do_GET

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.answer(b"got " + self.rfile.read(n))

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def test_forwarder_keeps_the_connection_to_the_app(stack, api):
    """Bodiless requests one after the other reach the app on one kept
    connection (same peer port); a body, HEAD, an app's Connection: close
    and a kept connection the app closed meanwhile all still work."""
    make_sandbox(api, "pv-keep")
    r = api("POST", "/v1/sandboxes/pv-keep/exec",
            json={"command": "cat > /tmp/peer.py", "stdin": PEER_APP})
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    r = api("POST", "/v1/sandboxes/pv-keep/processes", json={"command": "python3 /tmp/peer.py 8002"})
    assert r.status_code == 201, r.text
    url = expose(api, "pv-keep", 8002)["url"]
    wait_serving(stack, url)
    ports = [via(stack, url).text for _ in range(5)]
    assert all(p.isdigit() for p in ports), ports
    assert len(set(ports[1:])) == 1, "not one kept connection: %r" % ports
    r = via(stack, url, "/", method="POST", data=b"body")
    assert r.status_code == 200 and r.text == "got body", r.text
    r = via(stack, url, "/", method="HEAD")
    assert r.status_code == 200 and r.text == "", r.text
    assert via(stack, url, "/close").status_code == 200
    assert via(stack, url).text.isdigit()
    # Past FWD_IDLE_S the kept connection is closed; the next is a new one.
    time.sleep(1.5)
    assert via(stack, url).text.isdigit()
