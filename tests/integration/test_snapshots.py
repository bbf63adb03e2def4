"""Snapshots, black box through nginx: a round trip of every file kind
checked by a manifest (path, type, mode, owner, size, sha256, link target),
restore in place and into another directory, export / import, hostile
archives (nothing outside the sandbox changes: a host canary), quota,
cross-tenant 404 and bad input. docs/SECURITY.md "Snapshots" lists what
each test shows.
"""

import hashlib
import io
import os
import tarfile
import uuid

import pytest

from conftest import assert_error, routed

MANIFEST = ("cd /workspace && find . -mindepth 1 | LC_ALL=C sort | while read -r p; do "
            "if [ -f \"$p\" ] && [ ! -L \"$p\" ]; then s=$(sha256sum \"$p\" | cut -c1-64); "
            "else s=-; fi; "
            "if [ -L \"$p\" ]; then l=$(readlink \"$p\"); else l=-; fi; "
            "echo \"$p $(stat -c '%F %a %u:%g %s %h' \"$p\") $s $l\"; done")

TREE = ("mkdir -p /workspace/t/empty /workspace/t/sub/deep /workspace/t/ünï && "
        "printf 'hello\\n' > /workspace/t/a.txt && chmod 640 /workspace/t/a.txt && "
        "head -c 300000 /dev/urandom > /workspace/t/sub/deep/blob && "
        "ln -s ../a.txt /workspace/t/sub/rel && ln -s /etc/hostname /workspace/t/abs && "
        "ln /workspace/t/a.txt /workspace/t/hard && "
        "printf 'ü' > '/workspace/t/ünï/ñame ☃.txt' && "
        "chown 1000:1000 /workspace/t/sub && chown 1234:5678 /workspace/t/sub/deep/blob && "
        "chmod 4755 /workspace/t/sub/deep/blob && "
        "truncate -s 8M /workspace/t/sparse && printf x | dd of=/workspace/t/sparse bs=1 "
        "seek=4194304 conv=notrunc 2>/dev/null && "
        "chmod 0751 /workspace/t/empty && touch -d '2020-01-02 03:04:05' /workspace/t/a.txt")


def new_box(api, **body):
    sid = "sn-" + uuid.uuid4().hex[:10]
    r = api("PUT", "/v1/sandboxes/" + sid, json=body, timeout=30)
    assert r.status_code == 201, "create %s: %d %s" % (sid, r.status_code, r.text[:300])
    return sid


def sh(api, sid, command):
    r = routed(api, "POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command}, timeout=60)
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["exitCode"] == 0, "%r failed: %r" % (command, res)
    return res["stdout"]


def snap(api, sid, **body):
    return api("POST", "/v1/sandboxes/%s/snapshots" % sid, json=body, timeout=60)


def restore(api, sid, **body):
    return api("POST", "/v1/sandboxes/%s/restore" % sid, json=body, timeout=60)


def tar_zst(members):
    """A zstd tar of (TarInfo, bytes) members, made by Python's tarfile and
    the zstd tool: not by sbx."""
    import subprocess
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return subprocess.run(["zstd", "-q", "-c"], input=buf.getvalue(), capture_output=True,
                          check=True).stdout


def member(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (data if kind == tarfile.REGTYPE else None)


@pytest.fixture(scope="module")
def box(stack):
    sid = new_box(stack.api)
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_round_trip_keeps_every_file_kind(api, box):
    sh(api, box, "rm -rf /workspace/* && " + TREE)
    before = sh(api, box, MANIFEST)
    assert "sparse" in before and "ñame ☃.txt" in before and "symbolic link" in before
    r = snap(api, box, name="tree")
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["id"].startswith("sn-") and rec["sandbox"] == box and rec["name"] == "tree"
    assert rec["paths"] == ["/workspace"] and len(rec["digest"]) == 64 and rec["size"] > 0
    # the export is the archive the digest names
    got = api("GET", "/v1/sandboxes/%s/archive?snapshot=%s" % (box, rec["id"]), timeout=60)
    assert got.status_code == 200
    assert hashlib.sha256(got.content).hexdigest() == rec["digest"]
    assert len(got.content) == rec["size"]
    # the records
    assert api("GET", "/v1/snapshots/" + rec["id"]).json() == rec
    listed = api("GET", "/v1/snapshots?sandbox=" + box).json()["snapshots"]
    assert rec["id"] in [s["id"] for s in listed]
    # change everything, then restore
    sh(api, box, "rm -rf /workspace/t && mkdir /workspace/t && echo junk > /workspace/t/new")
    r = restore(api, box, snapshot=rec["id"])
    assert r.status_code == 200, r.text
    after = sh(api, box, MANIFEST)
    # setuid is stripped on restore: everything else is as it was
    assert after == before.replace(" regular file 4755 ", " regular file 755 ")
    # the sparse file is sparse again
    blocks = int(sh(api, box, "stat -c %b /workspace/t/sparse"))
    assert blocks * 512 < 1024 * 1024
    # no staging directory is left behind
    assert ".sbx-restore" not in sh(api, box, "ls -a /")


def test_restore_into_another_directory_and_exclude(api, box):
    sh(api, box, "rm -rf /workspace/* && mkdir -p /workspace/x/node_modules && "
                 "echo 1 > /workspace/x/keep && echo 2 > /workspace/x/node_modules/drop")
    r = snap(api, box, exclude=["node_modules"])
    assert r.status_code == 201, r.text
    r = restore(api, box, snapshot=r.json()["id"], targetDir="/tmp/copy")
    assert r.status_code == 200, r.text
    assert r.json()["targetDir"] == "/tmp/copy"
    assert sh(api, box, "cat /tmp/copy/x/keep") == "1\n"
    assert sh(api, box, "test -e /tmp/copy/x/node_modules || echo gone") == "gone\n"
    assert sh(api, box, "cat /workspace/x/node_modules/drop") == "2\n"


def test_delete_and_cross_tenant_404(api, box, new_key):
    r = snap(api, box)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    other = new_key("snap-other-" + uuid.uuid4().hex[:6])
    assert_error(api("GET", "/v1/snapshots/" + sid, key=other), 404, "SNAPSHOT_NOT_FOUND")
    assert_error(api("DELETE", "/v1/snapshots/" + sid, key=other), 404, "SNAPSHOT_NOT_FOUND")
    assert sid not in [s["id"] for s in
                       api("GET", "/v1/snapshots", key=other).json()["snapshots"]]
    obox = new_box(lambda *a, **k: api(*a, key=other, **k))
    try:
        assert_error(restore(lambda *a, **k: api(*a, key=other, **k), obox, snapshot=sid),
                     404, "SNAPSHOT_NOT_FOUND")
        assert_error(api("GET", "/v1/sandboxes/%s/archive?snapshot=%s" % (obox, sid), key=other),
                     404, "SNAPSHOT_NOT_FOUND")
    finally:
        api("DELETE", "/v1/sandboxes/" + obox, key=other, timeout=30)
    assert api("DELETE", "/v1/snapshots/" + sid).status_code == 204
    assert_error(api("GET", "/v1/snapshots/" + sid), 404, "SNAPSHOT_NOT_FOUND")
    assert_error(restore(api, box, snapshot=sid), 404, "SNAPSHOT_NOT_FOUND")


def test_bad_input(api, box):
    assert_error(snap(api, box, paths=[]), 400, "VALIDATION_FAILED")
    assert_error(snap(api, box, paths=["/"]), 400, "VALIDATION_FAILED")
    assert_error(snap(api, box, paths=["/workspace", "/workspace/a"]), 400, "VALIDATION_FAILED")
    assert_error(snap(api, box, paths=["/nope"]), 404, "FILE_NOT_FOUND")
    sh(api, box, "touch /workspace/plain")
    assert_error(snap(api, box, paths=["/workspace/plain"]), 400, "NOT_DIRECTORY")
    assert_error(snap(api, box, exclude=["a/b"]), 400, "VALIDATION_FAILED")
    assert_error(snap(api, box, bogus=1), 400, "VALIDATION_FAILED")
    assert_error(restore(api, box, snapshot="../x"), 400, "VALIDATION_FAILED")
    assert_error(restore(api, box), 400, "VALIDATION_FAILED")
    assert_error(restore(api, box, snapshot="sn-0000000000000000"), 404, "SNAPSHOT_NOT_FOUND")
    assert_error(api("GET", "/v1/snapshots/nope"), 404, "SNAPSHOT_NOT_FOUND")
    assert_error(api("GET", "/v1/snapshots?limit=0"), 400, "VALIDATION_FAILED")


# -- import and hostile archives -----------------------------------------------

def put_archive(api, sid, data, query=""):
    return api("PUT", "/v1/sandboxes/%s/archive%s" % (sid, query), data=data, timeout=60)


@pytest.fixture
def canary(stack):
    """A host file next to the stack; no restore may touch it."""
    path = os.path.join(stack.dir, "canary-" + uuid.uuid4().hex[:6])
    with open(path, "w") as f:
        f.write("canary\n")
    yield path
    with open(path) as f:
        assert f.read() == "canary\n"
    os.unlink(path)


def test_import_then_restore(api, box):
    data = tar_zst([member("workspace", tarfile.DIRTYPE, mode=0o755),
                    member("workspace/in.txt", data=b"imported\n")])
    r = put_archive(api, box, data, "?name=imp")
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["digest"] == hashlib.sha256(data).hexdigest() and rec["name"] == "imp"
    assert restore(api, box, snapshot=rec["id"]).status_code == 200
    assert sh(api, box, "cat /workspace/in.txt") == "imported\n"


def test_corrupt_and_truncated_imports_are_refused(api, box, stack):
    good = tar_zst([member("workspace/f", data=os.urandom(200000))])
    store = os.path.join(stack.dir, "snapshots", "dev")
    before = (len(api("GET", "/v1/snapshots?sandbox=" + box).json()["snapshots"]),
              sorted(os.listdir(store)))
    assert_error(put_archive(api, box, b"not an archive at all" * 100), 400, "INVALID_ARCHIVE")
    assert_error(put_archive(api, box, good[:len(good) // 2]), 400, "INVALID_ARCHIVE")
    # no record and no archive (not even a temporary one, which goes when
    # the call's helper is reaped, just after the answer) stays
    stack.wait("the refused imports leave nothing", lambda: (
        len(api("GET", "/v1/snapshots?sandbox=" + box).json()["snapshots"]),
        sorted(os.listdir(store))) == before)


HOSTILE = {
    "dotdot": lambda c: [member("workspace/../../../../" + c.lstrip("/"), data=b"x")],
    "absolute": lambda c: [member(c, data=b"x")],
    "outside-paths": lambda c: [member("etc/passwd", data=b"x")],
    "symlink-parent": lambda c: [member("workspace/l", tarfile.SYMTYPE, link=os.path.dirname(c)),
                                 member("workspace/l/" + os.path.basename(c), data=b"x")],
    "symlink-up": lambda c: [member("workspace/u", tarfile.SYMTYPE, link="../../../../.."),
                             member("workspace/u" + c, data=b"x")],
    "hardlink-out": lambda c: [member("workspace/h", tarfile.LNKTYPE, link=c.lstrip("/"))],
    "device": lambda c: [member("workspace/null", tarfile.CHRTYPE)],
    "fifo": lambda c: [member("workspace/fifo", tarfile.FIFOTYPE)],
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_archive_changes_nothing(api, box, canary, kind):
    sh(api, box, "rm -rf /workspace/* && echo old > /workspace/old")
    r = put_archive(api, box, tar_zst(HOSTILE[kind](canary)))
    assert r.status_code == 201, r.text
    assert_error(restore(api, box, snapshot=r.json()["id"]), 400, "INVALID_ARCHIVE")
    assert sh(api, box, "ls -A /workspace") == "old\n"
    assert sh(api, box, "ls -a / | grep -c sbx-restore || true") == "0\n"


def test_setuid_is_stripped(api, box):
    data = tar_zst([member("workspace/s", data=b"#!/bin/sh\n", mode=0o6755)])
    r = put_archive(api, box, data)
    assert restore(api, box, snapshot=r.json()["id"]).status_code == 200
    assert sh(api, box, "stat -c %a /workspace/s") == "755\n"


def test_bomb_beyond_the_disk_limit(api, stack):
    sid = new_box(api, resources={"diskMiB": 8})
    try:
        # 64 MiB of zeros compress to almost nothing
        data = tar_zst([member("workspace/z", data=b"\0" * (64 << 20))])
        assert len(data) < (1 << 20)
        r = put_archive(api, sid, data)
        assert r.status_code == 201, r.text
        sh(api, sid, "echo old > /workspace/old")
        assert_error(restore(api, sid, snapshot=r.json()["id"]), 413, "FILE_TOO_LARGE")
        assert sh(api, sid, "ls -A /workspace") == "old\n"
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_quota(stack, api, new_key):
    tenant = "snap-q-" + uuid.uuid4().hex[:6]
    key = new_key(tenant)
    tapi = lambda *a, **k: api(*a, key=key, **k)   # noqa: E731
    sid = new_box(tapi)
    try:
        sh(tapi, sid, "head -c 200000 /dev/urandom > /workspace/r")
        r = snap(tapi, sid)
        assert r.status_code == 201, r.text
        size = r.json()["size"]
        # the quota left is less than one more: refused, and no archive stays
        stack.redis_cli("SET", "sbx:tenant:{%s}:snapbytes" % tenant,
                        str(10240 * 1024 * 1024 - size // 2))
        assert_error(snap(tapi, sid), 429, "QUOTA_EXCEEDED")
        assert len(tapi("GET", "/v1/snapshots").json()["snapshots"]) == 1
        files = os.listdir(os.path.join(stack.dir, "snapshots", tenant))
        assert files == [r.json()["id"] + ".tar.zst"]
        # deleting gives the bytes back
        assert tapi("DELETE", "/v1/snapshots/" + r.json()["id"]).status_code == 204
        used = int(stack.redis_cli("GET", "sbx:tenant:{%s}:snapbytes" % tenant).strip())
        assert used == 10240 * 1024 * 1024 - size // 2 - size
        assert os.listdir(os.path.join(stack.dir, "snapshots", tenant)) == []
    finally:
        tapi("DELETE", "/v1/sandboxes/" + sid, timeout=30)


# -- fork ----------------------------------------------------------------------

def test_fork_starts_a_new_sandbox_with_the_files(api, box):
    sh(api, box, "rm -rf /workspace/* && mkdir -p /workspace/src && echo forked > /workspace/src/f")
    r = snap(api, box)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    child = "sn-fork-" + uuid.uuid4().hex[:6]
    try:
        r = api("PUT", "/v1/sandboxes/" + child, json={"fromSnapshot": sid}, timeout=60)
        assert r.status_code == 201, r.text
        assert r.json()["restoreFrom"] == sid
        assert sh(api, child, "cat /workspace/src/f") == "forked\n"
        # a wake starts from the snapshot again (no persist: the files of
        # the sleep are not kept, the fork's are)
        sh(api, child, "echo later > /workspace/src/g")
        assert api("POST", "/v1/sandboxes/%s/sleep" % child, timeout=60).status_code == 200
        assert sh(api, child, "cat /workspace/src/f; ls /workspace/src") == "forked\nf\n"
    finally:
        api("DELETE", "/v1/sandboxes/" + child, timeout=30)


def test_fork_bad_input(api, box):
    assert_error(api("PUT", "/v1/sandboxes/sn-fork-bad", json={"fromSnapshot": "x"}), 400,
                 "VALIDATION_FAILED")
    assert_error(api("PUT", "/v1/sandboxes/sn-fork-none",
                     json={"fromSnapshot": "sn-0000000000000000"}), 404, "SNAPSHOT_NOT_FOUND")
    assert_error(api("GET", "/v1/sandboxes/sn-fork-none"), 404, "SANDBOX_NOT_FOUND")
    assert_error(api("PATCH", "/v1/sandboxes/" + box,
                     json={"fromSnapshot": "sn-0000000000000000"}), 400, "VALIDATION_FAILED")


# -- persist -------------------------------------------------------------------

def test_persist_keeps_files_across_sleep_and_restart(api, stack):
    sid = new_box(api, persist={"paths": ["/workspace", "/root"]})
    try:
        assert api("GET", "/v1/sandboxes/" + sid).json()["persist"] == {
            "paths": ["/workspace", "/root"]}
        sh(api, sid, "mkdir -p /workspace/d && echo one > /workspace/d/a && echo r > /root/r")
        assert api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=60).status_code == 200
        # the stop is answered once the save is recorded
        rec = api("GET", "/v1/sandboxes/" + sid).json()
        first = rec["restoreFrom"]
        assert rec["persistedAt"] == api("GET", "/v1/snapshots/" + first).json()["createdAt"]
        # the wake (this exec) restores both paths
        assert sh(api, sid, "cat /workspace/d/a /root/r") == "one\nr\n"
        sh(api, sid, "echo two > /workspace/b")
        assert api("POST", "/v1/sandboxes/%s/restart" % sid, timeout=60).status_code == 200
        assert sh(api, sid, "cat /workspace/d/a /workspace/b") == "one\ntwo\n"
        rec = api("GET", "/v1/sandboxes/" + sid).json()
        assert rec["restoreFrom"] != first
        # each save replaces the one before: one persisted snapshot stays
        saves = [s for s in api("GET", "/v1/snapshots?sandbox=" + sid).json()["snapshots"]
                 if s.get("name") == "persist"]
        assert [s["id"] for s in saves] == [rec["restoreFrom"]]
        assert_error(api("GET", "/v1/snapshots/" + first), 404, "SNAPSHOT_NOT_FOUND")
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_persist_keeps_files_across_an_idle_sleep(api, stack):
    sid = new_box(api, persist={"paths": ["/workspace"]}, sleepAfter="1s")
    try:
        sh(api, sid, "echo idle > /workspace/i")
        stack.wait("the idle sandbox sleeps", lambda: api(
            "GET", "/v1/sandboxes/" + sid).json()["state"] == "sleeping", timeout=30)
        assert api("GET", "/v1/sandboxes/" + sid).json().get("restoreFrom", "").startswith("sn-")
        assert sh(api, sid, "cat /workspace/i") == "idle\n"
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_persist_survives_a_killed_node(api, stack):
    """kill -9 of the owner: the sandbox is re-placed on the other agent
    and starts from its last save (the dir store is shared by both)."""
    import signal
    if stack.agents < 2:
        pytest.skip("needs two agents")
    sid = new_box(api, persist={"paths": ["/workspace"]})
    try:
        sh(api, sid, "echo saved > /workspace/s")
        assert api("POST", "/v1/sandboxes/%s/sleep" % sid, timeout=60).status_code == 200
        sh(api, sid, "echo unsaved > /workspace/u")   # wakes it; never saved
        dead = api("GET", "/v1/sandboxes/" + sid).json()["node"]
        os.kill(stack.pid(dead), signal.SIGKILL)
        try:
            stack.wait("the alive key of %s to expire" % dead, lambda: stack.redis_cli(
                "EXISTS", "sbx:node:{%s}:alive" % dead) == "0", timeout=15)
            assert sh(api, sid, "cat /workspace/s; ls /workspace") == "saved\ns\n"
            assert api("GET", "/v1/sandboxes/" + sid).json()["node"] != dead
        finally:
            stack.run("start", dead)
            stack.wait_healthy(timeout=20)
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_persist_interval_saves_in_the_background(api, stack, new_key):
    """persist.intervalS: saves while the sandbox runs (no sleep, no stop),
    shown on the record (persistedSnapshot, persistedAgeS); a save that
    finds nothing changed since the last one writes nothing and keeps it; a
    changed tree replaces it, so one persisted save (and its bytes) stays."""
    from test_metrics import agents_value
    tenant = "pi" + uuid.uuid4().hex[:8]
    key = new_key(tenant)

    def kapi(method, path, **kw):
        return api(method, path, key=key, **kw)

    def record():
        return kapi("GET", "/v1/sandboxes/" + sid).json()

    def persist_ok():
        return agents_value(stack, "sbx_agent_snapshots_total", op="persist", result="ok")

    sid = new_box(kapi, persist={"paths": ["/workspace"], "intervalS": 10})
    try:
        rec = record()
        assert rec["persist"] == {"paths": ["/workspace"], "intervalS": 10}
        assert "persistedSnapshot" not in rec
        sh(kapi, sid, "echo one > /workspace/a")
        first = stack.wait("a background save", lambda: record().get("persistedSnapshot"),
                           timeout=40, interval=0.5)
        rec = record()
        assert rec["state"] == "running" and rec["persistedAgeS"] >= 0
        assert rec["restoreFrom"] == first
        assert kapi("GET", "/v1/snapshots/" + first).json()["name"] == "persist"
        # nothing changed: the next save is counted and writes nothing
        n = persist_ok()
        stack.wait("a save of the unchanged tree", lambda: persist_ok() > n, timeout=40,
                   interval=0.5)
        assert record()["persistedSnapshot"] == first
        # a change: the next save replaces the first
        sh(kapi, sid, "echo two > /workspace/b")
        second = stack.wait("a save of the changed tree", lambda: (
            record().get("persistedSnapshot") != first and record()["persistedSnapshot"]),
            timeout=40, interval=0.5)
        assert_error(kapi("GET", "/v1/snapshots/" + first), 404, "SNAPSHOT_NOT_FOUND")
        saves = kapi("GET", "/v1/snapshots").json()["snapshots"]
        assert [s["id"] for s in saves] == [second]
        assert int(stack.redis_cli("GET", "sbx:tenant:{%s}:snapbytes" % tenant)) == \
            saves[0]["size"]
        # and a stop (here: a restart) of the unchanged tree starts from that save
        assert kapi("POST", "/v1/sandboxes/%s/restart" % sid, timeout=60).status_code == 200
        assert sh(kapi, sid, "cat /workspace/a /workspace/b") == "one\ntwo\n"
        assert record()["restoreFrom"] == second
    finally:
        kapi("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_background_saves_of_two_tenants_stay_apart(api, stack, new_key):
    """Two tenants, one sandbox id, both saving in the background: each save
    holds its own tenant's files, each restart starts from its own save, and
    neither tenant sees or reaches the other's."""
    sid = "sn-" + uuid.uuid4().hex[:10]
    tenants = ["pa" + uuid.uuid4().hex[:8], "pb" + uuid.uuid4().hex[:8]]
    keys = {t: new_key(t) for t in tenants}

    def tapi(t):
        return lambda method, path, **kw: api(method, path, key=keys[t], **kw)

    try:
        for t in tenants:
            r = tapi(t)("PUT", "/v1/sandboxes/" + sid, timeout=30,
                        json={"persist": {"paths": ["/workspace"], "intervalS": 10}})
            assert r.status_code == 201, r.text
            sh(tapi(t), sid, "echo %s > /workspace/owner" % t)
        saves = {}
        for t in tenants:
            saves[t] = stack.wait("%s's background save" % t, lambda t=t: tapi(t)(
                "GET", "/v1/sandboxes/" + sid).json().get("persistedSnapshot"),
                timeout=40, interval=0.5)
        assert saves[tenants[0]] != saves[tenants[1]]
        for t, other in (tenants, tenants[::-1]):
            listed = tapi(t)("GET", "/v1/snapshots?sandbox=" + sid).json()["snapshots"]
            assert [x["id"] for x in listed] == [saves[t]]
            assert_error(tapi(t)("GET", "/v1/snapshots/" + saves[other]), 404,
                         "SNAPSHOT_NOT_FOUND")
            # the other tenant's save cannot be restored here either
            assert_error(restore(tapi(t), sid, snapshot=saves[other]), 404, "SNAPSHOT_NOT_FOUND")
        for t in tenants:
            # a restart (its save finds the tree unchanged) starts from this
            # tenant's own save
            r = tapi(t)("POST", "/v1/sandboxes/%s/restart" % sid, timeout=60)
            assert r.status_code == 200, r.text
            assert sh(tapi(t), sid, "cat /workspace/owner") == t + "\n"
            assert tapi(t)("GET", "/v1/sandboxes/" + sid).json()["restoreFrom"] == saves[t]
    finally:
        for t in tenants:
            tapi(t)("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_persist_bad_input(api, box):
    for bad in ({"paths": []}, {"paths": ["rel"]}, {"paths": ["/a/../b"]}, {"paths": "/w"},
                {"paths": ["/w"], "other": 1}):
        assert_error(api("PUT", "/v1/sandboxes/sn-persist-bad", json={"persist": bad}), 400,
                     "VALIDATION_FAILED")
    for bad in (0, 9, 86401, "60", 1.5):
        assert_error(api("PUT", "/v1/sandboxes/sn-persist-bad",
                         json={"persist": {"paths": ["/w"], "intervalS": bad}}), 400,
                     "VALIDATION_FAILED")
    assert_error(api("PATCH", "/v1/sandboxes/" + box, json={"persist": {"paths": ["/w"]}}), 400,
                 "VALIDATION_FAILED")


# -- the Cloudflare SDK's backup routes ------------------------------------------

def cf(api, sid, route, **body):
    return api("POST", "/v1/sandboxes/%s/cf/api/%s" % (sid, route), json=body, timeout=60)


def test_cf_backup_create_and_restore(api, box, canary):
    sh(api, box, "rm -rf /workspace/* && mkdir -p /workspace/p/node_modules && "
                 "echo keep > /workspace/p/k && echo x > /workspace/p/node_modules/x")
    r = cf(api, box, "backup/create", dir="/workspace/p", archivePath="/var/backups/b1.sqsh",
           excludes=["node_modules", "**/*.log"], sessionId="s1")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["sizeBytes"] > 0
    assert int(sh(api, box, "stat -c %s /var/backups/b1.sqsh")) == body["sizeBytes"]
    sh(api, box, "rm -rf /workspace/p && mkdir /workspace/p && echo new > /workspace/p/n")
    r = cf(api, box, "backup/restore", dir="/workspace/p", archivePath="/var/backups/b1.sqsh")
    assert r.status_code == 200, r.text
    assert r.json()["success"] is True and r.json()["dir"] == "/workspace/p"
    assert sh(api, box, "ls -A /workspace/p") == "k\n"
    # a hostile archive put there by the sandbox is refused the same way
    evil = tar_zst([member("workspace/p/l", tarfile.SYMTYPE, link=os.path.dirname(canary)),
                    member("workspace/p/l/" + os.path.basename(canary), data=b"x")])
    assert api("PUT", "/v1/sandboxes/%s/files/%%2Fvar%%2Fbackups%%2Fevil" % box,
               data=evil).status_code == 201
    r = cf(api, box, "backup/restore", dir="/workspace/p", archivePath="/var/backups/evil")
    assert r.status_code == 400, r.text
    assert sh(api, box, "ls -A /workspace/p") == "k\n"
    r = cf(api, box, "backup/restore", dir="/workspace/p", archivePath="/var/backups/none")
    assert r.status_code == 404, r.text


# -- the s3 store ----------------------------------------------------------------

S3RVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "standin",
                      "s3rver")


class S3Front:
    """A loopback TCP relay in front of the stand-in that notes each
    request line (each of the agent's S3 requests is a connection of its
    own). With hold set to a method ("PUT": an upload, "GET": a download),
    a request of it waits for release before it is relayed (held is set
    when one does); a request whose line holds cut is cut off (the
    connection reset) instead."""

    def __init__(self, upstream):
        import socket
        import threading
        self.upstream = upstream
        self.lines = []
        self.hold = None
        self.held = threading.Event()
        self.release = threading.Event()
        self.cut = None
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        import threading
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self.relay, args=(c,), daemon=True).start()

    def relay(self, c):
        import socket
        import struct
        import threading
        first = c.recv(65536)
        line = first.split(b"\r\n", 1)[0].decode(errors="replace")
        self.lines.append(line)
        if self.cut and self.cut in line:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            return
        if self.hold and line.startswith(self.hold + " "):
            self.held.set()
            self.release.wait(120)
        u = socket.create_connection(("127.0.0.1", self.upstream))

        def pump(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        u.sendall(first)
        t = threading.Thread(target=pump, args=(u, c), daemon=True)
        t.start()
        pump(c, u)
        t.join(120)
        c.close()
        u.close()

    def stop(self):
        self.release.set()
        self.srv.close()


@pytest.fixture(scope="module")
def s3():
    """A stack of its own whose store is s3rver (a stand-in for an
    S3-compatible store on loopback, started here; it does not check
    signatures, and it does not implement the abort of a multipart
    upload), reached through an S3Front; parts of 5 MiB. Yields
    (stack, front, the stand-in's data directory)."""
    import shutil
    import socket
    import subprocess
    import time
    from conftest import free_port, stack_down, stack_up

    for tool in ("node", "npm"):
        assert shutil.which(tool), "%s is missing: run deploy/deps" % tool
    if not os.path.isdir(os.path.join(S3RVER, "node_modules", "s3rver")):
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=S3RVER,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, "npm ci failed:\n%s%s" % (r.stdout, r.stderr)
    data = tempfile_dir()
    port = free_port()
    proc = subprocess.Popen([os.path.join(S3RVER, "node_modules", ".bin", "s3rver"), "-d", data,
                             "-a", "127.0.0.1", "-p", str(port), "--configure-bucket", "snaps",
                             "--silent"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    front = st = None
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        front = S3Front(port)
        st = stack_up(agents=1, overrides=[
            "snapshots.store=s3", "snapshots.s3_endpoint=http://127.0.0.1:%d" % front.port,
            "snapshots.s3_bucket=snaps", "snapshots.s3_access_key=S3RVER",
            "snapshots.s3_secret_key=S3RVER-secret-never-logged", "snapshots.s3_part_mib=5"])
        yield st, front, data
    finally:
        if st:
            stack_down(st)
        if front:
            front.stop()
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def objects_of(data, sid):
    return [os.path.join(d, f) for d, _, fs in os.walk(data) for f in fs
            if sid in f and "uploads" not in d]


def test_s3_store_round_trip_on_a_stand_in(s3):
    """snapshot, list, export, restore, fork, delete; the secret in no log."""
    st, front, data = s3
    sid = new_box(st.api)
    sh(st.api, sid, "mkdir -p /workspace/q && echo s3 > /workspace/q/f")
    r = snap(st.api, sid)
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["store"] == "s3"
    assert objects_of(data, rec["id"])
    got = st.api("GET", "/v1/sandboxes/%s/archive?snapshot=%s" % (sid, rec["id"]), timeout=60)
    assert hashlib.sha256(got.content).hexdigest() == rec["digest"]
    sh(st.api, sid, "rm -rf /workspace/q")
    assert restore(st.api, sid, snapshot=rec["id"]).status_code == 200
    assert sh(st.api, sid, "cat /workspace/q/f") == "s3\n"
    r = st.api("PUT", "/v1/sandboxes/s3-fork", json={"fromSnapshot": rec["id"]}, timeout=60)
    assert r.status_code == 201, r.text
    assert sh(st.api, "s3-fork", "cat /workspace/q/f") == "s3\n"
    assert st.api("DELETE", "/v1/snapshots/" + rec["id"]).status_code == 204
    assert not objects_of(data, rec["id"])
    for d, _, fs in os.walk(os.path.join(st.dir, "logs")):
        for f in fs:
            with open(os.path.join(d, f), errors="replace") as fh:
                assert "S3RVER-secret-never-logged" not in fh.read()


def test_s3_multipart_above_one_part(s3):
    """An archive of more than one part (5 MiB here) goes up in parts
    (initiate, a PUT per part, complete) and comes back whole."""
    st, front, data = s3
    sid = new_box(st.api, resources={"diskMiB": 256})
    sh(st.api, sid, "head -c 12000000 /dev/urandom > /workspace/big")
    n = len(front.lines)
    r = snap(st.api, sid)
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["size"] > 10 * 1024 * 1024
    lines = [l for l in front.lines[n:] if rec["id"] in l]
    assert lines[0].startswith("POST ") and lines[0].split()[1].endswith("?uploads"), lines
    assert sorted(int(l.split("partNumber=")[1].split("&")[0]) for l in lines
                  if "partNumber=" in l) == [1, 2, 3], lines
    assert lines[-1].startswith("POST ") and "uploadId=" in lines[-1], lines
    got = st.api("GET", "/v1/sandboxes/%s/archive?snapshot=%s" % (sid, rec["id"]), timeout=60)
    assert hashlib.sha256(got.content).hexdigest() == rec["digest"]
    sh(st.api, sid, "rm /workspace/big")
    assert restore(st.api, sid, snapshot=rec["id"]).status_code == 200
    assert int(sh(st.api, sid, "stat -c %s /workspace/big")) == 12000000


def test_s3_multipart_failure_aborts_the_upload(s3):
    """A part that cannot go up fails the snapshot: no record, no object,
    and the upload is aborted (DELETE ?uploadId=…)."""
    st, front, data = s3
    sid = new_box(st.api, resources={"diskMiB": 256})
    sh(st.api, sid, "head -c 12000000 /dev/urandom > /workspace/big")
    n = len(front.lines)
    front.cut = "partNumber=2&"
    try:
        r = snap(st.api, sid, name="cut-part")
    finally:
        front.cut = None
    assert_error(r, 503, "NO_CAPACITY")
    assert [s for s in st.api("GET", "/v1/snapshots?name=cut-part").json()["snapshots"]] == []
    lines = front.lines[n:]
    ids = {l.split()[1].split("/")[-1].split(".")[0] for l in lines if "?uploads" in l}
    assert len(ids) == 1, lines
    assert any(l.startswith("DELETE ") and "uploadId=" in l for l in lines), lines
    assert not objects_of(data, ids.pop())


def while_held(front, method, slow, other):
    """slow() while the stand-in's next request of method is held up, and
    other() (an exec) once it is: the order their answers and the release
    of the held request came in, with the answers."""
    import threading
    order = []
    front.held.clear()
    front.release.clear()
    front.hold = method
    try:
        t = threading.Thread(target=lambda: order.append(("slow", slow())))
        t.start()
        assert front.held.wait(60), "no %s reached the store" % method
        e = threading.Thread(target=lambda: order.append(("exec", other())))
        e.start()
        e.join(30)
    finally:
        front.hold = None
        order.append(("released", None))
        front.release.set()
    t.join(120)
    e.join(60)
    return order


def test_s3_transfers_are_off_the_loop(s3):
    """While a snapshot's upload, then a restore's download, is held up, an
    exec in another sandbox of the same agent is answered: the exec's answer
    comes while it is held, before the snapshot's (the restore's)."""
    st, front, data = s3
    big = new_box(st.api, resources={"diskMiB": 256})
    other = new_box(st.api)
    sh(st.api, big, "head -c 8000000 /dev/urandom > /workspace/big")

    def exec_other():
        return st.api("POST", "/v1/sandboxes/%s/exec" % other, json={"command": "echo up"},
                      timeout=60)

    order = while_held(front, "PUT", lambda: snap(st.api, big), exec_other)
    assert [k for k, _ in order] == ["exec", "released", "slow"], order
    assert order[0][1].status_code == 200 and order[0][1].json()["stdout"] == "up\n"
    assert order[2][1].status_code == 201, order[2][1].text
    rec = order[2][1].json()
    order = while_held(front, "GET", lambda: restore(st.api, big, snapshot=rec["id"]), exec_other)
    assert [k for k, _ in order] == ["exec", "released", "slow"], order
    assert order[2][1].status_code == 200, order[2][1].text


def tempfile_dir():
    import tempfile
    return tempfile.mkdtemp(prefix="sbx-s3-")


def test_interrupted_snapshot_leaves_no_entry(api, stack):
    """The sandbox is deleted while a snapshot of it is being made: either
    the snapshot finished first (a whole record and archive), or there is
    neither a record nor an archive (nor a temporary file) of it."""
    import threading
    sid = new_box(api, resources={"diskMiB": 256, "memoryMiB": 512})
    sh(api, sid, "head -c 120000000 /dev/urandom > /workspace/big")
    store = os.path.join(stack.dir, "snapshots", "dev")

    def listing():
        return set(os.listdir(store)) if os.path.isdir(store) else set()

    before = listing()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", snap(api, sid, name="cut")))
    t.start()
    stack.wait("the snapshot to start writing", lambda: any(
        ".tmp-" in f for f in listing()), timeout=30)
    api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
    t.join(60)
    r = out["r"]
    mine = [s for s in api("GET", "/v1/snapshots?sandbox=" + sid).json()["snapshots"]
            if s.get("name") == "cut"]
    if r.status_code == 201:
        assert [s["id"] for s in mine] == [r.json()["id"]]
    else:
        assert r.status_code >= 500 or r.status_code == 404, r.text
        assert mine == []
        stack.wait("no archive of it stays", lambda: listing() == before)
