"""Terminal figures of `make bench` (run.py calls fig_terminals):

- terminal-echo: one keystroke sent over the terminal's WebSocket through
  nginx and its echo back (the pty's line discipline echoes it: the
  terminal runs `cat`), sequential on one connection. Target p50 <= 3 ms.
- terminal-create: `POST …/terminals` (a pty in the sandbox's devpts, a
  process on it; answered once it runs) on one persistent connection.

Alone: `BENCH_ONLY=terminals make bench` (run.py).
"""

import http.client
import json
import os
import urllib.parse

import websocket

from benchlib import Lat, timed

N_ECHO = int(os.environ.get("BENCH_N_ECHO", "1000"))
N_CREATE = int(os.environ.get("BENCH_N_TERM_CREATE", "50"))
SID = "bench-term"


def fig_terminals(st, ctx):
    """Lat figures into ctx: keystroke echo and terminal creation."""
    auth = {"Authorization": "Bearer " + st.key}
    r = st.http.put(st.url + "/v1/sandboxes/" + SID, json={"keepAlive": True}, headers=auth,
                    timeout=30)
    assert r.status_code in (200, 201), r.text
    u = urllib.parse.urlsplit(st.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    hdrs = dict(auth, **{"Content-Type": "application/json"})
    made = []

    def create():
        conn.request("POST", "/v1/sandboxes/%s/terminals" % SID,
                     body=json.dumps({"argv": ["cat"]}), headers=hdrs)
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 201, body
        made.append(json.loads(body)["id"])

    try:
        create_lat = Lat("terminal-create", "`POST …/terminals` {argv:[cat]}: a pty of the "
                         "sandbox's devpts and the process on it, answered once it runs; one "
                         "http.client connection through nginx (N=%d)" % N_CREATE,
                         samples=timed(create, N_CREATE, warmup=3))
        echo_id = made.pop()
        for tid in made:
            conn.request("DELETE", "/v1/sandboxes/%s/terminals/%s" % (SID, tid), headers=auth)
            conn.getresponse().read()
        ws = websocket.create_connection(
            st.url.replace("http://", "ws://", 1) +
            "/v1/sandboxes/%s/terminals/%s/ws" % (SID, echo_id),
            header=["Authorization: Bearer " + st.key], timeout=10)
        ws.sock.setsockopt(6, 1, 1)   # TCP_NODELAY on the client side too
        while True:                  # the replay, then ready
            op, data = ws.recv_data()
            if op == websocket.ABNF.OPCODE_TEXT and json.loads(data).get("type") == "ready":
                break
        sent = [0]

        def key():
            ws.send_binary(b"k")
            got = b""
            while b"k" not in got:
                op, data = ws.recv_data()
                if op == websocket.ABNF.OPCODE_BINARY:
                    got += data
            sent[0] += 1
            if sent[0] % 200 == 0:   # end the line (untimed by position: rare)
                ws.send_binary(b"\x15")

        echo = Lat("terminal-echo", "one keystroke over the terminal's WebSocket through nginx "
                   "(nginx -> agent -> pty, the line discipline's echo back), sequential on one "
                   "connection (N=%d)" % N_ECHO, target_ms=3.0,
                   samples=timed(key, N_ECHO, warmup=50))
        ws.close()
        ctx.lat += [echo, create_lat]
        return [echo, create_lat]
    finally:
        conn.close()
        st.http.delete(st.url + "/v1/sandboxes/" + SID, headers=auth, timeout=30)
