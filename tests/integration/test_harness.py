"""The harness itself: what it counts as a sanitizer report in a stack's
logs (conftest.sanitizer_findings). Needs no stack."""

import os
import shutil
import subprocess

import pytest

from conftest import sanitizer_findings

LEAK = r"""
#include <stdlib.h>
#include <string.h>
void *keep;
int main(void) { keep = malloc(64); memset(keep, 1, 64); keep = NULL; return 0; }
"""


def logs_with(tmp_path, name, text):
    d = tmp_path / "logs"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return str(tmp_path)


@pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler")
def test_a_real_leak_report_fails_the_session(tmp_path):
    """The report of a real leaking binary, as a sanitized agent writes it
    into its log at exit, is an error, not a warning."""
    src, exe = tmp_path / "leak.c", tmp_path / "leak"
    src.write_text(LEAK)
    subprocess.run(["cc", "-fsanitize=address", "-g", "-o", str(exe), str(src)], check=True,
                   capture_output=True, timeout=60)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
    assert r.returncode != 0 and "LeakSanitizer" in r.stderr, r.stderr
    errors, _ = sanitizer_findings(logs_with(tmp_path, "agent-1.log", r.stderr))
    assert any("ERROR: LeakSanitizer: detected memory leaks" in e for e in errors), errors


@pytest.mark.parametrize("line", [
    "==12==ERROR: AddressSanitizer: heap-use-after-free on address 0x6020",
    "fcgi/http.c:10:5: runtime error: signed integer overflow",
    "==12==ERROR: LeakSanitizer: detected memory leaks",
    "==12==LeakSanitizer has encountered a fatal error.",
])
def test_sanitizer_reports_are_errors(tmp_path, line):
    errors, _ = sanitizer_findings(logs_with(tmp_path, "api.log", "info ok\n%s\nmore\n" % line))
    assert errors == ["api.log: " + line], errors
