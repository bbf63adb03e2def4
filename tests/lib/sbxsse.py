"""The SSE answers of the agent's streams (exec, sessions, processes, code
runs) read whole, for the tests.

  sse_pairs(resp)   [(event, data)] of a requests response read to its
                    end, each data line parsed as JSON under the last
                    event name seen
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
