#!/usr/bin/python3
"""Soak under abuse: one tenant attacks its node, another keeps working.

  make soak                        (runs tests/soak/run.py, then this)
  SBX_BUILD=build /usr/bin/python3 tests/soak/abuse.py [--streams N] [--seconds S]

Brings up its own stack with one agent, so both tenants share a node.
Tenant "mallory", from several threads at once:
  - opens exec SSE streams and closes each after its first bytes (--streams
    in all, through nginx);
  - uploads past its sandbox's memory limit (a 32 MiB sandbox, 96 MiB
    bodies: every one must be refused with a 4xx, or 503 NO_CAPACITY when
    the node's budget of large bodies in flight is used up);
  - reads a 16 MiB file with ?encoding=utf-8 and stalls, many at once;
  - starts processes that write 1 MiB of logs each;
  - creates terminals running `yes` (a flood into each pty) up to its cap and
    past it, opens their WebSockets and drops them after the first bytes;
  - runs code contexts that spin (`while True: pass`, timed out) and that
    allocate past its memory limit, and creates contexts past the cap;
  - opens recursive watches of /workspace and drops them, while a process
    keeps creating and deleting files there;
  - imports a zstd bomb (a tar of one 1 GiB file of zeros, ~40 KiB
    compressed) as a snapshot and restores it past its disk limit.
Tenant "alice" runs exec in its own sandbox all along, and every answer
is recorded.

It prints alice's exec count, errors and p50/p99, the agent's fds and RSS
before and after, and the node's state seen every second. Exit status 1
when alice saw any error, the node was ever not `up` (it flapped), one of
mallory's terminal, context, watch or import calls was answered with a 5xx
other than 503, the bomb was restored, or the agent's fds / RSS did not come
back near where they started.
"""

import argparse
import base64
import io
import os
import socket
import subprocess
import sys
import tarfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from conftest import stack_down, stack_up  # noqa: E402
from sbxproc import fd_count, rss_kib  # noqa: E402

FD_SLACK = 16          # the agent's own fds move a little (Redis, timers, logs)
RSS_SLACK_MIB = 48     # allocator slack after the storm


def api(st, key, method, path, **kw):
    import requests
    return requests.request(method, st.url + path, headers={"Authorization": "Bearer " + key},
                            timeout=kw.pop("timeout", 60), **kw)


def abort_streams(st, key, sid, count, stop):
    """Open exec SSE streams through nginx and close each after its head."""
    host, port = st.url.split("//", 1)[1].split(":")
    body = b'{"command":"sleep 30"}'
    req = ("POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
           "Accept: text/event-stream\r\nContent-Type: application/json\r\n"
           "Content-Length: %d\r\n\r\n" % (sid, host, key, len(body))).encode() + body
    done = 0
    while done < count and not stop.is_set():
        try:
            s = socket.create_connection((host, int(port)), timeout=30)
            s.sendall(req)
            s.recv(256)
            s.close()
        except OSError:
            pass
        done += 1
    return done


def big_uploads(st, key, sid, stop, refused):
    blob = b"\0" * (96 << 20)
    while not stop.is_set():
        r = api(st, key, "PUT", "/v1/sandboxes/%s/files/workspace/big.bin" % sid, data=blob,
                timeout=120)
        try:
            code = r.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = ""
        refused.append((r.status_code, code))


def stalled_readers(st, key, sid, stop, n=8):
    host, port = st.url.split("//", 1)[1].split(":")
    req = ("GET /v1/sandboxes/%s/files/workspace/text.txt?encoding=utf-8 HTTP/1.1\r\nHost: %s\r\n"
           "Authorization: Bearer %s\r\n\r\n" % (sid, host, key)).encode()
    while not stop.is_set():
        socks = []
        for _ in range(n):
            try:
                s = socket.create_connection((host, int(port)), timeout=30)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(req)
                s.recv(64)
                socks.append(s)
            except OSError:
                pass
        stop.wait(5)
        for s in socks:
            s.close()


def log_heavy(st, key, sid, stop):
    n = 0
    while not stop.is_set():
        api(st, key, "POST", "/v1/sandboxes/%s/processes" % sid,
            json={"command": "head -c 1048576 /dev/zero | tr '\\0' x", "id": "log-%d" % n})
        n += 1
        stop.wait(0.2)


def raw_get(st, key, path, extra=""):
    """A socket that sent GET path (auth, extra headers) and read the head."""
    host, port = st.url.split("//", 1)[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n%s\r\n"
               % (path, host, key, extra)).encode())
    s.recv(4096)
    return s


def terminal_churn(st, key, sid, stop, statuses):
    base = "/v1/sandboxes/%s/terminals" % sid
    upgrade = ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Key: %s\r\n" % base64.b64encode(os.urandom(16)).decode())
    while not stop.is_set():
        r = api(st, key, "POST", base, json={"argv": ["yes"]})
        statuses.append(r.status_code)
        if r.status_code != 201:
            # the cap: make room, every terminal's tree is killed
            for t in api(st, key, "GET", base).json().get("terminals", []):
                statuses.append(api(st, key, "DELETE", base + "/" + t["id"]).status_code)
            continue
        try:
            raw_get(st, key, "%s/%s/ws" % (base, r.json()["id"]), upgrade).close()
        except OSError:
            pass


def context_churn(st, key, sid, stop, statuses):
    base = "/v1/sandboxes/%s/contexts" % sid
    codes = ["while True: pass", "x = bytearray(256 << 20)", "1 + 1"]
    n = 0
    while not stop.is_set():
        r = api(st, key, "POST", base, json={"language": "python"}, timeout=120)
        statuses.append(r.status_code)
        if r.status_code != 201:
            for c in api(st, key, "GET", base).json().get("contexts", []):
                statuses.append(api(st, key, "DELETE", base + "/" + c["id"]).status_code)
            continue
        ctx = r.json()["id"]
        for code in codes:
            r = api(st, key, "POST", "%s/%s/run" % (base, ctx),
                    json={"code": code, "timeoutMs": 1000}, timeout=120)
            statuses.append(r.status_code)
        n += 1
        if n % 4 == 0:      # keep some, to reach the cap now and then
            statuses.append(api(st, key, "DELETE", base + "/" + ctx).status_code)


def watch_churn(st, key, sid, stop, statuses):
    r = api(st, key, "POST", "/v1/sandboxes/%s/processes" % sid,
            json={"command": "mkdir -p /workspace/w; while :; do for i in 1 2 3 4 5 6 7 8; do "
                             "mkdir -p /workspace/w/d$i; : > /workspace/w/d$i/f; done; "
                             "rm -rf /workspace/w/d*; done", "id": "watch-churn"})
    statuses.append(r.status_code)
    while not stop.is_set():
        try:
            socks = [raw_get(st, key, "/v1/sandboxes/%s/watch?path=/workspace&recursive=true"
                             % sid, "Accept: text/event-stream\r\n") for _ in range(4)]
            stop.wait(0.5)
            for s in socks:
                s.close()
        except OSError:
            pass


def zstd_bomb():
    """A zstd tar of workspace/zeros, 1 GiB of zeros: tens of KiB."""
    z = subprocess.Popen(["zstd", "-q", "-3", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    class Zeros(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            b[:] = bytes(len(b))
            return len(b)

    import threading as th
    out = []
    reader = th.Thread(target=lambda: out.append(z.stdout.read()))
    reader.start()
    with tarfile.open(fileobj=z.stdin, mode="w|") as tf:
        ti = tarfile.TarInfo("workspace/zeros")
        ti.size = 1 << 30
        tf.addfile(ti, io.BufferedReader(Zeros(), 1 << 20))
    z.stdin.close()
    reader.join()
    z.wait()
    return out[0]


def import_bombs(st, key, sid, stop, statuses, restored):
    bomb = zstd_bomb()
    while not stop.is_set():
        r = api(st, key, "PUT", "/v1/sandboxes/%s/archive?name=bomb" % sid, data=bomb,
                timeout=120)
        statuses.append(r.status_code)
        if r.status_code != 201:
            stop.wait(1)
            continue
        snap = r.json()["id"]
        r = api(st, key, "POST", "/v1/sandboxes/%s/restore" % sid, json={"snapshot": snap},
                timeout=120)
        statuses.append(r.status_code)
        if r.status_code < 300:
            restored.append(snap)
        statuses.append(api(st, key, "DELETE", "/v1/snapshots/" + snap).status_code)


def alice_execs(st, key, sid, stop, lat, errors):
    import requests
    sess = requests.Session()
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            r = sess.post(st.url + "/v1/sandboxes/%s/exec" % sid, json={"command": "echo ok"},
                          headers={"Authorization": "Bearer " + key}, timeout=30)
            if r.status_code != 200 or r.json().get("stdout") != "ok\n":
                errors.append("%d %s" % (r.status_code, r.text[:120]))
        except requests.RequestException as ex:
            errors.append(repr(ex))
        lat.append((time.monotonic() - t0) * 1000)
        time.sleep(0.02)


def node_watch(st, stop, states):
    while not stop.is_set():
        r = api(st, st.admin_key, "GET", "/v1/nodes", timeout=10)
        for n in r.json().get("nodes", []) if r.status_code == 200 else [{"state": "?"}]:
            states.append(n.get("state"))
        stop.wait(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=240.0, help="at most this long")
    args = ap.parse_args()

    st = stack_up(agents=1)
    ok = True
    try:
        mallory, alice = st.new_key("mallory"), st.new_key("alice")
        msid, asid = "m-" + uuid.uuid4().hex[:8], "a-" + uuid.uuid4().hex[:8]
        r = api(st, mallory, "PUT", "/v1/sandboxes/" + msid,
                json={"keepAlive": True, "resources": {"memoryMiB": 32}})
        assert r.status_code == 201, r.text
        # the terminals, contexts, watches and bombs go to a second sandbox
        # of mallory's, with room for an interpreter and a 256 MiB disk
        m2 = "m2-" + uuid.uuid4().hex[:8]
        r = api(st, mallory, "PUT", "/v1/sandboxes/" + m2,
                json={"keepAlive": True, "resources": {"memoryMiB": 256, "diskMiB": 256}})
        assert r.status_code == 201, r.text
        r = api(st, alice, "PUT", "/v1/sandboxes/" + asid, json={"keepAlive": True})
        assert r.status_code == 201, r.text
        r = api(st, mallory, "PUT", "/v1/sandboxes/%s/files/workspace/text.txt" % msid,
                data=("é" * (8 << 20)).encode())
        assert r.status_code in (200, 201), r.text
        agent = st.pid("agent-1")
        fds0, rss0 = fd_count(agent), rss_kib(agent)

        stop = threading.Event()
        lat, errors, states, refused = [], [], [], []
        feats = {"terminals": [], "contexts": [], "watches": [], "imports": []}
        restored = []
        streams_done = []
        threads = [
            threading.Thread(target=lambda: streams_done.append(
                abort_streams(st, mallory, msid, args.streams, stop))),
            threading.Thread(target=big_uploads, args=(st, mallory, msid, stop, refused)),
            threading.Thread(target=stalled_readers, args=(st, mallory, msid, stop)),
            threading.Thread(target=log_heavy, args=(st, mallory, msid, stop)),
            threading.Thread(target=terminal_churn,
                             args=(st, mallory, m2, stop, feats["terminals"])),
            threading.Thread(target=context_churn,
                             args=(st, mallory, m2, stop, feats["contexts"])),
            threading.Thread(target=watch_churn, args=(st, mallory, m2, stop, feats["watches"])),
            threading.Thread(target=import_bombs,
                             args=(st, mallory, m2, stop, feats["imports"], restored)),
            threading.Thread(target=alice_execs, args=(st, alice, asid, stop, lat, errors)),
            threading.Thread(target=node_watch, args=(st, stop, states)),
        ]
        t0 = time.monotonic()
        for t in threads:
            t.daemon = True
            t.start()
        threads[0].join(args.seconds)
        stop.set()
        for t in threads[1:]:
            t.join(150)
        wall = time.monotonic() - t0
        fds_peak = fd_count(agent)
        # the second sandbox goes with its terminals, contexts and watches
        gone = api(st, mallory, "DELETE", "/v1/sandboxes/" + m2).status_code
        if gone != 204:
            print("DELETE of mallory's second sandbox: %d" % gone)
            ok = False
        # what the storm held must go back: wait for it, then judge
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and fd_count(agent) > fds0 + FD_SLACK:
            time.sleep(1)
        fds1, rss1 = fd_count(agent), rss_kib(agent)
        lat.sort()
        p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0.0)
        print("abuse soak: %.0f s; mallory aborted %d streams, %d uploads (statuses %s)" % (
            wall, streams_done[0] if streams_done else 0, len(refused), sorted(set(refused))))
        print("alice: %d execs, %d errors, p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
            len(lat), len(errors), p(0.5), p(0.99), lat[-1] if lat else 0.0))
        print("agent: fds %d -> peak %d -> %d; RSS %d KiB -> %d KiB" % (
            fds0, fds_peak, fds1, rss0, rss1))
        print("node states seen: %s" % {s: states.count(s) for s in set(states)})
        for name, sts in feats.items():
            print("mallory's %s: statuses %s" % (name, {c: sts.count(c) for c in sorted(set(sts))}))
            if any(c >= 500 and c != 503 for c in sts):
                print("mallory's %s got a 5xx other than 503" % name)
                ok = False
        if restored:
            print("the bomb was restored: %s" % restored)
            ok = False
        if errors:
            print("alice's errors: %r" % errors[:10])
            ok = False
        if any(s != "up" for s in states):
            print("the node was not up throughout")
            ok = False
        # 4xx, or the node's budget of bodies in flight (shared with the
        # imports) used up: 503 NO_CAPACITY
        if any(not (400 <= s < 500 or (s, c) == (503, "NO_CAPACITY")) for s, c in refused):
            print("an upload past the limit was not refused with a 4xx or NO_CAPACITY")
            ok = False
        if fds1 > fds0 + FD_SLACK or rss1 > rss0 + RSS_SLACK_MIB * 1024:
            print("the agent did not come back to where it started")
            ok = False
        if not lat:
            ok = False
        if st.pid("agent-1") != agent:
            print("the agent restarted")
            ok = False
        print("abuse soak: %s" % ("ok" if ok else "FAILED"))
    finally:
        stack_down(st)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
