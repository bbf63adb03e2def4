"""Drop-in compatibility: the official Cloudflare Sandbox SDK client
(npm @cloudflare/sandbox, its SandboxClient) drives sbx through
/v1/sandboxes/{id}/cf (docs/COMPAT.md).

test_sdk_client runs tests/compat/sdk.test.mjs with `node --test` against
this session's stack (installing the pinned SDK with `npm ci` first when
tests/compat/node_modules is missing); the others check the wire format
the SDK relies on directly over HTTP.
"""

import json
import os
import shutil
import socket
import subprocess
import uuid
from urllib.parse import urlparse

import pytest
import requests

from conftest import stack_down, stack_up

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPAT = os.path.join(ROOT, "tests", "compat")


@pytest.fixture(scope="module")
def box(stack):
    sid = "cf-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def cf(api, box, method, route, **kw):
    return api(method, "/v1/sandboxes/%s/cf/api/%s" % (box, route), timeout=30, **kw)


def sdk_installed():
    return os.path.isdir(os.path.join(COMPAT, "node_modules", "@cloudflare", "sandbox"))


def test_sdk_client(stack):
    for tool in ("node", "npm"):
        assert shutil.which(tool), "%s is missing: run deploy/deps" % tool
    if not sdk_installed():
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=COMPAT,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, "npm ci failed:\n%s%s" % (r.stdout, r.stderr)
    sid = "cf-sdk-" + uuid.uuid4().hex[:8]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    try:
        env = dict(os.environ, SBX_URL=stack.url, SBX_API_KEY=stack.key, SBX_SANDBOX_ID=sid)
        p = subprocess.run(["node", "--import", "./register-standin.mjs", "--test",
                            "sdk.test.mjs"], cwd=COMPAT, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, "node --test failed (%d):\n%s%s" % (p.returncode, p.stdout,
                                                                     p.stderr)
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_error_shape_is_the_sdks(api, box):
    r = cf(api, box, "POST", "read", json={"path": "/workspace/absent.txt"})
    assert r.status_code == 404
    body = r.json()
    assert set(body) >= {"code", "message", "context", "httpStatus", "timestamp"}
    assert body["code"] == "FILE_NOT_FOUND" and body["httpStatus"] == 404
    assert body["context"]["path"] == "/workspace/absent.txt"
    assert "error" not in body


def test_session_routes_answer_in_the_sdks_shape(api, box):
    r = cf(api, box, "POST", "session/create", json={"id": "cf-list-a"})
    assert r.status_code == 200, r.text
    made = r.json()
    assert made["success"] is True and made["id"] == "cf-list-a"
    assert made["message"] == "session 'cf-list-a' created" and made["timestamp"]
    assert "containerPlacementId" in made and made["containerPlacementId"] is None
    r = cf(api, box, "GET", "session/list")
    assert r.status_code == 200, r.text
    listed = r.json()
    assert listed["success"] is True and listed["timestamp"]
    assert "cf-list-a" in listed["data"], listed
    r = cf(api, box, "POST", "session/delete", json={"sessionId": "cf-list-a"})
    assert r.status_code == 200, r.text
    assert r.json()["sessionId"] == "cf-list-a" and r.json()["success"] is True
    assert "cf-list-a" not in cf(api, box, "GET", "session/list").json()["data"]
    r = cf(api, box, "POST", "session/delete", json={"sessionId": "cf-list-a"})
    assert r.status_code == 404 and r.json()["code"] == "SESSION_NOT_FOUND"
    assert r.json()["context"]["sessionId"] == "cf-list-a"


def test_bad_body_is_a_400_in_the_sdks_shape(api, box):
    for data in (b"{", b'{"path": 1}', b"[]", b'{"command": ""}'):
        r = cf(api, box, "POST", "execute" if b"command" in data else "read", data=data,
               headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (data, r.text)
        assert r.json()["code"] == "VALIDATION_FAILED"


def test_bad_background_execute_is_a_400_not_a_500(api, box):
    """execute with background: true maps to a process start; a field of
    the wrong type there is the caller's mistake (it was answered 500,
    out of memory)."""
    for extra in ({"cwd": 1}, {"env": "x"}):
        body = dict({"command": "true", "background": True}, **extra)
        r = cf(api, box, "POST", "execute", json=body)
        assert r.status_code == 400, (extra, r.text)
        assert r.json()["code"] == "VALIDATION_FAILED", r.text


def test_unsupported_routes_are_a_404_in_the_sdks_shape(api, box):
    for method, route in (("POST", "watch/check"), ("POST", "expose-port"),
                          ("POST", "backup/upload-parts")):
        r = cf(api, box, method, route, json={})
        assert r.status_code == 404, (route, r.text)
        assert r.json()["code"] == "NOT_FOUND"
    r = cf(api, box, "PUT", "write", json={})
    assert r.status_code == 405


def test_client_query_never_reaches_the_sbx_handler(api, box):
    """A query string on a compat route must not change what the mapped
    handler does (e.g. turn a delete into a recursive one)."""
    ok = cf(api, box, "POST", "mkdir", json={"path": "/workspace/keep/inner", "recursive": True})
    assert ok.status_code == 200, ok.text
    r = api("POST", "/v1/sandboxes/%s/cf/api/delete?recursive=true" % box,
            json={"path": "/workspace/keep"}, timeout=30)
    assert r.status_code == 400 and r.json()["code"] == "IS_DIRECTORY", r.text
    r = cf(api, box, "POST", "exists", json={"path": "/workspace/keep/inner"})
    assert r.json()["exists"] is True


def test_client_headers_never_reach_the_sbx_call(api, box):
    """The compat row decides stream or not and takes no range: a client's
    Accept or Range header does not turn a JSON answer into a stream or a
    read into a partial one."""
    r = cf(api, box, "POST", "execute", json={"command": "echo hi"},
           headers={"Accept": "text/event-stream"})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json"), r.headers
    assert r.json()["stdout"] == "hi\n"
    w = cf(api, box, "POST", "write", json={"path": "/workspace/range.txt", "content": "abcdef"})
    assert w.status_code == 200, w.text
    r = cf(api, box, "POST", "read/stream", json={"path": "/workspace/range.txt"},
           headers={"Range": "bytes=0-1"})
    assert r.status_code == 200, r.text
    events = [json.loads(f[len("data: "):]) for f in r.content.decode().split("\n\n")
              if f.startswith("data: ")]
    assert "".join(e["data"] for e in events if e["type"] == "chunk") == "abcdef", events
    assert events[-1] == dict(events[-1], type="complete", bytesRead=6), events


def test_stream_framing_is_data_only_json(api, box):
    r = cf(api, box, "POST", "execute/stream", json={"command": "printf 'a\\377b'"}, stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    text = r.content.decode()
    frames = [f for f in text.split("\n\n") if f.strip()]
    events = [json.loads(f[len("data: "):]) for f in frames if f.startswith("data: ")]
    assert all(not f.startswith("event:") for f in frames)
    assert [e["type"] for e in events][0] == "start"
    assert events[-1]["type"] == "complete" and events[-1]["exitCode"] == 0
    out = "".join(e["data"] for e in events if e["type"] == "stdout")
    assert out == "a\ufffdb"  # invalid UTF-8 becomes U+FFFD, as text


def test_other_tenant_cannot_use_the_compat_routes(stack, box, new_key):
    other = new_key("cf-other-" + uuid.uuid4().hex[:6])
    r = stack.api("POST", "/v1/sandboxes/%s/cf/api/execute" % box, key=other,
                  json={"command": "true"}, timeout=30)
    assert r.status_code == 404


def test_refusals_before_the_agent_speak_the_sdk_shape(stack, api):
    """401 and 404 SANDBOX_NOT_FOUND come from the API pool's routing check,
    not the agent: on …/cf/… routes they too have the SDK's error shape."""
    r = api("POST", "/v1/sandboxes/no-such-cf-box/cf/api/execute", json={"command": "true"})
    assert r.status_code == 404, r.text
    body = r.json()
    assert body["code"] == "SANDBOX_NOT_FOUND" and body["httpStatus"] == 404, body
    assert set(body) >= {"code", "message", "context", "httpStatus", "timestamp"}, body
    r = api("POST", "/v1/sandboxes/no-such-cf-box/cf/api/execute", key=None,
            json={"command": "true"})
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED", r.text
    # Other data routes keep sbx's own shape.
    r = api("POST", "/v1/sandboxes/no-such-cf-box/exec", json={"command": "true"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "SANDBOX_NOT_FOUND", r.text


def _read_all(sock):
    """What the peer sends until it closes."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def _raw(stack, head):
    """One raw HTTP/1.1 request (head as sent, with Connection: close) to
    the stack: (status, body)."""
    u = urlparse(stack.url)
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall(head.encode())
        data = _read_all(s)
    head_b, _, body = data.partition(b"\r\n\r\n")
    return int(head_b.split()[1]), body


def test_nginx_refusals_on_cf_speak_the_sdk_shape(stack, box):
    """Errors nginx answers itself (here an unsupported Transfer-Encoding
    and an oversized header) come in the SDK's shape on …/cf/… routes and
    in sbx's own elsewhere (the 413 of a body over nginx's bound for /cf is
    driven through the SDK in sdk.test.mjs)."""
    auth = "Authorization: Bearer %s\r\n" % stack.key
    te = ("POST /v1/sandboxes/%s/%s HTTP/1.1\r\nHost: x\r\n" + auth +
          "Transfer-Encoding: gzip\r\nConnection: close\r\n\r\nx")
    status, body = _raw(stack, te % (box, "cf/api/execute"))
    got = json.loads(body)
    assert status == 501 and got["httpStatus"] == 501, body
    assert set(got) >= {"code", "message", "context", "httpStatus", "timestamp"}, got
    status, body = _raw(stack, te % (box, "exec"))
    assert status == 501 and json.loads(body)["error"]["code"] == "NOT_IMPLEMENTED", body
    big = ("GET /v1/sandboxes/%s/cf/api/ping HTTP/1.1\r\nHost: x\r\n" + auth +
           "X-Big: %s\r\nConnection: close\r\n\r\n") % (box, "a" * 70000)
    status, body = _raw(stack, big)
    got = json.loads(body)
    assert status == 400 and got["code"] == "VALIDATION_FAILED" and got["httpStatus"] == 400, body


def big_bodies_bytes(st):
    """The agent's sbx_agent_big_bodies_bytes: /cf body bytes it holds now."""
    url = st.env["SBX_METRICS"].strip('"').split()[1]
    text = requests.get(url, timeout=5).text
    return sum(float(l.split()[-1]) for l in text.splitlines()
               if l.startswith("sbx_agent_big_bodies_bytes "))


def test_large_bodies_buffered_at_once_are_bounded():
    """The agent buffers a /cf body (to 48 MiB) whole: all of them at once
    hold at most agent.big_bodies_node_bytes (here 8 MiB). Once a held
    body (6 MiB) is in the agent (its gauge sbx_agent_big_bodies_bytes
    says so), a write that would pass the budget gets 503 NO_CAPACITY in
    the SDK's shape (the SDK retries a 503); the budget comes back when
    the held request ends."""
    st = stack_up(agents=1, overrides=["agent.big_bodies_node_bytes=8388608"])
    try:
        sid = "cf-big-" + uuid.uuid4().hex[:6]
        assert st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30).status_code == 201
        content = "a" * (6 << 20)
        body = json.dumps({"path": "/workspace/held.txt", "content": content}).encode()
        u = urlparse(st.url)
        held = socket.create_connection((u.hostname, u.port), timeout=60)
        held.sendall(("POST /v1/sandboxes/%s/cf/api/write HTTP/1.1\r\nHost: x\r\n"
                      "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\nConnection: close\r\n\r\n"
                      % (sid, st.key, len(body))).encode() + body[:-16])
        # nginx passes the body on as it comes: wait until all of it but
        # the last 16 bytes is counted in the agent
        st.wait("the held body to be in the agent",
                lambda: big_bodies_bytes(st) >= len(body) - 16, timeout=30)
        path = "/v1/sandboxes/%s/cf/api/write" % sid
        other = {"path": "/workspace/other.txt", "content": content}
        r = st.api("POST", path, json=other, timeout=60)
        assert r.status_code == 503, r.text
        got = r.json()
        assert got["code"] == "NO_CAPACITY" and got["httpStatus"] == 503, got
        held.sendall(body[-16:])
        answer = _read_all(held)
        held.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        st.wait("the held body's bytes to be released", lambda: big_bodies_bytes(st) == 0)
        r = st.api("POST", path, json=other, timeout=60)
        assert r.status_code == 200, r.text
    finally:
        stack_down(st)


def test_watch_events_are_the_sdks_and_a_stop_ends_them(stack, api):
    """A file watch through compat, framed from the watch's typed events:
    watching first, only the event types asked for, and a sandbox stopped
    under it ends the stream with the SDK's error event."""
    sid = "cf-w-" + uuid.uuid4().hex[:8]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    try:
        r = cf(api, sid, "POST", "watch", json={"path": "/workspace", "events": ["delete"]},
               stream=True)
        assert r.status_code == 200, r.text
        chunks = r.iter_content(chunk_size=None)
        text = ""
        while "\n\n" not in text:
            text += next(chunks).decode()
        first = json.loads(text.split("\n\n")[0][len("data: "):])
        assert first["type"] == "watching" and first["path"] == "/workspace", first
        assert isinstance(first["watchId"], str) and first["watchId"], first
        x = cf(api, sid, "POST", "execute",
               json={"command": "touch /workspace/x; sleep 0.3; rm /workspace/x"})
        assert x.status_code == 200 and x.json()["exitCode"] == 0, x.text
        while '"eventType":"delete"' not in text:
            text += next(chunks).decode()
        s = stack.api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=30)
        assert s.status_code == 200, s.text
        text += "".join(c.decode() for c in chunks)   # to the stream's end
        frames = [f for f in text.split("\n\n") if f.strip() and not f.startswith(":")]
        assert all(f.startswith("data: ") for f in frames), frames
        events = [json.loads(f[len("data: "):]) for f in frames]
        assert [e["type"] for e in events] == ["watching", "event", "error"], events
        assert events[1]["eventType"] == "delete" and events[1]["path"] == "/workspace/x"
        assert events[1]["isDirectory"] is False, events[1]
        assert isinstance(events[2]["error"], str) and events[2]["error"], events[2]
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
