"""Exec through nginx: JSON and SSE answers, timeouts, output bounds,
argument passing, and many streams at once without holding API workers."""

import concurrent.futures
import hashlib
import threading
import time
import uuid

import pytest

from conftest import assert_error
from sbxproc import rss_kib, scaled
from sbxsse import sse_events


@pytest.fixture(scope="module")
def box(stack):
    sid = "ex-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, timeout=30)
    assert r.status_code == 201, r.text
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def ex(api, box, timeout=60, **body):
    r = api("POST", "/v1/sandboxes/%s/exec" % box, json=body, timeout=timeout)
    assert r.status_code == 200, r.text
    return r.json()


def stream(stack, box, timeout=60, **body):
    return stack.api("POST", "/v1/sandboxes/%s/exec" % box, json=body, stream=True,
                     headers={"Accept": "text/event-stream"}, timeout=timeout)


def count_procs(api, box, cmdline):
    """How many processes in the sandbox have exactly this command line
    (the bracket keeps the probe itself from matching)."""
    pattern = "[%s]%s" % (cmdline[0], cmdline[1:])
    probe = ("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done "
             "| grep -c '^%s $' || true" % pattern)
    return int(ex(api, box, command=probe)["stdout"].strip())


def test_json_answer_shape_and_exit_codes(api, box):
    res = ex(api, box, command="echo out; echo err >&2; exit 3")
    assert res["exitCode"] == 3 and res["success"] is False
    assert res["stdout"] == "out\n" and res["stderr"] == "err\n"
    assert res["timedOut"] is False and res["truncated"] is False
    assert isinstance(res["durationMs"], int)
    assert ex(api, box, command="true")["success"] is True
    assert ex(api, box, command="no-such-command-here")["exitCode"] == 127
    res = ex(api, box, argv=["no-such-binary"])
    assert res["exitCode"] == 127 and "no-such-binary" in res["stderr"]


def test_argv_is_passed_literally(api, box):
    res = ex(api, box, argv=["printf", "%s|", "a b", "$HOME", "`id`", "*"])
    assert res["stdout"] == "a b|$HOME|`id`|*|"


def test_stdin_is_empty_by_default_and_can_be_given(api, box):
    assert ex(api, box, command="wc -c")["stdout"].strip() == "0"
    assert ex(api, box, command="cat", stdin="hello\n")["stdout"] == "hello\n"


def test_env_and_cwd_apply_to_one_command_only(api, box):
    res = ex(api, box, command="echo $FOO; pwd; echo ${HOME:-unset}",
             env={"FOO": "bar", "HOME": None}, cwd="/tmp")
    assert res["stdout"] == "bar\n/tmp\nunset\n"
    res = ex(api, box, command="echo ${FOO:-none}; pwd")
    assert res["stdout"] == "none\n/workspace\n"
    assert ex(api, box, command="pwd", cwd="sub-does-not-exist")["exitCode"] == 127


def test_timeout_kills_the_whole_tree(api, box):
    t0 = time.monotonic()
    res = ex(api, box, command="sleep 101 & sleep 101; echo never", timeoutMs=300)
    assert res["exitCode"] == 124 and res["timedOut"] is True
    assert time.monotonic() - t0 < 10
    assert count_procs(api, box, "sleep 101") == 0, "the timed-out tree survived"


def test_timeout_kills_setsid_and_orphaned_descendants(api, box, stack):
    """A timeout kills the tree, not only the group: a descendant that called
    setsid() and one whose parent exited first (trapping TERM both) go too."""
    res = ex(api, box, command="setsid sh -c 'trap \"\" TERM; sleep 102' & "
                               "(sh -c 'trap \"\" TERM; sleep 103' &); sleep 104",
             timeoutMs=500)
    assert res["exitCode"] == 124 and res["timedOut"] is True
    stack.wait("the timed-out tree to be gone",
               lambda: all(count_procs(api, box, "sleep %d" % n) == 0 for n in (102, 103, 104)),
               timeout=10)


def test_json_output_is_whole_to_32_mib_with_flat_agent_memory(stack, api, box):
    """A JSON exec keeps each stream whole up to agent.max_exec_output_bytes
    (32 MiB), truncated beyond, and the agent holds none of it in memory: it
    waits in a spill file and the answer is streamed from there. The
    agent's RSS, sampled while the answer is made and read, stays flat
    (before: both streams and their JSON text were built in memory, over
    100 MiB)."""
    mib = 1024 * 1024
    pid = stack.pid(api("GET", "/v1/sandboxes/" + box).json()["node"])
    before = rss_kib(pid)
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample)
    t.start()
    try:
        res = ex(api, box, timeout=120,
                 command="yes é | head -c %d; head -c %d /dev/zero | tr '\\0' y >&2"
                         % (32 * mib, 40 * mib))
    finally:
        done.set()
        t.join()
    assert res["exitCode"] == 0 and res["truncated"] is True
    # 2-byte characters across the answer's read chunks come back whole
    assert res["stdout"] == "é\n" * (32 * mib // 3) + "é"
    assert res["stderr"] == "y" * (32 * mib)  # cut at 32 MiB
    grown = peak[0] - before
    print("agent RSS %d KiB before, peak %d KiB (+%d KiB) for 64 MiB of JSON output"
          % (before, peak[0], grown))
    assert grown < 24 * 1024, "agent RSS grew %d KiB" % grown
    small = ex(api, box, command="echo hi; echo there >&2")
    assert (small["stdout"], small["stderr"], small["truncated"]) == ("hi\n", "there\n", False)


def test_invalid_utf8_in_json_mode_is_replaced(api, box):
    res = ex(api, box, command="printf 'a\\377b'")
    assert res["stdout"] == "a\ufffdb"


def test_sse_order_and_terminal_event(stack, box):
    with stream(stack, box, command="echo one; echo two >&2; echo three; exit 5") as r:
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = list(sse_events(r))
    names = [e for e, _ in events]
    assert names[0] == "start" and isinstance(events[0][1]["pid"], int)
    assert names[-1] == "exit" and events[-1][1]["exitCode"] == 5
    out = [(e, d["data"]) for e, d in events if e in ("stdout", "stderr")]
    assert "".join(d for e, d in out if e == "stdout") == "one\nthree\n"
    assert "".join(d for e, d in out if e == "stderr") == "two\n"


def test_sse_binary_chunks_are_base64(stack, box):
    with stream(stack, box, command="printf '\\377\\376'") as r:
        chunks = [d for e, d in sse_events(r) if e == "stdout"]
    assert chunks and all(c.get("encoding") == "base64" for c in chunks)
    import base64
    assert b"".join(base64.b64decode(c["data"]) for c in chunks) == b"\xff\xfe"


def test_first_byte_arrives_before_the_command_ends(stack, box):
    t0 = time.monotonic()
    with stream(stack, box, command="echo early; sleep 3; echo late") as r:
        for event, data in sse_events(r):
            if event == "stdout":
                first = time.monotonic() - t0
                assert data["data"] == "early\n"
                break
    assert first < scaled(1.5), "first output took %.2fs: something buffers the stream" % first


def test_twenty_megabytes_stream_intact(stack, box):
    import base64
    last_n = 2_700_000   # "0\n" … "2700000\n": 20.5 MB
    want = hashlib.sha256("".join("%d\n" % i for i in range(last_n + 1)).encode()).hexdigest()
    h = hashlib.sha256()
    size = 0
    with stream(stack, box, timeout=120, command="seq 0 %d" % last_n) as r:
        last = None
        for event, data in sse_events(r):
            if event == "stdout":
                chunk = (base64.b64decode(data["data"]) if data.get("encoding") == "base64"
                         else data["data"].encode())
                h.update(chunk)
                size += len(chunk)
            last = event
    assert last == "exit"
    assert size > 20_000_000
    assert h.hexdigest() == want, "the streamed output differs from what the command printed"


def test_client_disconnect_kills_the_command(stack, box, api):
    # 317 s: an odd duration, so the check below finds only this command.
    r = stream(stack, box, command="echo go; sleep 317")
    for event, _ in sse_events(r):
        if event == "stdout":
            break
    r.close()
    assert count_procs(api, box, "sleep 317") in (0, 1)
    stack.wait("the disconnected command to be killed",
               lambda: count_procs(api, box, "sleep 317") == 0, timeout=10)


def test_many_streams_do_not_hold_api_workers(stack):
    """200 streaming execs at once with a pool of 4 workers: all finish, and a
    control call answers promptly while they are open."""
    n = 200
    box = "ms-" + uuid.uuid4().hex[:8]
    # Two processes per stream: more than the default pids limit of 256.
    assert stack.api("PUT", "/v1/sandboxes/" + box,
                     json={"resources": {"pids": 1024}}).status_code == 201

    def one(i):
        with stream(stack, box, timeout=120, command="sleep 2; echo %d" % i) as r:
            got = [d["data"] for e, d in sse_events(r) if e == "stdout"]
            return "".join(got).strip() == str(i)

    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        futs = [pool.submit(one, i) for i in range(n)]
        time.sleep(1.0)
        t0 = time.monotonic()
        r = stack.api("GET", "/v1/sandboxes/" + box, timeout=10)
        control_s = time.monotonic() - t0
        results = [f.result() for f in futs]
    stack.api("DELETE", "/v1/sandboxes/" + box, timeout=30)
    assert r.status_code == 200
    assert all(results), "%d of %d streams lost their output" % (results.count(False), n)
    assert control_s < scaled(2.0), "a control call took %.2fs while streams were open" % control_s


def test_bad_exec_bodies(api, box):
    for body in ({}, {"command": "x", "argv": ["x"]}, {"command": ""}, {"argv": []},
                 {"argv": ["a", 1]}, {"command": "x", "timeoutMs": 0},
                 {"command": "x", "timeoutMs": "5"}, {"command": "x", "bogus": 1},
                 {"command": "x", "env": {"A B": "c"}}, {"command": "x", "stdin": 5},
                 {"command": "x", "session": "../x"}):
        r = api("POST", "/v1/sandboxes/%s/exec" % box, json=body)
        assert_error(r, 400, "VALIDATION_FAILED")
    r = api("POST", "/v1/sandboxes/%s/exec" % box, data=b"{not json",
            headers={"Content-Type": "application/json"})
    assert_error(r, 400, "VALIDATION_FAILED")


def test_exec_on_unknown_sandbox_is_404(api):
    assert_error(api("POST", "/v1/sandboxes/no-such-box-x1/exec", json={"command": "true"}),
                 404, "SANDBOX_NOT_FOUND")
