"""Preview and tunnel figures of `make bench` (run.py calls them):

- preview: req/s and p50 of a tiny fixed-response HTTP server inside a
  sandbox reached through a preview URL (nginx -> auth_request -> agent
  forwarder -> the sandbox's netns), beside the same server program run on
  the host on a loopback port and hit directly. Target: >= 50% of direct.
- tunnel lookup: a repeated `POST /v1/sandboxes/{id}/tunnels/{port}` on a
  tunnel that exists (and `GET …/tunnels`), sequential on one persistent
  connection (http.client: less client overhead than requests) and with wrk
  on one connection. Target p50 <= 1 ms.

The server program (SERVER) is the same file on both sides: asyncio,
keep-alive, answers every request with 200 and a 2-byte body.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

from benchlib import Lat, timed

N_LOOKUP = int(os.environ.get("BENCH_N_LOOKUP", "500"))
PORT = 8000
SID = "bench-preview"

SERVER = r'''
import asyncio, sys

RESP = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
        b"Connection: keep-alive\r\n\r\nok")

class P(asyncio.Protocol):
    def connection_made(self, t):
        self.t = t
        self.buf = b""
    def data_received(self, data):
        self.buf += data
        n = 0
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                break
            self.buf = self.buf[i + 4:]
            n += 1
        if n:
            self.t.write(RESP * n)

async def main(port):
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(P, "127.0.0.1", port, backlog=512, reuse_address=True)
    print("listening", port, flush=True)
    async with srv:
        await srv.serve_forever()

asyncio.run(main(int(sys.argv[1])))
'''


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _wait_ok(fn, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as ex:  # noqa: BLE001 - retried until the deadline
            last = ex
        time.sleep(0.1)
    raise RuntimeError("timed out waiting for %s (last: %r)" % (what, last))


def setup(st):
    """The sandbox with SERVER on PORT, exposed; (preview url, tunnel)."""
    h = {"Authorization": "Bearer " + st.key}
    r = st.http.put(st.url + "/v1/sandboxes/" + SID, json={"keepAlive": True}, headers=h, timeout=30)
    assert r.status_code in (200, 201), r.text
    r = st.http.post(st.url + "/v1/sandboxes/%s/exec" % SID, headers=h, timeout=30,
                     json={"command": "cat > /workspace/server.py", "stdin": SERVER})
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    r = st.http.post(st.url + "/v1/sandboxes/%s/processes" % SID, headers=h, timeout=30,
                     json={"command": "python3 /workspace/server.py %d" % PORT})
    assert r.status_code == 201, r.text
    r = st.http.post(st.url + "/v1/sandboxes/%s/ports/%d" % (SID, PORT), headers=h, json={},
                     timeout=30)
    assert r.status_code == 200, r.text
    url = r.json()["url"]
    host = urllib.parse.urlsplit(url).netloc

    def serving():
        return st.http.get(st.url + "/", headers={"Host": host}, timeout=5).text == "ok"
    _wait_ok(serving, "the server behind the preview URL")
    r = st.http.post(st.url + "/v1/sandboxes/%s/tunnels/%d" % (SID, PORT), headers=h, json={},
                     timeout=30)
    assert r.status_code == 200, r.text
    return host, r.json()


def fig_preview(st, run):
    """Two wrk Results of run (run.py's module): direct and through a preview URL."""
    host, _ = setup(st)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SERVER)
        script = f.name
    port = _free_port()
    proc = subprocess.Popen([sys.executable, script, str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        proc.stdout.readline()
        direct = run.Result("preview-direct", "the same fixed-response server (asyncio, "
                            "keep-alive) on the host, wrk straight at 127.0.0.1:port")
        run.peak(direct, "http://127.0.0.1:%d/" % port)
    finally:
        proc.kill()
        proc.wait()
        os.unlink(script)
    rec = json.loads(st.redis_cli("HGET", "sbx:sb:{dev/%s}:ports" % SID, str(PORT)))
    fwd = run.Result("preview-forwarder", "the agent's forwarder of that port hit directly "
                     "(wrk keep-alive with the node secret; no nginx, no auth_request)",
                     baseline="preview-direct")
    run.peak(fwd, "http://%s/" % rec["forward"], headers=("X-Sbx-Node-Secret: " + st.secret,))
    out = [direct, fwd]
    if rec.get("gateway"):
        gw = run.Result("preview-gateway", "the node's preview gateway hit directly (wrk "
                        "keep-alive with the node secret and the target nginx would set; "
                        "every request framed and relayed on its own)", baseline="preview-direct")
        run.peak(gw, "http://%s/" % rec["gateway"], headers=(
            "X-Sbx-Node-Secret: " + st.secret,
            "X-Sbx-Target: dev/%s/%d/%d" % (SID, rec["generation"], PORT)))
        out.append(gw)
    via = run.Result("preview", "GET through a preview URL: nginx -> auth_request "
                     "(/_sbx_preview, cached 1 s) -> the node's preview gateway (kept "
                     "connections) -> the server in the sandbox's netns", baseline="preview-direct")
    via.target = 0.50
    run.peak(via, st.url + "/", headers=("Host: " + host,))
    return out + [via]


def fig_tunnel_lookup(st, ctx, run):
    """The cached tunnel: Lat figures into ctx, wrk Results returned."""
    _, t = setup(st)
    u = urllib.parse.urlsplit(st.url)
    hdrs = {"Authorization": "Bearer " + st.key, "Content-Type": "application/json",
            "Content-Length": "2"}
    post_path = "/v1/sandboxes/%s/tunnels/%d" % (SID, PORT)
    list_path = "/v1/sandboxes/%s/tunnels" % SID
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    bad = [0]

    def post():
        conn.request("POST", post_path, body=b"{}", headers=hdrs)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200 or t["url"].encode() not in body:
            bad[0] += 1

    def get():
        conn.request("GET", list_path, headers={"Authorization": hdrs["Authorization"]})
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            bad[0] += 1

    def floor():
        conn.request("GET", "/healthz")
        conn.getresponse().read()

    lat = Lat("tunnel-lookup", "`POST …/tunnels/{port}` on an existing builtin tunnel (claim "
              "script + forwarder check at the agent), one persistent http.client "
              "connection through nginx (N=%d)" % N_LOOKUP, baseline="healthz-floor",
              target_ms=1.0, samples=timed(post, N_LOOKUP, warmup=50))
    lat.errors = bad[0]
    bad[0] = 0
    lst = Lat("tunnel-list", "`GET …/tunnels` (Redis only), same connection (N=%d)" % N_LOOKUP,
              baseline="healthz-floor", target_ms=1.0, samples=timed(get, N_LOOKUP, warmup=50))
    lst.errors = bad[0]
    base = Lat("healthz-floor", "`GET /healthz` (nginx -> worker -> one Redis SET) on the same "
               "http.client connection: the floor of any worker route (N=%d)" % N_LOOKUP,
               samples=timed(floor, N_LOOKUP, warmup=50))
    conn.close()
    ctx.lat += [base, lat, lst]
    auth = ("Authorization: Bearer " + st.key,)
    w_post = run.Result("tunnel-lookup-c1", "`POST …/tunnels/{port}` (existing tunnel), wrk "
                        "1 connection: p50 is the lookup's latency", baseline="healthz")
    run.peak(w_post, st.url + post_path, conns=1, headers=auth, method="POST", body="{}")
    w_get = run.Result("tunnel-list-c1", "`GET …/tunnels`, wrk 1 connection", baseline="healthz")
    run.peak(w_get, st.url + list_path, conns=1, headers=auth)
    w_post32 = run.Result("tunnel-lookup-c%d" % run.CONNS, "`POST …/tunnels/{port}` (existing tunnel), wrk "
                          "%d connections" % run.CONNS, baseline="healthz")
    run.peak(w_post32, st.url + post_path, headers=auth, method="POST", body="{}")
    return [w_post, w_get, w_post32]


def teardown(st):
    st.http.delete(st.url + "/v1/sandboxes/" + SID,
                   headers={"Authorization": "Bearer " + st.key}, timeout=30)
