"""Network mode `egress`, black box: sandboxes created with
{"network": "egress"} reach a public address and nothing else.

Traffic only ever goes to loopback or to network namespaces this module
creates itself, never to the internet: a namespace "lab" joined to the host
by a veth stands in for the world. It holds a public-looking address
(198.51.100.1, TEST-NET-2, never routed on the internet: every test stack
allows it with agent.egress_allow, conftest.stack_up) and, behind the same
veth, an address of every blocked range that can be routed at all (private,
shared, link-local, documentation, benchmarking, AS112, cloud platform
addresses…), each with an HTTP listener. The host reaches all of them
(checked first), so a failure from inside a sandbox is the filter's doing,
not a missing route. Ranges that cannot be routed into a namespace
(loopback, "this network", multicast, reserved, all IPv6: egress has no
IPv6) are checked in the loaded ruleset instead.

Sandboxes are made through the public API (PUT /v1/sandboxes/{id}); where
that route is not there yet, straight on the first agent.
"""

import ipaddress
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

from conftest import stack_down, stack_up

LAB_PORT = 18080
PUBLIC = "198.51.100.1"
# Every blocked IPv4 range a namespace can hold an address of: range -> the
# lab's address in it (docs/SECURITY.md "Blocked destinations").
BLOCKED = {
    "10.0.0.0/8": "10.99.0.1",
    "100.64.0.0/10": "100.64.99.1",
    "169.254.0.0/16": "169.254.99.1",
    "172.16.0.0/12": "172.16.99.1",
    "192.0.0.0/24": "192.0.0.170",
    "192.0.2.0/24": "192.0.2.1",
    "192.31.196.0/24": "192.31.196.1",
    "192.52.193.0/24": "192.52.193.1",
    "192.88.99.0/24": "192.88.99.1",
    "192.168.0.0/16": "192.168.99.1",
    "192.175.48.0/24": "192.175.48.1",
    "198.18.0.0/15": "198.18.0.1",
    "198.51.100.0/24": "198.51.100.2",   # TEST-NET-2 but the allowed PUBLIC
    "203.0.113.0/24": "203.0.113.1",
    "169.254.169.254/32": "169.254.169.254",
    "168.63.129.16/32": "168.63.129.16",
    "100.100.100.200/32": "100.100.100.200",
    "161.26.0.0/16": "161.26.0.10",
}
PRIVATE = sorted(set(BLOCKED.values()))
# Blocked ranges no namespace can be made to answer on: asserted in the ruleset.
RULE_ONLY4 = ["0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32"]
RULE_ONLY6 = ["::/128", "::1/128", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64",
              "100:0:0:1::/64", "2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20",
              "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
              "fd00:ec2::254/128", "fd00:ec2::23/128"]
HOST_ADDR = "198.51.100.254"

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


# -- the stand-in internet --------------------------------------------------------


@pytest.fixture(scope="module")
def lab():
    """A network namespace with a listener on PUBLIC and every BLOCKED address, routed
    from the host. Removed at the end, also when tests fail."""
    tag = uuid.uuid4().hex[:4]
    ns, host_if = "sbxtest-lab-" + tag, "xtl" + tag   # never "sbx…": that prefix is a sandbox's
    server = None
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "lab0", "netns", ns)
        sh("ip", "addr", "add", HOST_ADDR + "/24", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", PUBLIC + "/24", "dev", "lab0")
        for a in PRIVATE:
            sh("ip", "-n", ns, "addr", "add", a + "/32", "dev", "lab0")
            if not a.startswith("198.51.100."):
                # a host route into the lab; it goes with the link
                sh("ip", "route", "add", a + "/32", "dev", host_if)
        sh("ip", "-n", ns, "link", "set", "lab0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", HOST_ADDR)
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


@pytest.fixture(scope="module")
def blocked_reach(stack, lab):
    """From one egress sandbox: PUBLIC and every BLOCKED address at once."""
    b = Boxes(stack)
    sid = b.create()
    try:
        yield reach(b, sid, ["%s:%d" % (a, LAB_PORT) for a in [PUBLIC] + PRIVATE])
    finally:
        b.destroy(sid)


@pytest.mark.parametrize("cidr", sorted(BLOCKED))
def test_egress_cannot_reach_blocked_range(blocked_reach, cidr):
    assert blocked_reach["%s:%d" % (PUBLIC, LAB_PORT)] == "ok", "the lab itself: %r" % blocked_reach
    r = blocked_reach["%s:%d" % (BLOCKED[cidr], LAB_PORT)]
    assert r == "timeout", "%s (%s) from an egress sandbox: %s (must be dropped)" % (
        BLOCKED[cidr], cidr, r)


def nft_set(table, name):
    """The elements of an nftables set as ip_network objects (ranges split)."""
    out = json.loads(sh("nft", "-j", "list", "set", "inet", table, name))
    nets = []
    for item in out["nftables"]:
        for el in item.get("set", {}).get("elem", []):
            if isinstance(el, str):
                nets.append(ipaddress.ip_network(el))
            elif "prefix" in el:
                nets.append(ipaddress.ip_network("%s/%d" % (el["prefix"]["addr"], el["prefix"]["len"])))
            elif "range" in el:
                lo, hi = (ipaddress.ip_address(x) for x in el["range"])
                nets.extend(ipaddress.summarize_address_range(lo, hi))
    return nets


def agent_tables(st):
    names = []
    for i in range(1, st.agents + 1):
        m = re.findall(r"nftables table inet (sbx_agent_%d_[0-9a-f]{4})" % i,
                       st.log("agent-%d" % i, 2000))
        assert m, "agent-%d logged no nftables table" % i
        names.append(m[-1])
    return names


@pytest.mark.parametrize("cidr", RULE_ONLY4 + RULE_ONLY6 + sorted(BLOCKED))
def test_blocked_range_is_in_the_ruleset(stack, cidr):
    net = ipaddress.ip_network(cidr)
    for table in agent_tables(stack):
        nets = nft_set(table, "blocked%d" % net.version)
        assert any(net.subnet_of(n) for n in nets if n.version == net.version), \
            "%s is not in %s's blocked%d: %s" % (cidr, table, net.version, nets)


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
    subnet = stack.conf_value("agent", "egress_subnet") or "10.88.0.0/16"
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
    dns = stack.conf_value("agent", "dns") or "1.1.1.1"
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
    names = agent_tables(stack)
    for n in names:
        assert "table inet %s" % n in tables, tables
    assert len(set(names)) == len(names)
    links = re.findall(r"links (sbx[0-9a-f]{4})\*", stack.log("agent-1", 2000))[-1]
    rules = sh("nft", "list", "table", "inet", names[0])
    for needle in ('iifname "%s*" drop' % links, "masquerade", "169.254.0.0/16", "10.0.0.0/8",
                   "192.168.0.0/16", "198.18.0.0/15", "nfproto ipv6 drop",
                   "ct count over 1024", "limit rate over 25000 kbytes/second"):
        assert needle in rules, "%r missing from the ruleset:\n%s" % (needle, rules)
    # every match on where a packet comes from names this agent's links
    assert 'iifname "sbx*"' not in rules, rules


# -- a second stack of another subnet on the same host ------------------------------

OTHER_SUBNET = "10.87.0.0/16"
OTHER_CONN_MAX = 8


@pytest.fixture(scope="module")
def other(stack):
    """A one-agent stack with its own subnet and a small connection limit,
    running beside the session stack (whose agents use the default subnet).
    Skipped while an sbx agent of an older build runs on this host: its
    rules, matching every "sbx*" link, drop every other subnet's traffic."""
    ours = set(agent_tables(stack))
    for t in re.findall(r"^table inet (\S+)$", sh("nft", "list", "tables"), re.M):
        if t not in ours and 'iifname "sbx*" ip saddr !=' in sh("nft", "list", "table", "inet", t, check=False):
            pytest.skip("table inet %s of another agent on this host drops other subnets" % t)
    st = stack_up(agents=1, overrides=["agent.egress_subnet=" + OTHER_SUBNET,
                                       "agent.egress_conn_max=%d" % OTHER_CONN_MAX])
    try:
        yield st
    finally:
        stack_down(st)


def test_agents_of_two_subnets_keep_their_own_rules(stack, other, lab):
    mine, theirs = Boxes(stack), Boxes(other)
    try:
        a, b = mine.create(), theirs.create()
        target = "%s:%d" % (PUBLIC, LAB_PORT)
        assert reach(theirs, b, [target]) == {target: "ok"}, "the other subnet's sandbox"
        assert reach(mine, a, [target]) == {target: "ok"}, "the session stack's sandbox"
        # each still drops what it must for its own sandboxes
        blocked = "%s:%d" % (BLOCKED["10.0.0.0/8"], LAB_PORT)
        assert reach(theirs, b, [blocked]) == {blocked: "timeout"}
        # and neither reaches the other's sandboxes
        addr_a = box_addr(mine, a)
        assert reach(theirs, b, ["%s:%d" % (addr_a, LAB_PORT)]) == {"%s:%d" % (addr_a, LAB_PORT): "timeout"}
    finally:
        for bx in (mine, theirs):
            for sid in list(bx.made):
                bx.destroy(sid)
    t_other = agent_tables(other)[0]
    assert t_other not in agent_tables(stack)
    rules = sh("nft", "list", "table", "inet", t_other)
    assert "ip saddr != %s drop" % OTHER_SUBNET in rules
    assert "ct count over %d" % OTHER_CONN_MAX in rules


# Hold n connections to the target open, then try one more: the results.
HOLD = r"""
import errno, json, socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held, res = [], []
for i in range(n + 1):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        res.append("ok")
        held.append(s)
    except socket.timeout:
        res.append("timeout")
    except OSError as ex:
        res.append(errno.errorcode.get(ex.errno, str(ex.errno)))
print(json.dumps(res))
"""


def test_connection_beyond_the_limit_fails(other, lab):
    bx = Boxes(other)
    sid = bx.create()
    try:
        res = json.loads(bx.py(sid, HOLD, PUBLIC, str(LAB_PORT), str(OTHER_CONN_MAX)))
        assert res[:OTHER_CONN_MAX] == ["ok"] * OTHER_CONN_MAX, res
        assert res[OTHER_CONN_MAX] == "EHOSTUNREACH", "connection %d: %s" % (OTHER_CONN_MAX + 1, res)
        # the held ones closed with the probe: connections are possible again
        target = "%s:%d" % (PUBLIC, LAB_PORT)
        other.wait("a connection after the probe closed its sockets",
                   lambda: reach(bx, sid, [target]) == {target: "ok"}, timeout=30)
    finally:
        bx.destroy(sid)
