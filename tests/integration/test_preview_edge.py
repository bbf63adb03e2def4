"""What a preview app cannot do through nginx (docs/SECURITY.md): steer
nginx with X-Accel-* headers, show our X-Sbx-* headers to a client, or set
cookies for other previews.

The app runs inside a sandbox (python3 from the host's /usr), as in
test_ports.py.
"""

from test_ports import expose, host_of, make_sandbox, via, wait_serving

APP = r'''
import http.server, json, socketserver, sys, time

DOMAIN = sys.argv[2]

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self, status, data, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/headers":
            self.body(200, json.dumps({k.lower(): v for k, v in self.headers.items()}).encode())
        elif self.path == "/accel":
            self.body(200, b"app-body\n", [
                ("X-Accel-Redirect", "/_sbx_preview"),
                ("X-Accel-Buffering", "yes"),
                ("X-Accel-Expires", "60"),
                ("X-Accel-Limit-Rate", "1"),
                ("X-Accel-Charset", "koi8-r"),
                ("X-Sbx-Forward", "10.9.9.9:1"),
                ("X-Sbx-Agent", "10.9.9.9:2"),
                ("X-Sbx-Tenant", "other"),
                ("X-Sbx-Node-Secret", "leak"),
                ("X-Sbx-Status", "200"),
                ("X-Sbx-Code", "OK"),
                ("X-Sbx-Message", "hi"),
                ("X-Sbx-Epoch", "1"),
                ("X-Sbx-Generation", "1"),
                ("X-Sbx-Internal", "1"),
                ("X-App", "kept")])
        elif self.path == "/cookie":
            self.body(200, b"cookies\n", [
                ("Set-Cookie", "s=1; Domain=%s; Path=/" % DOMAIN),
                ("Set-Cookie", "t=2; path=/; domain=.%s; HttpOnly" % DOMAIN),
                ("Set-Cookie", "u=3; Path=/")])
        elif self.path == "/hold":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"held\n")
            self.wfile.flush()
            # Until the client goes (a write then fails), at most 60 s.
            try:
                for _ in range(200):
                    time.sleep(0.3)
                    self.wfile.write(b".")
                    self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True
        else:
            self.body(200, b"app-body\n")

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''

PORT = 8100


def start(st, sid, key=None):
    kw = {} if key is None else {"key": key}
    make_sandbox(st.api, sid, key=key)
    r = st.api("POST", "/v1/sandboxes/%s/exec" % sid,
               json={"command": "cat > /workspace/edge.py", "stdin": APP}, **kw)
    assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text
    r = st.api("POST", "/v1/sandboxes/%s/processes" % sid,
               json={"command": "python3 /workspace/edge.py %d %s" % (
                   PORT, st.env["SBX_PREVIEW_DOMAIN"])}, **kw)
    assert r.status_code == 201, r.text
    p = expose(lambda *a, **k: st.api(*a, **dict(kw, **k)), sid, PORT)
    wait_serving(st, p["url"], "/headers")
    return p


def test_app_cannot_steer_nginx_or_show_our_headers(stack):
    p = start(stack, "edge-accel")
    r = via(stack, p["url"], "/accel")
    assert r.status_code == 200 and r.text == "app-body\n", (r.status_code, r.text[:300])
    assert r.headers["X-App"] == "kept"
    leaked = [k for k in r.headers if k.lower().startswith(("x-accel-", "x-sbx-"))]
    assert not leaked, leaked


def test_cookie_domain_is_removed(stack):
    p = start(stack, "edge-cookie")
    r = via(stack, p["url"], "/cookie")
    assert r.status_code == 200
    cookies = r.raw.headers.getlist("Set-Cookie")
    host = host_of(p["url"]).split(":")[0]
    assert cookies == ["s=1; Domain=%s; Path=/" % host, "t=2; path=/; domain=%s; HttpOnly" % host,
                       "u=3; Path=/"], cookies
    # The preview domain (and any parent of the host) is never set.
    assert stack.env["SBX_PREVIEW_DOMAIN"] not in ";".join(cookies).replace(host, "")
