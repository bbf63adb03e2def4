"""Shared pieces of the benchmarks: latency samples and their statistics,
the figure records the report prints, and the small C spawn harness that
measures the process baselines.

Latency figures are N sequential repetitions (not wrk): the report shows the
median, the p99 (nearest rank), and the spread (min..max) of the samples.
"""

import os
import statistics
import subprocess
import tempfile
import time


def pct(samples, p):
    """Nearest-rank percentile p (0..100) of samples; 0.0 for none."""
    if not samples:
        return 0.0
    s = sorted(samples)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


class Lat:
    """A latency figure: samples in ms, a baseline (another Lat's name) and a
    target p50 in ms (None: no target)."""

    def __init__(self, name, what, baseline=None, target_ms=None, samples=None):
        self.name = name
        self.what = what
        self.baseline = baseline
        self.target_ms = target_ms
        self.samples = list(samples or [])
        self.load = os.getloadavg()[0]
        self.errors = 0
        self.note = ""

    @property
    def p50(self):
        return statistics.median(self.samples) if self.samples else 0.0

    @property
    def p99(self):
        return pct(self.samples, 99)


class Value:
    """A single-number figure (memory, counts, wall times): value with unit,
    a target (number, 'le' or 'ge'), and free text for the comparison."""

    def __init__(self, name, what, value, unit, target=None, sense="le", compare=""):
        self.name = name
        self.what = what
        self.value = value
        self.unit = unit
        self.target = target
        self.sense = sense          # "le": lower is better, "ge": higher is better
        self.compare = compare      # e.g. "baseline X: 1.2 ms"
        self.load = os.getloadavg()[0]

    def target_ratio(self):
        """value/target ("le") or target/value ("ge"): > 1 means short of it."""
        if self.target is None or not self.value and self.sense == "ge":
            return None
        if self.sense == "le":
            return self.value / self.target if self.target else None
        return self.target / self.value if self.value else None


def timed(fn, n, warmup=0):
    """Call fn() warmup times untimed, then n times; the n durations in ms."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def paced(fn, n, pause):
    """timed(fn, n), with pause seconds of quiet before each call."""
    out = []
    for _ in range(n):
        time.sleep(pause)
        out.extend(timed(fn, 1))
    return out


# ---- the spawn harness ------------------------------------------------------------

HARNESS_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* spawnbench N PROG ARGS...: fork + execv PROG N times in a row, waiting for
 * each; prints the duration of each (fork to reaped) in microseconds. */
int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	long n = strtol(argv[1], NULL, 10);
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (long i = 0; i < n; i++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		pid_t pid = fork();
		if (pid == 0) {
			dup2(devnull, 1);
			dup2(devnull, 2);
			execv(argv[2], argv + 2);
			_exit(127);
		}
		int st;
		if (pid < 0 || waitpid(pid, &st, 0) < 0)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			return 3;
		printf("%.1f\n", (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3);
	}
	return 0;
}
"""


class Harness:
    """The C harness, compiled at bench time into a temp dir (never committed)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-bench-harness-")
        src = os.path.join(self.dir, "spawnbench.c")
        self.bin = os.path.join(self.dir, "spawnbench")
        with open(src, "w") as f:
            f.write(HARNESS_C)
        subprocess.run(["cc", "-O2", "-o", self.bin, src], check=True, capture_output=True)

    def run(self, n, argv):
        """n fork+exec runs of argv (argv[0] an absolute path); ms each.
        Raises CalledProcessError when the command fails."""
        out = subprocess.run([self.bin, str(n)] + list(argv), check=True, capture_output=True,
                             text=True, timeout=300).stdout
        return [float(x) / 1000.0 for x in out.split()]

    def close(self):
        subprocess.run(["rm", "-rf", self.dir])
