"""A destroy off the agent's loop (rt_destroy; docs/ARCHITECTURE.md "Builds
off the loop"): after its SIGKILL the loop goes on, and the container's
teardown (reap, network, cgroups, id range) runs once its init's pidfd says
it exited. What an answer promises is kept all the same:

- a DELETE is answered only once nothing of the container is left on the
  host, also when its processes ignore SIGTERM and fork children; a PUT of
  the same id right after it starts the sandbox again (201, or 503
  NODE_UNAVAILABLE with Retry-After while it is still dying, then 201);
- a restart (stop, then start of the same key) continues from the end of
  the stop: back to back, every one answers 200;
- many DELETEs at once all answer 204 with nothing left, and an exec on
  another sandbox is answered meanwhile;
- while a container cannot die (one of its processes is held in a frozen
  freezer cgroup the test made, so its init waits for it), its DELETE waits,
  the loop serves (an exec on another sandbox answers), and a start of its
  key is 503 NODE_UNAVAILABLE with Retry-After; once it is let go the
  DELETE answers with nothing left and the start succeeds; a restart
  (a new generation of the running sandbox) meanwhile waits for it instead
  of being refused, and starts once it is gone.
"""

import concurrent.futures
import os
import time
import uuid

from conftest import sandbox_procs
from test_builds import agent, call, cleanup, entry, headers, leftovers, put, record, until

import requests

TRAP = ("(trap '' TERM; for i in 1 2 3; do (trap '' TERM; while :; do sleep 1; done) & done; "
        "while :; do sleep 1; done) >/dev/null 2>&1 </dev/null &")


def exec_api(stack, sid, command):
    return stack.data("POST", "/v1/sandboxes/%s/exec" % sid, json={"command": command},
                      timeout=60)


def test_delete_then_put_of_the_same_id(stack):
    sid, _ = stack.create("da")
    key = "dev." + sid
    try:
        r = exec_api(stack, sid, TRAP)
        assert r.status_code == 200, r.text
        for _ in range(100):
            if len(sandbox_procs(key)) >= 5:
                break
            time.sleep(0.05)
        assert len(sandbox_procs(key)) >= 5, sandbox_procs(key)
        r = stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)
        # checked as soon as the DELETE is answered: nothing may be left
        left = leftovers(key)
        assert r.status_code == 204, r.text
        assert left == ([], [], False), "left behind after the DELETE: %r" % (left,)
        for _ in range(50):
            r = stack.api("PUT", "/v1/sandboxes/" + sid, json={}, timeout=30)
            if r.status_code != 503:
                break
            assert r.json()["error"]["code"] == "NODE_UNAVAILABLE", r.text
            assert r.headers.get("Retry-After"), dict(r.headers)
            time.sleep(0.2)
        assert r.status_code == 201, (r.status_code, r.text)
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_restart_back_to_back(stack):
    sid, _ = stack.create("dr")
    try:
        gens = []
        for i in range(20):
            r = stack.api("POST", "/v1/sandboxes/%s/restart" % sid, timeout=60)
            assert r.status_code == 200, (i, r.status_code, r.text)
            assert r.json()["state"] == "running", r.text
            gens.append(r.json()["generation"])
        assert gens == sorted(set(gens)), gens
        r = exec_api(stack, sid, "echo up")
        assert r.status_code == 200 and r.json()["stdout"] == "up\n", r.text
    finally:
        stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_many_deletes_at_once_leave_nothing(stack):
    sids = ["dm-%s" % uuid.uuid4().hex[:8] for _ in range(50)]
    other = "do-" + uuid.uuid4().hex[:8]
    try:
        for sid in sids + [other]:
            record(stack, sid)
        with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
            codes = list(pool.map(lambda sid: put(stack, sid)[0], sids + [other]))
        assert codes == [201] * len(codes), codes

        def delete(sid):
            r = call(stack, "DELETE", sid)
            return r.status_code, leftovers("dev." + sid)

        def exec_other():
            return requests.post(agent(stack) + "/v1/sandboxes/%s/exec" % other,
                                 json={"command": "echo served"}, headers=headers(stack),
                                 timeout=60)

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(sids) + 1) as pool:
            deletes = {sid: pool.submit(delete, sid) for sid in sids}
            ex = pool.submit(exec_other)
            results = {sid: f.result() for sid, f in deletes.items()}
            r = ex.result()
        assert r.status_code == 200 and r.json()["stdout"] == "served\n", r.text
        for sid, (code, left) in results.items():
            assert code == 204, (sid, code)
            assert left == ([], [], False), "%s left behind after its DELETE: %r" % (sid, left)
    finally:
        cleanup(stack, sids + [other])


class Undying:
    """Keep sid's container from dying: a process of it is moved into a
    frozen freezer cgroup of the test's own, so its init, once killed,
    waits for it. with: held; on exit let go and removed."""

    def __init__(self, stack, sid):
        self.dir = "/sys/fs/cgroup/freezer/sbx-test-hold-" + uuid.uuid4().hex[:8]
        r = requests.post(agent(stack) + "/v1/sandboxes/%s/exec" % sid,
                          json={"command": "sleep 1000 >/dev/null 2>&1 </dev/null &"},
                          headers=headers(stack), timeout=60)
        assert r.status_code == 200, r.text
        self.pid = until("the sleep runs", lambda: [
            p for p, comm, _ in sandbox_procs("dev." + sid) if comm == "sleep"])[0]

    def _file(self, name):
        return os.path.join(self.dir, name)

    def let_go(self):
        with open(self._file("freezer.state"), "w") as f:
            f.write("THAWED")

    def __enter__(self):
        os.makedirs(self.dir)
        with open(self._file("cgroup.procs"), "w") as f:
            f.write(str(self.pid))
        with open(self._file("freezer.state"), "w") as f:
            f.write("FROZEN")
        until("the sleep is frozen",
              lambda: open(self._file("freezer.state")).read().strip() == "FROZEN")
        return self

    def __exit__(self, *exc):
        self.let_go()
        until("the hold cgroup is empty", lambda: not open(self._file("cgroup.procs")).read().strip())
        os.rmdir(self.dir)


def test_a_dying_container_holds_its_key_not_the_loop(stack):
    sid, other = "dh-" + uuid.uuid4().hex[:8], "dk-" + uuid.uuid4().hex[:8]
    try:
        for s in (sid, other):
            record(stack, s)
            assert put(stack, s)[0] == 201
        with Undying(stack, sid) as held, \
                concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            deleted = pool.submit(lambda: (call(stack, "DELETE", sid).status_code,
                                           leftovers("dev." + sid)))
            until("the DELETE reached the agent", lambda: not entry(stack, sid))
            # init waits for the frozen sleep: the container is dying
            r = requests.post(agent(stack) + "/v1/sandboxes/%s/exec" % other,
                              json={"command": "echo served"}, headers=headers(stack),
                              timeout=30)
            assert r.status_code == 200 and r.json()["stdout"] == "served\n", r.text
            code, body = put(stack, sid)
            assert code == 503 and body["error"]["code"] == "NODE_UNAVAILABLE", (code, body)
            r = requests.put(agent(stack) + "/agent/v1/sandboxes/dev/" + sid,
                             json={"generation": 1, "epoch": 1}, headers=headers(stack),
                             timeout=30)
            assert r.status_code == 503 and r.headers.get("Retry-After") == "1", dict(r.headers)
            assert not deleted.done(), deleted.result()
            held.let_go()
            code, left = deleted.result()
        assert code == 204, code
        assert left == ([], [], False), "left behind after the DELETE: %r" % (left,)
        code, body = put(stack, sid)
        assert code == 201 and body["state"] == "running", (code, body)
    finally:
        cleanup(stack, [sid, other])


def test_a_restart_waits_for_the_container_it_replaces(stack):
    sid = "dw-" + uuid.uuid4().hex[:8]
    try:
        record(stack, sid)
        code, first = put(stack, sid)
        assert code == 201, first
        with Undying(stack, sid) as held, \
                concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            # a new generation of a running sandbox: stop, then start again
            again = pool.submit(lambda: requests.put(
                agent(stack) + "/agent/v1/sandboxes/dev/" + sid,
                json={"generation": 2, "epoch": 1}, headers=headers(stack), timeout=60))
            until("the old container is stopped",
                  lambda: (entry(stack, sid) or {}).get("generation") == 2)
            assert not again.done(), again.result().text
            held.let_go()
            r = again.result()
        assert r.status_code == 201 and r.json()["state"] == "running", r.text
        assert r.json()["startedAt"] != first["startedAt"], (first, r.json())
    finally:
        cleanup(stack, [sid])
