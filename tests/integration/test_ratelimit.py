"""Per-tenant rate limits (fcgi/ratelimit.h, docs/API.md "Rate limits").

Limits are set per tenant through the admin API (the config defaults are 0,
no limit), so these tests run on the session stack:

- a tenant over its requests per second gets 429 RATE_LIMITED with
  Retry-After and RateLimit-Limit/-Remaining/-Reset, on control calls and
  on the data path (the refusal of the auth_request subrequest is relayed);
- creates per minute count every PUT /v1/sandboxes/{id};
- one tenant flooding leaves another tenant's calls untouched (status codes
  only, never timing);
- bad limit input is a 400 and changes nothing;
- the agent holds one sandbox to agent.max_execs_per_sandbox commands at
  once (429 QUOTA_EXCEEDED), on a stack of its own with a small cap.
"""

import concurrent.futures
import time
import uuid

from conftest import assert_error, stack_down, stack_up


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def set_limits(stack, tenant, body):
    r = stack.api("PUT", "/v1/tenants/%s/limits" % tenant, key=stack.admin_key, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def first_refusal(stack, key, method, path, **kw):
    """Call until one answer is a 429; that answer. A worker that found the
    tenant without a limit remembers it for api.key_cache (1 s): a new
    limit may take that long to apply."""
    deadline = time.monotonic() + 10
    while True:
        r = stack.api(method, path, key=key, **kw)
        if r.status_code == 429:
            return r
        assert r.status_code in (200, 404), r.text
        assert time.monotonic() < deadline, "%s %s: no 429 (last %d %s)" % (
            method, path, r.status_code, r.text[:200])


def check_refusal_headers(r, limit):
    err = assert_error(r, 429, "RATE_LIMITED")
    assert "rate limit" in err["message"], err
    assert int(r.headers["Retry-After"]) >= 1, r.headers
    assert int(r.headers["RateLimit-Limit"]) == limit, r.headers
    assert int(r.headers["RateLimit-Remaining"]) == 0, r.headers
    assert int(r.headers["RateLimit-Reset"]) >= 1, r.headers


def test_requests_per_second_control_and_data_path(stack):
    tenant = uid("rl")
    key = stack.new_key(tenant)
    # No limit (the default): no RateLimit headers at all.
    r = stack.api("GET", "/v1/sandboxes", key=key)
    assert r.status_code == 200 and "RateLimit-Limit" not in r.headers, r.headers
    got = set_limits(stack, tenant, {"requestsPerSecond": 1, "requestsBurst": 2})
    assert got["overrides"] == {"requestsPerSecond": 1, "requestsBurst": 2}, got
    assert got["limits"]["requestsPerSecond"] == 1, got

    r = first_refusal(stack, key, "GET", "/v1/sandboxes")
    check_refusal_headers(r, 2)
    # The data path: the worker's refusal of /_sbx_route comes back with its
    # headers (a sandbox that does not exist: the limit is checked first).
    r = first_refusal(stack, key, "POST", "/v1/sandboxes/%s/exec" % uid("none"),
                      json={"command": "true"})
    check_refusal_headers(r, 2)

    # Lifted again: calls pass at once, without headers.
    set_limits(stack, tenant, {})
    for _ in range(5):
        r = stack.api("GET", "/v1/sandboxes", key=key)
        assert r.status_code == 200, r.text
        assert "RateLimit-Limit" not in r.headers


def test_allowed_calls_carry_the_headers(stack):
    tenant = uid("rh")
    key = stack.new_key(tenant)
    set_limits(stack, tenant, {"requestsPerSecond": 1000, "requestsBurst": 50})
    r = stack.api("GET", "/v1/sandboxes", key=key)
    assert r.status_code == 200, r.text
    assert int(r.headers["RateLimit-Limit"]) == 50, r.headers
    assert 0 <= int(r.headers["RateLimit-Remaining"]) < 50, r.headers
    assert int(r.headers["RateLimit-Reset"]) >= 0, r.headers
    assert "Retry-After" not in r.headers


def test_creates_per_minute(stack):
    tenant = uid("rc")
    key = stack.new_key(tenant)
    set_limits(stack, tenant, {"createsPerMinute": 2})
    # Every PUT counts, also one refused for its body: no sandbox is made.
    for _ in range(2):
        r = stack.api("PUT", "/v1/sandboxes/" + uid("c"), key=key,
                      json={"resources": {"memoryMiB": "many"}})
        assert_error(r, 400, "VALIDATION_FAILED")
    r = stack.api("PUT", "/v1/sandboxes/" + uid("c"), key=key, json={})
    check_refusal_headers(r, 2)
    # A minute's worth at once, then one every 30 s: the wait says so.
    assert 1 <= int(r.headers["Retry-After"]) <= 30, r.headers
    # Other calls are not creates.
    r = stack.api("GET", "/v1/sandboxes", key=key)
    assert r.status_code == 200, r.text
    assert stack.api("GET", "/v1/sandboxes?limit=1", key=key).status_code == 200


def test_one_tenant_flooding_leaves_another_alone(stack):
    flooder, quiet = uid("fl"), uid("qt")
    fkey, qkey = stack.new_key(flooder), stack.new_key(quiet)
    set_limits(stack, flooder, {"requestsPerSecond": 2, "requestsBurst": 2})
    # The quiet tenant has a limit of its own, far above what it sends.
    set_limits(stack, quiet, {"requestsPerSecond": 1000, "requestsBurst": 1000})

    def flood(_):
        return stack.api("GET", "/v1/sandboxes", key=fkey).status_code

    quiet_codes = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        flood_codes = pool.map(flood, range(150))
        for _ in range(30):
            r = stack.api("GET", "/v1/sandboxes", key=qkey)
            quiet_codes.append(r.status_code)
        flood_codes = list(flood_codes)
    assert flood_codes.count(429) > 0, flood_codes
    assert set(flood_codes) <= {200, 429}, flood_codes
    assert quiet_codes == [200] * 30, quiet_codes
    set_limits(stack, flooder, {})


BAD_RATE_LIMITS = [
    {"requestsPerSecond": -1}, {"requestsPerSecond": 1000001}, {"requestsPerSecond": 1.5},
    {"requestsPerSecond": "10"}, {"requestsBurst": -2}, {"requestsBurst": True},
    {"createsPerMinute": 10 ** 7}, {"createsPerMinute": [1]}, {"requestsPerMinute": 5},
]


def test_bad_rate_limit_input(stack):
    tenant = uid("rb")
    set_limits(stack, tenant, {"requestsPerSecond": 7})
    for body in BAD_RATE_LIMITS:
        r = stack.api("PUT", "/v1/tenants/%s/limits" % tenant, key=stack.admin_key, json=body)
        assert_error(r, 400, "VALIDATION_FAILED")
    got = stack.api("GET", "/v1/tenants/%s/limits" % tenant, key=stack.admin_key).json()
    assert got["overrides"] == {"requestsPerSecond": 7}, got
    # 0 is a valid override: no limit for this tenant whatever the default.
    got = set_limits(stack, tenant, {"requestsPerSecond": 0, "createsPerMinute": 3})
    assert got["overrides"] == {"requestsPerSecond": 0, "createsPerMinute": 3}, got
    assert stack.redis_cli("HGET", "sbx:tenant:{%s}:limits" % tenant, "createsPerMinute") == "3"


def test_the_check_is_resent_after_redis_closed_the_connections(stack):
    """The key check and the rate limit are one script call, which a worker
    may send twice (counting a call twice is harmless): when Redis closed
    every connection (a restart, CLIENT KILL) a call is resent on a fresh
    one instead of failing, as the plain key lookup was."""
    tenant = uid("rk")
    key = stack.new_key(tenant)
    set_limits(stack, tenant, {"requestsPerSecond": 10000})
    workers = 4
    for _ in range(3 * workers):   # every worker has a connection in use
        assert stack.api("GET", "/v1/sandboxes", key=key).status_code == 200
    stack.redis_cli("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    codes = [stack.api("GET", "/v1/sandboxes", key=key).status_code for _ in range(3 * workers)]
    assert codes == [200] * len(codes), codes
    stack.wait_healthy()


def test_exec_commands_per_sandbox_are_bounded():
    st = stack_up(agents=1, overrides=["agent.max_execs_per_sandbox=2"])
    streams = []
    try:
        sid, other = uid("ex"), uid("ex")
        for s in (sid, other):
            r = st.api("PUT", "/v1/sandboxes/" + s, json={}, timeout=30)
            assert r.status_code == 201, r.text
        path = "/v1/sandboxes/%s/exec" % sid
        for _ in range(2):
            r = st.api("POST", path, json={"command": "sleep 600"}, stream=True, timeout=30,
                       headers={"Accept": "text/event-stream"})
            assert r.status_code == 200, r.text
            lines = r.iter_lines()
            assert next(lines) == b"event: start"   # the command runs
            streams.append((r, lines))   # both kept: a dropped iterator closes the stream
        err = assert_error(st.api("POST", path, json={"command": "true"}), 429, "QUOTA_EXCEEDED")
        assert "at most 2 commands" in err["message"], err
        # Per sandbox: the tenant's other sandbox runs commands.
        r = st.api("POST", "/v1/sandboxes/%s/exec" % other, json={"command": "echo ok"})
        assert r.status_code == 200 and r.json()["stdout"] == "ok\n", r.text
        # A command that ends gives its place back.
        streams.pop()[0].close()
        st.wait("a place for one more command",
                lambda: st.api("POST", path, json={"command": "echo back"}).status_code == 200)
    finally:
        for r, _ in streams:
            r.close()
        stack_down(st)
