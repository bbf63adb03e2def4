"""PTY terminals over WebSocket, through nginx (API.md "Terminals")."""

import json
import re
import time
import uuid

import pytest
import websocket

from conftest import assert_error


class Viewer:
    """One WebSocket viewer of a terminal: pty bytes in `out`, control
    messages in `ctl`, the close code in `closed`."""

    def __init__(self, stack, box, tid, key=None, ticket=None, use_key=True):
        url = stack.url.replace("http://", "ws://", 1) + T(box, "/%s/ws" % tid)
        headers = []
        if ticket:
            url += "?ticket=" + ticket
        elif use_key:
            headers.append("Authorization: Bearer " + (key or stack.key))
        self.ws = websocket.create_connection(url, header=headers, timeout=10)
        self.out = b""
        self.ctl = []
        self.closed = None

    def pump(self, timeout):
        self.ws.settimeout(timeout)
        try:
            op, data = self.ws.recv_data(control_frame=False)
        except websocket.WebSocketTimeoutException:
            return
        except websocket.WebSocketConnectionClosedException:
            self.closed = self.closed or 1006
            return
        if op == websocket.ABNF.OPCODE_BINARY:
            self.out += data
        elif op == websocket.ABNF.OPCODE_TEXT:
            self.ctl.append(json.loads(data))
        elif op == websocket.ABNF.OPCODE_CLOSE:
            self.closed = int.from_bytes(data[:2], "big") if len(data) >= 2 else 1005

    def until(self, cond, what, timeout=10):
        end = time.monotonic() + timeout
        while not cond():
            left = end - time.monotonic()
            if left <= 0 or self.closed:
                raise AssertionError("no %s; output %r, control %r, closed %r" %
                                     (what, self.out[-600:], self.ctl, self.closed))
            self.pump(min(left, 0.5))

    def wait_ready(self):
        self.until(lambda: any(m.get("type") == "ready" for m in self.ctl), "ready")

    def expect(self, pattern, timeout=10):
        rx = re.compile(pattern.encode() if isinstance(pattern, str) else pattern)
        self.until(lambda: rx.search(self.out), repr(pattern), timeout)
        return rx.search(self.out)

    def send(self, text):
        self.ws.send_binary(text.encode())

    def resize(self, cols, rows):
        self.ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    def close(self):
        self.ws.close()


def T(box, rest=""):
    return "/v1/sandboxes/%s/terminals%s" % (box, rest)


def new_box(stack, prefix="trm"):
    return stack.create(prefix)[0]


@pytest.fixture(scope="module")
def box(stack):
    sid = new_box(stack)
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def create(api, box, **body):
    r = api("POST", T(box), json=body)
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["id"] and rec["status"] in ("running", "exited"), rec
    return rec


def test_shell_has_a_tty_follows_resize_and_survives_ctrl_c(stack, api, box):
    rec = create(api, box, cols=90, rows=20)
    assert rec["command"] is None and rec["cols"] == 90 and rec["pid"] > 0, rec
    v = Viewer(stack, box, rec["id"])
    try:
        v.wait_ready()
        v.send("tty; stty size\n")
        v.expect(r"/dev/pts/\d+")
        v.expect(r"\b20 90\b")
        v.resize(132, 43)
        v.send("stty size\n")
        v.expect(r"\b43 132\b")
        # ^C interrupts the foreground job; the shell goes on.
        v.send("sleep 100\n")
        time.sleep(0.3)
        v.send("\x03")
        v.send("echo alive$((40+2))\n")
        v.expect(r"alive42")
        listed = api("GET", T(box)).json()["terminals"]
        mine = [t for t in listed if t["id"] == rec["id"]]
        assert mine and mine[0]["cols"] == 132 and mine[0]["rows"] == 43, listed
        assert mine[0]["viewers"] == 1 and mine[0]["status"] == "running", mine
    finally:
        v.close()
        api("DELETE", T(box, "/" + rec["id"]))


def test_full_screen_programs_draw(stack, api, box):
    rec = create(api, box, command="top -d 1", cols=100, rows=30)
    v = Viewer(stack, box, rec["id"])
    try:
        v.wait_ready()
        # top clears the screen and positions the cursor: CSI sequences
        v.expect(rb"\x1b\[[0-9;]*[HJ]")
        v.expect(rb"PID")
        v.send("q")
        v.until(lambda: any(m.get("type") == "exit" for m in v.ctl), "exit of top")
        exit_msg = [m for m in v.ctl if m["type"] == "exit"][0]
        assert exit_msg["code"] == 0, exit_msg
    finally:
        v.close()
        api("DELETE", T(box, "/" + rec["id"]))


def test_exit_code_reconnect_replay_and_two_viewers(stack, api, box):
    rec = create(api, box)
    a = Viewer(stack, box, rec["id"])
    b = Viewer(stack, box, rec["id"])
    try:
        a.wait_ready()
        b.wait_ready()
        a.send("echo both$((3*3))x\n")
        a.expect(r"both9x")
        b.expect(r"both9x")
        # bytes after the echo of the command line: identical for both
        assert b.out.endswith(a.out[-len(b"both9x"):]) or b"both9x" in b.out
        b.close()
        a.close()
        # Reconnect: the last output is replayed before "ready".
        c = Viewer(stack, box, rec["id"])
        c.wait_ready()
        assert b"both9x" in c.out, c.out[-300:]
        c.send("exit 3\n")
        c.until(lambda: any(m.get("type") == "exit" for m in c.ctl), "exit")
        assert [m for m in c.ctl if m["type"] == "exit"][0]["code"] == 3, c.ctl
        c.until(lambda: c.closed, "close frame")
        assert c.closed == 1000
        listed = {t["id"]: t for t in api("GET", T(box)).json()["terminals"]}
        assert listed[rec["id"]]["status"] == "exited"
        assert listed[rec["id"]]["exitCode"] == 3
        # An exited terminal still replays, then says exit and closes.
        d = Viewer(stack, box, rec["id"])
        d.until(lambda: d.closed, "close of an exited terminal")
        assert any(m.get("type") == "exit" and m["code"] == 3 for m in d.ctl), d.ctl
    finally:
        api("DELETE", T(box, "/" + rec["id"]))
    assert_error(api("DELETE", T(box, "/" + rec["id"])), 404, "TERMINAL_NOT_FOUND")


def test_many_terminals_and_the_bound(stack, api):
    sid = new_box(stack, "trn")
    try:
        ids = [create(api, sid, argv=["sleep", "60"])["id"] for _ in range(50)]
        listed = api("GET", T(sid)).json()["terminals"]
        assert sorted(t["id"] for t in listed) == sorted(ids)
        assert all(t["status"] == "running" for t in listed), listed
        for _ in range(64 - 50):
            create(api, sid, argv=["sleep", "60"])
        assert_error(api("POST", T(sid), json={"argv": ["true"]}), 429, "QUOTA_EXCEEDED")
        assert_error(api("POST", T(sid), json={"cols": 0}), 400, "VALIDATION_FAILED")
        assert_error(api("POST", T(sid), json={"shell": "x"}), 400, "VALIDATION_FAILED")
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def ws_status(stack, box, tid, headers=(), query=""):
    """The HTTP status of a WebSocket handshake that is refused."""
    url = stack.url.replace("http://", "ws://", 1) + T(box, "/%s/ws" % tid) + query
    with pytest.raises(websocket.WebSocketBadStatusException) as exc:
        websocket.create_connection(url, header=list(headers), timeout=10)
    return exc.value.status_code


def ticket(api, box, tid, key=None):
    kw = {"key": key} if key else {}
    r = api("POST", T(box, "/%s/ticket" % tid), **kw)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["expiresIn"] == 60 and re.fullmatch(r"tk_[0-9a-f]{32}", body["ticket"]), body
    return body["ticket"]


def test_tickets_are_single_use_short_lived_and_bound(stack, api, redis_cli, new_key, box):
    rec = create(api, box)
    other = new_box(stack, "trt")
    other_rec = create(api, other)
    okey = new_key("term-other-" + uuid.uuid4().hex[:6])
    foreign = new_box_with_key(stack, okey)
    try:
        # no key, no ticket
        assert ws_status(stack, box, rec["id"]) == 401
        assert_error(api("POST", T(box), key=None, json={}), 401, "UNAUTHORIZED")
        assert ws_status(stack, box, rec["id"], query="?ticket=tk_" + "0" * 32) == 401
        assert ws_status(stack, box, rec["id"], query="?ticket=nonsense") == 401
        # a ticket opens the WebSocket once, without the key
        tk = ticket(api, box, rec["id"])
        ttl = int(redis_cli("TTL", "sbx:ticket:" + tk))
        assert 0 < ttl <= 60, ttl
        v = Viewer(stack, box, rec["id"], ticket=tk)
        v.wait_ready()
        v.close()
        assert ws_status(stack, box, rec["id"], query="?ticket=" + tk) == 401
        # not for another terminal, sandbox or route
        tk = ticket(api, box, rec["id"])
        assert ws_status(stack, other, other_rec["id"], query="?ticket=" + tk) == 401
        tk = ticket(api, box, rec["id"])
        assert_error(api("GET", T(box) + "?ticket=" + tk, key=None), 401, "UNAUTHORIZED")
        # not for another tenant's sandbox of the same terminal name
        frec = create(lambda *a, **k: stack.api(*a, key=okey, **k), foreign, id=rec["id"])
        tk = ticket(api, box, rec["id"])
        assert ws_status(stack, foreign, frec["id"], query="?ticket=" + tk) == 401
        # expired: Redis drops it at its TTL (60 s, shortened here)
        tk = ticket(api, box, rec["id"])
        assert redis_cli("PEXPIRE", "sbx:ticket:" + tk, "1") == "1"
        time.sleep(0.05)
        assert ws_status(stack, box, rec["id"], query="?ticket=" + tk) == 401
        # the WebSocket route is an upgrade only
        assert_error(api("GET", T(box, "/%s/ws" % rec["id"])), 400, "VALIDATION_FAILED")
        assert_error(api("GET", T(box, "/nope/ws")), 404, "TERMINAL_NOT_FOUND")
        # a ticket of an unknown terminal is refused at once
        assert_error(api("POST", T(box, "/nope/ticket")), 404, "TERMINAL_NOT_FOUND")
    finally:
        api("DELETE", T(box, "/" + rec["id"]))
        stack.api("DELETE", "/v1/sandboxes/" + other, timeout=30)
        stack.api("DELETE", "/v1/sandboxes/" + foreign, key=okey, timeout=30)


def new_box_with_key(stack, key):
    return stack.create("trf", key=key)[0]


def test_a_viewer_keeps_the_sandbox_awake_and_ends_with_restart_and_sleep(stack, api):
    sid = "trs-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={"sleepAfter": "1s"}, timeout=30)
    assert r.status_code == 201, r.text
    try:
        rec = create(api, sid)
        v = Viewer(stack, sid, rec["id"])
        v.wait_ready()
        gen = api("GET", "/v1/sandboxes/" + sid).json()["generation"]
        time.sleep(3)
        now = api("GET", "/v1/sandboxes/" + sid).json()
        assert now["state"] == "running" and now["generation"] == gen, now
        # A restart ends it: the viewer gets a close frame, the list is empty.
        r = api("POST", "/v1/sandboxes/%s/restart" % sid, timeout=30)
        assert r.status_code in (200, 202), r.text
        v.until(lambda: v.closed, "close when the sandbox restarts")
        assert v.closed == 1001
        assert api("GET", T(sid)).json()["terminals"] == []
        # So does sleep.
        rec = create(api, sid)
        v = Viewer(stack, sid, rec["id"])
        v.wait_ready()
        r = api("POST", "/v1/sandboxes/%s/sleep" % sid)
        assert r.status_code in (200, 202, 204), r.text
        v.until(lambda: v.closed, "close when the sandbox sleeps")
        assert v.closed == 1001
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def cf_viewer(stack, box, session, query=""):
    v = Viewer.__new__(Viewer)
    url = stack.url.replace("http://", "ws://", 1) + \
        "/v1/sandboxes/%s/cf/ws/pty?sessionId=%s%s" % (box, session, query)
    v.ws = websocket.create_connection(url, header=["Authorization: Bearer " + stack.key],
                                       timeout=10)
    v.out, v.ctl, v.closed = b"", [], None
    return v


def test_the_cloudflare_sdk_pty_route(stack, api, box):
    """The SDK's terminal() proxies a WebSocket to /ws/pty?sessionId=&cols=&rows=
    (docs/COMPAT.md): one terminal per session, made on first use, replayed
    on reconnect; the same frames as the native route."""
    session = "s" + uuid.uuid4().hex[:8]
    v = cf_viewer(stack, box, session, "&cols=70&rows=21")
    try:
        v.wait_ready()
        v.send("stty size; echo cf$((5*5))\n")
        v.expect(r"\b21 70\b")
        v.expect(r"cf25")
        v.close()
        w = cf_viewer(stack, box, session)
        w.wait_ready()
        assert b"cf25" in w.out, w.out[-300:]
        w.close()
        ids = [t["id"] for t in api("GET", T(box)).json()["terminals"]]
        assert ids.count("pty-" + session) == 1, ids
    finally:
        api("DELETE", T(box, "/pty-" + session))
    with pytest.raises(websocket.WebSocketBadStatusException) as exc:
        cf_viewer(stack, box, "bad/id")
    assert exc.value.status_code == 400


def test_a_signalled_process_reports_its_signal(stack, api, box):
    rec = create(api, box, command="kill -TERM $$")
    try:
        v = Viewer(stack, box, rec["id"])
        v.until(lambda: any(m.get("type") == "exit" for m in v.ctl), "exit")
        msg = [m for m in v.ctl if m["type"] == "exit"][0]
        assert msg == {"type": "exit", "code": 143, "signal": "SIGTERM"}, msg
        listed = {t["id"]: t for t in api("GET", T(box)).json()["terminals"]}
        assert listed[rec["id"]]["signal"] == "SIGTERM", listed[rec["id"]]
    finally:
        api("DELETE", T(box, "/" + rec["id"]))
