"""A loopback HTTP proxy in front of the simulated cluster's apiserver that injects API faults.

Clients (the pulumi-kubernetes provider, our dynamic providers, the status command) talk plain
HTTP to 127.0.0.1:<port> through a kubeconfig that names no credential; the proxy forwards each
request over TLS with the cluster's own client certificate. Being HTTP-aware (not a TCP pipe),
it can answer a request itself: a 429 with Retry-After, a 5xx burst, a 409 conflict, a dropped
connection before or *after* the apiserver acted on the request (the response is lost: the
nastiest case for a create), and pod logs the simulated kubelet does not have (KWOK pods log
nothing; a test can make a puller say what `hf download` says on a missing revision).

It needs a kubeconfig with client-certificate files (the simulated cluster's).

Faults are rules: ``proxy.add(rule)``; each request goes through the rules in order and the first
that returns an action wins. Every request is recorded (time, method, path, client, action), so a
test can prove the faults hit both clients and count the retries. Watches are streamed.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

import yaml

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    agent: str  # "pulumi-kubernetes" (client-go) or "python" (our providers) or the raw User-Agent
    index: int  # 0-based position among all requests the proxy saw


@dataclass(frozen=True)
class Respond:
    status: int
    reason: str = ""
    retry_after: Optional[float] = None
    body: Optional[str] = None  # None: a Kubernetes Status object


@dataclass(frozen=True)
class Drop:
    """Close the client's connection without an answer; after=True forwards the request first."""

    after: bool = False


@dataclass(frozen=True)
class Delay:
    seconds: float


@dataclass
class Record:
    at: float
    method: str
    path: str
    agent: str
    action: str  # "forward", "429", "503", "drop-before", "drop-after", "log", ...
    status: int = 0


Rule = Callable[[Request], Optional[object]]


def agent_of(user_agent: str) -> str:
    ua = user_agent.lower()
    if "pulumi" in ua:  # client-go inside pulumi-resource-kubernetes
        return "pulumi-kubernetes"
    if "openapi-generator" in ua or "python" in ua:
        return "python"
    return user_agent or "?"


class ChaosProxy:
    def __init__(self, kubeconfig: str | Path):
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        server = cluster["server"].removeprefix("https://")
        self.upstream_host, _, port = server.partition(":")
        self.upstream_port = int(port or 443)
        self.tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.tls.load_cert_chain(user["client-certificate"], user["client-key"])
        self.rules: list[Rule] = []
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self._count = 0
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"chaos-{self.port}", daemon=True)
        self._thread.start()

    # --- rules and records ---------------------------------------------------------------------

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def decide(self, method: str, path: str, user_agent: str) -> tuple[Request, Optional[object]]:
        with self._lock:
            request = Request(method, path, agent_of(user_agent), self._count)
            self._count += 1
            rules = list(self.rules)
        for rule in rules:
            action = rule(request)
            if action is not None:
                return request, action
        return request, None

    def record(self, request: Request, action: str, status: int = 0) -> None:
        with self._lock:
            self.records.append(Record(time.time(), request.method, request.path, request.agent, action, status))

    def faults(self, agent: Optional[str] = None) -> list[Record]:
        with self._lock:
            return [r for r in self.records if r.action != "forward" and r.action != "log"
                    and (agent is None or r.agent == agent)]

    def requests(self, agent: Optional[str] = None) -> list[Record]:
        with self._lock:
            return [r for r in self.records if agent is None or r.agent == agent]

    # --- client side -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for clients: plain HTTP to the proxy, no credential (the proxy has it)."""
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "chaos", "cluster": {"server": self.url}}],
            "users": [{"name": "chaos", "user": {"token": "unused-the-proxy-authenticates"}}],
            "contexts": [{"name": "chaos", "context": {"cluster": "chaos", "user": "chaos"}}],
            "current-context": "chaos",
        }))
        return path

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ChaosProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # a client that went away mid-stream (a watch when pulumi exits) is not news


def status_body(code: int, reason: str, message: str) -> str:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code})


_REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 502: "BadGateway",
            503: "ServiceUnavailable", 504: "GatewayTimeout", 403: "Forbidden"}


class _Handler(BaseHTTPRequestHandler):
    owner: ChaosProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args) -> None:  # quiet
        return None

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(self, status: int, body: bytes, content_type: str = "application/json",
               extra: Optional[dict] = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _handle(self) -> None:
        body = self._body()
        request, action = self.owner.decide(self.command, self.path, self.headers.get("User-Agent", ""))
        if isinstance(action, Delay):
            time.sleep(action.seconds)
            action = None
        if isinstance(action, Respond):
            self.owner.record(request, "log" if action.body is not None else str(action.status), action.status)
            payload = action.body if action.body is not None else status_body(
                action.status, action.reason or _REASONS.get(action.status, "Failure"),
                f"injected by the chaos proxy: {action.status} {action.reason or _REASONS.get(action.status, '')}")
            content_type = "application/json" if action.body is None else "text/plain"
            extra = {"Retry-After": f"{action.retry_after:g}"} if action.retry_after is not None else None
            self._reply(action.status, payload.encode(), content_type, extra)
            return
        if isinstance(action, Drop) and not action.after:
            self.owner.record(request, "drop-before")
            self._drop()
            return
        upstream = http.client.HTTPSConnection(self.owner.upstream_host, self.owner.upstream_port,
                                               context=self.owner.tls, timeout=600)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in HOP_BY_HOP and k.lower() not in ("authorization", "host", "content-length")}
        headers["Content-Length"] = str(len(body))
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
        except OSError as error:
            self.owner.record(request, f"upstream-error:{error}", 502)
            self._reply(502, status_body(502, "BadGateway", f"chaos proxy: upstream {error}").encode())
            return
        if isinstance(action, Drop):
            response.read()
            upstream.close()
            self.owner.record(request, "drop-after", response.status)
            self._drop()
            return
        self.owner.record(request, "forward", response.status)
        try:
            self._relay(response)
        finally:
            upstream.close()

    def _relay(self, response: http.client.HTTPResponse) -> None:
        self.send_response(response.status, response.reason)
        length = response.getheader("Content-Length")
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        if length is not None:
            self.send_header("Content-Length", length)
            self.end_headers()
            try:
                self.wfile.write(response.read())
            except OSError:
                self.close_connection = True
            return
        # Streamed (watches, chunked lists): relay chunk by chunk until the upstream ends.
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while True:
                chunk = response.read1(65536)
                if not chunk:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


# --- rules ---------------------------------------------------------------------------------------


def every(n: int, action: object, *, agent: Optional[str] = None, methods: Optional[set[str]] = None,
          limit: Optional[int] = None, path_contains: str = "") -> Rule:
    """Answer every n-th matching request with ``action``, at most ``limit`` times."""
    state = {"seen": 0, "fired": 0}
    lock = threading.Lock()

    def rule(request: Request) -> Optional[object]:
        if agent and request.agent != agent:
            return None
        if methods and request.method not in methods:
            return None
        if path_contains and path_contains not in request.path:
            return None
        with lock:
            if limit is not None and state["fired"] >= limit:
                return None
            state["seen"] += 1
            if state["seen"] % n:
                return None
            state["fired"] += 1
        return action(request) if callable(action) else action

    return rule


def outage(seconds: float, action: object, *, trigger: Callable[[Request], bool]) -> Rule:
    """From the first request ``trigger`` accepts, answer everything with ``action`` for ``seconds``."""
    state: dict = {"until": None}
    lock = threading.Lock()

    def rule(request: Request) -> Optional[object]:
        with lock:
            if state["until"] is None:
                if not trigger(request):
                    return None
                state["until"] = time.monotonic() + seconds
            if time.monotonic() > state["until"]:
                return None
        return action

    rule.state = state  # type: ignore[attr-defined]
    return rule


def fake_logs(text: str, *, pod_prefix: str) -> Rule:
    """Serve ``text`` as the log of pods whose name starts with ``pod_prefix``."""

    def rule(request: Request) -> Optional[object]:
        path = request.path.split("?")[0]
        if request.method == "GET" and path.endswith("/log") and f"/pods/{pod_prefix}" in path:
            return Respond(200, body=text)
        return None

    return rule
