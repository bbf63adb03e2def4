"""The ops dashboard (ui/, served by nginx at /ui/) in a real headless
Chromium, driven over the DevTools protocol (python3-websocket).

The page loads with no console error, lists the nodes and a sandbox the test
created with its snapshot, shows a new event within 2 s, sleep and destroy
work from the page, and so does migrating a node away. A screenshot is kept in the test's temp dir (its path is printed)."""

import base64
import json
import os
import re
import uuid

import pytest

pytest.importorskip("websocket")
from sbxbrowser import CHROMIUM, Browser  # noqa: E402
from sbxdrain import sh, two_on_agent1  # noqa: E402

pytestmark = pytest.mark.skipif(not CHROMIUM, reason="Debian's chromium is not installed")


@pytest.fixture
def browser(tmp_path):
    b = Browser(str(tmp_path))
    try:
        yield b
    finally:
        b.close()


def row(box):
    return '#sandboxes tr[data-key="dev/%s"]' % box


def test_dashboard(stack, api, browser, tmp_path):
    box = "ui-" + uuid.uuid4().hex[:8]
    assert api("PUT", "/v1/sandboxes/" + box, json={"labels": {"team": "ops"}}).status_code == 201
    snap = api("POST", "/v1/sandboxes/%s/snapshots" % box, json={"name": "ui-snap"}, timeout=60)
    assert snap.status_code == 201, snap.text
    try:
        b = browser
        b.call("Page.navigate", url=stack.url + "/ui/")
        b.wait("the page", "document.readyState === 'complete' && !!document.querySelector('#key')")
        b.js("document.querySelector('#key').value = %s" % json.dumps(stack.admin_key))
        b.click("#connect")
        # The key left the input and is in no URL the page loaded.
        assert b.js("document.querySelector('#key').value") == ""

        names = b.wait("the nodes", "(() => { const r = [...document.querySelectorAll("
                       "'#nodes tbody tr')].map(t => t.dataset.node); return r.length >= 2 && r; })()")
        assert sorted(names) == ["agent-1", "agent-2"]
        assert b.js("document.querySelector('#nodes tbody tr').children[1].textContent") == "up"
        b.wait("the sandbox", "!!document.querySelector(%s)" % json.dumps(row(box)))
        b.js("document.querySelector('#f-label').value = 'team:ops';"
             "document.querySelector('#f-label').dispatchEvent(new Event('input'))")
        assert b.js("[...document.querySelectorAll('#sandboxes tbody tr')]"
                    ".every(t => t.children[9].textContent.includes('team=ops'))")
        b.wait("the live feed", "document.querySelector('#events-status').textContent === 'live'")

        # Loaded, connected, filtered, live: not one console error so far.
        b.call("Runtime.evaluate", expression="1")   # collect what is queued
        assert b.errors == [], b.errors

        # A new event is on the page within 2 s.
        other = "ui-" + uuid.uuid4().hex[:8]
        assert api("PUT", "/v1/sandboxes/" + other, json={}).status_code == 201
        b.wait("the created event", "!!document.querySelector('#events li[data-sandbox=%s]"
               "[data-type=created]')" % json.dumps(other), timeout=2.0)
        api("DELETE", "/v1/sandboxes/" + other)

        # Sleep from the page.
        b.click(row(box))
        b.wait("the detail", "document.querySelector('#detail-record').textContent.includes(%s)"
               % json.dumps('"id": "%s"' % box))
        # Its snapshot is listed in the detail.
        b.wait("the snapshot", "document.querySelector('#detail-snapshots').textContent.includes(%s)"
               % json.dumps(snap.json()["id"]))
        b.click('#detail [data-action="sleep"]')
        stack.wait("the sandbox to sleep",
                   lambda: api("GET", "/v1/sandboxes/" + box).json()["state"] == "sleeping")
        b.wait("the page to show it asleep", "(() => { const r = document.querySelector(%s);"
               " return r && r.children[3].textContent === 'sleeping'; })()" % json.dumps(row(box)))

        shot = tmp_path / "dashboard.png"
        shot.write_bytes(base64.b64decode(b.call("Page.captureScreenshot", format="png")["data"]))
        print("dashboard screenshot:", shot)

        # Destroy from the page (two clicks: the button asks first).
        b.click('#detail [data-action="destroy"]')
        assert api("GET", "/v1/sandboxes/" + box).status_code == 200
        b.click('#detail [data-action="destroy"]')
        stack.wait("the sandbox to be gone",
                   lambda: api("GET", "/v1/sandboxes/" + box).status_code == 404)
        b.wait("the row to go", "!document.querySelector(%s)" % json.dumps(row(box)))

        b.call("Runtime.evaluate", expression="1")   # collect what is queued
        # While the page's own sleep and destroy change the sandbox, what a
        # periodic refresh asked for just before (the record, its processes,
        # tunnels, ports) may be answered 503 (in the transition) or 404
        # (destroyed): Chromium logs those as console errors even though
        # the page shows "(gone)". Nothing else may be there.
        transient = re.compile(r"Failed to load resource: the server responded with a status of "
                               r"(404|503) .*/v1/sandboxes/%s(/(processes|tunnels|ports))?$"
                               % re.escape(box))
        assert [e for e in b.errors if not transient.match(e)] == [], b.errors
    finally:
        api("DELETE", "/v1/sandboxes/" + box)
        api("DELETE", "/v1/snapshots/" + snap.json()["id"])
    # The key travels in headers only: no URL nginx logged holds it.
    with open(os.path.join(stack.dir, "logs", "nginx-access.log"), errors="replace") as f:
        assert stack.admin_key not in f.read()


def test_dashboard_migrates_a_node(stack, api, browser):
    """Migrate on a node's row asks first, then drains the node and moves its
    sandboxes away, page by page: a persisting one sleeps with its save and
    wakes on the other node with its files; one without persist stays and
    the page says so."""
    if stack.agents < 2:
        pytest.skip("needs two agents")
    tag = uuid.uuid4().hex[:6]
    keep, plain = "ui-mig-%s" % tag, "ui-plain-%s" % tag
    admin = stack.admin_key
    try:
        two_on_agent1(api, admin, keep, plain)
        b = browser
        b.call("Page.navigate", url=stack.url + "/ui/")
        b.wait("the page", "document.readyState === 'complete' && !!document.querySelector('#key')")
        b.js("document.querySelector('#key').value = %s" % json.dumps(admin))
        b.click("#connect")
        button = '#nodes tr[data-node="agent-1"] [data-action="migrate"]'
        b.wait("the migrate button", "!!document.querySelector(%s)" % json.dumps(button))
        b.click(button)
        b.wait("the question", "document.querySelector(%s).textContent === 'Really migrate?'"
               % json.dumps(button))
        # Asking changed nothing yet.
        assert api("GET", "/v1/sandboxes/" + keep).json()["state"] == "running"
        b.click(button)
        status = b.wait("the result", "(() => { const t = document.querySelector('#nodes-status')"
                        ".textContent; return t.startsWith('migrate agent-1: ') && t; })()",
                        timeout=60)
        assert re.match(r"migrate agent-1: \d+ moved, \d+ kept: .*%s \(.*persist" % plain,
                        status), status
        assert api("GET", "/v1/sandboxes/" + keep).json()["state"] == "sleeping"
        assert api("GET", "/v1/sandboxes/" + plain).json()["state"] == "running"
        b.wait("the node shown drained", "document.querySelector('#nodes tr[data-node=\"agent-1\"]')"
               ".children[7].textContent.startsWith('drained')")
        # The moved one wakes on agent-2 with its file.
        assert sh(api, keep, "cat /workspace/m") == "moved\n"
        assert api("GET", "/v1/sandboxes/" + keep).json()["node"] == "agent-2"
        b.call("Runtime.evaluate", expression="1")   # collect what is queued
        assert b.errors == [], b.errors
    finally:
        api("POST", "/v1/nodes/agent-1/drain", key=admin, json={"drain": False})
        api("POST", "/v1/nodes/agent-2/drain", key=admin, json={"drain": False})
        api("DELETE", "/v1/sandboxes/" + keep)
        api("DELETE", "/v1/sandboxes/" + plain)
