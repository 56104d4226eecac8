"""A stand-in for Prometheus' instant-query API (``GET /api/v1/query``), for KEDA's prometheus
scaler: each query is answered by the first rule whose metric name it contains, with the value the
rule's function returns now (one sample, no labels), and recorded. A query no rule names gets an
empty vector, which KEDA treats as "no data" (with ``ignoreNullValues: "false"``, an error).

Not a PromQL engine: the tests that use it prove what KEDA does with the values our triggers ask
for; the queries themselves are checked as text by the compile tests.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class PrometheusStandIn:
    def __init__(self, rules: dict[str, Callable[[], float]], host: str = "127.0.0.1", port: int = 0):
        self.rules = rules
        self.queries: list[str] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> PrometheusStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, query: str) -> list[dict]:
        for name, value in self.rules.items():
            if name in query:
                return [{"metric": {}, "value": [time.time(), repr(float(value()))]}]
        return []

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path != "/api/v1/query":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                query = urllib.parse.parse_qs(url.query).get("query", [""])[0]
                with standin.lock:
                    standin.queries.append(query)
                body = json.dumps({"status": "success",
                                   "data": {"resultType": "vector", "result": standin.answer(query)}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
