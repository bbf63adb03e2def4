"""Sandbox builds off the agent's loop (rt_create_async), black box at the
agent's control routes and the host's /proc:

- while builds are under way the loop keeps serving: an exec in another
  sandbox is answered;
- a DELETE that arrives while its sandbox is being built is answered only
  once nothing of it is left (no process, no cgroup, no mount); the create
  it overtook is answered 503 NODE_UNAVAILABLE with Retry-After (a
  transition: the retry sees its end), and the reservation is given back;
- a stop during the build gives the start up the same way and keeps the
  entry, stopped;
- duplicate PUTs of one start that arrive during its build all get its
  outcome (one container);
- a start while a given-up build of its sandbox is still being torn down
  is a transition: 503 NODE_UNAVAILABLE with Retry-After, and the retry,
  once the build is gone, starts it;
- many builds at once all finish;
- the loop's lag probe (sbx_agent_loop_lag_seconds) is exported.

A build is held under way, deterministically, by freezing its cgroup before
it exists: the test makes the sandbox's freezer cgroup and freezes it, so
the child that the build moves in there stops before its mount work, and
the build waits for it until the test thaws it. The builds are started
straight at the agent (the API would serialize them through the record),
each with a Redis record that names the node (state `starting`), so that a
fencing sweep meanwhile keeps it.
"""

import concurrent.futures
import os
import re
import subprocess
import uuid

import requests

from conftest import sandbox_procs

N = 6


def agent(stack):
    return "http://" + stack.env["SBX_AGENT_1"]


def headers(stack):
    return {"X-Sbx-Node-Secret": stack.secret, "X-Sbx-Tenant": "dev", "X-Sbx-Epoch": "1"}


def record(stack, sid, present=True):
    """The Redis record a fencing sweep reads: ours, at epoch 1, starting."""
    k = "sbx:sb:{dev/%s}" % sid
    if present:
        stack.redis_cli("HSET", k, "node", stack.env["SBX_NODE_1"], "epoch", "1",
                        "state", "starting")
    else:
        stack.redis_cli("DEL", k)
        # and the index entries the reconciler may have made for it meanwhile
        # (a later drain of the node would page through them)
        stack.redis_cli("SREM", "sbx:node:{%s}:sandboxes" % stack.env["SBX_NODE_1"], "dev/" + sid)
        stack.redis_cli("ZREM", "sbx:tenant:{dev}:sandboxes", sid)


def put(stack, sid):
    r = requests.put(agent(stack) + "/agent/v1/sandboxes/dev/" + sid,
                     json={"generation": 1, "epoch": 1}, headers=headers(stack), timeout=60)
    return r.status_code, r.json() if r.content else None


def call(stack, method, sid, suffix=""):
    return requests.request(method, agent(stack) + "/agent/v1/sandboxes/dev/" + sid + suffix,
                            headers=headers(stack), timeout=60)


def entry(stack, sid):
    """The agent's entry of sid: its JSON, or None."""
    r = call(stack, "GET", sid)
    return r.json() if r.status_code == 200 else None


def until(what, fn):
    for _ in range(5000):
        v = fn()
        if v:
            return v
    raise AssertionError("never: " + what)


def freezer_dir(stack, sid):
    with open(os.path.join(stack.dir, "conf", "sbx.conf")) as f:
        parent = re.search(r"^cgroup_parent\s*=\s*(\S+)", f.read(), re.M).group(1)
    return "/sys/fs/cgroup/freezer/%s/%s/dev.%s" % (parent, stack.env["SBX_NODE_1"], sid)


def hold(stack, sid):
    """Freeze sid's cgroup before its build makes it (the build keeps it)."""
    d = freezer_dir(stack, sid)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "freezer.state"), "w") as f:
        f.write("FROZEN")


def release(stack, sid):
    d = freezer_dir(stack, sid)
    try:
        with open(os.path.join(d, "freezer.state"), "w") as f:
            f.write("THAWED")
    except FileNotFoundError:
        pass


def leftovers(key):
    """What of sandbox key is still on the host: its processes, cgroups and
    mounts (not the freezer cgroup the test made itself: a build given up
    before it ran never saw it; a process in it would show)."""
    procs = sandbox_procs(key)
    cgroups = [d for d in subprocess.run(["find", "/sys/fs/cgroup", "-maxdepth", "6", "-name", key],
                                         capture_output=True, text=True).stdout.split()
               if not d.startswith("/sys/fs/cgroup/freezer/")]
    with open("/proc/self/mountinfo") as f:
        mounted = key in f.read()
    return procs, cgroups, mounted


def held_builds(stack, pool, prefix):
    """Start N creates whose builds are held (frozen): the PUT futures,
    once the agent lists every one of them as not yet running."""
    sids = ["%s-%s" % (prefix, uuid.uuid4().hex[:8]) for _ in range(N)]
    for sid in sids:
        record(stack, sid)
        hold(stack, sid)
    puts = {sid: pool.submit(put, stack, sid) for sid in sids}
    for sid in sids:
        e = until("the agent lists " + sid, lambda: entry(stack, sid))
        assert e["state"] == "stopped", e
    return puts


def cleanup(stack, sids):
    for sid in sids:
        release(stack, sid)
        call(stack, "DELETE", sid)
        record(stack, sid, present=False)
        try:
            os.rmdir(freezer_dir(stack, sid))
        except OSError:
            pass


def test_loop_serves_while_builds_are_held(stack):
    other = "bo-" + uuid.uuid4().hex[:8]
    record(stack, other)
    with concurrent.futures.ThreadPoolExecutor(max_workers=N + 2) as pool:
        puts = {}
        try:
            assert put(stack, other)[0] == 201
            puts = held_builds(stack, pool, "bl")
            r = requests.post(agent(stack) + "/v1/sandboxes/%s/exec" % other,
                              json={"command": "echo served"}, headers=headers(stack),
                              timeout=60)
            assert r.status_code == 200 and r.json()["stdout"] == "served\n", r.text
            # still held: the exec did not wait for them
            assert all(entry(stack, sid)["state"] == "stopped" for sid in puts)
            for sid in puts:
                release(stack, sid)
            for sid, f in puts.items():
                code, body = f.result()
                assert code == 201 and body["state"] == "running", (sid, code, body)
        finally:
            cleanup(stack, list(puts) + [other])


def test_delete_during_build_leaves_nothing(stack):
    with concurrent.futures.ThreadPoolExecutor(max_workers=2 * N) as pool:
        puts = {}
        try:
            puts = held_builds(stack, pool, "bd")

            def delete(sid):
                r = call(stack, "DELETE", sid)
                # checked as soon as the DELETE is answered: nothing may be left
                return r.status_code, leftovers("dev." + sid)

            deletes = {sid: pool.submit(delete, sid) for sid in puts}
            # each DELETE takes the entry out at once, and is answered once
            # nothing of its build is left (a queued one: at once)
            for sid in puts:
                until("the DELETE of %s reached the agent" % sid, lambda: not entry(stack, sid))
            for sid in puts:
                release(stack, sid)
            for sid in puts:
                dcode, left = deletes[sid].result()
                assert dcode == 204, (sid, dcode)
                assert left == ([], [], False), "%s left behind after its DELETE: %r" % (sid, left)
                pcode, pbody = puts[sid].result()
                assert pcode == 503 and pbody["error"]["code"] == "NODE_UNAVAILABLE", \
                    (sid, pcode, pbody)
            # the reservations of the cancelled builds were given back
            again = list(puts)[0]
            code, body = put(stack, again)
            assert code == 201, body
        finally:
            cleanup(stack, list(puts))


def test_stop_during_build_keeps_a_stopped_entry(stack):
    with concurrent.futures.ThreadPoolExecutor(max_workers=N) as pool:
        puts = {}
        try:
            puts = held_builds(stack, pool, "bs")
            for sid in puts:
                r = call(stack, "POST", sid, "/stop")
                assert r.status_code == 200 and r.json()["state"] == "stopped", r.text
            for sid in puts:
                release(stack, sid)
            for sid, f in puts.items():
                pcode, pbody = f.result()
                assert pcode == 503 and pbody["error"]["code"] == "NODE_UNAVAILABLE", \
                    (sid, pcode, pbody)
                until("the held build of %s is gone" % sid,
                      lambda: leftovers("dev." + sid) == ([], [], False))
                assert entry(stack, sid)["state"] == "stopped", sid
        finally:
            cleanup(stack, list(puts))


def test_start_during_teardown_is_a_retry(stack):
    sid = "bt-" + uuid.uuid4().hex[:8]
    record(stack, sid)
    hold(stack, sid)
    procs = os.path.join(freezer_dir(stack, sid), "cgroup.procs")
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            first = pool.submit(put, stack, sid)
            # the build's child is in the frozen cgroup: the build runs, held
            until("the build of %s is held" % sid, lambda: open(procs).read().strip())
            r = call(stack, "POST", sid, "/stop")
            assert r.status_code == 200 and r.json()["state"] == "stopped", r.text
            # the start given up still holds the key until its build is torn down
            r = requests.put(agent(stack) + "/agent/v1/sandboxes/dev/" + sid,
                             json={"generation": 1, "epoch": 1}, headers=headers(stack),
                             timeout=60)
            assert r.status_code == 503, (r.status_code, r.text)
            assert r.json()["error"]["code"] == "NODE_UNAVAILABLE", r.text
            assert r.headers.get("Retry-After") == "1", dict(r.headers)
            release(stack, sid)
            pcode, pbody = first.result()
            assert pcode == 503 and pbody["error"]["code"] == "NODE_UNAVAILABLE", (pcode, pbody)
        until("the given-up build of %s is gone" % sid,
              lambda: leftovers("dev." + sid) == ([], [], False))
        code, body = put(stack, sid)
        assert code == 201 and body["state"] == "running", (code, body)
    finally:
        cleanup(stack, [sid])


def test_duplicate_puts_during_build_share_one_container(stack):
    sid = "bp-" + uuid.uuid4().hex[:8]
    record(stack, sid)
    hold(stack, sid)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(put, stack, sid) for _ in range(8)]
            until("the agent lists " + sid, lambda: entry(stack, sid))
            release(stack, sid)
            results = [f.result() for f in futures]
        codes = sorted(c for c, _ in results)
        assert codes.count(201) == 1 and codes.count(200) == 7, codes
        assert len({b["startedAt"] for _, b in results}) == 1, results
        assert all(b["state"] == "running" for _, b in results), results
    finally:
        cleanup(stack, [sid])


def test_concurrent_builds_all_finish(stack):
    """Builds on several threads at once, each with its own user namespace
    helper: none waits for another's (a helper that inherited a concurrent
    build's socket once kept both waiting for ever)."""
    sids = ["bc-%s" % uuid.uuid4().hex[:8] for _ in range(24)]
    try:
        for sid in sids:
            record(stack, sid)
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(sids)) as pool:
            results = list(pool.map(lambda sid: put(stack, sid), sids))
        assert [c for c, _ in results] == [201] * len(sids), results
    finally:
        cleanup(stack, sids)


def test_loop_lag_is_exported(stack):
    url = stack.env["SBX_METRICS"].strip('"').split()[1]
    text = requests.get(url, timeout=10).text
    counts = [line for line in text.splitlines()
              if line.startswith("sbx_agent_loop_lag_seconds_count")]
    assert counts and float(counts[0].split()[-1]) > 0, counts
