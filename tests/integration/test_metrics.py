"""Prometheus metrics (issue 21 item 1): the API master's and every agent's
internal /metrics listener (SBX_METRICS in the stack's env), black box.

The text passes Prometheus' own parser (`promtool check metrics`), counters
move with the calls that should move them, no label carries a sandbox id,
the listeners are not the public port nor the agents' node-secret port, a
real Prometheus server scrapes the stack with the shipped config, and the
shipped rules, config and dashboard hold together.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest
import requests

from conftest import ROOT, free_port, sandbox_procs
from sbxproc import api_workers

PROM_DIR = os.path.join(ROOT, "deploy", "prometheus")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None or
                                shutil.which("prometheus") is None,
                                reason="Debian's prometheus package is not installed")


def urls(stack):
    """[api master, agent-1, agent-2, ...] /metrics URLs."""
    u = stack.env["SBX_METRICS"].strip('"').split()
    assert len(u) == 1 + stack.agents, u
    return u


def scrape(url):
    r = requests.get(url, timeout=5)
    assert r.status_code == 200, (url, r.status_code, r.text[:200])
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
    return r.text


def parse(text):
    """[(name, {label: value}, float)] of every sample line."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        out.append((m.group(1), dict(LABEL.findall(m.group(3) or "")), float(m.group(4))))
    return out


def value(samples, name, **labels):
    """Sum of the samples of name whose labels include labels (0 when none)."""
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items()))


def agents_value(stack, name, **labels):
    return sum(value(parse(scrape(u)), name, **labels) for u in urls(stack)[1:])


def placed_in_redis(stack):
    """Sandboxes placed on the stack's nodes, as Redis has them now."""
    return sum(int(stack.redis_cli("SCARD", "sbx:node:{%s}:sandboxes" % stack.env["SBX_NODE_%d" % i]))
               for i in range(1, stack.agents + 1))


def test_text_parses_with_promtool(stack):
    for u in urls(stack):
        text = scrape(u)
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, "%s: promtool check metrics: %s%s" % (u, r.stdout, r.stderr)
        assert 'sbx_build_info{component="%s"' % ("api" if u == urls(stack)[0] else "agent") in text


def test_listeners_are_internal_only(stack, api):
    # The public port (nginx) does not serve them ...
    r = api("GET", "/metrics", key=None)
    assert r.status_code == 404 and "sbx_build_info" not in r.text, (r.status_code, r.text[:200])
    public = stack.url.rsplit(":", 1)[1]
    agent_ports = {stack.env["SBX_AGENT_%d" % i].rsplit(":", 1)[1]
                   for i in range(1, stack.agents + 1)}
    for u in urls(stack):
        port = u.rsplit(":", 1)[1].split("/")[0]
        assert port != public and port not in agent_ports, u
        assert u.startswith("http://127.0.0.1:"), u
    # ... nor the agents' own port, which keeps asking for the node secret.
    agent = "http://%s/metrics" % stack.env["SBX_AGENT_1"]
    assert requests.get(agent, timeout=5).status_code == 401
    r = requests.get(agent, headers={"X-Sbx-Node-Secret": stack.secret}, timeout=5)
    assert r.status_code == 404 and "sbx_build_info" not in r.text
    # Only GET /metrics on the listeners themselves.
    assert requests.get(urls(stack)[0].replace("/metrics", "/other"), timeout=5).status_code == 404
    assert requests.post(urls(stack)[0], timeout=5).status_code == 405
    assert requests.get(urls(stack)[1].replace("/metrics", "/other"), timeout=5).status_code == 404


def test_counters_follow_the_calls(stack, api):
    sid = "mx-" + uuid.uuid4().hex[:8]
    put = dict(route="PUT /v1/sandboxes/{id}", status="201")
    miss = dict(route="GET /v1/sandboxes/{id}", status="404")
    api0 = parse(scrape(urls(stack)[0]))
    execs0 = agents_value(stack, "sbx_agent_execs_total", mode="json")
    running0 = agents_value(stack, "sbx_agent_sandboxes", state="running")
    placed0 = placed_in_redis(stack)

    assert api("PUT", "/v1/sandboxes/" + sid).status_code == 201
    r = api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "echo hi"})
    assert r.status_code == 200 and r.json()["stdout"] == "hi\n", r.text
    assert api("GET", "/v1/sandboxes/no-such-" + sid).status_code == 404

    api1 = parse(scrape(urls(stack)[0]))
    assert value(api1, "sbx_api_requests_total", **put) == value(api0, "sbx_api_requests_total", **put) + 1
    assert value(api1, "sbx_api_requests_total", **miss) == value(api0, "sbx_api_requests_total", **miss) + 1
    assert (value(api1, "sbx_api_request_duration_seconds_count", route=put["route"]) ==
            value(api0, "sbx_api_request_duration_seconds_count", route=put["route"]) + 1)
    assert (value(api1, "sbx_sandbox_events_total", event="created") ==
            value(api0, "sbx_sandbox_events_total", event="created") + 1)
    assert value(api1, "sbx_api_redis_duration_seconds_count") > value(api0, "sbx_api_redis_duration_seconds_count")
    assert value(api1, "sbx_api_workers") >= 1
    assert agents_value(stack, "sbx_agent_execs_total", mode="json") == execs0 + 1
    assert agents_value(stack, "sbx_agent_sandboxes", state="running") == running0 + 1
    assert agents_value(stack, "sbx_agent_capacity") > 0
    assert placed_in_redis(stack) == placed0 + 1
    stack.wait("the node sets' count", lambda: agents_value(
        stack, "sbx_agent_sandboxes_placed") == placed0 + 1, timeout=10)
    assert agents_value(stack, "process_open_fds") > 0
    assert agents_value(stack, "process_resident_memory_bytes") > 0

    # No label anywhere names the sandbox (nor its tenant's ids).
    for u in urls(stack):
        for name, labels, _ in parse(scrape(u)):
            for k, v in labels.items():
                assert sid not in v, "%s: label %s=%r of %s names the sandbox" % (u, k, v, name)

    slept0 = value(api1, "sbx_sandbox_events_total", event="slept")
    destroyed0 = value(api1, "sbx_sandbox_events_total", event="destroyed")
    assert api("POST", "/v1/sandboxes/%s/sleep" % sid).status_code in (200, 202, 204)
    assert agents_value(stack, "sbx_agent_sandboxes", state="running") == running0
    assert api("DELETE", "/v1/sandboxes/" + sid).status_code in (200, 204)
    api2 = parse(scrape(urls(stack)[0]))
    assert value(api2, "sbx_sandbox_events_total", event="slept") == slept0 + 1
    assert value(api2, "sbx_sandbox_events_total", event="destroyed") == destroyed0 + 1
    assert placed_in_redis(stack) == placed0
    stack.wait("the node sets' count", lambda: agents_value(
        stack, "sbx_agent_sandboxes_placed") == placed0, timeout=10)


def test_oom_kills_and_crashes_are_counted(stack, api):
    sid = "mx-" + uuid.uuid4().hex[:8]
    oom0 = agents_value(stack, "sbx_agent_oom_kills_total")
    crashed0 = agents_value(stack, "sbx_sandbox_events_total", event="crashed")
    assert api("PUT", "/v1/sandboxes/" + sid,
               json={"keepAlive": True, "resources": {"memoryMiB": 64}}).status_code == 201
    try:
        r = api("POST", "/v1/sandboxes/%s/exec" % sid, timeout=60,
                json={"command": "python3 -c 'b=[]\nwhile True: b.append(bytearray(1<<20))'"})
        assert r.status_code == 200 and r.json()["oomKilled"] is True, r.text
        assert agents_value(stack, "sbx_agent_oom_kills_total") >= oom0 + 1
        # Its init killed from the host: a crash, counted once the record says so.
        inits = [pid for pid, comm, _ in sandbox_procs("dev." + sid) if comm == "sbx-init"]
        assert len(inits) == 1, inits
        os.kill(inits[0], signal.SIGKILL)
        stack.wait("the crash to be counted", lambda: agents_value(
            stack, "sbx_sandbox_events_total", event="crashed") == crashed0 + 1, timeout=10)
        # The OOM kills of the gone container stay counted.
        assert agents_value(stack, "sbx_agent_oom_kills_total") >= oom0 + 1
    finally:
        api("DELETE", "/v1/sandboxes/" + sid)


def test_a_dead_worker_is_counted_and_replaced(stack):
    master = stack.pid("api")
    api0 = parse(scrape(urls(stack)[0]))
    workers = value(api0, "sbx_api_workers")
    pids = api_workers(master)
    assert len(pids) == workers >= 2, (pids, workers)
    victim = pids[0]
    os.kill(victim, signal.SIGKILL)
    stack.wait("the worker's exit to be counted", lambda: value(
        parse(scrape(urls(stack)[0])), "sbx_api_worker_exits_total") ==
        value(api0, "sbx_api_worker_exits_total") + 1, timeout=10)
    stack.wait("a new worker", lambda: value(parse(scrape(urls(stack)[0])), "sbx_api_workers") ==
               workers and victim not in api_workers(master), timeout=10)
    # The dead worker's counts stay in the sum.
    put = dict(route="PUT /v1/sandboxes/{id}")
    assert (value(parse(scrape(urls(stack)[0])), "sbx_api_requests_total", **put) >=
            value(api0, "sbx_api_requests_total", **put))
    stack.wait_healthy()


def test_shipped_rules_and_config_check():
    r = subprocess.run(["promtool", "check", "rules", os.path.join(PROM_DIR, "alerts.yml")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["promtool", "check", "config", os.path.join(PROM_DIR, "prometheus.yml")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_alert_rules_fire_on_their_series(tmp_path):
    """promtool's unit tests of the shipped rules (prometheus/alerts_test.yml):
    each alert fires on its series and for its node only."""
    shutil.copy(os.path.join(PROM_DIR, "alerts.yml"), tmp_path)
    shutil.copy(os.path.join(os.path.dirname(__file__), "prometheus", "alerts_test.yml"), tmp_path)
    r = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_rules_and_dashboard_use_served_metrics(stack):
    """Every metric the alert rules and the dashboard query is one sbx serves."""
    served = {"up"}
    for u in urls(stack):
        for line in scrape(u).splitlines():
            if line.startswith("# TYPE "):
                name, kind = line.split()[2:4]
                served |= {name} | ({name + s for s in ("_bucket", "_sum", "_count")}
                                    if kind == "histogram" else set())
    with open(os.path.join(PROM_DIR, "grafana-dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    with open(os.path.join(PROM_DIR, "alerts.yml")) as f:
        exprs += re.findall(r"expr: >?\s*\n?((?:.+\n)+?)\s+(?:for|labels):", f.read())
    assert len(exprs) > 20
    words = set(re.findall(r"\b(sbx_[a-z_]+|process_[a-z_]+|up)\b", " ".join(exprs)))
    unknown = words - served
    assert not unknown, "queried but not served: %s" % sorted(unknown)


def test_prometheus_scrapes_the_stack(stack):
    """A real Prometheus with the shipped config, pointed at this stack."""
    targets = [u.split("//")[1].split("/")[0] for u in urls(stack)]
    work = tempfile.mkdtemp(prefix="sbx-prom-", dir="/tmp")
    port = free_port()
    proc = None
    try:
        with open(os.path.join(PROM_DIR, "prometheus.yml")) as f:
            conf = f.read()
        assert '["127.0.0.1:9470"]' in conf and '["127.0.0.1:9471"]' in conf
        conf = conf.replace('["127.0.0.1:9470"]', json.dumps(targets[:1]))
        conf = conf.replace('["127.0.0.1:9471"]', json.dumps(targets[1:]))
        conf = conf.replace("scrape_interval: 15s", "scrape_interval: 1s")
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write(conf)
        shutil.copy(os.path.join(PROM_DIR, "alerts.yml"), work)
        log = open(os.path.join(work, "prometheus.log"), "w")
        proc = subprocess.Popen(["prometheus", "--config.file=" + os.path.join(work, "prometheus.yml"),
                                 "--storage.tsdb.path=" + os.path.join(work, "data"),
                                 "--web.listen-address=127.0.0.1:%d" % port],
                                stdout=log, stderr=subprocess.STDOUT)
        base = "http://127.0.0.1:%d/api/v1" % port

        def all_up():
            active = requests.get(base + "/targets", timeout=2).json()["data"]["activeTargets"]
            seen = {(t["labels"]["job"], t["labels"]["instance"]): t["health"] for t in active}
            want = {("sbx-api", targets[0])} | {("sbx-agent", t) for t in targets[1:]}
            return set(seen) == want and all(h == "up" for h in seen.values())

        stack.wait("prometheus to scrape every sbx target", all_up, timeout=60, interval=0.5)

        def build_info():
            res = requests.get(base + "/query", params={"query": "sbx_build_info"},
                               timeout=2).json()["data"]["result"]
            return len(res) == len(targets) and all(r["value"][1] == "1" for r in res) and res

        res = stack.wait("sbx_build_info of every target", build_info, timeout=30, interval=0.5)
        assert {r["metric"]["job"] for r in res} == {"sbx-api", "sbx-agent"}
        rules = requests.get(base + "/rules", timeout=2).json()["data"]["groups"]
        names = {r["name"] for g in rules for r in g["rules"]}
        assert {"SbxNodeDown", "SbxRedisUnavailable", "SbxCapacityHigh", "SbxSandboxCrashRate"} <= names
        assert all(r["health"] != "err" for g in rules for r in g["rules"]), rules
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def test_snapshot_counters_follow_the_calls(stack, api):
    """Each snapshot op counts once, ok or failed, and the archive's bytes
    go to written (create, import, persist) or read (restore, export)."""
    sid = "mx-" + uuid.uuid4().hex[:8]

    def snaps(op, result="ok"):
        return agents_value(stack, "sbx_agent_snapshots_total", op=op, result=result)

    def moved(direction):
        return agents_value(stack, "sbx_agent_snapshot_bytes_total", direction=direction)

    assert api("PUT", "/v1/sandboxes/" + sid, json={"persist": {"paths": ["/workspace"]}},
               timeout=30).status_code == 201
    try:
        r = api("POST", "/v1/sandboxes/%s/exec" % sid, timeout=30,
                json={"command": "head -c 20000 /dev/urandom > /workspace/blob"})
        assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
        c0, w0, rd0 = snaps("create"), moved("written"), moved("read")
        cf0, pf0 = snaps("create", "failed"), snaps("persist", "failed")
        r = api("POST", "/v1/sandboxes/%s/snapshots" % sid, json={}, timeout=60)
        assert r.status_code == 201, r.text
        snap = r.json()
        assert snap["size"] > 0
        assert snaps("create") == c0 + 1 and moved("written") == w0 + snap["size"]

        r0, f0 = snaps("restore"), snaps("restore", "failed")
        r = api("POST", "/v1/sandboxes/%s/restore" % sid, json={"snapshot": snap["id"]},
                timeout=60)
        assert r.status_code == 200, r.text
        assert snaps("restore") == r0 + 1 and moved("read") == rd0 + r.json()["size"]
        r = api("POST", "/v1/sandboxes/%s/restore" % sid, json={"snapshot": "sn-0000000000000000"},
                timeout=60)
        assert r.status_code == 404, r.text
        assert snaps("restore", "failed") == f0 + 1 and snaps("restore") == r0 + 1

        e0, rd1 = snaps("export"), moved("read")
        r = api("GET", "/v1/sandboxes/%s/archive?snapshot=%s" % (sid, snap["id"]), timeout=60)
        assert r.status_code == 200 and len(r.content) == snap["size"]
        assert snaps("export") == e0 + 1 and moved("read") == rd1 + snap["size"]

        i0, w1 = snaps("import"), moved("written")
        r = api("PUT", "/v1/sandboxes/%s/archive?name=back" % sid, data=r.content, timeout=60,
                headers={"Content-Type": "application/zstd"})
        assert r.status_code == 201, r.text
        assert snaps("import") == i0 + 1 and moved("written") == w1 + r.json()["size"]

        p0, w2 = snaps("persist"), moved("written")
        assert api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=60).status_code == 200
        saved = api("GET", "/v1/snapshots/" + api("GET", "/v1/sandboxes/" + sid).json()[
            "restoreFrom"]).json()
        assert snaps("persist") == p0 + 1 and moved("written") == w2 + saved["size"]
        # the wake restores the save: one more restore, counted as such
        r1 = snaps("restore")
        r = api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "test -s /workspace/blob"},
                timeout=60)
        assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
        assert snaps("restore") == r1 + 1
        assert snaps("create", "failed") == cf0 and snaps("persist", "failed") == pf0
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
    # promtool still takes every agent's text with the new families
    for u in urls(stack)[1:]:
        r = subprocess.run(["promtool", "check", "metrics"], input=scrape(u), capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
