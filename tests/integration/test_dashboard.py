"""The ops dashboard (ui/, served by nginx at /ui/) in a real headless
Chromium, driven over the DevTools protocol (python3-websocket).

The page loads with no console error, lists the nodes and a sandbox the test
created, shows a new event within 2 s, and sleep and destroy work from the
page. A screenshot is kept in the test's temp dir (its path is printed)."""

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from sbxproc import scaled  # noqa: E402

websocket = pytest.importorskip("websocket")
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="Debian's chromium is not installed")


class Browser:
    """One headless Chromium with one page, spoken to over CDP."""

    def __init__(self, tmp):
        self.profile = os.path.join(tmp, "profile")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "--disable-sync",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             "--user-data-dir=" + self.profile, "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "chromium.log"), "w"))
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + scaled(30)
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            assert time.monotonic() < deadline, "chromium did not start (chromium.log)"
            assert self.proc.poll() is None, "chromium exited (chromium.log)"
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        pages = requests.get("http://127.0.0.1:%d/json/list" % port, timeout=10).json()
        page = next(p for p in pages if p["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self.seq = 0
        self.errors = []
        for domain in ("Runtime", "Log", "Page"):
            self.call(domain + ".enable")

    def _note(self, msg):
        m, p = msg.get("method"), msg.get("params", {})
        if m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif m == "Runtime.exceptionThrown":
            self.errors.append(p["exceptionDetails"].get("exception", {}).get("description")
                               or p["exceptionDetails"]["text"])
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            self.errors.append(p["entry"]["text"] + " " + p["entry"].get("url", ""))

    def call(self, method, **params):
        self.seq += 1
        self.ws.send(json.dumps({"id": self.seq, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.seq:
                assert "error" not in msg, msg
                return msg.get("result", {})
            self._note(msg)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    def wait(self, what, expr, timeout=10.0):
        deadline = time.monotonic() + scaled(timeout)
        while True:
            v = self.js(expr)
            if v:
                return v
            assert time.monotonic() < deadline, "timed out waiting for " + what
            time.sleep(0.05)

    def click(self, selector):
        assert self.js("(() => { const e = document.querySelector(%s); if (!e) return false;"
                       " e.click(); return true; })()" % json.dumps(selector)), selector

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


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
        assert b.errors == [], b.errors
    finally:
        api("DELETE", "/v1/sandboxes/" + box)
    # The key travels in headers only: no URL nginx logged holds it.
    with open(os.path.join(stack.dir, "logs", "nginx-access.log"), errors="replace") as f:
        assert stack.admin_key not in f.read()
