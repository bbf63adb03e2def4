"""File watch (docs/API.md "Watch"): GET /v1/sandboxes/{id}/watch is an
event stream of `ready`, then create / modify / delete / move with path and
isDirectory, coalesced; directories made later are watched when recursive;
exclude= drops names; a burst does not grow the agent; the watches of a
sandbox are bounded; a stopped sandbox ends the stream with `error`; a
watch keeps its sandbox awake; another tenant gets 404."""

import json
import queue
import socket
import threading
import time
import urllib.parse
import uuid

import pytest

from conftest import assert_error
from sbxproc import rss_kib, wait_until

WATCHES_MAX = 8          # FW_EVENTS_SANDBOX_MAX, sandbox/features/files_worker.h


class Watch:
    """One watch stream, read by a thread into a queue of (name, data).
    HTTP/1.0 on a plain socket: the body is the stream as sent, and close()
    wakes the reader at once (shutdown), keep-alive or not."""

    def __init__(self, stack, sid, query="", key=None):
        host, port = urllib.parse.urlsplit(stack.url).netloc.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        self.sock.sendall(("GET /v1/sandboxes/%s/watch?%s HTTP/1.0\r\nHost: sbx\r\n"
                           "Authorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n"
                           % (sid, query, key or stack.key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            assert chunk, "the watch closed before its headers: %r" % head
            head += chunk
        head, self.rest = head.split(b"\r\n\r\n", 1)
        self.status = int(head.split(b" ", 2)[1])
        self.q = queue.Queue()
        self.gate = threading.Event()
        self.gate.set()
        self.ended = threading.Event()
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        name, data, rest = None, None, b""
        chunk = self.rest or self.sock.recv(65536)
        try:
            while chunk:
                self.gate.wait()
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    line = line.decode()
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        data = json.loads(line[6:])
                    elif line == "" and name:
                        self.q.put((name, data))
                        name, data = None, None
                chunk = self.sock.recv(65536)
        except OSError:
            pass
        except Exception as ex:  # noqa: BLE001 — a broken stream fails the test that reads it
            self.q.put(("reader-error", {"error": repr(ex)}))
        self.ended.set()

    def next(self, pred=lambda n, d: True, timeout=15):
        """The first event matching pred(name, data); the ones before it
        are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "no matching watch event in %ss" % timeout
            try:
                name, data = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if pred(name, data):
                return name, data

    def drain(self, quiet=0.5):
        """Every event until none came for quiet seconds."""
        out = []
        while True:
            try:
                out.append(self.q.get(timeout=quiet))
            except queue.Empty:
                return out

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def sh(stack, sid, command):
    r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command}, timeout=60)
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    return r.json()


@pytest.fixture(scope="module")
def box(stack):
    sid = "wa-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={"resources": {"pids": 256}}, timeout=30)
    assert r.status_code == 201, r.text
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def is_(kind, path):
    return lambda n, d: n == kind and d.get("path") == path


def test_each_event_type(stack, box):
    sh(stack, box, "mkdir -p /workspace/t1")
    w = Watch(stack, box, "path=/workspace/t1")
    try:
        name, ready = w.next()
        assert name == "ready" and ready["path"] == "/workspace/t1" and ready["recursive"] is True
        sh(stack, box, "echo a > /workspace/t1/f")
        _, d = w.next(is_("create", "/workspace/t1/f"))
        assert d["isDirectory"] is False
        # the create's own write was coalesced into it
        assert not [e for e in w.drain() if e[0] == "modify"]
        sh(stack, box, "echo b >> /workspace/t1/f")
        w.next(is_("modify", "/workspace/t1/f"))
        sh(stack, box, "mv /workspace/t1/f /workspace/t1/g")
        _, d = w.next(lambda n, d: n == "move")
        assert d["from"] == "/workspace/t1/f" and d["to"] == d["path"] == "/workspace/t1/g"
        sh(stack, box, "rm /workspace/t1/g")
        w.next(is_("delete", "/workspace/t1/g"))
        sh(stack, box, "mkdir /workspace/t1/sub")
        _, d = w.next(is_("create", "/workspace/t1/sub"))
        assert d["isDirectory"] is True
        sh(stack, box, "rmdir /workspace/t1/sub")
        _, d = w.next(is_("delete", "/workspace/t1/sub"))
        assert d["isDirectory"] is True
    finally:
        w.close()


def test_recursive_watches_new_directories_and_exclude_drops_names(stack, box):
    sh(stack, box, "mkdir -p /workspace/t2/old")
    w = Watch(stack, box, "path=/workspace/t2&exclude=node_modules,*.log")
    flat = Watch(stack, box, "path=/workspace/t2&recursive=false")
    try:
        assert w.next()[0] == "ready" and flat.next()[0] == "ready"
        sh(stack, box, "echo x > /workspace/t2/old/in-old")
        w.next(is_("create", "/workspace/t2/old/in-old"))
        # made at once with its contents: seen through the scan of the new directory
        sh(stack, box, "mkdir -p /workspace/t2/a/b/c && echo y > /workspace/t2/a/b/c/deep")
        w.next(is_("create", "/workspace/t2/a/b/c/deep"))
        # and watched from now on
        sh(stack, box, "echo z > /workspace/t2/a/b/c/later")
        w.next(is_("create", "/workspace/t2/a/b/c/later"))
        sh(stack, box, "mv /workspace/t2/a /workspace/t2/moved && echo m > /workspace/t2/moved/b/after-move")
        w.next(is_("create", "/workspace/t2/moved/b/after-move"))
        sh(stack, box, "mkdir /workspace/t2/node_modules && echo q > /workspace/t2/node_modules/x"
                       " && echo l > /workspace/t2/a.log && echo t > /workspace/t2/marker")
        w.next(is_("create", "/workspace/t2/marker"))
        seen = [d["path"] for _, d in w.drain()]
        assert not [p for p in seen if "node_modules" in p or p.endswith(".log")], seen
        # recursive=false: the new directory, nothing inside it
        got = [d.get("path") for _, d in flat.drain()]
        assert "/workspace/t2/a" in got and "/workspace/t2/old/in-old" not in got, got
        assert not [p for p in got if p and p.count("/") > 3], got
    finally:
        w.close()
        flat.close()


def test_burst_of_10000_writes_keeps_the_agent_flat(stack, box):
    """The client stops reading during a burst of 10 000 writes whose
    events (paths near FSPATH_MAX) come to ~38 MB of text, more than every
    buffer on the way holds: the helper drops what does not fit and says
    `overflow`; the agent only relays bounded records, so its RSS stays
    flat; the stream goes on afterwards."""
    deep = "/workspace/t3/" + "/".join(["d%d" % i + "x" * 248 for i in range(14)])
    sh(stack, box, "mkdir -p " + deep)
    node = stack.api("GET", "/v1/sandboxes/" + box).json()["node"]
    pid = stack.pid(node)
    w = Watch(stack, box, "path=/workspace/t3")
    try:
        assert w.next()[0] == "ready"
        before = rss_kib(pid)
        w.gate.clear()                       # a client that does not read
        sh(stack, box, "cd %s && i=0; while [ $i -lt 10000 ]; do echo $i > f${i}%s;"
                       " i=$((i+1)); done" % (deep, "y" * 200))
        during = rss_kib(pid)
        w.gate.set()
        # the kernel's queue may have overflowed too: a marker written
        # while the helper catches up can be lost (and said so); write
        # markers until one comes through
        events = []
        deadline = time.monotonic() + 60
        for i in range(1000):
            assert time.monotonic() < deadline, "no marker event after the burst: %d events, %s" % (
                len(events), {n for n, _ in events})
            sh(stack, box, "echo done > /workspace/t3/marker%d" % i)
            events += w.drain(quiet=1)
            if [e for e in events if e[1].get("path", "").startswith("/workspace/t3/marker")]:
                break
        kinds = {n for n, _ in events}
        assert "overflow" in kinds, kinds
        assert during - before < 16 * 1024, "agent RSS grew %d KiB in the burst" % (during - before)
        assert rss_kib(pid) - before < 16 * 1024
    finally:
        w.close()


def test_bad_input_and_other_tenants(stack, box):
    base = "/v1/sandboxes/%s/watch" % box
    sh(stack, box, "mkdir -p /workspace/t4 && echo f > /workspace/t4/file"
                   " && ln -sfn /proc/1/root /workspace/t4/magic")
    assert_error(stack.api("GET", base + "?path=/workspace/nope"), 404, "FILE_NOT_FOUND")
    assert_error(stack.api("GET", base + "?path=/workspace/t4/file"), 400, "NOT_DIRECTORY")
    assert_error(stack.api("GET", base + "?path=/workspace/../etc"), 400, "VALIDATION_FAILED")
    # resolved inside the sandbox's root: a /proc magic link is refused
    assert_error(stack.api("GET", base + "?path=/workspace/t4/magic/etc"), 400, "VALIDATION_FAILED")
    assert_error(stack.api("GET", base + "?recursive=maybe"), 400, "VALIDATION_FAILED")
    assert_error(stack.api("GET", base + "?exclude=a/b"), 400, "VALIDATION_FAILED")
    assert_error(stack.api("GET", base + "?exclude=" + ",".join("p%d" % i for i in range(17))),
                 400, "VALIDATION_FAILED")
    other = stack.new_key("watch-other-" + uuid.uuid4().hex[:6])
    assert_error(stack.api("GET", base, key=other), 404, "SANDBOX_NOT_FOUND")
    assert_error(stack.api("GET", base, key=None), 401, "UNAUTHORIZED")


def test_watches_per_sandbox_are_bounded(stack, box):
    sh(stack, box, "mkdir -p /workspace/t5")
    ws = []
    try:
        for _ in range(WATCHES_MAX):
            ws.append(Watch(stack, box, "path=/workspace/t5"))
            assert ws[-1].status == 200 and ws[-1].next()[0] == "ready"
        assert_error(stack.api("GET", "/v1/sandboxes/%s/watch?path=/workspace/t5" % box),
                     429, "QUOTA_EXCEEDED")
        ws.pop().close()

        def reopen():     # the slot is free once the agent saw the client go
            w = Watch(stack, box, "path=/workspace/t5")
            if w.status == 200:
                ws.append(w)
                return True
            w.close()
            return False
        wait_until("a free watch slot", reopen)
    finally:
        for w in ws:
            w.close()


def test_watch_keeps_the_sandbox_awake_and_ends_with_error_when_it_stops(stack):
    sid = "wb-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={"sleepAfter": "1s"}, timeout=30)
    assert r.status_code == 201, r.text
    try:
        w = Watch(stack, sid, "path=/workspace")
        assert w.next()[0] == "ready"
        time.sleep(3)   # three times sleepAfter, with nothing but the watch open
        assert stack.api("GET", "/v1/sandboxes/" + sid).json()["state"] == "running"
        r = stack.api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=30)
        assert r.status_code == 200, r.text
        name, d = w.next(lambda n, d: n == "error")
        assert d["code"] == "NODE_UNAVAILABLE", d
        assert w.ended.wait(10), "the stream did not end after its error"
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
