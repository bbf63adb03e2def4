"""POST /v1/nodes/{node}/drain, GET /v1/nodes/{node}/sandboxes and the
admin's Sbx-Tenant header (docs/API.md "Nodes")."""

import uuid

from conftest import assert_error


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
    assert_error(api("POST", "/v1/nodes/agent-1/drain", key=admin, json={"migrate": True}),
                 501, "NOT_IMPLEMENTED")
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
