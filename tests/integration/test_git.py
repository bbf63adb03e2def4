"""git checkout (docs/API.md "Git"): POST /v1/sandboxes/{id}/git/checkout
runs git inside the sandbox with a timeout. A bare repository made inside
the sandbox (file://), and one served by `git daemon` in a network
namespace this module creates, reached by an `egress` sandbox at the
public-looking address every test stack allows (198.51.100.1,
conftest.stack_up). Branch, depth, target, the error codes, bad input,
other tenants, and credentials of a URL never echoed (answer, logs,
events)."""

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

from conftest import assert_error

SECRET = "s3cr3tT0kenXYZ"
PUBLIC = "198.51.100.1"          # agent.egress_allow of every test stack
HOST_ADDR = "198.51.100.253"

REPO_SCRIPT = r"""
set -e
g() { git -c user.name=t -c user.email=t@example.com -c init.defaultBranch=main "$@"; }
g init -q --bare /tmp/src.git
g init -q /tmp/w && cd /tmp/w
for i in 1 2 3; do echo $i > f; g add f; g commit -qm c$i; done
g checkout -qb dev && echo dev > dev.txt && g add dev.txt && g commit -qm dev
g push -q /tmp/src.git main dev
git -C /tmp/src.git rev-parse main
"""


def sh(stack, sid, command):
    r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command}, timeout=60)
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    return r.json()["stdout"]


def checkout(stack, sid, body, key=None, timeout=60):
    kw = {} if key is None else {"key": key}
    return stack.api("POST", "/v1/sandboxes/%s/git/checkout" % sid, json=body, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def box(stack):
    sid = "gi-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text
    main = sh(stack, sid, REPO_SCRIPT).strip()
    yield sid, main
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_checkout_default_branch_into_the_default_target(stack, box):
    sid, main = box
    r = checkout(stack, sid, {"url": "file:///tmp/src.git"})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["branch"] == "main" and a["commit"] == main and a["targetDir"] == "/workspace/src", a
    assert a["url"] == "file:///tmp/src.git"
    assert sh(stack, sid, "cat /workspace/src/f") == "3\n"


def test_branch_depth_and_target(stack, box):
    sid, _ = box
    r = checkout(stack, sid, {"url": "file:///tmp/src.git", "branch": "dev", "depth": 1,
                              "targetDir": "clones/dev"})
    assert r.status_code == 200, r.text
    assert r.json()["branch"] == "dev" and r.json()["targetDir"] == "/workspace/clones/dev"
    assert sh(stack, sid, "cat /workspace/clones/dev/dev.txt") == "dev\n"
    assert sh(stack, sid, "git -C /workspace/clones/dev rev-list --count HEAD") == "1\n"


def test_git_failures_have_stable_codes(stack, box):
    sid, _ = box
    assert_error(checkout(stack, sid, {"url": "file:///tmp/src.git", "branch": "nope",
                                       "targetDir": "/tmp/c1"}), 404, "GIT_BRANCH_NOT_FOUND")
    assert_error(checkout(stack, sid, {"url": "file:///tmp/none.git", "targetDir": "/tmp/c2"}),
                 404, "GIT_REPOSITORY_NOT_FOUND")
    sh(stack, sid, "mkdir -p /tmp/c3 && echo x > /tmp/c3/busy")
    assert_error(checkout(stack, sid, {"url": "file:///tmp/src.git", "targetDir": "/tmp/c3"}),
                 409, "FILE_EXISTS")
    # network none: nothing answers, fast
    assert_error(checkout(stack, sid, {"url": "https://127.0.0.1:1/x.git", "targetDir": "/tmp/c4"}),
                 502, "GIT_NETWORK_ERROR")
    # a server that accepts and never speaks: the timeout kills git's tree
    mute_server(stack, sid)
    t0 = time.monotonic()
    assert_error(checkout(stack, sid, {"url": "git://127.0.0.1/x.git", "targetDir": "/tmp/c5",
                                       "timeoutMs": 1000}), 504, "GIT_TIMEOUT")
    assert time.monotonic() - t0 < 30
    assert sh(stack, sid, "pgrep -x git || echo none") == "none\n"
    stack.api("DELETE", "/v1/sandboxes/%s/processes/mute" % sid)


def mute_server(stack, sid):
    """A process of sid listening on 127.0.0.1:9418 that never answers."""
    r = stack.api("POST", "/v1/sandboxes/%s/processes" % sid, json={
        "id": "mute", "command": "exec python3 -c \"import socket,time; s=socket.socket(); "
        "s.bind(('127.0.0.1',9418)); s.listen(); print('up', flush=True); c=s.accept(); time.sleep(300)\""})
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 20
    while "up" not in stack.api("GET", "/v1/sandboxes/%s/processes/mute/logs" % sid).json().get("stdout", ""):
        assert time.monotonic() < deadline, "the mute server did not start"
        time.sleep(0.1)


def test_checkout_ends_when_the_sandbox_sleeps_and_keeps_it_awake(stack):
    sid = "gs-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={"sleepAfter": "1s"}, timeout=30)
    assert r.status_code == 201, r.text
    try:
        mute_server(stack, sid)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=checkout(
            stack, sid, {"url": "git://127.0.0.1/x.git", "timeoutMs": 60000})))
        t.start()
        deadline = time.monotonic() + 20
        while sh(stack, sid, "pgrep -x git >/dev/null && echo yes || echo no") != "yes\n":
            assert time.monotonic() < deadline, "git did not start"
            time.sleep(0.1)
        assert stack.api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=30).status_code == 200
        t.join(30)
        assert_error(out["r"], 503, "NODE_UNAVAILABLE")
        # woken again (a new container): 2.5 s of checkout with sleepAfter 1 s
        # (the mute server, a background process, does not count) ends by
        # its own timeout, in the same container
        mute_server(stack, sid)
        gen = stack.api("GET", "/v1/sandboxes/" + sid).json()["generation"]
        assert_error(checkout(stack, sid, {"url": "git://127.0.0.1/x.git", "targetDir": "/tmp/k",
                                           "timeoutMs": 2500}), 504, "GIT_TIMEOUT")
        assert stack.api("GET", "/v1/sandboxes/" + sid).json()["generation"] == gen
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_credentials_of_the_url_are_never_echoed(stack, box):
    sid, _ = box
    url = "https://user:%s@127.0.0.1:1/private.git" % SECRET
    r = checkout(stack, sid, {"url": url, "targetDir": "/tmp/c6"})
    assert_error(r, 502, "GIT_NETWORK_ERROR")
    assert SECRET not in r.text and "https://***@127.0.0.1:1/private.git" in r.text
    # a failing start with the same URL: bad branch, still not echoed
    r = checkout(stack, sid, {"url": url, "branch": "-x"})
    assert_error(r, 400, "VALIDATION_FAILED")
    assert SECRET not in r.text
    for log in glob.glob(os.path.join(stack.dir, "logs", "*.log")):
        with open(log, errors="replace") as f:
            assert SECRET not in f.read(), log
    assert SECRET not in stack.redis_cli("XRANGE", "sbx:events", "-", "+")


@pytest.mark.parametrize("body", [
    {},
    {"url": "ftp://h/r.git"},
    {"url": "-uhttps://h/r"},
    {"url": "git@host:p/q.git"},
    {"url": "file://relative/r"},
    {"url": "https://h/a b"},
    {"url": "https://h/r.git", "branch": "-x"},
    {"url": "https://h/r.git", "branch": "a..b"},
    {"url": "https://h/r.git", "depth": 0},
    {"url": "https://h/r.git", "depth": "1"},
    {"url": "https://h/r.git", "targetDir": "/"},
    {"url": "https://h/r.git", "targetDir": "../x"},
    {"url": "https://h/r.git", "timeoutMs": 0},
    {"url": "https://h/r.git", "recurse": True},
])
def test_bad_input(stack, box, body):
    assert_error(checkout(stack, box[0], body), 400, "VALIDATION_FAILED")


def test_other_tenant_gets_404(stack, box):
    other = stack.new_key("git-other-" + uuid.uuid4().hex[:6])
    assert_error(checkout(stack, box[0], {"url": "file:///tmp/src.git"}, key=other), 404,
                 "SANDBOX_NOT_FOUND")


@pytest.fixture
def daemon():
    """git daemon on PUBLIC:9418 in a network namespace of its own (a veth to
    the host), serving a bare repository made here."""
    if os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/usr/lib/git-core/git-daemon"):
        pytest.skip("needs root, iproute2 and git-daemon")
    tag = uuid.uuid4().hex[:4]
    ns, host_if = "sbxtest-git-" + tag, "xtg" + tag
    tmp = tempfile.mkdtemp(prefix="sbx-git-")
    proc = None

    def run(*args):
        subprocess.run(args, check=True, capture_output=True, timeout=30)
    try:
        run("git", "-c", "init.defaultBranch=main", "init", "-q", "--bare", tmp + "/pub.git")
        run("git", "-c", "init.defaultBranch=main", "init", "-q", tmp + "/w")
        with open(tmp + "/w/README", "w") as f:
            f.write("served\n")
        run("git", "-C", tmp + "/w", "add", "README")
        run("git", "-C", tmp + "/w", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "x")
        run("git", "-C", tmp + "/w", "push", "-q", tmp + "/pub.git", "main")
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", host_if, "type", "veth", "peer", "name", "git0", "netns", ns)
        run("ip", "addr", "add", HOST_ADDR + "/32", "dev", host_if)
        run("ip", "link", "set", host_if, "up")
        run("ip", "route", "add", PUBLIC + "/32", "dev", host_if)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", ns, "addr", "add", PUBLIC + "/32", "dev", "git0")
        run("ip", "-n", ns, "link", "set", "git0", "up")
        run("ip", "-n", ns, "route", "add", HOST_ADDR + "/32", "dev", "git0")
        run("ip", "-n", ns, "route", "add", "default", "via", HOST_ADDR)
        proc = subprocess.Popen(["ip", "netns", "exec", ns, "/usr/lib/git-core/git-daemon",
                                 "--reuseaddr", "--export-all", "--base-path=" + tmp,
                                 "--listen=" + PUBLIC, "--port=9418", tmp],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while subprocess.run(["git", "ls-remote", "git://%s/pub.git" % PUBLIC],
                             capture_output=True, timeout=10).returncode != 0:
            assert time.monotonic() < deadline, "git daemon did not come up"
            time.sleep(0.1)
        yield "git://%s/pub.git" % PUBLIC
    finally:
        if proc:
            proc.kill()
            proc.wait(timeout=10)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def test_checkout_from_git_daemon_over_egress(stack, daemon):
    sid = "gd-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={"network": "egress"}, timeout=30)
    assert r.status_code == 201, r.text
    try:
        r = checkout(stack, sid, {"url": daemon, "depth": 1})
        assert r.status_code == 200, r.text
        assert r.json()["branch"] == "main" and r.json()["targetDir"] == "/workspace/pub"
        assert sh(stack, sid, "cat /workspace/pub/README") == "served\n"
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
