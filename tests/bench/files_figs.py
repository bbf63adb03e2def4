#!/usr/bin/python3
"""File transfer figures of `make bench` (run.py calls fig_files): upload
and download throughput of a 1 GiB file through nginx and the Files API,
beside `cat` of the same file on the host, and the peak memory of nginx and
the agent during each transfer.

- data: a 64 MiB block of os.urandom repeated 16 times (1 GiB, incompressible
  within any window a transfer could exploit, no holes), written to a temp
  file under /tmp before timing starts (so it sits in the page cache for
  every reader: curl, cat).
- client: curl (a C client, so Python is not the bottleneck): `curl -T FILE`
  PUT with `Expect:` disabled, and GET to /dev/null; its `time_total`.
- baselines: `cat FILE > /dev/shm/…` (a tmpfs file, like the sandbox's disk)
  for the upload side, `cat FILE > /dev/null` for the download side.
- target: ratio ≥ 0.5 of the baseline's MiB/s; memory: flat (peak − start
  ≤ 16 MiB per side).
- transport ceiling (not sbx): the same file served as a static file by a
  private nginx (sendfile) on a loopback port in a temp dir, fetched by the
  same curl: what loopback TCP and the client allow on this machine; it is
  the yardstick for the download ratio (`cat > /dev/null` copies nothing).
- memory: VmRSS of the agent and the sum over all nginx processes (master
  and workers, pids from the stack's pids/ dir and /proc), sampled every
  100 ms by a thread while the transfer runs; reported as start → peak.
- the sandbox: resources memoryMiB 2048, diskMiB 1300 (its disk is a tmpfs:
  the file is deleted before each upload so only one copy is ever there).

Environment: BENCH_FILE_MIB (default 1024), BENCH_FILE_RUNS (5).

Alone: `BENCH_ONLY=files make bench` (run.py).
"""

import os
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.parse

from benchlib import Value
from sbxproc import children, rss_kib

MiB = 1024 * 1024
FILE_MIB = int(os.environ.get("BENCH_FILE_MIB", "1024"))
RUNS = int(os.environ.get("BENCH_FILE_RUNS", "5"))
BLOCK_MIB = 64
SID = "bench-files"
TARGET_RATIO = 0.5
FLAT_MIB = 16


class Sampler:
    """Samples the agent's VmRSS and the sum of nginx's every 100 ms."""

    def __init__(self, agent_pid, nginx_pid):
        self.agent_pid = agent_pid
        self.nginx = [nginx_pid] + children(nginx_pid)
        self.start = self.sample()
        self.peak = self.start
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def sample(self):
        return (rss_kib(self.agent_pid), sum(rss_kib(p) for p in self.nginx))

    def loop(self):
        while not self.stop_ev.wait(0.1):
            a, n = self.sample()
            self.peak = (max(self.peak[0], a), max(self.peak[1], n))

    def stop(self):
        self.stop_ev.set()
        self.thread.join()
        a, n = self.sample()
        self.peak = (max(self.peak[0], a), max(self.peak[1], n))
        return self


def make_file(directory):
    os.chmod(directory, 0o755)      # the ceiling's nginx workers read it
    path = os.path.join(directory, "bench-1g.bin")
    block = os.urandom(BLOCK_MIB * MiB)
    with open(path, "wb") as f:
        left = FILE_MIB
        while left > 0:
            n = min(BLOCK_MIB, left)
            f.write(block[:n * MiB])
            left -= n
    os.chmod(path, 0o644)
    return path


def curl(args):
    """Run curl; (http status, seconds, bytes) from its -w output."""
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w",
                          "%{http_code} %{time_total} %{size_upload} %{size_download}"] + args,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise AssertionError("curl %s: %s" % (args[-1], out.stderr))
    code, t, up, down = out.stdout.split()
    return int(code), float(t), int(float(up)), int(float(down))


NGINX_CONF = """worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log;
events { worker_connections 16; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path %(d)s/t; proxy_temp_path %(d)s/t; fastcgi_temp_path %(d)s/t;
    uwsgi_temp_path %(d)s/t; scgi_temp_path %(d)s/t;
    server { listen 127.0.0.1:%(port)d; root %(root)s; }
}
"""


def loopback_ceiling(src, port):
    """Seconds of each of RUNS curl GETs of src from a private nginx
    (static file, sendfile) on a loopback port: what loopback TCP and
    curl allow on this machine, with no sbx in the path."""
    d = tempfile.mkdtemp(prefix="sbx-bench-nginx-")
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(NGINX_CONF % {"d": d, "port": port, "root": os.path.dirname(src)})
    subprocess.run(["nginx", "-p", d, "-c", os.path.join(d, "nginx.conf")], check=True,
                   timeout=30, capture_output=True)
    try:
        out = []
        for _ in range(RUNS):
            code, t, _, down = curl(["http://127.0.0.1:%d/%s" % (port, os.path.basename(src))])
            if code != 200 or down != os.path.getsize(src):
                raise AssertionError("static nginx: HTTP %d, %d bytes" % (code, down))
            out.append(t)
        return out
    finally:
        try:
            with open(os.path.join(d, "nginx.pid")) as f:
                pid = int(f.read().strip())
            os.kill(pid, 15)
            for _ in range(50):
                if not os.path.exists("/proc/%d" % pid):
                    break
                time.sleep(0.1)
        except (OSError, ValueError):
            pass
        subprocess.run(["rm", "-rf", d])


def timed_shell(cmd):
    t0 = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", cmd], check=True, timeout=600)
    return time.perf_counter() - t0


def mibs(size, seconds):
    return size / MiB / seconds if seconds > 0 else 0.0


def fmt_mem(start, peak):
    return "%.1f → %.1f MiB" % (start / 1024.0, peak / 1024.0)


def fig_files(st, ctx):
    """Appends the file-transfer Values to ctx.values."""
    size = FILE_MIB * MiB
    auth = "Authorization: Bearer " + st.key
    base = st.url + "/v1/sandboxes/" + SID
    url = base + "/files/" + urllib.parse.quote("/workspace/big.bin", safe="")
    r = st.http.put(base, json={"resources": {"memoryMiB": 2048, "diskMiB": 1300}},
                    headers={"Authorization": "Bearer " + st.key}, timeout=60)
    if r.status_code not in (200, 201):
        raise AssertionError("create %s: %d %s" % (SID, r.status_code, r.text[:200]))
    rec = r.json()
    node = rec.get("node") or "agent-1"
    direct = ["-H", "X-Sbx-Node-Secret: " + st.secret, "-H", "X-Sbx-Tenant: dev",
              "-H", "X-Sbx-Epoch: %d" % rec["epoch"],
              "-H", "X-Sbx-Generation: %d" % rec["generation"],
              "http://%s/v1/sandboxes/%s/files/%s" % (
                  st.env["SBX_AGENT_%s" % node.rsplit("-", 1)[-1]], SID,
                  urllib.parse.quote("/workspace/big.bin", safe=""))]
    agent_pid, nginx_pid = st.pid(node), st.pid("nginx")
    tmp = tempfile.mkdtemp(prefix="sbx-bench-files-", dir="/tmp")
    shm = tempfile.mkdtemp(prefix="sbx-bench-files-", dir="/dev/shm")
    try:
        src = make_file(tmp)
        # warm the page cache and the baselines' paths once
        timed_shell("cat %s > /dev/null" % src)
        up_s, down_s, cat_up_s, cat_down_s, agent_s = [], [], [], [], []
        up_mem, down_mem = [], []
        for i in range(RUNS):
            cat_up_s.append(timed_shell("cat %s > %s/copy; rm -f %s/copy" % (src, shm, shm)))
            cat_down_s.append(timed_shell("cat %s > /dev/null" % src))
            st.http.delete(url, headers={"Authorization": "Bearer " + st.key}, timeout=60)
            sm = Sampler(agent_pid, nginx_pid)
            code, t, up, _ = curl(["-T", src, "-H", "Expect:", "-H", auth, url])
            up_mem.append(sm.stop())
            if code not in (200, 201) or up != size:
                raise AssertionError("upload: HTTP %d, %d bytes sent" % (code, up))
            up_s.append(t)
            if i == 0:
                got = st.http.get(base + "/stat/" +
                                  urllib.parse.quote("/workspace/big.bin", safe=""),
                                  headers={"Authorization": "Bearer " + st.key}, timeout=30)
                if got.status_code != 200 or got.json().get("size") != size:
                    raise AssertionError("uploaded file: %d %s" % (got.status_code, got.text[:200]))
            sm = Sampler(agent_pid, nginx_pid)
            code, t, _, down = curl(["-H", auth, url])
            down_mem.append(sm.stop())
            if code != 200 or down != size:
                raise AssertionError("download: HTTP %d, %d bytes" % (code, down))
            down_s.append(t)
            code, t, _, down = curl(direct)
            if code != 200 or down != size:
                raise AssertionError("download from the agent: HTTP %d, %d bytes" % (code, down))
            agent_s.append(t)
        from conftest import free_port
        ceil_s = loopback_ceiling(src, free_port())
    finally:
        subprocess.run(["rm", "-rf", tmp, shm])
        st.http.delete(base, headers={"Authorization": "Bearer " + st.key}, timeout=60)

    def thr(samples):
        return mibs(size, statistics.median(samples))

    def spread(samples):
        return "%.0f..%.0f" % (mibs(size, max(samples)), mibs(size, min(samples)))

    up, down = thr(up_s), thr(down_s)
    cup, cdown, ceil = thr(cat_up_s), thr(cat_down_s), thr(ceil_s)
    direct_down = thr(agent_s)
    what = "%d MiB, curl through nginx, median of %d runs" % (FILE_MIB, RUNS)
    ctx.values.append(Value(
        "file-upload", "`PUT …/files/{path}` of %s (`curl -T`, streamed from a page-cached "
        "file); target ≥ %.1f of `cat FILE > tmpfs file`" % (what, TARGET_RATIO),
        up, "MiB/s", target=TARGET_RATIO * cup, sense="ge",
        compare="ratio %.2f of `cat > /dev/shm` %.0f MiB/s; spread %s" % (up / cup, cup,
                                                                        spread(up_s))))
    ctx.values.append(Value(
        "file-download", "`GET …/files/{path}` of %s (curl to /dev/null); target ≥ %.1f of "
        "`cat FILE > /dev/null`" % (what, TARGET_RATIO),
        down, "MiB/s", target=TARGET_RATIO * cdown, sense="ge",
        compare="ratio %.2f of `cat > /dev/null` %.0f MiB/s, %.2f of `loopback-ceiling`; "
        "spread %s" % (down / cdown, cdown, down / ceil, spread(down_s))))
    ctx.values.append(Value(
        "file-download-agent", "as `file-download`, straight at the agent (no nginx, no "
        "routing check; node secret and tenant/epoch headers): the agent's own share",
        direct_down, "MiB/s", compare="ratio %.2f of `loopback-ceiling`; through nginx %.2f "
        "of this; spread %s" % (direct_down / ceil, down / direct_down, spread(agent_s))))
    ctx.values.append(Value(
        "file-loopback-ceiling", "not sbx: `curl` GET of the same %d MiB file from a private "
        "nginx serving it as a static file (sendfile) on a loopback port, median of %d: what "
        "loopback TCP + curl allow on this machine" % (FILE_MIB, RUNS), ceil, "MiB/s",
        compare="ratio %.2f of `cat > /dev/null`; spread %s" % (ceil / cdown, spread(ceil_s))))
    for side, mems in (("upload", up_mem), ("download", down_mem)):
        worst_a = max(mems, key=lambda m: m.peak[0] - m.start[0])
        worst_n = max(mems, key=lambda m: m.peak[1] - m.start[1])
        ctx.values.append(Value(
            "file-%s-mem-agent" % side, "agent VmRSS growth (peak − start, sampled every "
            "100 ms) during each 1 GiB %s; worst of %d runs" % (side, RUNS),
            (worst_a.peak[0] - worst_a.start[0]) / 1024.0, "MiB", target=FLAT_MIB,
            compare="agent %s" % fmt_mem(*[x[0] for x in (worst_a.start, worst_a.peak)])))
        ctx.values.append(Value(
            "file-%s-mem-nginx" % side, "nginx VmRSS growth (all its processes summed; peak − "
            "start, every 100 ms) during each 1 GiB %s; worst of %d runs" % (side, RUNS),
            (worst_n.peak[1] - worst_n.start[1]) / 1024.0, "MiB", target=FLAT_MIB,
            compare="nginx %s" % fmt_mem(*[x[1] for x in (worst_n.start, worst_n.peak)])))
