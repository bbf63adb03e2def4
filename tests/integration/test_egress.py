"""Network mode `egress`, black box: sandboxes created with
{"network": "egress"} reach a public address and nothing else.

Traffic only ever goes to loopback or to network namespaces this module
creates itself, never to the internet: a namespace "lab" joined to the host
by a veth stands in for the world. It holds a public-looking address
(198.51.100.1, TEST-NET-2, never routed on the internet) and, behind the same
veth, addresses of every range a sandbox must not reach (10.x, 172.16.x,
192.168.x, 100.64.x, 169.254.169.254), each with an HTTP listener. The host
reaches all of them (checked first), so a failure from inside a sandbox is
the filter's doing, not a missing route.

Sandboxes are made through the public API (PUT /v1/sandboxes/{id}); where
that route is not there yet, straight on the first agent.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid

import pytest
import requests

LAB_PORT = 18080
PUBLIC = "198.51.100.1"
PRIVATE = ["10.99.0.1", "172.16.99.1", "192.168.99.1", "100.64.99.1", "169.254.169.254"]
LAB_ADDRS = ["198.51.100.1/24", "10.99.0.1/24", "172.16.99.1/24", "192.168.99.1/24",
             "100.64.99.1/24", "169.254.169.254/32"]
HOST_ADDRS = ["198.51.100.254/24", "10.99.0.254/24", "172.16.99.254/24", "192.168.99.254/24",
              "100.64.99.254/24"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                reason="needs root and iproute2 for the test namespaces")


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise AssertionError("%s failed: %s" % (" ".join(args), r.stderr))
    return r.stdout


def host_links():
    return {l["ifname"]: l for l in json.loads(sh("ip", "-j", "link", "show"))}


def host_ipv4():
    """Every IPv4 address of the host's own interfaces."""
    out = []
    for l in json.loads(sh("ip", "-j", "-4", "addr", "show")):
        for a in l.get("addr_info", []):
            out.append((l["ifname"], a["local"]))
    return out


def conf_value(stack, section, key):
    cur = None
    with open(os.path.join(stack.dir, "conf", "sbx.conf")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            m = re.match(r"^\[(\w+)\]$", line)
            if m:
                cur = m.group(1)
            elif cur == section and "=" in line and line.split("=", 1)[0].strip() == key:
                return line.split("=", 1)[1].strip()
    return None


# -- the stand-in internet --------------------------------------------------------


@pytest.fixture(scope="module")
def lab():
    """A network namespace with a listener on every LAB_ADDRS address, routed
    from the host. Removed at the end, also when tests fail."""
    tag = uuid.uuid4().hex[:4]
    ns, host_if = "sbxtest-lab-" + tag, "xtl" + tag   # never "sbx…": that prefix is a sandbox's
    server = None
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "lab0", "netns", ns)
        for a in HOST_ADDRS:
            sh("ip", "addr", "add", a, "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "route", "add", "169.254.169.254/32", "dev", host_if)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        for a in LAB_ADDRS:
            sh("ip", "-n", ns, "addr", "add", a, "dev", "lab0")
        sh("ip", "-n", ns, "link", "set", "lab0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", "198.51.100.254")
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, "/usr/bin/python3", "-m", "http.server", str(LAB_PORT),
             "--bind", "0.0.0.0", "--directory", "/nonexistent-dir-for-404s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The host reaches every lab address: what fails later is the filter.
        for a in [PUBLIC] + PRIVATE:
            deadline = time.monotonic() + 10
            while True:
                try:
                    requests.get("http://%s:%d/" % (a, LAB_PORT), timeout=1)
                    break
                except requests.RequestException:
                    if time.monotonic() > deadline:
                        raise AssertionError("the host cannot reach the lab at %s" % a)
                    time.sleep(0.1)
        yield {"ns": ns, "host_if": host_if}
    finally:
        if server:
            server.kill()
            server.wait(timeout=10)
        sh("ip", "link", "del", host_if, check=False)
        sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def host_listener():
    """A TCP listener of the host on every address (0.0.0.0): its port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))
    srv.listen(16)
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                c.close()
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(timeout=5)
    srv.close()


# -- sandboxes ----------------------------------------------------------------------


class Boxes:
    """Create, exec in and destroy sandboxes: public API, or the agent."""

    def __init__(self, stack):
        self.st = stack
        self.made = []
        self.direct = None

    def _agent(self):
        return "http://" + self.st.env["SBX_AGENT_1"]

    def _agent_headers(self):
        return {"X-Sbx-Node-Secret": self.st.secret, "X-Sbx-Tenant": "dev", "X-Sbx-Epoch": "1"}

    def create(self, network="egress"):
        sid = "eg-" + uuid.uuid4().hex[:10]
        if self.direct is None:
            r = self.st.api("PUT", "/v1/sandboxes/" + sid, json={"network": network}, timeout=30)
            if r.status_code == 404 and r.json().get("error", {}).get("code") == "NOT_FOUND":
                self.direct = True
            else:
                self.direct = False
                assert r.status_code == 201, "create: %d %s" % (r.status_code, r.text[:300])
                self.made.append(sid)
                return sid
        if self.direct:
            r = requests.put(self._agent() + "/agent/v1/sandboxes/dev/" + sid,
                             json={"generation": 1, "epoch": 1, "network": network},
                             headers=self._agent_headers(), timeout=30)
        else:
            r = self.st.api("PUT", "/v1/sandboxes/" + sid, json={"network": network}, timeout=30)
        assert r.status_code == 201, "create: %d %s" % (r.status_code, r.text[:300])
        self.made.append(sid)
        return sid

    def run(self, sid, command, timeout=60):
        body = {"command": command}
        if self.direct:
            r = requests.post(self._agent() + "/v1/sandboxes/%s/exec" % sid, json=body,
                              headers=self._agent_headers(), timeout=timeout)
        else:
            r = self.st.api("POST", "/v1/sandboxes/%s/exec" % sid, json=body, timeout=timeout)
        assert r.status_code == 200, "exec: %d %s" % (r.status_code, r.text[:300])
        return r.json()

    def py(self, sid, code, *args):
        q = lambda s: "'" + s.replace("'", "'\"'\"'") + "'"
        res = self.run(sid, "python3 -c %s %s" % (q(code), " ".join(q(a) for a in args)))
        assert res["exitCode"] == 0, "probe failed: %r" % res
        return res["stdout"]

    def destroy(self, sid):
        if self.direct:
            r = requests.delete(self._agent() + "/agent/v1/sandboxes/dev/" + sid,
                                headers=self._agent_headers(), timeout=30)
        else:
            r = self.st.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
        assert r.status_code == 204, "destroy: %d %s" % (r.status_code, r.text[:300])
        self.made.remove(sid)


@pytest.fixture
def boxes(stack):
    b = Boxes(stack)
    yield b
    for sid in list(b.made):
        try:
            b.destroy(sid)
        except (AssertionError, requests.RequestException):
            pass


# Connect to every target at once; per target "ok" (HTTP answer or accepted
# connection), "timeout", or the errno name.
PROBE = r"""
import errno, json, socket, sys, threading
res = {}
def one(t):
    host, port = t.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(1.5)
    try:
        s.connect((host, int(port)))
        res[t] = "ok"
    except socket.timeout:
        res[t] = "timeout"
    except OSError as ex:
        res[t] = errno.errorcode.get(ex.errno, str(ex.errno))
    finally:
        s.close()
ts = [threading.Thread(target=one, args=(t,)) for t in sys.argv[1:]]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps(res))
"""

ADDR = r"""
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", b"eth0"))[20:24]))
"""


def reach(boxes, sid, targets):
    return json.loads(boxes.py(sid, PROBE, *targets))


def box_addr(boxes, sid):
    return boxes.py(sid, ADDR).strip()


def gateway_of(addr):
    a = [int(x) for x in addr.split(".")]
    a[3] -= 1
    return ".".join(map(str, a))


def host_link_of(addr):
    """The host interface holding addr (a sandbox's gateway), or None."""
    for ifname, a in host_ipv4():
        if a == addr:
            return ifname
    return None


# -- tests ---------------------------------------------------------------------------


def test_egress_reaches_a_public_address(boxes, lab):
    sid = boxes.create()
    out = boxes.py(sid, "import urllib.request, sys\n"
                        "try:\n"
                        "    urllib.request.urlopen(sys.argv[1], timeout=5)\n"
                        "except urllib.error.HTTPError as e:\n"
                        "    print(e.code)\n", "http://%s:%d/" % (PUBLIC, LAB_PORT))
    assert out.strip() == "404", "the lab server's answer expected, got %r" % out
    assert reach(boxes, sid, ["%s:%d" % (PUBLIC, LAB_PORT)]) == {"%s:%d" % (PUBLIC, LAB_PORT): "ok"}


def test_egress_cannot_reach_private_shared_or_metadata_ranges(boxes, lab):
    sid = boxes.create()
    targets = ["%s:%d" % (a, LAB_PORT) for a in PRIVATE]
    res = reach(boxes, sid, targets + ["%s:%d" % (PUBLIC, LAB_PORT)])
    assert res.pop("%s:%d" % (PUBLIC, LAB_PORT)) == "ok"
    for t, r in res.items():
        assert r == "timeout", "%s from an egress sandbox: %s (must be dropped)" % (t, r)


def test_egress_cannot_reach_the_host(stack, boxes, lab, host_listener):
    sid = boxes.create()
    gw = gateway_of(box_addr(boxes, sid))
    ports = [host_listener, stack.redis_port, int(stack.url.rsplit(":", 1)[1]),
             int(stack.env["SBX_AGENT_1"].rsplit(":", 1)[1])]
    addrs = sorted({a for _, a in host_ipv4() if not a.startswith("127.")} | {gw})
    targets = ["%s:%d" % (a, p) for a in addrs for p in ports]
    res = reach(boxes, sid, targets)
    for t, r in res.items():
        assert r == "timeout", "host service %s from an egress sandbox: %s" % (t, r)
    # 127.0.0.1 inside is the sandbox's own loopback: the host's services are not there
    res = reach(boxes, sid, ["127.0.0.1:%d" % p for p in ports])
    for t, r in res.items():
        assert r == "ECONNREFUSED", "%s inside the sandbox: %s" % (t, r)


def test_egress_sandboxes_cannot_reach_each_other(boxes, lab):
    a, b = boxes.create(), boxes.create()
    addr_b = box_addr(boxes, b)
    boxes.run(b, "nohup python3 -m http.server 18081 --bind 0.0.0.0 >/dev/null 2>&1 &")
    deadline = time.monotonic() + 10
    while reach(boxes, b, ["127.0.0.1:18081"]) != {"127.0.0.1:18081": "ok"}:
        assert time.monotonic() < deadline, "listener in sandbox b did not start"
        time.sleep(0.2)
    assert reach(boxes, b, ["%s:18081" % addr_b]) == {"%s:18081" % addr_b: "ok"}
    res = reach(boxes, a, ["%s:18081" % addr_b])
    assert res == {"%s:18081" % addr_b: "timeout"}, "sandbox to sandbox: %r" % res


def test_egress_sandbox_network_shape(stack, boxes):
    sid = boxes.create()
    addr = box_addr(boxes, sid)
    subnet = conf_value(stack, "agent", "egress_subnet") or "10.88.0.0/16"
    net, bits = subnet.split("/")
    mask = (0xffffffff << (32 - int(bits))) & 0xffffffff
    as_int = lambda s: int.from_bytes(socket.inet_aton(s), "big")
    assert as_int(addr) & mask == as_int(net), "%s is not in %s" % (addr, subnet)
    out = boxes.run(sid, "ls /sys/class/net; echo ---; cat /proc/net/if_inet6; echo ---; "
                         "cat /proc/net/route; echo ---; cat /etc/resolv.conf; echo ---; "
                         "cat /sys/class/net/eth0/mtu")["stdout"]
    links, v6, route, resolv, mtu = [p.strip() for p in out.split("---")]
    assert sorted(links.split()) == ["eth0", "lo"]
    # no IPv6 address but lo's ::1
    assert all(line.split()[-1] == "lo" for line in v6.splitlines()), v6
    default = [l.split() for l in route.splitlines()[1:] if l.split()[1] == "00000000"]
    assert len(default) == 1 and default[0][0] == "eth0"
    gw = socket.inet_ntoa(bytes.fromhex(default[0][2])[::-1])
    assert gw == gateway_of(addr)
    dns = conf_value(stack, "agent", "dns") or "1.1.1.1"
    assert "nameserver %s" % dns in resolv.splitlines()
    # the host's MTU: that of the link of the host's default route
    host_dev = [l.split() for l in open("/proc/net/route").read().splitlines()[1:]
                if l.split()[1] == "00000000"]
    if host_dev:
        with open("/sys/class/net/%s/mtu" % host_dev[0][0]) as f:
            assert int(mtu) == int(f.read())


def test_destroy_removes_the_veth_and_none_makes_none(boxes):
    before = {n for n in host_links() if n.startswith("sbx")}
    sid = boxes.create()
    gw = gateway_of(box_addr(boxes, sid))
    link = host_link_of(gw)
    assert link and link.startswith("sbx") and len(link) <= 15, "host side %r" % link
    boxes.destroy(sid)
    deadline = time.monotonic() + 10
    while link in host_links() or host_link_of(gw):
        assert time.monotonic() < deadline, "veth %s still on the host after destroy" % link
        time.sleep(0.05)
    none = boxes.create(network="none")
    assert boxes.run(none, "ls /sys/class/net")["stdout"].split() == ["lo"]
    after = {n for n in host_links() if n.startswith("sbx")}
    assert after <= before, "network none made host links %r" % (after - before)


def test_nftables_table_of_each_agent(stack):
    tables = sh("nft", "list", "tables")
    names = []
    for i in range(1, stack.agents + 1):
        m = re.findall(r"nftables table inet (sbx_agent_%d_[0-9a-f]{4})" % i,
                       stack.log("agent-%d" % i, 2000))
        assert m, "agent-%d logged no nftables table" % i
        assert "table inet %s" % m[-1] in tables, tables
        names.append(m[-1])
    assert len(set(names)) == len(names)
    rules = sh("nft", "list", "table", "inet", names[0])
    for needle in ('iifname "sbx*" drop', "masquerade", "169.254.0.0/16", "10.0.0.0/8",
                   "192.168.0.0/16", "nfproto ipv6 drop"):
        assert needle in rules, "%r missing from the ruleset:\n%s" % (needle, rules)
