"""The nginx configurations as files: conf/nginx.conf (the dev stack's
template) and deploy/nginx/sbx.conf (production), checked without a stack.

  * deploy/nginx/sbx.conf passes the exact check of Debian's nginx.service
    (`nginx -t -q -g 'daemon on; master_process on;'`);
  * its data and preview locations are those of the template (less the
    placeholders), so the two stay in step;
  * the data-route regex covers every data route of the agent
    (sandbox/features/agent_routes.c) and names no word the agent does not
    serve, but the reserved ones of docs/API.md;
  * every X-Sbx-* header name of the tree is hidden from clients on the
    data and preview locations.
"""

import glob
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import ROOT

TEMPLATE = os.path.join(ROOT, "conf", "nginx.conf")
DEPLOY = os.path.join(ROOT, "deploy", "nginx", "sbx.conf")
ROUTES = os.path.join(ROOT, "sandbox", "features", "agent_routes.c")
# Words of the data regex with no agent route yet (docs/API.md says which).
RESERVED = {}

DATA_RE = re.compile(r"location ~ \^/v1/sandboxes/\[\^/\]\+/\(([a-z|]+)\)\(/\|\$\) \{")


def read(path):
    with open(path) as f:
        return f.read()


def block(text, opening):
    """The text of the { } block that starts at the line `opening`."""
    i = text.index(opening)
    depth, j = 0, text.index("{", i)
    while True:
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j + 1]
        j += 1


def locations(text):
    """{name: block} of the data location and the preview server's `location /`."""
    m = DATA_RE.search(text)
    assert m, "no data location in the file"
    data = block(text, m.group(0))
    preview_server = text[text.index("server_name *."):]
    return {"data": data, "preview": block(preview_server, "location / {")}


def test_deploy_config_passes_debians_unit_check():
    """ExecStartPre of Debian 12's nginx.service, on the shipped file with
    its paths pointed at a temp dir (certificates made here)."""
    tmp = tempfile.mkdtemp(prefix="sbx-nginx-t-")
    try:
        for name in ("api", "preview"):
            r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                                "-subj", "/CN=%s.example.com" % name, "-days", "1",
                                "-keyout", os.path.join(tmp, name + ".key"),
                                "-out", os.path.join(tmp, name + ".crt")],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
        with open(os.path.join(tmp, "sbx-secret.conf"), "w") as f:
            f.write('map "" $sbx_node_secret { default "s3cret"; }\n')
        # The agents' include as sbx-agents-gen writes it.
        r = subprocess.run([os.path.join(ROOT, "deploy", "nginx", "sbx-agents-gen"), "-o",
                            os.path.join(tmp, "sbx-agents.conf"), "10.0.0.1:7000", "10.0.0.2:7000"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        text = read(DEPLOY)
        for old, new in (("/etc/nginx/sbx-fastcgi.conf", os.path.join(ROOT, "conf", "sbx-fastcgi.conf")),
                         ("/etc/nginx/sbx-secret.conf", os.path.join(tmp, "sbx-secret.conf")),
                         ("/etc/nginx/sbx-agents.conf", os.path.join(tmp, "sbx-agents.conf")),
                         ("/run/sbx-nginx-route-cache", os.path.join(tmp, "route-cache")),
                         ("/etc/ssl/sbx/", tmp + "/"),
                         ("/var/log/nginx/", tmp + "/"),
                         ("/run/nginx.pid", os.path.join(tmp, "nginx.pid"))):
            assert old in text, old
            text = text.replace(old, new)
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(text)
        r = subprocess.run(["nginx", "-t", "-q", "-g", "daemon on; master_process on;",
                            "-p", tmp, "-e", os.path.join(tmp, "error.log"), "-c", conf],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, "nginx -t rejects deploy/nginx/sbx.conf:\n" + r.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def normalized(loc):
    loc = loc.replace('"@SECRET@"', "$sbx_node_secret").replace("@DIR@/conf/", "/etc/nginx/")
    return [line.strip() for line in loc.splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["data", "preview"])
def test_deploy_locations_are_the_templates(name):
    assert normalized(locations(read(DEPLOY))[name]) == \
        normalized(locations(read(TEMPLATE))[name])


def agent_data_words():
    words = set()
    for m in re.finditer(r'\{ "[A-Z]+", "/v1/sandboxes/\{id\}/([^/"]+)', read(ROUTES)):
        words.add(m.group(1))
    assert words, "no data route found in " + ROUTES
    return words


@pytest.mark.parametrize("path", [TEMPLATE, DEPLOY])
def test_data_regex_matches_the_agents_routes(path):
    m = DATA_RE.search(read(path))
    assert m, "no data location in " + path
    listed = set(m.group(1).split("|"))
    agent = agent_data_words()
    assert agent <= listed, "agent data routes nginx does not send to the agent: %s" % sorted(
        agent - listed)
    extra = listed - agent
    api = read(os.path.join(ROOT, "docs", "API.md"))
    for word in extra:
        assert word in RESERVED, "nginx sends /v1/sandboxes/{id}/%s to the agent, which has " \
            "no such route" % word
        assert RESERVED[word] in api, "docs/API.md does not say %s is reserved" % word
    regex = re.compile(r"^/v1/sandboxes/[^/]+/(%s)(/|$)" % m.group(1))
    for word in agent:
        assert regex.match("/v1/sandboxes/sb1/%s" % word)
        assert regex.match("/v1/sandboxes/sb1/%s/x" % word)


def tree_sbx_headers():
    names = set()
    for pattern in ("fcgi/*.[ch]", "sandbox/*/*.[ch]", "conf/*.conf", "deploy/nginx/*.conf"):
        for path in glob.glob(os.path.join(ROOT, pattern)):
            names |= {n.lower() for n in re.findall(r"X-Sbx-[A-Za-z][A-Za-z-]*[A-Za-z]", read(path))}
    names |= {"x-sbx-" + n.replace("_", "-") for path in (TEMPLATE, DEPLOY)
              for n in re.findall(r"\$(?:upstream_)?http_x_sbx_([a-z_]+)", read(path))}
    return names


@pytest.mark.parametrize("path", [TEMPLATE, DEPLOY])
@pytest.mark.parametrize("name", ["data", "preview"])
def test_our_headers_are_hidden_from_clients(path, name):
    loc = locations(read(path))[name]
    hidden = {h.lower() for h in re.findall(r"proxy_hide_header (\S+);", loc)}
    assert tree_sbx_headers() <= hidden, sorted(tree_sbx_headers() - hidden)
    ignored = set(re.search(r"proxy_ignore_headers ([^;]+);", loc).group(1).split())
    assert {"X-Accel-Redirect", "X-Accel-Expires", "X-Accel-Limit-Rate", "X-Accel-Buffering",
            "X-Accel-Charset"} <= ignored
