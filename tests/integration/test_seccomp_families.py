"""Address families and netlink protocols a sandbox may open (seccomp,
docs/SECURITY.md "Address families"): one sandbox (network "none"), one
probe that tries socket(family, type, protocol) for every case and prints
"ok" or the errno name, one assertion per case.

A refusal here is the filter's only where the host kernel has the family:
`host_has` says which (the test process is not filtered), and the refused
cases assert EAFNOSUPPORT / EPROTONOSUPPORT either way.
"""

import json
import socket
import uuid

import pytest

# name: (family, type, protocol)
ALLOWED = {
    "AF_UNIX stream": (1, socket.SOCK_STREAM, 0),
    "AF_UNIX dgram": (1, socket.SOCK_DGRAM, 0),
    "AF_INET stream": (2, socket.SOCK_STREAM, 0),
    "AF_INET dgram": (2, socket.SOCK_DGRAM, 0),
    "AF_INET6 stream": (10, socket.SOCK_STREAM, 0),
    "AF_INET6 dgram": (10, socket.SOCK_DGRAM, 0),
    "NETLINK_ROUTE raw": (16, socket.SOCK_RAW, 0),      # glibc's getaddrinfo, if_nameindex
    "NETLINK_ROUTE dgram": (16, socket.SOCK_DGRAM, 0),
    "NETLINK_SOCK_DIAG": (16, socket.SOCK_DGRAM, 4),    # ss
}

REFUSED_FAMILIES = {
    "AF_VSOCK": (40, socket.SOCK_STREAM, 0),
    "AF_VSOCK seqpacket": (40, socket.SOCK_SEQPACKET, 0),
    "AF_KEY": (15, socket.SOCK_RAW, 2),
    "AF_ALG": (38, socket.SOCK_SEQPACKET, 0),
    "AF_BLUETOOTH": (31, socket.SOCK_STREAM, 3),
    "AF_PACKET": (17, socket.SOCK_DGRAM, 0),
    "AF_PACKET raw": (17, socket.SOCK_RAW, 0),
    "AF_RDS": (21, socket.SOCK_SEQPACKET, 0),
    "AF_TIPC": (30, socket.SOCK_RDM, 0),
    "AF_CAN": (29, socket.SOCK_RAW, 1),
    "AF_XDP": (44, socket.SOCK_RAW, 0),
    "AF_KCM": (41, socket.SOCK_DGRAM, 0),
    "AF_QIPCRTR": (42, socket.SOCK_DGRAM, 0),
    "AF_SMC": (43, socket.SOCK_STREAM, 0),
    "AF_MCTP": (45, socket.SOCK_DGRAM, 0),
    "AF_APPLETALK": (5, socket.SOCK_DGRAM, 0),
    "AF_AX25": (3, socket.SOCK_SEQPACKET, 0),
    "AF_X25": (9, socket.SOCK_SEQPACKET, 0),
    "AF_LLC": (26, socket.SOCK_DGRAM, 0),
    "AF_PPPOX": (24, socket.SOCK_STREAM, 0),
    "AF_UNSPEC": (0, socket.SOCK_STREAM, 0),
    "family 63 (none yet)": (63, socket.SOCK_STREAM, 0),
}

REFUSED_NETLINK = {
    "NETLINK_USERSOCK": (16, socket.SOCK_RAW, 2),
    "NETLINK_XFRM": (16, socket.SOCK_RAW, 6),
    "NETLINK_SELINUX": (16, socket.SOCK_RAW, 7),
    "NETLINK_AUDIT": (16, socket.SOCK_RAW, 9),
    "NETLINK_FIB_LOOKUP": (16, socket.SOCK_RAW, 10),
    "NETLINK_CONNECTOR": (16, socket.SOCK_DGRAM, 11),
    "NETLINK_NETFILTER": (16, socket.SOCK_RAW, 12),
    "NETLINK_KOBJECT_UEVENT": (16, socket.SOCK_DGRAM, 15),
    "NETLINK_GENERIC": (16, socket.SOCK_DGRAM, 16),
    "NETLINK_CRYPTO": (16, socket.SOCK_RAW, 21),
}

# The kernel reads the family from the low 32 bits of the register: junk in
# the high half must not get around the filter (raw syscall 41, x86_64).
HIGH_BITS = {
    "AF_VSOCK | 1<<32": ((1 << 32) | 40, socket.SOCK_STREAM, 0),
    "AF_PACKET | 1<<40": ((1 << 40) | 17, socket.SOCK_DGRAM, 0),
}

PROBE = r"""
import ctypes, errno, json, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, (fam, typ, proto) in json.loads(sys.argv[1]).items():
    if fam >= 1 << 32:
        ctypes.set_errno(0)
        fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(fam), ctypes.c_long(typ), ctypes.c_long(proto))
        out[name] = "ok" if fd >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
        continue
    try:
        socket.socket(fam, typ, proto).close()
        out[name] = "ok"
    except OSError as ex:
        out[name] = errno.errorcode.get(ex.errno, str(ex.errno))
try:
    out["if_nameindex"] = [n for _, n in socket.if_nameindex()]
except OSError as ex:
    out["if_nameindex"] = errno.errorcode.get(ex.errno, str(ex.errno))
try:
    out["getaddrinfo"] = sorted({a[4][0] for a in socket.getaddrinfo("localhost", 80, proto=socket.IPPROTO_TCP, flags=socket.AI_ADDRCONFIG)})
except OSError as ex:
    out["getaddrinfo"] = str(ex)
print(json.dumps(out))
"""


def host_has(fam, typ, proto):
    """Whether this (unfiltered) test process can open the socket."""
    if fam >= 1 << 32:
        fam &= 0xffffffff
    try:
        socket.socket(fam, typ, proto).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def probed(stack):
    sid = "sc-" + uuid.uuid4().hex[:10]
    r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
    assert r.status_code == 201, r.text[:300]
    try:
        cases = dict(ALLOWED, **REFUSED_FAMILIES, **REFUSED_NETLINK, **HIGH_BITS)
        q = lambda s: "'" + s.replace("'", "'\"'\"'") + "'"
        r = stack.api("POST", "/v1/sandboxes/%s/exec" % sid, timeout=60,
                      json={"command": "python3 -c %s %s" % (q(PROBE), q(json.dumps(cases)))})
        assert r.status_code == 200, r.text[:300]
        res = r.json()
        assert res["exitCode"] == 0, res
        yield json.loads(res["stdout"])
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_needed_families_open(probed, name):
    assert probed[name] == "ok", "%s inside a sandbox: %s" % (name, probed[name])


def test_glibc_netlink_users_work(probed):
    assert probed["if_nameindex"] == ["lo"], probed["if_nameindex"]
    assert probed["getaddrinfo"] and all(a in ("127.0.0.1", "::1") for a in probed["getaddrinfo"]), \
        probed["getaddrinfo"]


@pytest.mark.parametrize("name", sorted(REFUSED_FAMILIES) + sorted(HIGH_BITS))
def test_other_families_refused(probed, name):
    cases = dict(REFUSED_FAMILIES, **HIGH_BITS)
    assert probed[name] == "EAFNOSUPPORT", "%s inside a sandbox: %s (host has it: %s)" % (
        name, probed[name], host_has(*cases[name]))


@pytest.mark.parametrize("name", sorted(REFUSED_NETLINK))
def test_other_netlink_protocols_refused(probed, name):
    assert probed[name] == "EPROTONOSUPPORT", "%s inside a sandbox: %s (host has it: %s)" % (
        name, probed[name], host_has(*REFUSED_NETLINK[name]))
