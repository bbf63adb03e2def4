"""Images from OCI registries (issue 20), against a real registry on
loopback: Debian's docker-registry with a temp config. The images are
built here from local files (a static probe compiled with -static): most
with tarfile and pushed with the registry's HTTP API (crafted layers need
that), one with umoci and pushed by skopeo, gzip and zstd. Sandboxes then
run them through the API.
"""

import atexit
import concurrent.futures
import glob
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid

import pytest
import requests

from conftest import (free_port, sanitizer_findings, stack_down, stack_down_cleanup,
                      stack_up)
from test_metrics import agents_value

HERE = os.path.dirname(os.path.abspath(__file__))
REGISTRY = "/usr/bin/docker-registry"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"

PROBE_C = r"""
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv)
{
	char cwd[4096];
	printf("cwd=%s\n", getcwd(cwd, sizeof(cwd)) ? cwd : "?");
	printf("ids %d:%d\n", (int)getuid(), (int)getgid());
	printf("effective %d:%d\n", (int)geteuid(), (int)getegid());
	for (char **e = environ; *e; e++)
		printf("env %s\n", *e);
	for (int i = 1; i < argc; i++) {
		char buf[256];
		size_t n;
		struct stat st;
		FILE *f;
		if (argv[i][0] == '?') {   /* ?path: its owner and mode */
			if (stat(argv[i] + 1, &st) == 0)
				printf("stat %s %d:%d %o\n", argv[i] + 1, (int)st.st_uid, (int)st.st_gid,
				       (unsigned)st.st_mode & 07777);
			continue;
		}
		if (argv[i][0] == '+') {   /* +path: create it, say its owner */
			f = fopen(argv[i] + 1, "w");
			if (!f || fclose(f) != 0 || stat(argv[i] + 1, &st) != 0) {
				printf("made %s failed\n", argv[i] + 1);
				continue;
			}
			printf("made %s %d:%d\n", argv[i] + 1, (int)st.st_uid, (int)st.st_gid);
			continue;
		}
		f = fopen(argv[i], "r");
		if (!f) { printf("file %s missing\n", argv[i]); continue; }
		n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = 0;
		printf("file %s %s\n", argv[i], buf);
		fclose(f);
	}
	return 0;
}
"""

pytestmark = pytest.mark.skipif(not os.path.exists(REGISTRY) or not shutil.which("gcc"),
                                reason="needs docker-registry and gcc")


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def layer(entries, compress="gzip"):
    """A layer blob from entries: (name, kind, data/target[, mode])."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for e in entries:
            name, kind, val = e[0], e[1], e[2]
            ti = tarfile.TarInfo(name)
            ti.mode = e[3] if len(e) > 3 else 0o644
            if len(e) > 4:
                ti.pax_headers = e[4]
            if kind == "file":
                ti.size = len(val)
                t.addfile(ti, io.BytesIO(val))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "link": tarfile.LNKTYPE,
                       "chr": tarfile.CHRTYPE}[kind]
            if kind == "dir":
                ti.mode = 0o755
            if kind in ("sym", "link"):
                ti.linkname = val
            t.addfile(ti)
    data = raw.getvalue()
    if compress == "gzip":
        return gzip.compress(data, mtime=0), data
    if compress == "zstd":
        return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True,
                              check=True).stdout, data
    return data, data


class Registry:
    def __init__(self, root, auth="", tls=None, name="127.0.0.1"):
        """auth: an extra "auth:" section of the registry's config; tls:
        (cert, key) files to serve HTTPS; name: the host in references."""
        self.root = root
        self.port = free_port()
        self.host = "%s:%d" % (name, self.port)
        self.url = ("https://" if tls else "http://") + self.host
        self.session = requests.Session()
        self.verify = tls[0] if tls else True   # per request: REQUESTS_CA_BUNDLE beats a session's
        cfg = os.path.join(root, "config.yml")
        with open(cfg, "w") as f:
            f.write("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s/data\n"
                    "  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:%d\n%s%s" %
                    (root, self.port, "  tls:\n    certificate: %s\n    key: %s\n" % tls if tls else "",
                     auth))
        self.log = open(os.path.join(root, "registry.log"), "w")
        self.proc = subprocess.Popen([REGISTRY, "serve", cfg], stdout=self.log, stderr=self.log)
        atexit.register(self.stop)   # also when a fixture fails after this
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/v2/", timeout=5,
                                verify=self.verify).status_code in (200, 401):
                    return
            except requests.RequestException:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("the registry did not start")

    def req(self, method, url, **kw):
        """A request, with a pushing token when the registry asks for one."""
        r = self.session.request(method, url, timeout=30, verify=self.verify, **kw)
        if r.status_code == 401 and hasattr(self, "push_token"):
            kw.setdefault("headers", {})["Authorization"] = "Bearer " + self.push_token(url)
            r = self.session.request(method, url, timeout=30, verify=self.verify, **kw)
        return r

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()

    def blob(self, repo, data):
        u = "%s/v2/%s/blobs/uploads/" % (self.url, repo)
        r = self.req("POST", u)
        assert r.status_code == 202, r.text
        loc = r.headers["Location"]
        loc = loc if loc.startswith("http") else self.url + loc
        r = self.req("PUT", loc + ("&" if "?" in loc else "?") + "digest=" + sha(data), data=data,
                     headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 201, r.text
        return sha(data)

    def manifest(self, repo, ref, doc, media=OCI_MANIFEST):
        body = json.dumps(doc).encode()
        r = self.req("PUT", "%s/v2/%s/manifests/%s" % (self.url, repo, ref), data=body,
                     headers={"Content-Type": media})
        assert r.status_code == 201, r.text
        return sha(body)

    def image(self, repo, tag, layers, env=None, workdir=None, media="gzip", user=None):
        """Push an image of layers [(blob, diff)]; its manifest digest."""
        cfg = {"architecture": "amd64", "os": "linux",
               "config": {"Env": env or [], "WorkingDir": workdir or ""},
               "rootfs": {"type": "layers", "diff_ids": [sha(d) for _, d in layers]}}
        if user is not None:
            cfg["config"]["User"] = user
        cb = json.dumps(cfg).encode()
        lt = {"gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
              "zstd": "application/vnd.oci.image.layer.v1.tar+zstd"}[media]
        doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
               "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                          "digest": self.blob(repo, cb), "size": len(cb)},
               "layers": [{"mediaType": lt, "digest": self.blob(repo, b), "size": len(b)}
                          for b, _ in layers]}
        return self.manifest(repo, tag, doc)

    def blob_file(self, digest):
        return os.path.join(self.root, "data/docker/registry/v2/blobs/sha256",
                            digest[7:9], digest[7:], "data")


@pytest.fixture(scope="module")
def reg():
    root = tempfile.mkdtemp(prefix="sbx-registry-")
    probe = os.path.join(root, "probe")
    src = os.path.join(root, "probe.c")
    with open(src, "w") as f:
        f.write(PROBE_C)
    subprocess.run(["gcc", "-static", "-O2", "-o", probe, src], check=True)
    r = Registry(root)
    with open(probe, "rb") as f:
        r.probe = f.read()
    base = layer([("bin", "dir", None), ("bin/probe", "file", r.probe, 0o755),
                  ("etc", "dir", None), ("etc/base.txt", "file", b"from base"),
                  ("etc/gone.txt", "file", b"to be removed"),
                  ("opt/old", "dir", None), ("opt/old/a.txt", "file", b"old"),
                  ("etc/hard.txt", "link", "etc/base.txt"),
                  # setuid kept; a file capability (an xattr of the tar) dropped
                  ("bin/suid", "file", b"#!/bin/true\n", 0o4755,
                   {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02" + "\x00" * 16})])
    r.base_layer = base
    r.image("test/base", "1", [base], env=["PATH=/bin", "FROM_IMAGE=base"])
    top = layer([("etc/app.txt", "file", b"from app"), ("etc/.wh.gone.txt", "file", b""),
                 ("opt/old/.wh..wh..opq", "file", b""), ("opt/old/b.txt", "file", b"new"),
                 ("app", "dir", None)])
    r.image("test/app", "1", [base, top], env=["PATH=/bin", "FROM_IMAGE=app"], workdir="/app")
    yield r
    r.stop()
    shutil.rmtree(root, ignore_errors=True)


def create(st, image, expect=201):
    sid = "img-" + uuid.uuid4().hex[:10]
    r = st.api("PUT", "/v1/sandboxes/" + sid, json={"image": image}, timeout=120)
    assert r.status_code == expect, r.text
    return sid if expect == 201 else r


def probe(st, sid, *files, **extra):
    r = st.api("POST", "/v1/sandboxes/%s/exec" % sid, json=dict(argv=["/bin/probe"] + list(files), **extra),
               timeout=60)
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["exitCode"] == 0, res
    return res["stdout"]


def layer_dirs(st):
    return glob.glob(os.path.join(st.dir, "images", "layers", "*"))


def test_image_layers_whiteouts_env_workdir(stack, reg):
    ref = "%s/test/app:1" % reg.host
    sid = create(stack, ref)
    try:
        assert stack.api("GET", "/v1/sandboxes/" + sid).json()["image"] == ref
        out = probe(stack, sid, "/etc/base.txt", "/etc/app.txt", "/etc/gone.txt", "/etc/hard.txt",
                    "/opt/old/a.txt", "/opt/old/b.txt")
        assert "file /etc/base.txt from base" in out
        assert "file /etc/app.txt from app" in out
        assert "file /etc/hard.txt from base" in out
        assert "file /etc/gone.txt missing" in out        # whiteout
        assert "file /opt/old/a.txt missing" in out       # opaque directory
        assert "file /opt/old/b.txt new" in out
        assert "env FROM_IMAGE=app" in out
        assert "cwd=/app" in out
        # an explicit env wins over the image's
        st = stack.api("POST", "/v1/sandboxes/%s/exec" % sid,
                       json={"argv": ["/bin/probe"], "env": {"FROM_IMAGE": "mine"}, "cwd": "/etc"}).json()
        assert "env FROM_IMAGE=mine" in st["stdout"] and "cwd=/etc" in st["stdout"]
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid)
    # the base image shares its layer with app: stored once
    sid = create(stack, "%s/test/base:1" % reg.host)
    try:
        out = probe(stack, sid, "/etc/gone.txt", "/etc/app.txt")
        assert "file /etc/gone.txt to be removed" in out and "file /etc/app.txt missing" in out
        assert "cwd=/workspace" in out
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid)
    digest = sha(reg.base_layer[0])[7:]
    dirs = [os.path.basename(d) for d in layer_dirs(stack)]
    assert dirs.count(digest) == 1 and len(dirs) == 2, dirs
    suid = os.path.join(stack.dir, "images", "layers", digest, "bin", "suid")
    assert os.stat(suid).st_mode & 0o7777 == 0o4755
    assert "security.capability" not in os.listxattr(suid)


def test_image_user_applies(stack, reg):
    """The image's User runs every command, as numbers or as names of the
    image's own /etc/passwd and /etc/group; /workspace is that user's."""
    ids = layer([("etc/passwd", "file", b"root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/app:/bin/sh\n"),
                 ("etc/group", "file", b"root:x:0:\nstaff:x:50:app\n")])
    # a setuid-root copy of the probe: no_new_privs keeps it from raising the ids
    suid = layer([("bin/suidprobe", "file", reg.probe, 0o6755)])
    reg.image("test/user", "num", [reg.base_layer, suid], env=["PATH=/bin"], user="1000:1000")
    reg.image("test/user", "name", [reg.base_layer, ids], env=["PATH=/bin"], user="app:staff")
    reg.image("test/user", "ghost", [reg.base_layer, ids], env=["PATH=/bin"], user="ghost")
    sid = create(stack, "%s/test/user:num" % reg.host)
    try:
        out = probe(stack, sid, "+/workspace/mine")
        assert "ids 1000:1000" in out, out
        assert "made /workspace/mine 1000:1000" in out, out
        assert "env HOME=/\n" in out, out      # no passwd entry: HOME is /
        r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid, json={"argv": ["/bin/suidprobe"]},
                      timeout=60)
        assert "effective 1000:1000" in r.json()["stdout"], r.text
        assert "stat /bin/suidprobe 0:0 6755" in probe(stack, sid, "?/bin/suidprobe")
        # a background process: the same user (its file, were it root's
        # 0644, could not be opened for writing by 1000)
        r = stack.api("POST", "/v1/sandboxes/%s/processes" % sid,
                      json={"argv": ["/bin/probe", "+/workspace/proc"]}, timeout=60)
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 30
        while "missing" in probe(stack, sid, "/workspace/proc") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "made /workspace/proc 1000:1000" in probe(stack, sid, "+/workspace/proc")
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid)
    sid = create(stack, "%s/test/user:name" % reg.host)
    try:
        out = probe(stack, sid)
        assert "ids 1000:50" in out and "env HOME=/app\n" in out, out   # its entry's home
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid)
    r = create(stack, "%s/test/user:ghost" % reg.host, expect=400)
    assert r.json()["error"]["code"] == "IMAGE_USER_UNKNOWN", r.text
    assert "ghost" in r.json()["error"]["message"], r.text


def admin(st, method, path, **kw):
    return st.api(method, path, key=st.admin_key, timeout=120, **kw)


def store_of(st):
    r = admin(st, "GET", "/v1/images")
    assert r.status_code == 200, r.text
    return {n["node"]: n["store"] for n in r.json()["results"]}


def left_behind(st):
    return os.listdir(os.path.join(st.dir, "images", "tmp"))


def test_concurrent_creates_pull_once(stack, reg):
    layers = [reg.base_layer, layer([("etc/many.txt", "file", b"many")])]
    reg.image("test/many", "1", layers, env=["PATH=/bin"])
    ref = "%s/test/many:1" % reg.host
    before = {n: s["pullsStarted"] for n, s in store_of(stack).items()}
    ok0 = agents_value(stack, "sbx_agent_image_pulls_total", result="ok")
    bytes0 = agents_value(stack, "sbx_agent_image_pull_bytes_total")
    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        sids = list(ex.map(lambda _: create(stack, ref), range(20)))
    try:
        after = {n: s["pullsStarted"] for n, s in store_of(stack).items()}
        # single flight: at most one pull per node, however many creates
        assert all(after[n] - before[n] <= 1 for n in after), (before, after)
        pulls = sum(after[n] - before[n] for n in after)
        assert pulls >= 1
        assert agents_value(stack, "sbx_agent_image_pulls_total", result="ok") == ok0 + pulls
        # at least the new layer's bytes came from the registry, on each node that pulled
        assert (agents_value(stack, "sbx_agent_image_pull_bytes_total") >=
                bytes0 + pulls * len(layers[1][0]))
        assert "file /etc/many.txt many" in probe(stack, sids[-1], "/etc/many.txt")
        listed = [i["ref"] for s in store_of(stack).values() for i in s["images"]]
        assert ref in listed
    finally:
        for sid in sids:
            stack.api("DELETE", "/v1/sandboxes/" + sid)


def test_errors_have_stable_codes(stack, reg):
    r = create(stack, "%s/test/nothere:1" % reg.host, expect=404)
    assert r.json()["error"]["code"] == "IMAGE_NOT_FOUND"
    r = create(stack, "127.0.0.1:%d/test/app:1" % free_port(), expect=503)
    assert r.json()["error"]["code"] == "REGISTRY_UNAVAILABLE"
    assert r.headers.get("Retry-After")
    r = create(stack, "Bad//ref", expect=400)
    assert r.json()["error"]["code"] == "VALIDATION_FAILED"
    # an index without this node's platform
    cb = json.dumps({"architecture": "s390x", "os": "linux", "config": {}}).encode()
    man = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                      "digest": reg.blob("test/multi", cb), "size": len(cb)},
           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                       "digest": reg.blob("test/multi", reg.base_layer[0]),
                       "size": len(reg.base_layer[0])}]}
    md = reg.manifest("test/multi", "s390x-only", man)
    body = json.dumps(man).encode()
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX,
             "manifests": [{"mediaType": OCI_MANIFEST, "digest": md, "size": len(body),
                            "platform": {"os": "linux", "architecture": "s390x"}}]}
    reg.manifest("test/multi", "other", index, media=OCI_INDEX)
    r = create(stack, "%s/test/multi:other" % reg.host, expect=400)
    assert r.json()["error"]["code"] == "IMAGE_PLATFORM_UNSUPPORTED"
    # the same index with this node's platform too: that one is run
    index["manifests"].append({"mediaType": OCI_MANIFEST,
                               "digest": reg.manifest("test/multi", "amd64", man),
                               "size": len(body), "platform": {"os": "linux", "architecture": "amd64"}})
    reg.manifest("test/multi", "both", index, media=OCI_INDEX)
    sid = create(stack, "%s/test/multi:both" % reg.host)
    try:
        assert "file /etc/base.txt from base" in probe(stack, sid, "/etc/base.txt")
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid)


def test_tampered_blob_is_refused_and_leaves_nothing(stack, reg):
    bad = layer([("etc/tampered.txt", "file", b"original")])
    reg.image("test/tampered", "1", [bad])
    with open(reg.blob_file(sha(bad[0])), "wb") as f:
        f.write(layer([("etc/tampered.txt", "file", b"evil")])[0])
    r = create(stack, "%s/test/tampered:1" % reg.host, expect=502)
    assert r.json()["error"]["code"] == "IMAGE_DIGEST_MISMATCH"
    assert not os.path.exists(os.path.join(stack.dir, "images", "layers", sha(bad[0])[7:]))
    assert left_behind(stack) == []


@pytest.mark.parametrize("name,entries", [
    ("dotdot", [("../../escaped.txt", "file", b"x")]),
    ("absolute", [("/escaped.txt", "file", b"x")]),
    ("symlink", [("esc", "sym", "/tmp"), ("esc/escaped.txt", "file", b"x")]),
    ("relsymlink", [("esc", "sym", "../../../../../../tmp"), ("esc/escaped.txt", "file", b"x")]),
    ("hardlink", [("h", "link", "../../../../etc/passwd")]),
    ("device", [("dev-null", "chr", None)]),
])
def test_crafted_layer_is_refused(stack, reg, name, entries):
    blob = layer([("etc", "dir", None), ("etc/ok.txt", "file", b"ok")] + entries)
    reg.image("test/crafted-" + name, "1", [blob])
    r = create(stack, "%s/test/crafted-%s:1" % (reg.host, name), expect=422)
    assert r.json()["error"]["code"] == "IMAGE_LAYER_REFUSED", r.text
    assert not os.path.exists(os.path.join(stack.dir, "images", "layers", sha(blob[0])[7:]))
    assert not os.path.exists("/tmp/escaped.txt")
    assert not os.path.exists(os.path.join(stack.dir, "escaped.txt"))
    assert left_behind(stack) == []


def test_zstd_layer_and_admin_routes(stack, reg):
    z = layer([("etc/zstd.txt", "file", b"zstd layer")], compress="zstd")
    reg.image("test/zstd", "1", [reg.base_layer, z], media="zstd")
    ref = "%s/test/zstd:1" % reg.host
    r = admin(stack, "POST", "/v1/images/pull", json={"ref": ref})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert res and all(x["image"]["ref"] == ref and x["image"]["digest"].startswith("sha256:")
                       for x in res), res
    sid = create(stack, ref)
    try:
        assert "file /etc/zstd.txt zstd layer" in probe(stack, sid, "/etc/zstd.txt")
        # in use: refused
        r = admin(stack, "DELETE", "/v1/images/" + ref)
        assert r.status_code == 200
        assert all(x.get("error", {}).get("code") == "CONFLICT" for x in r.json()["results"]), r.text
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid)
    zdir = os.path.join(stack.dir, "images", "layers", sha(z[0])[7:])
    assert os.path.isdir(zdir)
    r = admin(stack, "DELETE", "/v1/images/" + ref)
    assert r.status_code == 200, r.text
    assert not os.path.exists(zdir)
    # the shared base layer stays: other images use it
    assert os.path.isdir(os.path.join(stack.dir, "images", "layers", sha(reg.base_layer[0])[7:]))
    assert ref not in [i["ref"] for s in store_of(stack).values() for i in s["images"]]
    assert stack.api("GET", "/v1/images").status_code in (401, 403)


class TokenServer:
    """The registry's token service (distribution's "token" auth): RS256
    JWTs with the signing certificate in x5c. "test/public" is anonymous;
    any other repository needs Basic user:secret."""

    def __init__(self, root):
        import base64
        import datetime
        import http.server
        import threading
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
        from cryptography.x509.oid import NameOID

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sbx-test-token")])
        now = datetime.datetime.utcnow()
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(1)
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
        self.cert = os.path.join(root, "token.pem")
        with open(self.cert, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        der = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()

        def b64(b):
            return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

        def token(names, actions):
            t = int(time.time())
            head = {"alg": "RS256", "typ": "JWT", "x5c": [der]}
            claims = {"iss": "sbx-test", "sub": "x", "aud": "sbx-registry", "exp": t + 600,
                      "nbf": t - 60, "iat": t, "jti": uuid.uuid4().hex,
                      "access": [{"type": "repository", "name": n, "actions": actions} for n in names]}
            msg = (b64(json.dumps(head).encode()) + "." + b64(json.dumps(claims).encode())).encode()
            return msg.decode() + "." + b64(key.sign(msg, padding.PKCS1v15(), hashes.SHA256()))

        self.token = token
        good = "Basic " + base64.b64encode(b"user:secret").decode()
        self.requests = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(h):
                from urllib.parse import parse_qs, urlparse
                q = parse_qs(urlparse(h.path).query)
                scope = q.get("scope", [""])[0]
                repo = scope.split(":")[1] if scope.count(":") >= 2 else ""
                authed = h.headers.get("Authorization") == good
                self.requests.append((repo, authed))
                if repo != "test/public" and not authed:
                    h.send_response(401)
                    h.end_headers()
                    return
                body = json.dumps({"token": token([repo], ["pull"])}).encode()
                h.send_response(200)
                h.send_header("Content-Type", "application/json")
                h.end_headers()
                h.wfile.write(body)

            def log_message(h, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.realm = "http://127.0.0.1:%d/token" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()


@pytest.fixture(scope="module")
def token_reg(reg):
    root = tempfile.mkdtemp(prefix="sbx-registry-token-")
    ts = TokenServer(root)
    r = Registry(root, auth="auth:\n  token:\n    realm: %s\n    service: sbx-registry\n"
                 "    issuer: sbx-test\n    rootcertbundle: %s\n" % (ts.realm, ts.cert))
    r.push_token = lambda url: ts.token(["test/public", "test/private"], ["pull", "push"])
    for repo in ("test/public", "test/private"):
        r.image(repo, "1", [reg.base_layer], env=["PATH=/bin"])
    r.tokens = ts
    yield r
    r.stop()
    ts.stop()
    shutil.rmtree(root, ignore_errors=True)


def loopback_name():
    """A host name (not an address) of this machine that resolves to
    127.0.0.1, or None."""
    import socket
    name = socket.gethostname()
    try:
        return name if socket.gethostbyname(name) == "127.0.0.1" and name != "localhost" else None
    except OSError:
        return None


@pytest.fixture(scope="module")
def tls_reg(reg):
    """A registry serving HTTPS with a private CA's certificate for a host
    name of this machine (so the loopback rule does not apply to it)."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    name = loopback_name()
    if not name:
        pytest.skip("no host name of this machine resolves to 127.0.0.1")
    root = tempfile.mkdtemp(prefix="sbx-registry-tls-")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.utcnow()
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    crt, pem = os.path.join(root, "ca.pem"), os.path.join(root, "key.pem")
    with open(crt, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(pem, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    r = Registry(root, tls=(crt, pem), name=name)
    r.image("test/tls", "1", [reg.base_layer], env=["PATH=/bin"])
    r.ca = crt
    r.plain_name = "%s:%d" % (name, reg.port)   # reg, plain HTTP, by a host name
    yield r
    r.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def stack_auth(token_reg, tls_reg):
    """One agent with credentials for token_reg, tls_reg's CA, plain HTTP
    to reg by a host name, and a small disk budget; without a user
    namespace (the session stack has one where the host allows it):
    images run in both modes."""
    st = stack_up(agents=1, overrides=["images.registry_auth=%s=user:secret" % token_reg.host,
                                       "images.registry_ca=%s=%s" % (tls_reg.host, tls_reg.ca),
                                       "images.plain_http=%s" % tls_reg.plain_name,
                                       "images.disk_budget_mib=2", "images.max_image_mib=2",
                                       "agent.userns=off"])
    try:
        yield st
    finally:
        stack_down(st, keep=True)
    errors, _ = sanitizer_findings(st.dir)
    stack_down_cleanup(st)
    assert not errors, "sanitizer reports: %r" % errors[:20]


def test_token_auth_with_and_without_credentials(stack, stack_auth, token_reg):
    # anonymous token: public pulls, private is refused
    sid = create(stack, "%s/test/public:1" % token_reg.host)
    stack.api("DELETE", "/v1/sandboxes/" + sid)
    r = create(stack, "%s/test/private:1" % token_reg.host, expect=403)
    assert r.json()["error"]["code"] == "REGISTRY_AUTH_FAILED"
    assert ("test/private", False) in token_reg.tokens.requests
    # with [images] registry_auth the agent's token request carries them
    sid = create(stack_auth, "%s/test/private:1" % token_reg.host)
    try:
        assert "file /etc/base.txt from base" in probe(stack_auth, sid, "/etc/base.txt")
    finally:
        stack_auth.api("DELETE", "/v1/sandboxes/" + sid)
    assert ("test/private", True) in token_reg.tokens.requests


def test_image_above_the_size_limit_is_refused(stack_auth, reg):
    huge = layer([("huge.bin", "file", os.urandom(2600 * 1024))])
    reg.image("test/huge", "1", [huge])
    r = create(stack_auth, "%s/test/huge:1" % reg.host, expect=507)
    assert r.json()["error"]["code"] == "IMAGE_TOO_LARGE", r.text
    assert left_behind(stack_auth) == []


def test_gc_keeps_the_store_within_its_budget(stack_auth, reg):
    small = "%s/test/base:1" % reg.host
    big_layer = layer([("big.bin", "file", os.urandom(1536 * 1024))])
    reg.image("test/big", "1", [big_layer])
    big = "%s/test/big:1" % reg.host
    for ref in (small, big):
        r = admin(stack_auth, "POST", "/v1/images/pull", json={"ref": ref})
        assert r.status_code == 200 and "image" in r.json()["results"][0], r.text
    listed = [i["ref"] for s in store_of(stack_auth).values() for i in s["images"]]
    # 2 MiB: the base (~0.8 MiB) and big (1.5 MiB) do not both fit; the
    # least recently used one goes, with its layers
    assert big in listed and small not in listed, listed
    dirs = [os.path.basename(d) for d in layer_dirs(stack_auth)]
    assert sha(reg.base_layer[0])[7:] not in dirs and sha(big_layer[0])[7:] in dirs


class CuttingProxy:
    """A registry front that forwards to reg, and while cut is set sends
    only the first half of each blob and then drops the connection: a
    registry that goes away mid-pull."""

    def __init__(self, reg):
        import http.server
        import threading

        self.cut = True
        self.gate = threading.Event()   # blobs wait for it while hold is set
        self.gate.set()
        self.waiting = threading.Event()
        proxy = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(h):
                up = requests.get("http://%s%s" % (reg.host, h.path), stream=True, timeout=30,
                                  headers={k: v for k, v in h.headers.items() if k.lower() == "accept"})
                body = up.content
                if "/blobs/" in h.path and not proxy.gate.is_set():
                    proxy.waiting.set()
                    proxy.gate.wait(60)
                h.send_response(up.status_code)
                for k in ("Content-Type", "Docker-Content-Digest"):
                    if k in up.headers:
                        h.send_header(k, up.headers[k])
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                if proxy.cut and "/blobs/" in h.path and len(body) > 1024:
                    h.wfile.write(body[:len(body) // 2])
                    h.wfile.flush()
                    h.close_connection = True
                    return
                h.wfile.write(body)

            def log_message(h, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.host = "127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()


def test_registry_gone_mid_pull_then_retry(stack, reg):
    blob = layer([("etc/cut.txt", "file", os.urandom(256 * 1024))])
    reg.image("test/cut", "1", [reg.base_layer, blob])
    px = CuttingProxy(reg)
    try:
        ref = "%s/test/cut:1" % px.host
        r = create(stack, ref, expect=503)
        assert r.json()["error"]["code"] == "REGISTRY_UNAVAILABLE", r.text
        assert r.headers.get("Retry-After")
        assert left_behind(stack) == []
        assert not os.path.exists(os.path.join(stack.dir, "images", "layers", sha(blob[0])[7:]))
        px.cut = False
        sid = create(stack, ref)
        try:
            assert "file /etc/cut.txt" in probe(stack, sid, "/etc/cut.txt")
        finally:
            stack.api("DELETE", "/v1/sandboxes/" + sid)
    finally:
        px.stop()


def test_placement_prefers_nodes_with_the_image(stack, reg):
    reg.image("test/placed", "1", [reg.base_layer, layer([("etc/placed.txt", "file", b"p")])])
    ref = "%s/test/placed:1" % reg.host
    r = admin(stack, "POST", "/v1/images/pull", json={"ref": ref, "nodes": ["agent-2"]})
    assert [x["node"] for x in r.json()["results"]] == ["agent-2"], r.text
    sids = [create(stack, ref) for _ in range(6)]
    try:
        nodes = [stack.redis_cli("HGET", "sbx:sb:{dev/%s}" % sid, "node") for sid in sids]
        assert nodes == ["agent-2"] * 6, nodes
    finally:
        for sid in sids:
            stack.api("DELETE", "/v1/sandboxes/" + sid)


@pytest.mark.skipif(not shutil.which("umoci") or not shutil.which("skopeo"),
                    reason="needs umoci and skopeo")
def test_image_built_by_umoci_pushed_by_skopeo_zstd(stack, reg, tmp_path):
    """Real image tools: umoci builds the image from local files (a layer
    per insert, one a whiteout), skopeo pushes it as is and once more with
    zstd layers."""
    lay = str(tmp_path / "layout")
    probe_path = tmp_path / "probe"
    probe_path.write_bytes(reg.probe)
    probe_path.chmod(0o755)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "umoci.txt").write_text("by umoci")
    (tmp_path / "etc" / "old.txt").write_text("whited out")

    def run(*args):
        subprocess.run(args, check=True, capture_output=True, timeout=120)

    run("umoci", "init", "--layout", lay)
    run("umoci", "new", "--image", lay + ":t")
    run("umoci", "insert", "--image", lay + ":t", str(probe_path), "/bin/probe")
    run("umoci", "insert", "--image", lay + ":t", str(tmp_path / "etc"), "/etc")
    run("umoci", "insert", "--image", lay + ":t", "--whiteout", "/etc/old.txt")
    run("umoci", "config", "--image", lay + ":t", "--config.workingdir", "/etc",
        "--config.env", "BUILT_BY=umoci")
    refs = ["%s/test/umoci:gzip" % reg.host, "%s/test/umoci:zstd" % reg.host]
    run("skopeo", "copy", "--dest-tls-verify=false", "oci:%s:t" % lay, "docker://" + refs[0])
    run("skopeo", "copy", "--dest-tls-verify=false", "--format", "oci", "--dest-compress-format",
        "zstd", "oci:%s:t" % lay, "docker://" + refs[1])
    for ref in refs:
        sid = create(stack, ref)
        try:
            out = probe(stack, sid, "/etc/umoci.txt", "/etc/old.txt")
            assert "file /etc/umoci.txt by umoci" in out and "file /etc/old.txt missing" in out, out
            assert "env BUILT_BY=umoci" in out and "cwd=/etc" in out, out
        finally:
            stack.api("DELETE", "/v1/sandboxes/" + sid)


def test_tls_with_a_private_ca_and_explicit_plain_http(stack, stack_auth, tls_reg):
    # HTTPS is verified: without the CA the certificate is refused
    r = create(stack, "%s/test/tls:1" % tls_reg.host, expect=503)
    assert r.json()["error"]["code"] == "REGISTRY_UNAVAILABLE", r.text
    # a registry named by a host name is not loopback: HTTPS, refused by the plain server
    r = create(stack, "%s/test/base:1" % tls_reg.plain_name, expect=503)
    assert r.json()["error"]["code"] == "REGISTRY_UNAVAILABLE", r.text
    # with [images] registry_ca and plain_http both work
    for ref in ("%s/test/tls:1" % tls_reg.host, "%s/test/base:1" % tls_reg.plain_name):
        sid = create(stack_auth, ref)
        try:
            assert "file /etc/base.txt from base" in probe(stack_auth, sid, "/etc/base.txt")
        finally:
            stack_auth.api("DELETE", "/v1/sandboxes/" + sid)


def test_a_pull_does_not_hold_up_the_node(stack_auth, reg):
    """While a pull waits on its registry, the same agent goes on serving
    (the pull runs on a thread of its own, not on the agent's loop)."""
    busy = create(stack_auth, "%s/test/base:1" % reg.host)
    reg.image("test/slow", "1", [layer([("etc/slow.txt", "file", os.urandom(4096))])])
    px = CuttingProxy(reg)
    px.cut = False
    px.gate.clear()
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            slow = ex.submit(create, stack_auth, "%s/test/slow:1" % px.host)
            assert px.waiting.wait(60), "the pull never asked for its blob"
            # the pull is stuck in the middle: the node still answers
            assert "file /etc/base.txt from base" in probe(stack_auth, busy, "/etc/base.txt")
            assert not slow.done()
            px.gate.set()
            sid = slow.result(timeout=120)
        stack_auth.api("DELETE", "/v1/sandboxes/" + sid)
    finally:
        px.gate.set()
        px.stop()
        stack_auth.api("DELETE", "/v1/sandboxes/" + busy)
