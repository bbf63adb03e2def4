"""The terminal page (ui/terminal.html) in a real headless Chromium, driven
over the DevTools protocol: paste a key, pick a sandbox, type, resize."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest
import requests
import websocket

from conftest import ROOT


class Page:
    """One Chromium tab over the DevTools protocol."""

    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=20)
        self.seq = 0

    def call(self, method, **params):
        self.seq += 1
        self.ws.send(json.dumps({"id": self.seq, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.seq:
                if "error" in msg:
                    raise AssertionError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise AssertionError("%s: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def wait(self, expr, what, timeout=15):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.1)
        raise AssertionError("no %s; status %r, screen:\n%s" %
                             (what, self.js("document.getElementById('status').textContent"),
                              self.screen()))

    def screen(self):
        return self.js("(() => { const b = sbxTerm.buffer.active; const out = [];"
                       " for (let i = 0; i < b.length; i++) {"
                       "   const l = b.getLine(i); out.push(l ? l.translateToString(true) : ''); }"
                       " return out.join('\\n'); })()")

    def type(self, text):
        self.js("sbxTerm.focus()")
        self.call("Input.insertText", text=text)
        self.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter",
                  windowsVirtualKeyCode=13, text="\r")
        self.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter",
                  windowsVirtualKeyCode=13)


def ui_ready(stack):
    """The page and its vendored xterm.js in the stack's ui/ (built by
    `make ui` before the stack came up, else now)."""
    target = os.path.join(stack.dir, "ui")
    if os.path.exists(os.path.join(target, "vendor", "xterm.js")):
        return
    build = stack.build if os.path.isabs(stack.build) else os.path.join(ROOT, stack.build)
    r = subprocess.run(["make", "-s", "ui", "BUILD=" + build], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, "make ui failed:\n%s%s" % (r.stdout, r.stderr)
    shutil.copytree(os.path.join(build, "ui"), target, dirs_exist_ok=True)


@pytest.fixture
def chromium():
    exe = shutil.which("chromium")
    if not exe:
        pytest.fail("Debian's chromium is not installed (deploy/deps)")
    profile = tempfile.mkdtemp(prefix="sbx-chromium-")
    p = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu",
                          "--no-first-run", "--remote-debugging-port=0",
                          "--user-data-dir=" + profile, "--window-size=1000,700", "about:blank"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        end = time.monotonic() + 30
        while time.monotonic() < end and port is None:
            line = p.stderr.readline()
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
            elif not line and p.poll() is not None:
                break
        assert port, "chromium did not start its DevTools endpoint"
        tabs = requests.get("http://127.0.0.1:%d/json" % port, timeout=10).json()
        page = [t for t in tabs if t.get("type") == "page"][0]
        yield Page(page["webSocketDebuggerUrl"])
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(profile, ignore_errors=True)


def test_page_types_into_a_sandbox_and_follows_resize(stack, chromium):
    ui_ready(stack)
    sid = "trp-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    page = chromium
    try:
        page.call("Page.enable")
        page.call("Page.navigate", url=stack.url + "/ui/terminal.html")
        page.wait("typeof sbxTerm !== 'undefined' && document.readyState === 'complete'",
                  "the page with xterm.js")
        page.js("document.getElementById('key').value = %s" % json.dumps(stack.key))
        page.js("document.getElementById('load').click()")
        page.wait("[...document.getElementById('sandbox').options].some(o => o.value === %s)"
                  % json.dumps(sid), "the sandbox in the list")
        page.js("document.getElementById('sandbox').value = %s" % json.dumps(sid))
        page.js("document.getElementById('open').click()")
        page.wait("document.getElementById('status').textContent.startsWith(%s)"
                  % json.dumps(sid), "a connected terminal")
        page.type("echo $((6*7))")
        page.wait("/^42$/m.test((() => { const b = sbxTerm.buffer.active; let s = '';"
                  " for (let i = 0; i < b.length; i++) s += b.getLine(i).translateToString(true)"
                  " + '\\n'; return s; })())", "42 in the terminal")
        before = page.js("[sbxTerm.cols, sbxTerm.rows]")
        page.call("Emulation.setDeviceMetricsOverride", width=640, height=420,
                  deviceScaleFactor=1, mobile=False)
        page.wait("sbxTerm.cols !== %d && sbxTerm.rows !== %d" % tuple(before), "a resize")
        cols, rows = page.js("[sbxTerm.cols, sbxTerm.rows]")
        time.sleep(0.2)
        page.type("stty size")
        page.wait("new RegExp('^%d %d$', 'm').test((() => { const b = sbxTerm.buffer.active;"
                  " let s = ''; for (let i = 0; i < b.length; i++)"
                  " s += b.getLine(i).translateToString(true) + '\\n'; return s; })())"
                  % (rows, cols), "stty size %d %d" % (rows, cols))
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
