"""The terminal page (ui/terminal.html) in a real headless Chromium, driven
over the DevTools protocol: paste a key, pick a sandbox, type, resize."""

import json
import os
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import ROOT
from sbxbrowser import CHROMIUM, Browser


SCREEN_JS = ("(() => { const b = sbxTerm.buffer.active; const out = [];"
             " for (let i = 0; i < b.length; i++) {"
             "   const l = b.getLine(i); out.push(l ? l.translateToString(true) : ''); }"
             " return out.join('\\n'); })()")


def term_state(page):
    """The page's status line and the terminal's screen, for a failure."""
    return "status %r, screen:\n%s" % (page.js("document.getElementById('status').textContent"),
                                       page.js(SCREEN_JS))


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
def chromium(tmp_path):
    if not CHROMIUM:
        pytest.fail("Debian's chromium is not installed (deploy/deps)")
    b = Browser(str(tmp_path), size="1000,700")
    try:
        yield b
    finally:
        b.close()


def test_page_types_into_a_sandbox_and_follows_resize(stack, chromium):
    ui_ready(stack)
    sid = "trp-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    page = chromium

    def wait(what, expr):
        return page.wait(what, expr, timeout=15, explain=lambda: term_state(page))

    try:
        page.call("Page.navigate", url=stack.url + "/ui/terminal.html")
        wait("the page with xterm.js",
             "typeof sbxTerm !== 'undefined' && document.readyState === 'complete'")
        page.js("document.getElementById('key').value = %s" % json.dumps(stack.key))
        page.js("document.getElementById('load').click()")
        wait("the sandbox in the list",
             "[...document.getElementById('sandbox').options].some(o => o.value === %s)"
             % json.dumps(sid))
        page.js("document.getElementById('sandbox').value = %s" % json.dumps(sid))
        page.js("document.getElementById('open').click()")
        wait("a connected terminal",
             "document.getElementById('status').textContent.startsWith(%s)" % json.dumps(sid))
        page.js("sbxTerm.focus()")
        page.type("echo $((6*7))")
        wait("42 in the terminal", "/^42$/m.test(%s)" % SCREEN_JS)
        before = page.js("[sbxTerm.cols, sbxTerm.rows]")
        page.call("Emulation.setDeviceMetricsOverride", width=640, height=420,
                  deviceScaleFactor=1, mobile=False)
        wait("a resize", "sbxTerm.cols !== %d && sbxTerm.rows !== %d" % tuple(before))
        cols, rows = page.js("[sbxTerm.cols, sbxTerm.rows]")
        time.sleep(0.2)
        page.js("sbxTerm.focus()")
        page.type("stty size")
        wait("stty size %d %d" % (rows, cols),
             "new RegExp('^%d %d$', 'm').test(%s)" % (rows, cols, SCREEN_JS))
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
