"""Fencing of containers whose record Redis lost: a 201 always means a fresh
container. On a stack of its own (FLUSHALL would wipe every other test's
state); the API key is written back after each wipe."""

import hashlib
import uuid

from conftest import stack_down, stack_up

TENANT = "dev"


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def test_put_after_flushall_is_a_fresh_container():
    """Create, leave a file and a process in it, FLUSHALL, PUT the same id
    again: 201, and neither the file nor the process is there. Before the
    fix the agent answered the second PUT with the old container whenever
    its fencing sweep had not run yet in between (same generation, 1)."""
    st = stack_up(agents=1)
    try:
        digest = hashlib.sha256(st.key.encode()).hexdigest()
        inherited = []
        for i in range(6):
            sid = uid("flf")
            r = st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
            assert r.status_code == 201, r.text
            r = st.api("PUT", "/v1/sandboxes/%s/files/old.txt" % sid, data=b"old container\n")
            assert r.status_code in (200, 201), r.text
            r = st.api("POST", "/v1/sandboxes/%s/processes" % sid,
                       json={"id": "old", "command": "exec sleep 1000"})
            assert r.status_code == 201, r.text
            st.redis_cli("FLUSHALL")
            st.redis_cli("HSET", "sbx:apikey:" + digest, "tenant", TENANT, "admin", "0",
                         "createdAt", "0")
            st.wait("agent-1 to register again",
                    lambda: st.redis_cli("EXISTS", "sbx:node:{agent-1}:alive") == "1",
                    timeout=15, interval=0.02)
            r = st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
            assert r.status_code == 201, r.text
            f = st.api("GET", "/v1/sandboxes/%s/files/old.txt" % sid)
            procs = st.api("GET", "/v1/sandboxes/%s/processes" % sid)
            assert procs.status_code == 200, procs.text
            names = [p.get("id") for p in procs.json()["processes"]]
            if f.status_code != 404 or "old" in names:
                inherited.append((i, f.status_code, names))
        assert not inherited, "a 201 handed over the old container: %r" % inherited
    finally:
        stack_down(st)
