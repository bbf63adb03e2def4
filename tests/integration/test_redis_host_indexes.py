"""The two host indexes, `sbx:preview:<sha256>` and `sbx:tunnel:<id>`,
carry no sandbox hash tag — nginx's preview check knows only the host,
never the tenant, so the key cannot name the sandbox's slot — and that is
Cluster-safe only while no script and no MULTI touches one of them
together with another key (issue 23 item 7; docs/REDIS.md says so). This
watches Redis (MONITOR) through a preview and a builtin tunnel's life and
checks exactly that.
"""

import re
import subprocess
import time
import uuid

ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
CLIENT = re.compile(r'^\S+ \[\d+ ([^\]]+)\] ')
INDEX = ("sbx:preview:", "sbx:tunnel:")


def commands(lines):
    """(client, [args]) of each MONITOR line."""
    for line in lines:
        m = CLIENT.match(line)
        if m:
            yield m.group(1), ARG.findall(line[m.end():])


def test_host_indexes_are_single_key_operations(stack, api):
    sid = "hidx-" + uuid.uuid4().hex[:8]
    mon = subprocess.Popen(["redis-cli", "-p", str(stack.redis_port), "MONITOR"],
                           stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.2)   # MONITOR is on before the first command
        assert api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30).status_code == 201
        r = api("POST", "/v1/sandboxes/%s/ports/8000" % sid, timeout=30)
        assert r.status_code == 200, r.text
        r = api("POST", "/v1/sandboxes/%s/tunnels/8000" % sid, json={"provider": "builtin"},
                timeout=30)
        assert r.status_code == 200, r.text
        assert api("DELETE", "/v1/sandboxes/%s/tunnels/8000" % sid, timeout=30).status_code in (200, 204)
        assert api("DELETE", "/v1/sandboxes/%s/ports/8000" % sid, timeout=30).status_code in (200, 204)
        assert api("DELETE", "/v1/sandboxes/" + sid, timeout=30).status_code in (200, 204)
        time.sleep(0.3)
    finally:
        mon.terminate()
        out, _ = mon.communicate(timeout=10)
    seen, multi = set(), {}
    for client, args in commands(out.splitlines()):
        if not args:
            continue
        name = args[0].upper()
        if name in ("EVAL", "EVALSHA"):
            keys = args[3:3 + int(args[2])]
        elif name in ("MULTI", "EXEC", "DISCARD"):
            if name == "MULTI":
                multi[client] = []
            else:
                keys = multi.pop(client, [])
                if any(k.startswith(INDEX) for k in keys):
                    assert len(set(keys)) == 1, "a MULTI mixes a host index with %r" % keys
            continue
        else:
            keys = [a for a in args[1:] if a.startswith("sbx:")]
        if client in multi:
            multi[client] += keys
        hit = [k for k in keys if k.startswith(INDEX)]
        if hit:
            seen.update(k.split(":")[1] for k in hit)
            assert len(keys) == 1, "%s touches a host index with other keys: %r" % (name, args)
            assert "{" not in hit[0], hit
    assert seen == {"preview", "tunnel"}, "both indexes must have been used: %r" % seen
