"""A node at a host limit is full, not broken (docs/DEPLOY.md "Capacity"):
an agent whose RLIMIT_NOFILE leaves no room for another sandbox answers
503 NO_CAPACITY with Retry-After (never NODE_UNAVAILABLE), keeps serving
its live sandboxes, reports the lower capacity in the registry, and its
creates go to the other node."""

import os
import resource
import socket
import subprocess
import time
import uuid

from conftest import STACK, assert_error, reap_orphans
from sbxproc import children, comm, fd_count


def node_of(api, stack, name):
    nodes = api("GET", "/v1/nodes", key=stack.admin_key).json()["nodes"]
    return next(n for n in nodes if n["name"] == name)


def drain(api, stack, name, on):
    r = api("POST", "/v1/nodes/%s/drain" % name, key=stack.admin_key, json={"drain": on})
    assert r.status_code == 200, r.text


def wait_for(what, cond, timeout=15):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.2)


def test_an_agent_started_with_a_low_nofile_takes_no_sandbox(stack, api):
    """Hard nofile 1024 leaves no fds for sandboxes past the connection
    reserve: the agent says so at start, registers capacity 0 (by nofile),
    and creates answer NO_CAPACITY or go to the other node."""
    sid = "cap-low-" + uuid.uuid4().hex[:6]
    r = subprocess.run(["prlimit", "--nofile=1024:1024", STACK, "restart-agent", "1",
                        "--dir", stack.dir], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SBX_BUILD=stack.build))
    reap_orphans()
    try:
        assert r.returncode == 0, r.stderr
        wait_for("agent-1 up with capacity 0", lambda: node_of(api, stack, "agent-1")["state"] ==
                 "up" and node_of(api, stack, "agent-1")["capacity"] == 0)
        assert stack.redis_cli("HGET", "sbx:node:{agent-1}", "capacityBy") == "nofile"
        assert "raise LimitNOFILE" in stack.log("agent-1", 200)
        drain(api, stack, "agent-2", True)
        try:
            r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
            assert_error(r, 503, "NO_CAPACITY")
            assert r.headers.get("Retry-After"), dict(r.headers)
        finally:
            drain(api, stack, "agent-2", False)
        r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
        assert r.status_code == 201 and r.json()["node"] == "agent-2", r.text
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
        stack.run("restart-agent", "1")
        stack.wait_healthy()
        wait_for("agent-1 to take sandboxes again",
                 lambda: node_of(api, stack, "agent-1")["capacity"] > 1)


def test_a_node_out_of_fds_is_full_and_creates_go_elsewhere(stack, api):
    tag = uuid.uuid4().hex[:6]
    live, moved = "cap-live-" + tag, ["cap-%s-%d" % (tag, i) for i in range(4)]
    last = "cap-last-" + tag
    pid = stack.pid("agent-1")
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    try:
        drain(api, stack, "agent-2", True)
        try:
            r = api("PUT", "/v1/sandboxes/" + live, json={}, timeout=30)
            assert r.status_code == 201 and r.json()["node"] == "agent-1", r.text
        finally:
            drain(api, stack, "agent-2", False)
        # room for the connections of the live sandbox, none for another one
        spare = len(os.listdir("/proc/%d/fd" % pid)) + 40
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (spare, hard))
        # at once (before a heartbeat reports it): agent-1 refuses, the
        # create goes to agent-2; then placement skips agent-1 itself
        for sid in moved:
            r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
            assert r.status_code == 201, r.text
            assert r.json()["node"] == "agent-2", r.text
        r = api("POST", "/v1/sandboxes/%s/exec" % live, json={"command": "echo still here"})
        assert r.status_code == 200 and r.json()["stdout"] == "still here\n", r.text
        deadline = time.monotonic() + 10
        while node_of(api, stack, "agent-1")["capacity"] > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert node_of(api, stack, "agent-1")["capacity"] <= 1
        assert stack.redis_cli("HGET", "sbx:node:{agent-1}", "capacityBy") == "nofile"
        # no node with room: a clean 503 to retry, not a broken node
        drain(api, stack, "agent-2", True)
        try:
            r = api("PUT", "/v1/sandboxes/" + last, json={}, timeout=30)
            assert_error(r, 503, "NO_CAPACITY")
            assert r.headers.get("Retry-After"), dict(r.headers)
            assert api("GET", "/v1/sandboxes/" + last).status_code == 404
        finally:
            drain(api, stack, "agent-2", False)
        r = api("POST", "/v1/sandboxes/%s/exec" % live, json={"command": "true"})
        assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        for sid in [live, last] + moved:
            api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
        # the next heartbeat reports the room again
        deadline = time.monotonic() + 10
        while node_of(api, stack, "agent-1")["capacity"] <= 1 and time.monotonic() < deadline:
            time.sleep(0.2)


def test_an_idle_sandbox_holds_two_agent_fds(stack, api):
    """An idle sandbox costs the agent its init's pidfd and socket only (its
    netns and root are opened on demand, uid range locks share one fd);
    while fewer than 64 ranges have been used, each also keeps its idmap
    user namespace: 3 at most, where it was 6."""
    tag = uuid.uuid4().hex[:6]
    ids = ["fd-%s-%d" % (tag, i) for i in range(8)]
    pid = stack.pid("agent-1")
    drain(api, stack, "agent-2", True)
    try:
        before = len(os.listdir("/proc/%d/fd" % pid))
        for sid in ids:
            r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
            assert r.status_code == 201 and r.json()["node"] == "agent-1", r.text
        # a file write and an exec open the root and run a helper: nothing stays
        r = api("PUT", "/v1/sandboxes/%s/files/a.txt" % ids[0], data=b"x")
        assert r.status_code == 201, r.text
        after = len(os.listdir("/proc/%d/fd" % pid))
        assert after - before <= 3 * len(ids) + 4, (before, after)
    finally:
        drain(api, stack, "agent-2", False)
        for sid in ids:
            api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def fdsize(pid):
    """The size of pid's fd table (FDSize in /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        return int(next(l.split()[1] for l in f if l.startswith("FDSize:")))


def test_a_build_does_not_copy_the_agents_fd_table(stack, api):
    """The clone that becomes a sandbox's init keeps a copy of only the
    agent's first fds (where its own were moved), not the agent's whole fd
    table, which grows with its sandboxes and connections: with 1500 idle
    connections held to the agent, a new init's table is still small and
    holds /dev/null on 0-2, init's socket (3) and its signalfd (4) only
    (and, while the keeper forked ahead of the first command waits, at
    most 250 ms, that keeper's channel)."""
    sid = "cap-fds-" + uuid.uuid4().hex[:6]
    pid = stack.pid("agent-1")
    host, port = stack.env["SBX_AGENT_1"].rsplit(":", 1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = []
    drain(api, stack, "agent-2", True)
    try:
        for _ in range(1500):
            held.append(socket.create_connection((host, int(port)), timeout=5))
        wait_for("the agent to take the connections", lambda: fd_count(pid) > 1500)
        assert fdsize(pid) >= 2048, fdsize(pid)
        r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
        assert r.status_code == 201 and r.json()["node"] == "agent-1", r.text
        inits = [c for c in children(pid) if comm(c) == "sbx-init"]
        init = max(inits, key=lambda c: os.stat("/proc/%d" % c).st_ctime_ns)
        assert fdsize(init) <= 256, (init, fdsize(init))
        wait_for("init's own fds only", lambda: sorted(
            int(x) for x in os.listdir("/proc/%d/fd" % init)) == [0, 1, 2, 3, 4])
    finally:
        for s in held:
            s.close()
        drain(api, stack, "agent-2", False)
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
