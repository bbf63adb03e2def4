"""Operator ceilings (docs/SECURITY.md "Operator ceilings"), on a stack of
their own with small numbers:

- one sandbox: sandbox.max_* → 400 LIMIT_EXCEEDED naming the field and the
  ceiling, on PUT and on PATCH, nothing created or changed;
- one tenant: the sandbox count and the sums of memory and cpus, config
  defaults or admin overrides (GET/PUT /v1/tenants/{t}/limits), checked
  atomically with the create → 429 QUOTA_EXCEEDED;
- one node: agent.memory_mib / agent.cpus_milli; a node whose running
  sandboxes' limits plus the new one's would exceed them is not chosen, and
  when none fits → 503 NO_CAPACITY.
"""

import concurrent.futures
import uuid

import pytest

from conftest import api_run, assert_error, own_stack

MAX = {"memoryMiB": 1024, "cpus": 1.5, "pids": 300, "diskMiB": 512}
NODE_MEMORY, NODE_CPUS_MILLI = 2048, 4000
OVERRIDES = [
    "sandbox.max_memory_mib=1024", "sandbox.max_cpus_milli=1500", "sandbox.max_pids=300",
    "sandbox.max_disk_mib=512",
    "agent.memory_mib=%d" % NODE_MEMORY, "agent.cpus_milli=%d" % NODE_CPUS_MILLI,
]


@pytest.fixture(scope="module")
def st():
    yield from own_stack(agents=2, overrides=OVERRIDES)


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def tenant_key(st, prefix):
    t = uid(prefix)
    return t, st.new_key(t)


def create(st, key, sid, expect=201, **resources):
    body = {"resources": resources} if resources else {}
    r = st.api("PUT", "/v1/sandboxes/" + sid, key=key, json=body, timeout=30)
    if expect is not None:
        assert r.status_code == expect, "create %s %r: %d %s" % (sid, resources, r.status_code,
                                                                 r.text[:300])
    return r


def destroy(st, key, *ids):
    for sid in ids:
        assert st.api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=60).status_code == 204


def limits(st, tenant, body=None, key=None):
    key = st.admin_key if key is None else key
    if body is None:
        return st.api("GET", "/v1/tenants/%s/limits" % tenant, key=key)
    return st.api("PUT", "/v1/tenants/%s/limits" % tenant, key=key, json=body)


# ---- one sandbox ---------------------------------------------------------------------

@pytest.mark.parametrize("field,value,shown", [
    ("memoryMiB", 1025, "1024"), ("cpus", 1.6, "1.5"), ("pids", 301, "300"),
    ("diskMiB", 513, "512"),
])
def test_sandbox_ceiling_refused_on_create(st, field, value, shown):
    """A value inside the config bounds but above the ceiling: 400
    LIMIT_EXCEEDED naming the field and the ceiling, and nothing exists."""
    tenant, key = tenant_key(st, "cl")
    sid = uid("over")
    err = assert_error(create(st, key, sid, expect=None, **{field: value}), 400, "LIMIT_EXCEEDED")
    assert field in err["message"] and "ceiling of " + shown in err["message"], err
    assert st.redis_cli("EXISTS", "sbx:sb:{%s/%s}" % (tenant, sid)) == "0"
    assert st.redis_cli("ZCARD", "sbx:tenant:{%s}:sandboxes" % tenant) == "0"


def test_sandbox_at_ceiling_and_patch_above(st):
    """Exactly the ceilings is accepted; a PATCH above one is refused and
    leaves pending as it was."""
    tenant, key = tenant_key(st, "cp")
    sid = uid("at")
    rec = create(st, key, sid, **MAX).json()
    try:
        assert rec["resources"] == MAX, rec
        for field, value in (("memoryMiB", 2048), ("cpus", 2), ("pids", 1000), ("diskMiB", 1024)):
            r = st.api("PATCH", "/v1/sandboxes/" + sid, key=key,
                       json={"resources": {field: value}})
            err = assert_error(r, 400, "LIMIT_EXCEEDED")
            assert field in err["message"], err
        got = st.api("GET", "/v1/sandboxes/" + sid, key=key).json()
        assert got["pending"] == {} and got["resources"] == MAX, got
    finally:
        destroy(st, key, sid)


def test_default_above_ceiling_refused_at_start():
    """sbx-api refuses a configuration whose default exceeds its ceiling."""
    r = api_run("sandbox.max_pids=100")
    assert r.returncode != 0, r.stdout
    assert "sandbox.pids" in r.stderr and "sandbox.max_pids" in r.stderr, r.stderr


# ---- the admin API --------------------------------------------------------------------

def test_tenant_limits_admin_only_and_defaults(st):
    tenant, key = tenant_key(st, "ad")
    assert_error(st.api("GET", "/v1/tenants/%s/limits" % tenant, key=None), 401, "UNAUTHORIZED")
    assert_error(limits(st, tenant, key=key), 403, "FORBIDDEN")
    assert_error(limits(st, tenant, {"sandboxes": 1000}, key=key), 403, "FORBIDDEN")
    r = limits(st, tenant)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == {"tenant": tenant, "overrides": {},
                    "limits": {"sandboxes": 100, "memoryMiB": 51200, "cpus": 100,
                               "requestsPerSecond": 0, "requestsBurst": 0,
                               "createsPerMinute": 0},
                    "usage": {"sandboxes": 0, "memoryMiB": 0, "cpus": 0}}, body
    assert_error(st.api("DELETE", "/v1/tenants/%s/limits" % tenant, key=st.admin_key), 405,
                 "METHOD_NOT_ALLOWED")


BAD_LIMITS = [
    [], "x", {"gpus": 1}, {"sandboxes": 0}, {"sandboxes": -1}, {"sandboxes": 1.5},
    {"sandboxes": "2"}, {"sandboxes": 1000001}, {"memoryMiB": 15}, {"memoryMiB": 2 ** 31},
    {"memoryMiB": True}, {"cpus": 0}, {"cpus": -1}, {"cpus": 0.001}, {"cpus": "1"},
    {"cpus": 1e300}, {"memoryMiB": 1024, "extra": None},
]


def test_tenant_limits_validation(st):
    """Every field is validated; a refused PUT changes nothing."""
    tenant = uid("va")
    assert limits(st, tenant, {"sandboxes": 7}).status_code == 200
    for body in BAD_LIMITS:
        assert_error(limits(st, tenant, body), 400, "VALIDATION_FAILED")
    for raw in (b"{", b'{"sandboxes":1,"sandboxes":2}', b'{"memoryMiB":18446744073709551616}',
                b'{"cpus":1e400}', b'{"sandboxes":"\xff"}', b'{} {}'):
        r = st.api("PUT", "/v1/tenants/%s/limits" % tenant, key=st.admin_key, data=raw,
                   headers={"Content-Type": "application/json"})
        assert_error(r, 400, "VALIDATION_FAILED")
    for bad in ("Upper", "-dash", "a_b", "x" * 64):
        assert_error(limits(st, bad), 400, "VALIDATION_FAILED")
    got = limits(st, tenant).json()
    assert got["overrides"] == {"sandboxes": 7} and got["limits"]["sandboxes"] == 7, got
    # PUT replaces the overrides: what is left out (or null) is the default again.
    got = limits(st, tenant, {"memoryMiB": 4096, "cpus": 2.5, "sandboxes": None}).json()
    assert got["overrides"] == {"memoryMiB": 4096, "cpus": 2.5}, got
    assert got["limits"] == {"sandboxes": 100, "memoryMiB": 4096, "cpus": 2.5,
                             "requestsPerSecond": 0, "requestsBurst": 0,
                             "createsPerMinute": 0}, got
    assert st.redis_cli("HGET", "sbx:tenant:{%s}:limits" % tenant, "cpusMilli") == "2500"
    assert limits(st, tenant, {}).json()["overrides"] == {}
    assert st.redis_cli("EXISTS", "sbx:tenant:{%s}:limits" % tenant) == "0"


# ---- one tenant -----------------------------------------------------------------------

def test_tenant_sandbox_count_override(st):
    tenant, key = tenant_key(st, "tc")
    assert limits(st, tenant, {"sandboxes": 1}).status_code == 200
    a, b = uid("a"), uid("b")
    create(st, key, a)
    try:
        err = assert_error(create(st, key, b, expect=None), 429, "QUOTA_EXCEEDED")
        assert "1 sandboxes" in err["message"], err
        create(st, key, a, expect=200)            # an existing sandbox is never refused
        assert limits(st, tenant, {}).status_code == 200
        create(st, key, b)
    finally:
        destroy(st, key, a, b)


def test_tenant_memory_total(st):
    """The sum of memoryMiB over the tenant's sandboxes (sleeping ones too)
    stays within its total, on create and on a PATCH that grows; shrinking
    is always allowed; a destroy gives the room back."""
    tenant, key = tenant_key(st, "tm")
    assert limits(st, tenant, {"memoryMiB": 1024}).status_code == 200
    a, b, c = uid("a"), uid("b"), uid("c")
    create(st, key, a, memoryMiB=512)
    try:
        create(st, key, b, memoryMiB=512)
        assert st.api("POST", "/v1/sandboxes/%s/sleep" % b, key=key).status_code == 200
        err = assert_error(create(st, key, c, expect=None, memoryMiB=16), 429, "QUOTA_EXCEEDED")
        assert "1024 MiB" in err["message"], err
        assert st.redis_cli("EXISTS", "sbx:sb:{%s/%s}" % (tenant, c)) == "0"
        assert st.redis_cli("ZSCORE", "sbx:tenant:{%s}:sandboxes" % tenant, c) == ""
        r = st.api("PATCH", "/v1/sandboxes/" + a, key=key, json={"resources": {"memoryMiB": 600}})
        assert_error(r, 429, "QUOTA_EXCEEDED")
        r = st.api("PATCH", "/v1/sandboxes/" + a, key=key, json={"resources": {"memoryMiB": 256}})
        assert r.status_code == 200, r.text
        usage = limits(st, tenant).json()["usage"]
        assert usage == {"sandboxes": 2, "memoryMiB": 1024, "cpus": 2}, usage
        destroy(st, key, b)
        create(st, key, c, memoryMiB=512)
        assert limits(st, tenant).json()["usage"]["memoryMiB"] == 1024
    finally:
        destroy(st, key, a, b, c)
    assert limits(st, tenant).json()["usage"] == {"sandboxes": 0, "memoryMiB": 0, "cpus": 0}


def test_stale_usage_entry_gives_no_credit(st):
    """A usage entry left by a create that failed (its id no longer in the
    tenant's set) is no credit when that id is created again: the create is
    checked in full; entries of ids not in the set are dropped."""
    tenant, key = tenant_key(st, "ts")
    assert limits(st, tenant, {"memoryMiB": 1024}).status_code == 200
    a, b, x = uid("a"), uid("b"), uid("x")
    ukey = "sbx:tenant:{%s}:usage" % tenant
    create(st, key, a, memoryMiB=512)
    try:
        st.redis_cli("HSET", ukey, x, "512 1000")
        create(st, key, b, memoryMiB=512)        # x's entry is not counted
        assert st.redis_cli("HEXISTS", ukey, x) == "0"
        st.redis_cli("HSET", ukey, x, "512 1000")
        assert_error(create(st, key, x, expect=None, memoryMiB=16), 429, "QUOTA_EXCEEDED")
        assert st.redis_cli("ZSCORE", "sbx:tenant:{%s}:sandboxes" % tenant, x) == ""
    finally:
        destroy(st, key, a, b, x)


def test_tenant_cpus_total(st):
    tenant, key = tenant_key(st, "tu")
    assert limits(st, tenant, {"cpus": 2}).status_code == 200
    a, b = uid("a"), uid("b")
    create(st, key, a, cpus=1.5, memoryMiB=64)
    try:
        err = assert_error(create(st, key, b, expect=None, cpus=0.6, memoryMiB=64), 429,
                           "QUOTA_EXCEEDED")
        assert "2 cpus" in err["message"], err
        create(st, key, b, cpus=0.5, memoryMiB=64)
    finally:
        destroy(st, key, a, b)


def test_tenant_total_is_atomic(st):
    """Concurrent creates never overshoot the total: with room for two, of
    eight at once exactly two are created."""
    tenant, key = tenant_key(st, "ta")
    assert limits(st, tenant, {"memoryMiB": 256}).status_code == 200
    ids = [uid("p") for _ in range(8)]
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            rs = list(pool.map(lambda sid: create(st, key, sid, expect=None, memoryMiB=128), ids))
        codes = sorted(r.status_code for r in rs)
        assert codes == [201, 201] + [429] * 6, [(r.status_code, r.text[:120]) for r in rs]
        for r in rs:
            if r.status_code == 429:
                assert_error(r, 429, "QUOTA_EXCEEDED")
        assert limits(st, tenant).json()["usage"] == {"sandboxes": 2, "memoryMiB": 256, "cpus": 2}
    finally:
        destroy(st, key, *ids)


# ---- one node -------------------------------------------------------------------------

def test_nodes_report_their_size(st):
    nodes = st.api("GET", "/v1/nodes", key=st.admin_key).json()["nodes"]
    assert len(nodes) == 2
    for n in nodes:
        assert n["memoryMiB"] == NODE_MEMORY and n["cpusMilli"] == NODE_CPUS_MILLI, n


def fill(st, key, n, **resources):
    """Create n sandboxes of resources; their ids and nodes."""
    ids, nodes = [], []
    for _ in range(n):
        sid = uid("f")
        ids.append(sid)
        nodes.append(create(st, key, sid, **resources).json()["node"])
    return ids, nodes


def test_placement_counts_memory(st):
    """Two nodes of 2048 MiB take four sandboxes of 1024 MiB (two each, as a
    node that would exceed its memory is not chosen); the fifth, of any
    size, finds no room: 503 NO_CAPACITY. A sleeping sandbox commits
    nothing, so putting one to sleep makes room again."""
    tenant, key = tenant_key(st, "pm")
    ids, nodes = fill(st, key, 4, memoryMiB=1024, cpus=0.1)
    extra = uid("x")
    try:
        assert sorted(nodes.count(n) for n in set(nodes)) == [2, 2], nodes
        err = assert_error(create(st, key, extra, expect=None, memoryMiB=16, cpus=0.1), 503,
                           "NO_CAPACITY")
        assert "16 MiB" in err["message"], err
        assert st.redis_cli("EXISTS", "sbx:sb:{%s/%s}" % (tenant, extra)) == "0"
        assert st.api("POST", "/v1/sandboxes/%s/sleep" % ids[0], key=key).status_code == 200
        got = create(st, key, extra, memoryMiB=1024, cpus=0.1).json()
        assert got["node"] == nodes[0], (got["node"], nodes)
        # The sleeper cannot wake now: its node and the other are full.
        r = st.api("POST", "/v1/sandboxes/%s/restart" % ids[0], key=key, timeout=30)
        assert_error(r, 503, "NO_CAPACITY")
    finally:
        destroy(st, key, extra, *ids)


def test_placement_counts_cpus(st):
    """Two nodes of 4 cpus take two sandboxes of 1.5 cpus each (a third
    would make 4.5); the fifth is refused with 503 NO_CAPACITY."""
    tenant, key = tenant_key(st, "pc")
    ids, nodes = fill(st, key, 4, memoryMiB=16, cpus=1.5)
    extra = uid("x")
    try:
        assert sorted(nodes.count(n) for n in set(nodes)) == [2, 2], nodes
        assert_error(create(st, key, extra, expect=None, memoryMiB=16, cpus=1.5), 503,
                     "NO_CAPACITY")
        create(st, key, extra, memoryMiB=16, cpus=1)    # 3 + 1 fits exactly
    finally:
        destroy(st, key, extra, *ids)
