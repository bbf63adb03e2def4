"""Tenant separation for every endpoint, and isolation extras that
test_runtime.py does not cover (setuid binaries, hostile cwd values).

Tenant B uses tenant A's sandbox id on every route of docs/API.md: each
call is a 404 (DELETE: a 204 that does nothing), and afterwards A's sandbox
is exactly as it was: record, files, processes, sessions, ports, tunnels.
"""

import json
import uuid

import pytest

from conftest import assert_error


def sid_of(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def run(st, sid, command, key=None, **extra):
    r = st.api("POST", "/v1/sandboxes/%s/exec" % sid, json=dict(command=command, **extra),
               timeout=60, **({"key": key} if key else {}))
    assert r.status_code == 200, "exec %r: %d %s" % (command, r.status_code, r.text[:300])
    return r.json()


def snapshot(stack, sid):
    """Everything tenant A can observe about its sandbox."""
    rec = stack.api("GET", "/v1/sandboxes/" + sid).json()
    for k in ("lastActiveAt",):
        rec.pop(k, None)
    procs = stack.api("GET", "/v1/sandboxes/%s/processes" % sid).json()["processes"]
    sessions = stack.api("GET", "/v1/sandboxes/%s/sessions" % sid).json()["sessions"]
    ports = stack.api("GET", "/v1/sandboxes/%s/ports" % sid).json()
    tunnels = stack.api("GET", "/v1/sandboxes/%s/tunnels" % sid).json()
    files = run(stack, sid, "cd /workspace && find . | sort | xargs -d '\\n' md5sum 2>/dev/null; "
                            "ls -A /tmp")["stdout"]
    return {
        "record": rec,
        "processes": [(p["id"], p["status"], p["pid"]) for p in procs],
        "sessions": sorted(s["id"] for s in sessions),
        "ports": ports,
        "tunnels": tunnels,
        "files": files,
    }


@pytest.fixture(scope="module")
def owned(stack):
    """Tenant A's (the dev key's) sandbox with a file, a process, a session,
    an exposed port and a tunnel."""
    sid = sid_of("ten")
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={"labels": {"owner": "a"}}, timeout=30)
    assert r.status_code == 201, r.text
    base = "/v1/sandboxes/" + sid
    assert stack.api("PUT", base + "/files/keep.txt", data=b"tenant-a").status_code == 201
    assert stack.api("PUT", base + "/dirs/adir").status_code == 201
    r = stack.api("POST", base + "/processes", json={"command": "sleep 600", "id": "p1"})
    assert r.status_code == 201, r.text
    r = stack.api("POST", base + "/sessions", json={"id": "s1"})
    assert r.status_code == 201, r.text
    r = stack.api("POST", base + "/ports/3000", json={})
    assert r.status_code == 200, r.text
    r = stack.api("POST", base + "/tunnels/3001", json={})
    assert r.status_code == 200, r.text
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


@pytest.fixture(scope="module")
def other_key(stack):
    return stack.new_key("tenant-b-" + uuid.uuid4().hex[:6])


def routes(sid):
    """(method, path, kwargs) of every route on sandbox sid but PUT/DELETE."""
    b = "/v1/sandboxes/" + sid
    return [
        ("GET", b, {}),
        ("PATCH", b, {"json": {"labels": {"owner": "b"}}}),
        ("POST", b + "/restart", {}),
        ("POST", b + "/sleep", {}),
        ("POST", b + "/exec", {"json": {"command": "touch /workspace/PWNED"}}),
        ("POST", b + "/exec", {"json": {"command": "touch /workspace/PWNED"},
                               "headers": {"Accept": "text/event-stream"}}),
        ("POST", b + "/exec", {"json": {"command": "touch /workspace/PWNED", "session": "s1"}}),
        ("POST", b + "/sessions", {"json": {"id": "s2"}}),
        ("GET", b + "/sessions", {}),
        ("DELETE", b + "/sessions/s1", {}),
        ("POST", b + "/processes", {"json": {"command": "touch /workspace/PWNED"}}),
        ("GET", b + "/processes", {}),
        ("GET", b + "/processes/p1", {}),
        ("GET", b + "/processes/p1/logs", {}),
        ("GET", b + "/processes/p1/logs", {"headers": {"Accept": "text/event-stream"}}),
        ("POST", b + "/processes/p1/stdin", {"data": b"x"}),
        ("GET", b + "/processes/p1/wait?timeoutMs=10", {}),
        ("DELETE", b + "/processes/p1?signal=KILL&graceMs=0", {}),
        ("DELETE", b + "/processes", {}),
        ("GET", b + "/files/keep.txt", {}),
        ("GET", b + "/files/keep.txt?encoding=utf-8", {}),
        ("PUT", b + "/files/keep.txt", {"data": b"tenant-b"}),
        ("PUT", b + "/files/PWNED", {"data": b"x"}),
        ("DELETE", b + "/files/keep.txt", {}),
        ("DELETE", b + "/files/adir?recursive=true", {}),
        ("GET", b + "/dirs/%2Fworkspace", {}),
        ("PUT", b + "/dirs/PWNED", {}),
        ("GET", b + "/stat/keep.txt", {}),
        ("POST", b + "/move", {"json": {"from": "keep.txt", "to": "moved.txt"}}),
        # an event stream without end for the owner: only its head is read
        ("GET", b + "/watch?path=/workspace", {"headers": {"Accept": "text/event-stream"},
                                               "stream": True}),
        ("POST", b + "/git/checkout", {"json": {"url": "file:///workspace/x.git"}}),
        ("GET", b + "/contexts", {}),
        ("POST", b + "/ports/3000", {"json": {}}),
        ("POST", b + "/ports/3002", {"json": {"token": "mine"}}),
        ("GET", b + "/ports", {}),
        ("DELETE", b + "/ports/3000", {}),
        ("POST", b + "/tunnels/3001", {"json": {}}),
        ("GET", b + "/tunnels", {}),
        ("DELETE", b + "/tunnels/3001", {}),
    ]


def test_every_route_is_404_for_another_tenant(stack, owned, other_key):
    before = snapshot(stack, owned)
    # The snapshot sees every kind of state B could touch.
    assert before["processes"] and before["sessions"] == ["s1"], before
    assert before["ports"]["ports"] and before["tunnels"]["tunnels"], before
    assert "keep.txt" in before["files"] and before["record"]["state"] == "running", before
    for method, path, kw in routes(owned):
        r = stack.api(method, path, key=other_key, timeout=30, **kw)
        assert r.status_code == 404, "tenant B: %s %s -> %d %s" % (
            method, path, r.status_code, r.text[:200])
        if r.headers.get("Content-Type", "").startswith("application/json"):
            assert_error(r, 404, "SANDBOX_NOT_FOUND")
        else:
            pytest.fail("%s %s: a 404 that is not JSON: %r %r" % (
                method, path, r.headers.get("Content-Type"), r.text[:200]))
    # DELETE of another tenant's sandbox is a 204 that does nothing.
    r = stack.api("DELETE", "/v1/sandboxes/" + owned, key=other_key, timeout=30)
    assert r.status_code == 204, r.text
    # The listing of B never shows A's sandbox.
    r = stack.api("GET", "/v1/sandboxes", key=other_key)
    assert r.status_code == 200 and owned not in [s["id"] for s in r.json()["sandboxes"]]
    # Preview of A's port with B's nothing: tokens are per sandbox; B's own
    # sandbox of the same id is a different sandbox.
    after = snapshot(stack, owned)
    assert after == before, "tenant B changed tenant A's sandbox:\nbefore %s\nafter  %s" % (
        json.dumps(before, sort_keys=True), json.dumps(after, sort_keys=True))
    assert "PWNED" not in after["files"] and "moved.txt" not in after["files"]
    assert ("p1", "running") == after["processes"][0][:2]


def test_same_id_in_two_tenants_are_two_sandboxes(stack, owned, other_key):
    before = snapshot(stack, owned)
    r = stack.api("PUT", "/v1/sandboxes/" + owned, key=other_key, json={}, timeout=30)
    assert r.status_code == 201, "B's PUT of A's id must create B's own sandbox: %s" % r.text
    try:
        out = run(stack, owned, "cat /workspace/keep.txt 2>&1; echo mine > /workspace/b.txt",
                  key=other_key)
        assert "tenant-a" not in out["stdout"], "B reads A's file: %r" % out
        for route in routes(owned):
            if route[0] == "GET":
                r = stack.api(route[0], route[1], key=other_key, timeout=30, **route[2])
                assert r.status_code < 500, "%s %s -> %d" % (route[0], route[1], r.status_code)
    finally:
        r = stack.api("DELETE", "/v1/sandboxes/" + owned, key=other_key, timeout=30)
        assert r.status_code == 204
    after = snapshot(stack, owned)
    assert after == before, "B's same-id sandbox touched A's:\n%s\n%s" % (before, after)
    assert "b.txt" not in after["files"]


def test_a_tenant_key_cannot_reach_admin_or_other_tenants(stack, owned, other_key):
    r = stack.api("GET", "/v1/nodes", key=other_key)
    assert_error(r, 403, "FORBIDDEN")
    r = stack.api("GET", "/v1/sandboxes?tenant=dev", key=other_key)
    assert_error(r, 403, "FORBIDDEN")


# ---- isolation extras --------------------------------------------------------


@pytest.fixture
def box(stack):
    sid = sid_of("iso")
    r = stack.api("PUT", "/v1/sandboxes/" + sid, timeout=30)
    assert r.status_code == 201, r.text
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


SETUID_PROBE = r"""
import os, subprocess, sys
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
for cmd in (["/workspace/suid-id"], ["/workspace/suid-py", "-c",
            "import os; print('py euid=%d' % os.geteuid())"],
            ["/usr/bin/su", "-c", "id", "root"], ["/usr/bin/passwd", "-d", "root"],
            ["sudo", "id"]):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        print("%s rc=%d out=%s err=%s" % (cmd[0], p.returncode, p.stdout.strip(), p.stderr.strip()[:80]))
    except (OSError, subprocess.TimeoutExpired) as e:
        print("%s failed %s" % (cmd[0], type(e).__name__))
print("final euid=%d" % os.geteuid())
"""


def test_setuid_binaries_grant_nothing(stack, box):
    res = run(stack, box, "cp /usr/bin/id /workspace/suid-id && "
                          "cp $(readlink -f /usr/bin/python3) /workspace/suid-py && "
                          "chmod 4755 /workspace/suid-id /workspace/suid-py && "
                          "ls -l /workspace/suid-id | cut -c1-10")
    assert res["stdout"].strip() in ("-rwsr-xr-x", ""), res
    r = stack.api("PUT", "/v1/sandboxes/%s/files/probe.py" % box, data=SETUID_PROBE.encode())
    assert r.status_code == 201, r.text
    out = run(stack, box, "python3 /workspace/probe.py")
    text = out["stdout"] + out["stderr"]
    assert out["exitCode"] == 0, out
    assert "euid=0" not in text, "a setuid binary raised privileges:\n%s" % text
    for line in text.splitlines():
        if line.startswith("/usr/bin/su ") or line.startswith("/usr/bin/passwd "):
            assert "rc=0" not in line, "su/passwd worked for an unprivileged user: %s" % line
    assert "final euid=65534" in text
    assert "uid=65534" in text, text
    # Nothing was changed by passwd: root still has its generated entry.
    assert "root:" in run(stack, box, "cat /etc/passwd")["stdout"]


HOSTILE_CWDS = ["/../../..", "../../../../..", "/proc/1/root", "/proc/self/root",
                "/proc/1/cwd", "/workspace/to-root", "/workspace/to-proc-root",
                "/workspace/to-proc-root/proc/1/root", "/proc/1/root/proc/1/root"]


def test_hostile_cwd_stays_inside(stack, box):
    run(stack, box, "ln -s / /workspace/to-root; ln -s /proc/1/root /workspace/to-proc-root; "
                    "touch /workspace/inside-marker")
    for cwd in HOSTILE_CWDS:
        r = stack.api("POST", "/v1/sandboxes/%s/exec" % box, timeout=30,
                      json={"command": "pwd -P; ls -A; test -e /work/main/Makefile && echo HOST; "
                                       "test -e ./work/main/Makefile && echo HOSTCWD; "
                                       "ls -A workspace 2>/dev/null",
                            "cwd": cwd})
        if r.status_code == 400:
            assert_error(r, 400, "VALIDATION_FAILED")
            continue
        assert r.status_code == 200, "cwd %r: %d %s" % (cwd, r.status_code, r.text[:200])
        res = r.json()
        if res["exitCode"] in (126, 127) and "cannot" in res["stderr"]:
            continue  # refused to start there: fine
        out = res["stdout"]
        assert "HOST" not in out, "cwd %r reaches the host: %r" % (cwd, res)
        lines = out.splitlines()
        entries = set(lines[1:])
        # Wherever it is, it is the sandbox's tree: its root has workspace
        # (with our marker), never the host's /work.
        assert "work" not in entries, "cwd %r lists the host root: %r" % (cwd, out)
        if "workspace" in entries:
            assert "inside-marker" in entries, "cwd %r: a root that is not the sandbox's: %r" % (
                cwd, out)
    # The file API agrees: the links resolve inside.
    r = stack.api("GET", "/v1/sandboxes/%s/files/to-root%%2Fworkspace%%2Finside-marker" % box)
    assert r.status_code == 200, r.text
