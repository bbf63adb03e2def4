"""Per-sandbox host uid ranges (sandbox/runtime/idrange.c, spawn_userns,
the idmapped image in mounts.c), black box on the session stack
(agent.userns=auto).

Each sandbox runs as the first id of a 65536-id range of its own, and its
user namespace is owned by that id, so per-user kernel counts are per
sandbox: one sandbox holding every inotify instance the host allows a user
(fs.inotify.max_user_instances) leaves another sandbox's inotify_init
working. Observed from the host: /proc/<pid>/status of the sandboxes'
processes (conftest.sandbox_procs).
"""

import uuid

import pytest

from conftest import sandbox_procs

UID_BASE = 100000
RANGE = 65536

# Take inotify instances until the kernel refuses one; print how many and
# the errno, then hold them while the probe's process lives.
HOLD = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 100000:
    if libc.inotify_init1(0o2000000) < 0:
        break
    n += 1
print(n, os.strerror(ctypes.get_errno()), flush=True)
time.sleep(120)
"""

# One inotify_init: "ok", or the errno's text.
ONE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("ok" if libc.inotify_init1(0o2000000) >= 0 else os.strerror(ctypes.get_errno()))
"""


def sh_quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


class Tenant:
    def __init__(self, stack):
        self.stack = stack
        self.name = "uidr-" + uuid.uuid4().hex[:8]
        self.key = stack.new_key(self.name)
        self.boxes = []

    def api(self, method, path, **kw):
        return self.stack.api(method, path, key=self.key, timeout=60, **kw)

    def box(self):
        sid = "uid-" + uuid.uuid4().hex[:10]
        r = self.api("PUT", "/v1/sandboxes/" + sid, json={})
        assert r.status_code == 201, "create %s: %d %s" % (sid, r.status_code, r.text[:300])
        self.boxes.append(sid)
        return sid

    def run(self, sid, command):
        r = self.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command})
        assert r.status_code == 200, "exec %r: %d %s" % (command, r.status_code, r.text[:300])
        return r.json()

    def close(self):
        for sid in self.boxes:
            self.api("DELETE", "/v1/sandboxes/" + sid)


@pytest.fixture
def tenants(stack):
    made = [Tenant(stack), Tenant(stack)]
    yield made
    for t in made:
        t.close()


def host_uids(tenant, sid):
    """{pid: (real, effective, saved, fs uid)} of the sandbox's live processes."""
    out = {}
    for pid, _, _ in sandbox_procs("%s.%s" % (tenant.name, sid)):
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("Uid:"):
                        out[pid] = tuple(int(x) for x in line.split()[1:])
        except OSError:
            continue
    return out


def test_two_sandboxes_run_as_different_host_uids(tenants):
    a, b = tenants
    sa, sb = a.box(), b.box()
    a2 = a.box()   # the same tenant's second sandbox has a range of its own too
    for t, sid in ((a, sa), (b, sb), (a, a2)):
        inside = t.run(sid, "id -u; id -g")
        assert inside["exitCode"] == 0 and inside["stdout"].split() == ["0", "0"], inside
    ranges = []
    for t, sid in ((a, sa), (b, sb), (a, a2)):
        uids = host_uids(t, sid)
        assert uids, "no host process of %s found" % sid
        seen = {u for ids in uids.values() for u in ids}
        assert len(seen) == 1, "%s runs as several host uids: %r" % (sid, uids)
        uid = seen.pop()
        assert uid >= UID_BASE and (uid - UID_BASE) % RANGE == 0, \
            "%s runs as host uid %d, not the first id of a range" % (sid, uid)
        ranges.append(uid)
    assert len(set(ranges)) == 3, "sandboxes share host uids: %r" % ranges


def test_one_sandbox_exhausting_inotify_leaves_another_working(tenants):
    a, b = tenants
    sa, sb = a.box(), b.box()
    r = a.api("POST", "/v1/sandboxes/%s/processes" % sa,
              json={"command": "python3 -c %s" % sh_quote(HOLD), "id": "hold"})
    assert r.status_code == 201, r.text
    r = a.api("GET", "/v1/sandboxes/%s/processes/hold/wait" % sa,
              params={"log": " ", "timeoutMs": 30000})
    assert r.status_code == 200, r.text
    held, why = r.json()["line"].strip().split(" ", 1)
    assert int(held) > 0 and "Too many open files" in why, r.json()
    # the holder's own sandbox is out of instances ...
    assert a.run(sa, "python3 -c %s" % sh_quote(ONE))["stdout"].strip() == "Too many open files"
    # ... the other sandbox is not
    out = b.run(sb, "python3 -c %s" % sh_quote(ONE))
    assert out["stdout"].strip() == "ok", "inotify_init in the other sandbox: %r" % out
