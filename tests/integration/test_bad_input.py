"""Bad input at every endpoint, black box through nginx.

Every hostile request gets a 4xx with a stable JSON error code: never a
500, never a crash, never a hang. After each group the stack's processes
(and every sbx-api worker) must still be alive; the session fixture fails
the run on sanitizer reports in the logs.
"""

import http.client
import json
import os
import socket
import threading
import time
import uuid

import pytest

from conftest import assert_error, error_of
from sbxproc import alive, api_workers

# (method, path template) of every route taking a JSON body; {id} is a
# sandbox of the dev tenant.
JSON_ROUTES = [
    ("PUT", "/v1/sandboxes/{new}"),
    ("PATCH", "/v1/sandboxes/{id}"),
    ("POST", "/v1/sandboxes/{id}/exec"),
    ("POST", "/v1/sandboxes/{id}/sessions"),
    ("POST", "/v1/sandboxes/{id}/processes"),
    ("POST", "/v1/sandboxes/{id}/move"),
    ("POST", "/v1/sandboxes/{id}/terminals"),
    ("POST", "/v1/sandboxes/{id}/ports/3000"),
    ("POST", "/v1/sandboxes/{id}/tunnels/3000"),
    ("POST", "/v1/sandboxes/{id}/snapshots"),
    ("POST", "/v1/sandboxes/{id}/restore"),
]

# Every route of docs/API.md (method, path), for methods and URL tests.
ALL_ROUTES = JSON_ROUTES + [
    ("GET", "/v1/sandboxes/{id}"),
    ("GET", "/v1/sandboxes"),
    ("DELETE", "/v1/sandboxes/{new}"),
    ("POST", "/v1/sandboxes/{id}/restart"),
    ("POST", "/v1/sandboxes/{id}/sleep"),
    ("GET", "/v1/sandboxes/{id}/sessions"),
    ("GET", "/v1/sandboxes/{id}/processes"),
    ("GET", "/v1/sandboxes/{id}/terminals"),
    ("GET", "/v1/sandboxes/{id}/files/a.txt"),
    ("GET", "/v1/sandboxes/{id}/dirs/%2F"),
    ("GET", "/v1/sandboxes/{id}/stat/a.txt"),
    ("GET", "/v1/sandboxes/{id}/ports"),
    ("GET", "/v1/sandboxes/{id}/tunnels"),
    ("GET", "/v1/nodes"),
    ("POST", "/v1/nodes/agent-1/drain"),
    ("GET", "/v1/nodes/agent-1/sandboxes"),
    ("GET", "/v1/events"),
    ("GET", "/v1/tenants/dev/limits"),
    ("GET", "/v1/snapshots"),
    ("GET", "/v1/snapshots/sn-0000000000000000"),
    ("GET", "/healthz"),
]

JSON_CT = {"Content-Type": "application/json"}

# name -> raw body; all must be 400 VALIDATION_FAILED (or 413 for the big one).
BAD_BODIES = {
    "truncated": b"{",
    "not an object": b"[1,2]",
    "garbage": b"\x00\x01\x02",
    "nested arrays 10k": b"[" * 10000 + b"]" * 10000,
    "nested objects 10k": b'{"a":' * 10000 + b"1" + b"}" * 10000,
    "huge float": b'{"command":1e400}',
    "2^64": b'{"timeoutMs":18446744073709551616}',
    "-2^64": b'{"timeoutMs":-18446744073709551616}',
    "duplicate keys": b'{"labels":{},"labels":{}}',
    "invalid utf-8": b'{"command":"\xff\xfe"}',
    "overlong utf-8": b'{"command":"\xc0\xaf"}',
    "lone surrogate": b'{"command":"\\ud800"}',
    "escaped NUL": b'{"command":"a\\u0000b"}',
    "raw NUL in string": b'{"command":"a\x00b"}',
    "raw NUL after object": b'{}\x00',
    "trailing garbage": b'{} {}',
}


def components(stack):
    with open(os.path.join(stack.dir, "components")) as f:
        return [l.strip() for l in f if l.strip()]


def assert_all_alive(stack, workers_before=None):
    """Every component of the stack runs; the api master still has as many
    workers as before (a crashed worker would be replaced with a new pid)."""
    for name in components(stack):
        pid = stack.pid(name)
        assert alive(pid), "%s (pid %d) died:\n%s" % (name, pid, stack.log(name))
    if workers_before is not None:
        now = set(api_workers(stack.pid("api")))
        assert now == workers_before, \
            "sbx-api workers changed (one crashed?): before %s, now %s\n%s" % (
                sorted(workers_before), sorted(now), stack.log("api"))
    r = stack.api("GET", "/healthz", key=None, timeout=5)
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def box(stack):
    sid = "bad-" + uuid.uuid4().hex[:8]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, timeout=30)
    assert r.status_code == 201, r.text
    r = stack.api("PUT", "/v1/sandboxes/%s/files/a.txt" % sid, data=b"hello")
    assert r.status_code in (200, 201), r.text
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


@pytest.fixture(scope="module")
def workers(stack, box):
    return set(api_workers(stack.pid("api")))


def http_get_raw(stack, path):
    """GET path exactly as written (requests would re-quote bad escapes)."""
    host, port = stack.url.rsplit("/", 1)[1].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        c.request("GET", path, headers={"Authorization": "Bearer " + stack.key})
        r = c.getresponse()
        return r.status, r.getheader("Content-Type", ""), r.read()
    finally:
        c.close()


def fill(path, sid):
    return path.replace("{id}", sid).replace("{new}", "bad-new-" + uuid.uuid4().hex[:8])


def check_4xx(r, allowed):
    """A JSON error with one of the allowed (status, code) pairs."""
    assert 400 <= r.status_code < 500, "%s %s: got %d %r" % (
        r.request.method, r.request.path_url, r.status_code, r.text[:300])
    err = error_of(r)
    assert (r.status_code, err["code"]) in allowed, "%s %s: got %d %s: %r" % (
        r.request.method, r.request.path_url[:80], r.status_code, err["code"], err["message"])


@pytest.mark.parametrize("method,path", JSON_ROUTES, ids=[p for _, p in JSON_ROUTES])
def test_malformed_json_bodies(stack, box, workers, method, path):
    for name, body in BAD_BODIES.items():
        r = stack.api(method, fill(path, box), data=body, headers=JSON_CT, timeout=20)
        assert r.status_code == 400, "%s: %s %s -> %d %r" % (
            name, method, path, r.status_code, r.text[:200])
        assert error_of(r)["code"] == "VALIDATION_FAILED", name
    assert_all_alive(stack, workers)


@pytest.mark.parametrize("method,path", JSON_ROUTES, ids=[p for _, p in JSON_ROUTES])
def test_10mb_body_is_413(stack, box, workers, method, path):
    body = b'{"command":"' + b"a" * (10 << 20) + b'"}'
    for _ in range(3):  # the answer must not depend on who wins a race
        r = stack.api(method, fill(path, box), data=body, headers=JSON_CT, timeout=30)
        assert_error(r, 413, "PAYLOAD_TOO_LARGE")
    assert_all_alive(stack, workers)


def test_huge_strings_inside_the_limit(stack, box, workers):
    """900 KB strings where short ones are expected: 400, never 500."""
    big = "x" * 900000
    cases = [
        ("PUT", "/v1/sandboxes/{new}", {"labels": {"k": big}}),
        ("PUT", "/v1/sandboxes/{new}", {"image": big}),
        ("PATCH", "/v1/sandboxes/{id}", {"env": {big[:200000]: "v"}}),
        ("POST", "/v1/sandboxes/{id}/exec", {"command": "true", "cwd": big}),
        ("POST", "/v1/sandboxes/{id}/exec", {"command": "true", "session": big}),
        ("POST", "/v1/sandboxes/{id}/sessions", {"id": big}),
        ("POST", "/v1/sandboxes/{id}/processes", {"command": "true", "id": big}),
        ("POST", "/v1/sandboxes/{id}/move", {"from": big, "to": "b"}),
        ("POST", "/v1/sandboxes/{id}/ports/3000", {"token": big}),
    ]
    for method, path, body in cases:
        r = stack.api(method, fill(path, box), json=body, timeout=20)
        check_4xx(r, {(400, "VALIDATION_FAILED"), (413, "PAYLOAD_TOO_LARGE")})
    assert_all_alive(stack, workers)


def test_rejected_big_bodies_keep_the_pool_connections_usable(stack, box, workers):
    """Regression: a worker answered without reading its stdin to the end
    record, libfcgi then closed the kept-alive connection under the next
    request nginx sent there, and that PATCH/POST got a 503 (nginx does not
    retry non-idempotent requests). Fixed in fcgi/worker.c (drain_stdin)."""
    big = "x" * 900000
    for i in range(15):
        for method, path, body in (
                ("PUT", "/v1/sandboxes/{new}", {"image": big}),
                ("PATCH", "/v1/sandboxes/{id}", {"env": {big[:200000]: "v"}}),
                ("POST", "/v1/sandboxes/{id}/ports/3000", {"token": big[:300000]})):
            r = stack.api(method, fill(path, box), json=body, timeout=20)
            check_4xx(r, {(400, "VALIDATION_FAILED")})
    assert_all_alive(stack, workers)


def test_huge_numbers_in_fields(stack, box, workers):
    cases = [
        ("PUT", "/v1/sandboxes/{new}", {"resources": {"memoryMiB": 2 ** 64}}),
        ("PUT", "/v1/sandboxes/{new}", {"resources": {"cpus": 1e308}}),
        ("PUT", "/v1/sandboxes/{new}", {"sleepAfter": 2 ** 63}),
        ("PUT", "/v1/sandboxes/{new}", {"sleepAfter": -1}),
        ("POST", "/v1/sandboxes/{id}/exec", {"command": "true", "timeoutMs": 2 ** 63 - 1}),
        ("POST", "/v1/sandboxes/{id}/exec", {"command": "true", "timeoutMs": -5}),
        ("POST", "/v1/sandboxes/{id}/exec", {"command": "true", "timeoutMs": 1.5}),
    ]
    for method, path, body in cases:
        r = stack.api(method, fill(path, box), json=body, timeout=20)
        check_4xx(r, {(400, "VALIDATION_FAILED")})
    for q in ("limit=18446744073709551616", "limit=-1", "limit=1e400"):
        check_4xx(stack.api("GET", "/v1/sandboxes?" + q), {(400, "VALIDATION_FAILED")})
    for port in ("18446744073709551616", "65536", "-1", "0x50", "1e3"):
        r = stack.api("POST", "/v1/sandboxes/%s/ports/%s" % (box, port))
        check_4xx(r, {(400, "INVALID_PORT"), (400, "VALIDATION_FAILED")})
    assert_all_alive(stack, workers)


def test_nul_and_bad_escapes_in_urls(stack, box, workers):
    paths = [
        "/v1/sandboxes/%s%%00" % box,
        "/v1/sandboxes/%s%%00/exec" % box,
        "/v1/sandboxes/%00",
        "/v1/sandboxes/%s/files/a%%00b" % box,
        "/v1/sandboxes/%s/stat/%%00" % box,
        "/v1/sandboxes/%s/dirs/%%2F%%00" % box,
        "/v1/sandboxes/%s/ports/30%%0000" % box,
        "/v1/sandboxes/%s/processes/p%%00" % box,
        "/v1/sandboxes/%s/files/%%zz" % box,
        "/v1/sandboxes/%s/files/%%ff%%fe" % box,
        "/v1/sandboxes?label=a%00:b",
        "/v1/sandboxes?state=%00",
    ]
    for p in paths:
        status, ctype, body = http_get_raw(stack, p)
        assert status in (400, 404), "GET %s -> %d %r" % (p, status, body[:200])
        assert ctype.startswith("application/json"), "GET %s -> %r %r" % (p, ctype, body[:200])
        code = json.loads(body)["error"]["code"]
        assert (status, code) in {(400, "VALIDATION_FAILED"), (404, "NOT_FOUND"),
                                  (404, "PROCESS_NOT_FOUND")}, "GET %s -> %d %s" % (p, status, code)
    assert_all_alive(stack, workers)


def test_empty_and_dot_segments_are_400_through_nginx(stack, box, workers):
    """nginx routes by the normalized URI ("//v1/x" matches "/v1/x") while
    the raw one travels on: a path with an empty or dot segment is refused
    with 400 on every route, control and data alike, never a 500."""
    paths = [
        "//v1/sandboxes", "/v1//sandboxes", "//v1/sandboxes/%s" % box,
        "/v1//sandboxes/%s" % box, "/v1/sandboxes//%s" % box,
        "//v1/sandboxes/%s/exec" % box, "/v1//sandboxes/%s/exec" % box,
        "/v1/sandboxes//%s/exec" % box, "/v1/sandboxes/%s//exec" % box,
        "//v1/sandboxes/%s/files/a.txt" % box, "/v1/sandboxes/%s/files//a.txt" % box,
        "/v1/./sandboxes/%s/exec" % box, "/v1/sandboxes/%s/../%s/exec" % (box, box),
        "/v1/sandboxes/%s/%%2e%%2e/%s/stat/a" % (box, box), "//healthz",
        "//v1/sandboxes?limit=1", "/v1//nodes",
    ]
    for p in paths:
        for method in ("GET", "POST"):
            host, port = stack.url.rsplit("/", 1)[1].split(":")
            c = http.client.HTTPConnection(host, int(port), timeout=20)
            try:
                c.request(method, p, body=b"{}", headers={"Authorization": "Bearer " + stack.key,
                                                         "Content-Type": "application/json"})
                r = c.getresponse()
                status, body = r.status, r.read()
                ctype = r.getheader("Content-Type", "")
            finally:
                c.close()
            assert status == 400, "%s %s -> %d %r" % (method, p, status, body[:200])
            assert ctype.startswith("application/json"), (method, p, ctype)
            assert json.loads(body)["error"]["code"] == "VALIDATION_FAILED", (method, p, body)
    # Escapes in the fixed part of a data route: matched by nginx, spelled
    # otherwise for the agent.
    status, _, body = http_get_raw(stack, "/v1/%%73andboxes/%s/stat/a" % box)
    assert status == 400 and json.loads(body)["error"]["code"] == "VALIDATION_FAILED", body
    assert_all_alive(stack, workers)


def test_unknown_methods(stack, box, workers):
    for method in ("PROPFIND", "TRACE", "MKCOL", "FOO", "OPTIONS"):
        for _, path in ALL_ROUTES:
            r = stack.api(method, fill(path, box), timeout=20)
            check_4xx(r, {(405, "METHOD_NOT_ALLOWED"), (400, "VALIDATION_FAILED")})
            assert "Traceback" not in r.text and "/tmp/" not in r.text
    assert_all_alive(stack, workers)


def test_oversized_headers(stack, box, workers):
    for path in ("/v1/sandboxes/" + box, "/v1/sandboxes/%s/exec" % box, "/healthz"):
        for size in (20000, 100000):
            r = stack.api("GET", path, headers={"X-Big": "a" * size}, timeout=20)
            check_4xx(r, {(400, "VALIDATION_FAILED"), (431, "VALIDATION_FAILED")})
        # Many headers, each small.
        many = {"X-H%d" % i: "v" * 100 for i in range(300)}
        r = stack.api("GET", path, headers=many, timeout=20)
        assert r.status_code < 500, r.text[:200]
    r = stack.api("GET", "/v1/sandboxes/" + box + "?" + "a" * 20000, timeout=20)
    check_4xx(r, {(400, "VALIDATION_FAILED")})
    assert_all_alive(stack, workers)


def test_bad_auth_headers(stack, box, workers):
    for h in ("Bearer", "Bearer ", "Bearer sbx_" + "g" * 40, "Bearer sbx_" + "a" * 39,
              "Bearer sbx_" + "a" * 41, "Basic Zm9vOmJhcg==", "Bearer " + "\u00e9" * 10,
              "bearer " + stack.key + " x"):
        for _, path in (("POST", "/v1/sandboxes/%s/exec" % box), ("GET", "/v1/sandboxes/" + box)):
            r = stack.http.get(stack.url + path, headers={"Authorization": h.encode("utf-8")},
                               timeout=20)
            assert_error(r, 401, "UNAUTHORIZED")
    assert_all_alive(stack, workers)


def raw_request(stack, data, timeout=10):
    host, port = stack.url.rsplit("/", 1)[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out and len(out) > 2000:
                break
        return out
    finally:
        s.close()


def test_raw_protocol_garbage(stack, box, workers):
    """Requests no HTTP client would send: nginx refuses, nothing behind it breaks."""
    cases = [
        b"GET /v1/sandboxes/" + box.encode() + b"\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v1/sandboxes/" + box.encode() + b" HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
        b"POST /v1/sandboxes/" + box.encode() + b"/exec HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 5\r\nContent-Length: 7\r\n\r\n{}{}{}{}",
        b"POST /v1/sandboxes/" + box.encode() + b"/exec HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64),
        b"GET / HTTP/9.9\r\n\r\n",
    ]
    for data in cases:
        out = raw_request(stack, data)
        if out:
            status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/") else 400
            assert 400 <= status < 500 or status == 505, "%r -> %r" % (data[:60], out[:200])
    assert_all_alive(stack, workers)


def test_slow_clients_are_timed_out_and_do_not_block_the_api(stack, box, workers):
    """Clients that send their headers one byte per second: while they
    trickle, the API answers as usual; nginx drops them at its header
    timeout (client_header_timeout 15s)."""
    host, port = stack.url.rsplit("/", 1)[1].split(":")
    n = 40
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(b"GET /v1/sandboxes/%s HTTP/1.1\r\n" % box.encode())
        socks.append(s)
    closed_at = [None] * n
    start = time.monotonic()
    stop = threading.Event()

    def trickle(i, s):
        s.settimeout(1)
        while not stop.is_set() and time.monotonic() - start < 30:
            try:
                s.send(b"X")
            except OSError:
                closed_at[i] = time.monotonic() - start
                return
            try:
                if s.recv(4096) == b"":
                    closed_at[i] = time.monotonic() - start
                    return
                closed_at[i] = time.monotonic() - start  # an error answer
                return
            except socket.timeout:
                pass
            except OSError:
                closed_at[i] = time.monotonic() - start
                return

    threads = [threading.Thread(target=trickle, args=(i, s), daemon=True)
               for i, s in enumerate(socks)]
    for t in threads:
        t.start()
    try:
        lat = []
        for _ in range(10):
            t0 = time.monotonic()
            r = stack.api("POST", "/v1/sandboxes/%s/exec" % box, json={"command": "true"})
            lat.append(time.monotonic() - t0)
            assert r.status_code == 200, r.text
            r = stack.api("GET", "/v1/sandboxes/" + box)
            assert r.status_code == 200, r.text
        print("exec latency with %d slow clients: median %.1f ms" % (n, sorted(lat)[5] * 1000))
        assert sorted(lat)[5] < 1.0, "the API is slow while slow clients trickle: %r" % lat
        for t in threads:
            t.join(timeout=32)
    finally:
        stop.set()
        for s in socks:
            s.close()
    done = [c for c in closed_at if c is not None]
    assert len(done) == n, "nginx did not drop %d of %d slow clients in 30 s" % (n - len(done), n)
    assert max(done) < 25, "slow clients were dropped late: %r" % sorted(done)
    assert_all_alive(stack, workers)
