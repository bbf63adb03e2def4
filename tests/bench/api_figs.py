"""API tier figures of `make bench` (run.py calls fig_api):

- fcgi-hello: the ceiling of the API tier. A hello-world libfcgi responder
  (HELLO_C, compiled at bench time into a temp dir) preforked with as many
  workers as the stack's sbx-api pool, answering one fixed JSON body (the
  bytes of the get-record answer), behind the same nginx: conf/nginx.conf's
  baseline server passes /fcgi-hello to it with the keep-alive, params,
  headers and access log of the `sbx_api` locations.
- healthz, nodes, get-record: the API routes, each a ratio to fcgi-hello.

The figures take turns in 1-second wrk slices (hello, healthz, nodes,
get-record, hello, ...), so that every route and its ceiling see the same
load; each row's req/s are those of its slices, and its description adds
the median of the per-slice ratios to fcgi-hello, and the CPU time per
request of nginx's workers, the FastCGI workers (the responder's or
sbx-api's) and Redis (/proc/PID/stat over the slices): a cost that the
machine's other load disturbs less than req/s. The load average of each
run is printed.
"""

import os
import shutil
import statistics
import subprocess
import tempfile

import sandbox_figs

SLICE_S = 1   # seconds of one wrk slice; each run is DURATION / SLICE_S slices per figure

HELLO_C = r"""
#define _GNU_SOURCE
#include <fcgiapp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* fcgihello SOCKET WORKERS BODYFILE: WORKERS preforked libfcgi responders
 * on the unix socket SOCKET, each answering every request with the JSON of
 * BODYFILE in one FCGX_PutStr. Runs until killed; the workers die with it. */
int main(int argc, char **argv)
{
	static char answer[65536];
	char body[32768];
	FILE *f;
	size_t n;
	int sock, workers, len;

	if (argc != 4)
		return 2;
	workers = (int)strtol(argv[2], NULL, 10);
	f = fopen(argv[3], "re");
	if (!f)
		return 1;
	n = fread(body, 1, sizeof(body) - 1, f);
	fclose(f);
	len = snprintf(answer, sizeof(answer), "Status: 200 OK\r\nCache-Control: no-store\r\n"
		       "Content-Type: application/json\r\n\r\n%.*s", (int)n, body);
	if (len < 0 || (size_t)len >= sizeof(answer) || FCGX_Init() != 0)
		return 1;
	unlink(argv[1]);
	sock = FCGX_OpenSocket(argv[1], 1024);
	if (sock < 0)
		return 1;
	for (int i = 0; i < workers; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			FCGX_Request req;

			prctl(PR_SET_PDEATHSIG, SIGKILL);
			signal(SIGPIPE, SIG_IGN);
			if (FCGX_InitRequest(&req, sock, 0) != 0)
				_exit(1);
			while (FCGX_Accept_r(&req) >= 0) {
				FCGX_PutStr(answer, len, req.out);
				FCGX_Finish_r(&req);
			}
			_exit(0);
		}
	}
	puts("ready");
	fflush(stdout);
	while (wait(NULL) > 0)
		;
	return 0;
}
"""


class Hello:
    """The responder, compiled into a temp dir and started on the stack's
    run/fcgi-hello.sock (the socket conf/nginx.conf names)."""

    def __init__(self, st, body):
        self.dir = tempfile.mkdtemp(prefix="sbx-bench-fcgihello-")
        src = os.path.join(self.dir, "fcgihello.c")
        exe = os.path.join(self.dir, "fcgihello")
        with open(src, "w") as f:
            f.write(HELLO_C)
        subprocess.run(["cc", "-O2", "-o", exe, src, "-lfcgi"], check=True, capture_output=True)
        bodyfile = os.path.join(self.dir, "body.json")
        with open(bodyfile, "wb") as f:
            f.write(body)
        workers = st.conf_value("api", "workers") or "4"
        self.sock = os.path.join(st.dir, "run", "fcgi-hello.sock")
        self.proc = subprocess.Popen([exe, self.sock, workers, bodyfile],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if self.proc.stdout.readline().strip() != b"ready":
            self.close()
            raise RuntimeError("fcgihello did not start")

    def close(self):
        self.proc.kill()
        self.proc.wait()
        try:
            os.unlink(self.sock)
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _pidfile(st, name):
    with open(os.path.join(st.dir, "pids", name + ".pid")) as f:
        return int(f.read().split()[0])


def _cpu_us(pids):
    """CPU time (user + system) the processes have used so far, in µs."""
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])   # utime, stime
    return total * TICK_US


class Cost:
    """CPU µs per request of each process group, summed over the slices."""

    def __init__(self, groups):
        self.groups = groups        # {name: [pid]}
        self.us = dict.fromkeys(groups, 0.0)
        self.requests = 0.0

    def measure(self, fn):
        before = {g: _cpu_us(p) for g, p in self.groups.items()}
        rps = fn()
        for g, p in self.groups.items():
            self.us[g] += _cpu_us(p) - before[g]
        self.requests += rps * SLICE_S

    def text(self):
        if not self.requests:
            return ""
        return "CPU per request: " + ", ".join(
            "%s %.0f µs" % (g, self.us[g] / self.requests) for g in self.groups)


def fig_api(st, run):
    """wrk Results of run (run.py's module): fcgi-hello and the API routes
    as a ratio to it, measured in alternating runs."""
    auth = ("Authorization: Bearer " + st.key,)
    admin = ("Authorization: Bearer " + st.admin_key,)
    rec_url = st.url + "/v1/sandboxes/" + sandbox_figs.EXEC_SANDBOXES[0]
    body = st.http.get(rec_url, headers={"Authorization": "Bearer " + st.key},
                       timeout=10).content
    hello = Hello(st, body)
    try:
        ceiling = run.Result("fcgi-hello", "hello-world libfcgi responder (%s preforked "
                             "workers, one fixed %d-byte JSON answer) behind the same nginx, "
                             "the keep-alive of `sbx_api`: the API tier's ceiling" %
                             (st.conf_value("api", "workers") or "4", len(body)),
                             baseline="nginx-static")
        healthz = run.Result("healthz", "`GET /healthz`: nginx -> FastCGI worker -> one "
                             "Redis SET (no auth)", baseline="fcgi-hello")
        nodes = run.Result("nodes", "`GET /v1/nodes` (admin key): auth lookup + node "
                           "registry reads, %d nodes" % st.agents, baseline="fcgi-hello")
        record = run.Result("get-record", "`GET /v1/sandboxes/{id}` (tenant key, a running "
                            "sandbox): auth + one record read in Redis", baseline="fcgi-hello")
        record.target = 0.70
        figs = ((ceiling, st.static_url.rsplit("/", 1)[0] + "/fcgi-hello", ()),
                (healthz, st.url + "/healthz", ()), (nodes, st.url + "/v1/nodes", admin),
                (record, rec_url, auth))
        nginx = _children(_pidfile(st, "nginx"))
        redis = [_pidfile(st, "redis")]
        api = _children(_pidfile(st, "api"))
        costs = [Cost({"nginx": nginx, "responder": _children(hello.proc.pid)})]
        costs += [Cost({"nginx": nginx, "sbx-api": api, "redis": redis}) for _ in figs[1:]]
        ratios = {healthz.name: [], nodes.name: [], record.name: []}
        for i in range(run.RUNS):
            print("\n  run %d (load %.2f):" % (i + 1, os.getloadavg()[0]), end="", flush=True)
            # SLICE_S-second slices in turn: a load that comes and goes (the
            # machine is shared) falls on every figure alike.
            for _ in range(max(1, run.DURATION // SLICE_S)):
                for (res, url, headers), cost in zip(figs, costs):
                    cost.measure(lambda: run.peak(res, url, runs=1, headers=headers,
                                                  duration=SLICE_S).rps[-1])
                for res, _, _ in figs[1:]:
                    ratios[res.name].append(res.rps[-1] / ceiling.rps[-1])
            print(" " + ", ".join("%s/fcgi-hello %.3f" % (k, statistics.median(v))
                                  for k, v in ratios.items()), end="", flush=True)
        for res, _, _ in figs[1:]:
            res.what += ("; median of the per-slice ratios to fcgi-hello: %.3f" %
                         statistics.median(ratios[res.name]))
        for (res, _, _), cost in zip(figs, costs):
            res.what += "; " + cost.text()
            print("\n  %s: %s" % (res.name, cost.text()), end="", flush=True)
        for res, url, headers in figs:
            run.half_peak(res, url, headers=headers)
    finally:
        hello.close()
    return [ceiling, healthz, nodes, record]
