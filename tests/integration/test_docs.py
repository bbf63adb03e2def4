"""The documents against the tree (issue 23 items 8–10): each test reads a
document and the code or the running stack it describes, and fails with
the list of what does not match — so a route, key family, filtered call
or test reference added without its documentation is caught too.

  * every route of the route tables (sbx-api's, the agent's, the agent's
    health and the Cloudflare view's) appears in docs/API.md;
  * docs/SECURITY.md's seccomp table names exactly the calls of
    sandbox/runtime/seccomp_filter.c, and every test it names exists;
  * the systemd units pass `systemd-analyze verify` without a warning;
  * README.md's first session, run as written against the stack;
  * every key family in Redis at the end of the session is in
    docs/REDIS.md (the last test of the session: conftest.py orders it).
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

DOCS = os.path.join(ROOT, "docs")
METHODS = ("GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "*")
DATA_PREFIX = "/v1/sandboxes/{id}"
COMPAT_SRC = os.path.join(ROOT, "sandbox", "features", "agent_compat.c")


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def sources():
    for top in ("fcgi", "sandbox"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith((".c", ".h")):
                    yield os.path.join(d, name)


def shape(path):
    """A route path with every parameter as {} and no query: the form
    routes and documents are compared in."""
    path = re.split(r"[?\[]", path, 1)[0]
    return re.sub(r"\{[^}]*\}|<[^>]*>", "{}", path).rstrip("/") or "/"


def table_routes():
    """{(method, shape): where} of every row of every route table of the
    tree: `{ "METHOD", "/path"` rows; the Cloudflare view's rows (paths
    after …/cf) get their prefix; plus the agent's health path."""
    found = {}
    row = re.compile(r'\{ "(%s)", "(/[^"]*)"' % "|".join(re.escape(m) for m in METHODS))
    for path in sources():
        text = read(path)
        for m in row.finditer(text):
            route = m.group(2)
            if path == COMPAT_SRC and not route.startswith("/v1/"):
                route = DATA_PREFIX + "/cf" + route
            found[(m.group(1), shape(route))] = os.path.relpath(path, ROOT)
        for m in re.finditer(r'#define HTTPD_HEALTH_PATH "([^"]+)"', text):
            found[("GET", shape(m.group(1)))] = os.path.relpath(path, ROOT)
    assert len(found) > 50, "route tables not found: %r" % found
    return found


def documented_routes(text):
    """{(method, shape)} of every `METHOD /path` or `METHOD …/path` span
    (… is /v1/sandboxes/{id}) of a document."""
    out = set()
    span = re.compile(r"`(%s) (/|…/)([^`\s]*)" % "|".join(re.escape(m) for m in METHODS))
    for m in span.finditer(text):
        path = (DATA_PREFIX + "/" if m.group(2) == "…/" else "/") + m.group(3)
        out.add((m.group(1), shape(path)))
    return out


def test_every_route_is_in_api_md():
    listed = documented_routes(read(os.path.join(DOCS, "API.md")))
    missing = sorted("%s %s (%s)" % (m, p, where) for (m, p), where in table_routes().items()
                     if (m, p) not in listed)
    assert not missing, "routes of the tree that docs/API.md does not list:\n  " + \
        "\n  ".join(missing)


# ---- SECURITY.md ----------------------------------------------------------------------

def test_seccomp_table_names_the_filters_calls():
    """Every call of seccomp_filter.c's deny list is in SECURITY.md's
    seccomp table and every call the table names is filtered."""
    from test_runtime import filter_lists
    names, _ = filter_lists()
    text = read(os.path.join(DOCS, "SECURITY.md"))
    table = text[text.index("| syscalls | why a sandbox is denied them |"):]
    table = table[:table.index("\n\n")]
    cells = [line.split("|")[1] for line in table.splitlines()[2:]]
    doc = set()
    for cell in cells:
        for word in re.findall(r"`([a-z_][a-z_0-9]*(?:\(64\))?)", cell):
            base = re.sub(r"\(.*", "", word)
            doc.add(base)
            if word.endswith("(64)"):
                doc.add(base + "64")
    special = {"clone", "unshare", "clone3", "personality", "socket", "socketpair"}
    assert sorted(set(names) - doc) == [], "filtered, not in the table"
    assert sorted(doc - set(names) - special) == [], "in the table, not filtered"


def test_every_test_security_md_names_exists():
    """Each `file.py::name` reference of SECURITY.md (and `::name` after
    it, which means the same file) names a test function that exists."""
    text = read(os.path.join(DOCS, "SECURITY.md"))
    files = {}
    for d in ("tests/integration", "tests/multihost", "tests/unit"):
        for name in os.listdir(os.path.join(ROOT, d)):
            files.setdefault(name, os.path.join(ROOT, d, name))
    missing = []
    for line in text.splitlines():
        current = None
        for m in re.finditer(r"(?:(?:tests/\w+/)?(test_\w+\.(?:py|c)))?::(\w+)|"
                             r"`(?:tests/\w+/)?(test_\w+\.(?:py|c))`", line):
            fname = m.group(1) or m.group(3)
            if fname:
                current = fname
                if fname not in files:
                    missing.append(fname)
                    continue
            if m.group(2) and current in files:
                body = read(files[current])
                if not re.search(r"(def |TEST\()%s\b" % re.escape(m.group(2)), body):
                    missing.append("%s::%s" % (current, m.group(2)))
    assert not missing, "SECURITY.md names tests that do not exist: %r" % sorted(set(missing))


# ---- deploy/systemd ---------------------------------------------------------------------

@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze")
def test_systemd_units_pass_systemd_analyze_verify():
    """The shipped units, their ExecStart pointed at the built binaries (the
    only change): `systemd-analyze verify` exits 0 and prints nothing (it
    exits 0 on an unknown key or a bad value and only warns)."""
    build = os.environ.get("SBX_BUILD", "build")
    build = build if os.path.isabs(build) else os.path.join(ROOT, build)
    tmp = tempfile.mkdtemp(prefix="sbx-units-")
    try:
        units = []
        for unit in sorted(os.listdir(os.path.join(ROOT, "deploy", "systemd"))):
            text = read(os.path.join(ROOT, "deploy", "systemd", unit))
            for binary in ("sbx-api", "sbx-agent"):
                text = text.replace("/usr/bin/" + binary, os.path.join(build, binary))
            with open(os.path.join(tmp, unit), "w") as f:
                f.write(text)
            units.append(os.path.join(tmp, unit))
        assert len(units) >= 2, units
        r = subprocess.run(["systemd-analyze", "verify", "--man=no"] + units,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), \
            "systemd-analyze verify:\n" + r.stdout + r.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_file_code_never_maps_or_executes():
    """SECURITY.md, File API: the agent only reads and sends sandbox files.
    The code that touches them has no call that maps or executes one."""
    banned = re.compile(r"\b(mmap|mmap64|execve|execveat|fexecve|execv|execvp|execl|dlopen)\s*\(")
    found = []
    for rel in ("sandbox/features/agent_files.c", "sandbox/features/files_worker.c",
                "sandbox/agent/fspath.c"):
        for n, line in enumerate(read(os.path.join(ROOT, rel)).splitlines(), 1):
            if banned.search(line):
                found.append("%s:%d: %s" % (rel, n, line.strip()))
    assert not found, "\n".join(found)


# ---- README.md ----------------------------------------------------------------------------

def readme_session():
    """[(command, expected or None)] of README.md's "A first session", as
    written: continuation lines joined, `# …` lines right after a command
    its expected answer (other comments dropped)."""
    text = read(os.path.join(ROOT, "README.md"))
    part = text[text.index("## A first session"):]
    part = part[:part.index("\n## ", 3)]
    steps = []
    for block in re.findall(r"```sh\n(.*?)```", part, re.S):
        lines = block.replace("\\\n", " ").splitlines()
        for line in lines:
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                said = line[1:].strip()
                if steps and steps[-1][1] is None and said[:1] in "{[":
                    steps[-1] = (steps[-1][0], said)
                continue
            steps.append((re.sub(r"\s+#.*$", "", line), None))
    assert len(steps) > 8, steps
    return steps


def pattern_of(expected, port):
    """A regex of a documented answer: … is anything, <name> a captured
    value; the documented port 8080 (`make run`) is the stack's."""
    out, pos = "", 0
    for m in re.finditer(r"…|<(\w+)>", expected):
        out += re.escape(expected[pos:m.start()]).replace("8080", port)
        out += "(?P<%s>[^\"]*?)" % m.group(1) if m.group(1) else ".*?"
        pos = m.end()
    return out + re.escape(expected[pos:]).replace("8080", port)


def test_readme_first_session(stack, tmp_path):
    """Every command of README.md's first session, in order, against the
    stack (`. .sbx/env` is the stack's env file; a placeholder such as
    <token> is the value an earlier answer gave): each exits 0, each
    documented answer matches, each command meant to show something
    (`| head`) shows it. They run in a temp dir (the chart lands there),
    which must then hold the PNG the interpreter drew."""
    port = stack.url.rsplit(":", 1)[1]
    shutil.copy(os.path.join(ROOT, "README.md"), tmp_path)   # what the session uploads
    prelude, seen = [], {}
    try:
        for command, expected in readme_session():
            command = command.replace(". .sbx/env", ". " + shlex.quote(os.path.join(stack.dir, "env")))
            command = command.replace("8080", port)
            for name, value in seen.items():
                command = command.replace("<%s>" % name, value)
            assert not re.search(r"<\w+>", command), "no earlier answer fills %r" % command
            if re.match(r"^(\. |\w+=)", command):
                prelude.append(command)
                continue
            script = "; ".join(prelude + ["set -o pipefail", command])

            def attempt():
                r = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                                   cwd=tmp_path, timeout=60)
                if r.returncode != 0 or ("| head" in command and not r.stdout.strip()) or \
                        '{"error"' in r.stdout:
                    return None
                return r
            # A server just started may not listen yet: what the reader's
            # pause between two commands gives, a few retries give here.
            r = stack.wait("README command %r to work" % command, attempt, timeout=10, interval=0.5)
            if expected:
                m = re.fullmatch(pattern_of(expected, port), r.stdout.strip(), re.S)
                assert m, "README says %s answers\n  %s\nit answered\n  %s" % (
                    command, expected, r.stdout.strip()[:500])
                seen.update({k: v for k, v in m.groupdict().items() if v})
        with open(tmp_path / "chart.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "the README's chart is not a PNG"
    finally:
        for box in ("hello", "lab"):
            stack.api("DELETE", "/v1/sandboxes/" + box)


# ---- REDIS.md ----------------------------------------------------------------------------

def documented_key_patterns():
    """Regexes of the key names in docs/REDIS.md's tables: `{…}` is one
    hash tag, `<…>` one variable part."""
    pats = []
    for line in read(os.path.join(DOCS, "REDIS.md")).splitlines():
        if not line.startswith("|"):
            continue
        for name in re.findall(r"`(sbx:[^`*\s]+)`", line):
            rx = ""
            for m in re.finditer(r"\{[^}]*\}|<[^>]*>|[^{<]+", name):
                tok = m.group(0)
                rx += r"\{[^{}]+\}" if tok[0] == "{" else r"[^{}]+" if tok[0] == "<" else re.escape(tok)
            pats.append(re.compile(rx))
    assert len(pats) > 10, pats
    return pats


def family(key):
    return re.sub(r"\{[^}]*\}", "{…}", re.sub(r"[0-9a-f]{16,}", "<hex>", key))


@pytest.mark.session_end
def test_every_redis_key_family_is_in_redis_md(stack):
    """The last test of the session (conftest.py orders it): every key the
    session's Redis holds now matches a key of docs/REDIS.md."""
    keys = stack.redis_cli("--scan").split()
    assert keys, "no key in the session's Redis"
    pats = documented_key_patterns()
    undocumented = sorted({family(k) for k in keys if not any(p.fullmatch(k) for p in pats)})
    assert not undocumented, "key families in Redis that docs/REDIS.md does not list:\n  " + \
        "\n  ".join(undocumented)


def test_deploy_capacity_figures_are_the_bench_runs():
    """DEPLOY.md's capacity table quotes docs/PERFORMANCE.md's throughput
    rows (the figure it names, its median req/s) and the date of that run."""
    perf = read(os.path.join(DOCS, "PERFORMANCE.md"))
    bench = dict(re.findall(r"^\| ([a-z0-9-]+) \| (\d+) \|", perf, re.M))
    date = re.search(r"^- date: (\S+ \S+ UTC)", perf, re.M).group(1)
    deploy = read(os.path.join(DOCS, "DEPLOY.md"))
    cap = deploy[deploy.index("## Capacity"):]
    cap = cap[:cap.index("\n## ", 3)]
    assert date in " ".join(cap.split()), "DEPLOY.md does not name the run of %s" % date
    rows = re.findall(r"^\|[^|]+\| `([a-z0-9-]+)` \| (\d+) req/s \|", cap, re.M)
    assert len(rows) >= 4, rows
    wrong = ["%s: DEPLOY.md %s, PERFORMANCE.md %s" % (f, v, bench.get(f)) for f, v in rows
             if bench.get(f) != v]
    assert not wrong, "\n".join(wrong)


# ---- API.md, Limits ------------------------------------------------------------------------

def test_argv_shares_its_4096_strings_with_the_environment(stack):
    """API.md's Limits: argv and the process's environment (here only the
    four defaults PATH, HOME, LANG, HOSTNAME) share 4096 strings."""
    sid = "docs-argv"
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code in (200, 201), r.text
    try:
        ok = stack.api("POST", "/v1/sandboxes/%s/exec" % sid,
                       json={"argv": ["true"] + ["x"] * 4091}, timeout=30)
        assert ok.status_code == 200 and ok.json()["exitCode"] == 0, ok.text[:300]
        over = stack.api("POST", "/v1/sandboxes/%s/exec" % sid,
                         json={"argv": ["true"] + ["x"] * 4092}, timeout=30)
        assert over.status_code == 400, over.text[:300]
        err = over.json()["error"]
        assert err["code"] == "VALIDATION_FAILED" and "too large" in err["message"], err
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
