"""Code contexts: stateful Python and JavaScript/TypeScript interpreters with
rich results, through nginx (API.md "Code contexts")."""

import base64
import json
import struct
import threading
import time
import uuid

import pytest

from conftest import assert_error, routed
from sbxsse import sse_pairs

PNG_1PX = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGA"
                           "WjR9awAAAABJRU5ErkJggg==")


@pytest.fixture(scope="module")
def box(stack):
    sid = stack.create("itp")[0]
    yield sid
    stack.api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def new_ctx(api, box, language="python", **extra):
    r = api("POST", "/v1/sandboxes/%s/contexts" % box, json=dict(language=language, **extra),
            timeout=30)
    assert r.status_code == 201, r.text
    ctx = r.json()
    assert ctx["language"] == language and ctx["cwd"] == "/workspace", ctx
    return ctx["id"]


@pytest.fixture(scope="module")
def py(stack, box):
    return new_ctx(stack.api, box)


def run(api, box, ctx, code, status=200, **extra):
    r = api("POST", "/v1/sandboxes/%s/contexts/%s/run" % (box, ctx), json=dict(code=code, **extra),
            timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def main_text(res):
    mains = [r for r in res["results"] if r["isMainResult"]]
    assert len(mains) == 1, res
    return mains[0]["data"]["text/plain"]


def test_state_and_last_expression(api, box, py):
    res = run(api, box, py, "import os\nx = 40\ndef f(a):\n    return a + 2\nos.chdir('/tmp')")
    assert res["error"] is None and res["results"] == [], res
    res = run(api, box, py, "print('cwd', os.getcwd())\nf(x)")
    assert res["stdout"] == "cwd /tmp\n", res
    assert main_text(res) == "42"
    assert res["executionCount"] == 2 and res["restarted"] is False, res


def test_display_several_objects_and_dataframe(api, box, py):
    res = run(api, box, py, "from IPython.display import display, HTML, Markdown\n"
                            "display(1, 'two')\ndisplay(HTML('<b>x</b>'), Markdown('# t'))\n"
                            "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    shown = [r["data"] for r in res["results"] if not r["isMainResult"]]
    assert [d["text/plain"] for d in shown[:2]] == ["1", "'two'"], res
    assert shown[2]["text/html"] == "<b>x</b>" and shown[3]["text/markdown"] == "# t", shown
    main = [r["data"] for r in res["results"] if r["isMainResult"]][0]
    assert "<table" in main["text/html"] and "</td>" in main["text/html"], main
    assert "a" in main["text/plain"] and "y" in main["text/plain"], main
    res = run(api, box, py, "from IPython.display import Image, SVG, JSON, Latex, Javascript\n"
                            "display(Image(%r), SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"/>'),"
                            " JSON({'k': [1]}), Latex('$x^2$'), Javascript('1+1'))" % PNG_1PX)
    got = [r["data"] for r in res["results"]]
    assert base64.b64decode(got[0]["image/png"], validate=True) == PNG_1PX, got[0]
    assert got[1]["image/svg+xml"].startswith("<svg") and got[2]["application/json"] == {"k": [1]}
    assert got[3]["text/latex"] == "$x^2$" and got[4]["application/javascript"] == "1+1", got


def test_matplotlib_figure_is_a_png_of_its_size(api, box, py):
    res = run(api, box, py, "import matplotlib.pyplot as plt\n"
                            "fig = plt.figure(figsize=(4, 3), dpi=50)\nplt.plot([1, 3, 2])\n"
                            "plt.show()\nplt.figure(figsize=(2, 2), dpi=50); plt.bar([1], [2]); None")
    pngs = [base64.b64decode(r["data"]["image/png"]) for r in res["results"]
            if "image/png" in r["data"]]
    assert len(pngs) == 2, res
    sizes = [struct.unpack(">II", p[16:24]) for p in pngs if p[:8] == b"\x89PNG\r\n\x1a\n"]
    assert sizes == [(200, 150), (100, 100)], sizes


def test_exception_and_syntax_error(api, box, py):
    res = run(api, box, py, "y = 1\ndef g():\n    raise ValueError('bad value')\ng()")
    err = res["error"]
    assert err["name"] == "ValueError" and err["value"] == "bad value", res
    tb = "\n".join(err["traceback"])
    assert "line 4" in tb and "raise ValueError" in tb, tb
    res = run(api, box, py, "def broken(:\n  pass")
    assert res["error"]["name"] == "SyntaxError", res
    assert main_text(run(api, box, py, "y + 1")) == "2"


def test_stream_keeps_stdout_stderr_order(api, box, py):
    code = ("import sys, time\nprint('a')\nprint('b', file=sys.stderr)\ntime.sleep(0.05)\n"
            "print('c')\n7")
    with api("POST", "/v1/sandboxes/%s/contexts/%s/run" % (box, py), json={"code": code},
             headers={"Accept": "text/event-stream"}, stream=True, timeout=60) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        evs = sse_pairs(r)
    out = [(n, d["text"]) for n, d in evs if n in ("stdout", "stderr") and d["text"].strip()]
    assert out == [("stdout", "a"), ("stderr", "b"), ("stdout", "c")], evs
    assert [n for n, _ in evs][-2:] == ["result", "end"], evs
    assert evs[-2][1]["data"]["text/plain"] == "7" and evs[-2][1]["isMainResult"] is True
    assert evs[-1][1]["type"] == "end" and evs[-1][1]["timedOut"] is False


def test_output_is_bounded_and_stdin_is_empty(api, box, py):
    res = run(api, box, py, "import sys, subprocess\nprint('x' * (3 << 20))\n"
                            "for i in range(2000):\n    sys.stderr.write('y' * 1000)\n"
                            "subprocess.run(['cat'])\ninput()")
    assert res["truncated"] is True, {k: v for k, v in res.items() if k not in ("stdout", "stderr")}
    assert len(res["stdout"]) == 1 << 20 and set(res["stdout"]) == {"x"}
    assert len(res["stderr"]) == 1 << 20 and set(res["stderr"]) == {"y"}
    assert res["error"]["name"] == "EOFError", res["error"]
    # One event over the 16 MiB line bound is dropped, the rest goes on.
    res = run(api, box, py, "sys.stdout.write('z' * (17 << 20))\nprint('end')")
    assert res["truncated"] is True and res["stdout"] == "end\n", res["stdout"][:100]
    assert main_text(run(api, box, py, "'after'")) == "'after'"


def test_a_run_keeps_its_sandbox_awake(api):
    sid = "itw-" + uuid.uuid4().hex[:8]
    r = api("PUT", "/v1/sandboxes/" + sid, json={"sleepAfter": "1s"}, timeout=30)
    assert r.status_code == 201, r.text
    try:
        gen = r.json()["generation"]
        ctx = new_ctx(api, sid)
        res = run(api, sid, ctx, "import time\ntime.sleep(3)\n'slept'")
        assert main_text(res) == "'slept'", res
        assert api("GET", "/v1/sandboxes/" + sid).json()["generation"] == gen
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


def test_stream_sends_output_while_the_code_runs(api, box, py):
    """The code waits for a file the test writes only once it has read the
    first event: without incremental delivery the run would never end."""
    code = ("import os, time\nprint('waiting', flush=True)\n"
            "while not os.path.exists('/workspace/go'):\n    time.sleep(0.01)\n'went'")
    with api("POST", "/v1/sandboxes/%s/contexts/%s/run" % (box, py), json={"code": code},
             headers={"Accept": "text/event-stream"}, stream=True, timeout=30) as r:
        lines = r.iter_lines(decode_unicode=True)
        for line in lines:
            if line.startswith("data: ") and "waiting" in line:
                break
        assert api("PUT", "/v1/sandboxes/%s/files/go" % box, data=b"1").status_code == 201
        rest = [json.loads(x[6:]) for x in lines if x.startswith("data: ")]
    assert rest[-2]["data"]["text/plain"] == "'went'" and rest[-1]["type"] == "end", rest


def test_timeout_interrupts_and_state_survives(api, box, py):
    run(api, box, py, "kept = 'yes'")
    res = run(api, box, py, "while True:\n    pass", timeoutMs=500)
    assert res["timedOut"] is True and res["error"]["name"] == "KeyboardInterrupt", res
    res = run(api, box, py, "kept")
    assert main_text(res) == "'yes'" and res["restarted"] is False, res


def test_client_gone_interrupts_the_run(api, box, py):
    run(api, box, py, "left = 'still here'")
    with api("POST", "/v1/sandboxes/%s/contexts/%s/run" % (box, py),
             json={"code": "print('go', flush=True)\nwhile True:\n    pass"},
             headers={"Accept": "text/event-stream"}, stream=True, timeout=60) as r:
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("data: ") and "go" in line:
                break
    res = run(api, box, py, "left")
    assert main_text(res) == "'still here'" and res["restarted"] is False, res


def test_contexts_die_with_the_container(api):
    sid = "itq-" + uuid.uuid4().hex[:8]
    assert api("PUT", "/v1/sandboxes/" + sid, timeout=30).status_code == 201
    try:
        ctx = new_ctx(api, sid)
        assert api("DELETE", "/v1/sandboxes/" + sid, timeout=30).status_code == 204
        assert api("PUT", "/v1/sandboxes/" + sid, timeout=30).status_code == 201
        # (made again: the first data call may meet the old cached route)
        assert routed(api, "GET", "/v1/sandboxes/%s/contexts" % sid).json()["contexts"] == []
        assert_error(api("POST", "/v1/sandboxes/%s/contexts/%s/run" % (sid, ctx),
                         json={"code": "1"}), 404, "CONTEXT_NOT_FOUND")
    finally:
        api("DELETE", "/v1/sandboxes/" + sid, timeout=30)


FLOODS = {
    "python": ("lagged = 1", "for i in range(300):\n    print('q' * 200000)"),
    "javascript": ("globalThis.lagged = 1",
                   "for (let i = 0; i < 300; i++) console.log('q'.repeat(200000))"),
}


@pytest.mark.parametrize("language", sorted(FLOODS))
def test_interrupt_of_a_run_whose_client_lags(api, box, language):
    """A timeout while the client holds back a flood of output: the
    interrupt waits for the output and the stream stays well formed (the
    KeyboardInterrupt comes, the context survives)."""
    setup, flood = FLOODS[language]
    ctx = new_ctx(api, box, language)
    run(api, box, ctx, setup)
    with api("POST", "/v1/sandboxes/%s/contexts/%s/run" % (box, ctx),
             json={"code": flood, "timeoutMs": 300},
             headers={"Accept": "text/event-stream"}, stream=True, timeout=60) as r:
        time.sleep(2.5)  # not reading: the agent stops reading the interpreter
        evs = sse_pairs(r)
    errors = [d for n, d in evs if n == "error"]
    assert [e["name"] for e in errors] == ["KeyboardInterrupt"], errors
    assert evs[-1][0] == "end" and evs[-1][1]["timedOut"] is True, evs[-1]
    res = run(api, box, ctx, "lagged")
    assert main_text(res) == "1" and res["restarted"] is False, res
    assert api("DELETE", "/v1/sandboxes/%s/contexts/%s" % (box, ctx)).status_code == 204


def test_interpreter_death_then_fresh_interpreter(api, box):
    ctx = new_ctx(api, box)
    run(api, box, ctx, "z = 5")
    res = run(api, box, ctx, "import os\nos._exit(1)")
    assert res["error"]["name"] == "InterpreterDied", res
    res = run(api, box, ctx, "'z' in globals()")
    assert res["restarted"] is True and main_text(res) == "False", res
    assert run(api, box, ctx, "1")["restarted"] is False
    # Code that swallows the interrupt: the driver is killed after its grace.
    res = run(api, box, ctx, "import time\nwhile True:\n    try:\n        time.sleep(1)\n"
                             "    except KeyboardInterrupt:\n        pass", timeoutMs=300)
    assert res["timedOut"] is True and res["error"]["name"] == "InterpreterDied", res
    assert run(api, box, ctx, "2")["restarted"] is True
    assert api("DELETE", "/v1/sandboxes/%s/contexts/%s" % (box, ctx)).status_code == 204
    assert_error(api("GET", "/v1/sandboxes/%s/contexts/%s" % (box, ctx)), 404,
                 "CONTEXT_NOT_FOUND")


def test_contexts_are_isolated_and_listed(api, box, py):
    other = new_ctx(api, box)
    run(api, box, py, "secret = 1")
    res = run(api, box, other, "secret")
    assert res["error"]["name"] == "NameError", res
    ids = {c["id"] for c in api("GET", "/v1/sandboxes/%s/contexts" % box).json()["contexts"]}
    assert {py, other} <= ids
    got = api("GET", "/v1/sandboxes/%s/contexts/%s" % (box, py)).json()
    assert got["id"] == py and got["language"] == "python" and got["running"] is True, got
    assert api("DELETE", "/v1/sandboxes/%s/contexts/%s" % (box, other)).status_code == 204


def test_concurrent_runs_are_serialized(api, box, py):
    run(api, box, py, "import time\nlog = []")
    results = [None] * 20

    def one(i):
        results[i] = run(api, box, py, "log.append(('in', %d)); time.sleep(0.01); "
                                       "log.append(('out', %d))" % (i, i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r["error"] is None for r in results), results
    log = json.loads(main_text(run(api, box, py, "import json\njson.dumps(log)")).strip("'"))
    assert len(log) == 40
    for k in range(0, 40, 2):
        assert log[k][0] == "in" and log[k + 1] == ["out", log[k][1]], log


def test_python_without_ipython_gives_plain_results(api, box):
    """An image without IPython (hidden here by a package that refuses to
    import): values, display(), _repr_html_ and tracebacks still work."""
    r = api("PUT", "/v1/sandboxes/%s/files/noipy/IPython/__init__.py" % box,
            data=b"raise ImportError('hidden for the test')\n")
    assert r.status_code == 201, r.text
    ctx = new_ctx(api, box, env={"PYTHONPATH": "/workspace/noipy"})
    time.sleep(1.5)  # the driver's start-up note is written before the first run
    res = run(api, box, ctx, "import pandas as pd\ndisplay('shown')\npd.DataFrame({'a': [1]})")
    assert [x["data"]["text/plain"] for x in res["results"]][0] == "'shown'", res
    assert "<table" in res["results"][1]["data"]["text/html"], res
    # The driver's start-up note came before the run: it is the run's stderr.
    assert "plain Python results only" in res["stderr"], res["stderr"]
    res = run(api, box, ctx, "k = 2\ndef g():\n    raise KeyError('nope')\ng()")
    assert res["error"]["name"] == "KeyError" and "line 4" in "".join(res["error"]["traceback"])
    assert main_text(run(api, box, ctx, "k * 21")) == "42"
    assert api("DELETE", "/v1/sandboxes/%s/contexts/%s" % (box, ctx)).status_code == 204


def test_default_context_run(api, box):
    res = api("POST", "/v1/sandboxes/%s/run" % box, json={"code": "q = 3\nq * 2"}, timeout=60)
    assert res.status_code == 200 and main_text(res.json()) == "6", res.text
    res = api("POST", "/v1/sandboxes/%s/run" % box, json={"code": "q", "language": "python"},
              timeout=60)
    assert main_text(res.json()) == "3"
    got = api("GET", "/v1/sandboxes/%s/contexts/default-python" % box)
    assert got.status_code == 200 and got.json()["executionCount"] == 2, got.text


def test_javascript_await_results_and_errors(api, box):
    js = new_ctx(api, box, "javascript")
    res = run(api, box, js, "const v = await Promise.resolve(20)\nconsole.log('got', v)\nv + 1")
    assert res["stdout"] == "got 20\n" and main_text(res) == "21", res
    assert main_text(run(api, box, js, "v * 2")) == "40"
    res = run(api, box, js, "const pair = await Promise.resolve([1,\n2])")
    assert res["error"] is None and res["results"] == [], res
    assert main_text(run(api, box, js, "pair")) == "[ 1, 2 ]"
    res = run(api, box, js, "function bad() { throw new TypeError('nope') }\nbad()")
    assert res["error"]["name"] == "TypeError" and res["error"]["value"] == "nope", res
    assert any("bad" in line for line in res["error"]["traceback"]), res
    res = run(api, box, js, "while (true) {}", timeoutMs=500)
    assert res["timedOut"] is True and res["error"] is not None, res
    assert main_text(run(api, box, js, "v")) == "20"


def test_typescript_annotations(api, box):
    ts = new_ctx(api, box, "typescript")
    res = run(api, box, ts, "interface P { a: number; b?: string }\n"
                            "type N = number | string;\n"
                            "function add<T>(a: number, b: number): number { return a + b }\n"
                            "const p: P = { a: 1 }\n"
                            "const n = (p.a as number) + add(2, 3)\n"
                            "const f = (s: string): { len: number } => ({ len: s.length });\n"
                            "class Box<T> implements P { a: number = 2; readonly b?: string;\n"
                            "  twice(k: number): number { return this.a * k } }\n"
                            "class Pt { constructor(private x: number, public readonly y = 5) {} "
                            "sum(): number { return this.x + this.y } }\n"
                            "[n, f('abc').len, n > 3 ? 'big' : 'small', new Box<number>().twice(4),"
                            " new Pt(1).sum()]")
    assert res["error"] is None and main_text(res) == "[ 6, 3, 'big', 8, 6 ]", res


def test_bad_input(api, box, py):
    base = "/v1/sandboxes/%s/contexts" % box
    assert_error(api("POST", base, json={"language": "cobol"}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base, json={"language": 3}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base, json={"id": "bad id"}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base, json={"cwd": ""}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base, json={"nope": 1}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base + "/%s/run" % py, json={}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base + "/%s/run" % py, json={"code": ""}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base + "/%s/run" % py, json={"code": "1", "timeoutMs": 0}), 400,
                 "VALIDATION_FAILED")
    assert_error(api("POST", base + "/%s/run" % py, json={"code": "x" * (10 << 20)}, timeout=60),
                 413, "PAYLOAD_TOO_LARGE")
    assert_error(api("POST", base + "/b%20d/run", json={"code": "1"}), 400, "VALIDATION_FAILED")
    assert_error(api("POST", base + "/nosuch/run", json={"code": "1"}), 404, "CONTEXT_NOT_FOUND")
    assert_error(api("DELETE", base + "/nosuch"), 404, "CONTEXT_NOT_FOUND")
    assert_error(api("POST", "/v1/sandboxes/%s/run" % box, json={"code": "1", "language": "x"}),
                 400, "VALIDATION_FAILED")


def test_another_tenant_gets_404(stack, api, box, py):
    key = stack.new_key("tenant-i-" + uuid.uuid4().hex[:6])
    base = "/v1/sandboxes/%s" % box
    for method, path, body in (("GET", "/contexts", None), ("GET", "/contexts/" + py, None),
                               ("POST", "/contexts/%s/run" % py, {"code": "1"}),
                               ("POST", "/run", {"code": "1"}),
                               ("DELETE", "/contexts/" + py, None)):
        r = stack.api(method, base + path, key=key, json=body)
        assert_error(r, 404, "SANDBOX_NOT_FOUND")
    assert api("GET", base + "/contexts/" + py).status_code == 200
