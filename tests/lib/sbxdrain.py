"""Helpers of the drain/migrate tests (test_drain.py, test_dashboard.py)."""

from conftest import routed


def sh(api, sid, command):
    """stdout of `command` run in sid (exit 0 required; routed(): once more
    after a "retry" 503 of a route nginx cached before a change)."""
    r = routed(api, "POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["exitCode"] == 0, r.json()
    return r.json()["stdout"]


def two_on_agent1(api, admin, keep, plain):
    """Creates keep (persist /workspace, holding /workspace/m = "moved") and
    plain (no persist) on agent-1: agent-2 is drained meanwhile, then open
    again."""
    assert api("POST", "/v1/nodes/agent-2/drain", key=admin, json={}).status_code == 200
    try:
        r = api("PUT", "/v1/sandboxes/" + keep, json={"persist": {"paths": ["/workspace"]}},
                timeout=30)
        assert r.status_code == 201 and r.json()["node"] == "agent-1", r.text
        r = api("PUT", "/v1/sandboxes/" + plain, json={}, timeout=30)
        assert r.status_code == 201 and r.json()["node"] == "agent-1", r.text
        sh(api, keep, "echo moved > /workspace/m")
    finally:
        assert api("POST", "/v1/nodes/agent-2/drain", key=admin,
                   json={"drain": False}).status_code == 200
