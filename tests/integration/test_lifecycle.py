"""The sandbox lifecycle API: PUT/GET/PATCH/DELETE, listing, restart, sleep,
placement over two agents, fencing epochs and generations, quota, tenant
isolation, and what operators see in Redis.

Every test makes its own sandboxes (ids unique per test) and removes them,
and leaves the stack healthy with all agents up.
"""

import concurrent.futures
import os
import re
import signal
import time
import uuid

import pytest
import requests

from conftest import assert_error

RECORD_FIELDS = {"id", "state", "node", "generation", "epoch", "labels", "pending",
                 "sleepAfter", "keepAlive", "resources", "network", "image", "createdAt",
                 "startedAt", "lastActiveAt"}
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def uid(prefix="lc"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


@pytest.fixture
def sandboxes(api):
    """Ids to DELETE at the end of the test (with the dev key)."""
    made = []
    yield made
    for sid in made:
        api("DELETE", "/v1/sandboxes/" + sid)


def put(api, sid, body=None, key=None, expect=(200, 201)):
    kw = {} if key is None else {"key": key}
    r = api("PUT", "/v1/sandboxes/" + sid, json=body if body is not None else {}, timeout=30, **kw)
    assert r.status_code in expect, "PUT %s: %d %r" % (sid, r.status_code, r.text[:400])
    return r


def agent_list(stack, n):
    addr = stack.env["SBX_AGENT_%d" % n]
    r = requests.get("http://%s/agent/v1/sandboxes" % addr,
                     headers={"X-Sbx-Node-Secret": stack.secret}, timeout=5)
    assert r.status_code == 200, "agent-%d list: %d %r" % (n, r.status_code, r.text[:300])
    return r.json()["sandboxes"]


def node_members(redis_cli, node):
    out = redis_cli("SMEMBERS", "sbx:node:{%s}:sandboxes" % node)
    return set(out.split()) if out else set()


def exec_ok(api, sid):
    r = api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo alive"}, timeout=30)
    assert r.status_code == 200, "exec in %s: %d %r" % (sid, r.status_code, r.text[:300])
    assert r.json()["stdout"] == "alive\n"


# ---- create, get, records ----------------------------------------------------

def test_put_creates_201_then_200_with_the_record(api, redis_cli, sandboxes):
    sid = uid()
    sandboxes.append(sid)
    r = put(api, sid, {"labels": {"team": "ml"}, "env": {"SECRET": "s3cr3t"},
                       "sleepAfter": "30s", "keepAlive": True,
                       "resources": {"memoryMiB": 256, "cpus": 0.5}}, expect=(201,))
    rec = r.json()
    assert set(rec) == RECORD_FIELDS, "record fields: %r" % sorted(rec)
    assert rec["id"] == sid and rec["state"] == "running"
    assert rec["generation"] == 1 and isinstance(rec["epoch"], int) and rec["epoch"] > 0
    assert rec["labels"] == {"team": "ml"} and rec["pending"] == {}
    assert rec["sleepAfter"] == 30000 and rec["keepAlive"] is True
    assert rec["resources"]["memoryMiB"] == 256 and rec["resources"]["cpus"] == 0.5
    assert set(rec["resources"]) == {"memoryMiB", "cpus", "pids", "diskMiB"}
    assert rec["network"] == "none" and rec["image"] == "default"
    assert rec["node"] in ("agent-1", "agent-2")
    for f in ("createdAt", "startedAt", "lastActiveAt"):
        assert ISO.match(rec[f]), "%s = %r" % (f, rec[f])
    assert "env" not in rec and "s3cr3t" not in r.text, "env must never be returned"

    r2 = put(api, sid, expect=(200,))
    assert r2.json()["generation"] == 1 and r2.json()["epoch"] == rec["epoch"]
    g = api("GET", "/v1/sandboxes/" + sid)
    assert g.status_code == 200 and g.json()["id"] == sid

    # What operators see.
    key = "sbx:sb:{dev/%s}" % sid
    assert redis_cli("HGET", key, "state") == "running"
    assert redis_cli("HGET", key, "node") == rec["node"]
    assert redis_cli("ZSCORE", "sbx:tenant:{dev}:sandboxes", sid) == "0"
    assert redis_cli("ZSCORE", "sbx:tenant:{dev}:label:team=ml", sid) == "0"
    assert "dev/" + sid in node_members(redis_cli, rec["node"])
    events = redis_cli("XREVRANGE", "sbx:events", "+", "-", "COUNT", "200")
    assert re.search(r"created\s+tenant\s+dev\s+id\s+%s" % sid, events), "no created event"
    exec_ok(api, sid)


def test_get_unknown_is_404_and_never_creates(api, redis_cli):
    sid = uid()
    assert_error(api("GET", "/v1/sandboxes/" + sid), 404, "SANDBOX_NOT_FOUND")
    assert_error(api("PATCH", "/v1/sandboxes/" + sid, json={}), 404, "SANDBOX_NOT_FOUND")
    assert_error(api("POST", "/v1/sandboxes/%s/restart" % sid), 404, "SANDBOX_NOT_FOUND")
    assert_error(api("POST", "/v1/sandboxes/%s/sleep" % sid), 404, "SANDBOX_NOT_FOUND")
    assert_error(api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "true"}), 404,
                 "SANDBOX_NOT_FOUND")
    assert redis_cli("EXISTS", "sbx:sb:{dev/%s}" % sid) == "0"


def test_delete_is_idempotent_and_cleans_up(stack, api, redis_cli):
    sid = uid()
    rec = put(api, sid, {"labels": {"gone": "soon"}}, expect=(201,)).json()
    r = api("DELETE", "/v1/sandboxes/" + sid)
    assert r.status_code == 204 and r.content == b""
    assert api("DELETE", "/v1/sandboxes/" + sid).status_code == 204
    assert api("DELETE", "/v1/sandboxes/" + uid("never")).status_code == 204
    assert_error(api("GET", "/v1/sandboxes/" + sid), 404, "SANDBOX_NOT_FOUND")
    assert redis_cli("EXISTS", "sbx:sb:{dev/%s}" % sid) == "0"
    assert redis_cli("ZSCORE", "sbx:tenant:{dev}:sandboxes", sid) == ""
    assert redis_cli("ZSCORE", "sbx:tenant:{dev}:label:gone=soon", sid) == ""
    assert "dev/" + sid not in node_members(redis_cli, rec["node"])
    n = int(rec["node"].split("-")[1])
    assert not [s for s in agent_list(stack, n) if s.get("id") == sid and
                s.get("tenant", "dev") == "dev"], "the agent still has the sandbox"
    # Re-creating the same id is a new sandbox with a higher epoch.
    rec2 = put(api, sid, expect=(201,)).json()
    assert rec2["epoch"] > rec["epoch"]
    api("DELETE", "/v1/sandboxes/" + sid)


# ---- pending, restart, sleep, wake ---------------------------------------------

def test_labels_pending_until_restart(api, redis_cli, sandboxes):
    sid = uid()
    sandboxes.append(sid)
    rec = put(api, sid, {"labels": {"v": "1"}}, expect=(201,)).json()
    r = put(api, sid, {"labels": {"v": "2"}, "resources": {"memoryMiB": 300},
                       "image": "default", "network": "none"}, expect=(200,)).json()
    assert r["labels"] == {"v": "1"}
    assert r["pending"] == {"labels": {"v": "2"}, "resources": {**rec["resources"],
                                                                   "memoryMiB": 300}}, r["pending"]
    assert r["generation"] == rec["generation"]
    # PATCH: same rule; env pending shows names only.
    p = api("PATCH", "/v1/sandboxes/" + sid, json={"env": {"TOKEN": "hidden-value"}})
    assert p.status_code == 200, p.text
    assert p.json()["pending"]["env"] == ["TOKEN"] and "hidden-value" not in p.text
    # Setting a label back to the applied value drops it from pending.
    p = api("PATCH", "/v1/sandboxes/" + sid, json={"labels": {"v": "1"}})
    assert "labels" not in p.json()["pending"]
    p = api("PATCH", "/v1/sandboxes/" + sid, json={"labels": {"v": "3"}})
    assert p.json()["pending"]["labels"] == {"v": "3"}

    r = api("POST", "/v1/sandboxes/%s/restart" % sid, timeout=30)
    assert r.status_code == 200, r.text
    after = r.json()
    assert after["state"] == "running"
    assert after["labels"] == {"v": "3"} and after["pending"] == {}
    assert after["resources"]["memoryMiB"] == 300
    assert after["generation"] == rec["generation"] + 1
    assert after["epoch"] > rec["epoch"]
    assert redis_cli("ZSCORE", "sbx:tenant:{dev}:label:v=3", sid) == "0"
    assert redis_cli("ZSCORE", "sbx:tenant:{dev}:label:v=1", sid) == ""
    env = api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo $TOKEN"}, timeout=30)
    assert env.json()["stdout"] == "hidden-value\n"


def test_label_index_covers_all_64_labels_and_leaves_no_key(api, redis_cli, new_key):
    """A sandbox may carry 64 labels (LC_LABELS_MAX): all 64 are indexed at
    create and when a restart applies 64 new ones (the old keys go), and a
    DELETE leaves no key of the tenant behind."""
    tenant = "lc-lab-" + uuid.uuid4().hex[:6]
    key = new_key(tenant)
    sid = uid("lab")
    prefix = "sbx:tenant:{%s}:label:" % tenant

    def label_keys():
        return set(redis_cli("--scan", "--pattern", prefix + "*").split())

    first = {"k%02d" % i: "v%d" % i for i in range(64)}
    second = {"n%02d" % i: "w%d" % i for i in range(64)}
    try:
        put(api, sid, {"labels": first}, key=key, expect=(201,))
        assert label_keys() == {prefix + "%s=%s" % kv for kv in first.items()}
        for k in ("k00", "k59", "k60", "k63"):
            r = api("GET", "/v1/sandboxes?label=%s:%s" % (k, first[k]), key=key)
            assert [x["id"] for x in r.json()["sandboxes"]] == [sid], (k, r.text)
        r = api("PATCH", "/v1/sandboxes/" + sid, key=key, json={"labels": second})
        assert r.status_code == 200 and r.json()["pending"]["labels"] == second, r.text
        r = api("POST", "/v1/sandboxes/%s/restart" % sid, key=key, timeout=30)
        assert r.status_code == 200 and r.json()["labels"] == second, r.text
        assert label_keys() == {prefix + "%s=%s" % kv for kv in second.items()}
    finally:
        assert api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=30).status_code == 204
    assert label_keys() == set()
    # Nothing of the tenant is left: no set, no usage entry, no label key.
    assert redis_cli("--scan", "--pattern", "sbx:tenant:{%s}:*" % tenant) == ""


def test_settings_apply_at_once(api, stack, sandboxes):
    sid = uid()
    sandboxes.append(sid)
    rec = put(api, sid, {"sleepAfter": 60000}, expect=(201,)).json()
    r = put(api, sid, {"sleepAfter": "2h", "keepAlive": True}, expect=(200,)).json()
    assert r["sleepAfter"] == 7200000 and r["keepAlive"] is True and r["pending"] == {}
    assert r["generation"] == rec["generation"]
    n = int(rec["node"].split("-")[1])
    mine = [s for s in agent_list(stack, n) if s.get("id") == sid]
    assert mine and mine[0].get("sleepAfter") == 7200000 and mine[0].get("keepAlive") in (True, 1)


def test_sleep_then_wake_by_put_and_by_data_call(api, redis_cli, sandboxes):
    sid = uid()
    sandboxes.append(sid)
    rec = put(api, sid, expect=(201,)).json()
    s = api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=30)
    assert s.status_code == 200 and s.json()["state"] == "sleeping", s.text
    assert api("POST", "/v1/sandboxes/%s/sleep" % sid).json()["state"] == "sleeping"
    # GET never wakes.
    g = api("GET", "/v1/sandboxes/" + sid).json()
    assert g["state"] == "sleeping" and g["generation"] == rec["generation"]
    events = redis_cli("XREVRANGE", "sbx:events", "+", "-", "COUNT", "200")
    assert re.search(r"slept\s+tenant\s+dev\s+id\s+%s" % sid, events)
    # Wake by PUT: a new generation.
    w = put(api, sid, expect=(200,)).json()
    assert w["state"] == "running" and w["generation"] == rec["generation"] + 1
    assert w["epoch"] > rec["epoch"]
    # Wake by a data call.
    api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=30)
    exec_ok(api, sid)
    g = api("GET", "/v1/sandboxes/" + sid).json()
    assert g["state"] == "running" and g["generation"] == rec["generation"] + 2


# ---- listing -----------------------------------------------------------------------

def test_list_filters_and_paging(api, sandboxes):
    tag = uuid.uuid4().hex[:8]
    ids = sorted(uid("ls") for _ in range(5))
    for i, sid in enumerate(ids):
        sandboxes.append(sid)
        put(api, sid, {"labels": {"batch": tag, "parity": "even" if i % 2 == 0 else "odd"}},
            expect=(201,))
    api("POST", "/v1/sandboxes/%s/sleep" % ids[0], timeout=30)

    r = api("GET", "/v1/sandboxes?label=batch:%s" % tag)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [s["id"] for s in body["sandboxes"]] == ids and "cursor" not in body
    assert set(body["sandboxes"][0]) == RECORD_FIELDS

    r = api("GET", "/v1/sandboxes?label=batch:%s&label=parity:even" % tag).json()
    assert [s["id"] for s in r["sandboxes"]] == [ids[0], ids[2], ids[4]]
    r = api("GET", "/v1/sandboxes?label=batch:%s&state=sleeping" % tag).json()
    assert [s["id"] for s in r["sandboxes"]] == [ids[0]]
    r = api("GET", "/v1/sandboxes?label=batch:%s&state=running" % tag).json()
    assert [s["id"] for s in r["sandboxes"]] == ids[1:]

    seen, cursor, pages = [], None, 0
    while True:
        q = "/v1/sandboxes?label=batch:%s&limit=2" % tag + ("&cursor=" + cursor if cursor else "")
        page = api("GET", q).json()
        pages += 1
        assert len(page["sandboxes"]) <= 2
        seen += [s["id"] for s in page["sandboxes"]]
        cursor = page.get("cursor")
        if not cursor:
            break
        assert pages < 10
    assert seen == ids and pages == 3

    # The unfiltered listing holds them too (paged through the tenant set).
    seen, cursor = set(), None
    for _ in range(200):
        page = api("GET", "/v1/sandboxes?limit=100" + ("&cursor=" + cursor if cursor else "")).json()
        seen |= {s["id"] for s in page["sandboxes"]}
        cursor = page.get("cursor")
        if not cursor:
            break
    assert set(ids) <= seen


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=x", "state=bogus",
                                   "label=nocolon", "label=:v", "cursor=BAD", "foo=1",
                                   "label=a%7Bb:c"])
def test_list_bad_query_is_400(api, query):
    assert_error(api("GET", "/v1/sandboxes?" + query), 400, "VALIDATION_FAILED")


def test_list_other_tenant_needs_admin(api, stack, new_key, sandboxes):
    other = new_key("lc-other-list")
    sid = uid()
    put(api, sid, key=other, expect=(201,))
    try:
        assert_error(api("GET", "/v1/sandboxes?tenant=lc-other-list"), 403, "FORBIDDEN")
        r = api("GET", "/v1/sandboxes?tenant=lc-other-list", key=stack.admin_key)
        assert r.status_code == 200 and [s["id"] for s in r.json()["sandboxes"]] == [sid]
        mine = api("GET", "/v1/sandboxes?limit=100").json()["sandboxes"]
        assert sid not in [s["id"] for s in mine]
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, key=other)


# ---- tenants, quota --------------------------------------------------------------

def test_tenant_isolation(api, new_key, sandboxes):
    sid = uid()
    sandboxes.append(sid)
    rec = put(api, sid, expect=(201,)).json()
    other = new_key("lc-other")
    assert_error(api("GET", "/v1/sandboxes/" + sid, key=other), 404, "SANDBOX_NOT_FOUND")
    assert_error(api("PATCH", "/v1/sandboxes/" + sid, key=other, json={"keepAlive": True}), 404,
                 "SANDBOX_NOT_FOUND")
    assert_error(api("POST", "/v1/sandboxes/%s/restart" % sid, key=other), 404,
                 "SANDBOX_NOT_FOUND")
    assert_error(api("POST", "/v1/sandboxes/%s/sleep" % sid, key=other), 404, "SANDBOX_NOT_FOUND")
    assert_error(api("POST", "/v1/sandboxes/%s/exec" % sid, key=other, json={"command": "true"}),
                 404, "SANDBOX_NOT_FOUND")
    assert api("DELETE", "/v1/sandboxes/" + sid, key=other).status_code == 204
    g = api("GET", "/v1/sandboxes/" + sid).json()
    assert g["state"] == "running" and g["generation"] == rec["generation"] \
        and g["epoch"] == rec["epoch"] and g["keepAlive"] is False
    exec_ok(api, sid)


# Sleeping records (no node, no container) with their quota members, made in
# one script: KEYS[1] the tenant's set; ARGV tenant count.
FILLERS = """
for i = 0, tonumber(ARGV[2]) - 1 do
  local id = string.format('filler-%05d', i)
  redis.call('HSET', 'sbx:sb:{' .. ARGV[1] .. '/' .. id .. '}', 'id', id, 'tenant', ARGV[1],
    'state', 'sleeping', 'node', '', 'epoch', '1', 'generation', '1', 'labels', '{}')
  redis.call('ZADD', KEYS[1], 0, id)
end
return 1
"""


def test_quota(api, stack, redis_cli, new_key):
    """api.quota_sandboxes of the stack (100 in conf/sbx.conf): the tenant's set
    is filled up to one below it with sleeping sandboxes (records with their
    members, as the create script writes them), then the last slot is taken
    by a real create and the next create is refused."""
    quota = stack.conf_value("api", "quota_sandboxes")
    assert quota, "no api.quota_sandboxes in the stack config"
    quota = int(quota)
    tenant = "lc-quota-" + uuid.uuid4().hex[:6]
    key = new_key(tenant)
    zkey = "sbx:tenant:{%s}:sandboxes" % tenant
    redis_cli("EVAL", FILLERS, "1", zkey, tenant, str(quota - 1))
    try:
        a, b = uid("qa"), uid("qb")
        put(api, a, key=key, expect=(201,))
        r = api("PUT", "/v1/sandboxes/" + b, key=key, json={})
        assert_error(r, 429, "QUOTA_EXCEEDED")
        assert redis_cli("EXISTS", "sbx:sb:{%s/%s}" % (tenant, b)) == "0"
        assert redis_cli("ZSCORE", zkey, b) == ""
        put(api, a, key=key, expect=(200,))   # an existing sandbox is never refused
        assert api("DELETE", "/v1/sandboxes/" + a, key=key).status_code == 204
        put(api, b, key=key, expect=(201,))   # the slot is free again
        assert api("DELETE", "/v1/sandboxes/" + b, key=key).status_code == 204
    finally:
        for i in range(quota - 1):
            api("DELETE", "/v1/sandboxes/filler-%05d" % i, key=key)
    assert redis_cli("EXISTS", zkey) == "0"


# ---- validation ----------------------------------------------------------------------

BAD_BODIES = [
    {"unknown": 1},
    {"labels": "x"}, {"labels": {"a:b": "c"}}, {"labels": {"k": 1}}, {"labels": {"k": "a,b"}},
    {"labels": {"": "v"}}, {"labels": {"k%d" % i: "v" for i in range(65)}},
    {"labels": {"k" * 64: "v"}}, {"labels": {"k": "v" * 256}},
    {"sleepAfter": 999}, {"sleepAfter": "2x"}, {"sleepAfter": 2592000001}, {"sleepAfter": 1.5},
    {"sleepAfter": "721h"}, {"sleepAfter": -5}, {"sleepAfter": None}, {"sleepAfter": ""},
    {"keepAlive": "yes"}, {"keepAlive": 1},
    {"env": []}, {"env": {"1A": "x"}}, {"env": {"A-B": "x"}}, {"env": {"A": 1}},
    {"env": {"A": None}}, {"env": {"A": "x" * 32769}}, {"env": {"V%d" % i: "" for i in range(257)}},
    {"env": {"A" * 129: "x"}},
    {"image": "Bad"}, {"image": ""}, {"image": "-x"}, {"image": "a" * 64}, {"image": "a//b"},
    {"image": 5},
    {"resources": {"memoryMiB": 1}}, {"resources": {"memoryMiB": 2000000}},
    {"resources": {"cpus": 0}}, {"resources": {"cpus": -1}}, {"resources": {"cpus": 100000}},
    {"resources": {"cpus": "1"}}, {"resources": {"pids": 1.5}}, {"resources": {"pids": 1}},
    {"resources": {"diskMiB": 0}}, {"resources": {"gpu": 1}}, {"resources": []},
    {"network": "host"}, {"network": None},
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=lambda b: repr(b)[:40])
def test_put_validation(api, redis_cli, body):
    sid = uid("val")
    r = api("PUT", "/v1/sandboxes/" + sid, json=body)
    assert_error(r, 400, "VALIDATION_FAILED")
    assert redis_cli("EXISTS", "sbx:sb:{dev/%s}" % sid) == "0", "a refused PUT created something"


def test_patch_validation_and_raw_bodies(api, sandboxes):
    sid = uid()
    sandboxes.append(sid)
    rec = put(api, sid, expect=(201,)).json()
    for body in BAD_BODIES[:12]:
        assert_error(api("PATCH", "/v1/sandboxes/" + sid, json=body), 400, "VALIDATION_FAILED")
    for raw in (b"[]", b"not json", b'{"labels":{}}x', b'{"a":1,"a":2}'):
        assert_error(api("PUT", "/v1/sandboxes/" + sid, data=raw,
                         headers={"Content-Type": "application/json"}), 400, "VALIDATION_FAILED")
    assert api("GET", "/v1/sandboxes/" + sid).json()["pending"] == rec["pending"]


def test_accepted_bounds(api, sandboxes):
    sid = uid()
    sandboxes.append(sid)
    r = put(api, sid, {"sleepAfter": "720h", "labels": {"k%d" % i: "v" for i in range(64)},
                       "resources": {"cpus": 1, "pids": 64, "memoryMiB": 128, "diskMiB": 64},
                       "env": {"A_1": "x" * 32768}, "image": "default", "network": "none"},
            expect=(201,)).json()
    assert r["sleepAfter"] == 720 * 3600 * 1000 and len(r["labels"]) == 64
    assert r["resources"] == {"memoryMiB": 128, "cpus": 1, "pids": 64, "diskMiB": 64}


# ---- concurrency, placement, faults ------------------------------------------------------

def test_concurrent_puts_create_exactly_one(stack, api, redis_cli, sandboxes):
    sid = uid("race")
    sandboxes.append(sid)

    def one(_):
        s = requests.Session()
        r = s.put(stack.url + "/v1/sandboxes/" + sid, json={"labels": {"race": "1"}},
                  headers={"Authorization": "Bearer " + stack.key}, timeout=60)
        return r.status_code, r.json()

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(one, range(100)))
    codes = sorted(c for c, _ in results)
    assert codes.count(201) == 1 and codes.count(200) == 99, "codes: %r" % codes
    gens = {b["generation"] for _, b in results}
    nodes = {b["node"] for _, b in results}
    assert gens == {1} and len(nodes) == 1, "generations %r nodes %r" % (gens, nodes)
    holders = [n for n in range(1, stack.agents + 1)
               if any(s.get("id") == sid for s in agent_list(stack, n))]
    assert len(holders) == 1, "sandbox on agents %r" % holders
    placed = [n for n in ("agent-1", "agent-2") if "dev/" + sid in node_members(redis_cli, n)]
    assert placed == list(nodes)


def test_placement_uses_both_nodes(api, stack, sandboxes):
    if stack.agents < 2:
        pytest.skip("needs two agents")
    nodes = set()
    for _ in range(12):
        sid = uid("pl")
        sandboxes.append(sid)
        nodes.add(put(api, sid, expect=(201,)).json()["node"])
    assert nodes == {"agent-1", "agent-2"}, "placement used only %r" % nodes


def test_dead_node_sandbox_is_replaced_with_higher_epoch(stack, api, redis_cli, sandboxes):
    if stack.agents < 2:
        pytest.skip("needs two agents")
    sid = uid("fo")
    sandboxes.append(sid)
    rec = put(api, sid, expect=(201,)).json()
    dead = rec["node"]
    os.kill(stack.pid(dead), signal.SIGKILL)
    try:
        stack.wait("the alive key of %s to expire" % dead,
                   lambda: redis_cli("EXISTS", "sbx:node:{%s}:alive" % dead) == "0", timeout=15)
        g = api("GET", "/v1/sandboxes/" + sid).json()
        assert g["node"] == dead, "GET must not move or wake anything"
        r = put(api, sid, expect=(200,)).json()
        assert r["node"] != dead and r["state"] == "running"
        assert r["epoch"] > rec["epoch"] and r["generation"] > rec["generation"]
        assert "dev/" + sid not in node_members(redis_cli, dead)
        assert "dev/" + sid in node_members(redis_cli, r["node"])
        events = redis_cli("XREVRANGE", "sbx:events", "+", "-", "COUNT", "200")
        assert re.search(r"replaced\s+tenant\s+dev\s+id\s+%s" % sid, events)
        exec_ok(api, sid)
    finally:
        stack.run("start", dead)
        stack.wait_healthy(timeout=20)
    # The restarted agent never serves it again; the record keeps the new owner.
    time.sleep(1)
    assert api("GET", "/v1/sandboxes/" + sid).json()["node"] == r["node"]
    exec_ok(api, sid)


def test_data_call_wakes_on_another_node_when_its_node_is_down(stack, api, redis_cli, sandboxes):
    if stack.agents < 2:
        pytest.skip("needs two agents")
    sid = uid("fd")
    sandboxes.append(sid)
    rec = put(api, sid, expect=(201,)).json()
    dead = rec["node"]
    os.kill(stack.pid(dead), signal.SIGKILL)
    try:
        stack.wait("the alive key of %s to expire" % dead,
                   lambda: redis_cli("EXISTS", "sbx:node:{%s}:alive" % dead) == "0", timeout=15)
        exec_ok(api, sid)
        g = api("GET", "/v1/sandboxes/" + sid).json()
        assert g["node"] != dead and g["epoch"] > rec["epoch"] and g["generation"] > rec["generation"]
    finally:
        stack.run("start", dead)
        stack.wait_healthy(timeout=20)


def test_epoch_grows_after_redis_lost_the_record(api, redis_cli, sandboxes):
    """The record (and its index entries) vanish as after a Redis restart
    without data; the same id created again gets a higher epoch, from
    Redis TIME, so the agents' fences still accept it."""
    sid = uid("ep")
    sandboxes.append(sid)
    rec = put(api, sid, expect=(201,)).json()
    api("POST", "/v1/sandboxes/%s/restart" % sid, timeout=30)
    before = api("GET", "/v1/sandboxes/" + sid).json()["epoch"]
    assert before > rec["epoch"]
    redis_cli("DEL", "sbx:sb:{dev/%s}" % sid)
    redis_cli("ZREM", "sbx:tenant:{dev}:sandboxes", sid)
    redis_cli("SREM", "sbx:node:{%s}:sandboxes" % rec["node"], "dev/" + sid)
    time.sleep(0.01)
    again = put(api, sid, expect=(201,)).json()
    assert again["epoch"] > before, "epoch went backwards: %d after %d" % (again["epoch"], before)
    exec_ok(api, sid)


def test_epoch_grows_after_redis_flushall_on_a_dedicated_stack():
    """A real FLUSHALL (Redis restarted without data), on a stack of its own so
    no other test loses its state: the API key is written back, the agent
    registers again by itself, and re-creating the same id gives a higher
    epoch than any the agent has seen."""
    from conftest import stack_down, stack_up

    st = stack_up(agents=1)
    try:
        sid = uid("fl")
        r = st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
        assert r.status_code == 201, r.text
        first = r.json()
        r = st.api("POST", "/v1/sandboxes/%s/restart" % sid, timeout=30)
        before = r.json()["epoch"]
        st.redis_cli("FLUSHALL")
        st.restore_key()
        st.wait("agent-1 to register again",
                lambda: st.redis_cli("EXISTS", "sbx:node:{agent-1}:alive") == "1", timeout=15)
        assert st.api("GET", "/v1/sandboxes/" + sid).status_code == 404
        r = st.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
        assert r.status_code == 201, r.text
        again = r.json()
        assert again["epoch"] > before > first["epoch"], (first["epoch"], before, again["epoch"])
        exec_ok(st.api, sid)
    finally:
        stack_down(st)
