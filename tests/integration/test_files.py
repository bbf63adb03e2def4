"""The Files API, black box through nginx: round trips, streaming with flat
agent memory, every error code, hostile paths and symlinks made inside the
sandbox (reads stay inside, writes never touch the host), FIFOs, broken
uploads and a full disk. docs/SECURITY.md "File API" lists what each test
shows.
"""

import base64
import hashlib
import http.client
import json
import os
import socket
import tempfile
import time
import uuid
from urllib.parse import quote, urlparse

import pytest

from conftest import assert_error
from sbxproc import rss_kib

MiB = 1024 * 1024


def new_box(api, **body):
    sid = "fs-" + uuid.uuid4().hex[:10]
    r = api("PUT", "/v1/sandboxes/" + sid, json=body, timeout=30)
    assert r.status_code == 201, "create %s: %d %s" % (sid, r.status_code, r.text[:300])
    return sid


def destroy(api, sid):
    api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def run(api, sid, command, timeout=60):
    r = api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command}, timeout=timeout)
    assert r.status_code == 200, "exec %r: %d %s" % (command, r.status_code, r.text[:300])
    return r.json()


def sh(api, sid, command):
    res = run(api, sid, command)
    assert res["exitCode"] == 0, "%r failed: %r" % (command, res)
    return res["stdout"]


def fpath(p):
    """The URL part for a sandbox path: percent-encoded, '/' too, so an
    absolute path is one segment starting with %2F."""
    return quote(p, safe="")


def files(sid, p, kind="files"):
    return "/v1/sandboxes/%s/%s/%s" % (sid, kind, fpath(p))


def raw_request(stack, method, target, body=b"", headers=None):
    """One request with the target sent byte for byte (no normalisation)."""
    u = urlparse(stack.url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    h = {"Authorization": "Bearer " + stack.key}
    h.update(headers or {})
    c.putrequest(method, target, skip_accept_encoding=True)
    for k, v in h.items():
        c.putheader(k, v)
    c.putheader("Content-Length", str(len(body)))
    c.endheaders()
    if body:
        c.send(body)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


@pytest.fixture(scope="module")
def box(stack):
    sid = new_box(stack.api)
    yield sid
    destroy(stack.api, sid)


# -- round trips ---------------------------------------------------------------

def test_text_round_trip_and_replace(api, box):
    p = "notes/hello.txt"
    r = api("PUT", files(box, p), data="héllo wörld\n".encode())
    assert r.status_code == 201, r.text
    assert r.json() == {"path": "/workspace/notes/hello.txt", "size": 14}
    r = api("GET", files(box, p))
    assert r.status_code == 200
    assert r.content == "héllo wörld\n".encode()
    assert r.headers["Content-Type"].startswith("text/plain")
    assert r.headers["Content-Length"] == "14"
    assert sh(api, box, "cat /workspace/notes/hello.txt") == "héllo wörld\n"
    r = api("PUT", files(box, p), data=b"second\n")
    assert r.status_code == 200, r.text
    assert api("GET", files(box, "/workspace/notes/hello.txt")).content == b"second\n"


def test_binary_round_trip_checksums_inside_and_out(api, box):
    data = os.urandom(3 * MiB + 17)
    digest = hashlib.sha256(data).hexdigest()
    r = api("PUT", files(box, "bin/blob.bin") + "?mode=0600", data=data, timeout=60)
    assert r.status_code == 201, r.text
    inside = sh(api, box, "sha256sum /workspace/bin/blob.bin").split()[0]
    assert inside == digest
    got = api("GET", files(box, "bin/blob.bin"), timeout=60)
    assert got.headers["Content-Type"] == "application/octet-stream"
    assert hashlib.sha256(got.content).hexdigest() == digest
    st = api("GET", files(box, "bin/blob.bin", "stat")).json()
    assert st["type"] == "file" and st["size"] == len(data) and st["mode"] == "0600"
    # owned by the sandbox's root, whatever the user namespace maps it to
    assert sh(api, box, "stat -c %u:%g /workspace/bin/blob.bin").strip() == "0:0"


def test_json_encodings(api, box):
    api("PUT", files(box, "enc/t.json"), data=b'{"a": 1}')
    r = api("GET", files(box, "enc/t.json") + "?encoding=utf-8")
    assert r.status_code == 200
    assert r.json() == {"path": "/workspace/enc/t.json", "content": '{"a": 1}', "encoding": "utf-8",
                        "size": 8, "mimeType": "application/json", "isBinary": False}
    api("PUT", files(box, "enc/b.png"), data=b"\x89PNG\xff\x00\x01")
    r = api("GET", files(box, "enc/b.png") + "?encoding=base64")
    body = r.json()
    assert body["encoding"] == "base64" and body["isBinary"] is True
    assert base64.b64decode(body["content"]) == b"\x89PNG\xff\x00\x01"
    assert body["mimeType"] == "image/png"
    assert_error(api("GET", files(box, "enc/b.png") + "?encoding=utf-8"), 400, "VALIDATION_FAILED")
    assert_error(api("GET", files(box, "enc/b.png") + "?encoding=latin1"), 400, "VALIDATION_FAILED")
    sh(api, box, "head -c 34000000 /dev/zero > /workspace/enc/big")  # over 32 MiB
    assert_error(api("GET", files(box, "enc/big") + "?encoding=base64"), 413, "FILE_TOO_LARGE")


def test_range_reads(api, box):
    api("PUT", files(box, "r.txt"), data=b"0123456789")
    r = api("GET", files(box, "r.txt"), headers={"Range": "bytes=2-4"})
    assert r.status_code == 206 and r.content == b"234"
    assert r.headers["Content-Range"] == "bytes 2-4/10"
    r = api("GET", files(box, "r.txt"), headers={"Range": "bytes=7-"})
    assert r.status_code == 206 and r.content == b"789"
    r = api("GET", files(box, "r.txt"), headers={"Range": "bytes=-3"})
    assert r.status_code == 206 and r.content == b"789"
    r = api("GET", files(box, "r.txt"), headers={"Range": "bytes=5-100"})
    assert r.status_code == 206 and r.content == b"56789"
    r = api("GET", files(box, "r.txt"), headers={"Range": "bytes=10-"})
    assert_error(r, 416, "RANGE_NOT_SATISFIABLE")
    assert r.headers["Content-Range"] == "bytes */10"
    r = api("GET", files(box, "r.txt"), headers={"Range": "items=1-2"})
    assert r.status_code == 200 and r.content == b"0123456789"


# -- directories, stat, move, delete -------------------------------------------

def test_dirs_list_hidden_recursive_and_paging(api, box):
    r = api("PUT", files(box, "tree/a/b", "dirs"))
    assert r.status_code == 201 and r.json() == {"path": "/workspace/tree/a/b"}
    assert api("PUT", files(box, "tree/a/b", "dirs")).status_code == 200
    for name in ["tree/x.txt", "tree/.hid", "tree/a/y.txt", "tree/a/b/z.txt"]:
        assert api("PUT", files(box, name), data=b"x").status_code == 201
    body = api("GET", files(box, "tree", "dirs")).json()
    assert body["path"] == "/workspace/tree"
    assert [e["name"] for e in body["entries"]] == ["a", "x.txt"]
    a = body["entries"][0]
    assert a["type"] == "directory" and a["mode"] == "0755" and a["path"] == "/workspace/tree/a"
    assert a["modifiedAt"].endswith("Z")
    names = [e["path"] for e in api("GET", files(box, "tree", "dirs") +
                                    "?recursive=true&hidden=true").json()["entries"]]
    assert names == ["/workspace/tree/.hid", "/workspace/tree/a", "/workspace/tree/a/b",
                     "/workspace/tree/a/b/z.txt", "/workspace/tree/a/y.txt",
                     "/workspace/tree/x.txt"]
    seen, cursor = [], None
    while True:
        q = "?recursive=true&hidden=true&limit=2" + ("&cursor=" + cursor if cursor else "")
        page = api("GET", files(box, "tree", "dirs") + q).json()
        seen += [e["path"] for e in page["entries"]]
        cursor = page.get("cursor")
        if not cursor:
            break
    assert seen == names
    assert_error(api("GET", files(box, "tree", "dirs") + "?limit=0"), 400, "VALIDATION_FAILED")
    assert_error(api("GET", files(box, "tree", "dirs") + "?limit=10001"), 400, "VALIDATION_FAILED")
    assert_error(api("GET", files(box, "tree", "dirs") + "?cursor=zz"), 400, "VALIDATION_FAILED")
    assert_error(api("GET", files(box, "tree", "dirs") + "?recursive=maybe"), 400,
                 "VALIDATION_FAILED")
    assert_error(api("GET", files(box, "tree/x.txt", "dirs")), 400, "NOT_DIRECTORY")
    assert_error(api("GET", files(box, "nope", "dirs")), 404, "FILE_NOT_FOUND")
    assert_error(api("PUT", files(box, "tree/x.txt", "dirs")), 409, "FILE_EXISTS")
    assert_error(api("PUT", files(box, "tree/x.txt/sub", "dirs")), 409, "FILE_EXISTS")
    root = api("GET", files(box, "/", "dirs")).json()
    assert "workspace" in [e["name"] for e in root["entries"]]


def test_stat_and_move(api, box):
    api("PUT", files(box, "mv/a.txt"), data=b"A")
    api("PUT", files(box, "mv/b.txt"), data=b"B")
    st = api("GET", files(box, "mv/a.txt", "stat"))
    assert st.status_code == 200 and st.json()["name"] == "a.txt"
    assert_error(api("GET", files(box, "mv/none", "stat")), 404, "FILE_NOT_FOUND")
    mv = "/v1/sandboxes/%s/move" % box
    assert_error(api("POST", mv, json={"from": "mv/none", "to": "mv/c.txt"}), 404,
                 "FILE_NOT_FOUND")
    assert_error(api("POST", mv, json={"from": "mv/a.txt", "to": "mv/b.txt"}), 409, "FILE_EXISTS")
    assert api("GET", files(box, "mv/b.txt")).content == b"B"
    r = api("POST", mv, json={"from": "mv/a.txt", "to": "/workspace/mv/b.txt", "overwrite": True})
    assert r.status_code == 200 and r.json() == {"from": "/workspace/mv/a.txt",
                                                  "to": "/workspace/mv/b.txt"}
    assert api("GET", files(box, "mv/b.txt")).content == b"A"
    assert_error(api("GET", files(box, "mv/a.txt")), 404, "FILE_NOT_FOUND")
    r = api("POST", mv, json={"from": "mv/b.txt", "to": "mv/c.txt"})
    assert r.status_code == 200
    assert_error(api("POST", mv, json={"from": "mv/c.txt"}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", mv, json={"from": "mv/c.txt", "to": "x", "extra": 1}), 400,
                 "VALIDATION_FAILED")
    assert_error(api("POST", mv, json={"from": "../c.txt", "to": "x"}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", mv, json={"from": "mv/c.txt", "to": "/"}), 400, "VALIDATION_FAILED")


def test_delete(api, box):
    api("PUT", files(box, "del/d/f.txt"), data=b"x")
    api("PUT", files(box, "del/g.txt"), data=b"x")
    assert api("DELETE", files(box, "del/g.txt")).status_code == 204
    assert_error(api("DELETE", files(box, "del/g.txt")), 404, "FILE_NOT_FOUND")
    assert_error(api("DELETE", files(box, "del")), 400, "IS_DIRECTORY")
    assert api("DELETE", files(box, "del") + "?recursive=true").status_code == 204
    assert_error(api("GET", files(box, "del", "stat")), 404, "FILE_NOT_FOUND")
    assert_error(api("DELETE", files(box, "/")), 400, "VALIDATION_FAILED")


def test_error_codes_for_kinds_of_files(api, box):
    sh(api, box, "mkdir -p /workspace/k && mkfifo /workspace/k/fifo && "
                 "echo x > /workspace/k/file")
    assert_error(api("GET", files(box, "k")), 400, "IS_DIRECTORY")
    assert_error(api("GET", files(box, "k/none")), 404, "FILE_NOT_FOUND")
    assert_error(api("GET", files(box, "k/file/below")), 400, "NOT_DIRECTORY")
    t0 = time.monotonic()
    assert_error(api("GET", files(box, "k/fifo"), timeout=5), 400, "NOT_REGULAR_FILE")
    assert_error(api("PUT", files(box, "k/fifo"), data=b"x", timeout=5), 400, "NOT_REGULAR_FILE")
    assert time.monotonic() - t0 < 3, "a FIFO made the agent wait"
    assert_error(api("GET", files(box, "/dev/null")), 400, "NOT_REGULAR_FILE")
    assert_error(api("GET", files(box, "/dev/zero")), 400, "NOT_REGULAR_FILE")
    # /proc and /sys are never read or written by the agent (host root)
    assert_error(api("GET", files(box, "/proc/1/status")), 400, "NOT_REGULAR_FILE")
    assert_error(api("GET", files(box, "/proc/version")), 400, "NOT_REGULAR_FILE")
    assert api("PUT", files(box, "/proc/sys/kernel/core_pattern"), data=b"|/x").status_code == 400
    assert_error(api("PUT", files(box, "k"), data=b"x"), 400, "IS_DIRECTORY")
    assert_error(api("PUT", files(box, "x") + "?mode=4755", data=b"x"), 400, "VALIDATION_FAILED")
    assert_error(api("PUT", files(box, "x") + "?mode=abc", data=b"x"), 400, "VALIDATION_FAILED")


# -- hostile paths ---------------------------------------------------------------

def test_hostile_paths_are_refused(stack, api, box):
    base = "/v1/sandboxes/%s/files/" % box
    # dot segments in the URL itself: nginx and the routing check refuse them
    # (400) or they no longer name a data route (404 NOT_FOUND); never a file
    for target in [base + "../../../etc/passwd", base + "%2e%2e/%2e%2e/etc/passwd",
                   base + "a/../../../../etc/passwd", base + "./a"]:
        for method in ("GET", "PUT", "DELETE"):
            status, data = raw_request(stack, method, target, b"x" if method == "PUT" else b"")
            assert status in (400, 404), "%s %s -> %d %r" % (method, target, status, data[:200])
            assert json.loads(data)["error"]["code"] in ("VALIDATION_FAILED", "NOT_FOUND")
    # inside one segment nginx still normalises them for its location match
    # (404 NOT_FOUND when the result is no data route); when the result is
    # one, the agent gets the raw target and refuses the '..' (400)
    for target in [base + "%2F..%2F..%2F..%2Fetc%2Fpasswd", base + "a%2F..%2F..%2Fetc%2Fpasswd",
                   base + "a%2F..%2Fb", base + "x/a%2F..%2F..%2Fetc"]:
        for method in ("GET", "PUT", "DELETE"):
            status, data = raw_request(stack, method, target, b"x" if method == "PUT" else b"")
            assert status in (400, 404), "%s %s -> %d %r" % (method, target, status, data[:200])
            assert json.loads(data)["error"]["code"] in ("VALIDATION_FAILED", "NOT_FOUND")
    status, data = raw_request(stack, "GET", base + "a%2F..%2Fb")
    assert status == 400 and json.loads(data)["error"]["code"] == "VALIDATION_FAILED", data
    for target in [base + "a%00b", base + "%00", base + "a%ffb", base + "%c0%af",
                   base + "a%2", base + "a%zz", base + "x" * 4100,
                   base + "y" * 256, base + "a/" + "z" * 256 + "/b"]:
        for method in ("GET", "PUT", "DELETE"):
            status, data = raw_request(stack, method, target, b"x" if method == "PUT" else b"")
            assert status == 400, "%s %s -> %d %r" % (method, target[:80], status, data[:200])
            assert json.loads(data)["error"]["code"] == "VALIDATION_FAILED"
    status, _ = raw_request(stack, "GET", "/v1/sandboxes/%s/dirs/a%%2F..%%2F" % box)
    assert status == 400
    status, _ = raw_request(stack, "GET", "/v1/sandboxes/%s/stat/a%%00" % box)
    assert status == 400


def test_absolute_paths_name_the_sandbox_not_the_host(api, box):
    hosts = api("GET", files(box, "/etc/hosts")).content.decode()
    assert box in hosts
    shadow = api("GET", files(box, "/etc/shadow"))
    if shadow.status_code == 200 and os.path.exists("/etc/shadow"):
        with open("/etc/shadow", "rb") as f:
            assert shadow.content != f.read()
    else:
        assert_error(shadow, 404, "FILE_NOT_FOUND")
    r = api("PUT", files(box, "/etc/sbx-file-api-probe"), data=b"inside")
    assert r.status_code == 201
    assert not os.path.exists("/etc/sbx-file-api-probe")
    assert sh(api, box, "cat /etc/sbx-file-api-probe") == "inside"


@pytest.fixture
def canary():
    d = tempfile.mkdtemp(prefix="sbx-canary-", dir="/tmp")
    p = os.path.join(d, "canary.txt")
    with open(p, "w") as f:
        f.write("host original\n")
    yield d, p
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


def test_symlinks_stay_inside(api, box, canary):
    cdir, cfile = canary
    sh(api, box, "mkdir -p /workspace/ln && cd /workspace/ln && "
                 "ln -s / root && ln -s /etc/passwd pw && ln -s ../../.. up && "
                 "ln -s /proc/self/root pself && ln -s /proc/1/root p1 && "
                 "ln -s %s evil && ln -s %s evildir && ln -s /proc/1/cwd cwd" % (cfile, cdir))
    inside_pw = sh(api, box, "cat /etc/passwd").encode()
    assert api("GET", files(box, "ln/pw")).content == inside_pw
    assert api("GET", files(box, "ln/root/etc/passwd")).content == inside_pw
    assert box.encode() in api("GET", files(box, "ln/up/etc/hosts")).content
    listing = [e["name"] for e in api("GET", files(box, "ln/root", "dirs")).json()["entries"]]
    assert "workspace" in listing
    st = api("GET", files(box, "ln/pw", "stat")).json()
    assert st["type"] == "symlink"
    # magic links of /proc are never followed
    for p in ["ln/p1/etc/hosts", "ln/pself/etc/hosts", "ln/cwd/x", "/proc/1/root/etc/hosts",
              "/proc/self/root/etc/hosts"]:
        r = api("GET", files(box, p))
        assert 400 <= r.status_code < 500, "%s -> %d" % (p, r.status_code)
        r = api("PUT", files(box, p), data=b"pwned")
        assert 400 <= r.status_code < 500, "PUT %s -> %d" % (p, r.status_code)
    # the host file the symlinks name: never read, never written
    r = api("GET", files(box, "ln/evil"))
    assert r.status_code == 404 or b"host original" not in r.content
    assert api("PUT", files(box, "ln/evil"), data=b"pwned").status_code == 200
    assert api("PUT", files(box, "ln/evildir/canary.txt"), data=b"pwned").status_code < 500
    assert api("PUT", files(box, cfile), data=b"pwned").status_code == 201
    assert api("PUT", files(box, "ln/up" + cfile), data=b"pwned").status_code < 500
    api("DELETE", files(box, "ln/root" + cfile))
    api("POST", "/v1/sandboxes/%s/move" % box,
        json={"from": "ln/evil", "to": cfile, "overwrite": True})
    api("DELETE", files(box, "ln/evildir") + "?recursive=true")
    with open(cfile) as f:
        assert f.read() == "host original\n"
    assert os.listdir(cdir) == ["canary.txt"]
    # PUT replaced the link by a file inside the sandbox; DELETE of a link removes the link
    assert sh(api, box, "test -f /workspace/ln/evil && ! test -L /workspace/ln/evil && echo ok") == "ok\n"
    assert api("DELETE", files(box, "ln/pw")).status_code == 204
    assert sh(api, box, "test -f /etc/passwd && echo ok") == "ok\n"
    assert api("DELETE", files(box, "ln/root") + "?recursive=true").status_code == 204
    assert sh(api, box, "test -d /workspace && echo ok") == "ok\n"


# -- broken uploads, disk full, big streams --------------------------------------

def test_broken_upload_keeps_old_file_and_leaves_no_temp(stack, api, box):
    api("PUT", files(box, "brk/f.bin"), data=b"old content")
    u = urlparse(stack.url)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    head = ("PUT %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            "Content-Length: %d\r\n\r\n" % (files(box, "brk/f.bin"), stack.key, MiB))
    s.sendall(head.encode() + os.urandom(100 * 1024))
    time.sleep(0.5)
    s.close()
    time.sleep(1.0)
    assert api("GET", files(box, "brk/f.bin")).content == b"old content"
    names = [e["name"] for e in api("GET", files(box, "brk", "dirs") + "?hidden=true").json()["entries"]]
    assert names == ["f.bin"], names
    # a short body to a new name leaves nothing either
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    head = ("PUT %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            "Content-Length: %d\r\n\r\n" % (files(box, "brk/new.bin"), stack.key, MiB))
    s.sendall(head.encode() + b"x" * 1000)
    s.close()
    time.sleep(1.0)
    assert_error(api("GET", files(box, "brk/new.bin")), 404, "FILE_NOT_FOUND")
    assert sh(api, box, "ls -A /workspace/brk") == "f.bin\n"


def test_disk_full_answers_507_and_keeps_old_data(api):
    sid = new_box(api, resources={"diskMiB": 16})
    try:
        assert api("PUT", files(sid, "keep.txt"), data=b"precious").status_code == 201
        r = api("PUT", files(sid, "keep.txt"), data=os.urandom(32 * MiB), timeout=120)
        assert_error(r, 507, "NO_SPACE")
        assert api("GET", files(sid, "keep.txt")).content == b"precious"
        assert sh(api, sid, "ls -A /workspace") == "keep.txt\n"
        # the space came back: a small upload works again
        assert api("PUT", files(sid, "after.txt"), data=b"ok").status_code == 201
    finally:
        destroy(api, sid)


def test_200mb_streams_with_flat_agent_memory(stack, api, box):
    node = api("GET", "/v1/sandboxes/" + box).json()["node"]
    pid = stack.pid(node)
    size = 200 * MiB
    block = os.urandom(MiB)
    h = hashlib.sha256()
    with tempfile.TemporaryFile(dir="/tmp") as f:
        for i in range(200):
            chunk = block[i:] + block[:i]
            f.write(chunk)
            h.update(chunk)
        f.seek(0)
        before = rss_kib(pid)
        r = api("PUT", files(box, "big.bin"), data=f, timeout=300,
                headers={"Content-Length": str(size)})
        assert r.status_code == 201, r.text
        assert r.json()["size"] == size
    mid = rss_kib(pid)
    assert sh(api, box, "sha256sum /workspace/big.bin").split()[0] == h.hexdigest()
    d = hashlib.sha256()
    got = 0
    with api("GET", files(box, "big.bin"), stream=True, timeout=300) as r:
        assert r.status_code == 200 and r.headers["Content-Length"] == str(size)
        for chunk in r.iter_content(256 * 1024):
            d.update(chunk)
            got += len(chunk)
    after = rss_kib(pid)
    assert got == size and d.hexdigest() == h.hexdigest()
    assert mid - before < 30 * 1024, "agent RSS grew %d KiB on upload" % (mid - before)
    assert after - before < 30 * 1024, "agent RSS grew %d KiB" % (after - before)
    assert api("DELETE", files(box, "big.bin")).status_code == 204
