#!/usr/bin/python3
"""Soak under abuse: one tenant attacks its node, another keeps working.

  make soak                        (runs tests/soak/run.py, then this)
  SBX_BUILD=build /usr/bin/python3 tests/soak/abuse.py [--streams N] [--seconds S]

Brings up its own stack with one agent, so both tenants share a node.
Tenant "mallory", from several threads at once:
  - opens exec SSE streams and closes each after its first bytes (--streams
    in all, through nginx);
  - uploads past its sandbox's memory limit (a 32 MiB sandbox, 96 MiB
    bodies: every one must be refused with a 4xx);
  - reads a 16 MiB file with ?encoding=utf-8 and stalls, many at once;
  - starts processes that write 1 MiB of logs each.
Tenant "alice" runs exec in its own sandbox all along, and every answer
is recorded.

It prints alice's exec count, errors and p50/p99, the agent's fds and RSS
before and after, and the node's state seen every second. Exit status 1
when alice saw any error, the node was ever not `up` (it flapped), or the
agent's fds / RSS did not come back near where they started.
"""

import argparse
import os
import socket
import sys
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
        refused.append(r.status_code)


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
        r = api(st, alice, "PUT", "/v1/sandboxes/" + asid, json={"keepAlive": True})
        assert r.status_code == 201, r.text
        r = api(st, mallory, "PUT", "/v1/sandboxes/%s/files/workspace/text.txt" % msid,
                data=("é" * (8 << 20)).encode())
        assert r.status_code in (200, 201), r.text
        agent = st.pid("agent-1")
        fds0, rss0 = fd_count(agent), rss_kib(agent)

        stop = threading.Event()
        lat, errors, states, refused = [], [], [], []
        streams_done = []
        threads = [
            threading.Thread(target=lambda: streams_done.append(
                abort_streams(st, mallory, msid, args.streams, stop))),
            threading.Thread(target=big_uploads, args=(st, mallory, msid, stop, refused)),
            threading.Thread(target=stalled_readers, args=(st, mallory, msid, stop)),
            threading.Thread(target=log_heavy, args=(st, mallory, msid, stop)),
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
        if errors:
            print("alice's errors: %r" % errors[:10])
            ok = False
        if any(s != "up" for s in states):
            print("the node was not up throughout")
            ok = False
        if any(not (400 <= s < 500) for s in refused):
            print("an upload past the limit was not refused with a 4xx")
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
