"""The sandbox runtime, black box: real sandboxes created through the API,
probed from inside with one small action each (a python3 snippet that
makes one syscall and prints the errno), and checked from the host.

Every test runs twice: against the session stack (user namespace `auto`,
which is on where the host allows it) and against a stack whose agents run
with `agent.userns = off`.
"""

import json
import os
import subprocess
import uuid

import pytest

from conftest import sandbox_procs, stack_down, stack_up

# x86_64 syscall numbers the default seccomp filter must refuse.
DENIED = {
    "unshare(CLONE_NEWUSER)": (272, 0x10000000),
    "setns": (308, 0, 0),
    "mount": (165, 0, 0, 0, 0, 0),
    "umount2": (166, 0, 0),
    "pivot_root": (155, 0, 0),
    "open_tree": (428, 0, 0, 0),
    "fsopen": (430, 0, 0),
    "move_mount": (429, 0, 0, 0, 0, 0),
    "keyctl": (250, 0, 0, 0, 0, 0),
    "add_key": (248, 0, 0, 0, 0, 0),
    "request_key": (249, 0, 0, 0, 0),
    "bpf": (321, 0, 0, 0),
    "perf_event_open": (298, 0, 0, 0, 0, 0),
    "io_uring_setup": (425, 1, 0),
    "userfaultfd": (323, 0),
    "init_module": (175, 0, 0, 0),
    "finit_module": (313, 0, 0, 0),
    "delete_module": (176, 0, 0),
    "kexec_load": (246, 0, 0, 0, 0),
    "kexec_file_load": (320, 0, 0, 0, 0, 0),
    "reboot": (169, 0, 0, 0, 0),
    "swapon": (167, 0, 0),
    "swapoff": (168, 0),
    "settimeofday": (164, 0, 0),
    "clock_settime": (227, 0, 0),
    "clock_adjtime": (305, 0, 0),
    "adjtimex": (159, 0),
    "acct": (163, 0),
}

PROBE = r"""
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, args in json.loads(sys.argv[1]).items():
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    out[name] = 0 if r >= 0 else ctypes.get_errno()
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=["userns-auto", "userns-off"])
def sbx(request, stack):
    """A stack per user-namespace mode; the session stack is the `auto` one."""
    if request.param == "userns-auto":
        yield stack
        return
    st = stack_up(agents=1, overrides=["agent.userns=off"])
    try:
        yield st
    finally:
        stack_down(st)


def new_box(st, **body):
    sid = "rt-" + uuid.uuid4().hex[:10]
    r = st.api("PUT", "/v1/sandboxes/" + sid, json=body, timeout=30)
    assert r.status_code == 201, "create %s: %d %s" % (sid, r.status_code, r.text[:300])
    return sid


def run(st, sid, command, timeout=30, **extra):
    """Exec command in sid; the JSON answer."""
    body = dict(command=command, **extra)
    r = st.api("POST", "/v1/sandboxes/%s/exec" % sid, json=body, timeout=timeout + 30)
    assert r.status_code == 200, "exec %r: %d %s" % (command, r.status_code, r.text[:300])
    return r.json()


def sh_quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def py(st, sid, code, *args):
    cmd = "python3 -c %s %s" % (sh_quote(code), " ".join(sh_quote(a) for a in args))
    res = run(st, sid, cmd)
    assert res["exitCode"] == 0, "probe failed: %r" % res
    return res["stdout"]


def destroy(st, sid):
    r = st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
    assert r.status_code == 204, r.text


@pytest.fixture
def box(sbx):
    sid = new_box(sbx)
    yield sid
    destroy(sbx, sid)


def test_pid1_is_init_and_only_own_processes(sbx, box):
    out = run(sbx, box, "cat /proc/1/cmdline | tr '\\0' ' '; echo; ls /proc | grep -E '^[0-9]+$' | wc -l")
    first, count = out["stdout"].splitlines()
    assert first.split()[0].endswith("sbx-init"), "PID 1 is %r" % first
    # init, sh, cat/ls/grep/wc of this pipeline: a handful, never the host's hundreds.
    assert int(count) <= 8, "sandbox sees %s processes" % count


def test_privileges_are_dropped(sbx, box):
    status = run(sbx, box, "cat /proc/self/status")["stdout"]
    fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"
    cap_eff = int(fields["CapEff"].strip(), 16)
    for bit, name in [(21, "SYS_ADMIN"), (12, "NET_ADMIN"), (13, "NET_RAW"), (19, "SYS_PTRACE"),
                      (16, "SYS_MODULE"), (17, "SYS_RAWIO"), (25, "SYS_TIME"), (27, "MKNOD")]:
        assert not cap_eff & (1 << bit), "CAP_%s is effective (CapEff %x)" % (name, cap_eff)
    assert int(fields["CapBnd"].strip(), 16) == cap_eff, "bounding set wider than effective"


def test_every_filtered_syscall_fails(sbx, box):
    got = json.loads(py(sbx, box, PROBE, json.dumps(DENIED)))
    allowed = {k: v for k, v in got.items() if v != 1}
    assert not allowed, "these calls were not refused with EPERM: %r" % allowed


def test_raw_and_packet_sockets_refused(sbx, box):
    code = r"""
import socket
for fam, typ in ((socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET, socket.SOCK_RAW)):
    try:
        socket.socket(fam, typ, 0 if fam == socket.AF_PACKET else 1)
        print("open")
    except OSError as e:
        print(e.errno)
"""
    lines = py(sbx, box, code).split()
    assert "open" not in lines, "a raw socket could be opened: %r" % lines


def test_filesystem_layout(sbx, box):
    res = run(sbx, box, "touch /usr/x 2>&1; echo usr=$?; touch /workspace/x && echo ws=ok; "
                        "pwd; hostname; ls /dev | sort | tr '\\n' ' '; echo; "
                        "touch /tmp/t && echo tmp=ok; touch /dev/shm/s && echo shm=ok; "
                        "touch /sys/x 2>&1; echo sys=$?")
    out = res["stdout"]
    assert "Read-only file system" in out and "usr=1" in out
    assert "ws=ok" in out and "tmp=ok" in out and "shm=ok" in out
    lines = out.splitlines()
    assert "/workspace" in lines, "default cwd is not /workspace: %r" % out
    assert box in lines, "hostname is not the sandbox id: %r" % out
    devs = next(l for l in lines if "null" in l).split()
    for d in ("null", "zero", "full", "random", "urandom", "tty", "pts", "shm", "ptmx"):
        assert d in devs, "/dev lacks %s: %r" % (d, devs)
    for d in devs:
        assert d in ("null", "zero", "full", "random", "urandom", "tty", "pts", "shm", "ptmx",
                     "fd", "stdin", "stdout", "stderr", "mqueue"), "unexpected /dev/%s" % d
    assert "sys=0" not in out, "/sys is writable"


def test_proc_sensitive_paths_masked(sbx, box):
    res = run(sbx, box, "wc -c < /proc/kcore; cat /proc/keys | wc -c; "
                        "echo h > /proc/sysrq-trigger 2>&1; echo sysrq=$?; "
                        "echo x > /proc/sys/kernel/core_pattern 2>&1; echo core=$?")
    out = res["stdout"]
    first = out.splitlines()[0].strip()
    assert first == "0", "/proc/kcore is readable (%s bytes)" % first
    assert "sysrq=0" not in out and "core=0" not in out, out


def test_only_loopback_without_network(sbx, box):
    out = run(sbx, box, "ls /sys/class/net; cat /proc/net/route | wc -l")["stdout"].split()
    assert out[:-1] == ["lo"], "interfaces: %r" % out
    assert out[-1] == "1", "routes exist in a network:none sandbox"


def test_no_host_secrets_or_services(sbx, box):
    out = run(sbx, box, "env; echo ---; tr '\\0' '\\n' < /proc/1/environ; echo ---; "
                        "ls -A /root /home 2>/dev/null | wc -l; cat /etc/passwd")["stdout"]
    assert sbx.secret not in out, "the node secret is visible inside"
    for name in ("NODE_EXTRA_CA_CERTS", "SBX_", "REDIS", "PYENV"):
        assert name not in out.split("---")[0] + out.split("---")[1], "%s leaked into the env" % name
    # The host's own agents, Redis and nginx listen on loopback: unreachable from inside.
    code = r"""
import socket, sys
for port in map(int, sys.argv[1:]):
    s = socket.socket(); s.settimeout(1)
    try:
        s.connect(("127.0.0.1", port)); print("open", port)
    except OSError as e:
        print("closed", port)
"""
    ports = [str(sbx.redis_port), sbx.url.rsplit(":", 1)[1]]
    res = py(sbx, box, code, *ports)
    assert "open" not in res, "a host service is reachable: %r" % res


def test_memory_bomb_is_killed_and_sandbox_survives(sbx):
    sid = new_box(sbx, resources={"memoryMiB": 64})
    try:
        res = run(sbx, sid, "python3 -c 'b=[]\nwhile True: b.append(bytearray(1<<20))'", timeout=60)
        assert res["exitCode"] == 137, "memory bomb ended %r" % res
        assert res.get("oomKilled") is True, "OOM kill not reported: %r" % res
        assert run(sbx, sid, "echo alive")["stdout"] == "alive\n"
    finally:
        destroy(sbx, sid)


def test_fork_bomb_stops_at_pids_limit(sbx):
    sid = new_box(sbx, resources={"pids": 64})
    other = new_box(sbx)
    try:
        res = run(sbx, sid, "for i in $(seq 200); do sleep 30 & done 2>&1 | tail -1; "
                            "ls /proc | grep -cE '^[0-9]+$'", timeout=60)
        said = (res["stdout"] + res["stderr"]).lower()
        assert "fork" in said or "resource temporarily unavailable" in said, \
            "fork never failed: %r" % res
        assert int(res["stdout"].split()[-1]) <= 64, "more processes than the pids limit"
        assert run(sbx, other, "echo fine")["stdout"] == "fine\n"
    finally:
        destroy(sbx, sid)
        destroy(sbx, other)


def test_disk_fill_gives_enospc(sbx):
    sid = new_box(sbx, resources={"diskMiB": 16})
    try:
        res = run(sbx, sid, "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; echo rc=$?")
        assert "No space left on device" in res["stdout"], res
        assert run(sbx, sid, "rm /workspace/fill && echo ok")["stdout"] == "ok\n"
    finally:
        destroy(sbx, sid)


def test_sandboxes_do_not_see_each_other(sbx):
    a, b = new_box(sbx), new_box(sbx)
    try:
        run(sbx, a, "echo secret-of-a > /workspace/mine; sleep 60 >/dev/null 2>&1 &")
        out = run(sbx, b, "cat /workspace/mine 2>&1; ps -e -o args 2>/dev/null || "
                          "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert "secret-of-a" not in out["stdout"]
        assert "sleep 60" not in out["stdout"]
    finally:
        destroy(sbx, a)
        destroy(sbx, b)


def host_pids_in_cgroup(key):
    return [pid for pid, _, _ in sandbox_procs(key)]


def test_destroy_leaves_nothing_on_host(sbx):
    sid = new_box(sbx)
    run(sbx, sid, "sleep 300 >/dev/null 2>&1 & echo started")
    key = "dev.%s" % sid
    assert host_pids_in_cgroup(key), "no host process found in the sandbox's cgroup"
    destroy(sbx, sid)
    sbx.wait("the sandbox's processes to be gone", lambda: not host_pids_in_cgroup(key), 10)
    leftovers = subprocess.run(["find", "/sys/fs/cgroup", "-maxdepth", "6", "-name", key],
                               capture_output=True, text=True).stdout.split()
    assert not leftovers, "cgroups left behind: %r" % leftovers
    with open("/proc/self/mountinfo") as f:
        assert key not in f.read(), "a mount of the sandbox is visible on the host"


def test_process_sees_only_stdio_fds(sbx, box):
    out = run(sbx, box, "python3 -c 'import os; print(\" \".join(sorted(os.listdir(\"/proc/self/fd\"), key=int)))'")
    fds = out["stdout"].split()
    # 0-2, plus the directory fd listdir itself holds open.
    assert fds[:3] == ["0", "1", "2"] and len(fds) <= 4, "open fds: %r" % fds


def test_killed_agent_leaves_no_sandbox_behind(stack):
    """kill -9 of an agent: its sandboxes die with it (PDEATHSIG), and the
    restarted agent removes the cgroups they left; the sandbox then wakes
    on the next call as a new container."""
    import signal
    sid = new_box(stack)
    run(stack, sid, "sleep 300 >/dev/null 2>&1 & echo started")
    node = stack.api("GET", "/v1/sandboxes/" + sid).json()["node"]
    key = "dev.%s" % sid
    assert host_pids_in_cgroup(key), "no host process found in the sandbox's cgroup"
    os.kill(stack.pid(node), signal.SIGKILL)
    try:
        stack.wait("the sandbox's processes to die with the agent",
                   lambda: not host_pids_in_cgroup(key), 10)
        stack.run("start", node)
        # The killed agent's alive key outlives it by up to the TTL: wait for
        # the new one to announce itself, which it does only after marking
        # what the old one ran as lost.
        stack.wait("the restarted agent to mark the sandbox lost",
                   lambda: stack.api("GET", "/v1/sandboxes/" + sid).json()["state"] == "sleeping",
                   15)
        stack.wait_healthy()

        def no_cgroup():
            return not subprocess.run(["find", "/sys/fs/cgroup", "-maxdepth", "6", "-name", key],
                                      capture_output=True, text=True).stdout.split()
        stack.wait("the restarted agent to remove the leftover cgroups", no_cgroup, 10)
        assert run(stack, sid, "echo again")["stdout"] == "again\n"
    finally:
        stack.wait_healthy()
        destroy(stack, sid)
