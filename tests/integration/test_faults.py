"""Faults, each on a dedicated stack (the session stack stays healthy):
Redis killed during a burst, Redis restarted without its data, Redis
paused, an agent stopped past its TTL with a request in flight, an agent
killed under a live SSE exec, API workers killed during a burst, and nginx
reloaded under load.

Covered elsewhere and not repeated here: an agent SIGSTOPped past its TTL
destroys its stale copy and refuses the old epoch with 409 STALE_EPOCH
(test_agent_lifecycle.py::test_cut_off_agent_destroys_its_stale_copy); a
FLUSHALL makes epochs grow (test_lifecycle.py::
test_epoch_grows_after_redis_flushall_on_a_dedicated_stack).
"""

import concurrent.futures as cf
import http.client
import json
import os
import shutil
import signal
import socket
import threading
import time
import uuid

import pytest
import requests

from conftest import sandbox_procs, sanitizer_findings, stack_down, stack_down_cleanup, stack_up
from sbxproc import alive, children, scaled

TENANT = "dev"


def down_checked(s):
    """stack_down, failing on sanitizer reports in the dedicated stack's logs."""
    stack_down(s, keep=True)
    errors, _ = sanitizer_findings(s.dir)
    if errors:
        pytest.fail("sanitizer reports in %s:\n%s" % (s.dir, "\n".join(errors[:40])),
                    pytrace=False)
    stack_down_cleanup(s)


@pytest.fixture(scope="module")
def st():
    s = stack_up(agents=2)
    try:
        yield s
    finally:
        down_checked(s)


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def inits_of(sid, tenant=TENANT):
    """Host pids of live sbx-init processes of sandbox key <tenant>.<sid>."""
    return [pid for pid, comm, _ in sandbox_procs("%s.%s" % (tenant, sid)) if comm == "sbx-init"]


def one_shot(st, method, path, body=None, timeout=15, headers=None):
    """One request on a fresh connection (no kept-alive connection that a
    restarting server may close under us): (status, json-or-None, seconds)."""
    host, port = st.url.rsplit("/", 1)[1].split(":")
    h = {"Authorization": "Bearer " + st.key, "Connection": "close"}
    h.update(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body)
        h["Content-Type"] = "application/json"
    t0 = time.monotonic()
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        status = r.status
        ctype = r.getheader("Content-Type", "")
    finally:
        c.close()
    doc = json.loads(raw) if ctype.startswith("application/json") and raw else None
    return status, doc, time.monotonic() - t0


def healthy(st):
    st.wait_healthy(timeout=30)


def agent_serving(st, node):
    """Wait until a (re)started agent accepts connections: the alive key of
    a SIGKILLed agent lives on for its TTL, so Redis alone says too early."""
    host, port = st.env["SBX_AGENT_%s" % node.split("-", 1)[1]].split(":")

    def accepts():
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return True
        except OSError:
            return False
    st.wait("%s to accept connections" % node, accepts, timeout=30)


def converged(st, ids):
    """Every id either exists and runs a command, or does not exist and has
    no container on the host. Returns (existing, gone)."""
    existing, gone = [], []
    for sid in ids:
        r = st.api("GET", "/v1/sandboxes/" + sid, timeout=15)
        assert r.status_code in (200, 404), "%s: %d %s" % (sid, r.status_code, r.text[:200])
        if r.status_code == 200:
            x = st.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo ok"},
                       timeout=30)
            assert x.status_code == 200 and x.json()["stdout"] == "ok\n", \
                "%s exists but does not run: %d %s" % (sid, x.status_code, x.text[:200])
            existing.append(sid)
        else:
            st.wait("no container left for deleted/never-made %s" % sid,
                    lambda: not inits_of(sid), timeout=15)
            gone.append(sid)
    for sid in existing:
        st.wait("exactly one container of %s" % sid, lambda: len(inits_of(sid)) == 1,
                timeout=15)
    return existing, gone


def burst(st, duration, make_calls, workers=6):
    """Run make_calls(i) -> [(method, path, body)] from several threads for
    duration seconds; every result (status, code, seconds) or exception."""
    results = []
    lock = threading.Lock()
    stop = time.monotonic() + duration

    def loop(w):
        i = 0
        while time.monotonic() < stop:
            for method, path, body in make_calls(w, i):
                try:
                    status, doc, secs = one_shot(st, method, path, body)
                    code = (doc or {}).get("error", {}).get("code") if isinstance(doc, dict) else None
                    res = (method, path, status, code, secs)
                except Exception as ex:  # a hang or a reset is a finding
                    res = (method, path, "exception", repr(ex), None)
                with lock:
                    results.append(res)
            i += 1

    threads = [threading.Thread(target=loop, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    return threads, results


# ---- Redis ------------------------------------------------------------------------

def test_redis_killed_during_a_burst(st):
    healthy(st)
    base = uid("rk")
    r = st.api("PUT", "/v1/sandboxes/" + base, json={}, timeout=30)
    assert r.status_code == 201, r.text
    made = []
    lock = threading.Lock()

    def calls(w, i):
        out = [("POST", "/v1/sandboxes/%s/exec" % base, {"command": "true"}),
               ("GET", "/v1/sandboxes/" + base, None)]
        if i % 10 == 0 and i < 200:  # creates, well below the quota
            sid = "%s-%d-%d" % (base, w, i)
            with lock:
                made.append(sid)
            out.insert(0, ("PUT", "/v1/sandboxes/" + sid, {}))
        return out

    threads, results = burst(st, 4.0, calls, workers=4)
    time.sleep(1.0)
    os.kill(st.pid("redis"), signal.SIGKILL)
    for t in threads:
        t.join(60)
    st.run("start", "redis")
    healthy(st)

    bad = [r for r in results if r[2] == "exception" or
           not (r[2] in (200, 201) or (r[2] == 503 and r[3] in
                ("REDIS_UNAVAILABLE", "NODE_UNAVAILABLE", "NO_CAPACITY")))]
    slow = [r for r in results if r[4] is not None and r[4] > scaled(5.0)]
    n503 = sum(1 for r in results if r[2] == 503)
    print("redis killed: %d calls, %d answered 503, slowest %.2f s" % (
        len(results), n503, max(r[4] or 0 for r in results)))
    assert n503 > 0, "no call noticed that Redis was gone?"
    assert not bad, "calls neither succeeded nor 503: %r" % bad[:10]
    assert not slow, "calls took more than 5 s (a hang): %r" % slow[:10]
    # Convergence: no half-created sandbox.
    existing, gone = converged(st, [base] + made)
    print("after the Redis restart: %d sandboxes exist and run, %d do not exist" % (
        len(existing), len(gone)))
    for sid in existing:
        st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_redis_paused_answers_503_fast_and_healthz_keeps_answering(st):
    """CLIENT PAUSE 3000: every call answers within ~command_timeout (a 503
    REDIS_UNAVAILABLE), more calls than there are workers all answer (no
    worker is stuck), and service is normal right after the pause."""
    healthy(st)
    sid = uid("cp")
    assert st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30).status_code == 201
    st.redis_cli("CLIENT", "PAUSE", "3000", "ALL")
    t0 = time.monotonic()
    calls = [("GET", "/healthz", None), ("GET", "/v1/sandboxes/" + sid, None),
             ("POST", "/v1/sandboxes/%s/exec" % sid, {"command": "true"})] * 4
    with cf.ThreadPoolExecutor(len(calls)) as ex:
        res = list(ex.map(lambda c: one_shot(st, *c), calls))
    elapsed = time.monotonic() - t0
    print("during CLIENT PAUSE: %s in %.2f s" % (
        [(s, (d or {}).get("error", {}).get("code"), round(t, 2)) for s, d, t in res], elapsed))
    for (method, path, _), (status, doc, secs) in zip(calls, res):
        assert status == 503 and doc["error"]["code"] == "REDIS_UNAVAILABLE", \
            "%s %s during the pause: %d %r" % (method, path, status, doc)
        # At most one command_timeout (500 ms) of waiting per worker, then
        # the worker answers at once: 12 calls on 4 workers end well
        # inside the pause.
        assert secs < scaled(1.5), "%s %s took %.2f s during a 3 s pause" % (method, path, secs)
    # /healthz keeps answering all through the pause, fast.
    slow = []
    while time.monotonic() - t0 < 2.5:
        status, doc, secs = one_shot(st, "GET", "/healthz")
        assert status == 503, (status, doc, secs)
        slow.append(secs)
    print("healthz during the pause: %d answers, median %.0f ms, max %.0f ms" % (
        len(slow), sorted(slow)[len(slow) // 2] * 1000, max(slow) * 1000))
    assert max(slow) < 1.0 and sorted(slow)[len(slow) // 2] < 0.2, slow
    time.sleep(max(0, 3.3 - (time.monotonic() - t0)))
    st.wait("service back right after the pause",
            lambda: one_shot(st, "GET", "/v1/sandboxes/" + sid)[0] == 200, timeout=3)

    # A worker that failed during the pause backs off for a moment before it
    # reconnects: a call that reaches it then is a 503 with Retry-After,
    # which clients retry. Every worker is back within the back-off.
    def exec_ok():
        status, doc, _ = one_shot(st, "POST", "/v1/sandboxes/%s/exec" % sid, {"command": "echo ok"})
        assert status in (200, 503), (status, doc)
        return status == 200 and doc["stdout"] == "ok\n"
    st.wait("exec back right after the pause", exec_ok, timeout=3)
    st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_redis_restarted_without_data_never_double_owns():
    """Redis comes back empty (the AOF is gone). The next PUT of each id makes
    it again with an epoch above every one seen before, and the host never
    keeps two containers of one sandbox key (the old copy is fenced)."""
    s = stack_up(agents=2)
    try:
        ids = [uid("wipe") for _ in range(4)]
        before = {}
        for sid in ids:
            r = s.api("PUT", "/v1/sandboxes/" + sid, json={"keepAlive": True}, timeout=30)
            assert r.status_code == 201, r.text
            before[sid] = r.json()
        s.run("stop", "redis")
        shutil.rmtree(os.path.join(s.dir, "redis"))
        os.makedirs(os.path.join(s.dir, "redis"))
        s.run("start", "redis")
        s.wait("redis up", lambda: s.redis_cli("PING", check=False) == "PONG", timeout=10)
        s.restore_key()
        s.wait_healthy(timeout=20)
        for sid in ids:
            r = s.api("GET", "/v1/sandboxes/" + sid)
            assert r.status_code == 404, r.text
            r = s.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
            assert r.status_code == 201, r.text
            new = r.json()
            assert new["epoch"] > before[sid]["epoch"], \
                "epoch went backwards for %s: %d after %d" % (sid, new["epoch"],
                                                              before[sid]["epoch"])
        for sid in ids:
            s.wait("one container of %s (the pre-wipe copy fenced)" % sid,
                   lambda: len(inits_of(sid)) == 1, timeout=20)
            x = s.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo ok"},
                      timeout=30)
            assert x.status_code == 200 and x.json()["stdout"] == "ok\n", x.text
    finally:
        down_checked(s)


# ---- agents -----------------------------------------------------------------------

def sse_events(resp):
    """(events, ending): the parsed SSE events and how the stream ended:
    'eof' (clean end) or the exception text (a broken stream)."""
    events = []
    buf = b""
    try:
        for chunk in resp.iter_content(chunk_size=None):
            buf += chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                ev, data = None, []
                for line in block.split(b"\n"):
                    if line.startswith(b"event:"):
                        ev = line[6:].strip().decode()
                    elif line.startswith(b"data:"):
                        data.append(line[5:].strip().decode())
                if ev:
                    events.append((ev, "\n".join(data)))
        return events, "eof"
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError) as ex:
        return events, repr(ex)


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_agent_dies_under_a_live_sse_exec(st, sig):
    healthy(st)
    sid = uid("sse")
    r = st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    node = r.json()["node"]
    result = {}

    def reader():
        resp = st.http.post(st.url + "/v1/sandboxes/%s/exec" % sid,
                            json={"command": "for i in $(seq 200); do echo line$i; sleep 0.05; done"},
                            headers={"Authorization": "Bearer " + st.key,
                                     "Accept": "text/event-stream"},
                            stream=True, timeout=30)
        result["status"] = resp.status_code
        result["events"], result["ending"] = sse_events(resp)

    th = threading.Thread(target=reader)
    th.start()
    time.sleep(1.0)
    pid = st.pid(node)
    os.kill(pid, getattr(signal, sig))
    th.join(40)
    try:
        assert not th.is_alive(), "the SSE client hangs after its agent died"
        events, ending = result["events"], result["ending"]
        kinds = [e for e, _ in events]
        print("%s of the agent under an SSE exec: status %s, events %s..., ended with %s / %s" % (
            sig, result["status"], kinds[:3], kinds[-1:], ending[:80]))
        assert result["status"] == 200 and kinds[0] == "start" and "stdout" in kinds
        assert "exit" not in kinds, "a fake exit after the agent died: %r" % events[-3:]
        # Never a silent close: an error event, or a broken (unterminated) stream.
        assert kinds[-1] == "error" or ending != "eof", \
            "the stream ended cleanly without exit or error: %r" % events[-3:]
    finally:
        if sig == "SIGTERM":
            st.wait("%s to stop" % node, lambda: not alive(pid), 10)
        st.run("stop", node)
        st.run("start", node)
        agent_serving(st, node)
        healthy(st)
        st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_agent_stopped_with_a_request_in_flight_does_not_act_late(st):
    """A data call reaches an agent that is SIGSTOPped; while it is stopped
    its lease expires and the sandbox is re-placed on the other agent. When
    the old agent resumes, the call it still holds (carrying the old epoch)
    must not run: it answers an error, and the command's effect never shows."""
    healthy(st)
    sid = uid("late")
    r = st.api("PUT", "/v1/sandboxes/" + sid, json={"keepAlive": True}, timeout=30)
    assert r.status_code == 201, r.text
    old = r.json()
    node = old["node"]
    pid = st.pid(node)
    result = {}
    os.kill(pid, signal.SIGSTOP)
    try:
        def late_call():
            try:
                result["r"] = one_shot(st, "POST", "/v1/sandboxes/%s/exec" % sid,
                                       {"command": "echo late"}, timeout=30)
            except Exception as ex:
                result["r"] = ("exception", repr(ex), None)

        th = threading.Thread(target=late_call)
        th.start()
        st.wait("%s to go down" % node,
                lambda: st.redis_cli("EXISTS", "sbx:node:{%s}:alive" % node) == "0", timeout=10)
        r = st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
        assert r.status_code == 200, r.text
        new = r.json()
        assert new["node"] != node and new["epoch"] > old["epoch"], (old, new)
    finally:
        os.kill(pid, signal.SIGCONT)
    th.join(40)
    try:
        status, doc, _ = result["r"]
        print("late call held by a stopped agent: %s %s" % (status, doc))
        assert status != 200, "the resumed agent ran a call of the old epoch: %r" % (doc,)
        # The resumed agent knows its lease lapsed while it was stopped (it may
        # have been replaced): it refuses to start the held call at all.
        assert (status, (doc or {}).get("error", {}).get("code")) == (503, "NODE_UNAVAILABLE"), \
            (status, doc)
        st.wait("the stale copy to be destroyed", lambda: len(inits_of(sid)) == 1, timeout=15)
    finally:
        healthy(st)
        st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


# ---- API workers and nginx ------------------------------------------------------------

def api_workers(st):
    return sorted(children(st.pid("api")))


def test_killed_workers_cost_at_most_their_own_request(st):
    """SIGKILL an API worker every 300 ms during a burst of creates, reads and
    execs: at most one failed request per killed worker, the master replaces
    them, nothing is half-created, and service is as usual afterwards."""
    healthy(st)
    base = uid("wk")
    assert st.api("PUT", "/v1/sandboxes/" + base, json={}, timeout=30).status_code == 201
    n_workers = len(api_workers(st))
    made = []
    lock = threading.Lock()

    def calls(w, i):
        out = [("GET", "/v1/sandboxes/" + base, None),
               ("POST", "/v1/sandboxes/%s/exec" % base, {"command": "true"})]
        if i % 5 == 0 and i < 60:  # creates, well below the quota
            sid = "%s-%d-%d" % (base, w, i)
            with lock:
                made.append(sid)
            out.insert(0, ("PUT", "/v1/sandboxes/" + sid, {}))
        return out

    threads, results = burst(st, 3.0, calls, workers=4)
    kills = 0
    time.sleep(0.3)
    for _ in range(6):
        ws = api_workers(st)
        if ws:
            os.kill(ws[kills % len(ws)], signal.SIGKILL)
            kills += 1
        time.sleep(0.3)
    for t in threads:
        t.join(60)
    failed = [r for r in results if r[2] not in (200, 201)]
    print("killed %d workers during %d calls: %d failed %r" % (
        kills, len(results), len(failed), [(r[0], r[2], r[3]) for r in failed][:10]))
    assert len(failed) <= kills, "more failed calls than killed workers: %r" % failed[:10]
    for r in failed:
        assert r[2] in (502, 503), r
    st.wait("the pool to be whole again", lambda: len(api_workers(st)) == n_workers, 10)
    healthy(st)
    existing, gone = converged(st, [base] + made)
    print("after worker kills: %d exist and run, %d do not exist" % (len(existing), len(gone)))
    for sid in existing:
        st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_nginx_reload_under_load_fails_no_request(st):
    healthy(st)
    sid = uid("rl")
    assert st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30).status_code == 201

    def calls(w, i):
        return [("GET", "/v1/sandboxes/" + sid, None), ("GET", "/healthz", None),
                ("POST", "/v1/sandboxes/%s/exec" % sid, {"command": "true"})]

    threads, results = burst(st, 3.0, calls, workers=4)
    nginx = st.pid("nginx")
    for _ in range(3):
        time.sleep(0.7)
        os.kill(nginx, signal.SIGHUP)  # = nginx -s reload
    for t in threads:
        t.join(60)
    failed = [r for r in results if r[2] != 200]
    print("3 nginx reloads during %d calls: %d failed" % (len(results), len(failed)))
    assert not failed, "requests failed during nginx reloads: %r" % failed[:10]
    assert len(results) > 50
    st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
