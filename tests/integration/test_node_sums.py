"""What placement reads per node (docs/REDIS.md `sbx:node:{name}:committed`):
the record scripts keep, for every node, the count, memory and cpus of the
sandboxes that run or start there, so a create reads one hash per node
instead of every record of the node. On a stack of its own (two nodes of
4096 MiB and 4 cpus, a reconciler every second):

- after every step of a sandbox's life — create, sleep (by the API and by
  the agent), a resize applied by a restart, a wake on another node after a
  drain, a re-placement after its node died, a restarted agent marking it
  lost, delete — each node's
  sums equal what its records commit, computed here from the records;
- the reconciler never had to rebuild them meanwhile (it logs each
  rebuild), so the scripts, not the repair, kept them right;
- a sum corrupted by hand (placement then sees the node full and places
  elsewhere), and the sums of a node that was removed, are rebuilt by the
  reconciler from the records.
"""

import json
import os
import signal
import subprocess
import uuid

import pytest

from conftest import assert_error, own_stack, routed
from sbxroute import past_route_cache

NODES = ("agent-1", "agent-2")
OVERRIDES = ["agent.memory_mib=4096", "agent.cpus_milli=4000", "api.reconcile_interval=1s"]
REBUILT = "reconcile: rebuilt sbx:node:{"


@pytest.fixture(scope="module")
def st():
    yield from own_stack(agents=2, overrides=OVERRIDES)


@pytest.fixture
def key(st):
    return st.new_key("ns-" + uuid.uuid4().hex[:8])


def api_log(st):
    with open(st.dir + "/logs/api.log", errors="replace") as f:
        return f.read()


def rebuilt_since(st, mark):
    return [x for x in api_log(st)[mark:].splitlines() if REBUILT in x]


def committed(st, node):
    """The sums the scripts keep for node: {} when it has none."""
    out = st.redis_cli("HGETALL", "sbx:node:{%s}:committed" % node).split("\n")
    return {k: int(v) for k, v in zip(out[0::2], out[1::2]) if k}


def expected(st, node):
    """What node's records commit, from every record in Redis (running or
    starting: memoryMiB, cpus in thousandths rounded), as committed() shows
    it."""
    keys = [k for k in st.redis_cli("--scan", "--pattern", "sbx:sb:{*}").split()
            if k.endswith("}")]
    n = m = c = 0
    if keys:
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(st.redis_port),
                            "--no-auth-warning"],
                           input="".join("HMGET %s node state resources\n" % k for k in keys),
                           capture_output=True, text=True, timeout=10, check=True)
        lines = r.stdout.split("\n")
        for i in range(len(keys)):
            rnode, state, res = lines[3 * i:3 * i + 3]
            if rnode != node or state not in ("running", "starting"):
                continue
            res = json.loads(res or "{}")
            mem, cpus = res.get("memoryMiB"), res.get("cpus")
            n += 1
            m += mem if isinstance(mem, int) and mem > 0 else 0
            c += int(cpus * 1000 + 0.5) if isinstance(cpus, (int, float)) and cpus > 0 else 0
    return {"count": n, "memoryMiB": m, "cpusMilli": c} if n else {}


def check_sums(st, what):
    for node in NODES:
        assert committed(st, node) == expected(st, node), "%s: sums of %s" % (what, node)


def create(st, key, sid, **resources):
    r = st.api("PUT", "/v1/sandboxes/" + sid, key=key, json={"resources": resources}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


def record(st, key, sid):
    r = st.api("GET", "/v1/sandboxes/" + sid, key=key)
    assert r.status_code == 200, r.text
    return r.json()


def run(st, key, sid, command="true"):
    r = routed(st.api, "POST", "/v1/sandboxes/%s/exec" % sid, key=key,
               json={"command": command}, timeout=60)
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    return r.json()


def drain(st, node, body):
    r = st.api("POST", "/v1/nodes/%s/drain" % node, key=st.admin_key, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def on_node(st, key, node, *sids, **resources):
    """Create sids on node (the other one drained meanwhile)."""
    other = NODES[1] if node == NODES[0] else NODES[0]
    drain(st, other, {})
    try:
        for sid in sids:
            assert create(st, key, sid, **resources)["node"] == node
    finally:
        drain(st, other, {"drain": False})


def test_sums_follow_create_sleep_resize_and_delete(st, key):
    mark = len(api_log(st))
    a, b = "ns-a-" + uuid.uuid4().hex[:6], "ns-b-" + uuid.uuid4().hex[:6]
    try:
        on_node(st, key, "agent-1", a, memoryMiB=512, cpus=0.5)
        on_node(st, key, "agent-1", b, memoryMiB=256, cpus=0.25)
        check_sums(st, "two creates")
        assert committed(st, "agent-1") == {"count": 2, "memoryMiB": 768, "cpusMilli": 750}
        run(st, key, a)                                  # starting -> running: no change
        check_sums(st, "running")
        r = st.api("POST", "/v1/sandboxes/%s/sleep" % a, key=key, timeout=30)
        assert r.status_code == 200, r.text
        st.wait("a asleep", lambda: record(st, key, a)["state"] == "sleeping")
        check_sums(st, "a asleep")
        assert committed(st, "agent-1") == {"count": 1, "memoryMiB": 256, "cpusMilli": 250}
        # a resize waits in pending (committing nothing new) until a start applies it
        r = st.api("PATCH", "/v1/sandboxes/" + b, key=key,
                   json={"resources": {"memoryMiB": 1024, "cpus": 1.25}})
        assert r.status_code == 200, r.text
        check_sums(st, "resize pending")
        assert committed(st, "agent-1")["memoryMiB"] == 256
        r = st.api("POST", "/v1/sandboxes/%s/restart" % b, key=key, timeout=60)
        assert r.status_code == 200, r.text
        assert record(st, key, b)["resources"]["memoryMiB"] == 1024
        check_sums(st, "resize applied")
        assert committed(st, "agent-1") == {"count": 1, "memoryMiB": 1024, "cpusMilli": 1250}
        run(st, key, a)                                  # the wake commits a again
        check_sums(st, "a awake")
        for sid in (a, b):
            assert st.api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=60).status_code == 204
        check_sums(st, "deleted")
        assert rebuilt_since(st, mark) == [], "the reconciler had to repair the scripts' sums"
    finally:
        for sid in (a, b):
            st.api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=60)


def test_sums_follow_a_sleep_by_the_agent(st, key):
    """sleepAfter expired: the agent sets the record sleeping (its
    agent_sleep script), and the share leaves the node's sums."""
    mark = len(api_log(st))
    sid = "ns-idle-" + uuid.uuid4().hex[:6]
    try:
        r = st.api("PUT", "/v1/sandboxes/" + sid, key=key, timeout=30,
                   json={"sleepAfter": 1000, "resources": {"memoryMiB": 200, "cpus": 0.2}})
        assert r.status_code == 201, r.text
        node = r.json()["node"]
        run(st, key, sid)
        check_sums(st, "running")
        before = committed(st, node)
        st.wait("the agent to put it to sleep",
                lambda: record(st, key, sid)["state"] == "sleeping", timeout=15, interval=0.2)
        check_sums(st, "slept by the agent")
        assert before["memoryMiB"] - committed(st, node).get("memoryMiB", 0) == 200
        assert rebuilt_since(st, mark) == []
    finally:
        st.api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=60)


def test_sums_move_with_a_drained_sandbox(st, key):
    """A drain with migrate (force) puts it to sleep; its wake starts it on
    the other node: the share leaves agent-1 and reaches agent-2."""
    mark = len(api_log(st))
    sid = "ns-mv-" + uuid.uuid4().hex[:6]
    try:
        on_node(st, key, "agent-1", sid, memoryMiB=300, cpus=0.3)
        before = committed(st, "agent-2")
        body = drain(st, "agent-1", {"migrate": True, "force": True})
        assert sid in body["migrated"], body
        check_sums(st, "migrated (asleep)")
        run(st, key, sid)
        assert record(st, key, sid)["node"] == "agent-2"
        check_sums(st, "woken on agent-2")
        after = committed(st, "agent-2")
        assert after["memoryMiB"] - before.get("memoryMiB", 0) == 300, (before, after)
        assert after["cpusMilli"] - before.get("cpusMilli", 0) == 300, (before, after)
        assert rebuilt_since(st, mark) == []
    finally:
        drain(st, "agent-1", {"drain": False})
        st.api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=60)


def agent_index(node):
    return node.rsplit("-", 1)[1]


def test_sums_follow_a_replacement_and_a_lost_sandbox(st, key):
    """agent-1 dies with two sandboxes: one is re-placed on agent-2 by its
    next call (the record, still running on agent-1, moves its share); the
    other is marked lost (sleeping) by the restarted agent-1."""
    mark = len(api_log(st))
    moved, lost = "ns-rp-" + uuid.uuid4().hex[:6], "ns-lo-" + uuid.uuid4().hex[:6]
    killed = False
    try:
        on_node(st, key, "agent-1", moved, lost, memoryMiB=128, cpus=0.125)
        run(st, key, moved)
        os.kill(st.pid("agent-1"), signal.SIGKILL)
        killed = True
        st.redis_cli("DEL", "sbx:node:{agent-1}:alive")      # down at once, not after the TTL
        past_route_cache()
        check_sums(st, "agent-1 dead")
        assert committed(st, "agent-1")["count"] >= 2
        assert run(st, key, moved, "echo here")["stdout"] == "here\n"
        assert record(st, key, moved)["node"] == "agent-2"
        check_sums(st, "re-placed")
        st.run("restart-agent", agent_index("agent-1"))
        killed = False
        st.wait_healthy()
        st.wait("the lost one asleep", lambda: record(st, key, lost)["state"] == "sleeping",
                timeout=15)
        check_sums(st, "lost")
        assert rebuilt_since(st, mark) == []
    finally:
        if killed:
            st.run("restart-agent", agent_index("agent-1"))
        st.wait_healthy()
        for sid in (moved, lost):
            st.api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=60)


def test_the_reconciler_rebuilds_drifted_sums(st, key):
    """A sum corrupted by hand makes agent-1 look full: creates go to
    agent-2 until the reconciler rebuilds it from the records; the sums of a
    node removed by hand (no set, no records) go."""
    sid, probe = "ns-rc-" + uuid.uuid4().hex[:6], "ns-pr-" + uuid.uuid4().hex[:6]
    ghost = "sbx:node:{ns-gone}:committed"
    try:
        on_node(st, key, "agent-1", sid, memoryMiB=64, cpus=0.1)
        mark = len(api_log(st))
        st.redis_cli("HSET", "sbx:node:{agent-1}:committed", "memoryMiB", "4096")
        st.redis_cli("HSET", ghost, "count", "3", "memoryMiB", "300", "cpusMilli", "300")
        drain(st, "agent-2", {})
        try:
            r = st.api("PUT", "/v1/sandboxes/" + probe, key=key,
                       json={"resources": {"memoryMiB": 64, "cpus": 0.1}}, timeout=30)
            if r.status_code != 201:      # else the reconciler was quicker than this create
                assert_error(r, 503, "NO_CAPACITY")
        finally:
            drain(st, "agent-2", {"drain": False})
        st.wait("the reconciler to rebuild the sums",
                lambda: committed(st, "agent-1").get("memoryMiB") != 4096 and
                st.redis_cli("EXISTS", ghost) == "0", timeout=15, interval=0.3)
        check_sums(st, "rebuilt")
        lines = rebuilt_since(st, mark)
        assert any("{agent-1}" in x for x in lines) and any("{ns-gone}" in x for x in lines), lines
    finally:
        for s in (sid, probe):
            st.api("DELETE", "/v1/sandboxes/" + s, key=key, timeout=60)
