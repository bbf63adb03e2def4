"""The route cache as clients see it (conf/nginx.conf: nginx keeps a
routing decision until the end of the wall-clock second it was made in,
a preview check for 1 s more; docs/API.md "Answers during transitions").
Shared by the integration and the multihost tests."""

import time


def routed(api, method, path, **kw):
    """api(method, path, **kw) for a data call, sent once more after its
    Retry-After when it answers 503 "… since this call was routed; retry":
    nginx keeps a routing decision until the end of the wall-clock second it
    was made in (conf/nginx.conf, the route cache), so a call right after
    its sandbox was put to sleep, restarted or made again may still go the
    old way (docs/API.md "Answers during transitions")."""
    r = api(method, path, **kw)
    if r.status_code == 503 and "since this call was routed" in r.text:
        time.sleep(float(r.headers.get("Retry-After") or 1))
        r = api(method, path, **kw)
    return r


def past_route_cache():
    """Sleep past the end of the current wall-clock second: every routing
    decision nginx cached until now has expired (conf/nginx.conf, the route
    cache), so the next data call is decided afresh."""
    time.sleep(1.0 - time.time() % 1.0 + 0.05)
