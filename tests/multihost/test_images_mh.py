"""Registry images across hosts (issue 20), on a deployment of its own
(tests/multihost/hosts, prefix sbxmi): a registry (Debian's docker-registry)
in the lan namespace, which every host reaches over the bridge, behind a
small front that can hold blob downloads; the hosts speak plain HTTP to
that front ([images] plain_http). A pull held up on one host does not
hold up creates on the others, and placement prefers the hosts that
already hold a create's image.
"""

import concurrent.futures
import gzip
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading

import pytest
import requests

import test_multihost as base

DIR = os.environ.get("MH_IMAGES_DIR", "/tmp/sbx-multihost-images")
PREFIX = "sbxmi"
REGISTRY = "/usr/bin/docker-registry"
LAN = "10.77.0.100"          # the lan namespace's address (tests/multihost/hosts)
FRONT = "%s:5077" % LAN      # what the hosts pull from
BACK = "%s:5076" % LAN       # the registry itself
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"

pytestmark = pytest.mark.skipif(not os.path.exists(REGISTRY), reason="needs docker-registry")


def hosts_env():
    return dict(os.environ, MH_PREFIX=PREFIX, MH_STACK_OPT="images.plain_http=" + FRONT)


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def push(repo, tag, files):
    """Push an image of one gzip layer holding files {name: bytes}."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    diff = raw.getvalue()
    blob = gzip.compress(diff, mtime=0)
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                      "rootfs": {"type": "layers", "diff_ids": [sha(diff)]}}).encode()

    def put_blob(data):
        r = requests.post("http://%s/v2/%s/blobs/uploads/" % (BACK, repo), timeout=30)
        assert r.status_code == 202, r.text
        loc = r.headers["Location"]
        loc = loc if loc.startswith("http") else "http://" + BACK + loc
        r = requests.put(loc + ("&" if "?" in loc else "?") + "digest=" + sha(data), data=data,
                         headers={"Content-Type": "application/octet-stream"}, timeout=30)
        assert r.status_code == 201, r.text
        return sha(data)

    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                      "digest": put_blob(cfg), "size": len(cfg)},
           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                       "digest": put_blob(blob), "size": len(blob)}]}
    r = requests.put("http://%s/v2/%s/manifests/%s" % (BACK, repo, tag), data=json.dumps(doc),
                     headers={"Content-Type": OCI_MANIFEST}, timeout=30)
    assert r.status_code == 201, r.text
    return "%s/%s:%s" % (FRONT, repo, tag)


class Front:
    """Forwards GETs to the registry; a blob of a repository in hold waits
    for gate (waiting is set when one does)."""

    def __init__(self):
        self.hold = set()
        self.gate = threading.Event()
        self.waiting = threading.Event()
        front = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(h):
                up = requests.get("http://%s%s" % (BACK, h.path), timeout=30,
                                  headers={k: v for k, v in h.headers.items() if k.lower() == "accept"})
                if "/blobs/" in h.path and any("/v2/%s/" % r in h.path for r in front.hold):
                    front.waiting.set()
                    front.gate.wait(120)
                h.send_response(up.status_code)
                for k in ("Content-Type", "Docker-Content-Digest"):
                    if k in up.headers:
                        h.send_header(k, up.headers[k])
                h.send_header("Content-Length", str(len(up.content)))
                h.end_headers()
                h.wfile.write(up.content)

            def log_message(h, *a):
                pass

        host, port = FRONT.split(":")
        self.srv = http.server.ThreadingHTTPServer((host, int(port)), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.gate.set()
        self.srv.shutdown()


@pytest.fixture(scope="module")
def mh():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with base.deployment(DIR, hosts_env()) as m:
        root = tempfile.mkdtemp(prefix="sbx-mh-registry-")
        reg = front = None
        try:
            # the registry, started from this thread, lives in the lan namespace
            cfg = os.path.join(root, "config.yml")
            with open(cfg, "w") as f:
                f.write("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s/data\n"
                        "http:\n  addr: %s\n" % (root, BACK))
            reg = subprocess.Popen([REGISTRY, "serve", cfg], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            m.wait("the registry", lambda: requests.get("http://%s/v2/" % BACK,
                                                        timeout=2).status_code == 200,
                   timeout=20, interval=0.2)
            front = m.front = Front()
            yield m
        finally:
            if front:
                front.stop()
            if reg and reg.poll() is None:
                reg.terminate()
                reg.wait(10)
            shutil.rmtree(root, ignore_errors=True)


def pull(mh, ref, host):
    r = mh.api("a", "POST", "/v1/images/pull", key=mh.admin_key, timeout=150,
               json={"ref": ref, "nodes": [mh.node[host]]})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["node"] for x in res] == [mh.node[host]] and "image" in res[0], r.text
    return res


def create(mh, host, sid, made, image=None):
    """PUT sid through host (image: a registry reference); its node."""
    r = mh.api(host, "PUT", "/v1/sandboxes/" + sid, json={"image": image} if image else None,
               timeout=60)
    assert r.status_code == 201, r.text
    made.append(sid)
    return r.json()["node"]


def test_pull_on_one_host_holds_up_no_other_and_placement_follows_the_image(mh):
    held = push("mh/held", "1", {"etc/held.txt": b"held"})
    slow = push("mh/slow", "1", {"etc/slow.txt": os.urandom(64 * 1024)})
    pull(mh, held, "b")
    made = []
    mh.front.hold.add("mh/slow")
    mh.front.gate.clear()
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            stuck = ex.submit(pull, mh, slow, "a")
            assert mh.front.waiting.wait(60), "the pull on host a never asked for its blob"
            # host a's pull waits on its registry: creates through every
            # host go on, those of the held image land on the host holding it
            for i, h in enumerate(base.HOSTS):
                assert create(mh, h, "mh-img-held-%d" % i, made, held) == mh.node["b"]
                create(mh, h, "mh-img-plain-%d" % i, made)
            assert not stuck.done()
            mh.front.gate.set()
            stuck.result(timeout=150)
        # the slow image is now on host a only: its creates go there
        for i, h in enumerate(base.HOSTS):
            assert create(mh, h, "mh-img-slow-%d" % i, made, slow) == mh.node["a"]
    finally:
        mh.front.gate.set()
        for sid in made:
            mh.api("a", "DELETE", "/v1/sandboxes/" + sid, timeout=30)
