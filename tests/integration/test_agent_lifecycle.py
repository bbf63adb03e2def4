"""The agent's half of the sandbox lifecycle, black box through the API
(plus redis-cli and the host's /proc for what operators see):

- an idle sandbox sleeps after sleepAfter (record `sleeping`, event
  `slept`), and the next exec wakes it with a new generation and an empty
  filesystem;
- keepAlive never sleeps; a live stream (an SSE exec) keeps it awake;
- an init killed from the host is reported (`crashed`) and the next exec
  wakes the sandbox;
- an agent cut off past the node TTL whose sandbox was re-placed destroys its
  stale copy when it comes back, and refuses the old epoch (409);
- a restarted agent marks what it ran as gone (`lost`).

The session stack runs with cluster.node_ttl = 3s (deploy/stack).
"""

import hashlib
import json
import os
import signal
import time
import uuid

import requests

from conftest import assert_error, sandbox_procs
from sbxsse import sse_events


# ---- helpers ------------------------------------------------------------------------

def new_box(stack, **body):
    return stack.create("lc", **body)


def destroy(stack, sid):
    r = stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
    assert r.status_code == 204, r.text


def record(stack, sid):
    r = stack.api("GET", "/v1/sandboxes/" + sid)
    assert r.status_code == 200, r.text
    return r.json()


def run(stack, sid, command, timeout=30):
    r = stack.data("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command},
                   timeout=timeout + 30)
    assert r.status_code == 200, "exec %r: %d %s" % (command, r.status_code, r.text[:300])
    return r.json()


def tenant_of(stack, key):
    h = hashlib.sha256(key.encode()).hexdigest()
    t = stack.redis_cli("HGET", "sbx:apikey:" + h, "tenant")
    assert t, "no tenant for the dev key"
    return t


def events_for(stack, tenant, sid, count=500):
    """The last events of one sandbox, oldest first: [{type, ...}]."""
    out = stack.redis_cli("--json", "XREVRANGE", "sbx:events", "+", "-", "COUNT", count)
    found = []
    for _, fields in json.loads(out):
        fields = dict(zip(fields[0::2], fields[1::2]))
        if fields.get("tenant") == tenant and fields.get("id") == sid:
            found.append(fields)
    return list(reversed(found))


def event_types(stack, tenant, sid):
    return [e.get("type") for e in events_for(stack, tenant, sid)]


def wait_event(stack, tenant, sid, kind, timeout=5):
    """Wait for an event of one sandbox. The agent adds an event once Redis
    has answered the change it reports (or, for "fenced", while it destroys
    the copy), so the event lands a round trip after what a test observes."""
    stack.wait("a %r event of %s" % (kind, sid),
               lambda: kind in event_types(stack, tenant, sid), timeout=timeout)


def agent_index(node):
    assert node.startswith("agent-"), node
    return int(node.split("-", 1)[1])


def inits_of(tenant, sid, parent=None):
    """Host pids of sbx-init processes of <tenant>.<id> (with parent: every
    process of the sandbox that is a child of parent)."""
    return [pid for pid, comm, ppid in sandbox_procs("%s.%s" % (tenant, sid))
            if (ppid == parent if parent is not None else comm == "sbx-init")]

# ---- sleep and wake -------------------------------------------------------------------

def test_idle_sandbox_sleeps_and_the_next_exec_wakes_it(stack, redis_cli):
    tenant = tenant_of(stack, stack.key)
    sid, rec = new_box(stack, sleepAfter="2s")
    try:
        assert rec["sleepAfter"] == 2000
        assert run(stack, sid, "echo data > /workspace/marker")["exitCode"] == 0
        gen = record(stack, sid)["generation"]
        stack.wait("%s to be sleeping" % sid, lambda: record(stack, sid)["state"] == "sleeping",
                   timeout=12)
        wait_event(stack, tenant, sid, "slept")
        assert redis_cli("HGET", "sbx:sb:{%s/%s}" % (tenant, sid), "state") == "sleeping"
        # No container is left on the host.
        stack.wait("the sleeping sandbox's init to be gone", lambda: not inits_of(tenant, sid),
                   timeout=5)
        # The next data call wakes it: new generation, empty filesystem.
        res = run(stack, sid, "ls -A /workspace; echo end")
        assert res["exitCode"] == 0
        assert res["stdout"] == "end\n", "the woken sandbox kept files: %r" % res["stdout"]
        after = record(stack, sid)
        assert after["state"] == "running"
        assert after["generation"] > gen
    finally:
        destroy(stack, sid)


def test_keep_alive_never_sleeps(stack):
    sid, _ = new_box(stack, sleepAfter="1s", keepAlive=True)
    try:
        run(stack, sid, "true")
        gen = record(stack, sid)["generation"]
        time.sleep(3.5)
        rec = record(stack, sid)
        assert rec["state"] == "running" and rec["generation"] == gen, rec
        # Turned off through PATCH (the API tells the agent): it sleeps.
        r = stack.api("PATCH", "/v1/sandboxes/" + sid, json={"keepAlive": False})
        assert r.status_code == 200, r.text
        stack.wait("%s to sleep once keepAlive is off" % sid,
                   lambda: record(stack, sid)["state"] == "sleeping", timeout=12)
    finally:
        destroy(stack, sid)


def test_live_stream_keeps_the_sandbox_awake(stack):
    sid, _ = new_box(stack, sleepAfter="1s")
    try:
        gen = record(stack, sid)["generation"]
        r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid,
                      json={"command": "for i in 1 2 3 4; do echo tick $i; sleep 1; done"},
                      headers={"Accept": "text/event-stream"}, stream=True, timeout=60)
        assert r.status_code == 200, r.text[:300]
        events = []
        for name, data in sse_events(r):
            events.append((name, data))
            if name in ("exit", "error"):
                break
        r.close()
        assert events[-1][0] == "exit", events
        assert events[-1][1]["exitCode"] == 0, events
        out = "".join(d["data"] for n, d in events if n == "stdout")
        assert out == "".join("tick %d\n" % i for i in range(1, 5)), out
        # A 4 s stream with sleepAfter 1 s: still the same container.
        rec = record(stack, sid)
        assert rec["generation"] == gen, rec
        # Idle again afterwards: it sleeps.
        stack.wait("%s to sleep after the stream" % sid,
                   lambda: record(stack, sid)["state"] == "sleeping", timeout=12)
    finally:
        destroy(stack, sid)


# ---- crashes and restarts ---------------------------------------------------------------

def test_killed_init_is_reported_and_the_next_exec_wakes(stack):
    tenant = tenant_of(stack, stack.key)
    sid, _ = new_box(stack, keepAlive=True)
    try:
        run(stack, sid, "true")
        rec = record(stack, sid)
        agent = stack.pid(rec["node"])
        inits = inits_of(tenant, sid, parent=agent)
        assert len(inits) == 1, "expected one init child of %s for %s: %r" % (
            rec["node"], sid, inits)
        os.kill(inits[0], signal.SIGKILL)
        stack.wait("%s to be reported" % sid,
                   lambda: record(stack, sid)["state"] == "sleeping", timeout=10)
        wait_event(stack, tenant, sid, "crashed")
        res = run(stack, sid, "echo back")
        assert res["stdout"] == "back\n"
        after = record(stack, sid)
        assert after["state"] == "running" and after["generation"] > rec["generation"], after
    finally:
        destroy(stack, sid)


def test_restarted_agent_marks_its_sandboxes_lost(stack):
    tenant = tenant_of(stack, stack.key)
    sid, _ = new_box(stack, keepAlive=True)
    node = None
    try:
        run(stack, sid, "true")
        rec = record(stack, sid)
        node = rec["node"]
        # Killed, not stopped: a clean stop sets its records to sleeping
        # itself (test_node_stop.py); a crashed agent's successor finds them.
        os.kill(stack.pid(node), signal.SIGKILL)
        stack.run("restart-agent", str(agent_index(node)))
        stack.wait_healthy()
        stack.wait("%s to be marked lost" % sid,
                   lambda: record(stack, sid)["state"] == "sleeping", timeout=10)
        wait_event(stack, tenant, sid, "lost")
        res = run(stack, sid, "echo again")
        assert res["stdout"] == "again\n"
        assert record(stack, sid)["generation"] > rec["generation"]
    finally:
        stack.wait_healthy()
        destroy(stack, sid)


# ---- fencing -----------------------------------------------------------------------------

def test_cut_off_agent_destroys_its_stale_copy(stack):
    tenant = tenant_of(stack, stack.key)
    sid, _ = new_box(stack, keepAlive=True)
    pid = None
    try:
        run(stack, sid, "true")
        old = record(stack, sid)
        node = old["node"]
        address = stack.env["SBX_AGENT_%d" % agent_index(node)]
        pid = stack.pid(node)
        os.kill(pid, signal.SIGSTOP)
        stack.wait("%s to go down" % node,
                   lambda: stack.redis_cli("EXISTS", "sbx:node:{%s}:alive" % node) == "0",
                   timeout=10)
        # Re-placed on the other agent by the next call.
        r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
        assert r.status_code == 200, r.text
        new = r.json()
        assert new["node"] != node and new["epoch"] > old["epoch"], (old, new)
        assert new["generation"] > old["generation"]
        assert len(inits_of(tenant, sid)) == 2  # the stale copy still exists
        os.kill(pid, signal.SIGCONT)
        pid = None
        stack.wait("the stale copy to be destroyed",
                   lambda: len(inits_of(tenant, sid)) == 1, timeout=15)
        wait_event(stack, tenant, sid, "fenced")
        # The old agent refuses the old epoch: a data call is told to retry
        # (routed again, it reaches the new owner); a control call is a 409.
        r = requests.post("http://%s/v1/sandboxes/%s/exec" % (address, sid),
                          json={"command": "true"},
                          headers={"X-Sbx-Node-Secret": stack.secret, "X-Sbx-Tenant": tenant,
                                   "X-Sbx-Epoch": str(old["epoch"])}, timeout=10)
        assert_error(r, 503, "NODE_UNAVAILABLE")
        r = requests.post("http://%s/agent/v1/sandboxes/%s/%s/stop" % (address, tenant, sid),
                          headers={"X-Sbx-Node-Secret": stack.secret,
                                   "X-Sbx-Epoch": str(old["epoch"])}, timeout=10)
        assert_error(r, 409, "STALE_EPOCH")
        # The new owner serves it.
        assert run(stack, sid, "echo moved")["stdout"] == "moved\n"
        assert record(stack, sid)["node"] == new["node"]
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        stack.wait_healthy()
        destroy(stack, sid)


def test_record_that_lost_writes_is_reset_not_stuck(stack):
    """A Redis failover can lose the latest start: the record then says
    running on this node at an OLDER epoch than the agent was given. The
    agent would refuse that epoch forever; instead its sweep drops its copy
    and sets the record to sleeping, and the next call starts afresh."""
    sid, rec = new_box(stack)
    tenant = tenant_of(stack, stack.key)
    rkey = "sbx:sb:{%s/%s}" % (tenant, sid)
    old_epoch = int(rec["epoch"]) - 1000
    stack.redis_cli("HSET", rkey, "epoch", old_epoch)
    try:
        stack.wait("the agent to reset the stale record",
                   lambda: stack.redis_cli("HGET", rkey, "state") == "sleeping", timeout=15)
        wait_event(stack, tenant, sid, "reset")
        assert run(stack, sid, "echo back")["stdout"] == "back\n"
        now = record(stack, sid)
        assert now["epoch"] > rec["epoch"], "the new epoch must pass the agent's fence"
        assert now["generation"] > rec["generation"]
        assert len(inits_of(tenant, sid)) == 1, "more than one container for the sandbox"
    finally:
        destroy(stack, sid)


def test_agent_recheck_applies_the_api_rules(stack):
    """A create body the API refuses, sent to an agent directly with the node
    secret, is refused there with the same code and message: both tiers
    check a spec with sandbox/common/spec.c."""
    tenant = tenant_of(stack, stack.key)
    address = stack.env["SBX_AGENT_1"]
    bad = [
        {"labels": {"a:b": "1"}},
        {"labels": {"k": "{x}"}},
        {"env": {"1A": "x"}},
        {"image": "../x"},
        {"network": "host"},
        {"resources": {"memoryMiB": 15}},
        {"resources": {"cpus": 0}},
        {"resources": {"gpu": 1}},
        {"sleepAfter": "0s"},
        {"sleepAfter": "soon"},
    ]
    for spec in bad:
        sid = "lc-" + uuid.uuid4().hex[:10]
        api_err = assert_error(stack.api("PUT", "/v1/sandboxes/" + sid, json=spec, timeout=30),
                               400, "VALIDATION_FAILED")
        body = dict(spec, generation=1, epoch=1)
        r = requests.put("http://%s/agent/v1/sandboxes/%s/%s" % (address, tenant, sid),
                         json=body, headers={"X-Sbx-Node-Secret": stack.secret}, timeout=10)
        agent_err = assert_error(r, 400, api_err["code"])
        assert agent_err["message"] == api_err["message"], (spec, api_err, agent_err)
