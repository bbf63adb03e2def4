"""Concurrent lifecycle calls on a low-quota tenant (docs/API.md "Answers
during transitions", docs/REDIS.md "The reconciler").

A stack of its own with a reconciler every second; the tenant's quota is 3
(set by an admin, PUT /v1/tenants/{t}/limits). Threads run PUT / DELETE / exec / sleep / restart on a handful of ids of one
tenant at once; every answer must be one the API documents for that call
(PUT never 404, nothing ever 500), and when the storm is over the quota set,
the records, the listing and the sandbox containers alive on the host must
all agree — a sandbox that runs is counted and listed, and never more than
the quota exist. A second storm runs exec against one sandbox while other
clients sleep and restart it: the sandbox exists throughout, so every exec
answers 200 (or 503 with Retry-After), never 404 or 409.
"""

import collections
import socket
import threading
import time
import uuid

import pytest
import requests

from conftest import (past_route_cache, sandbox_procs, sanitizer_findings, stack_down,
                      stack_down_cleanup, stack_up)

QUOTA = 3
IDS = 5
THREADS = 6
STORM_S = 15

# What each call may answer during the storm (besides 2xx documented below).
ALLOWED = {
    "PUT": {200, 201, 409, 429, 503},
    "DELETE": {204, 409, 503},
    "EXEC": {200, 404, 503},      # 404: a DELETE of another thread won
    "SLEEP": {200, 404, 409, 503},
    "RESTART": {200, 404, 409, 503},
}


@pytest.fixture(scope="module")
def st():
    s = stack_up(agents=2, overrides=["api.reconcile_interval=1s"])
    try:
        yield s
    finally:
        stack_down(s, keep=True)
    errors, _ = sanitizer_findings(s.dir)
    stack_down_cleanup(s)
    assert not errors, "sanitizer reports: %r" % errors[:20]


SAMPLE = """
local m = redis.call('ZRANGE', KEYS[1], 0, -1)
local r = {}
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then r[#r + 1] = ARGV[i - 1] end
end
return {table.concat(m, ' '), table.concat(r, ' ')}
"""


class Resp:
    """A minimal Redis client (RESP2 over one socket): no subprocess per call,
    so a sampler can look many times a second."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.sock.makefile("rb")

    def close(self):
        self.f.close()
        self.sock.close()

    def __call__(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self.reply()

    def reply(self):
        line = self.f.readline()[:-2]
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise AssertionError("redis error: %r" % line)


def sampler(st, tenant, sids, stop, seen):
    """Until stop is set, read (quota members, records) of tenant in one
    atomic script and append every sample where they differ or exceed the
    quota to seen; the number of samples taken is seen[0]."""
    r = Resp(st.redis_port)
    keys = ["sbx:tenant:{%s}:sandboxes" % tenant] + ["sbx:sb:{%s/%s}" % (tenant, s) for s in sids]
    try:
        while not stop.is_set():
            m, rec = r("EVAL", SAMPLE, len(keys), *(keys + sids))
            members, records = set(m.split()), set(rec.split())
            seen[0] += 1
            if members != records or len(records) > QUOTA:
                seen.append((sorted(members), sorted(records)))
            time.sleep(0.002)
    finally:
        r.close()


def tenant_state(st, tenant, key):
    """(quota members, record ids, listed ids, ids with live processes, running ids)."""
    members = set(st.redis_cli("ZRANGE", "sbx:tenant:{%s}:sandboxes" % tenant, "0", "-1").split())
    keys = st.redis_cli("--scan", "--pattern", "sbx:sb:{%s/*}" % tenant).split()
    records = {k[len("sbx:sb:{%s/" % tenant):-1] for k in keys}
    r = st.api("GET", "/v1/sandboxes?limit=100", key=key)
    assert r.status_code == 200, r.text
    listed = {s["id"] for s in r.json()["sandboxes"]}
    running = {s["id"] for s in r.json()["sandboxes"] if s["state"] == "running"}
    live = {sid for sid in records | members | listed | {"rs-%d" % i for i in range(IDS)}
            if sandbox_procs("%s.%s" % (tenant, sid))}
    return members, records, listed, live, running


def consistent(st, tenant, key):
    """The state when quota set, records and listing agree and every live
    container belongs to a listed running sandbox; else None."""
    s = tenant_state(st, tenant, key)
    members, records, listed, live, running = s
    if members == records == listed and live == running:
        return s
    return None


def storm(st, key, worker, seconds):
    """Run worker(session, rnd, answers) in THREADS threads for seconds;
    answers: a list of (call, status, body) collected from all threads."""
    stop = time.monotonic() + seconds
    answers, errors = [], []
    lock = threading.Lock()

    def run(n):
        import random
        rnd = random.Random(n)
        http = requests.Session()
        mine = []
        try:
            while time.monotonic() < stop:
                worker(http, rnd, mine)
        except Exception as ex:  # a test failure, reported below
            errors.append(repr(ex))
        with lock:
            answers.extend(mine)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    assert not errors, errors
    return answers


def call(st, http, key, method, path, json=None, timeout=60):
    return http.request(method, st.url + path, json=json, timeout=timeout,
                        headers={"Authorization": "Bearer " + key})


def low_quota_tenant(st, prefix):
    """A new tenant whose quota an admin set to QUOTA; (tenant, key)."""
    tenant = prefix + uuid.uuid4().hex[:8]
    key = st.new_key(tenant)
    r = st.api("PUT", "/v1/tenants/%s/limits" % tenant, key=st.admin_key,
               json={"sandboxes": QUOTA})
    assert r.status_code == 200 and r.json()["limits"]["sandboxes"] == QUOTA, r.text
    return tenant, key


def test_put_delete_storm_keeps_quota_listing_and_containers_in_step(st):
    tenant, key = low_quota_tenant(st, "rs-")
    sids = ["rs-%d" % i for i in range(IDS)]

    def worker(http, rnd, out):
        sid = rnd.choice(sids)
        base = "/v1/sandboxes/" + sid
        op = rnd.choice(["PUT", "PUT", "PUT", "DELETE", "DELETE", "EXEC", "SLEEP", "RESTART"])
        if op == "PUT":
            r = call(st, http, key, "PUT", base, json={})
        elif op == "DELETE":
            r = call(st, http, key, "DELETE", base)
        elif op == "EXEC":
            r = call(st, http, key, "POST", base + "/exec", json={"command": "true"})
        elif op == "SLEEP":
            r = call(st, http, key, "POST", base + "/sleep")
        else:
            r = call(st, http, key, "POST", base + "/restart")
        out.append((op, r.status_code, r.text[:200]))

    stop, seen = threading.Event(), [0]
    watch = threading.Thread(target=sampler, args=(st, tenant, sids, stop, seen))
    watch.start()
    try:
        try:
            answers = storm(st, key, worker, STORM_S)
        finally:
            stop.set()
            watch.join(30)
        by = collections.Counter((op, status) for op, status, _ in answers)
        print("PUT/DELETE storm: %r; %d samples of quota set and records" %
              (sorted(by.items()), seen[0]))
        bad = [a for a in answers if a[1] not in ALLOWED[a[0]]]
        assert not bad, "unexpected answers (%s): %r" % (sorted(by.items()), bad[:10])
        assert by[("PUT", 201)] > 0 and by[("DELETE", 204)] > 0, sorted(by.items())
        # Quota set and records change together: no sample ever saw them differ.
        assert seen[0] > 100 and len(seen) == 1, \
            "%d of %d samples: quota set != records, e.g. %r" % (len(seen) - 1, seen[0], seen[1:6])
        members, records, listed, live, running = st.wait(
            "quota set, records, listing and containers to agree",
            lambda: consistent(st, tenant, key), timeout=20, interval=0.5)
        assert len(members) <= QUOTA, (members, records, listed, live)
    finally:
        for sid in sids:
            st.api("DELETE", "/v1/sandboxes/" + sid, key=key, timeout=60)
    assert consistent(st, tenant, key) == (set(), set(), set(), set(), set())


def test_exec_during_sleep_and_restart_never_answers_not_found(st):
    """One sandbox, never deleted: while other threads sleep, restart and
    PUT it, exec answers 200, or 503 with Retry-After — never 404
    SANDBOX_NOT_FOUND or 409 STALE_EPOCH (the sandbox exists throughout)."""
    tenant = "rx-" + uuid.uuid4().hex[:8]
    key = st.new_key(tenant)
    sid = "rx-box"
    base = "/v1/sandboxes/" + sid
    r = st.api("PUT", base, key=key, json={}, timeout=60)
    assert r.status_code == 201, r.text

    def worker(http, rnd, out):
        op = rnd.choice(["EXEC", "EXEC", "EXEC", "SLEEP", "RESTART", "PUT"])
        if op == "EXEC":
            r = call(st, http, key, "POST", base + "/exec", json={"command": "echo ok"})
            if r.status_code == 200:
                assert r.json()["stdout"] == "ok\n", r.text
        elif op == "SLEEP":
            r = call(st, http, key, "POST", base + "/sleep")
        elif op == "RESTART":
            r = call(st, http, key, "POST", base + "/restart")
        else:
            r = call(st, http, key, "PUT", base, json={})
        retry = r.headers.get("Retry-After")
        out.append((op, r.status_code, r.text[:200], retry))

    try:
        answers = storm(st, key, worker, STORM_S / 2)
        by = collections.Counter((a[0], a[1]) for a in answers)
        print("exec storm: %r" % sorted(by.items()))
        # Lifecycle calls may lose every round to the others ("keeps
        # changing; try again"); exec may only wait or say "retry".
        good = {"EXEC": {200}, "SLEEP": {200, 409}, "RESTART": {200, 409}, "PUT": {200, 409}}
        bad = [a for a in answers
               if (a[1] not in good[a[0]] or (a[1] == 409 and '"CONFLICT"' not in a[2]))
               and not (a[1] == 503 and a[3] is not None)]
        assert not bad, "unexpected answers (%s): %r" % (sorted(by.items()), bad[:10])
        assert by[("EXEC", 200)] > 0 and by[("SLEEP", 200)] > 0 and by[("RESTART", 200)] > 0, by
    finally:
        st.api("DELETE", base, key=key, timeout=60)


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


def test_data_call_waits_for_a_sleep_in_progress(st):
    """A sleep in progress (state stopping at the current epoch) holds data
    calls until it is over, then they wake the sandbox; one that never ends
    (its worker died) is taken over after a bounded wait."""
    tenant = "rw-" + uuid.uuid4().hex[:8]
    key = st.new_key(tenant)
    sid = "rw-box"
    base = "/v1/sandboxes/" + sid
    rkey = "sbx:sb:{%s/%s}" % (tenant, sid)
    r = st.api("PUT", base, key=key, json={}, timeout=60)
    assert r.status_code == 201, r.text
    gen = r.json()["generation"]
    try:
        for finish in (True, False):
            assert st.api("POST", base + "/sleep", key=key, timeout=60).status_code == 200
            # The exec below is decided afresh (not by the last round's route).
            past_route_cache()
            # As a sleep between its two writes: the container is gone, the
            # record still says stopping.
            st.redis_cli("HSET", rkey, "state", "stopping")
            out = {}

            def run():
                out["r"] = st.api("POST", base + "/exec", key=key, timeout=60,
                                  json={"command": "echo woke"})
            t = threading.Thread(target=run)
            t.start()
            t.join(1.0)
            assert t.is_alive(), "exec did not wait for the sleep: %r" % out["r"].text
            if finish:
                st.redis_cli("HSET", rkey, "state", "sleeping")
            t.join(30)
            assert not t.is_alive()
            assert out["r"].status_code == 200 and out["r"].json()["stdout"] == "woke\n", \
                out["r"].text
            gen += 1
            rec = st.api("GET", base, key=key).json()
            assert rec["state"] == "running" and rec["generation"] == gen, rec
    finally:
        st.api("DELETE", base, key=key, timeout=60)
