"""Registry image figures of `make bench` (run.py calls fig_images), against
Debian's docker-registry on loopback (tests/integration/test_images.py's
Registry):

- image-cold: `PUT /v1/sandboxes/{new}` of a BENCH_IMAGE_MIB (100) MiB
  image the node does not hold, until its first command answered: the
  agent's pull (manifest, blobs verified, layers unpacked) and the start.
  Beside it, image-skopeo: `skopeo copy docker://… dir:…` of the same
  image in the same run (download and digest checks, no unpacking).
- image-warm-create: `PUT` of a new sandbox of that image once pulled,
  beside `create` (the `default` image) of sandbox_figs.

Alone: `BENCH_ONLY=images make bench` (run.py).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from benchlib import Lat, Value, timed

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import test_images  # noqa: E402

IMAGE_MIB = int(os.environ.get("BENCH_IMAGE_MIB", "100"))
N_WARM = int(os.environ.get("BENCH_N_IMAGE_CREATE", "20"))
LAYERS = 4


def _build(reg, root):
    """Push a IMAGE_MIB image (the probe, then LAYERS layers of random
    bytes, gzip); its reference."""
    probe = os.path.join(root, "probe")
    src = os.path.join(root, "probe.c")
    with open(src, "w") as f:
        f.write(test_images.PROBE_C)
    subprocess.run(["gcc", "-static", "-O2", "-o", probe, src], check=True)
    with open(probe, "rb") as f:
        layers = [test_images.layer([("bin", "dir", None), ("bin/probe", "file", f.read(), 0o755)])]
    per = IMAGE_MIB * 1024 * 1024 // LAYERS
    for i in range(LAYERS):
        layers.append(test_images.layer([("data/part%d" % i, "file", os.urandom(per))]))
    tag = uuid.uuid4().hex[:8]
    reg.image("bench/big", tag, layers, env=["PATH=/bin"])
    return "%s/bench/big:%s" % (reg.host, tag)


def fig_images(st, ctx):
    """Value image-cold and image-skopeo, Lat image-warm-create into ctx."""
    auth = {"Authorization": "Bearer " + st.key}
    root = tempfile.mkdtemp(prefix="sbx-bench-images-")
    reg = test_images.Registry(root)
    made = []

    def put(ref):
        sid = "bimg-" + uuid.uuid4().hex[:10]
        r = st.http.put(st.url + "/v1/sandboxes/" + sid, json={"image": ref}, headers=auth,
                        timeout=600)
        assert r.status_code == 201, r.text
        made.append(sid)
        return sid

    try:
        ref = _build(reg, root)
        t0 = time.perf_counter()
        subprocess.run(["skopeo", "copy", "--src-tls-verify=false", "docker://" + ref,
                        "dir:" + os.path.join(root, "copy")], check=True, capture_output=True,
                       timeout=600)
        skopeo_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sid = put(ref)
        r = st.http.post(st.url + "/v1/sandboxes/%s/exec" % sid, json={"argv": ["/bin/probe"]},
                         headers=auth, timeout=60)
        assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
        cold_s = time.perf_counter() - t0
        ctx.values.append(Value(
            "image-cold", "`PUT` of a new sandbox of a %d MiB registry image (%d layers, gzip) "
            "the node does not hold, until its first command answered" % (IMAGE_MIB, LAYERS + 1),
            cold_s, "s", compare="`skopeo copy docker:// dir:` of the same image: %.2f s "
            "(ratio %.2f)" % (skopeo_s, cold_s / skopeo_s if skopeo_s else 0.0)))
        ctx.values.append(Value("image-skopeo", "`skopeo copy docker://… dir:…` of the same "
                                "image, same run", skopeo_s, "s"))
        warm = Lat("image-warm-create", "`PUT /v1/sandboxes/{new id}` → 201 of the %d MiB image "
                   "once pulled (N=%d)" % (IMAGE_MIB, N_WARM), baseline="create",
                   samples=timed(lambda: put(ref), N_WARM))
        ctx.lat.append(warm)
        return warm
    finally:
        for sid in made:
            st.http.delete(st.url + "/v1/sandboxes/" + sid, headers=auth, timeout=60)
        reg.stop()
        shutil.rmtree(root, ignore_errors=True)
