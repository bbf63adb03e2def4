"""Exhaustion: hostile sandboxes try to use up the host, and ANOTHER
sandbox on the same node keeps answering.

Each attack runs in its own sandbox (mostly as a background process, so it
keeps going while we measure); during it, the neighbour's `exec true`
latency (median of 10) must stay within max(2 x idle, idle + 20 ms), idle
being measured just before the attack on the same node. The box has 2
cores and other suites run at the same time, so a failed measurement is
repeated once before it counts. Every number is printed (run with -s).
"""

import json
import os
import socket
import statistics
import threading
import time

import pytest

from sbxproc import rss_kib

RESULTS = []


def new_box(stack, **body):
    sid, rec = stack.create("ex", **body)
    return sid, rec["node"]


def destroy(stack, sid):
    r = stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=60)
    assert r.status_code == 204, r.text


def run(stack, sid, command, timeout=60, **extra):
    r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid, json=dict(command=command, **extra),
                  timeout=timeout + 30)
    assert r.status_code == 200, "exec %r: %d %s" % (command, r.status_code, r.text[:300])
    return r.json()


def exec_latency(stack, sid, n=10):
    """Median wall time (s) of `exec true` in sid, through nginx."""
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": "true"},
                      timeout=30)
        times.append(time.monotonic() - t0)
        assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text[:200]
    return statistics.median(times)


def put_script(stack, sid, name, code):
    r = stack.api("PUT", "/v1/sandboxes/%s/files/%s" % (sid, name), data=code.encode())
    assert r.status_code == 201, r.text
    return "python3 /workspace/" + name


def host_pids_of(sid):
    """Host pids in the cgroup of the dev tenant's sandbox sid."""
    key = "dev.%s" % sid
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cgroup" % d) as f:
                    if key in f.read():
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def sanitized(pid):
    """Does process pid run with AddressSanitizer?"""
    try:
        with open("/proc/%d/maps" % pid) as f:
            return "libasan" in f.read()
    except OSError:
        return False


def agent_rss_kib(stack, node):
    return rss_kib(stack.pid(node))


@pytest.fixture(scope="module")
def neighbours(stack):
    """One quiet sandbox on every node: {node: sid}."""
    found = {}
    made = []
    try:
        for _ in range(12):
            sid, node = new_box(stack)
            made.append(sid)
            found.setdefault(node, sid)
            if len(found) == stack.agents:
                break
        for sid in made:
            if sid not in found.values():
                destroy(stack, sid)
        yield found
    finally:
        for sid in found.values():
            destroy(stack, sid)
        if RESULTS:
            print("\nneighbour exec-true latency (median of 10), idle vs during:")
            for name, idle, during, extra in RESULTS:
                print("  %-24s idle %6.1f ms  during %6.1f ms  %s" % (
                    name, idle * 1000, during * 1000, extra))


def within(idle, during):
    return during <= max(2 * idle, idle + 0.020)


class Attack:
    """Start/stop of one attack in sandbox sid."""

    def __init__(self, stack, sid):
        self.stack, self.sid = stack, sid

    def start_process(self, command):
        r = self.stack.api("POST", "/v1/sandboxes/%s/processes" % self.sid,
                           json={"command": command}, timeout=30)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def kill_all(self):
        r = self.stack.api("DELETE", "/v1/sandboxes/%s/processes?signal=KILL&graceMs=0"
                           % self.sid, timeout=30)
        assert r.status_code == 200, r.text


def idle_then(stack, neighbours, node, name, start, stop=None, ramp=1.0, extra=""):
    """Measure idle, start the attack, measure during, stop it."""
    nb = neighbours.get(node) or next(iter(neighbours.values()))
    idle = during = None
    try:
        for attempt in range(2):
            idle = exec_latency(stack, nb)
            if attempt == 0:
                start()
            time.sleep(ramp)
            during = exec_latency(stack, nb)
            if within(idle, during):
                break
    finally:
        if stop:
            stop()
    if callable(extra):
        extra = extra()
    RESULTS.append((name, idle, during, extra))
    print("%s: neighbour idle %.1f ms, during %.1f ms %s" % (name, idle * 1000, during * 1000,
                                                              extra))
    assert within(idle, during), "%s: neighbour latency %.1f ms during vs %.1f ms idle" % (
        name, during * 1000, idle * 1000)


def test_fork_bomb(stack, neighbours):
    sid, node = new_box(stack, resources={"pids": 64})
    try:
        a = Attack(stack, sid)
        code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
        cmd = put_script(stack, sid, "bomb.py", code)
        seen = {}

        def count():
            seen["n"] = len(host_pids_of(sid))
            return "(%d processes in the sandbox)" % seen["n"]

        idle_then(stack, neighbours, node, "fork bomb (pids 64)",
                  lambda: a.start_process(cmd), ramp=1.5, extra=count)
        # Contained: the sandbox sits at its pids limit, not above.
        assert 40 <= seen["n"] <= 64, "fork bomb: %d processes" % seen["n"]
        a.kill_all()
        stack.wait("the bomb to be killed (DELETE processes)",
                   lambda: len(host_pids_of(sid)) <= 3, 20)
        assert run(stack, sid, "echo alive")["stdout"] == "alive\n"
    finally:
        destroy(stack, sid)


def test_memory_bomb(stack, neighbours):
    sid, node = new_box(stack, resources={"memoryMiB": 64})
    try:
        a = Attack(stack, sid)
        idle_then(stack, neighbours, node, "memory bomb (64 MiB)",
                  lambda: a.start_process(
                      "while true; do python3 -c 'b=[]\nwhile True: b.append(bytearray(1<<20))'; "
                      "done"),
                  stop=a.kill_all, ramp=1.5)
        res = run(stack, sid, "python3 -c 'b=[]\nwhile True: b.append(bytearray(1<<20))'")
        assert res["exitCode"] == 137 and res.get("oomKilled") is True, res
        assert run(stack, sid, "echo alive")["stdout"] == "alive\n"
    finally:
        destroy(stack, sid)


def test_tmpfs_and_disk_fill(stack, neighbours):
    sid, node = new_box(stack, resources={"diskMiB": 32, "memoryMiB": 256})
    try:
        a = Attack(stack, sid)
        res = {}

        def start():
            for d in ("/tmp", "/dev/shm", "/workspace"):
                r = run(stack, sid, "dd if=/dev/zero of=%s/fill bs=1M count=1024 2>&1; echo rc=$?"
                        % d, timeout=60)
                res[d] = r
            a.start_process("while true; do dd if=/dev/zero of=/workspace/f2 bs=1M count=64 "
                            "2>/dev/null; rm -f /workspace/f2; done")

        idle_then(stack, neighbours, node, "tmpfs + disk fill", start, stop=a.kill_all)
        for d, r in res.items():
            said = r["stdout"] + r["stderr"]
            assert "No space left on device" in said or r["exitCode"] == 137, \
                "%s fill was not bounded: %r" % (d, r)
        df = run(stack, sid, "df -k /tmp /dev/shm /workspace | tail -n +2")["stdout"]
        for line in df.splitlines():
            size_kib = int(line.split()[1])
            assert size_kib <= 256 * 1024, "a writable filesystem is not bounded: %s" % line
        assert run(stack, sid, "rm -f /tmp/fill /dev/shm/fill /workspace/fill && echo ok")[
            "stdout"] == "ok\n"
    finally:
        destroy(stack, sid)


def test_cpu_spin(stack, neighbours):
    sid, node = new_box(stack, resources={"cpus": 1})
    try:
        a = Attack(stack, sid)
        idle_then(stack, neighbours, node, "cpu spin (4 loops, cpus 1)",
                  lambda: a.start_process("for i in 1 2 3 4; do (while :; do :; done) & done; wait"),
                  stop=a.kill_all, ramp=1.5)
    finally:
        destroy(stack, sid)


def nice_of(tid_dir):
    """The nice value (field 19 of stat) of /proc/PID or /proc/PID/task/TID."""
    with open(os.path.join(tid_dir, "stat")) as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def test_loop_runs_ahead_of_tenants_and_tenants_cannot_follow(stack, neighbours):
    """The agent's loop thread (the one that answers every call) runs at nice
    -5, its other threads and every process of a sandbox at 0; a tenant can
    raise its own nice but never lower it to the loop's."""
    node, sid = next(iter(neighbours.items()))
    pid = stack.pid(node)
    assert nice_of("/proc/%d/task/%d" % (pid, pid)) == -5
    others = [int(t) for t in os.listdir("/proc/%d/task" % pid) if int(t) != pid]
    assert others and all(nice_of("/proc/%d/task/%d" % (pid, t)) == 0 for t in others)
    inside = run(stack, sid, "cut -d' ' -f19 /proc/self/stat; nice -n 5 cut -d' ' -f19 "
                 "/proc/self/stat; nice -n -5 cut -d' ' -f19 /proc/self/stat")
    assert inside["exitCode"] == 0, inside
    assert inside["stdout"].split() == ["0", "5", "0"], inside
    assert "Permission denied" in inside["stderr"], inside
    procs = host_pids_of(sid)
    assert procs and all(nice_of("/proc/%d" % p) == 0 for p in procs), procs


FD_HOG = r"""
import os, sys, time
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print("stopped at %d: %s" % (len(fds), e.strerror), flush=True)
time.sleep(600)
"""


def test_fd_exhaustion(stack, neighbours):
    sid, node = new_box(stack)
    try:
        a = Attack(stack, sid)
        r = stack.api("PUT", "/v1/sandboxes/%s/files/hog.py" % sid, data=FD_HOG.encode())
        assert r.status_code == 201, r.text

        def start():
            for _ in range(8):
                a.start_process("python3 /workspace/hog.py")

        idle_then(stack, neighbours, node, "fd exhaustion (8 x RLIMIT)", start, ramp=2.0)
        # The sandbox still works (a new process gets fresh fds) and the agent too.
        assert run(stack, sid, "echo alive")["stdout"] == "alive\n"
        logs = stack.api("GET", "/v1/sandboxes/%s/processes" % sid).json()["processes"]
        first = stack.api("GET", "/v1/sandboxes/%s/processes/%s/logs" % (sid, logs[0]["id"])).json()
        assert "Too many open files" in first["stdout"], first
        a.kill_all()
    finally:
        destroy(stack, sid)


def test_zombie_storm_is_reaped(stack, neighbours):
    sid, node = new_box(stack, resources={"pids": 64})
    try:
        code = ("import os\nfails = 0\nfor i in range(3000):\n"
                "    try:\n        pid = os.fork()\n    except OSError:\n"
                "        fails += 1; continue\n"
                "    if pid == 0:\n"
                "        try:\n            os.fork()\n        except OSError:\n            pass\n"
                "        os._exit(0)\n"
                "    os.waitpid(pid, 0)\n"
                "print('fork failures', fails)\n")
        cmd = put_script(stack, sid, "orphans.py", code)
        res = {}

        def storm():
            t0 = time.monotonic()
            res["r"] = run(stack, sid, cmd, timeout=120)
            res["t"] = time.monotonic() - t0

        th = threading.Thread(target=storm)
        idle_then(stack, neighbours, node, "zombie storm (3000 orphans)", th.start,
                  stop=lambda: th.join(150), ramp=0.3,
                  extra=lambda: "(storm took %.1f s)" % res.get("t", -1))
        out = res["r"]
        assert out["exitCode"] == 0, out
        fails = int(out["stdout"].split()[-1])
        # 3000 orphans through a 64-pid sandbox: only possible if init reaps.
        assert fails < 300, "forks failed %d times: orphans are not reaped fast enough" % fails

        def no_zombies():
            z = run(stack, sid, "grep -l '^State:.Z' /proc/[0-9]*/status 2>/dev/null | wc -l")
            return int(z["stdout"]) == 0
        stack.wait("zombies to be reaped by init", no_zombies, 10)
    finally:
        destroy(stack, sid)


def test_output_flood_json_is_truncated(stack, neighbours):
    sid, node = new_box(stack)
    try:
        res = {}

        def flood():
            t0 = time.monotonic()
            res["r"] = run(stack, sid, "head -c 1073741824 /dev/zero | tr '\\0' a", timeout=120)
            res["t"] = time.monotonic() - t0

        th = threading.Thread(target=flood)
        idle_then(stack, neighbours, node, "output flood 1 GiB json", th.start,
                  stop=lambda: th.join(150), ramp=0.5,
                  extra=lambda: "(1 GiB exec took %.1f s)" % res.get("t", -1))
        r = res["r"]
        assert r["exitCode"] == 0 and r.get("truncated") is True, {k: r[k] for k in r if k != "stdout"}
        # kept whole to agent.max_exec_output_bytes (32 MiB), no more
        assert len(r["stdout"]) == 32 << 20, "JSON answer holds %d bytes" % len(r["stdout"])
    finally:
        destroy(stack, sid)


def sse_socket(stack, sid, command):
    """A raw connection with an SSE exec request sent; the socket."""
    host, port = stack.url.rsplit("/", 1)[1].split(":")
    body = json.dumps({"command": command}).encode()
    s = socket.create_connection((host, int(port)), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
              b"Accept: text/event-stream\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (sid.encode(), stack.key.encode(), len(body), body))
    return s


def count_procs(stack, sid, comm):
    out = run(stack, sid, "cat /proc/[0-9]*/comm 2>/dev/null | grep -cx %s || true" % comm)
    return int(out["stdout"].strip() or 0)


def test_slow_sse_reader_and_a_reader_that_stops(stack, neighbours):
    """Two SSE execs flooding output: one read slowly (4 KiB every 50 ms),
    one never read after the headers. The agent's memory stays flat (the
    command is slowed down, not buffered), the neighbour is fine, and closing
    the connections kills the commands."""
    sid, node = new_box(stack)
    socks = []
    stop = threading.Event()
    got = {"slow": 0}
    try:
        rss0 = agent_rss_kib(stack, node)

        def slow_reader(s):
            s.settimeout(2)
            while not stop.is_set():
                try:
                    chunk = s.recv(4096)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                got["slow"] += len(chunk)
                time.sleep(0.05)

        def start():
            slow = sse_socket(stack, sid, "yes slowly-read-output-line")
            socks.append(slow)
            threading.Thread(target=slow_reader, args=(slow,), daemon=True).start()
            stuck = sse_socket(stack, sid, "cat /dev/zero | od -v")
            socks.append(stuck)

        rss = {}

        def measure_rss():
            rss["peak"] = agent_rss_kib(stack, node)
            return "(agent RSS %d -> %d KiB, slow reader got %d KiB)" % (
                rss0, rss["peak"], got["slow"] // 1024)

        idle_then(stack, neighbours, node, "slow + stuck SSE readers", start, ramp=3.0,
                  extra=measure_rss)
        # (Under AddressSanitizer RSS is dominated by its quarantine of freed
        # memory and says nothing about buffering: not checked there.)
        if not sanitized(stack.pid(node)):
            assert rss["peak"] - rss0 < 32 * 1024, \
                "agent RSS grew %d KiB while clients did not read" % (rss["peak"] - rss0)
        assert count_procs(stack, sid, "yes") == 1 and count_procs(stack, sid, "od") == 1
    finally:
        stop.set()
        for s in socks:
            s.close()
    try:
        stack.wait("the commands of closed streams to be killed",
                   lambda: count_procs(stack, sid, "yes") == 0 and count_procs(stack, sid, "od") == 0,
                   15)
    finally:
        destroy(stack, sid)
