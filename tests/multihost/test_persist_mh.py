"""Persisted workspaces across hosts: the `dir` snapshot store on one
directory every host has as snapshots.dir (the hosts are network
namespaces of one machine, so a directory of it is to them what an NFS
mount is to real hosts). kill -9 of the agent that owns a sandbox with
persist.intervalS: the sandbox is re-placed on another host and starts
from its last background save (no sleep or stop ever saved it).
"""

import os
import shutil
import signal

import pytest

import test_multihost as base

DIR = os.environ.get("MH_PERSIST_DIR", "/tmp/sbx-multihost-persist")
SNAPS = DIR + "-snapshots"
PREFIX = "sbxmp"


def hosts_env():
    return dict(os.environ, MH_PREFIX=PREFIX, MH_STACK_OPT="snapshots.dir=" + SNAPS)


@pytest.fixture(scope="module")
def mh():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    shutil.rmtree(SNAPS, ignore_errors=True)
    try:
        with base.deployment(DIR, hosts_env()) as m:
            yield m
    finally:
        shutil.rmtree(SNAPS, ignore_errors=True)


def test_killed_owner_is_replaced_with_its_last_background_save(mh):
    r = mh.api("a", "PUT", "/v1/sandboxes/mh-persist", timeout=30,
               json={"persist": {"paths": ["/workspace"], "intervalS": 10}})
    assert r.status_code == 201, r.text
    owner = mh.host_of[r.json()["node"]]
    other = next(h for h in base.HOSTS if h != owner)
    mh.exec_(other, "mh-persist", "mkdir /workspace/d && echo saved > /workspace/d/f")
    saved = mh.wait("a background save", lambda: mh.record("mh-persist").get(
        "persistedSnapshot"), timeout=40, interval=0.5)
    assert mh.record("mh-persist")["state"] == "running"
    # the save is a file of the shared directory, beside no temporary one
    files = [f for _, _, fs in os.walk(SNAPS) for f in fs]
    assert files == [saved + ".tar.zst"], files
    with open(os.path.join(DIR, owner, "pids", "agent-1.pid")) as f:
        os.kill(int(f.read().strip()), signal.SIGKILL)
    mh.wait("host %s's liveness key to expire" % owner, lambda: not mh.node_alive(owner),
            timeout=20)
    # the next call through a live host re-places it, from the save
    out = mh.exec_(other, "mh-persist", "cat /workspace/d/f")
    assert out["stdout"] == "saved\n", out
    rec = mh.record("mh-persist")
    assert rec["node"] != mh.node[owner]
    assert rec["restoreFrom"] == saved
