"""Background processes, through nginx (API.md "Processes")."""

import time
import uuid

import pytest

from conftest import assert_error, sandbox_procs
from test_exhaustion import agent_rss_kib, sanitized
from sbxsse import sse_pairs


@pytest.fixture(scope="module")
def box(stack):
    sid = stack.create("prc")[0]
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def P(box, rest=""):
    return "/v1/sandboxes/%s/processes%s" % (box, rest)


def start(api, box, **body):
    r = api("POST", P(box), json=body)
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["status"] in ("running", "completed", "failed") and rec["id"]
    return rec


def wait_exit(api, box, ref, timeout_ms=10000):
    r = api("GET", P(box, "/%s/wait?timeoutMs=%d" % (ref, timeout_ms)), timeout=timeout_ms / 1000 + 5)
    assert r.status_code == 200, r.text
    return r.json()["exitCode"]


def test_start_get_list_logs(api, box):
    rec = start(api, box, id="basic", command="echo out; echo err >&2; exit 3")
    assert rec["id"] == "basic" and isinstance(rec["pid"], int) and rec["startedAt"]
    assert wait_exit(api, box, "basic") == 3
    got = api("GET", P(box, "/basic")).json()
    assert got["status"] == "failed" and got["exitCode"] == 3 and got["endedAt"]
    assert got["command"] == "echo out; echo err >&2; exit 3"
    by_pid = api("GET", P(box, "/%d" % rec["pid"])).json()
    assert by_pid["id"] == "basic"
    logs = api("GET", P(box, "/basic/logs")).json()
    assert logs == {"stdout": "out\n", "stderr": "err\n", "truncated": False, "evicted": False}
    ids = [p["id"] for p in api("GET", P(box)).json()["processes"]]
    assert "basic" in ids


def test_status_words(api, box):
    start(api, box, id="okay", argv=["true"])
    assert wait_exit(api, box, "okay") == 0
    assert api("GET", P(box, "/okay")).json()["status"] == "completed"
    rec = start(api, box, id="missing", argv=["no-such-program-xyz"])
    if rec["status"] == "running":
        wait_exit(api, box, "missing")
    got = api("GET", P(box, "/missing")).json()
    assert got["status"] == "failed" and got["exitCode"] == 127


def test_logs_follow_in_order_with_exit(api, box):
    start(api, box, id="follow",
          command="for i in 1 2 3 4 5; do echo n$i; sleep 0.1; done; echo done >&2")
    r = api("GET", P(box, "/follow/logs"), stream=True, headers={"Accept": "text/event-stream"},
            timeout=20)
    assert r.status_code == 200
    events = sse_pairs(r)
    assert events[-1][0] == "exit" and events[-1][1]["exitCode"] == 0
    out = "".join(d["data"] for n, d in events if n == "stdout")
    # a chunk may repeat at the seam between replay and live output, never be lost
    lines = [l for l in out.splitlines()]
    seen = [l for i, l in enumerate(lines) if l not in lines[:i]]
    assert seen == ["n1", "n2", "n3", "n4", "n5"]
    assert "done\n" in "".join(d["data"] for n, d in events if n == "stderr")


def test_logs_of_a_finished_process_stream_replay_then_exit(api, box):
    start(api, box, id="fin", command="echo replay")
    wait_exit(api, box, "fin")
    r = api("GET", P(box, "/fin/logs"), stream=True, headers={"Accept": "text/event-stream"})
    events = sse_pairs(r)
    assert ("stdout", {"data": "replay\n"}) in events
    assert events[-1][0] == "exit"


def test_stdin(api, box):
    start(api, box, id="cat", argv=["cat"])
    r = api("POST", P(box, "/cat/stdin"), data=b"first ")
    assert r.status_code == 200 and r.json() == {"written": 6}
    r = api("POST", P(box, "/cat/stdin?eof=true"), data=b"second")
    assert r.status_code == 200
    assert wait_exit(api, box, "cat") == 0
    assert api("GET", P(box, "/cat/logs")).json()["stdout"] == "first second"
    assert_error(api("POST", P(box, "/cat/stdin"), data=b"late"), 409, "CONFLICT")


def test_kill_with_grace_ends_killed_137(api, box):
    start(api, box, id="stubborn",
          command="trap 'echo got-term' TERM; while :; do sleep 0.05; done")
    api("GET", P(box, "/stubborn/wait?log=nothing&timeoutMs=200"))  # let it install the trap
    t0 = time.monotonic()
    r = api("DELETE", P(box, "/stubborn?signal=TERM&graceMs=700"), timeout=20)
    assert r.status_code == 200, r.text
    rec = r.json()
    assert rec["status"] == "killed" and rec["exitCode"] == 137
    assert time.monotonic() - t0 >= 0.6
    assert "got-term" in api("GET", P(box, "/stubborn/logs")).json()["stdout"]


def test_kill_term_default(api, box):
    start(api, box, id="plain", argv=["sleep", "60"])
    rec = api("DELETE", P(box, "/plain"), timeout=20).json()
    assert rec["status"] == "killed" and rec["exitCode"] == 143


def test_kill_all_counts_running(api, box):
    for i in range(3):
        start(api, box, id="many%d" % i, argv=["sleep", "60"])
    r = api("DELETE", P(box))
    assert r.status_code == 200 and r.json()["killed"] == 3
    for i in range(3):
        wait_exit(api, box, "many%d" % i)
        assert api("GET", P(box, "/many%d" % i)).json()["status"] == "killed"
    assert api("DELETE", P(box)).json()["killed"] == 0


def test_wait_for_log(api, box):
    start(api, box, id="logger", command="echo booting; sleep 0.3; echo 'server ready on 80'; sleep 30")
    r = api("GET", P(box, "/logger/wait?log=ready&timeoutMs=10000"), timeout=15)
    assert r.status_code == 200 and r.json() == {"line": "server ready on 80"}
    # already in the buffer: answered at once
    assert api("GET", P(box, "/logger/wait?log=booting")).json() == {"line": "booting"}
    api("DELETE", P(box, "/logger?signal=KILL"))


def test_wait_for_port(api, box):
    start(api, box, id="web", argv=["python3", "-m", "http.server", "8765"])
    r = api("GET", P(box, "/web/wait?port=8765&timeoutMs=15000"), timeout=20)
    assert r.status_code == 200 and r.json() == {"port": 8765}
    api("DELETE", P(box, "/web?signal=KILL"))


# A server that answers 503 to its first three requests, then 200 on /health.
SLOW_HEALTH = """
import http.server
n = [0]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n[0] += 1
        code = 200 if n[0] > 3 and self.path == '/health' else 503
        print(code, self.path, flush=True)
        self.send_response(code)
        self.send_header('Content-Length', '0')
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(('127.0.0.1', %d), H).serve_forever()
"""


def test_wait_for_port_http_mode(api, box):
    """?http=/path waits for an HTTP answer in ?status= (here 200), not
    just for a listener: the server's 503s do not count."""
    start(api, box, id="health", argv=["python3", "-c", SLOW_HEALTH % 8766])
    r = api("GET", P(box, "/health/wait?port=8766&http=/health&status=200&intervalMs=50"
                          "&timeoutMs=15000"), timeout=20)
    assert r.status_code == 200 and r.json() == {"port": 8766, "status": 200}, r.text
    logs = api("GET", P(box, "/health/logs")).json()["stdout"].split("\n")
    assert logs[:4] == ["503 /health"] * 3 + ["200 /health"], logs
    # a range: the next answer is a 200 too
    r = api("GET", P(box, "/health/wait?port=8766&http=/health&status=200-299"))
    assert r.status_code == 200 and r.json()["status"] == 200, r.text
    api("DELETE", P(box, "/health?signal=KILL"))
    # a listener that never speaks HTTP: ready for TCP, never for HTTP
    start(api, box, id="mute", argv=["python3", "-c",
                                     "import socket,time\ns=socket.socket()\n"
                                     "s.bind(('127.0.0.1',8767))\ns.listen(8)\ntime.sleep(60)"])
    assert api("GET", P(box, "/mute/wait?port=8767&timeoutMs=10000"),
               timeout=15).json() == {"port": 8767}
    assert_error(api("GET", P(box, "/mute/wait?port=8767&http=/&timeoutMs=1500"), timeout=10),
                 408, "PROCESS_READY_TIMEOUT")
    api("DELETE", P(box, "/mute?signal=KILL"))
    # exited first: 409 with its exit code
    start(api, box, id="gone", command="sleep 0.2; exit 3")
    r = api("GET", P(box, "/gone/wait?port=8768&http=/&timeoutMs=5000"), timeout=10)
    assert r.status_code == 409 and r.json()["error"]["details"] == {"exitCode": 3}, r.text


def test_wait_timeouts_and_early_exit(api, box):
    start(api, box, id="quiet", argv=["sleep", "30"])
    assert_error(api("GET", P(box, "/quiet/wait?log=never&timeoutMs=200")), 408,
                 "PROCESS_READY_TIMEOUT")
    assert_error(api("GET", P(box, "/quiet/wait?port=9&timeoutMs=200")), 408,
                 "PROCESS_READY_TIMEOUT")
    assert_error(api("GET", P(box, "/quiet/wait?timeoutMs=200")), 408, "PROCESS_READY_TIMEOUT")
    api("DELETE", P(box, "/quiet?signal=KILL"))
    start(api, box, id="early", command="sleep 0.2; exit 2")
    assert_error(api("GET", P(box, "/early/wait?log=never&timeoutMs=5000")), 409,
                 "PROCESS_EXITED_BEFORE_READY")
    assert_error(api("GET", P(box, "/early/wait?port=9999&timeoutMs=5000")), 409,
                 "PROCESS_EXITED_BEFORE_READY")
    assert api("GET", P(box, "/early/wait")).json() == {"exitCode": 2}


def test_conflicting_id(api, box):
    start(api, box, id="dup", argv=["sleep", "30"])
    assert_error(api("POST", P(box), json={"id": "dup", "argv": ["true"]}), 409, "CONFLICT")
    api("DELETE", P(box, "/dup?signal=KILL"))


def test_not_found(api, box):
    assert_error(api("GET", P(box, "/nope")), 404, "PROCESS_NOT_FOUND")
    assert_error(api("GET", P(box, "/999999")), 404, "PROCESS_NOT_FOUND")
    assert_error(api("GET", P(box, "/nope/logs")), 404, "PROCESS_NOT_FOUND")
    assert_error(api("DELETE", P(box, "/nope")), 404, "PROCESS_NOT_FOUND")
    assert_error(api("POST", P(box, "/nope/stdin"), data=b"x"), 404, "PROCESS_NOT_FOUND")
    assert_error(api("GET", P(box, "/nope/wait")), 404, "PROCESS_NOT_FOUND")


@pytest.mark.parametrize("query", [
    "signal=BOGUS", "signal=9", "graceMs=-1", "graceMs=60001", "graceMs=abc",
])
def test_bad_kill_args(api, box, query):
    if api("GET", P(box, "/target")).status_code == 404:
        start(api, box, id="target", argv=["sleep", "60"])
    assert_error(api("DELETE", P(box, "/target?" + query)), 400, "VALIDATION_FAILED")


@pytest.mark.parametrize("query", [
    "port=0", "port=65536", "port=x", "timeoutMs=0", "timeoutMs=3600001", "log=",
    "log=" + "a" * 1025, "log=a&port=80", "http=/", "port=80&http=nope", "port=80&http=/a%20b",
    "port=80&status=200", "port=80&http=/&status=700", "port=80&http=/&status=300-200",
    "port=80&http=/&intervalMs=5",
])
def test_bad_wait_args(api, box, query):
    if api("GET", P(box, "/waitee")).status_code == 404:
        start(api, box, id="waitee", argv=["sleep", "60"])
    assert_error(api("GET", P(box, "/waitee/wait?" + query)), 400, "VALIDATION_FAILED")


@pytest.mark.parametrize("body", [
    {}, {"command": ""}, {"argv": []}, {"command": "x", "argv": ["x"]}, {"command": "x", "id": "a b"},
    {"command": "x", "id": "x" * 65}, {"command": "x", "nope": 1}, {"command": "x", "env": {"A-B": "1"}},
    {"command": "x", "cwd": ""}, {"argv": [1]},
])
def test_bad_start_bodies(api, box, body):
    assert_error(api("POST", P(box), json=body), 400, "VALIDATION_FAILED")


def test_bad_process_ref(api, box):
    assert_error(api("GET", P(box, "/a%20b")), 400, "VALIDATION_FAILED")


# ---- a kill takes the whole process tree ------------------------------------------

@pytest.fixture
def fresh(stack):
    """A sandbox of its own: (id, key); every process in it is the test's."""
    sid = stack.create("prt")[0]
    yield sid, "dev." + sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def others(key):
    """The sandbox's host processes other than its init: [(pid, comm)]."""
    return [(pid, comm) for pid, comm, _ in sandbox_procs(key) if comm != "sbx-init"]


TRAPPED = "trap '' TERM; while :; do sleep 1; done"


@pytest.mark.parametrize("name,command,grace", [
    # the leader dies of TERM; its child ignores it
    ("nested", """sh -c "sh -c 'trap \\"\\" TERM; while :; do sleep 1; done'" """, None),
    # a descendant in a session of its own
    ("setsid", "setsid sh -c \"%s\" & wait" % TRAPPED, "graceMs=500"),
    # a descendant whose parent exited first (reparented)
    ("orphan", "(sh -c \"%s\" &); sleep 1000" % TRAPPED, "graceMs=500"),
])
def test_kill_leaves_no_process_of_the_tree(api, fresh, stack, name, command, grace):
    sid, key = fresh
    # the keeper forked ahead of the first command leaves within 250 ms
    stack.wait("nothing but init", lambda: others(key) == [])
    start(api, sid, id=name, command=command)
    # the tree is up: the trapping shell runs its sleeps
    deadline = time.monotonic() + 10
    while not any(comm == "sleep" for _, comm in others(key)):
        assert time.monotonic() < deadline, others(key)
        time.sleep(0.05)
    r = api("DELETE", P(sid, "/%s%s" % (name, "?" + grace if grace else "")), timeout=30)
    assert r.status_code == 200, r.text
    rec = r.json()
    assert rec["status"] == "killed" and rec["exitCode"] == 143, rec
    # the answer comes once the tree is gone: nothing of it is left
    assert others(key) == []


def test_kill_of_an_exited_process_takes_what_it_left(api, fresh, stack):
    sid, key = fresh
    start(api, sid, id="left", command="(sh -c \"%s\" &) ; echo bye" % TRAPPED)
    assert wait_exit(api, sid, "left") == 0
    stack.wait("the orphan to run", lambda: any(c == "sleep" for _, c in others(key)))
    rec = api("DELETE", P(sid, "/left?graceMs=300"), timeout=30).json()
    assert rec["status"] == "completed" and rec["exitCode"] == 0
    assert others(key) == []


@pytest.mark.parametrize("when", ["", "sleep 0.3; "])
def test_a_killed_keeper_ends_its_process(api, fresh, stack, when):
    """A process that kills its keeper (its parent, a child subreaper) at
    once or later does not run on unseen: init reports it killed and kills
    its group."""
    sid, key = fresh
    r = api("POST", P(sid), json={"id": "rogue", "command": when + "kill -9 $PPID; sleep 1000"})
    assert r.status_code == 201, r.text
    assert wait_exit(api, sid, "rogue") == 137
    assert api("GET", P(sid, "/rogue")).json()["status"] == "killed"
    stack.wait("no process of it", lambda: others(key) == [])


def test_kill_all_leaves_no_process(api, fresh, stack):
    sid, key = fresh
    start(api, sid, id="a", command="setsid sh -c \"%s\" & wait" % TRAPPED)
    start(api, sid, id="b", command="(sh -c \"%s\" &); sleep 1000" % TRAPPED)
    stack.wait("the trees to run", lambda: sum(c == "sh" for _, c in others(key)) >= 3)
    r = api("DELETE", P(sid, "?signal=TERM&graceMs=300"))
    assert r.status_code == 200 and r.json()["killed"] == 2
    stack.wait("no process of the trees", lambda: others(key) == [], timeout=15)


# ---- the memory of logs is bounded ----------------------------------------------------

def test_log_memory_is_bounded_and_eviction_is_marked(api, stack):
    """100 finished processes of 1 MiB of output each: the owning agent's RSS
    grows by about agent.proc_logs_sandbox_bytes (32 MiB), not by 100 MiB+;
    the logs evicted first say so."""
    sid = "prm-" + uuid.uuid4().hex[:10]
    r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    node = r.json()["node"]
    try:
        before = agent_rss_kib(stack, node)
        for batch in range(10):
            for k in range(10):
                start(api, sid, id="big%d" % (batch * 10 + k),
                      command="head -c 1048576 /dev/zero | tr '\\0' x")
            for k in range(10):
                assert wait_exit(api, sid, "big%d" % (batch * 10 + k)) == 0
        grown = agent_rss_kib(stack, node) - before
        # (AddressSanitizer's quarantine of freed memory dominates RSS there)
        if not sanitized(stack.pid(node)):
            assert grown < 64 * 1024, "the agent's RSS grew by %d KiB" % grown
        first = api("GET", P(sid, "/big0/logs")).json()
        assert first == {"stdout": "", "stderr": "", "truncated": True, "evicted": True}
        last = api("GET", P(sid, "/big99/logs")).json()
        assert last["evicted"] is False and last["stdout"] == "x" * 1048576
        assert api("GET", P(sid, "/big0")).json()["status"] == "completed"
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_stdin_queue_is_bounded_with_backpressure(api, box):
    """The queue holds agent.proc_stdin_bytes (1 MiB): a body larger than
    that is 413; one that does not fit now waits until the process has read
    what is queued, and everything arrives in order."""
    start(api, box, id="stdin-slow", command="sleep 1; wc -c")
    r = api("POST", P(box, "/stdin-slow/stdin"), data=b"y" * (1024 * 1024 + 1))
    assert_error(r, 413, "PAYLOAD_TOO_LARGE")
    assert api("POST", P(box, "/stdin-slow/stdin"), data=b"y" * (1024 * 1024)).json() == \
        {"written": 1024 * 1024}
    # does not fit next to the first MiB: answered once wc has read it
    r = api("POST", P(box, "/stdin-slow/stdin?eof=true"), data=b"z" * (512 * 1024), timeout=30)
    assert r.status_code == 200 and r.json() == {"written": 512 * 1024}, r.text
    assert wait_exit(api, box, "stdin-slow") == 0
    assert api("GET", P(box, "/stdin-slow/logs")).json()["stdout"].strip() == str(1536 * 1024)


def test_node_log_bound_evicts_across_sandboxes():
    """On a node bounded at 3 MiB of logs (each sandbox at 2 MiB): the
    finished logs of one sandbox are evicted for another's, the first
    finished first, and a running process's log grows by evicting them."""
    from conftest import stack_down, stack_up

    st = stack_up(agents=1, overrides=["agent.proc_logs_node_bytes=3145728",
                                       "agent.proc_logs_sandbox_bytes=2097152"])
    a, b = "pna-" + uuid.uuid4().hex[:8], "pnb-" + uuid.uuid4().hex[:8]
    try:
        for sid in (a, b):
            assert st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30).status_code == 201
        mib = "head -c 1048576 /dev/zero | tr '\\0' %s"
        start(st.api, a, id="a1", command=mib % "a")
        assert wait_exit(st.api, a, "a1") == 0
        start(st.api, a, id="a2", command=mib % "b")
        assert wait_exit(st.api, a, "a2") == 0
        # sandbox a holds 2 MiB: its own bound; b's first MiB takes the node to 3
        start(st.api, b, id="b1", command=mib % "c")
        assert wait_exit(st.api, b, "b1") == 0
        assert st.api("GET", P(a, "/a1/logs")).json()["evicted"] is False
        # one more MiB in b: the node evicts the first finished log (a's a1)
        start(st.api, b, id="b2", command=mib % "d")
        assert wait_exit(st.api, b, "b2") == 0
        assert st.api("GET", P(a, "/a1/logs")).json()["evicted"] is True
        assert st.api("GET", P(a, "/a2/logs")).json()["stdout"] == "b" * 1048576
        # b is at its own bound with b1 and b2: a running process's log takes
        # the room of b's first finished one
        start(st.api, b, id="run", command="%s; echo; echo tail-end; sleep 30" % (mib % "e"))
        st.api("GET", P(b, "/run/wait?log=tail-end&timeoutMs=10000"), timeout=15)
        logs = st.api("GET", P(b, "/run/logs")).json()
        assert logs["stdout"].endswith("e\ntail-end\n") and logs["evicted"] is False
        assert st.api("GET", P(b, "/b1/logs")).json()["evicted"] is True
        st.api("DELETE", P(b, "/run?signal=KILL"))
    finally:
        stack_down(st)
