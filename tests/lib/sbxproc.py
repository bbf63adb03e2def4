"""What the suites, the benchmarks and the soak read of live processes in
/proc, and the one polling loop they wait with. Imported by
tests/integration/conftest.py, tests/multihost, tests/bench and tests/soak
(each puts tests/lib on sys.path).

  rss_kib(pid)        VmRSS in KiB (0 when the process is gone)
  fd_count(pid)       open descriptors (0 when gone)
  alive(pid)          exists and is not a zombie
  children(pid)       live direct children
  comm(pid)           its command name ("" when gone)
  api_workers(pid)    live children of an sbx-api master but its short-lived
                      index reconciler (comm sbx-reconcile)
  wait_until(what, cond, timeout, interval)   poll cond() until truthy
  TIME_SCALE, scaled(seconds)                 timing bounds of pass/fail
                                              tests, wider under sanitizers
"""

import os
import time


def _stat(pid):
    """(state, ppid) of pid, or None when it is gone."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return rest[0], int(rest[1])


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


def alive(pid):
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(d)
            if st and st[1] == pid and st[0] != "Z":
                out.append(int(d))
    return out


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def api_workers(pid):
    return [c for c in children(pid) if comm(c) not in ("", "sbx-reconcile")]


def wait_until(what, cond, timeout=10.0, interval=0.1):
    """Poll cond() until it returns something truthy and return that, or
    raise AssertionError naming what after timeout seconds (scaled)."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (scaled(timeout), what))
        time.sleep(interval)


def _time_scale():
    v = os.environ.get("SBX_TIME_SCALE")
    if v:
        return float(v)
    # Sanitized binaries (SBX_BUILD=build/san) run several times slower.
    return 4.0 if "san" in os.path.basename(os.environ.get("SBX_BUILD", "build")) else 1.0


TIME_SCALE = _time_scale()


def scaled(seconds):
    """A pass/fail bound on time: seconds, times TIME_SCALE. These bounds
    catch hangs and buffering, not speed (speed is `make bench`'s)."""
    return seconds * TIME_SCALE
