"""A Redis that answers but refuses writes, or starts evicting, is Redis
unavailable to every tier (issue 23 items 2 and 7), on a real redis-server:

- min-replicas-to-write 1 with no replica: every write is NOREPLICAS. A
  create is 503 REDIS_UNAVAILABLE with Retry-After (not 500), /healthz is
  503, the agents log the refusal once and stop renewing their lease;
- a running pool that sees maxmemory-policy switch to an evicting one
  answers as at start-up: 503 REDIS_UNAVAILABLE naming the policy.
Both restore Redis before they end.
"""

import uuid

from conftest import assert_error


def agent_log(stack, n=1):
    with open("%s/logs/agent-%d.log" % (stack.dir, n), errors="replace") as f:
        return f.read()


def test_refused_writes_are_redis_unavailable(stack, api, redis_cli):
    sid = "norep-" + uuid.uuid4().hex[:8]
    before = agent_log(stack).count("redis refuses writes")
    try:
        assert redis_cli("CONFIG", "SET", "min-replicas-to-write", "1") == "OK"
        r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
        err = assert_error(r, 503, "REDIS_UNAVAILABLE")
        assert r.headers.get("Retry-After") == "1", dict(r.headers)
        assert "NOREPLICAS" in err["message"], err
        r = api("GET", "/healthz", key=None)
        assert_error(r, 503, "REDIS_UNAVAILABLE")
        assert r.headers.get("Retry-After") == "1", dict(r.headers)
        # Reads still work: the refusal is about writes.
        assert api("GET", "/v1/sandboxes").status_code == 200
        # The agent sees its alive SET refused: logged once, not per beat.
        stack.wait("the agent to log the refusal",
                   lambda: agent_log(stack).count("redis refuses writes") > before, timeout=10)
        # Its lease is not renewed: after node_ttl (3 s, six heartbeats
        # here) the node is down — /v1/nodes only reads, so it answers.
        def down():
            r = api("GET", "/v1/nodes", key=stack.admin_key)
            assert r.status_code == 200, r.text
            return [n for n in r.json()["nodes"]
                    if n["name"] == "agent-1" and n["state"] == "down"]
        stack.wait("agent-1 to be down while its writes are refused", down, timeout=15)
    finally:
        redis_cli("CONFIG", "SET", "min-replicas-to-write", "0")
    stack.wait_healthy()
    stack.wait("the agent to log that writes are taken again",
               lambda: "redis takes writes again" in agent_log(stack), timeout=10)
    assert agent_log(stack).count("redis refuses writes") == before + 1, \
        "the refusal must be logged once per episode"
    assert_error(api("GET", "/v1/sandboxes/" + sid), 404, "SANDBOX_NOT_FOUND")
    r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_running_pool_notices_an_evicting_policy(stack, api, redis_cli):
    sid = "evict-" + uuid.uuid4().hex[:8]
    assert api("GET", "/healthz", key=None).status_code == 200
    try:
        assert redis_cli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru") == "OK"

        def refused():
            r = api("GET", "/healthz", key=None)
            return (r,) if r.status_code == 503 else None
        r, = stack.wait("/healthz to see the evicting policy", refused, timeout=15)
        err = assert_error(r, 503, "REDIS_UNAVAILABLE")
        assert "allkeys-lru" in err["message"], err
        r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
        assert_error(r, 503, "REDIS_UNAVAILABLE")
    finally:
        redis_cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    stack.wait_healthy()
    assert_error(api("GET", "/v1/sandboxes/" + sid), 404, "SANDBOX_NOT_FOUND")
