"""Streamed and deferred answers end cleanly: a client (or nginx) that goes
away frees its agent connection, a file that shrinks under its download
ends that download, and the edges of Range and Transfer-Encoding answer as
docs/API.md says."""

import json
import os
import signal
import socket
import time
import uuid

import pytest
import requests

from conftest import assert_error, reap_orphans, sandbox_procs, stack_down, stack_up

FD_MARGIN = 8     # the agent's own fds move a little (Redis, timers, logs)
ABORTS = 200      # per kind and path, in batches
BATCH = 100
# A download is served by a file helper, at most this many at once per
# sandbox (FW_SANDBOX_MAX in sandbox/features/files_worker.h); more get 503.
FILE_CALLS_MAX = 16


@pytest.fixture(scope="module")
def box(stack):
    sid = "st-" + uuid.uuid4().hex[:10]
    # Room for a batch of aborted commands (sh + sleep each) at once.
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={"resources": {"pids": 1024}}, timeout=30)
    assert r.status_code == 201, r.text
    r = stack.api("POST", "/v1/sandboxes/%s/processes" % sid,
                  json={"id": "long", "command": "sleep 3600"})
    assert r.status_code == 201, r.text
    r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid, timeout=60,
                  json={"command": "head -c 16777216 /dev/zero > /workspace/16m.bin"})
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def record(stack, sid):
    r = stack.api("GET", "/v1/sandboxes/" + sid)
    assert r.status_code == 200, r.text
    return r.json()


def agent_of(stack, sid):
    """(agent number, "host:port") of the agent that runs sid."""
    node = record(stack, sid)["node"]
    n = int(node.rsplit("-", 1)[1])
    return n, stack.env["SBX_AGENT_%d" % n]


def agent_fds(stack, n):
    return len(os.listdir("/proc/%d/fd" % stack.pid("agent-%d" % n)))


def addr(hostport):
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


def request(method, path, headers, body=None):
    """The bytes of one HTTP/1.1 request."""
    data = json.dumps(body).encode() if body is not None else b""
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: sbx"]
    lines += ["%s: %s" % kv for kv in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", "Content-Length: %d" % len(data)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def read_head(s):
    """Read up to the end of the answer's header block; its status line."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        assert chunk, "connection closed before the answer's headers: %r" % got
        got += chunk
    return got.split(b"\r\n", 1)[0].decode()


def via(stack, sid, where):
    """(address, headers) to reach sid's data routes: through nginx with the
    dev key, or straight at its agent with what nginx would add."""
    if where == "nginx":
        return addr(stack.url.split("//", 1)[1]), {"Authorization": "Bearer " + stack.key}
    rec = record(stack, sid)
    _, hostport = agent_of(stack, sid)
    return addr(hostport), {"X-Sbx-Node-Secret": stack.secret, "X-Sbx-Tenant": "dev",
                            "X-Sbx-Epoch": str(rec["epoch"]),
                            "X-Sbx-Generation": str(rec["generation"])}


def sleepers(sid):
    return sum(1 for _, comm, _ in sandbox_procs("dev." + sid) if comm == "sleep")


# kind: (method, path, extra headers, body, how we know the agent holds it)
def kinds(sid):
    sse = {"Accept": "text/event-stream"}
    return {
        "exec-sse": ("POST", "/v1/sandboxes/%s/exec" % sid, sse, {"command": "sleep 600"}, "head"),
        "logs-follow": ("GET", "/v1/sandboxes/%s/processes/long/logs" % sid, sse, None,
                        "head"),
        # sessionless: in a session (the default one) they would queue
        "cf-exec-stream": ("POST", "/v1/sandboxes/%s/cf/api/execute/stream" % sid, {},
                           {"command": "sleep 600", "sessionId": "__DISABLE_SESSION__"},
                           "head"),
        # A file answer that the client stops reading (sendfile, not suspended).
        "download": ("GET", "/v1/sandboxes/%s/files/16m.bin" % sid, {}, None, "head"),
        # Deferred, not streamed: nothing arrives before the command ends;
        # the command running is the sign that the agent holds the request.
        "exec-json": ("POST", "/v1/sandboxes/%s/exec" % sid, {}, {"command": "sleep 600"},
                      "sleep"),
    }


def abort_batch(stack, sid, where, kind, n, idle):
    """Send n requests of kind, wait until the agent holds them all, close
    them all. idle: the sandbox's sleeps when none of ours run."""
    method, path, extra, body, sign = kinds(sid)[kind]
    target, headers = via(stack, sid, where)
    req = request(method, path, dict(headers, **extra), body)
    if sign == "sleep":
        stack.wait("the commands of the last batch to be stopped",
                   lambda: sleepers(sid) <= idle, timeout=30)
    socks = []
    try:
        for _ in range(n):
            deadline = time.monotonic() + 30
            while True:
                s = socket.create_connection(target, timeout=30)
                s.sendall(req)
                line = read_head(s) if sign == "head" else " 200 "
                # the helpers of an aborted batch of downloads end on their own
                if " 503 " in line and kind == "download" and time.monotonic() < deadline:
                    s.close()
                    time.sleep(0.1)
                    continue
                socks.append(s)
                break
            assert " 200 " in line, "%s via %s: %s" % (kind, where, line)
        if sign == "sleep":
            stack.wait("%d commands of %s via %s running" % (n, kind, where),
                       lambda: sleepers(sid) >= idle + n, timeout=60)
    finally:
        for s in socks:
            s.close()


def exec_ok(stack, sid):
    r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo alive"}, timeout=30)
    assert r.status_code == 200 and r.json()["stdout"] == "alive\n", r.text


def fds_back(stack, n, base, what):
    seen = []

    def back():
        seen.append(agent_fds(stack, n))
        return seen[-1] <= base + FD_MARGIN

    try:
        stack.wait("agent-%d's fds back to %d (+%d) after %s" % (n, base, FD_MARGIN, what),
                   back, timeout=30)
    except AssertionError as ex:
        raise AssertionError("%s: it holds %d" % (ex, seen[-1])) from None


@pytest.mark.parametrize("where", ["nginx", "agent"])
@pytest.mark.parametrize("kind", ["exec-sse", "logs-follow", "cf-exec-stream", "exec-json",
                                  "download"])
def test_aborted_answers_free_their_connection(stack, box, kind, where):
    n, _ = agent_of(stack, box)
    exec_ok(stack, box)
    base, idle = agent_fds(stack, n), sleepers(box)
    batch = FILE_CALLS_MAX if kind == "download" else BATCH
    for done in range(0, ABORTS, batch):
        abort_batch(stack, box, where, kind, min(batch, ABORTS - done), idle)
    fds_back(stack, n, base, "%d aborted %s via %s" % (ABORTS, kind, where))
    stack.wait("the aborted commands to be stopped", lambda: sleepers(box) <= idle, timeout=30)
    exec_ok(stack, box)


def nginx_session(stack):
    """Pids of nginx's master and workers (one session, started by setsid)."""
    master = stack.pid("nginx")
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.getsid(int(d)) == master:
                    found.append(int(d))
            except OSError:
                pass
    return found


def test_nginx_killed_with_open_streams_frees_them(stack, box):
    n, _ = agent_of(stack, box)
    exec_ok(stack, box)
    base = agent_fds(stack, n)
    target, headers = via(stack, box, "nginx")
    socks = []
    try:
        for kind in ("exec-sse", "logs-follow"):
            method, path, extra, body, _ = kinds(box)[kind]
            req = request(method, path, dict(headers, **extra), body)
            for _ in range(50):
                s = socket.create_connection(target, timeout=30)
                socks.append(s)
                s.sendall(req)
                assert " 200 " in read_head(s)
        assert agent_fds(stack, n) >= base + 100
        for pid in nginx_session(stack):
            os.kill(pid, signal.SIGKILL)
        stack.wait("nginx to be gone", lambda: not nginx_session(stack), timeout=10)
        fds_back(stack, n, base, "nginx was killed with 100 open streams")
    finally:
        for s in socks:
            s.close()
        reap_orphans()
        stack.run("start", "nginx")
        stack.wait_healthy()
    exec_ok(stack, box)


def files(sid, path):
    return "/v1/sandboxes/%s/files/%s" % (sid, path)


def test_a_file_truncated_during_its_download_ends_it(stack, box):
    size = 64 << 20
    r = stack.api("POST", "/v1/sandboxes/%s/exec" % box, timeout=60,
                  json={"command": "head -c %d /dev/zero > /workspace/shrinks.bin" % size})
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    for where in ("nginx", "agent"):
        target, headers = via(stack, box, where)
        s = socket.create_connection(target, timeout=60)
        try:
            # A small window: the download stalls on us with most of it unsent.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(request("GET", files(box, "shrinks.bin"), headers))
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            assert b" 200 " in head.split(b"\r\n", 1)[0] and \
                b"Content-Length: %d" % size in head, head
            got = len(head.split(b"\r\n\r\n", 1)[1])
            r = stack.api("POST", "/v1/sandboxes/%s/exec" % box, timeout=60,
                          json={"command": "truncate -s 1000 /workspace/shrinks.bin"})
            assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
            # The answer ends (a short body), it does not hang: a read that
            # times out here fails the test.
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
            assert got < size, "%s: %d bytes of %d after the truncation" % (where, got, size)
        finally:
            s.close()
        r = stack.api("POST", "/v1/sandboxes/%s/exec" % box, timeout=60,
                      json={"command": "head -c %d /dev/zero > /workspace/shrinks.bin" % size})
        assert r.status_code == 200, r.text
    exec_ok(stack, box)


# (Range, status, Content-Range, body) of the 10-byte file "0123456789".
RANGES = [
    ("bytes=0-18446744073709551615", 206, "bytes 0-9/10", b"0123456789"),
    ("bytes=2-99999999999999999999999", 206, "bytes 2-9/10", b"23456789"),
    ("bytes=5-100", 206, "bytes 5-9/10", b"56789"),
    ("bytes=-3", 206, "bytes 7-9/10", b"789"),
    ("bytes=-30", 206, "bytes 0-9/10", b"0123456789"),
    ("bytes=-18446744073709551616", 206, "bytes 0-9/10", b"0123456789"),
    ("bytes=3-", 206, "bytes 3-9/10", b"3456789"),
    ("bytes=9-9", 206, "bytes 9-9/10", b"9"),
    ("Bytes=1-2", 206, "bytes 1-2/10", b"12"),
    ("bytes=10-", 416, "bytes */10", None),
    ("bytes=10-20", 416, "bytes */10", None),
    ("bytes=99999999999999999999-", 416, "bytes */10", None),
    ("bytes=-0", 416, "bytes */10", None),
    ("bytes=5-2", 200, None, b"0123456789"),
    ("bytes=1-2,4-5", 200, None, b"0123456789"),
    ("bytes=x-1", 200, None, b"0123456789"),
]


def test_range_answers(stack, box):
    r = stack.api("PUT", files(box, "ten.txt"), data=b"0123456789")
    assert r.status_code in (200, 201), r.text
    for rng, status, crange, body in RANGES:
        r = stack.api("GET", files(box, "ten.txt"), headers={"Range": rng})
        assert r.status_code == status, "%s: %d %r" % (rng, r.status_code, r.text[:200])
        assert r.headers.get("Content-Range") == crange, (rng, r.headers)
        if status == 416:
            assert_error(r, 416, "RANGE_NOT_SATISFIABLE")
        else:
            assert r.content == body, (rng, r.content)
            assert r.headers["Content-Length"] == str(len(body))
    r = stack.api("PUT", files(box, "empty.txt"), data=b"")
    assert r.status_code in (200, 201), r.text
    for rng in ("bytes=-5", "bytes=0-", "bytes=-18446744073709551616"):
        r = stack.api("GET", files(box, "empty.txt"), headers={"Range": rng})
        assert_error(r, 416, "RANGE_NOT_SATISFIABLE")
        assert r.headers["Content-Range"] == "bytes */0"


def raw_answer(stack, data):
    """Send raw bytes to nginx; (status line, headers dict, body) of its answer."""
    s = socket.create_connection(addr(stack.url.split("//", 1)[1]), timeout=20)
    try:
        s.sendall(data)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
            if b"\r\n\r\n" in got:
                head, body = got.split(b"\r\n\r\n", 1)
                hdrs = dict(l.split(": ", 1) for l in head.decode().split("\r\n")[1:])
                if len(body) >= int(hdrs.get("Content-Length", "-1")) >= 0:
                    break
    finally:
        s.close()
    head, body = got.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    return lines[0], {k.lower(): v for k, v in (l.split(": ", 1) for l in lines[1:])}, body


@pytest.mark.parametrize("te", ["xchunked", "gzip, chunked", "chunked, xchunked"])
def test_unknown_transfer_coding_is_a_json_501(stack, box, te):
    for path in ("/v1/sandboxes/%s/exec" % box, "/v1/sandboxes"):
        line, hdrs, body = raw_answer(stack, (
            "POST %s HTTP/1.1\r\nHost: sbx\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: %s\r\n\r\n"
            "2\r\n{}\r\n0\r\n\r\n" % (path, stack.key, te)).encode())
        assert line.split(" ", 2)[1] == "501", (path, line, body)
        assert hdrs["content-type"].startswith("application/json"), (path, hdrs, body)
        err = json.loads(body)["error"]
        assert err["code"] == "NOT_IMPLEMENTED" and err["message"] and err["details"] == {}, err


@pytest.fixture(scope="module")
def small(stack):
    """A stack of its own whose agent serves at most 16 connections."""
    st = stack_up(agents=1, overrides=["agent.max_connections=16"])
    try:
        yield st
    finally:
        stack_down(st)


def test_at_its_connection_limit_the_agent_refuses_data_and_keeps_its_health(small):
    st = small
    sid = "lim-" + uuid.uuid4().hex[:8]
    r = st.api("PUT", "/v1/sandboxes/" + sid, timeout=30)
    assert r.status_code == 201, r.text
    agent = st.env["SBX_AGENT_1"]

    def health():
        r = requests.get("http://%s/agent/v1/health" % agent,
                         headers={"X-Sbx-Node-Secret": st.secret}, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    assert health()["maxConnections"] == 16
    idle = [socket.create_connection(addr(agent), timeout=10) for _ in range(24)]
    try:
        st.wait("the agent to count 24 idle connections", lambda: health()["connections"] > 24)
        r = st.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "true"})
        assert_error(r, 503, "NODE_UNAVAILABLE")
        assert r.headers.get("Retry-After") == "1"
        assert "connection limit reached" in st.log("agent-1", 200)
        # sbx-api's control calls use the reserve: a sleep still reaches it.
        r = st.api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=30)
        assert r.status_code == 200 and r.json()["state"] == "sleeping", r.text
    finally:
        for s in idle:
            s.close()
    st.wait("the agent below its limit", lambda: health()["connections"] <= 16)
    assert "below the connection limit again" in st.log("agent-1", 200)
    r = st.data("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo back"}, timeout=30)
    assert r.status_code == 200 and r.json()["stdout"] == "back\n", r.text
