"""Redis Sentinel (sandbox/common/sentinel.h, docs/DEPLOY.md "Redis high
availability"), on a deployment of its own: tests/multihost/hosts with
MH_SENTINELS=1 adds three redis-sentinel processes beside the primary (r1)
and its replica (r2), and every host finds the primary through them
(redis.sentinels, redis.master_name): the service address redis.url names
is removed once the hosts are up.

A manual failover (SENTINEL FAILOVER) demotes the primary while it keeps
running (the sentinels close its clients' connections): every worker and
agent connects to the new primary, not back to the old one (which still
holds the address redis.url names), and writes through every host work.

Then, while clients call through all three hosts, the primary is killed:
the sentinels promote the replica, and

- the API answers 200 before the kill, only 200 or 503 (REDIS_UNAVAILABLE /
  NODE_UNAVAILABLE, with Retry-After) while the failover runs, and 200 to
  every call once it is over, through every host, without any restart;
- every agent saw the +switch-master message it subscribes to;
- no sandbox is lost or duplicated: the API lists exactly the sandboxes
  made, each runs on exactly one agent, the one its record names;
- epochs keep growing: a restart after the failover gets an epoch above
  every one seen before.
"""

import collections
import os
import subprocess
import threading
import time

import pytest
import requests

import test_multihost as base

DIR = os.environ.get("MH_SENTINEL_DIR", "/tmp/sbx-multihost-sentinel")
PREFIX = "sbxms"
HOSTS = base.HOSTS


def hosts_env():
    return dict(os.environ, MH_SENTINELS="1", MH_PREFIX=PREFIX)


@pytest.fixture(scope="module")
def mh():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with base.deployment(DIR, hosts_env()) as m:
        # Nothing may use redis.url (the service address the stacks were
        # brought up with): it goes away.
        m.ip("-n", m.ns("r1"), "addr", "del", m.vip + "/24", "dev", "eth0")
        yield m


def sentinel(mh, addr, *args):
    host, port = addr.rsplit(":", 1)
    r = subprocess.run(["redis-cli", "-h", host, "-p", port] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=10)
    return r.stdout.strip() if r.returncode == 0 else ""


def sentinels(mh):
    return mh.env["MH_SENTINELS"].split(",")


def named_master(mh, addr):
    out = sentinel(mh, addr, "SENTINEL", "get-master-addr-by-name", mh.prefix).splitlines()
    return out[0] if out else ""


def ready(mh):
    """Every sentinel knows the other two and the replica."""
    for addr in sentinels(mh):
        lines = sentinel(mh, addr, "SENTINEL", "master", mh.prefix).splitlines()
        info = dict(zip(lines[0::2], lines[1::2]))
        if int(info.get("num-other-sentinels", 0)) < 2 or int(info.get("num-slaves", 0)) < 1:
            return False
    return True


def the_master(mh):
    """(name, address) of the Redis every sentinel names now."""
    names = {mh.env["MH_ADDR_R1"]: "r1", mh.env["MH_ADDR_R2"]: "r2"}
    addrs = {named_master(mh, s) for s in sentinels(mh)}
    assert len(addrs) == 1 and addrs <= set(names), addrs
    addr = addrs.pop()
    return names[addr], addr


def other(mh, addr):
    r1, r2 = mh.env["MH_ADDR_R1"], mh.env["MH_ADDR_R2"]
    return r2 if addr == r1 else r1


def sbx_clients(mh, addr):
    """The clients of the Redis at addr that are sbx's: not a sentinel, not
    a replication link, not this redis-cli."""
    out = []
    for line in mh.redis("CLIENT", "LIST", host=addr).splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("name", "").startswith("sentinel-") or set(f.get("flags", "")) & set("MS"):
            continue
        if f.get("cmd") in ("client|list", "client"):
            continue
        out.append(line)
    return out


def test_manual_failover_moves_every_client(mh):
    mh.wait("the sentinels to know each other and the replica", lambda: ready(mh), timeout=30)
    _, old = the_master(mh)
    new = other(mh, old)
    base.put(mh, "a", "mf-1")
    assert mh.exec_("b", "mf-1", "echo hi")["stdout"] == "hi\n"
    assert sbx_clients(mh, old), "no sbx client on the primary before the failover"
    assert mh.redis("WAIT", 1, 5000, host=old) == "1"
    assert sentinel(mh, sentinels(mh)[0], "SENTINEL", "FAILOVER", mh.prefix) == "OK"
    mh.wait("every sentinel to name the replica",
            lambda: all(named_master(mh, s) == new for s in sentinels(mh)), timeout=30)
    mh.wait("the new primary to take writes",
            lambda: mh.redis("ROLE", host=new).splitlines()[0] == "master", timeout=30)
    mh.wait("the old primary to follow it",
            lambda: mh.redis("ROLE", host=old).splitlines()[0] == "slave", timeout=30)
    codes = collections.Counter()

    def left_old():
        for h in HOSTS:
            for _ in range(8):
                r = mh.api(h, "GET", "/v1/sandboxes/mf-1")
                codes[r.status_code] += 1
                assert r.status_code in (200, 503), (h, r.status_code, r.text)
        return not sbx_clients(mh, old)
    mh.wait("every sbx client to leave the demoted primary", left_old, timeout=30, interval=0.5)
    print("reads while the clients moved: %r" % dict(codes))
    # Writes through every host work on the new primary.
    for i, h in enumerate(HOSTS):
        r = mh.api(h, "PUT", "/v1/sandboxes/mf-w%d" % i)
        assert r.status_code == 201, (h, r.status_code, r.text)
        assert mh.exec_(h, "mf-1", "echo %d" % i)["stdout"] == "%d\n" % i
    for i in range(len(HOSTS)):
        assert mh.api("a", "DELETE", "/v1/sandboxes/mf-w%d" % i).status_code == 204
    assert mh.api("a", "DELETE", "/v1/sandboxes/mf-1").status_code == 204


def error_code(r):
    try:
        return r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "?"


class Load:
    """Clients on every host, in a loop: GET of a record and an exec in it.
    Every answer is kept: (start time, end time, host, what, status, code,
    Retry-After)."""

    def __init__(self, mh, sids):
        self.mh, self.sids = mh, sids
        self.results = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(h,), daemon=True)
                        for h in HOSTS]

    def run(self, host):
        session = requests.Session()
        i = 0
        while not self.stop.is_set():
            sid = self.sids[i % len(self.sids)]
            i += 1
            for what, method, path, body in (
                    ("get", "GET", "/v1/sandboxes/" + sid, None),
                    ("exec", "POST", "/v1/sandboxes/%s/exec" % sid, {"command": "echo ok"})):
                t = time.monotonic()
                try:
                    r = self.mh.api(host, method, path, json=body, session=session, timeout=20)
                    row = (t, time.monotonic(), host, what, r.status_code,
                           error_code(r) if r.status_code >= 400 else "",
                           r.headers.get("Retry-After"))
                except requests.RequestException as ex:
                    row = (t, time.monotonic(), host, what, 0, type(ex).__name__, None)
                with self.lock:
                    self.results.append(row)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def test_failover_through_the_sentinels_under_load(mh):
    mh.wait("the sentinels to know each other and the replica", lambda: ready(mh), timeout=30)
    primary, old = the_master(mh)
    new = other(mh, old)

    sids = ["ms-%d" % i for i in range(3)]
    before = {}
    for i, sid in enumerate(sids):
        rec = base.put(mh, HOSTS[i], sid)
        assert mh.exec_(HOSTS[(i + 1) % 3], sid, "echo hi")["stdout"] == "hi\n"
        before[sid] = int(mh.record(sid)["epoch"])
    mh.wait("the replica to have every write",
            lambda: mh.redis("WAIT", 1, 1000, host=old) == "1", timeout=30)

    with Load(mh, sids) as load:
        mh.wait("calls before the kill", lambda: len(load.results) >= 30, timeout=30)
        with open(os.path.join(DIR, "pids", "redis-%s.pid" % primary)) as f:
            t_kill = time.monotonic()
            os.kill(int(f.read().strip()), 9)
        mh.wait("every sentinel to name the replica",
                lambda: all(named_master(mh, s) == new for s in sentinels(mh)), timeout=30)
        t_switch = time.monotonic()
        assert mh.redis("ROLE", host=new).splitlines()[0] == "master"

        def all_up():
            return all(mh.redis("EXISTS", "sbx:node:{%s}:alive" % mh.node[h], host=new) == "1" and
                       requests.get(mh.url[h] + "/healthz", timeout=2).status_code == 200
                       for h in HOSTS)
        mh.wait("every host to work on the new primary", all_up, timeout=30)
        t_up = time.monotonic()
        n_up = len(load.results)
        mh.wait("calls after the failover", lambda: len(load.results) >= n_up + 60, timeout=60)
    print("sentinels switched %.1fs after the kill, hosts up %.1fs after it; %d calls" %
          (t_switch - t_kill, t_up - t_kill, len(load.results)))

    statuses = collections.Counter((s, c) for _, _, _, _, s, c, _ in load.results)
    print("answers: %r" % dict(statuses))
    refused = [row for row in load.results if row[4] != 200]
    if refused:
        print("503s from %.1fs to %.1fs after the kill" %
              (refused[0][0] - t_kill, refused[-1][0] - t_kill))
    for _, end, host, what, status, code, retry in load.results:
        if end < t_kill:   # answered before the kill
            assert status == 200, (host, what, status, code)
        else:
            assert status in (200, 503), (host, what, status, code)
        if status == 503:
            assert code in ("REDIS_UNAVAILABLE", "NODE_UNAVAILABLE"), (host, what, code)
            assert retry, (host, what, "503 without Retry-After")

    # The failover is over: every call through every host answers at once.
    for _ in range(2):
        for h in HOSTS:
            for sid in sids:
                r = mh.api(h, "GET", "/v1/sandboxes/" + sid)
                assert r.status_code == 200, (h, sid, r.status_code, r.text)
                assert mh.exec_(h, sid, "echo ok")["stdout"] == "ok\n"

    # Every agent followed the sentinels' +switch-master.
    for h in HOSTS:
        with open(os.path.join(DIR, h, "logs", "agent-1.log")) as f:
            assert "the sentinels switched master" in f.read(), "agent of host %s" % h

    # None lost, none made twice: the API lists exactly these, and each runs
    # on exactly one agent, the one its record names.
    r = mh.api("a", "GET", "/v1/sandboxes")
    assert r.status_code == 200, r.text
    assert sorted(s["id"] for s in r.json()["sandboxes"]) == sids

    def one_copy_each():
        where = collections.defaultdict(list)
        for h in HOSTS:
            r = mh.agent_call(h, "GET", "/agent/v1/sandboxes")
            assert r.status_code == 200
            for s in r.json()["sandboxes"]:
                where[s["id"]].append(mh.node[h])
        return all(where[sid] == [mh.record(sid)["node"]] for sid in sids)
    mh.wait("each sandbox to run on exactly its record's node", one_copy_each, timeout=30)

    # Epochs keep growing: never below what was seen, and a start after the
    # failover is above every epoch seen before it.
    for i, sid in enumerate(sids):
        assert int(mh.record(sid)["epoch"]) >= before[sid]
        r = mh.api(HOSTS[i], "POST", "/v1/sandboxes/%s/restart" % sid)
        assert r.status_code == 200, r.text
        assert int(r.json()["epoch"]) > before[sid]
        assert mh.exec_(HOSTS[(i + 2) % 3], sid, "echo again")["stdout"] == "again\n"

    # The agents' event streams read from the primary too (redis.url names
    # an address nobody holds).
    with mh.api("b", "GET", "/v1/events?sandbox=ms-new", key=mh.admin_key, stream=True,
                timeout=20) as r:
        assert r.status_code == 200, r.text
        lines = r.iter_lines()
        assert base.put(mh, "c", "ms-new")["id"] == "ms-new"
        seen = []
        for line in lines:
            seen.append(line)
            if line == b"event: created":
                break
        assert b"event: created" in seen, seen
    assert mh.api("a", "DELETE", "/v1/sandboxes/ms-new").status_code == 204
