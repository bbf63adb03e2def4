# driver.py — the Python side of a code context (agent_interp.c).
#
# One long-lived process per context, run as `python3 -c <this file>`.
# Requests come on stdin, one JSON object a line: {"code": "..."}.
# Answers go to the original stdout, one JSON object a line:
#   {"type": "ready"}                                       once, at start
#   {"type": "stdout"|"stderr", "text": "..."}
#   {"type": "result", "data": {mime: value}, "isMainResult": bool}
#   {"type": "error", "name": ..., "value": ..., "traceback": [...]}
#   {"type": "end", "executionCount": n}                    the run is over
# The code runs in IPython's InteractiveShell (display semantics, rich
# formatters), or, where IPython is missing, in _PlainShell; matplotlib draws with Agg, and every figure left open at the
# end of a run (or shown with plt.show()) comes back as a PNG. SIGINT
# interrupts a run (KeyboardInterrupt) and leaves the context as it was.
import ast
import base64
import importlib.util
import io
import json
import linecache
import os
import signal
import sys
import threading
import traceback

# The protocol's own fds (os.dup: not inherited by child processes); the
# code and its children get /dev/null as stdin and pipes as stdout/stderr.
_proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
_requests = os.fdopen(os.dup(0), "r", encoding="utf-8", errors="replace")
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
sys.stdin = sys.__stdin__ = open(os.devnull, "r")
_lock = threading.Lock()


def _emit(obj):
    """One event line. The main thread writes it with SIGINT blocked, so an
    interrupt never cuts a line in two (it is raised once the line is out)."""
    line = json.dumps(obj, ensure_ascii=False, default=str) + "\n"
    main = threading.current_thread() is threading.main_thread()
    with _lock:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if main else None
        try:
            _proto.write(line)
            _proto.flush()
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _fd_reader(fd, name):
    while True:
        try:
            data = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not data:
            return
        _emit({"type": name, "text": data.decode("utf-8", "replace")})


# What child processes write to fds 1 and 2 comes back as output too.
for _fd, _name in ((1, "stdout"), (2, "stderr")):
    _r, _w = os.pipe()
    os.dup2(_w, _fd)
    os.close(_w)
    threading.Thread(target=_fd_reader, args=(_r, _name), daemon=True).start()


class _Stream(io.TextIOBase):
    def __init__(self, name, fd):
        self._name = name
        self._fd = fd

    def writable(self):
        return True

    def write(self, s):
        if s:
            _emit({"type": self._name, "text": str(s)})
        return len(s)

    def fileno(self):
        return self._fd

    def isatty(self):
        return False

    @property
    def encoding(self):
        return "utf-8"


sys.stdout = sys.__stdout__ = _Stream("stdout", 1)
sys.stderr = sys.__stderr__ = _Stream("stderr", 2)

_RC = "/usr/share/matplotlib/mpl-data/matplotlibrc"
os.environ.setdefault("MPLBACKEND", "module://sbx_mpl_backend")
os.environ.setdefault("IPYTHONDIR", "/tmp/.sbx-ipython")
# Debian's matplotlib reads its defaults from /etc/matplotlibrc, which a
# sandbox built on the host's /usr does not have; the same file is in /usr.
if not os.path.exists("/etc/matplotlibrc") and os.path.exists(_RC):
    os.environ.setdefault("MATPLOTLIBRC", _RC)


def _figures_out():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        try:
            fig.savefig(buf, format="png")
        except Exception as exc:  # a figure that cannot draw is reported, not fatal
            _emit({"type": "stderr", "text": "cannot render figure %s: %s\n" % (num, exc)})
            continue
        w, h = fig.canvas.get_width_height()
        _emit({"type": "result", "isMainResult": False,
               "data": {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
                        "text/plain": "<Figure size %dx%d with %d Axes>" % (w, h, len(fig.axes))}})
    plt.close("all")


# matplotlib's backend: Agg, with show() handing the open figures back. It
# is a module only pyplot imports (when the code imports pyplot).
class _BackendLoader:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "sbx_mpl_backend":
            return None
        return importlib.util.spec_from_loader(name, _BackendLoader)

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        from matplotlib.backends import backend_agg
        module.FigureCanvas = backend_agg.FigureCanvasAgg
        module.FigureManager = backend_agg.FigureManager
        module.show = lambda *args, **kwargs: _figures_out()


sys.meta_path.append(_BackendLoader)

def _bundle(data):
    out = {}
    for mime, value in (data or {}).items():
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        elif mime in ("image/png", "image/jpeg") and isinstance(value, str):
            value = "".join(value.split())  # IPython's base64 comes with newlines
        out[mime] = value
    return out


def _ipython_shell():
    """The run interface over IPython's InteractiveShell (ImportError
    without IPython)."""
    from traitlets.config import Config
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False,
                    **kw):
            _emit({"type": "result", "isMainResult": False, "data": _bundle(data)})

        def clear_output(self, wait=False):
            pass

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            _emit({"type": "result", "isMainResult": True, "data": _bundle(format_dict)})

        def finish_displayhook(self):
            pass

    class Shell(InteractiveShell):
        def _showtraceback(self, etype, evalue, stb):
            _emit({"type": "error", "name": getattr(etype, "__name__", str(etype)),
                   "value": str(evalue), "traceback": list(stb)})

        def run(self, code):
            self.run_cell(code, store_history=True)

        @property
        def count(self):
            return self.execution_count - 1

    cfg = Config()
    cfg.HistoryManager.enabled = False
    cfg.InteractiveShell.colors = "NoColor"
    cfg.InteractiveShell.autocall = 0
    cfg.InteractiveShell.xmode = "Context"
    return Shell.instance(config=cfg, displayhook_class=Hook, display_pub_class=Publisher)


class _PlainShell:
    """The same interface without IPython (an image with a bare python3):
    the last expression's value and display() as text/plain plus what the
    object's _repr_*_ methods give, tracebacks of the traceback module."""

    REPRS = (("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"),
             ("image/png", "_repr_png_"), ("image/jpeg", "_repr_jpeg_"),
             ("image/svg+xml", "_repr_svg_"), ("application/json", "_repr_json_"),
             ("text/latex", "_repr_latex_"))

    def __init__(self):
        self.count = 0
        self.ns = {"__name__": "__main__", "display": self.display}

    def bundle(self, obj):
        data = {"text/plain": repr(obj)}
        for mime, name in self.REPRS:
            try:
                value = getattr(obj, name)()
            except Exception:  # no such method, or it failed: not this type
                continue
            if value is not None:
                data[mime] = value
        return _bundle(data)

    def display(self, *objs):
        for obj in objs:
            _emit({"type": "result", "isMainResult": False, "data": self.bundle(obj)})

    def run(self, code):
        self.count += 1
        name = "<cell-%d>" % self.count
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        try:
            tree = ast.parse(code, name)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, name, "exec"), self.ns)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), name, "eval"), self.ns)
                if value is not None:
                    self.ns["_"] = value
                    _emit({"type": "result", "isMainResult": True, "data": self.bundle(value)})
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the context lives
            tb = exc.__traceback__.tb_next if exc.__traceback__ else None
            _emit({"type": "error", "name": type(exc).__name__, "value": str(exc),
                   "traceback": traceback.format_exception(type(exc), exc, tb)})


def _main():
    try:
        shell = _ipython_shell()
    except ImportError as exc:
        _emit({"type": "stderr", "text": "sbx: %s: plain Python results only\n" % exc})
        shell = _PlainShell()
    _emit({"type": "ready"})
    while True:
        try:
            line = _requests.readline()
        except KeyboardInterrupt:  # an interrupt that came between runs
            continue
        if not line:
            return
        try:
            req = json.loads(line)
        except ValueError:
            continue
        try:
            shell.run(req.get("code", ""))
            _figures_out()
        except KeyboardInterrupt:
            _emit({"type": "error", "name": "KeyboardInterrupt", "value": "", "traceback": []})
        sys.stdout.flush()
        _emit({"type": "end", "executionCount": shell.count})


while True:
    try:
        _main()
        break
    except KeyboardInterrupt:
        continue
