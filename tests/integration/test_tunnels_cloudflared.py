"""The "cloudflared" tunnel provider (docs/API.md "Tunnels").

The real cloudflared cannot be installed on these machines and
*.trycloudflare.com is out of reach, so the agent runs a STAND-IN instead:
tests/standin/cloudflared, a small script that prints what cloudflared prints
(the quick-tunnel URL box and "Registered tunnel connection"), and relays a
loopback port of its own to the --url upstream so that a request can travel
the tunnel's path. This module runs its own stack with agent.cloudflared_path
pointing at a copy of it in a temp dir; the stand-in writes
"<copy>.d/<pid>.json" ({url, listen, upstream}) there and ignores SIGTERM
while "<copy>.d/ignore-term" exists.
"""

import concurrent.futures
import glob
import json
import os
import pwd
import re
import shutil
import signal
import tempfile
import time

import pytest
import requests

from conftest import (ROOT, assert_error, processes_mentioning, sandbox_procs, stack_down,
                      stack_up)

STANDIN = os.path.join(ROOT, "tests", "standin", "cloudflared")
GRACE_S = 2
PER_SANDBOX = 2     # agent.max_tunnels_per_sandbox of this module's stack
PER_NODE = 24       # agent.max_tunnels


@pytest.fixture(scope="module")
def cf():
    tmp = tempfile.mkdtemp(prefix="sbx-cf-", dir="/tmp")
    link = os.path.join(tmp, "cloudflared")
    # Tunnel processes run as agent.tunnel_user (nobody): they must reach
    # the stand-in and write their notes — a copy, as the checkout may sit
    # in a directory nobody cannot enter (mktemp -d: 0700).
    shutil.copyfile(STANDIN, link)
    os.chmod(link, 0o755)
    os.mkdir(link + ".d")
    os.chmod(tmp, 0o755)
    os.chmod(link + ".d", 0o777)
    st = stack_up(agents=1, overrides=["agent.cloudflared_path=" + link,
                                       "agent.tunnel_stop_grace=%ds" % GRACE_S,
                                       "agent.tunnel_timeout=10s",
                                       "agent.max_tunnels_per_sandbox=%d" % PER_SANDBOX,
                                       "agent.max_tunnels=%d" % PER_NODE])
    st.standin = link
    try:
        yield st
    finally:
        stack_down(st)
        left = processes_mentioning(link)
        for p in left:
            try:
                os.kill(int(p.split()[0]), signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
        assert not left, "stand-in processes outlived the stack:\n%s" % "\n".join(left)


def make(cf, sid, port=8000):
    r = cf.api("PUT", "/v1/sandboxes/" + sid, json={})
    assert r.status_code in (200, 201), r.text
    r = cf.data("POST", "/v1/sandboxes/%s/processes" % sid,
                json={"command": "python3 -m http.server %d --bind 127.0.0.1" % port})
    assert r.status_code == 201, r.text


def tunnel(cf, sid, port=8000, provider="cloudflared", timeout=30):
    body = {} if provider is None else {"provider": provider}
    return cf.api("POST", "/v1/sandboxes/%s/tunnels/%d" % (sid, port), json=body,
                  timeout=timeout)


def record(cf, sid, port=8000):
    v = cf.redis_cli("HGET", "sbx:sb:{dev/%s}:tunnels" % sid, str(port))
    return json.loads(v) if v else None


def standins(cf, upstream):
    """Live stand-in processes started for that forwarder."""
    return [p for p in processes_mentioning(cf.standin) if "http://" + upstream in p]


def state_of(cf, url):
    """The stand-in's own note for url ({pid, url, listen, upstream})."""
    for path in glob.glob(cf.standin + ".d/*.json"):
        try:
            with open(path) as f:
                s = json.load(f)
        except (OSError, ValueError):
            continue
        if s.get("url") == url:
            return s
    return None


def listed(cf, sid):
    return cf.api("GET", "/v1/sandboxes/%s/tunnels" % sid).json()["tunnels"]


def test_url_is_a_quick_tunnel_and_cached(cf):
    make(cf, "cf-one")
    r = tunnel(cf, "cf-one")
    assert r.status_code == 200, r.text
    t = r.json()
    assert t["provider"] == "cloudflared" and t["port"] == 8000
    assert t["url"].startswith("https://") and t["url"].endswith(".trycloudflare.com"), t
    assert set(t) == {"id", "port", "url", "provider", "generation", "createdAt"}
    assert tunnel(cf, "cf-one").json() == t
    assert tunnel(cf, "cf-one", provider=None).json() == t  # no body: whatever exists
    assert listed(cf, "cf-one") == [t]
    rec = record(cf, "cf-one")
    assert rec["provider"] == "cloudflared" and rec["url"] == t["url"]
    assert rec["upstream"] and len(standins(cf, rec["upstream"])) == 1


def test_concurrent_posts_make_one_process(cf):
    make(cf, "cf-many", port=8001)
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: tunnel(cf, "cf-many", port=8001), range(10)))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    urls = {a.json()["url"] for a in answers}
    assert len(urls) == 1, urls
    rec = record(cf, "cf-many", 8001)
    assert len(standins(cf, rec["upstream"])) == 1, standins(cf, rec["upstream"])


def test_traffic_through_the_standin_reaches_the_sandbox(cf):
    make(cf, "cf-traffic")
    t = tunnel(cf, "cf-traffic").json()
    s = cf.wait("the stand-in's note", lambda: state_of(cf, t["url"]))
    assert s["upstream"] == "http://" + record(cf, "cf-traffic")["upstream"]

    def get():
        r = requests.get("http://%s/" % s["listen"], timeout=5)
        return r if r.status_code == 200 else None
    r = cf.wait("the server behind the tunnel", get, timeout=15)
    assert "Directory listing" in r.text


def test_dead_process_is_evicted(cf):
    make(cf, "cf-kill")
    t = tunnel(cf, "cf-kill").json()
    up = record(cf, "cf-kill")["upstream"]
    [proc] = standins(cf, up)
    os.kill(int(proc.split()[0]), signal.SIGKILL)
    cf.wait("the dead tunnel to be evicted", lambda: listed(cf, "cf-kill") == [])
    assert record(cf, "cf-kill") is None
    # The event follows the eviction by a Redis round trip.
    cf.wait("the tunnel-down event",
            lambda: "process-exited" in cf.redis_cli("XREVRANGE", "sbx:events", "+", "-",
                                                     "COUNT", "50"))
    t2 = tunnel(cf, "cf-kill").json()
    assert t2["url"] != t["url"] and t2["url"].endswith(".trycloudflare.com")
    assert len(standins(cf, record(cf, "cf-kill")["upstream"])) == 1


def test_restart_stops_the_process_and_drops_the_record(cf):
    make(cf, "cf-restart")
    t = tunnel(cf, "cf-restart").json()
    up = record(cf, "cf-restart")["upstream"]
    assert standins(cf, up)
    assert cf.api("POST", "/v1/sandboxes/cf-restart/restart").status_code == 200
    cf.wait("the tunnel process to stop", lambda: not standins(cf, up))
    assert listed(cf, "cf-restart") == []
    make(cf, "cf-restart")
    t2 = tunnel(cf, "cf-restart").json()
    assert t2["url"] != t["url"] and t2["generation"] > t["generation"]


def tunnel_processes(cf):
    """sbx_agent_tunnel_processes of the stack's agent (its /metrics)."""
    url = cf.env["SBX_METRICS"].strip('"').split()[1]
    text = requests.get(url, timeout=5).text
    return int(re.search(r"^sbx_agent_tunnel_processes (\d+)$", text, re.M).group(1))


def test_delete_stops_the_process(cf):
    procs = tunnel_processes(cf)
    make(cf, "cf-del")
    tunnel(cf, "cf-del")
    up = record(cf, "cf-del")["upstream"]
    assert len(standins(cf, up)) == 1
    assert tunnel_processes(cf) == procs + 1
    assert cf.api("DELETE", "/v1/sandboxes/cf-del/tunnels/8000").status_code == 204
    cf.wait("the tunnel process to end on SIGTERM", lambda: not standins(cf, up), timeout=GRACE_S)
    cf.wait("the metrics to count it gone", lambda: tunnel_processes(cf) == procs, timeout=5)
    assert cf.api("DELETE", "/v1/sandboxes/cf-del/tunnels/8000").status_code == 204
    assert listed(cf, "cf-del") == [] and record(cf, "cf-del") is None


def test_delete_kills_a_process_that_ignores_sigterm(cf):
    flag = cf.standin + ".d/ignore-term"
    make(cf, "cf-stubborn")
    open(flag, "w").close()
    try:
        assert tunnel(cf, "cf-stubborn").status_code == 200
    finally:
        os.unlink(flag)
    up = record(cf, "cf-stubborn")["upstream"]
    assert cf.api("DELETE", "/v1/sandboxes/cf-stubborn/tunnels/8000").status_code == 204
    time.sleep(GRACE_S / 2.0)
    assert standins(cf, up), "the stand-in ignores SIGTERM: it must still run within the grace"
    cf.wait("SIGKILL after the grace", lambda: not standins(cf, up), timeout=GRACE_S + 5)


def test_destroy_leaves_no_process(cf):
    make(cf, "cf-destroy")
    tunnel(cf, "cf-destroy")
    up = record(cf, "cf-destroy")["upstream"]
    assert standins(cf, up)
    assert cf.api("DELETE", "/v1/sandboxes/cf-destroy").status_code in (200, 204)
    cf.wait("no stand-in left after destroy", lambda: not standins(cf, up))
    assert record(cf, "cf-destroy") is None


def test_provider_not_installed(cf):
    make(cf, "cf-absent")
    os.rename(cf.standin, cf.standin + ".away")
    try:
        r = tunnel(cf, "cf-absent")
    finally:
        os.rename(cf.standin + ".away", cf.standin)
    assert_error(r, 400, "VALIDATION_FAILED")
    assert "tunnel provider 'cloudflared' is not available on this node" in r.json()["error"]["message"]
    assert listed(cf, "cf-absent") == []
    assert tunnel(cf, "cf-absent").status_code == 200  # back again


def test_bad_provider_and_body(cf):
    make(cf, "cf-bad")
    assert_error(tunnel(cf, "cf-bad", provider="ngrok"), 400, "VALIDATION_FAILED")
    assert_error(tunnel(cf, "cf-bad", provider=7), 400, "VALIDATION_FAILED")
    r = cf.api("POST", "/v1/sandboxes/cf-bad/tunnels/8000", json={"provider": "builtin", "x": 1})
    assert_error(r, 400, "VALIDATION_FAILED")
    r = cf.api("POST", "/v1/sandboxes/cf-bad/tunnels/8000", data="{nope",
               headers={"Content-Type": "application/json"})
    assert_error(r, 400, "VALIDATION_FAILED")
    assert listed(cf, "cf-bad") == []


def test_builtin_and_cloudflared_do_not_mix_on_one_port(cf):
    make(cf, "cf-mix")
    b = tunnel(cf, "cf-mix", provider=None)  # api.tunnel_provider default: builtin
    assert b.status_code == 200 and b.json()["provider"] == "builtin", b.text
    assert_error(tunnel(cf, "cf-mix"), 409, "CONFLICT")
    assert cf.api("DELETE", "/v1/sandboxes/cf-mix/tunnels/8000").status_code == 204
    c = tunnel(cf, "cf-mix")
    assert c.status_code == 200 and c.json()["provider"] == "cloudflared"


# ---- confinement and caps ----------------------------------------------------


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def test_process_is_unprivileged_and_in_the_sandboxs_cgroups(cf):
    make(cf, "cf-jail")
    assert tunnel(cf, "cf-jail").status_code == 200
    [proc] = standins(cf, record(cf, "cf-jail")["upstream"])
    pid = int(proc.split()[0])
    st = proc_status(pid)
    nobody = pwd.getpwnam("nobody")
    assert st["Uid"].split() == [str(nobody.pw_uid)] * 4, st["Uid"]
    assert st["Gid"].split() == [str(nobody.pw_gid)] * 4, st["Gid"]
    assert st["Groups"].strip() == "", st["Groups"]
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[field], 16) == 0, (field, st[field])
    assert st["NoNewPrivs"].strip() == "1"
    # Charged to the sandbox: its memory, CPU and pids cgroups hold it.
    assert pid in [p for p, _, _ in sandbox_procs("dev.cf-jail")]
    with open("/proc/%d/cgroup" % pid) as f:
        lines = [l for l in f.read().splitlines() if any(c in l.split(":")[1].split(",")
                                                         for c in ("memory", "pids", "cpu"))]
    assert lines and all(l.endswith("/dev.cf-jail") for l in lines), lines


def test_tunnels_per_sandbox_are_capped(cf):
    make(cf, "cf-cap")
    for port in range(8000, 8000 + PER_SANDBOX):
        r = tunnel(cf, "cf-cap", port=port)
        assert r.status_code == 200, r.text
    before = len(processes_mentioning(cf.standin))
    r = tunnel(cf, "cf-cap", port=8000 + PER_SANDBOX)
    err = assert_error(r, 429, "QUOTA_EXCEEDED")
    assert "at most %d tunnel processes" % PER_SANDBOX in err["message"]
    assert record(cf, "cf-cap", 8000 + PER_SANDBOX) is None
    assert len(processes_mentioning(cf.standin)) == before
    # The same port again is the cached tunnel, not a new process.
    assert tunnel(cf, "cf-cap", port=8000).status_code == 200
    assert cf.api("DELETE", "/v1/sandboxes/cf-cap/tunnels/8000").status_code == 204
    assert tunnel(cf, "cf-cap", port=8000 + PER_SANDBOX).status_code == 200


def test_tunnels_per_node_are_capped(cf):
    made, refused = [], None
    before = len(processes_mentioning(cf.standin))
    try:
        for i in range(PER_NODE):
            sid = "cf-node-%d" % i
            make(cf, sid)
            made.append(sid)
            for port in range(8000, 8000 + PER_SANDBOX):
                r = tunnel(cf, sid, port=port)
                if r.status_code != 200:
                    refused = r
                    break
            if refused is not None:
                break
        assert refused is not None, "no refusal after %d sandboxes" % len(made)
        err = assert_error(refused, 503, "NO_CAPACITY")
        assert refused.headers.get("Retry-After") == "1"
        assert "tunnel processes, its limit" in err["message"]
        assert len(processes_mentioning(cf.standin)) <= PER_NODE
    finally:
        for sid in made:
            cf.api("DELETE", "/v1/sandboxes/" + sid)
        cf.wait("the node's tunnel processes to end",
                lambda: len(processes_mentioning(cf.standin)) <= before, timeout=GRACE_S + 10)
