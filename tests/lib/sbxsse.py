"""The SSE answers of the agent's streams (exec, sessions, processes, code
runs) read whole, for the tests.

  sse_pairs(resp)   [(event, data)] of a requests response read to its
                    end, each data line parsed as JSON under the last
                    event name seen
  sse_events(resp)  the same pairs one at a time as each event ends (its
                    data lines joined), for streams read while they run
"""

import json


def sse_pairs(resp):
    out, name = [], None
    for line in resp.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            out.append((name, json.loads(line[6:])))
    return out


def sse_events(resp):
    """(event, data) pairs of an SSE response, as they arrive."""
    event, data = None, []
    for raw in resp.iter_lines(decode_unicode=True):
        if raw is None:
            continue
        if raw == "":
            if event is not None:
                yield event, json.loads("\n".join(data))
            event, data = None, []
        elif raw.startswith("event:"):
            event = raw[6:].strip()
        elif raw.startswith("data:"):
            data.append(raw[5:].strip())
