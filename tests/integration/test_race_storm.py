"""The tenant indexes of Redis on a stack of its own (docs/REDIS.md "The
reconciler"): `api.quota_sandboxes = 3` and a reconciler every second.
"""

import uuid

import pytest

from conftest import stack_down, stack_up

QUOTA = 3


@pytest.fixture(scope="module")
def st():
    s = stack_up(agents=2, overrides=["api.quota_sandboxes=%d" % QUOTA,
                                      "api.reconcile_interval=1s"])
    try:
        yield s
    finally:
        stack_down(s)


def test_reconciler_repairs_index_entries_and_records(st):
    """What the scripts never leave behind, made by hand: the reconciler
    (every second here) gives a record the index entries it lost and removes
    entries without their record, or naming a label or node the record does
    not hold; the sandbox is counted and listed again."""
    tenant = "rr-" + uuid.uuid4().hex[:8]
    key = st.new_key(tenant)
    sid = "rr-box"
    r = st.api("PUT", "/v1/sandboxes/" + sid, key=key, json={"labels": {"team": "ml"}}, timeout=60)
    assert r.status_code == 201, r.text
    node = r.json()["node"]
    other = "agent-2" if node == "agent-1" else "agent-1"
    zset = "sbx:tenant:{%s}:sandboxes" % tenant
    label = "sbx:tenant:{%s}:label:team=ml" % tenant
    nodeset = "sbx:node:{%s}:sandboxes" % node
    member = "%s/%s" % (tenant, sid)
    try:
        # A record without its entries: not counted, not listed ...
        st.redis_cli("ZREM", zset, sid)
        st.redis_cli("ZREM", label, sid)
        st.redis_cli("SREM", nodeset, member)
        # ... and entries without a record, or that the record does not hold.
        st.redis_cli("ZADD", zset, "0", "rr-ghost")
        st.redis_cli("ZADD", label, "0", "rr-ghost")
        st.redis_cli("ZADD", "sbx:tenant:{%s}:label:team=cv" % tenant, "0", sid)
        st.redis_cli("SADD", "sbx:node:{%s}:sandboxes" % node, "%s/rr-ghost" % tenant)
        st.redis_cli("SADD", "sbx:node:{%s}:sandboxes" % other, member)

        def repaired():
            return (st.redis_cli("ZRANGE", zset, "0", "-1").split() == [sid] and
                    st.redis_cli("ZRANGE", label, "0", "-1").split() == [sid] and
                    st.redis_cli("EXISTS", "sbx:tenant:{%s}:label:team=cv" % tenant) == "0" and
                    st.redis_cli("SISMEMBER", nodeset, member) == "1" and
                    st.redis_cli("SISMEMBER", nodeset, "%s/rr-ghost" % tenant) == "0" and
                    st.redis_cli("SISMEMBER", "sbx:node:{%s}:sandboxes" % other, member) == "0")
        st.wait("the reconciler to repair the indexes", repaired, timeout=15, interval=0.3)
        listed = st.api("GET", "/v1/sandboxes", key=key).json()["sandboxes"]
        assert [s["id"] for s in listed] == [sid]
        listed = st.api("GET", "/v1/sandboxes?label=team:ml", key=key).json()["sandboxes"]
        assert [s["id"] for s in listed] == [sid]
        assert "reconcile:" in open(st.dir + "/logs/api.log", errors="replace").read()
    finally:
        st.api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=60)
    assert st.redis_cli("--scan", "--pattern", "sbx:tenant:{%s}:*" % tenant) == ""
