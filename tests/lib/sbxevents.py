"""A client of GET /v1/events for the tests: one SSE stream read on a
thread, its events handed over through a queue."""

import json
import queue
import socket
import threading

from sbxproc import scaled


class EventStream:
    """An open /v1/events stream (stack.api with stream=True).

    Each event is a dict {id, event, data} (data parsed as JSON). Comments
    (keep-alives) are skipped."""

    def __init__(self, stack, key, query="", last_id=None):
        headers = {"Accept": "text/event-stream"}
        if last_id:
            headers["Last-Event-ID"] = last_id
        self.r = stack.api("GET", "/v1/events" + query, key=key, headers=headers, stream=True,
                           timeout=(5, 60))
        assert self.r.status_code == 200, (self.r.status_code, self.r.text[:300])
        assert self.r.headers["Content-Type"].startswith("text/event-stream")
        self.q = queue.Queue()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        ev = {}
        try:
            for line in self.r.iter_lines(chunk_size=1, decode_unicode=True):
                if line == "":
                    if "data" in ev:
                        ev["data"] = json.loads(ev["data"])
                        self.q.put(ev)
                    ev = {}
                elif not line.startswith(":") and ":" in line:
                    k, v = line.split(":", 1)
                    ev[k] = v[1:] if v.startswith(" ") else v
        except Exception as ex:  # the stream was closed under us
            self.q.put({"closed": repr(ex)})
        self.q.put({"closed": "end of stream"})

    def next(self, pred=lambda ev: True, timeout=10.0):
        """The next event that passes pred (the others are returned in a list
        too): (event, skipped). Fails after timeout."""
        skipped = []
        timeout = scaled(timeout)
        while True:
            try:
                ev = self.q.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError("no matching event within %.1fs; saw %r" % (timeout, skipped))
            assert "closed" not in ev, "the stream ended: %s (saw %r)" % (ev["closed"], skipped)
            if pred(ev):
                return ev, skipped
            skipped.append(ev)

    def close(self):
        # The reader thread holds the response's buffer lock while it waits
        # for bytes: end the socket first, or close() waits for the next
        # keep-alive.
        conn = getattr(self.r.raw, "_connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.r.close()
        self.t.join(timeout=5)
