"""The routing decisions nginx caches (conf/nginx.conf, fastcgi_cache
sbx_route; fcgi/api_route.c) and their bounds:

- a data-path decision (/_sbx_route) is kept until the end of the
  wall-clock second it was made in (< 1 s), keyed on the credential, the
  acting tenant and the sandbox id; a URI with an empty, "." or ".."
  segment is never answered from the cache; a ticket, a tenant with a
  rate limit and anything under api.key_cache = 0 are never cached;
- a preview decision (/_sbx_preview) is kept for 1 s (< 2 s);
- so a deleted key (plus api.key_cache, 1 s), a destroyed sandbox, a
  restarted sandbox and a revoked preview URL take effect within those
  bounds. Each test waits out the bound and then asserts the new answer:
  no timing of ours is measured.

The access log's route= field is $upstream_cache_status of the decision.
"""

import hashlib
import http.client
import os
import time
import urllib.parse
import uuid

from conftest import assert_error, stack_down, stack_up
from test_ports import expose, start_http_server, via, wait_serving

ROUTE_BOUND_S = 1.0      # the rest of the current wall-clock second
PREVIEW_BOUND_S = 2.0    # fastcgi_cache_valid 200 1s, whole seconds
KEY_CACHE_S = 1.0        # api.key_cache of the stack
SLACK_S = 0.3


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def stat(stack, sid, key=None, rid=None, path="%2Fworkspace"):
    headers = {"X-Request-Id": rid} if rid else {}
    return stack.api("GET", "/v1/sandboxes/%s/stat/%s" % (sid, path),
                     key=stack.key if key is None else key, headers=headers)


def route_statuses(stack, rids):
    """{rid: route= value} of the access log lines of rids (waits for the
    log's 1 s flush until every rid is there)."""
    path = os.path.join(stack.dir, "logs", "nginx-access.log")

    def found():
        out = {}
        with open(path, errors="replace") as f:
            for line in f:
                for field in line.split():
                    if field.startswith("rid=") and field[4:] in rids:
                        out[field[4:]] = line.rsplit("route=", 1)[-1].strip()
        return out if len(out) == len(rids) else None
    return stack.wait("the access log lines of %d requests" % len(rids), found, timeout=10)


def calls(stack, sid, n, key=None):
    rids = [uid("rc") for _ in range(n)]
    for rid in rids:
        r = stat(stack, sid, key=key, rid=rid)
        assert r.status_code == 200, r.text
    return route_statuses(stack, rids)


def wait_out(t0, bound):
    left = t0 + bound + SLACK_S - time.monotonic()
    if left > 0:
        time.sleep(left)


def test_data_decisions_are_cached_but_never_for_unusual_uris(stack):
    sid, _ = stack.create("rc-hit")
    seen = calls(stack, sid, 10)
    assert "HIT" in seen.values(), seen
    # With a decision for (key, sandbox) in the cache, a URI the decision
    # would refuse is still decided afresh (and refused).
    for bad in ("/v1/sandboxes/%s/stat/%%2e%%2e" % sid, "/v1/sandboxes/%s//stat/x" % sid,
                "/v1/sandboxes/%s/stat/./x" % sid):
        assert stat(stack, sid).status_code == 200
        # http.client sends the path as written (requests drops dot segments).
        u = urllib.parse.urlsplit(stack.url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        try:
            c.request("GET", bad, headers={"Authorization": "Bearer " + stack.key})
            r = c.getresponse()
            body = r.read()
        finally:
            c.close()
        assert r.status == 400, (bad, r.status, body)
    # Another key of another tenant never rides on the cached decision.
    other = stack.new_key(uid("rc-other"))
    assert_error(stat(stack, sid, key=other), 404, "SANDBOX_NOT_FOUND")
    stack.api("DELETE", "/v1/sandboxes/" + sid)


def test_rate_limited_tenant_is_never_cached(stack):
    tenant = uid("rc-rl")
    key = stack.new_key(tenant)
    r = stack.api("PUT", "/v1/tenants/%s/limits" % tenant, key=stack.admin_key,
                  json={"requestsPerSecond": 1000, "requestsBurst": 1000})
    assert r.status_code == 200, r.text
    sid, _ = stack.create("rc-rl", key=key)
    seen = calls(stack, sid, 10, key=key)
    assert "HIT" not in seen.values(), seen
    stack.api("DELETE", "/v1/sandboxes/" + sid, key=key)


def test_deleted_key_is_refused_within_the_bound(stack):
    tenant = uid("rc-key")
    key = stack.new_key(tenant)
    sid, _ = stack.create("rc-key", key=key)
    assert "HIT" in calls(stack, sid, 10, key=key).values()
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert stack.redis_cli("DEL", "sbx:apikey:" + digest) == "1"
    t0 = time.monotonic()
    wait_out(t0, ROUTE_BOUND_S + KEY_CACHE_S)
    assert_error(stat(stack, sid, key=key), 401, "UNAUTHORIZED")
    r = stack.api("DELETE", "/v1/sandboxes/" + sid, key=stack.admin_key,
                  headers={"Sbx-Tenant": tenant})
    assert r.status_code == 204, r.text


def test_destroyed_sandbox_is_gone_within_the_bound(stack):
    sid, _ = stack.create("rc-del")
    assert "HIT" in calls(stack, sid, 10).values()
    r = stack.api("DELETE", "/v1/sandboxes/" + sid)
    assert r.status_code == 204, r.text
    t0 = time.monotonic()
    # At once: the agent has no such sandbox (a cached route gets its
    # "retry" 503, never an answer of the destroyed sandbox).
    assert stat(stack, sid).status_code in (404, 503)
    wait_out(t0, ROUTE_BOUND_S)
    assert_error(stat(stack, sid), 404, "SANDBOX_NOT_FOUND")


def test_restarted_sandbox_is_served_within_the_bound(stack):
    sid, _ = stack.create("rc-rst")

    def init_started():
        # Start time of the container's PID 1: new for a new container.
        r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid,
                      json={"argv": ["cut", "-d", " ", "-f", "22", "/proc/1/stat"]})
        assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
        return r.json()["stdout"].strip()
    before = init_started()
    assert "HIT" in calls(stack, sid, 10).values()
    r = stack.api("POST", "/v1/sandboxes/%s/restart" % sid, timeout=30)
    assert r.status_code == 200, r.text
    wait_out(time.monotonic(), ROUTE_BOUND_S)
    assert init_started() != before
    stack.api("DELETE", "/v1/sandboxes/" + sid)


def test_revoked_preview_url_is_refused_within_the_bound(stack, api):
    sid = uid("rc-pv")
    r = api("PUT", "/v1/sandboxes/" + sid, json={})
    assert r.status_code in (200, 201), r.text
    start_http_server(api, sid, 8000)
    url = expose(api, sid, 8000)["url"]
    wait_serving(stack, url)
    for _ in range(5):
        assert via(stack, url).status_code == 200
    r = api("DELETE", "/v1/sandboxes/%s/ports/8000" % sid)
    assert r.status_code == 204, r.text
    wait_out(time.monotonic(), PREVIEW_BOUND_S)
    assert_error(via(stack, url), 404, "INVALID_TOKEN")
    api("DELETE", "/v1/sandboxes/" + sid)


def test_no_route_cache_when_key_checks_are_not_cached():
    st = stack_up(agents=1, overrides=["api.key_cache=0"])
    try:
        sid, _ = st.create("rc-off")
        seen = calls(st, sid, 10)
        assert "HIT" not in seen.values(), seen
    finally:
        stack_down(st)


def test_own_control_calls_expire_the_cached_route(stack):
    """A client's sleep and restart expire its own cached route first
    (/_sbx_route_forget): its next data call, at once, is decided afresh
    (woken, the new container), never the "retry" 503 of the old route."""
    sid, _ = stack.create("rc-own")
    for change in ("/sleep", "/restart", "/sleep", "/restart"):
        assert "HIT" in calls(stack, sid, 5).values()
        r = stack.api("POST", "/v1/sandboxes/" + sid + change, timeout=30)
        assert r.status_code == 200, (change, r.status_code, r.text)
        r = stat(stack, sid)
        assert r.status_code == 200, (change, r.text)
    stack.api("DELETE", "/v1/sandboxes/" + sid)
