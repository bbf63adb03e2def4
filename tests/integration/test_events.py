"""GET /v1/events: the live event stream of sbx:events (docs/API.md "Events").

Filters and tenant scoping, resume with Last-Event-ID after a reconnect, bad
input, and that a stream holds no FastCGI worker (more streams than workers
and the API still answers)."""

import os
import re
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from conftest import assert_error, stack_down, stack_up  # noqa: E402
from sbxevents import EventStream  # noqa: E402


def sid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def of(sandbox, typ=None):
    return lambda ev: ev["data"].get("id") == sandbox and (typ is None or ev["event"] == typ)


def test_filters_and_tenant_scope(stack, api, new_key):
    other = new_key("ev-other")
    a, b, c = sid("ev-a"), sid("ev-b"), sid("ev-c")
    by_sandbox = EventStream(stack, stack.admin_key, "?sandbox=" + a)
    by_type = EventStream(stack, stack.admin_key, "?tenant=dev&type=destroyed,slept")
    mine = EventStream(stack, stack.key)
    theirs = EventStream(stack, other)
    try:
        for x in (b, a):
            assert api("PUT", "/v1/sandboxes/" + x, json={}).status_code == 201
        assert api("PUT", "/v1/sandboxes/" + c, key=other, json={}).status_code == 201
        for x in (b, a):
            assert api("DELETE", "/v1/sandboxes/" + x).status_code == 204

        ev, skipped = by_sandbox.next()
        assert ev["event"] == "created" and ev["data"]["id"] == a and ev["data"]["tenant"] == "dev"
        assert ev["id"] == ev["data"]["eventId"]
        ev, _ = by_sandbox.next()
        assert ev["event"] == "destroyed" and ev["data"]["id"] == a

        ev, _ = by_type.next()
        assert (ev["event"], ev["data"]["id"]) == ("destroyed", b)

        # A tenant key sees its own sandboxes' events and no node's or other tenant's.
        ev, skipped = mine.next(of(a, "destroyed"))
        seen = skipped + [ev]
        assert all(e["data"].get("tenant") == "dev" for e in seen), seen
        assert any(e["event"] == "created" and e["data"]["id"] == b for e in seen)
        ev, skipped = theirs.next()
        assert (ev["event"], ev["data"]["id"], ev["data"]["tenant"]) == ("created", c, "ev-other")
    finally:
        for s in (by_sandbox, by_type, mine, theirs):
            s.close()
        api("DELETE", "/v1/sandboxes/" + c, key=other)


def test_resume_with_last_event_id(stack, api, redis_cli):
    box = sid("ev-r")
    s = EventStream(stack, stack.admin_key, "?tenant=dev&sandbox=" + box)
    try:
        assert api("PUT", "/v1/sandboxes/" + box, json={}).status_code == 201
        created, _ = s.next()
        assert created["event"] == "created"
    finally:
        s.close()
    # While no stream is open: a sleep, a wake and a destroy.
    assert api("POST", "/v1/sandboxes/%s/sleep" % box).status_code == 200
    assert api("PUT", "/v1/sandboxes/" + box, json={}).status_code == 200
    assert api("DELETE", "/v1/sandboxes/" + box).status_code == 204

    s = EventStream(stack, stack.admin_key, "?tenant=dev&sandbox=" + box, last_id=created["id"])
    try:
        got = []
        while not got or got[-1]["event"] != "destroyed":
            got.append(s.next()[0])
    finally:
        s.close()
    # Exactly what the stream holds after that id for this sandbox, in order.
    want = redis_cli("EVAL", AFTER, 1, "sbx:events", "(" + created["id"], box).split()
    assert [e["id"] for e in got] == want
    kinds = [e["event"] for e in got]
    assert "slept" in kinds and "started" in kinds, kinds


# The ids of the entries after ARGV[1] whose `id` field is ARGV[2].
AFTER = """local r = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[1], ARGV[1], '+')) do
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'id' and f[i + 1] == ARGV[2] then table.insert(r, e[1]) end
  end
end
return r"""


@pytest.mark.parametrize("query,headers,status,code", [
    ("?type=Created", {}, 400, "VALIDATION_FAILED"),
    ("?tenant=a%7Bb", {}, 400, "VALIDATION_FAILED"),
    ("?bogus=1", {}, 400, "VALIDATION_FAILED"),
    ("?node=agent-1&node=agent-2", {}, 400, "VALIDATION_FAILED"),
    ("", {"Last-Event-ID": "$"}, 400, "VALIDATION_FAILED"),
    ("", {"Last-Event-ID": "12-ab"}, 400, "VALIDATION_FAILED"),
    ("?tenant=ops", {}, 403, "FORBIDDEN"),
])
def test_bad_requests(api, query, headers, status, code):
    assert_error(api("GET", "/v1/events" + query, headers=headers), status, code)


def test_needs_a_key_and_get(api, stack):
    assert_error(api("GET", "/v1/events", key=None), 401, "UNAUTHORIZED")
    assert_error(api("POST", "/v1/events", key=stack.admin_key), 405, "METHOD_NOT_ALLOWED")


def test_streams_hold_no_worker(stack, api):
    with open(os.path.join(stack.dir, "conf", "sbx.conf")) as f:
        workers = int(re.search(r"^workers = (\d+)$", f.read(), re.M).group(1))
    streams = [EventStream(stack, stack.admin_key, "?type=node.none")
               for _ in range(2 * workers + 2)]
    try:
        # Every worker is free for the API while the streams are open.
        for _ in range(3 * workers):
            assert api("GET", "/v1/nodes", key=stack.admin_key).status_code == 200
        box = sid("ev-w")
        assert api("PUT", "/v1/sandboxes/" + box, json={}).status_code == 201
        assert api("DELETE", "/v1/sandboxes/" + box).status_code == 204
    finally:
        for s in streams:
            s.close()


def test_streams_are_bounded_per_agent():
    """agent.event_streams: past it a new stream is a 503 NO_CAPACITY with
    Retry-After; a closed stream frees its place."""
    st = stack_up(agents=1, overrides=["agent.event_streams=2"])
    try:
        first = [EventStream(st, st.admin_key) for _ in range(2)]
        r = st.api("GET", "/v1/events", key=st.admin_key)
        assert_error(r, 503, "NO_CAPACITY")
        assert r.headers.get("Retry-After")
        first[0].close()
        again = st.wait("a free stream", lambda: EventStream(st, st.admin_key))
        again.close()
        first[1].close()
    finally:
        stack_down(st)


def stream_after_redis_restart(st, query, last_id):
    """EventStream, once more per worker while one answers 503: after a
    Redis restart each worker finds its connection dead on its first call
    (503 REDIS_UNAVAILABLE with Retry-After, then it reconnects)."""
    for _ in range(8):          # more than the pool's workers
        try:
            return EventStream(st, st.admin_key, query, last_id=last_id)
        except AssertionError as ex:
            if "REDIS_UNAVAILABLE" not in str(ex):
                raise
            time.sleep(1)
    return EventStream(st, st.admin_key, query, last_id=last_id)


def test_redis_loss_ends_the_stream_and_a_resume_reports_a_gap():
    """A stream whose agent loses Redis ends with an `error` event; a resume
    from an id the stream no longer holds (trimmed) starts with a `gap`
    event, then carries on; one from an id it holds has none."""
    st = stack_up(agents=1)
    try:
        s = EventStream(st, st.admin_key)
        assert st.api("PUT", "/v1/sandboxes/ev-gap-1", json={}).status_code == 201
        seen, _ = s.next(of("ev-gap-1", "created"))
        st.run("restart", "redis")
        ev, _ = s.next(lambda e: e.get("event") == "error")
        assert ev["data"]["error"]["code"] == "REDIS_UNAVAILABLE"
        s.close()
        st.wait_healthy()
        st.redis_cli("XTRIM", "sbx:events", "MAXLEN", "0")
        s = stream_after_redis_restart(st, "?type=created", seen["id"])
        try:
            gap, _ = s.next()
            assert gap["event"] == "gap" and gap["data"]["after"] == seen["id"]
            assert st.api("PUT", "/v1/sandboxes/ev-gap-2", json={}).status_code == 201
            ev, _ = s.next()
            assert (ev["event"], ev["data"]["id"]) == ("created", "ev-gap-2")
        finally:
            s.close()
        s = stream_after_redis_restart(st, "?type=created", ev["id"])
        try:
            assert st.api("PUT", "/v1/sandboxes/ev-gap-3", json={}).status_code == 201
            ev, _ = s.next()
            assert (ev["event"], ev["data"]["id"]) == ("created", "ev-gap-3")
        finally:
            s.close()
    finally:
        stack_down(st)
