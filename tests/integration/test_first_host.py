"""docs/DEPLOY.md against this machine (issue 23 item 11): its runtime
package list, its table of operator ceilings, and its "First host in 15
minutes" path, run as written.

The path runs in a private mount and network namespace (`unshare`):
`/etc`, `/usr`, `/var` and `/run` are overlays whose writes go to a temp
dir (and `/var/lib/sbx` a directory of it: idmapped mounts need a real
filesystem), and the network is a fresh one with only `lo`, so the documented
ports (Redis 6379, the agent 7070, nginx 80 and 443) and files (/etc/sbx,
/usr/bin, /etc/nginx/nginx.conf, …) are used as they are, and nothing of
it reaches the host. The host's `/run/sbx/uid-ranges` (the agents' lock
directory of uid ranges) is bound in, so the first host's agent never takes
a range another agent of this machine holds. What this machine cannot do is
replaced, line by line: the `apt-get install` line is checked (every
package installed) rather than run, `build/` is $SBX_BUILD, and `systemctl`
is what systemd would do with each unit (the shipped units and Debian's
own redis-server and nginx units: their User, RuntimeDirectory,
StateDirectory, EnvironmentFile, ExecStartPre and ExecStart lines).
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import pytest

from conftest import ROOT

DEPLOY = os.path.join(ROOT, "docs", "DEPLOY.md")
CONF = os.path.join(ROOT, "conf", "sbx.conf")


def read(path):
    with open(path) as f:
        return f.read()


def section(title):
    text = read(DEPLOY)
    part = text[text.index("\n## " + title + "\n"):]
    end = part.find("\n## ", 4)
    return part if end < 0 else part[:end]


def build_dir():
    build = os.environ.get("SBX_BUILD", "build")
    return build if os.path.isabs(build) else os.path.join(ROOT, build)


def documented_packages():
    rows = [l for l in section("Runtime packages").splitlines() if l.startswith("| `")]
    pkgs = set()
    for row in rows:
        pkgs.update(re.findall(r"`([a-z0-9][a-z0-9.+-]+)`", row.split("|")[1]))
    assert len(pkgs) > 8, pkgs
    return pkgs


def package_of(path):
    r = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
    if r.returncode != 0:
        r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    assert r.returncode == 0, "no package owns %s: %s" % (path, r.stderr)
    return r.stdout.split(":")[0]


def test_runtime_packages_are_the_binaries_libraries():
    """Every package of the list is a package of this Debian (installed
    here), and the package of every library sbx-api and sbx-agent link
    (their NEEDED entries) is in the list (libc6 and the sanitizers'
    runtimes aside)."""
    pkgs = documented_packages()
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n"] + sorted(pkgs),
                       capture_output=True, text=True)
    installed = {l.split()[0] for l in r.stdout.splitlines() if l.endswith(" installed")}
    assert pkgs <= installed, "not Debian packages installed here: %r" % sorted(pkgs - installed)
    missing = set()
    for binary in ("sbx-api", "sbx-agent"):
        exe = os.path.join(build_dir(), binary)
        needed = re.findall(r"NEEDED\s+(\S+)",
                            subprocess.run(["objdump", "-p", exe], capture_output=True,
                                           text=True).stdout)
        paths = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(
            ["ldd", exe], capture_output=True, text=True).stdout, re.M))
        for lib in needed:
            pkg = package_of(paths[lib])
            # libc6; and a sanitized build's runtime (SANITIZE=: libasan8, libubsan1)
            if pkg not in pkgs and pkg != "libc6" and not re.match(r"^lib(a|ub|l|t)san\d+$", pkg):
                missing.add("%s (%s of %s)" % (pkg, lib, binary))
    assert not missing, "DEPLOY.md's runtime packages lack: %r" % sorted(missing)


def conf_defaults():
    values, sect = {}, None
    for line in read(CONF).splitlines():
        m = re.match(r"^\[(\w+)\]", line)
        if m:
            sect = m.group(1)
        m = re.match(r"^(\w+) = ?(.*)$", line)
        if m and sect:
            values["%s.%s" % (sect, m.group(1))] = m.group(2).strip()
    return values


def test_ceilings_table_names_real_keys_with_their_defaults():
    rows = [l for l in section("Ceilings an operator sets").splitlines()
            if re.match(r"^\| `\w+\.\w+` \|", l)]
    assert len(rows) >= 10, rows
    conf = conf_defaults()
    wrong = []
    for row in rows:
        key, default = [c.strip() for c in row.split("|")[1:3]]
        key = key.strip("`")
        if conf.get(key) != default:
            wrong.append("%s: DEPLOY.md %r, conf/sbx.conf %r" % (key, default, conf.get(key)))
    assert not wrong, "\n".join(wrong)


# ---- the first host ---------------------------------------------------------------------

def unit_lines(path):
    """{key: [values]} of a unit file's [Service] section."""
    out, in_service = {}, False
    for line in read(path).splitlines():
        if line.startswith("["):
            in_service = line.strip() == "[Service]"
        elif in_service and "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def start_unit(name):
    """The shell lines that do what `systemctl start name` does with the
    unit's process settings (the shipped units, else Debian's)."""
    shipped = os.path.join(ROOT, "deploy", "systemd", name + ".service")
    u = unit_lines(shipped if os.path.exists(shipped) else "/lib/systemd/system/%s.service" % name)
    user = u.get("User", ["root"])[-1]
    group = u.get("Group", [user])[-1]
    lines = []
    for d in u.get("RuntimeDirectory", []):
        mode = u.get("RuntimeDirectoryMode", ["0755"])[-1]
        lines.append("install -d -o %s -g %s -m %s /run/%s" % (user, group, mode, d))
    for d in u.get("StateDirectory", []):
        mode = u.get("StateDirectoryMode", ["0755"])[-1]
        lines.append("install -d -o %s -g %s -m %s /var/lib/%s" % (user, group, mode, d))
    for f in u.get("EnvironmentFile", []):
        f = f.lstrip("-")
        lines.append("if [ -f %s ]; then set -a; . %s; set +a; fi" % (f, f))
    run_as = "" if user == "root" else "runuser -u %s -- " % user
    # systemd expands an unset $VAR of an Exec line to nothing
    execs = {k: [re.sub(r"\$(\w+)", r"${\1-}", c) for c in u.get(k, [])]
             for k in ("ExecStartPre", "ExecStart")}
    for cmd in execs["ExecStartPre"]:
        lines.append(run_as + cmd)
    for cmd in execs["ExecStart"]:
        if u.get("Type", ["simple"])[-1] == "forking":
            lines.append(run_as + cmd)
        else:
            lines.append("%ssetsid %s >>$T/%s.out 2>&1 & echo $! >>$T/pids" % (run_as, cmd, name))
    return lines


def first_host_script(tmp):
    """The documented commands, with this machine's substitutions."""
    block = re.search(r"```sh\n(.*?)```", section("First host in 15 minutes"), re.S).group(1)
    out = []
    for n, line in enumerate(l for l in block.splitlines() if l.strip() and not l.startswith("#")):
        out.append("printf '\\n@@%d %%s\\n' %s" % (n, shlex.quote(line)))
        if line.startswith("apt-get install"):
            pkgs = [w for w in line.split()[2:] if not w.startswith("-")]
            out.append("dpkg-query -W %s >/dev/null" % " ".join(pkgs))
            continue
        line = re.sub(r"(?<![\w/])build/", build_dir() + "/", line)
        if line == "systemctl daemon-reload":
            continue
        m = re.match(r"^systemctl enable --now (.*)$", line)
        if m:
            for name in m.group(1).split():
                out.extend(start_unit(name))
            # what the reader's pause after starting gives: the node registered
            out.append("for i in $(seq 150); do redis-cli EXISTS 'sbx:node:{agent-1}:alive' | grep -qx 1 "
                       "&& break; sleep 0.2; done")
            continue
        out.append(line)
    return out


PRELUDE = r"""
set -euo pipefail
T=%(tmp)s
: >$T/pids
mkdir -p $T/uid-ranges
mount --bind /run/sbx/uid-ranges $T/uid-ranges
for d in etc usr var run; do
	mkdir -p $T/$d.up $T/$d.work
	mount -t overlay overlay -o lowerdir=/$d,upperdir=$T/$d.up,workdir=$T/$d.work /$d
done
mount --bind $T/uid-ranges /run/sbx/uid-ranges
# the agent's state (and its images) on the temp dir's own filesystem: an
# overlay cannot be idmapped (DEPLOY.md: images_dir on ext4, xfs, btrfs)
mkdir -p $T/var-lib-sbx /var/lib/sbx
mount --bind $T/var-lib-sbx /var/lib/sbx
ip link set lo up
# this machine's Redis log was made by root once; on a fresh host it is redis'
[ -d /var/log/redis ] && chown -R redis:adm /var/log/redis
stop() {
	set +e
	[ -s /run/nginx.pid ] && kill "$(cat /run/nginx.pid)"
	for p in $(tac $T/pids); do kill -TERM "$p" 2>/dev/null; done
	for i in $(seq 300); do
		alive=0
		for p in $(cat $T/pids); do kill -0 "$p" 2>/dev/null && alive=1; done
		[ -s /run/nginx.pid ] && kill -0 "$(cat /run/nginx.pid)" 2>/dev/null && alive=1
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in $(cat $T/pids); do kill -KILL "$p" 2>/dev/null; done
}
trap stop EXIT
cd %(root)s
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the agent needs root")
def test_first_host_in_15_minutes():
    tmp = tempfile.mkdtemp(prefix="sbx-first-host-", dir="/tmp")
    os.makedirs("/run/sbx/uid-ranges", exist_ok=True)
    script = PRELUDE % {"tmp": shlex.quote(tmp), "root": shlex.quote(ROOT)} + \
        "\n".join(first_host_script(tmp)) + "\n"
    try:
        r = subprocess.run(["unshare", "--mount", "--net", "--propagation", "private", "--fork",
                            "--kill-child", "bash", "-c", script],
                           capture_output=True, text=True, timeout=240)
        logs = ""
        for name in ("sbx-api", "sbx-agent", "redis-server"):
            p = os.path.join(tmp, name + ".out")
            if os.path.exists(p):
                logs += "\n--- %s\n%s" % (name, read(p)[-4000:])
        assert r.returncode == 0, "the path stopped (%d):\n%s\n%s%s" % (
            r.returncode, r.stdout[-3000:], r.stderr[-3000:], logs)
        steps = re.split(r"\n@@\d+ ", r.stdout)
        health, record, exec_ = [json.loads(s.split("\n", 1)[1]) for s in steps[-3:]]
        assert health == {"status": "ok", "redis": "ok"}, health
        assert record.get("id") == "first" and record.get("state") == "running", (record, logs)
        assert exec_.get("exitCode") == 0 and exec_.get("stdout") == "hello\n", (exec_, logs)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", tmp], capture_output=True)


def test_no_units_runtime_directory_holds_the_agents_locks():
    """systemd removes a unit's RuntimeDirectory when the unit stops (and
    chowns it to the unit's User): a directory under /run where the agent
    keeps its host-wide locks (uid ranges, egress slots) must belong to no
    unit, or `systemctl stop sbx-api` deletes them under a running agent."""
    agent_dirs = set()
    for d, _, files in os.walk(os.path.join(ROOT, "sandbox")):
        for name in files:
            if name.endswith(".c"):
                agent_dirs.update(re.findall(r'#define \w+ "(/run/[^"]+)"',
                                             read(os.path.join(d, name))))
    assert agent_dirs, "no /run path found in the agent's sources"
    clashes = []
    for unit in os.listdir(os.path.join(ROOT, "deploy", "systemd")):
        u = unit_lines(os.path.join(ROOT, "deploy", "systemd", unit))
        for rd in u.get("RuntimeDirectory", []):
            for d in rd.split():
                clashes += ["%s: RuntimeDirectory=%s holds %s" % (unit, d, a)
                            for a in agent_dirs if (a + "/").startswith("/run/%s/" % d)]
    assert not clashes, "\n".join(clashes)
