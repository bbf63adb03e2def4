"""The Files API acts for the sandbox, not for the host: its work runs in a
helper process that has joined the sandbox (cgroups, mount and user
namespaces, the sandbox root's credentials), off the agent's event loop.
docs/SECURITY.md "File API" names each test here.
"""

import base64
import os
import shutil
import socket
import threading
import time
import uuid
from urllib.parse import urlparse

import pytest
import requests

from conftest import assert_error
from sbxproc import rss_kib
from test_files import MiB, destroy, files, new_box, sh
from test_runtime import sbx  # noqa: F401  (a stack per user-namespace mode)


def node_pid(stack, api, sid):
    return stack.pid(api("GET", "/v1/sandboxes/" + sid).json()["node"])


def mount_points(api, sid):
    """The mount points of the sandbox's own mount table (its init's)."""
    out = sh(api, sid, "cat /proc/1/mountinfo")
    return sorted({line.split()[4] for line in out.splitlines() if line.strip()})


def shmem_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1])
    raise AssertionError("no Shmem in /proc/meminfo")


def neighbour(stack, api, sid):
    """A new sandbox on the node of sid (the stack has two nodes)."""
    node = api("GET", "/v1/sandboxes/" + sid).json()["node"]
    spare = []
    try:
        for _ in range(8):
            other = new_box(api)
            if api("GET", "/v1/sandboxes/" + other).json()["node"] == node:
                return other
            spare.append(other)
        raise AssertionError("no second sandbox on node %s" % node)
    finally:
        for o in spare:
            destroy(api, o)


def test_heavy_file_calls_leave_the_loop_free(stack, api):
    """Recursive lists of 100 000 entries, recursive deletes and 10 MiB
    utf-8 reads (a 60 MiB answer each) on one sandbox while another
    sandbox's exec keeps answering: the agent's loop and its heartbeat
    never stall (before: the node's lease lapsed, exec got 503)."""
    heavy = new_box(api)
    other = neighbour(stack, api, heavy)
    try:
        sh(api, heavy, "python3 -c \"import os\n"
                       "for d in range(100):\n"
                       "  p='/workspace/t/%d' % d; os.makedirs(p)\n"
                       "  for f in range(1000): open(p+'/f%d' % f, 'w').close()\n"
                       "open('/workspace/big.txt','wb').write(b'\\x01' * (10 * 1024 * 1024))\"")
        stop = time.monotonic() + 8
        heavy_status = []

        def reader():
            while time.monotonic() < stop:
                with api("GET", files(heavy, "big.txt") + "?encoding=utf-8", stream=True,
                         timeout=120) as r:
                    n = sum(len(c) for c in r.iter_content(1 << 20))
                    heavy_status.append((r.status_code, n))

        def lister():
            while time.monotonic() < stop:
                r = api("GET", files(heavy, "t", "dirs") + "?recursive=true&limit=10", timeout=120)
                heavy_status.append((r.status_code, len(r.content)))

        def deleter():
            i = 0
            while time.monotonic() < stop:
                sh(api, heavy, "mkdir -p /workspace/c%d && cp -r /workspace/t/1 /workspace/t/2 "
                               "/workspace/t/3 /workspace/c%d/" % (i, i))
                r = api("DELETE", files(heavy, "c%d" % i) + "?recursive=true", timeout=120)
                heavy_status.append((r.status_code, 0))
                i += 1

        threads = [threading.Thread(target=reader) for _ in range(6)]
        threads += [threading.Thread(target=lister) for _ in range(2)]
        threads += [threading.Thread(target=deleter)]
        for t in threads:
            t.start()
        worst = 0.0
        answers = 0
        try:
            while time.monotonic() < stop:
                t0 = time.monotonic()
                r = api("POST", "/v1/sandboxes/%s/exec" % other, json={"command": "echo ok"},
                        timeout=60)
                worst = max(worst, time.monotonic() - t0)
                assert r.status_code == 200, "exec during heavy file calls: %d %s" % (
                    r.status_code, r.text[:300])
                assert r.json()["stdout"] == "ok\n"
                answers += 1
                time.sleep(0.2)
        finally:
            for t in threads:
                t.join()
        print("exec answered %d times, slowest %.0f ms, %d heavy calls" % (
            answers, worst * 1000, len(heavy_status)))
        assert answers > 0
        assert heavy_status and all(s in (200, 204, 503) for s, _ in heavy_status), heavy_status
    finally:
        destroy(api, heavy)
        destroy(api, other)


def test_stalled_encoded_readers_hold_no_agent_memory(stack, api):
    """8 clients that ask for a 10 MiB file as utf-8 JSON (60 MiB each) and
    stop reading: the answer is streamed in bounded records, so the
    agent's RSS stays flat (before: +361 MiB)."""
    sid = new_box(api)
    socks = []
    try:
        sh(api, sid, "python3 -c \"open('/workspace/big.txt','wb').write(b'\\x01' * (10 * 1024 * 1024))\"")
        pid = node_pid(stack, api, sid)
        before = rss_kib(pid)
        u = urlparse(stack.url)
        for _ in range(8):
            s = socket.create_connection((u.hostname, u.port), timeout=30)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(("GET %s?encoding=utf-8 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
                       % (files(sid, "big.txt"), stack.key)).encode())
            assert s.recv(64).startswith(b"HTTP/1.1 200")
            socks.append(s)
        time.sleep(3)
        grown = rss_kib(pid) - before
        print("agent RSS grew %d KiB with 8 stalled readers" % grown)
        assert grown < 32 * 1024, "agent RSS grew %d KiB" % grown
    finally:
        for s in socks:
            s.close()
        destroy(api, sid)
    # a reader that goes on reading gets the whole answer
    sid = new_box(api)
    try:
        text = 'a\tb"c\\d\x01\u00e9\u20ac\U0001f600\n' * 5000
        assert api("PUT", files(sid, "t.txt"), data=text.encode()).status_code == 201
        r = api("GET", files(sid, "t.txt") + "?encoding=utf-8")
        assert r.status_code == 200, r.text
        j = r.json()
        assert j["content"] == text and j["size"] == len(text.encode()) and j["isBinary"] is False
        r = api("GET", files(sid, "t.txt") + "?encoding=base64")
        assert base64.b64decode(r.json()["content"]) == text.encode()
        assert r.json()["isBinary"] is False
        bad = text.encode() + b"\xff"
        assert api("PUT", files(sid, "b.bin"), data=bad).status_code == 201
        assert_error(api("GET", files(sid, "b.bin") + "?encoding=utf-8"), 400, "VALIDATION_FAILED")
        r = api("GET", files(sid, "b.bin") + "?encoding=base64")
        assert base64.b64decode(r.json()["content"]) == bad and r.json()["isBinary"] is True
    finally:
        destroy(api, sid)


def test_file_calls_have_the_sandbox_roots_permissions(sbx):
    """A 0700 directory owned by the host's root inside the image: with a
    user namespace, `ls` in the sandbox gets EACCES, and so does the Files
    API (before: listed and read as host root). Without one the sandbox's
    root is the host's root with its capabilities, and both may read it."""
    api = sbx.api
    image = None
    images = os.path.join(sbx.dir, "images", "default")
    for name in sorted(os.listdir(images)):
        if os.path.isdir(os.path.join(images, name, "etc")):
            image = os.path.join(images, name)
    assert image, "no default image under %s" % images
    secret = "sbx-secret-" + uuid.uuid4().hex[:8]
    d = os.path.join(image, "opt", secret)
    os.makedirs(d)
    try:
        with open(os.path.join(d, "key"), "w") as f:
            f.write("host secret\n")
        os.chmod(os.path.join(d, "key"), 0o644)
        os.chown(d, 0, 0)
        os.chmod(d, 0o700)
        sid = new_box(api)
        try:
            off = sh(api, sid, "cat /proc/self/uid_map").split()[:2] == ["0", "0"]
            p = "/opt/" + secret
            res = api("POST", "/v1/sandboxes/%s/exec" % sid,
                      json={"command": "ls %s; cat %s/key" % (p, p)}).json()
            if off:
                assert res["exitCode"] == 0 and res["stdout"] == "key\nhost secret\n", res
                assert [e["name"] for e in api("GET", files(sid, p, "dirs")).json()["entries"]] == ["key"]
                assert api("GET", files(sid, p + "/key")).content == b"host secret\n"
            else:
                assert res["exitCode"] != 0 and "Permission denied" in res["stderr"], res
                for r in (api("GET", files(sid, p, "dirs")), api("GET", files(sid, p + "/key")),
                          api("GET", files(sid, p + "/key") + "?encoding=utf-8"),
                          api("GET", files(sid, p + "/key", "stat")),
                          api("PUT", files(sid, p + "/new"), data=b"x"),
                          api("DELETE", files(sid, p + "/key"))):
                    assert r.status_code == 400, (r.request.method, r.request.url, r.status_code,
                                                  r.text)
                    assert "host secret" not in r.text and "entries" not in r.json()
                    assert_error(r, 400, "VALIDATION_FAILED")
                assert os.path.exists(os.path.join(d, "key"))
            # what the sandbox's root may do, the API still does
            assert api("PUT", files(sid, "mine/f.txt"), data=b"mine").status_code == 201
            assert sh(api, sid, "stat -c '%u:%g' /workspace/mine/f.txt /workspace/mine") == "0:0\n0:0\n"
        finally:
            destroy(api, sid)
    finally:
        shutil.rmtree(d)


def test_mount_points_are_busy_to_the_files_api(sbx):
    """Every mount point of the sandbox's mount table: DELETE, a move of
    it and a move of an empty directory over it are refused with a 4xx and
    the mount table is unchanged (before: DELETE /dev/null and moves over
    /dev/shm, /sys, /usr, /dev/pts detached those mounts)."""
    api = sbx.api
    sid = new_box(api)
    try:
        before = mount_points(api, sid)
        assert "/dev/null" in before and "/dev/shm" in before and "/usr" in before, before
        for i, mp in enumerate(p for p in before if p != "/"):
            for r in (api("DELETE", files(sid, mp)),
                      api("DELETE", files(sid, mp) + "?recursive=true"),
                      api("POST", "/v1/sandboxes/%s/move" % sid,
                          json={"from": mp, "to": "/workspace/moved-%d" % i}),
                      api("POST", "/v1/sandboxes/%s/move" % sid,
                          json={"from": mp, "to": mp + "-moved"})):
                assert r.status_code in (400, 409), (mp, r.request.method, r.status_code, r.text)
                assert r.json()["error"]["code"] in ("CONFLICT", "VALIDATION_FAILED",
                                                     "NOT_REGULAR_FILE", "IS_DIRECTORY"), r.text
            assert api("PUT", files(sid, "/workspace/empty-%d" % i, "dirs")).status_code == 201
            r = api("POST", "/v1/sandboxes/%s/move" % sid,
                    json={"from": "/workspace/empty-%d" % i, "to": mp, "overwrite": True})
            assert r.status_code in (400, 409), (mp, r.status_code, r.text)
            assert mount_points(api, sid) == before, "after %s" % mp
        for mp in ("/dev/null", "/dev/shm", "/sys", "/usr", "/dev/pts"):
            r = api("DELETE", files(sid, mp) + "?recursive=true")
            if mp in ("/dev/null", "/dev/shm", "/dev/pts"):
                assert_error(r, 409, "CONFLICT")
        assert mount_points(api, sid) == before
        assert sh(api, sid, "echo x > /dev/null && ls /usr/bin/env && echo ok") == "/usr/bin/env\nok\n"
    finally:
        destroy(api, sid)


def body_len(answer):
    """The Content-Length of a raw answer's head (0 until it is all in)."""
    head = answer.split(b"\r\n\r\n", 1)[0]
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def put_slowly(stack, sid, path, size, before_rest):
    """PUT size bytes to path over a raw socket: half, then before_rest(),
    then the rest. The status line and body of the answer."""
    u = urlparse(stack.url)
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    try:
        s.sendall(("PUT %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: %d\r\n\r\n" % (files(sid, path), stack.key, size)).encode())
        block = b"u" * MiB
        half = size // 2
        for _ in range(half // MiB):
            s.sendall(block)
        before_rest()
        try:
            for _ in range((size - half) // MiB):
                s.sendall(block)
        except OSError:
            pass    # the agent answered and the proxy closed: fine
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < body_len(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data
    finally:
        s.close()


def test_upload_ends_when_its_sandbox_is_deleted(sbx):
    """DELETE of the sandbox during an upload: the upload ends with 503
    NODE_UNAVAILABLE, as exec does (before: it went on writing and
    answered 201)."""
    api = sbx.api
    sid = new_box(api)
    try:
        answer = put_slowly(sbx, sid, "up.bin", 64 * MiB,
                            lambda: (api("DELETE", "/v1/sandboxes/" + sid, timeout=30), time.sleep(0.5)))
        status = answer.split(b"\r\n", 1)[0]
        assert status.startswith(b"HTTP/1.1 503") and b"NODE_UNAVAILABLE" in answer, answer[:300]
    finally:
        destroy(api, sid)


def test_upload_beyond_the_memory_limit_is_refused_and_not_kept(sbx):
    """A 96 MiB upload into a sandbox of 32 MiB memory (and a larger disk):
    the tmpfs pages are charged to the sandbox, so it fails with 413
    FILE_TOO_LARGE, leaves no file, and the host's Shmem does not keep the
    bytes (before: 201 and +96 MiB host Shmem outside any limit)."""
    api = sbx.api
    sid = new_box(api, resources={"memoryMiB": 32, "diskMiB": 1024})
    try:
        before = shmem_kib()
        r = api("PUT", files(sid, "big.bin"), data=b"m" * (96 * MiB), timeout=120)
        assert_error(r, 413, "FILE_TOO_LARGE")
        # the sandbox's memory cgroup holds no more than its processes
        node = api("GET", "/v1/sandboxes/" + sid).json()["node"]
        with open(os.path.join(sbx.dir, "cgroup_parent")) as f:
            usage = os.path.join("/sys/fs/cgroup/memory", f.read().strip(), node,
                                 "dev." + sid, "memory.usage_in_bytes")
        with open(usage) as f:
            used = int(f.read())
        assert used < 24 * MiB, "the sandbox's memory cgroup holds %d bytes" % used
        # the host's Shmem did not keep the bytes (other tests on the host
        # move it too: the least growth over a few looks)
        grown = None
        for _ in range(6):
            g = shmem_kib() - before
            grown = g if grown is None else min(grown, g)
            if grown < 24 * 1024:
                break
            time.sleep(0.5)
        print("host Shmem grew %d KiB, the sandbox's cgroup holds %d KiB" % (grown, used // 1024))
        assert grown < 24 * 1024, "host Shmem grew %d KiB" % grown
        assert sh(api, sid, "ls -A /workspace") == ""
        assert api("PUT", files(sid, "small.txt"), data=b"ok").status_code == 201
        assert sh(api, sid, "echo alive") == "alive\n"
    finally:
        destroy(api, sid)


def test_encoded_read_cut_off_by_a_delete_never_looks_whole(stack, api):
    """A utf-8 read under way when its sandbox is deleted: the helper dies
    with the sandbox and the answer is cut off (no final chunk), so the
    client never takes a short answer for a whole one."""
    sid = new_box(api)
    try:
        sh(api, sid, "python3 -c \"open('/workspace/big.txt','wb').write(b'\\x01' * (10 * 1024 * 1024))\"")
        got = 0
        with api("GET", files(sid, "big.txt") + "?encoding=utf-8", stream=True, timeout=60) as r:
            assert r.status_code == 200
            it = r.iter_content(64 * 1024)
            got += len(next(it))
            assert api("DELETE", "/v1/sandboxes/" + sid, timeout=30).status_code == 204
            with pytest.raises(requests.exceptions.ChunkedEncodingError):
                for chunk in it:
                    got += len(chunk)
        assert got < 6 * 10 * MiB, got
    finally:
        destroy(api, sid)
