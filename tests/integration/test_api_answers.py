"""What the API answers where the agent, the URL or the body is wrong
(issue 23 items 3, 4, 5 and the data routes' 405 of item 7):

- an agent's 4xx (an unknown image) keeps its status and code through the
  API; only an unreachable node or its 5xx is NODE_UNAVAILABLE;
- control routes see the client's raw URI: a percent-encoded id, a dot
  segment or an empty segment is a 400, never another sandbox;
- a JSON route refuses a body of another media type with 415 (none,
  application/json and curl -d's form type are accepted);
- a data route's 405 carries Allow.
"""

import http.client
import json
import urllib.parse
import uuid

import pytest

from conftest import assert_error


def raw(stack, method, path, body=None, headers=None, key=None):
    """One request with the path sent byte for byte (no client normalizes
    it); (status, headers dict, parsed JSON or None)."""
    u = urllib.parse.urlsplit(stack.url)
    h = {"Authorization": "Bearer " + (key or stack.key)}
    h.update(headers or {})
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
    try:
        c.request(method, path, body=body, headers=h)
        resp = c.getresponse()
        data = resp.read()
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = None
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, doc
    finally:
        c.close()


def code_of(doc):
    return (doc or {}).get("error", {}).get("code")


def test_unknown_image_keeps_the_agents_400(stack, api):
    sid = "img-" + uuid.uuid4().hex[:8]
    r = api("PUT", "/v1/sandboxes/" + sid, json={"image": "no-such-image"}, timeout=30)
    err = assert_error(r, 400, "VALIDATION_FAILED")
    assert "no-such-image" in err["message"], err
    assert "Retry-After" not in r.headers, "a 400 is not worth retrying: %r" % dict(r.headers)
    # Nothing is left half-created.
    assert_error(api("GET", "/v1/sandboxes/" + sid), 404, "SANDBOX_NOT_FOUND")


@pytest.fixture(scope="module")
def box(stack):
    sid = "uri-" + uuid.uuid4().hex[:8]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code in (200, 201), r.text
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_control_routes_refuse_encoded_ids_and_dot_segments(stack, box):
    enc = "%" + "%02x" % ord(box[0]) + box[1:]
    created = "x" + box[1:]
    for method, path in (
            ("PUT", "/v1/sandboxes/%" + "%02x" % ord("x") + box[1:]),
            ("GET", "/v1/sandboxes/" + enc),
            ("DELETE", "/v1/sandboxes/" + enc),
            ("GET", "/v1/%73andboxes/" + box),
            ("DELETE", "/v1/sandboxes/zz/../" + box),
            ("GET", "/v1/sandboxes/./" + box),
            ("GET", "/v1/sandboxes/%2e%2e/sandboxes/" + box),
            ("GET", "/v1//sandboxes///" + box),
            ("GET", "/v1/sandboxes//" + box),
            ("POST", "/v1/sandboxes/" + enc + "/sleep")):
        status, _, doc = raw(stack, method, path,
                             body=b"{}" if method == "PUT" else None,
                             headers={"Content-Type": "application/json"})
        assert (status, code_of(doc)) == (400, "VALIDATION_FAILED"), (method, path, status, doc)
    # None of them reached a sandbox: the box runs, nothing new exists.
    status, _, doc = raw(stack, "GET", "/v1/sandboxes/" + box)
    assert status == 200 and doc["state"] == "running", doc
    status, _, doc = raw(stack, "GET", "/v1/sandboxes/" + created)
    assert (status, code_of(doc)) == (404, "SANDBOX_NOT_FOUND"), doc
    # The literal spelling, with a query, still works.
    status, _, doc = raw(stack, "GET", "/v1/sandboxes?limit=5")
    assert status == 200, doc


@pytest.mark.parametrize("ctype,ok", [
    (None, True),
    ("application/json", True),
    ("application/json; charset=utf-8", True),
    ("Application/JSON", True),
    ("application/x-www-form-urlencoded", True),   # curl -d's default: documented exception
    ("text/plain", False),
    ("multipart/form-data; boundary=x", False),
    ("application/xml", False),
])
def test_json_routes_refuse_other_media_types(stack, box, ctype, ok):
    body = json.dumps({"labels": {"mt": "1"}}).encode()
    headers = {"Content-Type": ctype} if ctype else {}
    # A control route (sbx-api) and a data route (the agent).
    status, _, doc = raw(stack, "PATCH", "/v1/sandboxes/" + box, body=body, headers=headers)
    if ok:
        assert status == 200, (ctype, status, doc)
    else:
        assert (status, code_of(doc)) == (415, "UNSUPPORTED_MEDIA_TYPE"), (ctype, status, doc)
    status, _, doc = raw(stack, "POST", "/v1/sandboxes/%s/exec" % box,
                         body=json.dumps({"command": "true"}).encode(), headers=headers)
    if ok:
        assert status == 200, (ctype, status, doc)
    else:
        assert (status, code_of(doc)) == (415, "UNSUPPORTED_MEDIA_TYPE"), (ctype, status, doc)


def test_empty_body_needs_no_media_type(stack, box):
    status, _, doc = raw(stack, "POST", "/v1/sandboxes/%s/restart" % box,
                         headers={"Content-Type": "text/plain"})
    assert status == 200, doc


def test_data_route_405_carries_allow(stack, box):
    for path in ("/v1/sandboxes/%s/exec" % box, "/v1/sandboxes/%s/files/tmp/x" % box):
        status, headers, doc = raw(stack, "PATCH", path, body=b"{}")
        assert (status, code_of(doc)) == (405, "METHOD_NOT_ALLOWED"), (path, status, doc)
        allow = headers.get("allow")
        assert allow, "no Allow on %s: %r" % (path, headers)
        assert "PATCH" not in allow and allow.replace(" ", "").split(","), allow
