"""POST /v1/nodes/{node}/drain, GET /v1/nodes/{node}/sandboxes and the
admin's Sbx-Tenant header (docs/API.md "Nodes")."""

import uuid

from conftest import assert_error
from sbxdrain import sh, two_on_agent1


def node_of(api, stack, name):
    nodes = api("GET", "/v1/nodes", key=stack.admin_key).json()["nodes"]
    return next(n for n in nodes if n["name"] == name)


def test_a_drained_node_gets_no_new_placements(stack, api):
    admin = stack.admin_key
    ids = ["dr-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(4)]
    r = api("POST", "/v1/nodes/agent-1/drain", key=admin, json={})
    assert r.status_code == 200, r.text
    assert r.json()["drained"] is True and r.json()["name"] == "agent-1"
    try:
        assert node_of(api, stack, "agent-1")["drained"] is True
        for i in ids:
            r = api("PUT", "/v1/sandboxes/" + i, json={})
            assert r.status_code == 201, r.text
            assert r.json()["node"] == "agent-2"
        listed = api("GET", "/v1/nodes/agent-2/sandboxes?limit=500", key=admin).json()
        mine = {s["id"]: s for s in listed["sandboxes"] if s["id"] in ids}
        assert set(mine) == set(ids) and all(s["tenant"] == "dev" for s in mine.values())
    finally:
        r = api("POST", "/v1/nodes/agent-1/drain", key=admin, json={"drain": False})
        for i in ids:
            api("DELETE", "/v1/sandboxes/" + i)
    assert r.status_code == 200 and r.json()["drained"] is False
    assert node_of(api, stack, "agent-1")["drained"] is False


def test_drain_refusals(stack, api):
    admin = stack.admin_key
    for bad in ({"migrate": "yes"}, {"migrate": True, "drain": False}, {"force": True},
                {"migrate": True, "limit": 0}, {"migrate": True, "limit": 101},
                {"migrate": True, "limit": "5"}, {"migrate": True, "cursor": ""},
                {"migrate": True, "cursor": 3}, {"cursor": "a/b"}):
        assert_error(api("POST", "/v1/nodes/agent-1/drain", key=admin, json=bad),
                     400, "VALIDATION_FAILED")
    assert node_of(api, stack, "agent-1")["drained"] is False
    assert_error(api("POST", "/v1/nodes/agent-1/drain", key=admin, json={"drain": "yes"}),
                 400, "VALIDATION_FAILED")
    assert_error(api("POST", "/v1/nodes/agent-1/drain", key=admin, json={"bogus": 1}),
                 400, "VALIDATION_FAILED")
    assert_error(api("POST", "/v1/nodes/no-such-node/drain", key=admin, json={}), 404, "NOT_FOUND")
    assert_error(api("POST", "/v1/nodes/Bad_Name/drain", key=admin, json={}),
                 400, "VALIDATION_FAILED")
    assert_error(api("POST", "/v1/nodes/agent-1/drain", json={}), 403, "FORBIDDEN")
    assert_error(api("GET", "/v1/nodes/agent-1/sandboxes"), 403, "FORBIDDEN")
    assert_error(api("GET", "/v1/nodes/agent-1/sandboxes?cursor=x", key=admin),
                 400, "VALIDATION_FAILED")


def test_admin_acts_on_another_tenant(stack, api, new_key):
    other = new_key("dr-other")       # the stack's admin key is of tenant dev
    box = "dr-as-" + uuid.uuid4().hex[:6]
    assert api("PUT", "/v1/sandboxes/" + box, key=other, json={}).status_code == 201
    as_other = {"Sbx-Tenant": "dr-other"}
    try:
        assert_error(api("GET", "/v1/sandboxes/" + box, key=stack.admin_key), 404,
                     "SANDBOX_NOT_FOUND")
        r = api("GET", "/v1/sandboxes/" + box, key=stack.admin_key, headers=as_other)
        assert r.status_code == 200 and r.json()["id"] == box
        r = api("GET", "/v1/sandboxes/%s/processes" % box, key=stack.admin_key, headers=as_other)
        assert r.status_code == 200, r.text
        # A tenant key names only its own tenant.
        assert_error(api("GET", "/v1/sandboxes/" + box, headers=as_other), 403, "FORBIDDEN")
        assert_error(api("GET", "/v1/sandboxes/%s/processes" % box, headers=as_other),
                     403, "FORBIDDEN")
        assert api("GET", "/v1/sandboxes/" + box, key=other, headers=as_other).status_code == 200
        assert_error(api("GET", "/v1/sandboxes/" + box, key=stack.admin_key,
                         headers={"Sbx-Tenant": "No"}), 400, "VALIDATION_FAILED")
        r = api("POST", "/v1/sandboxes/%s/sleep" % box, key=stack.admin_key, headers=as_other)
        assert r.status_code == 200 and r.json()["state"] in ("stopping", "sleeping")
    finally:
        assert api("DELETE", "/v1/sandboxes/" + box, key=stack.admin_key,
                   headers=as_other).status_code == 204
    assert_error(api("GET", "/v1/sandboxes/" + box, key=other), 404, "SANDBOX_NOT_FOUND")


def test_drain_with_migrate_moves_persisting_sandboxes(stack, api):
    """A persisting sandbox of the drained node sleeps (its save goes with
    the stop) and its next call wakes it on the other node with its files;
    one without persist stays, reported, unless force."""
    import pytest
    if stack.agents < 2:
        pytest.skip("needs two agents")
    admin = stack.admin_key
    tag = uuid.uuid4().hex[:6]
    keep, plain = "dr-mig-%s" % tag, "dr-plain-%s" % tag
    drain = "/v1/nodes/agent-1/drain"
    try:
        two_on_agent1(api, admin, keep, plain)
        sh(api, plain, "echo here > /tmp/p")
        r = api("POST", drain, key=admin, json={"migrate": True}, timeout=120)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["node"] == "agent-1" and "cursor" not in body
        assert keep in body["migrated"] and plain not in body["migrated"]
        assert [s["id"] for s in body["skipped"] if s["id"] == plain] == [plain]
        assert "persist" in next(s for s in body["skipped"] if s["id"] == plain)["reason"]
        assert node_of(api, stack, "agent-1")["drained"] is True
        assert api("GET", "/v1/sandboxes/" + keep).json()["state"] == "sleeping"
        # the skipped one still runs where it was, its files intact
        assert sh(api, plain, "cat /tmp/p") == "here\n"
        assert api("GET", "/v1/sandboxes/" + plain).json()["node"] == "agent-1"
        # the next call wakes the moved one on agent-2, with its file
        assert sh(api, keep, "cat /workspace/m") == "moved\n"
        assert api("GET", "/v1/sandboxes/" + keep).json()["node"] == "agent-2"
        # a page of one: the cursor walks the node's set
        pages, cursor = [], None
        while True:
            page = {"migrate": True, "limit": 1}
            if cursor:
                page["cursor"] = cursor
            r = api("POST", drain, key=admin, json=page, timeout=60)
            assert r.status_code == 200, r.text
            pages.append(r.json())
            assert len(pages[-1]["migrated"]) + len(pages[-1]["skipped"]) <= 1
            cursor = r.json().get("cursor")
            if not cursor:
                break
            assert len(pages) < 10
        assert [s["id"] for p in pages for s in p["skipped"]] == [plain]
        # force puts the plain one to sleep too
        r = api("POST", drain, key=admin, json={"migrate": True, "force": True}, timeout=120)
        assert r.status_code == 200 and plain in r.json()["migrated"], r.text
        assert api("GET", "/v1/sandboxes/" + plain).json()["state"] == "sleeping"
        assert sh(api, plain, "echo woke") == "woke\n"
        assert api("GET", "/v1/sandboxes/" + plain).json()["node"] == "agent-2"
    finally:
        for n in ("agent-1", "agent-2"):
            api("POST", "/v1/nodes/%s/drain" % n, key=admin, json={"drain": False})
        for i in (keep, plain):
            api("DELETE", "/v1/sandboxes/" + i, timeout=30)
