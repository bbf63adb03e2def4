"""The Files API under a concurrent rename-exchange race (docs/SECURITY.md
"File API"): inside the sandbox a background process swaps a real directory
and a symlink to `/` with renameat2(RENAME_EXCHANGE) in a tight loop while
the API reads, writes, stats, lists, moves and deletes through both names
thousands of times from several threads.

The attacker's goal is to make the agent (root on the host) touch a HOST
path. So a canary directory exists on the host at /tmp/sbx-canary-<hex>/
(a `secret` file with distinctive content and a `hostonly-<hex>` file), and
the API is asked for `/workspace/l/tmp/sbx-canary-<hex>/…`: resolved inside
the sandbox that is the sandbox's own /tmp/sbx-canary-<hex>/ (which holds a
different `secret`); resolved on the host it would be the canary. An
inotify watch on the host canary directory and its files proves that the
agent never opened, read, wrote, created, deleted or renamed anything
there; the answers never carry the canary's content or its names; every
answer is a 2xx or an expected 4xx (never a 500); and the swapper really
swapped thousands of times while the requests ran.
"""

import ctypes
import os
import struct
import threading
import time
import uuid
from urllib.parse import quote

import pytest
import requests

THREADS = 8
ROUNDS = 60              # per thread; each round is 11 requests → 8*60*11 = 5280
MIN_SWAPS = 2000
ALLOWED = {200, 201, 204, 400, 404, 409}

# inotify (linux/inotify.h)
IN_ACCESS = 0x001
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_CLOSE_NOWRITE = 0x010
IN_OPEN = 0x020
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_ALL = 0xfff
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

SWAPPER = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_EXCHANGE = 2
try:
    fn = libc.renameat2
    def swap(a, b):
        return fn(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
except AttributeError:
    nr = {"x86_64": 316, "aarch64": 276}[os.uname().machine]
    def swap(a, b):
        return libc.syscall(nr, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
a, b = b"/workspace/d", b"/workspace/l"
n = fails = 0
deadline = time.monotonic() + float(sys.argv[1])
print("swapping", flush=True)
while True:
    for _ in range(512):
        if swap(a, b) == 0:
            n += 1
        else:
            fails += 1
    if os.path.exists("/stopswap") or time.monotonic() > deadline:
        break
with open("/swapcount", "w") as f:
    f.write("%d %d\n" % (n, fails))
print("swaps %d fails %d" % (n, fails), flush=True)
'''


class Inotify:
    """A non-blocking inotify fd watching paths; events() drains it."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        assert self.fd >= 0, "inotify_init1: errno %d" % ctypes.get_errno()
        self.wd = {}

    def watch(self, path):
        wd = self.libc.inotify_add_watch(self.fd, path.encode(), IN_ALL)
        assert wd >= 0, "inotify_add_watch %s: errno %d" % (path, ctypes.get_errno())
        self.wd[wd] = path

    def events(self):
        """[(watched path, mask, name)] of everything queued so far."""
        out = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            i = 0
            while i + 16 <= len(buf):
                wd, mask, _cookie, ln = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode(errors="replace")
                out.append((self.wd.get(wd, "?"), mask, name))
                i += 16 + ln

    def close(self):
        os.close(self.fd)


def enc(p):
    return quote(p, safe="")


@pytest.fixture
def host_canary():
    tag = uuid.uuid4().hex
    d = "/tmp/sbx-canary-" + tag
    os.mkdir(d, 0o755)
    secret = os.path.join(d, "secret")
    content = ("HOST-CANARY-%s do not read\n" % tag).encode()
    with open(secret, "wb") as f:
        f.write(content)
    only = os.path.join(d, "hostonly-" + tag)
    with open(only, "wb") as f:
        f.write(content)
    yield tag, d, secret, content
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


@pytest.fixture
def race_box(stack):
    sid = stack.create("race")[0]
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_rename_exchange_race_never_touches_the_host(stack, api, race_box, host_canary):
    tag, cdir, csecret, ccontent = host_canary
    sid = race_box
    base = "/v1/sandboxes/%s" % sid
    sbx_secret = ("sandbox copy %s\n" % tag).encode()
    cpath = "tmp/sbx-canary-%s" % tag          # below l (→ /) or below d
    # The sandbox's own copy of the canary path, and the two names.
    assert api("PUT", base + "/files/" + enc("/" + cpath + "/secret"),
               data=sbx_secret).status_code == 201
    assert api("PUT", base + "/files/" + enc("/workspace/d/f"), data=b"inside f\n").status_code == 201
    assert api("PUT", base + "/files/" + enc("/workspace/swap.py"),
               data=SWAPPER.encode()).status_code == 201
    r = api("POST", base + "/exec", json={"command": "ln -s / /workspace/l && ls -la /workspace"})
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text

    before = os.stat(csecret)
    names_before = sorted(os.listdir(cdir))
    ino = Inotify()
    ino.watch(cdir)
    ino.watch(csecret)
    try:
        r = api("POST", base + "/processes",
                json={"id": "swapper", "argv": ["python3", "/workspace/swap.py", "120"]})
        assert r.status_code == 201, r.text
        r = api("GET", base + "/processes/swapper/wait?log=swapping&timeoutMs=10000", timeout=20)
        assert r.status_code == 200, r.text

        statuses = {}
        codes = {}
        bad = []
        df_outcomes = {}
        l_secret_outcomes = {}
        lock = threading.Lock()
        marker = tag.encode()
        forbidden = (ccontent.strip(), ("hostonly-" + tag).encode())

        def note(method, path, r):
            body = r.content
            with lock:
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                if r.status_code not in ALLOWED:
                    bad.append("%s %s -> %d %r" % (method, path, r.status_code, body[:200]))
                for f in forbidden:
                    if f in body:
                        bad.append("%s %s -> host canary data in the answer: %r" %
                                   (method, path, body[:200]))
                if r.status_code >= 400:
                    try:
                        code = r.json()["error"]["code"]
                    except (ValueError, KeyError, TypeError):
                        code = None
                    if not r.headers.get("Content-Type", "").startswith("application/json") \
                            or not code:
                        bad.append("%s %s -> %d without a JSON error: %r" %
                                   (method, path, r.status_code, body[:200]))
                    key = "%s %s %s" % (method, path.split("/")[1], code)
                    codes[key] = codes.get(key, 0) + 1

        def worker(t):
            s = requests.Session()
            s.headers["Authorization"] = "Bearer " + stack.key

            def call(method, path, **kw):
                r = s.request(method, stack.url + base + path, timeout=30, **kw)
                note(method, path, r)
                return r

            for i in range(ROUNDS):
                n = "%d-%d" % (t, i)
                r = call("GET", "/files/" + enc("/workspace/d/f"))
                with lock:
                    df_outcomes[r.status_code] = df_outcomes.get(r.status_code, 0) + 1
                    if r.status_code == 200 and r.content != b"inside f\n":
                        bad.append("GET d/f -> unexpected content %r" % r.content[:200])
                r = call("GET", "/files/" + enc("/workspace/l/%s/secret" % cpath))
                with lock:
                    l_secret_outcomes[r.status_code] = l_secret_outcomes.get(r.status_code, 0) + 1
                    if r.status_code == 200 and r.content != sbx_secret:
                        bad.append("GET l/…/secret -> unexpected content %r" % r.content[:200])
                call("PUT", "/files/" + enc("/workspace/d/new-" + n), data=b"new " + marker)
                call("PUT", "/files/" + enc("/workspace/l/%s/written" % cpath), data=b"pwned")
                call("GET", "/stat/" + enc("/workspace/l/%s/secret" % cpath))
                call("GET", "/stat/" + enc("/workspace/d/f"))
                call("GET", "/dirs/" + enc("/workspace/d"))
                call("GET", "/dirs/" + enc("/workspace/l/" + cpath) + "?recursive=true&hidden=true")
                call("PUT", "/files/" + enc("/workspace/l/%s/sub-%s/x" % (cpath, n)), data=b"x")
                call("DELETE", "/files/" + enc("/workspace/l/%s/sub-%s" % (cpath, n)) +
                     "?recursive=true")
                if i % 2:
                    call("DELETE", "/files/" + enc("/workspace/d/new-" + n))
                else:
                    call("POST", "/move", json={"from": "/workspace/d/new-" + n,
                                                "to": "/workspace/l/%s/moved" % cpath,
                                                "overwrite": True})

        t0 = time.monotonic()
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        took = time.monotonic() - t0

        r = api("PUT", base + "/files/" + enc("/stopswap"), data=b"1")
        assert r.status_code == 201, r.text
        r = api("GET", base + "/processes/swapper/wait?timeoutMs=20000", timeout=30)
        assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
        events = ino.events()
    finally:
        ino.close()

    logs = api("GET", base + "/processes/swapper/logs").json()
    swaps, fails = (int(x) for x in logs["stdout"].split("swaps ")[1].split(" fails "))
    total = sum(statuses.values())
    print("race: %d requests in %.1f s by %d threads while %d swaps (%d failed) ran; "
          "statuses %s; d/f %s; l/…/secret %s; errors %s" % (
              total, took, THREADS, swaps, fails, statuses, df_outcomes, l_secret_outcomes,
              codes))

    assert not events, "the host canary was touched: %r" % [
        (p, hex(m), n) for p, m, n in events[:20]]
    after = os.stat(csecret)
    assert (after.st_mtime_ns, after.st_ctime_ns, after.st_size, after.st_ino) == \
        (before.st_mtime_ns, before.st_ctime_ns, before.st_size, before.st_ino)
    assert sorted(os.listdir(cdir)) == names_before
    with open(csecret, "rb") as f:
        assert f.read() == ccontent
    assert not bad, "%d bad answers, first ones:\n%s" % (len(bad), "\n".join(bad[:20]))
    assert total >= 3000, total
    assert swaps >= MIN_SWAPS, "the swapper did only %d swaps" % swaps
    # The race was really hit: both names resolved both ways during the run.
    assert df_outcomes.get(200) and df_outcomes.get(404), df_outcomes
    assert l_secret_outcomes.get(200) and l_secret_outcomes.get(404), l_secret_outcomes
