"""The trace viewer page (cross-cutting, like lapis.cli: it reads trace files and imports no layer).

    lapis view TRACE [--html OUT] [--port N]

`page(trace)` fills the template `viewer.html` (inline CSS and JavaScript, no network) with a Chrome
trace written by `lapis trace` or `lapis.profiler.profile.export_chrome_trace`. The page draws the
stack as six bands, hardware at the bottom and the framework at the top, each in the CUDA world's
green and the ROCm world's red; selecting a framework op lights up its path through the layers with
the real values of that call (library calls, the launch and its kernel arguments, the AQL packet, the
doorbell, the kernel with its counters and disassembly), beside a timeline of all host events.
"""

import http.server
import json
from pathlib import Path

TEMPLATE = Path(__file__).with_name("viewer.html")


def page(trace: dict) -> str:
    """The self-contained HTML for a trace (the trace event format's JSON object)."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("not a Chrome trace: expected a JSON object with a traceEvents list "
                         "(write one with `lapis trace` or profile.export_chrome_trace)")
    data = json.dumps(trace).replace("</", "<\\/")          # nothing in the data can close the script element
    return TEMPLATE.read_text(encoding="utf-8").replace("__LAPIS_TRACE_JSON__", data, 1)


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def serve(html: str, port: int = 8000, ready=None) -> None:
    """Serve the page on localhost until interrupted; `ready(server)` is called once it listens."""
    body = html.encode("utf-8")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):                                   # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler) as server:
        if ready is not None:
            ready(server)
        server.serve_forever()
