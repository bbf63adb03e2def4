"""Sessions: persistent shells in a sandbox, through nginx (API.md "Sessions")."""

import threading
import uuid

import pytest

from conftest import assert_error, routed, sandbox_procs
from sbxsse import sse_pairs


@pytest.fixture(scope="module")
def box(stack):
    sid = stack.create("ses")[0]
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def sx(api, box, session, command, timeout=30, **extra):
    body = dict(command=command, session=session, **extra)
    return api("POST", "/v1/sandboxes/%s/exec" % box, json=body, timeout=timeout)


def ok(api, box, session, command, **extra):
    r = sx(api, box, session, command, **extra)
    assert r.status_code == 200, r.text
    return r.json()


def test_state_persists_in_a_session(api, box):
    ok(api, box, "persist", "cd /tmp && export FOO=bar && greet() { echo hello-$1; }")
    out = ok(api, box, "persist", "pwd; echo $FOO; greet you")
    assert out["stdout"] == "/tmp\nbar\nhello-you\n"
    assert out["exitCode"] == 0 and out["success"] is True


def test_process_starts_from_the_sessions_state(api, box):
    """POST …/processes {session}: the process starts from the cwd and the
    exports the session's shell has after its last command; its own cwd
    and env win; the state file is the shell's alone (0600) and a state
    that cannot be written never shows in a command's output."""
    ok(api, box, "pstate", "mkdir -p /tmp/ps && cd /tmp/ps && export PS_VAR=\"a b'c\"")

    def run(**body):
        r = api("POST", "/v1/sandboxes/%s/processes" % box, json=body)
        assert r.status_code == 201, r.text
        pid = r.json()["id"]
        w = api("GET", "/v1/sandboxes/%s/processes/%s/wait?timeoutMs=10000" % (box, pid), timeout=15)
        assert w.status_code == 200, w.text
        return api("GET", "/v1/sandboxes/%s/processes/%s/logs" % (box, pid)).json()

    logs = run(command='pwd; printf "%s\\n" "$PS_VAR"; echo $OWN', session="pstate",
               env={"OWN": "mine"})
    assert logs["stdout"] == "/tmp/ps\na b'c\nmine\n", logs
    assert run(command="pwd", session="pstate", cwd="/")["stdout"] == "/\n"
    assert run(command="pwd; echo ${PS_VAR:-none}", session="no-such")["stdout"] == \
        "/workspace\nnone\n"
    modes = ok(api, box, "pstate", "stat -c %a /tmp/.sbx-session-* | sort -u")["stdout"]
    assert modes == "600\n", modes
    # this command's own state file cannot be written: nothing shows
    out = ok(api, box, "pstate", 'f=$(ls -td /tmp/.sbx-session-* | head -1); rm -f "$f"; '
                                 'mkdir "$f"; echo "$f"')
    assert out["stderr"] == "" and out["exitCode"] == 0, out
    ok(api, box, "pstate", "rmdir %s" % out["stdout"].strip())


def test_sessions_are_isolated(api, box):
    ok(api, box, "iso-a", "cd /tmp; export ONLY_A=1")
    out = ok(api, box, "iso-b", "pwd; echo ${ONLY_A:-none}")
    assert out["stdout"] == "/workspace\nnone\n"


def test_output_without_trailing_newline_and_exit_code(api, box):
    out = ok(api, box, "nonl", "printf abc; printf def >&2; false")
    assert out["stdout"] == "abc" and out["stderr"] == "def"
    assert out["exitCode"] == 1 and out["success"] is False


def test_syntax_error_keeps_the_session(api, box):
    ok(api, box, "syn", "export KEEP=yes")
    out = ok(api, box, "syn", "if then")
    assert out["exitCode"] != 0 and out["stderr"]
    assert ok(api, box, "syn", "echo $KEEP")["stdout"] == "yes\n"


def test_exit_terminates_then_fresh_shell(api, box):
    ok(api, box, "term", "export GONE=1; cd /tmp")
    r = sx(api, box, "term", "echo bye; exit 3")
    err = assert_error(r, 410, "SESSION_TERMINATED")
    assert err["details"]["exitCode"] == 3
    out = ok(api, box, "term", "pwd; echo ${GONE:-fresh}")
    assert out["stdout"] == "/workspace\nfresh\n"


def test_concurrent_commands_never_interleave(api, box):
    results = [None] * 5

    def run(i):
        cmd = "for k in 1 2 3 4 5; do echo c%d-$k; sleep 0.02; done" % i
        results[i] = sx(api, box, "conc", cmd)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, r in enumerate(results):
        assert r.status_code == 200, r.text
        assert r.json()["stdout"] == "".join("c%d-%d\n" % (i, k) for k in range(1, 6))


def test_timeout_kills_and_session_recovers(api, box):
    r = sx(api, box, "tmo", "sleep 60", timeoutMs=500)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["exitCode"] == 124 and out["timedOut"] is True
    assert ok(api, box, "tmo", "echo again")["stdout"] == "again\n"


def test_per_command_cwd_and_env_do_not_leak(api, box):
    ok(api, box, "scoped", "export V=session")
    out = ok(api, box, "scoped", "pwd; echo $V", cwd="/tmp", env={"V": "command"})
    assert out["stdout"] == "/tmp\ncommand\n"
    out = ok(api, box, "scoped", "pwd; echo $V")
    assert out["stdout"] == "/workspace\nsession\n"


def test_stdin_and_argv(api, box):
    out = ok(api, box, "io", "cat", stdin="line 1\nit's \\ $HOME\n")
    assert out["stdout"] == "line 1\nit's \\ $HOME\n"
    r = api("POST", "/v1/sandboxes/%s/exec" % box,
            json={"argv": ["echo", "a b", "c'd"], "session": "io"})
    assert r.status_code == 200 and r.json()["stdout"] == "a b c'd\n"


def test_stream_in_a_session(api, box):
    r = api("POST", "/v1/sandboxes/%s/exec" % box, stream=True,
            headers={"Accept": "text/event-stream"},
            json={"command": "echo one; echo two >&2; exit_code=7; (exit 7)", "session": "sse"})
    assert r.status_code == 200
    events = sse_pairs(r)
    names = [n for n, _ in events]
    assert names[0] == "start" and names[-1] == "exit"
    out = "".join(d["data"] for n, d in events if n == "stdout")
    err = "".join(d["data"] for n, d in events if n == "stderr")
    assert out == "one\n" and err == "two\n"
    assert events[-1][1]["exitCode"] == 7


@pytest.mark.parametrize("how", ["implicit", "created", "restarted"])
def test_start_comes_first_on_a_new_shell(api, box, how):
    """The first command of a new (or restarted) shell: `start` precedes
    every output event, every time."""
    for i in range(30):
        session = "first-%s-%d-%s" % (how, i, uuid.uuid4().hex[:6])
        if how == "created":
            r = api("POST", "/v1/sandboxes/%s/sessions" % box, json={"id": session})
            assert r.status_code == 201, r.text
        if how == "restarted":
            assert_error(sx(api, box, session, "exit 4"), 410, "SESSION_TERMINATED")
        r = api("POST", "/v1/sandboxes/%s/exec" % box, stream=True,
                headers={"Accept": "text/event-stream"},
                json={"command": "echo out; echo err >&2", "session": session})
        assert r.status_code == 200
        names = [n for n, _ in sse_pairs(r)]
        assert names[0] == "start" and names[-1] == "exit", (i, names)
        assert "stdout" in names and "stderr" in names, (i, names)
        api("DELETE", "/v1/sandboxes/%s/sessions/%s" % (box, session))


def test_create_list_delete(api, box):
    base = "/v1/sandboxes/%s/sessions" % box
    r = api("POST", base, json={"id": "made", "cwd": "/tmp", "env": {"MADE": "yes"}})
    assert r.status_code == 201 and r.json() == {"id": "made"}
    assert_error(api("POST", base, json={"id": "made"}), 409, "CONFLICT")
    assert ok(api, box, "made", "pwd; echo $MADE")["stdout"] == "/tmp\nyes\n"
    r = api("POST", base, json={})
    assert r.status_code == 201 and r.json()["id"]
    ids = [s["id"] for s in api("GET", base).json()["sessions"]]
    assert "made" in ids and r.json()["id"] in ids
    assert api("DELETE", base + "/made").status_code == 204
    assert_error(api("DELETE", base + "/made"), 404, "SESSION_NOT_FOUND")
    assert "made" not in [s["id"] for s in api("GET", base).json()["sessions"]]


def test_delete_kills_the_running_command(api, box, stack):
    base = "/v1/sandboxes/%s/sessions" % box
    api("POST", base, json={"id": "doomed"})
    holder = {}
    t = threading.Thread(target=lambda: holder.update(r=sx(api, box, "doomed", "sleep 60")))
    t.start()
    stack.wait("the command to run",
               lambda: [s for s in api("GET", base).json()["sessions"]
                        if s["id"] == "doomed" and s["busy"]])
    assert api("DELETE", base + "/doomed").status_code == 204
    t.join(10)
    assert_error(holder["r"], 410, "SESSION_TERMINATED")


def test_delete_kills_the_sessions_background_jobs(api, stack):
    """Deleting a session kills its shell's whole tree: a background job, one
    in a session of its own, and an orphan whose parent exited first."""
    sid = "sxt-" + uuid.uuid4().hex[:8]
    assert api("PUT", "/v1/sandboxes/" + sid).status_code == 201
    key = "dev." + sid
    try:
        base = "/v1/sandboxes/%s/sessions" % sid
        assert api("POST", base, json={"id": "bg"}).status_code == 201
        ok(api, sid, "bg", "sleep 1001 >/dev/null 2>&1 & "
                           "setsid sh -c 'trap \"\" TERM; sleep 1002' >/dev/null 2>&1 & "
                           "(sleep 1003 >/dev/null 2>&1 &); echo started")
        stack.wait("the jobs to run",
                   lambda: sum(c == "sleep" for _, c, _ in sandbox_procs(key)) == 3)
        # a shell that exits on its own leaves its job; the next shell is new
        assert_error(sx(api, sid, "bg", "sleep 1004 >/dev/null 2>&1 & exit 3"), 410,
                     "SESSION_TERMINATED")
        ok(api, sid, "bg", "sleep 1005 >/dev/null 2>&1 & echo again")
        stack.wait("the jobs to run",
                   lambda: sum(c == "sleep" for _, c, _ in sandbox_procs(key)) == 5)
        assert api("DELETE", base + "/bg").status_code == 204
        stack.wait("no process of the session's shells",
                   lambda: [c for _, c, _ in sandbox_procs(key) if c != "sbx-init"] == [],
                   timeout=10)
    finally:
        api("DELETE", "/v1/sandboxes/" + sid)


def test_bad_input(api, box):
    base = "/v1/sandboxes/%s/sessions" % box
    assert_error(api("POST", base, json={"id": "bad id"}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base, json={"id": "x" * 65}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base, json={"cwd": ""}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base, json={"env": {"1X": "y"}}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base, json={"nope": 1}), 400, "VALIDATION_FAILED")
    assert_error(sx(api, box, "../x", "true"), 400, "VALIDATION_FAILED")
    assert_error(sx(api, box, "", "true"), 400, "VALIDATION_FAILED")
    assert_error(api("DELETE", base + "/b%20d"), 400, "VALIDATION_FAILED")


def test_sessions_and_processes_die_with_the_sandbox(api):
    """A sandbox destroyed and created again under the same id starts empty:
    no session or process of the old one is listed or reused."""
    sid = "sx-" + uuid.uuid4().hex[:8]
    assert api("PUT", "/v1/sandboxes/" + sid).status_code == 201
    ok(api, sid, "zz", "export OLD=1")
    assert api("POST", "/v1/sandboxes/%s/processes" % sid,
               json={"command": "sleep 300"}).status_code == 201
    assert api("DELETE", "/v1/sandboxes/" + sid).status_code == 204
    assert api("PUT", "/v1/sandboxes/" + sid).status_code == 201
    try:
        # (made again: the first data call may meet the old cached route)
        assert routed(api, "GET", "/v1/sandboxes/%s/sessions" % sid).json()["sessions"] == []
        assert api("GET", "/v1/sandboxes/%s/processes" % sid).json()["processes"] == []
        r = api("POST", "/v1/sandboxes/%s/sessions" % sid, json={"id": "zz"})
        assert r.status_code == 201, r.text
        assert ok(api, sid, "zz", "echo ${OLD:-unset}")["stdout"] == "unset\n"
    finally:
        api("DELETE", "/v1/sandboxes/" + sid)
