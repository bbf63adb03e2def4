"""A cleanly stopped node (issue 23 item 6): it shows `down` in /v1/nodes
at once (it does not vanish), and the records of its sandboxes are set to
sleeping as it stops (deploy/systemd/sbx-agent.service says so), so the
next call wakes them on a live node. And control calls carry the client's
request id to the agent's log, as data calls do.
"""

import uuid


def nodes_by_name(stack):
    r = stack.api("GET", "/v1/nodes", key=stack.admin_key)
    assert r.status_code == 200, r.text
    return {n["name"]: n for n in r.json()["nodes"]}


def test_clean_stop_shows_down_and_puts_its_sandboxes_to_sleep(stack, api, redis_cli):
    sid = "stop-" + uuid.uuid4().hex[:8]
    r = api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    node = r.json()["node"]
    n = int(node.rsplit("-", 1)[1])
    try:
        stack.run("stop", node)
        # At once, not after cluster.node_ttl: the stop deleted the alive key.
        assert redis_cli("EXISTS", "sbx:node:{%s}:alive" % node) == "0"
        assert redis_cli("SISMEMBER", "sbx:nodes", node) == "1", "the node must stay listed"
        got = nodes_by_name(stack).get(node)
        assert got is not None, "a cleanly stopped node must not vanish from /v1/nodes"
        assert got["state"] == "down" and got["sandboxes"] == 0 and got["load"] == 0, got
        r = api("GET", "/v1/sandboxes/" + sid)
        assert r.status_code == 200 and r.json()["state"] == "sleeping", r.text
        events = redis_cli("XREVRANGE", "sbx:events", "+", "-", "COUNT", "50")
        assert "slept" in events and sid in events, events
        # The next call wakes it on the node that is left.
        r = api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo woke"}, timeout=30)
        assert r.status_code == 200 and r.json()["stdout"] == "woke\n", r.text
        rec = api("GET", "/v1/sandboxes/" + sid).json()
        assert rec["state"] == "running" and rec["node"] != node, rec
    finally:
        stack.run("restart-agent", str(n))
        stack.wait_healthy()
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
    assert nodes_by_name(stack)[node]["state"] == "up"


def test_control_calls_carry_the_request_id_to_the_agent(stack, api):
    sid = "rid-" + uuid.uuid4().hex[:8]
    rid = "ctl-" + uuid.uuid4().hex
    r = api("PUT", "/v1/sandboxes/" + sid, json={}, headers={"X-Request-Id": rid}, timeout=30)
    assert r.status_code == 201, r.text
    assert r.headers.get("X-Request-Id") == rid
    n = int(r.json()["node"].rsplit("-", 1)[1])
    try:
        line = "PUT /agent/v1/sandboxes/dev/%s " % sid

        def logged():
            with open("%s/logs/agent-%d.log" % (stack.dir, n), errors="replace") as f:
                return [x for x in f if line in x]
        lines = stack.wait("the agent to log the create", logged, timeout=5)
        assert lines[-1].rstrip().endswith("[%s]" % rid), lines
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
