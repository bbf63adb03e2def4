"""The warm pool (agent.warm_pool, sandbox/runtime/pool.c), black box: a stack of
its own with one agent keeping 4 pre-built sandboxes of the default spec.

Observed from outside: the agent's own record of a sandbox says
`fromPool`; the pool's members are the cgroups named `_pool-<n>` under the
agent's cgroup parent; hostname, /etc/hosts and limits are read from inside
and from the host's cgroup files.
"""

import os
import shutil
import signal
import uuid

import pytest
import requests

from conftest import (first_command_under_keeper_ahead, processes_mentioning, sanitizer_findings,
                      stack_down, stack_down_cleanup, stack_up)
from sbxproc import alive

POOL = 4


@pytest.fixture(scope="module")
def st():
    s = stack_up(agents=1, overrides=["agent.warm_pool=%d" % POOL])
    try:
        yield s
    finally:
        stack_down(s, keep=True)
    left = processes_mentioning(s.dir)
    errors, _ = sanitizer_findings(s.dir)
    stack_down_cleanup(s)
    assert not left, "processes left behind: %r" % left
    assert not errors, "sanitizer reports: %r" % errors[:20]


# ---- helpers ---------------------------------------------------------------------------

def cg_node_dir(st, controller):
    with open(os.path.join(st.dir, "cgroup_parent")) as f:
        parent = f.read().strip()
    return "/sys/fs/cgroup/%s/%s/agent-1" % (controller, parent)


def pool_members(st):
    """Names of the pool's cgroups (memory hierarchy)."""
    d = cg_node_dir(st, "memory")
    try:
        return sorted(n for n in os.listdir(d) if n.startswith("_pool-"))
    except FileNotFoundError:
        return []


def wait_pool_full(st, timeout=20):
    st.wait("the warm pool to hold %d sandboxes" % POOL,
            lambda: len(pool_members(st)) == POOL, timeout)


def agent_record(st, tenant, sid):
    r = requests.get("http://%s/agent/v1/sandboxes/%s/%s" % (st.env["SBX_AGENT_1"], tenant, sid),
                     headers={"X-Sbx-Node-Secret": st.secret}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def create(st, key=None, **body):
    sid = "wp-" + uuid.uuid4().hex[:10]
    kw = {} if key is None else {"key": key}
    r = st.api("PUT", "/v1/sandboxes/" + sid, json=body, timeout=30, **kw)
    assert r.status_code == 201, "create %s: %d %s" % (sid, r.status_code, r.text[:300])
    return sid


def destroy(st, sid, key=None):
    kw = {} if key is None else {"key": key}
    r = st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30, **kw)
    assert r.status_code == 204, r.text


def run(st, sid, command, key=None):
    kw = {} if key is None else {"key": key}
    r = st.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command}, timeout=60, **kw)
    assert r.status_code == 200, "exec %r: %d %s" % (command, r.status_code, r.text[:300])
    return r.json()


def read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


def cgroup_pids(dirpath):
    try:
        with open(os.path.join(dirpath, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


# ---- tests -------------------------------------------------------------------------------

def test_pool_fills_at_start_and_is_not_counted(st):
    wait_pool_full(st)
    assert "warm pool" in st.log("agent-1", 200)
    # Members are not the node's sandboxes: not listed, not in the registry's count.
    r = requests.get("http://%s/agent/v1/sandboxes" % st.env["SBX_AGENT_1"],
                     headers={"X-Sbx-Node-Secret": st.secret}, timeout=10)
    assert r.json()["sandboxes"] == [], r.text
    st.wait("the heartbeat to report 0 sandboxes",
            lambda: st.redis_cli("HGET", "sbx:node:{agent-1}", "sandboxes") == "0", 5)
    assert st.api("GET", "/v1/sandboxes").json().get("sandboxes", []) == []


def test_create_is_served_from_pool_with_its_own_name_and_limits(st):
    wait_pool_full(st)
    before = set(pool_members(st))
    sid = create(st, resources={"memoryMiB": 1024, "pids": 100, "cpus": 0.5})
    try:
        rec = agent_record(st, "dev", sid)
        assert rec["fromPool"] is True, rec
        # the member's cgroups now carry the sandbox's key, in every hierarchy
        assert len(before - set(pool_members(st))) == 1
        key = "dev." + sid
        mem = cg_node_dir(st, "memory") + "/" + key
        assert read_int(mem + "/memory.limit_in_bytes") == 1024 << 20
        assert read_int(cg_node_dir(st, "pids") + "/" + key + "/pids.max") == 100
        assert read_int(cg_node_dir(st, "cpu") + "/" + key + "/cpu.cfs_quota_us") * 2 == \
            read_int(cg_node_dir(st, "cpu") + "/" + key + "/cpu.cfs_period_us")
        out = run(st, sid, "hostname; cat /etc/hosts; echo $HOSTNAME; cat /proc/1/cgroup")["stdout"]
        lines = out.splitlines()
        assert lines[0] == sid, out
        assert "127.0.1.1\t%s" % sid in out and "pool" not in out.replace(sid, ""), out
        assert lines[4] == sid, out
        # the cgroup namespace root moved with the rename: still "/"
        assert all(l.endswith(":/") for l in lines[5:] if l), out
    finally:
        destroy(st, sid)


def test_a_claimed_sandbox_has_a_keeper_forked_ahead_of_its_first_command(st):
    """A claimed member's init forks a keeper once the answer to the claim
    is out (a member long idle would otherwise slow that answer down), and
    the first command runs under it."""
    def claimed():
        wait_pool_full(st)
        sid = create(st)
        assert agent_record(st, "dev", sid)["fromPool"] is True
        return sid
    seen = first_command_under_keeper_ahead(
        claimed, lambda sid, cmd: run(st, sid, cmd)["stdout"], lambda sid: destroy(st, sid),
        lambda sid: "dev." + sid)
    assert seen is None, "the first command never ran under a keeper forked ahead: %r" % seen


def test_lower_memory_limit_is_enforced(st):
    wait_pool_full(st)
    sid = create(st, resources={"memoryMiB": 64})
    try:
        assert agent_record(st, "dev", sid)["fromPool"] is True
        res = run(st, sid, "python3 -c 'b=[]\nwhile True: b.append(bytearray(1<<20))'")
        assert res["exitCode"] == 137, res
        assert run(st, sid, "echo alive")["stdout"] == "alive\n"
    finally:
        destroy(st, sid)


def test_pool_refills_after_claims(st):
    wait_pool_full(st)
    sids = [create(st) for _ in range(3)]
    try:
        assert all(agent_record(st, "dev", s)["fromPool"] for s in sids)
        wait_pool_full(st, timeout=10)
    finally:
        for s in sids:
            destroy(st, s)


def test_empty_pool_builds_fresh(st):
    wait_pool_full(st)
    sids = [create(st) for _ in range(POOL + 2)]
    try:
        flags = [agent_record(st, "dev", s)["fromPool"] for s in sids]
        # the refill runs between creates, so at least POOL come from the pool
        assert sum(flags) >= POOL, flags
        for s in sids:
            assert run(st, s, "hostname")["stdout"].strip() == s
    finally:
        for s in sids:
            destroy(st, s)
    wait_pool_full(st)


def test_non_matching_spec_builds_fresh(st):
    wait_pool_full(st)
    sid = create(st, resources={"diskMiB": 64})
    try:
        assert agent_record(st, "dev", sid)["fromPool"] is False
        out = run(st, sid, "df -m /workspace | tail -1")["stdout"].split()
        assert out[1] == "64", out
    finally:
        destroy(st, sid)
    assert len(pool_members(st)) == POOL
    # network egress: only where this host offers it
    sid = "wp-" + uuid.uuid4().hex[:10]
    r = st.api("PUT", "/v1/sandboxes/" + sid, json={"network": "egress"}, timeout=30)
    if r.status_code == 201:
        try:
            assert agent_record(st, "dev", sid)["fromPool"] is False
        finally:
            destroy(st, sid)
    # another image: a copy of the default image directory (its /usr stays
    # empty: only image "default" binds the host's /usr)
    alt = os.path.join(st.dir, "images", "wp-alt")
    if not os.path.isdir(alt):
        dflt = os.path.join(st.dir, "images", "default")
        src = dflt if os.path.isdir(os.path.join(dflt, "usr")) else next(
            os.path.join(dflt, d) for d in os.listdir(dflt)
            if os.path.isdir(os.path.join(dflt, d, "usr")))
        shutil.copytree(src, alt, symlinks=True)
    sid = create(st, image="wp-alt")
    try:
        assert agent_record(st, "dev", sid)["fromPool"] is False
    finally:
        destroy(st, sid)
    assert len(pool_members(st)) == POOL


def test_pooled_sandbox_is_isolated_like_a_fresh_one(st):
    wait_pool_full(st)
    sid = create(st)
    try:
        assert agent_record(st, "dev", sid)["fromPool"] is True
        status = run(st, sid, "cat /proc/self/status")["stdout"]
        fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
        assert fields["NoNewPrivs"].strip() == "1"
        assert fields["Seccomp"].strip() == "2"
        cap_eff = int(fields["CapEff"].strip(), 16)
        for bit in (21, 12, 13, 19, 16, 17, 25, 27):
            assert not cap_eff & (1 << bit), "capability %d effective (%x)" % (bit, cap_eff)
        res = run(st, sid, "touch /usr/x 2>&1; echo usr=$?; ls /sys/class/net; "
                           "cat /proc/1/cmdline | tr '\\0' ' '; echo; "
                           "ls /proc | grep -cE '^[0-9]+$'; unshare -U true 2>&1; echo userns=$?")
        out = res["stdout"]
        assert "Read-only file system" in out and "usr=1" in out, out
        lines = out.splitlines()
        assert lines[2] == "lo" and lines[3].split()[0].endswith("sbx-init"), out
        assert int(lines[4]) <= 8, out
        assert "userns=0" not in out, out
        env = run(st, sid, "env")["stdout"]
        for name in ("NODE_EXTRA_CA_CERTS", "SBX_", "REDIS", "PYENV"):
            assert name not in env, env
        assert st.secret not in env
    finally:
        destroy(st, sid)


def test_two_tenants_from_the_pool_see_nothing_of_each_other(st):
    wait_pool_full(st)
    other = st.new_key("wp-other")
    a = create(st)
    b = create(st, key=other)
    try:
        assert agent_record(st, "dev", a)["fromPool"] is True
        assert agent_record(st, "wp-other", b)["fromPool"] is True
        run(st, a, "echo secret-of-a > /workspace/mine; echo a > /tmp/t; echo a > /dev/shm/s; "
                   "sleep 60 >/dev/null 2>&1 &")
        out = run(st, b, "cat /workspace/mine /tmp/t /dev/shm/s 2>&1; ls -A /workspace /tmp; "
                         "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; hostname", key=other)["stdout"]
        assert "secret-of-a" not in out and "sleep 60" not in out, out
        assert out.splitlines()[-1].strip().endswith(b), out
        # neither tenant can reach the other's sandbox through the API
        r = st.api("POST", "/v1/sandboxes/%s/exec" % a, json={"command": "true"}, key=other)
        assert r.status_code == 404, r.text
    finally:
        destroy(st, a)
        destroy(st, b, key=other)


def test_dead_member_is_dropped_and_rebuilt(st):
    wait_pool_full(st)
    victim = pool_members(st)[0]
    pids = cgroup_pids(cg_node_dir(st, "pids") + "/" + victim)
    assert pids, "no init in pool member %s" % victim
    os.kill(pids[0], signal.SIGKILL)
    st.wait("the dead member to be dropped", lambda: victim not in pool_members(st), 10)
    wait_pool_full(st, timeout=10)
    # the pool still serves working sandboxes
    sid = create(st)
    try:
        assert agent_record(st, "dev", sid)["fromPool"] is True
        assert run(st, sid, "echo ok")["stdout"] == "ok\n"
    finally:
        destroy(st, sid)


def test_agent_stop_destroys_the_pool(st):
    wait_pool_full(st)
    members = pool_members(st)
    pids = [p for m in members for p in cgroup_pids(cg_node_dir(st, "pids") + "/" + m)]
    assert len(pids) == POOL
    st.run("stop", "agent-1")
    try:
        st.wait("the pool's inits to be gone", lambda: not any(alive(p) for p in pids), 10)
        for c in ("memory", "pids", "cpu"):
            left = [n for n in os.listdir(cg_node_dir(st, c)) if n.startswith("_pool-")] \
                if os.path.isdir(cg_node_dir(st, c)) else []
            assert not left, "%s cgroups left: %r" % (c, left)
        with open("/proc/self/mountinfo") as f:
            assert os.path.join(st.dir, "agent-1", "rt") not in f.read()
    finally:
        st.run("start", "agent-1")
        st.wait_healthy()
    wait_pool_full(st)
