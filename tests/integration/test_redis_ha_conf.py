"""The shipped HA Redis configs (deploy/redis/) on real redis-servers
(issue 23 item 2): a primary with one replica keeps taking writes when that
replica is down, and a promoted replica takes writes at once. Both are
loaded from the files as shipped; only what names this machine (port,
bind, dir, log, pid, the include path, replicaof, maxmemory) is
overridden on the command line. No sbx stack is needed.
"""

import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import ROOT, free_port
from sbxproc import wait_until

CONF = os.path.join(ROOT, "deploy", "redis")


def cli(port, *args):
    r = subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=10)
    return (r.stdout + r.stderr).strip()


class Server:
    def __init__(self, tmp, name, conf, extra=()):
        self.port = free_port()
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.proc = subprocess.Popen(
            ["redis-server", conf, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", self.dir, "--logfile", os.path.join(self.dir, "log"),
             "--pidfile", os.path.join(self.dir, "pid"), "--supervised", "no",
             "--daemonize", "no", "--maxmemory", "64mb"] + list(extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(name + " to answer", lambda: cli(self.port, "PING") == "PONG", 15)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def writes(port):
    """A plain write and a scripted one (sbx writes through Lua scripts)."""
    return (cli(port, "SET", "sbx:ha:probe", "1"),
            cli(port, "EVAL", "return redis.call('SET', KEYS[1], '2')", "1", "sbx:ha:probe"))


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="sbx-redis-ha-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_ha_configs_survive_a_replica_down_and_a_promotion(tmp):
    primary_conf = os.path.join(CONF, "redis-primary.conf")
    # The replica's file includes the primary's at its installed path.
    with open(os.path.join(CONF, "redis-replica.conf")) as f:
        text = f.read()
    assert "include /etc/redis/redis-primary.conf" in text
    replica_conf = os.path.join(tmp, "redis-replica.conf")
    with open(replica_conf, "w") as f:
        f.write(text.replace("/etc/redis/redis-primary.conf", primary_conf))

    primary = Server(tmp, "primary", primary_conf)
    replica = None
    try:
        assert cli(primary.port, "CONFIG", "GET", "maxmemory-policy").split() == \
            ["maxmemory-policy", "noeviction"]
        replica = Server(tmp, "replica", replica_conf,
                         ["--replicaof", "127.0.0.1", str(primary.port)])
        wait_until("the replica to sync",
                 lambda: "master_link_status:up" in cli(replica.port, "INFO", "replication"), 15)
        assert writes(primary.port) == ("OK", "OK")
        # One replica down: the primary keeps taking writes.
        replica.stop()
        wait_until("the primary to see its replica gone",
                 lambda: "connected_slaves:0" in cli(primary.port, "INFO", "replication"), 15)
        assert writes(primary.port) == ("OK", "OK")
        # The replica back, the primary lost, the replica promoted: it takes
        # writes at once, without a replica of its own.
        replica = Server(tmp, "replica2", replica_conf,
                         ["--replicaof", "127.0.0.1", str(primary.port)])
        wait_until("the replica to sync again",
                 lambda: "master_link_status:up" in cli(replica.port, "INFO", "replication"), 15)
        primary.stop()
        assert cli(replica.port, "REPLICAOF", "NO", "ONE") == "OK"
        wait_until("the promotion",
                   lambda: "role:master" in cli(replica.port, "INFO", "replication"), 15)
        assert writes(replica.port) == ("OK", "OK")
        assert cli(replica.port, "GET", "sbx:ha:probe") == "2"
    finally:
        primary.stop()
        if replica:
            replica.stop()


def test_sbx_runs_on_the_shipped_primary_with_its_replica_down(tmp):
    """A stack (`deploy/stack up --redis`) on a primary started from the
    shipped file whose one replica is down: creates, execs and the health
    check work (with min-replicas-to-write 1 they were 500s)."""
    from conftest import STACK, Stack, reap_orphans
    primary = Server(tmp, "primary", os.path.join(CONF, "redis-primary.conf"))
    replica = Server(tmp, "replica", os.path.join(CONF, "redis-primary.conf"),
                     ["--replicaof", "127.0.0.1", str(primary.port)])
    directory = os.path.join(tmp, "stack")
    build = os.environ.get("SBX_BUILD", "build")
    env = dict(os.environ, SBX_BUILD=build if os.path.isabs(build) else os.path.join(ROOT, build))
    try:
        wait_until("the replica to sync",
                 lambda: "master_link_status:up" in cli(replica.port, "INFO", "replication"), 15)
        replica.stop()
        wait_until("the primary to see its replica gone",
                 lambda: "connected_slaves:0" in cli(primary.port, "INFO", "replication"), 15)
        r = subprocess.run([STACK, "up", "--dir", directory, "--port", str(free_port()),
                            "--agents", "1", "--redis", "redis://127.0.0.1:%d" % primary.port],
                           capture_output=True, text=True, timeout=120, env=env)
        reap_orphans()
        assert r.returncode == 0, r.stdout + r.stderr
        st = Stack(directory, env["SBX_BUILD"])
        st.wait_healthy()
        assert st.api("GET", "/healthz", key=None).status_code == 200
        r = st.api("PUT", "/v1/sandboxes/ha-one", json={}, timeout=30)
        assert r.status_code == 201, r.text
        r = st.api("POST", "/v1/sandboxes/ha-one/exec", json={"command": "echo up"}, timeout=30)
        assert r.status_code == 200 and r.json()["stdout"] == "up\n", r.text
        assert st.api("DELETE", "/v1/sandboxes/ha-one", timeout=30).status_code == 204
    finally:
        subprocess.run([STACK, "down", "--dir", directory], capture_output=True, timeout=120,
                       env=env)
        reap_orphans()
        primary.stop()
        replica.stop()
