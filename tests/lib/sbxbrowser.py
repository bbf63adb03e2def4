"""A headless Chromium for the tests of the pages in ui/, driven over the
DevTools protocol (python3-websocket). Used by test_dashboard.py and
test_terminal_page.py.

  CHROMIUM                      Debian's chromium, or None
  Browser(tmp, size)            one browser with one page; its profile and
                                chromium.log in tmp
    .call(method, **params)     one CDP command, its result
    .js(expr)                   the value of expr (promises awaited)
    .wait(what, expr, timeout, explain)   poll expr until truthy
    .click(selector), .type(text)         a click; text typed and Enter
    .errors                     console errors and exceptions seen so far
    .close()
"""

import json
import os
import shutil
import subprocess
import time

import requests
import websocket

from sbxproc import scaled

CHROMIUM = shutil.which("chromium")


class Browser:
    """One headless Chromium with one page, spoken to over CDP."""

    def __init__(self, tmp, size="1400,1000"):
        self.profile = os.path.join(tmp, "profile")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "--disable-sync",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             "--user-data-dir=" + self.profile, "--window-size=" + size, "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "chromium.log"), "w"))
        try:
            self._attach()
        except BaseException:
            self._stop()
            raise

    def _attach(self):
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
                assert "error" not in msg, (method, msg)
                return msg.get("result", {})
            self._note(msg)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, (expr, r)
        return r["result"].get("value")

    def wait(self, what, expr, timeout=10.0, explain=None):
        """Poll expr until it is truthy and return its value; past timeout
        (scaled) fail naming what, with explain() when given."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            v = self.js(expr)
            if v:
                return v
            if time.monotonic() >= deadline:
                raise AssertionError("timed out waiting for " + what +
                                     ("; " + explain() if explain else ""))
            time.sleep(0.05)

    def click(self, selector):
        assert self.js("(() => { const e = document.querySelector(%s); if (!e) return false;"
                       " e.click(); return true; })()" % json.dumps(selector)), selector

    def type(self, text):
        """text inserted into the focused element, then Enter."""
        self.call("Input.insertText", text=text)
        self.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter",
                  windowsVirtualKeyCode=13, text="\r")
        self.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter",
                  windowsVirtualKeyCode=13)

    def _stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        try:
            self.ws.close()
        finally:
            self._stop()
