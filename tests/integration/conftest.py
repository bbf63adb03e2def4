"""The integration harness: one real sbx stack per test session.

`deploy/stack up --dir <tmp> --port <free> --agents 2` runs once (binaries
from $SBX_BUILD, default build/), every test talks to it over HTTP through
nginx, and `deploy/stack down` runs at the end, also when tests fail.

Fixtures:
  stack      the Stack below (dir, url, keys, redis port, helpers)
  api        stack.api:  api(method, path, key=<dev key>|None, json=, data=, headers=)
  redis_cli  stack.redis_cli: redis_cli(*args) -> stdout text (stripped)
  new_key    stack.new_key:   new_key(tenant, admin=False) -> "sbx_..."

Set SBX_KEEP=1 to keep the stack directory (logs) after the session.
"""

import hashlib
import os
import re
import sys
import socket
import subprocess
import tempfile
import time
import uuid

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from sbxroute import past_route_cache, routed  # noqa: E402,F401
from sbxproc import scaled  # noqa: E402

STACK = os.path.join(ROOT, "deploy", "stack")
DEFAULT_KEY = object()


def become_subreaper():
    """Adopt the stack's processes when `deploy/stack` exits, so that their
    exits are reaped here (some machines' PID 1 never reaps orphans)."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_orphans():
    """waitpid() every exited child of ours. Called between subprocess runs
    only, so every zombie child is an adopted stack process, never a Popen's."""
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if rest[0] == "Z" and int(rest[1]) == me:
            try:
                os.waitpid(int(d), os.WNOHANG)
            except ChildProcessError:
                pass



def sandbox_procs(key):
    """Live host processes of sandbox key "<tenant>.<id>": those whose cgroup
    path has the key as a whole component. [(pid, comm, ppid)]."""
    pattern = re.compile(re.escape("/" + key) + r"(/|$)", re.M)
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
            with open("/proc/%s/cgroup" % d) as f:
                cg = f.read()
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[1].split()
        if rest[0] != "Z" and pattern.search(cg):
            found.append((int(d), stat[stat.index("(") + 1:stat.rindex(")")], int(rest[1])))
    return found


def keepers_of(key):
    """Host pids of the keepers (sbx-keeper) of sandbox key."""
    return [pid for pid, comm, _ in sandbox_procs(key) if comm == "sbx-keeper"]


def ns_pid(host_pid):
    """The pid of host process host_pid in its own (innermost) pid namespace."""
    with open("/proc/%d/status" % host_pid) as f:
        return next(l.split()[-1] for l in f if l.startswith("NSpid:"))


def first_command_under_keeper_ahead(create, run, destroy, key_of, attempts=4):
    """Does the first command of a new sandbox run under the keeper its init
    forked ahead (AHEAD)? create() -> sid, run(sid, command) -> stdout,
    destroy(sid), key_of(sid) -> "<tenant>.<id>". An attempt whose look or
    command came after the keeper's bound (250 ms: a slow machine) is made
    again, up to attempts times. None once one did, else what each saw."""
    seen = []
    for _ in range(attempts):
        sid = create()
        try:
            deadline = time.monotonic() + 0.25
            ahead = keepers_of(key_of(sid))
            while not ahead and time.monotonic() < deadline:
                time.sleep(0.005)
                ahead = keepers_of(key_of(sid))
            if len(ahead) != 1:
                seen.append("keepers %r of %r" % (ahead, sandbox_procs(key_of(sid))))
                continue
            try:
                want = ns_pid(ahead[0])
            except (OSError, StopIteration):
                seen.append("gone before it was read")
                continue
            got = run(sid, "echo $PPID $(cat /proc/$PPID/comm)").split()
            assert got[1] == "sbx-keeper", got
            if got[0] == want:
                return None
            seen.append("the command came after the bound")
        finally:
            destroy(sid)
    return seen


def free_port():
    """A free loopback port below the ephemeral range."""
    import random
    for _ in range(500):
        p = random.randint(20000, 32000)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
            s.listen(1)
        except OSError:
            continue
        finally:
            s.close()
        return p
    raise RuntimeError("no free port")


def api_run(*overrides, args=("--print-config",)):
    """sbx-api -c conf/sbx.conf -o OVERRIDE... ARGS: the CompletedProcess
    (by default how sbx-api judges a configuration, with no server)."""
    build = os.environ.get("SBX_BUILD", "build")
    cmd = [os.path.join(build if os.path.isabs(build) else os.path.join(ROOT, build), "sbx-api"),
           "-c", os.path.join(ROOT, "conf", "sbx.conf")]
    for o in overrides:
        cmd += ["-o", o]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=30)


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                env[k] = v
    return env


class Stack:
    """A running stack: its directory, URLs, keys and helpers."""

    def __init__(self, directory, build):
        self.dir = directory
        self.build = build
        self.env = read_env(os.path.join(directory, "env"))
        self.url = self.env["SBX_URL"]
        self.static_url = self.env["SBX_STATIC_URL"]
        self.key = self.env["SBX_API_KEY"]
        self.admin_key = self.env["SBX_ADMIN_KEY"]
        self.redis_port = int(self.env["SBX_REDIS_PORT"])
        self.secret = self.env["SBX_NODE_SECRET"]
        self.agents = int(self.env["SBX_AGENTS"])
        self.http = requests.Session()

    # -- HTTP -----------------------------------------------------------

    def api(self, method, path, key=DEFAULT_KEY, json=None, data=None, headers=None,
            timeout=10, **kw):
        """One request through nginx. key: the dev key by default, None for none."""
        h = dict(headers or {})
        if key is DEFAULT_KEY:
            key = self.key
        if key is not None:
            h["Authorization"] = "Bearer " + key
        return self.http.request(method, self.url + path, json=json, data=data, headers=h,
                                 timeout=timeout, **kw)

    def data(self, method, path, **kw):
        """api() for a data call, with routed()'s one retry."""
        return routed(self.api, method, path, **kw)

    def create(self, prefix, key=DEFAULT_KEY, **body):
        """A new sandbox "<prefix>-<10 hex>" made with body (201 asserted):
        (its id, its record)."""
        sid = "%s-%s" % (prefix, uuid.uuid4().hex[:10])
        r = self.api("PUT", "/v1/sandboxes/" + sid, key=key, json=body, timeout=30)
        assert r.status_code == 201, "create %s: %d %s" % (sid, r.status_code, r.text[:300])
        return sid, r.json()

    def conf_value(self, section, key):
        """The value of section.key in the stack's sbx.conf, or None."""
        cur = None
        with open(os.path.join(self.dir, "conf", "sbx.conf")) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                m = re.match(r"^\[(\w+)\]$", line)
                if m:
                    cur = m.group(1)
                elif cur == section and "=" in line and line.split("=", 1)[0].strip() == key:
                    return line.split("=", 1)[1].strip()
        return None

    # -- Redis ----------------------------------------------------------

    def restore_key(self):
        """Write the dev key's record (tenant dev, not admin) back into a
        Redis that lost it (FLUSHALL, a restart without data)."""
        digest = hashlib.sha256(self.key.encode()).hexdigest()
        self.redis_cli("HSET", "sbx:apikey:" + digest, "tenant", "dev", "admin", "0",
                       "createdAt", "0")

    def redis_cli(self, *args, check=True):
        """Run redis-cli against the stack's Redis; stdout, stripped."""
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.redis_port),
                            "--no-auth-warning"] + [str(a) for a in args],
                           capture_output=True, text=True, timeout=10)
        if check and r.returncode != 0:
            raise AssertionError("redis-cli %s failed: %s" % (args, r.stderr))
        return r.stdout.strip()

    # -- the stack script -------------------------------------------------

    def run(self, *args, check=True, timeout=60):
        """deploy/stack ARGS --dir DIR; the CompletedProcess."""
        r = subprocess.run([STACK] + list(args) + ["--dir", self.dir], capture_output=True,
                           text=True, timeout=timeout, env=dict(os.environ, SBX_BUILD=self.build))
        reap_orphans()
        if check and r.returncode != 0:
            raise AssertionError("deploy/stack %s failed (%d):\n%s%s" %
                                 (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r

    def new_key(self, tenant, admin=False):
        """A new API key for tenant (through `deploy/stack key`)."""
        args = ["key", "--tenant", tenant] + (["--admin"] if admin else [])
        key = self.run(*args).stdout.strip()
        assert key.startswith("sbx_") and len(key) == 44, "unexpected key text %r" % key
        return key

    def pid(self, name):
        with open(os.path.join(self.dir, "pids", name + ".pid")) as f:
            return int(f.read().strip())

    def log(self, name, lines=30):
        try:
            with open(os.path.join(self.dir, "logs", name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- waiting ----------------------------------------------------------

    def wait(self, what, cond, timeout=10.0, interval=0.1):
        """Poll cond() until it is truthy; its value, or fail saying what.
        timeout is scaled (sbxproc.scaled) under sanitizers."""
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = cond()
                if last:
                    return last
            except (requests.RequestException, AssertionError) as ex:
                last = ex
            reap_orphans()
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.1fs waiting for %s (last: %r)" %
                                     (timeout, what, last))
            time.sleep(interval)

    def healthy(self):
        """Healthz 200 and every agent's alive key present (the state after `up`)."""
        r = self.api("GET", "/healthz", key=None, timeout=2)
        if r.status_code != 200:
            return False
        for i in range(1, self.agents + 1):
            if self.redis_cli("EXISTS", "sbx:node:{agent-%d}:alive" % i, check=False) != "1":
                return False
        return True

    def wait_healthy(self, timeout=15.0):
        return self.wait("the whole stack to be healthy again", self.healthy, timeout)


def stack_up(agents=2, overrides=()):
    """A new stack in a new temp dir; overrides: ["section.key=value", ...]
    written into its sbx.conf (deploy/stack up -o)."""
    build = os.environ.get("SBX_BUILD", "build")
    if not os.path.isabs(build):
        build = os.path.join(ROOT, build)
    become_subreaper()
    directory = tempfile.mkdtemp(prefix="sbx-it-", dir="/tmp")
    port = free_port()
    args = [STACK, "up", "--dir", directory, "--port", str(port), "--agents", str(agents)]
    # the stand-in for the internet of test_egress.py's lab (TEST-NET-2, blocked by default)
    for o in ["agent.egress_allow=198.51.100.1/32"] + list(overrides):
        args += ["-o", o]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, SBX_BUILD=build))
    if r.returncode != 0:
        subprocess.run([STACK, "down", "--dir", directory], capture_output=True, timeout=60)
        raise RuntimeError("deploy/stack up failed (%d); logs in %s\n%s%s" %
                           (r.returncode, directory, r.stdout, r.stderr))
    return Stack(directory, build)


# A leak report fails the session like any other report; so does a leak
# check that could not run (it would otherwise hide every leak).
SANITIZER_ERRORS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer",
                    "LeakSanitizer has encountered a fatal error")
SANITIZER_WARNINGS = ("WARNING: AddressSanitizer",)


def sanitizer_findings(directory):
    """(errors, warnings): sanitizer report lines found in the stack's logs."""
    errors, warnings = [], []
    logs = os.path.join(directory, "logs")
    for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        with open(os.path.join(logs, name), errors="replace") as f:
            for line in f:
                if any(m in line for m in SANITIZER_ERRORS):
                    errors.append("%s: %s" % (name, line.rstrip()))
                elif any(m in line for m in SANITIZER_WARNINGS):
                    warnings.append("%s: %s" % (name, line.rstrip()))
    return errors, warnings


def processes_mentioning(text):
    """'pid cmdline' of every live process whose command line contains text."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open("/proc/%s/stat" % d) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            found.append("%s %s" % (d, cmd.strip()))
    return found


def stack_down(st, keep=False):
    r = subprocess.run([STACK, "down", "--dir", st.dir], capture_output=True, text=True,
                       timeout=120)
    reap_orphans()
    if r.returncode != 0:
        print("deploy/stack down failed:", r.stdout, r.stderr)
    if not keep:
        stack_down_cleanup(st)


def own_stack(agents=2, overrides=()):
    """The body of a module's fixture for a stack of its own:
    `yield from own_stack(...)` brings it up, yields it, takes it down."""
    st = stack_up(agents=agents, overrides=overrides)
    try:
        yield st
    finally:
        stack_down(st)


def stack_down_cleanup(st):
    """Remove the stack directory (unless SBX_KEEP is set)."""
    if os.environ.get("SBX_KEEP"):
        print("stack directory kept:", st.dir)
        return
    # --one-file-system: never descend into a mount a sandbox left behind.
    r = subprocess.run(["rm", "-rf", "--one-file-system", st.dir], capture_output=True,
                       text=True)
    if r.returncode != 0:
        print("could not remove %s entirely (a mount left behind?): %s" % (st.dir, r.stderr))


def pytest_configure(config):
    config.addinivalue_line("markers", "session_end: run after every other test of the session")


def pytest_collection_modifyitems(items):
    """Tests marked session_end run last (they look at what the whole
    session left, e.g. test_docs.py's Redis key families)."""
    items.sort(key=lambda item: item.get_closest_marker("session_end") is not None)


@pytest.fixture(scope="session")
def stack():
    try:
        st = stack_up(agents=2)
    except RuntimeError as ex:
        pytest.exit(str(ex), returncode=1)
    try:
        yield st
    finally:
        stack_down(st, keep=True)
    left = processes_mentioning(st.dir)
    if left:
        pytest.fail("deploy/stack down left processes behind:\n%s" % "\n".join(left),
                    pytrace=False)
    errors, warnings = sanitizer_findings(st.dir)
    for w in warnings:
        print("sanitizer warning:", w)
    if errors:
        pytest.fail("sanitizer reports in the stack's logs (kept in %s):\n%s" %
                    (st.dir, "\n".join(errors[:40])), pytrace=False)
    stack_down_cleanup(st)


@pytest.fixture
def api(stack):
    return stack.api


@pytest.fixture
def redis_cli(stack):
    return stack.redis_cli


@pytest.fixture
def new_key(stack):
    return stack.new_key


def error_of(r):
    """The {code, message, details} of a JSON error answer, asserting its shape."""
    ctype = r.headers.get("Content-Type", "")
    assert ctype.startswith("application/json"), \
        "%s %s: expected a JSON error, got Content-Type %r body %r" % (
            r.request.method, r.request.path_url, ctype, r.text[:300])
    body = r.json()
    assert isinstance(body, dict) and set(body) == {"error"}, \
        "error body must be exactly {error:{...}}: %r" % body
    err = body["error"]
    assert isinstance(err.get("code"), str) and err["code"].isupper(), "bad error code in %r" % body
    assert isinstance(err.get("message"), str) and err["message"], "empty error message in %r" % body
    assert isinstance(err.get("details", {}), dict), "details must be an object: %r" % body
    return err


def assert_error(r, status, code):
    """Assert r is the JSON error `code` with HTTP `status`."""
    assert r.status_code == status, "%s %s: expected %d %s, got %d: %r" % (
        r.request.method, r.request.path_url, status, code, r.status_code, r.text[:300])
    err = error_of(r)
    assert err["code"] == code, "%s %s: expected code %s, got %r" % (
        r.request.method, r.request.path_url, code, err)
    return err
