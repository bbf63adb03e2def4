"""The sandbox runtime, black box: real sandboxes created through the API,
probed from inside with one small action each (a python3 snippet that
makes one syscall and prints the errno), and checked from the host.

Every test runs twice: against the session stack (user namespace `auto`,
which is on where the host allows it) and against a stack whose agents run
with `agent.userns = off`.
"""

import concurrent.futures
import ctypes
import json
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import (ROOT, first_command_under_keeper_ahead, keepers_of, sandbox_procs,
                      stack_down, stack_up)

FILTER = os.path.join(ROOT, "sandbox", "runtime", "seccomp_filter.c")
UNISTD_64 = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"
PROBER = os.path.join(ROOT, "tests", "integration", "probes", "syscalls.c")
# The kernel's values of the flags seccomp_filter.c names in ns_flags[].
CLONE_FLAGS = {"CLONE_NEWNS": 0x20000, "CLONE_NEWUTS": 0x4000000, "CLONE_NEWIPC": 0x8000000,
               "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
               "CLONE_NEWNET": 0x40000000, "CLONE_NEWCGROUP": 0x2000000, "CLONE_NEWTIME": 0x80}
EPERM, ENOSYS, SIGSYS = 1, 38, 31


def filter_lists():
    """(deny_eperm names, ns_flags names) as written in seccomp_filter.c."""
    with open(FILTER) as f:
        text = f.read()

    def c_array(name):
        body = re.search(r"\b%s\[\] = \{(.*?)\};" % name, text, re.S)
        assert body, "no %s[] in %s" % (name, FILTER)
        return re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
    names = re.findall(r'"([a-z0-9_]+)"', c_array("deny_eperm"))
    flags = re.findall(r"\b(CLONE_NEW[A-Z]+)\b", c_array("ns_flags"))
    assert len(names) > 50 and len(flags) == 8, (names, flags)
    return names, flags


def seccomp_cases():
    """{case: (syscall args, expected)} from the filter's own lists: every
    name of deny_eperm[] that is an x86_64 syscall (the others are skipped
    by libseccomp, as by the filter), clone3, clone and unshare with each
    namespace flag, raw IP sockets, personality values outside the four
    allowed (and those four, which must work), and the two 32-bit entries."""
    with open(UNISTD_64) as f:
        nr = {m.group(1): int(m.group(2))
              for m in re.finditer(r"#define __NR_(\w+) (\d+)", f.read())}
    names, flags = filter_lists()
    cases = {n: ([nr[n]], EPERM) for n in names if n in nr}
    cases["clone3"] = ([nr["clone3"]], ENOSYS)
    for flag in flags:
        cases["clone(%s)" % flag] = ([nr["clone"], CLONE_FLAGS[flag] | 17], EPERM)  # | SIGCHLD
        cases["unshare(%s)" % flag] = ([nr["unshare"], CLONE_FLAGS[flag]], EPERM)
    cases["socket(AF_INET, SOCK_RAW)"] = ([nr["socket"], 2, 3, 1], EPERM)
    cases["socket(AF_INET6, SOCK_RAW)"] = ([nr["socket"], 10, 3, 58], EPERM)
    for value in (0xffffffff, 0x0040000, 0x0400000, 0x0000001, 0x20009):
        cases["personality(%#x)" % value] = ([nr["personality"], value], EPERM)
    for value in (0x8, 0x20000, 0x20008, 0):  # allowed; the last restores PER_LINUX
        cases["personality(%#x)" % value] = ([nr["personality"], value], 0)
    cases["int80"] = (None, SIGSYS)
    cases["x32"] = (None, SIGSYS)
    return cases


@pytest.fixture(scope="module")
def prober(tmp_path_factory):
    """The static prober, built once."""
    exe = tmp_path_factory.mktemp("prober") / "syscalls"
    r = subprocess.run(["cc", "-static", "-O2", "-o", str(exe), PROBER], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return exe.read_bytes()


def host_probe(prober):
    """{word: signal} of the prober's two entry words run on the host, out
    of any sandbox: a kernel without a usable 32-bit entry (ia32 emulation
    off, as on the PVM guests CI runs on) faults on `int 0x80` (SIGSEGV)
    before any filter could see the call."""
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "syscalls")
        with open(exe, "wb") as f:
            f.write(prober)
        os.chmod(exe, 0o755)
        out = subprocess.run([exe, "int80", "x32"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return dict(line.rsplit(" ", 1) for line in out.stdout.splitlines())


def faults_as_on_host(name, got, host):
    """An entry word the host itself cannot use (its probe ended on a
    signal): the sandbox must end the same way, never with a call that ran."""
    return name in host and host[name] != "0" and got == host[name]


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
    return st.create("rt", **body)[0]


def run(st, sid, command, timeout=30, **extra):
    """Exec command in sid; the JSON answer."""
    body = dict(command=command, **extra)
    r = st.data("POST", "/v1/sandboxes/%s/exec" % sid, json=body, timeout=timeout + 30)
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


def test_every_filtered_syscall_fails(sbx, box, prober):
    """Every call the filter denies, probed in one run of the prober: EPERM
    (clone3: ENOSYS), the allowed personalities work, and a call through
    the 32-bit entry (int 0x80) or with the x32 bit kills the caller
    (SIGSYS). The list comes from seccomp_filter.c itself."""
    cases = seccomp_cases()
    host = host_probe(prober)
    r = sbx.api("PUT", "/v1/sandboxes/%s/files/sysprobe" % box, data=prober, timeout=30)
    assert r.status_code == 201, r.text
    args = ["%s=%s" % (name, ",".join(str(a) for a in call)) if call else name
            for name, (call, _) in cases.items()]
    res = run(sbx, box, "chmod +x sysprobe && ./sysprobe " + " ".join(sh_quote(a) for a in args))
    assert res["exitCode"] == 0, res
    got = dict(line.rsplit(" ", 1) for line in res["stdout"].splitlines())
    wrong = {name: "got %s, want %d" % (got.get(name), want)
             for name, (_, want) in cases.items()
             if got.get(name) != str(want) and not faults_as_on_host(name, got.get(name), host)}
    assert not wrong, "the filter does not hold as docs/SECURITY.md says: %r" % wrong


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
    """/usr and /sys are read-only; /workspace, /tmp, /dev/shm and the rest
    of the root (/, /etc, /var) take writes, which land in the sandbox's
    own upper layer: the image on disk is unchanged; /dev has only the
    basic nodes."""
    res = run(sbx, box, "touch /usr/x 2>&1; echo usr=$?; touch /workspace/x && echo ws=ok; "
                        "pwd; hostname; ls /dev | sort | tr '\\n' ' '; echo; "
                        "touch /tmp/t && echo tmp=ok; touch /dev/shm/s && echo shm=ok; "
                        "touch /sys/x 2>&1; echo sys=$?; "
                        "for d in / /etc /var /root; do touch $d/sbx-upper && echo \"upper=$d\"; done; "
                        "grep ' / ' /proc/mounts")
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
    # The root is the sandbox's copy-on-write overlay: writable (docs/SECURITY.md
    # says why), and what is written stays in its upper layer.
    assert [l for l in lines if l.startswith("upper=")] == \
        ["upper=/", "upper=/etc", "upper=/var", "upper=/root"], out
    root = next(l for l in lines if l.split()[1:2] == ["/"]).split()
    assert root[2] == "overlay" and "rw" in root[3].split(","), root
    top = os.path.join(sbx.dir, "images", "default")
    images = [os.path.join(top, n) for n in os.listdir(top) if not n.startswith(".")]
    assert images and all(os.path.isdir(os.path.join(i, "etc")) for i in images), images
    for d in ("", "etc", "var", "root"):
        for image in images:
            assert not os.path.exists(os.path.join(image, d, "sbx-upper")), \
                "a write inside reached the image on disk (%s)" % os.path.join(image, d)


def mount_lists():
    """{array name: [paths]} of the /proc lists in mounts.c."""
    with open(os.path.join(ROOT, "sandbox", "runtime", "mounts.c")) as f:
        text = f.read()
    out = {}
    for name in ("proc_masked_files", "proc_masked_dirs", "proc_ro"):
        body = re.search(r"\b%s\[\] = \{(.*?)\};" % name, text, re.S)
        assert body, name
        out[name] = re.findall(r'"(/proc/[^"]+)"', body.group(1))
    return out


def test_proc_sensitive_paths_masked(sbx, box):
    """Every path of mounts.c's /proc lists, from inside: each masked file
    that exists is /dev/null (reads empty), each masked directory an empty
    read-only tmpfs, each read-only path a read-only mount; writes to
    sysrq-trigger and core_pattern fail."""
    lists = mount_lists()
    res = run(sbx, box, "cat /proc/self/mountinfo; echo ---; "
                        "for f in %s; do [ -e $f ] && echo \"$f $(wc -c < $f)\"; done; echo ---; "
                        "for d in %s; do [ -e $d ] && echo \"$d $(ls -A $d | wc -l)\"; done; echo ---; "
                        "for p in %s; do [ -e $p ] && echo $p; done; echo ---; "
                        "echo h > /proc/sysrq-trigger 2>&1; echo sysrq=$?; "
                        "echo x > /proc/sys/kernel/core_pattern 2>&1; echo core=$?"
              % (" ".join(lists["proc_masked_files"]), " ".join(lists["proc_masked_dirs"]),
                 " ".join(lists["proc_ro"])))
    mountinfo, files, dirs, ro, out = res["stdout"].split("---\n")
    mounts = {}
    for line in mountinfo.splitlines():
        f = line.split()
        mounts[f[4]] = (f[5].split(","), f[f.index("-") + 1])
    assert len(files.splitlines()) >= 3, "masked files found: %r" % files
    for line in files.splitlines():
        path, size = line.split()
        assert size == "0", "%s is readable (%s bytes)" % (path, size)
        assert path in mounts, "%s is not masked by a mount" % path
    for line in dirs.splitlines():
        path, n = line.split()
        assert n == "0" and mounts.get(path, ([], ""))[1] == "tmpfs" and \
            "ro" in mounts[path][0], "%s is not an empty read-only tmpfs: %r" % (path, mounts.get(path))
    # (a path this kernel does not have, e.g. sysrq-trigger without
    # CONFIG_MAGIC_SYSRQ, is skipped by the runtime as here)
    for path in ro.split():
        assert "ro" in mounts.get(path, ([], ""))[0], "%s is not a read-only mount" % path
    assert "/proc/sys" in ro.split(), ro
    assert "sysrq=0" not in out and "core=0" not in out, out


def test_only_loopback_without_network(sbx, box):
    out = run(sbx, box, "ls /sys/class/net; cat /proc/net/route | wc -l")["stdout"].split()
    assert out[:-1] == ["lo"], "interfaces: %r" % out
    assert out[-1] == "1", "routes exist in a network:none sandbox"


def test_no_host_secrets_or_services(sbx, box):
    out = run(sbx, box, "env; echo ---; tr '\\0' '\\n' < /proc/1/environ; echo ---; "
                        "ls -A /root /home | wc -l; echo ---; ls -A /etc; echo ---; "
                        "cat /etc/passwd")["stdout"]
    env, environ, homes, etc, passwd = out.split("---\n")
    assert sbx.secret not in out, "the node secret is visible inside"
    for name in ("NODE_EXTRA_CA_CERTS", "SBX_", "REDIS", "PYENV"):
        assert name not in env + environ, "%s leaked into the env" % name
    # /root and /home are the image's own, empty ones; /etc is generated.
    # ls prints the two headers and the blank line between them: 3 lines.
    assert homes.strip() == "3", "/root or /home is not empty inside: %r" % out
    host_etc = set(os.listdir("/etc"))
    own = set(etc.split())
    assert own <= {"alternatives", "group", "hosts", "ld.so.cache", "nsswitch.conf", "os-release",
                   "passwd", "resolv.conf", "shells", "ssl", "hostname"}, \
        "/etc inside holds more than the generated files: %r" % sorted(own)
    assert len(host_etc - own) > 20 and "shadow" not in own and "sbx" not in own
    with open("/etc/passwd") as f:
        assert passwd != f.read(), "the host's /etc/passwd is visible inside"
    assert passwd.split("\n")[0].startswith("root:x:0:0:"), passwd
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
    ports = [str(sbx.redis_port), sbx.url.rsplit(":", 1)[1]] + \
        [sbx.env["SBX_AGENT_%d" % i].rsplit(":", 1)[1] for i in range(1, sbx.agents + 1)]
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


def namespaces_of(key):
    """{kind: inode link} of the net, user and mnt namespaces of sandbox key's init."""
    inits = [pid for pid, comm, _ in sandbox_procs(key) if comm == "sbx-init"]
    assert len(inits) == 1, sandbox_procs(key)
    return {ns: os.readlink("/proc/%d/ns/%s" % (inits[0], ns)) for ns in ("net", "user", "mnt")}


def test_every_sandbox_has_namespaces_of_its_own(sbx):
    """Network namespaces are made ahead by idle build threads: a burst of
    8 creates at once uses up the ready ones (the rest make their own), and
    3 more one after another take new ones. Every sandbox has a network,
    user and mount namespace of its own, none of them the host's (the user
    namespace is the host's only with agent.userns = off), with only lo in
    it, and lo up."""
    host = {ns: os.readlink("/proc/self/ns/%s" % ns) for ns in ("net", "user", "mnt")}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        sids = list(pool.map(lambda _: new_box(sbx), range(8)))
    sids += [new_box(sbx) for _ in range(3)]
    try:
        seen = {sid: namespaces_of("dev." + sid) for sid in sids}
        own_user = sbx.conf_value("agent", "userns") != "off"
        for ns in ("net", "mnt", "user"):
            links = [n[ns] for n in seen.values()]
            if ns == "user" and not own_user:
                assert set(links) == {host["user"]}, links
                continue
            assert len(set(links)) == len(sids), "shared %s namespaces: %r" % (ns, links)
            assert host[ns] not in links, "a sandbox in the host's %s namespace" % ns
        code = ("import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
                "socket.create_connection(s.getsockname(), timeout=5); "
                "print(' '.join(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))")
        for sid in sids:
            assert py(sbx, sid, code).split() == ["lo"], sid
    finally:
        for sid in sids:
            destroy(sbx, sid)


def test_keepers_are_not_dumpable(sbx, box):
    """A process starts in its keeper's memory (sbx-init's clone), which
    stays non-dumpable: root in the sandbox cannot read the keeper's
    /proc/<pid>/environ (nor attach to it), while its own parent, an
    ordinary process of the sandbox, is readable."""
    out = run(sbx, box, "cat /proc/$PPID/environ >/dev/null 2>&1 && echo keeper-readable; "
                        "sh -c 'cat /proc/$PPID/environ >/dev/null && echo parent-readable'; "
                        "cat /proc/$PPID/comm; id -u")
    assert out["stdout"].split() == ["parent-readable", "sbx-keeper", "0"], out


def keepers(sid):
    """Host pids of sandbox sid's keepers."""
    return keepers_of("dev." + sid)


def test_commands_in_a_row_share_a_keeper_never_a_busy_one(sbx, box):
    """A keeper whose tree ended on its own waits a moment for the next
    command: commands in a row run under one keeper. One still reaping a
    background process is never handed another command, and a waiting
    keeper leaves within its bound (250 ms): no process of the sandbox
    stays behind for long."""
    def parent():
        out = run(sbx, box, "echo $PPID $(cat /proc/$PPID/comm)")["stdout"].split()
        assert out[1] == "sbx-keeper", out
        return out[0]
    first = parent()
    assert parent() == first and parent() == first
    busy = run(sbx, box, "sleep 1.5 >/dev/null 2>&1 & echo $PPID")["stdout"].strip()
    assert busy == first
    assert parent() != first, "a command went to the keeper of a running background process"
    sbx.wait("no keeper left once the background process ended",
             lambda: keepers(box) == [], timeout=10)


def test_the_first_command_finds_its_keeper_forked_ahead(sbx):
    """Once a sandbox is built, the agent asks its init for a keeper ahead
    of the first command (AHEAD): the fork is done while the answer to
    the create travels back, and a command run at once runs under that
    keeper. Unused, it leaves within its bound (250 ms) like any waiting
    keeper."""
    seen = first_command_under_keeper_ahead(
        lambda: new_box(sbx), lambda sid, cmd: run(sbx, sid, cmd)["stdout"],
        lambda sid: destroy(sbx, sid), lambda sid: "dev." + sid)
    assert seen is None, "the first command never ran under a keeper forked ahead: %r" % seen
    unused = new_box(sbx)
    try:
        sbx.wait("a keeper forked ahead", lambda: keepers(unused), timeout=1, interval=0.005)
        sbx.wait("the unused keeper to leave", lambda: keepers(unused) == [], timeout=10)
        assert [c for _, c, _ in sandbox_procs("dev." + unused)] == ["sbx-init"]
    finally:
        destroy(sbx, unused)


def test_a_killed_tree_leaves_no_keeper_behind(sbx, box):
    """The answer to a command killed at its timeout comes once its tree,
    keeper included, is gone: a killed tree's keeper is never kept."""
    run(sbx, box, "true")
    res = run(sbx, box, "sleep 30", timeoutMs=300)
    assert res["timedOut"] is True and res["exitCode"] == 124, res
    assert [c for _, c, _ in sandbox_procs("dev." + box)] == ["sbx-init"]


def test_stopped_keepers_wedge_nothing(sbx, box):
    """A background process stops every other keeper of the sandbox (SIGSTOP
    cannot be blocked) while commands run one after another: a command whose
    keeper is stopped ends at its timeout, a stopped waiting keeper is woken
    for the next command, and once it is over no keeper is left, stopped
    or not."""
    stopper = ("me=$PPID; (for i in $(seq 40); do for p in /proc/[0-9]*; do "
               "n=${p#/proc/}; [ \"$(cat $p/comm 2>/dev/null)\" = sbx-keeper ] && "
               "[ $n != $me ] && kill -STOP $n 2>/dev/null; done; sleep 0.05; done; "
               "touch /tmp/stopper-done) >/dev/null 2>&1 & echo started")
    assert run(sbx, box, stopper)["stdout"] == "started\n"
    outcomes = set()
    done = False
    deadline = time.monotonic() + 60
    while not done:
        assert time.monotonic() < deadline, "the stopper never ended: %r" % outcomes
        res = run(sbx, box, "test -e /tmp/stopper-done && echo done || echo ran",
                  timeout=10, timeoutMs=1000)
        assert res["timedOut"] or res["exitCode"] == 0, res
        outcomes.add("timedOut" if res["timedOut"] else res["stdout"].strip())
        done = res["stdout"] == "done\n"
    assert "ran" in outcomes, outcomes
    assert run(sbx, box, "echo fine")["stdout"] == "fine\n"
    sbx.wait("no keeper left", lambda: keepers(box) == [], timeout=10)


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


def ignore_signal(sig):
    """Set sig ignored in this process with the kernel's own rt_sigaction
    (glibc and Python refuse 32 and 33); the old handler, to restore."""
    class KSigaction(ctypes.Structure):
        _fields_ = [("handler", ctypes.c_void_p), ("flags", ctypes.c_ulong),
                    ("restorer", ctypes.c_void_p), ("mask", ctypes.c_uint64)]

    libc = ctypes.CDLL(None, use_errno=True)
    new, old = KSigaction(handler=1), KSigaction()   # 1: SIG_IGN
    assert libc.syscall(13, sig, ctypes.byref(new), ctypes.byref(old), 8) == 0, ctypes.get_errno()
    return lambda: libc.syscall(13, sig, ctypes.byref(old), None, 8)


def signal_masks(pid):
    """(SigBlk, SigIgn) of pid, as ints."""
    with open("/proc/%d/status" % pid) as f:
        fields = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
    return int(fields["SigBlk"], 16), int(fields["SigIgn"], 16)


def test_signal_state_of_init_and_commands():
    """An agent started with signal 32 ignored (glibc's own signal, which
    its signal() cannot reset) hands none of it on: init blocks only
    SIGCHLD and ignores nothing; a command and a background process start
    with nothing blocked and nothing ignored."""
    restore = ignore_signal(32)
    try:
        st = stack_up(agents=1)
    finally:
        restore()
    try:
        sid = new_box(st)
        key = "%s.%s" % ("dev", sid)
        inits = [pid for pid, comm, _ in sandbox_procs(key) if comm == "sbx-init"]
        assert len(inits) == 1, sandbox_procs(key)
        assert signal_masks(st.pid("agent-1"))[1] & (1 << 31), \
            "the agent does not have 32 ignored: the test proves nothing"
        assert signal_masks(inits[0]) == (1 << (signal.SIGCHLD - 1), 0), signal_masks(inits[0])
        out = run(st, sid, "grep -E '^Sig(Blk|Ign)' /proc/self/status")["stdout"]
        assert out.split() == ["SigBlk:", "0" * 16, "SigIgn:", "0" * 16], out
        r = st.api("POST", "/v1/sandboxes/%s/processes" % sid,
                   json={"id": "bg", "command": "grep -E '^Sig(Blk|Ign)' /proc/self/status"})
        assert r.status_code == 201, r.text
        logs = st.wait("the background process's output",
                       lambda: st.api("GET", "/v1/sandboxes/%s/processes/bg/logs" % sid).json()
                       .get("stdout") or None)
        assert logs.split() == ["SigBlk:", "0" * 16, "SigIgn:", "0" * 16], logs
    finally:
        stack_down(st)
