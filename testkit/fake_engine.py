"""A fake OpenAI engine (stdlib only) that records what reaches it.

It answers what vLLM's OpenAI server answers, in vLLM's shapes, with a short deterministic text
(``Hello from <engine name>``), so a test can tell which engine served a request:

- ``GET /health`` (and ``/v1/health/ready``): 200, what pylon probes at start and every second;
- ``GET /v1/models``: OpenAI's list;
- ``POST /v1/chat/completions``: JSON (``chat.completion``), or with ``"stream": true`` SSE
  ``chat.completion.chunk`` events, a usage chunk when ``stream_options.include_usage`` is set,
  then ``data: [DONE]``;
- ``POST /v1/completions``: the same for ``text_completion``;
- ``POST /v1/responses``: a ``response`` object, or with ``"stream": true`` the Responses event
  stream (``event: <type>`` + ``data:``) ending in ``response.completed``;
- ``POST /v1/embeddings``: an embeddings list.

Every request is recorded (method, path, headers, body); ``user_requests()`` leaves out pylon's
own traffic (health probes, and the canary / calibration chat requests pylon sends with
``x-request-id: canary-...``). ``override`` lets a test answer a request itself (status, headers,
body) and ``chunk_delay_s`` slows streams down; ``disconnects`` counts streams whose reader went
away before the end.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

PYLON_REQUEST_PREFIXES = ("canary-", "calibration-")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    @property
    def from_pylon(self) -> bool:
        """pylon's own health probes and canary/calibration requests."""
        if self.method == "GET" and self.path.split("?")[0] in ("/health", "/v1/health/ready"):
            return True
        return self.headers.get("x-request-id", "").startswith(PYLON_REQUEST_PREFIXES)


# (status, headers, body) a test's override returns; None lets the engine answer.
Answer = tuple[int, dict[str, str], bytes]


def count_tokens(value: Any) -> int:
    """Words in every string of a request's messages/input (the fake's 'tokenizer')."""
    if isinstance(value, str):
        return max(1, len(value.split()))
    if isinstance(value, list):
        return sum(count_tokens(item) for item in value)
    if isinstance(value, dict):
        return sum(count_tokens(item) for key, item in value.items() if key in ("content", "text", "input"))
    return 0


class FakeEngine:
    def __init__(self, name: str = "engine-0", model: str = "chat", host: str = "127.0.0.1"):
        self.name, self.model, self.host = name, model, host
        self.requests: list[Recorded] = []
        self.override: Optional[Callable[[Recorded], Optional[Answer]]] = None
        self.chunk_delay_s = 0.0
        self.disconnects = 0
        self._lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeEngine:
        engine = self

        class Handler(_Handler):
            owner = engine

        self._server = _Server((self.host, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"fake-{self.name}",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def port(self) -> int:
        assert self._server is not None, "engine not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- records -----------------------------------------------------------------------------
    def record(self, item: Recorded) -> None:
        with self._lock:
            self.requests.append(item)

    def user_requests(self, path: Optional[str] = None) -> list[Recorded]:
        with self._lock:
            items = [r for r in self.requests if not r.from_pylon]
        return [r for r in items if path is None or r.path == path]

    def text(self) -> str:
        return f"Hello from {self.name}"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: a burst of connects (a benchmark opening 256 streams,
    # pylon's pool growing) would wait out SYN retransmits (1 s, 3 s) before any byte is served.
    request_queue_size = 512


class _Handler(BaseHTTPRequestHandler):
    owner: FakeEngine
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ----------------------------------------------------------------------------
    def _record(self) -> Recorded:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        item = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self.owner.record(item)
        return item

    def _send(self, status: int, body: bytes, content_type: str = "application/json",
              headers: Optional[dict[str, str]] = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-fake-engine", self.owner.name)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _error(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": status}})

    def _stream(self, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-fake-engine", self.owner.name)
        self.end_headers()
        try:
            for event in events:
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
                if self.owner.chunk_delay_s:
                    time.sleep(self.owner.chunk_delay_s)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self.owner._lock:
                self.owner.disconnects += 1
            self.close_connection = True

    # -- routes ------------------------------------------------------------------------------
    def do_GET(self) -> None:
        item = self._record()
        if self._overridden(item):
            return
        path = self.path.split("?")[0]
        if path in ("/health", "/v1/health/ready"):
            self._send(200, b"", "text/plain")
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{
                "id": self.owner.model, "object": "model", "created": 1700000000, "owned_by": "vllm",
                "root": self.owner.model, "parent": None, "max_model_len": 4096}]})
        else:
            self._error(404, f"no route {path}", "NotFoundError")

    def do_POST(self) -> None:
        item = self._record()
        if self._overridden(item):
            return
        body = item.json
        if not isinstance(body, dict):
            self._error(400, "body is not a JSON object")
            return
        path = self.path.split("?")[0]
        handler = {
            "/v1/chat/completions": self._chat, "/v1/completions": self._completion,
            "/v1/responses": self._responses, "/v1/embeddings": self._embeddings,
        }.get(path)
        if handler is None:
            self._error(404, f"no route {path}", "NotFoundError")
            return
        handler(body)

    def _overridden(self, item: Recorded) -> bool:
        if self.owner.override is None:
            return False
        answer = self.owner.override(item)
        if answer is None:
            return False
        status, headers, payload = answer
        self._send(status, payload, headers.get("content-type", "application/json"),
                   {k: v for k, v in headers.items() if k.lower() != "content-type"})
        return True

    # -- OpenAI shapes (vLLM's) --------------------------------------------------------------
    def _tokens(self) -> list[str]:
        words = self.owner.text().split(" ")
        return [words[0]] + [f" {w}" for w in words[1:]]

    def _usage(self, prompt: int, completion: int) -> dict:
        return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                "completion_tokens": completion, "prompt_tokens_details": None}

    def _chat(self, body: dict) -> None:
        model, created, rid = body.get("model", self.owner.model), int(time.time()), f"chatcmpl-{self.owner.name}"
        tokens, prompt = self._tokens(), count_tokens(body.get("messages", []))
        if not body.get("stream"):
            self._json(200, {
                "id": rid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {
                    "role": "assistant", "content": "".join(tokens), "refusal": None, "annotations": None,
                    "audio": None, "function_call": None, "tool_calls": [], "reasoning_content": None},
                    "logprobs": None, "finish_reason": "stop", "stop_reason": None}],
                "service_tier": None, "system_fingerprint": None,
                "usage": self._usage(prompt, len(tokens)), "prompt_logprobs": None, "kv_transfer_params": None,
            })
            return

        def chunk(delta: dict, finish: Optional[str] = None) -> bytes:
            return sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": token}) for token in tokens]
        events.append(chunk({}, "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                               "choices": [], "usage": self._usage(prompt, len(tokens))}))
        events.append(b"data: [DONE]\n\n")
        self._stream(events)

    def _completion(self, body: dict) -> None:
        model, created, rid = body.get("model", self.owner.model), int(time.time()), f"cmpl-{self.owner.name}"
        tokens, prompt = self._tokens(), count_tokens(body.get("prompt", ""))
        if not body.get("stream"):
            self._json(200, {"id": rid, "object": "text_completion", "created": created, "model": model,
                             "choices": [{"index": 0, "text": "".join(tokens), "logprobs": None,
                                          "finish_reason": "stop", "stop_reason": None}],
                             "usage": self._usage(prompt, len(tokens))})
            return
        events = [sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                       "choices": [{"index": 0, "text": t, "logprobs": None,
                                    "finish_reason": "stop" if i == len(tokens) - 1 else None}]})
                  for i, t in enumerate(tokens)]
        self._stream(events + [b"data: [DONE]\n\n"])

    def _responses(self, body: dict) -> None:
        model, created = body.get("model", self.owner.model), int(time.time())
        tokens, prompt = self._tokens(), count_tokens(body.get("input", ""))
        text = "".join(tokens)
        usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": len(tokens), "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": prompt + len(tokens)}
        message = {"id": f"msg_{self.owner.name}", "type": "message", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": None}]}
        response = {"id": f"resp_{self.owner.name}", "object": "response", "created_at": created, "model": model,
                    "status": "completed", "output": [message], "usage": usage, "error": None,
                    "incomplete_details": None, "instructions": body.get("instructions"),
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                    "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0)}
        if not body.get("stream"):
            self._json(200, response)
            return
        pending = {**response, "status": "in_progress", "output": [], "usage": None}
        seq = iter(range(1_000_000))
        events = [
            event("response.created", {"response": pending}, seq),
            event("response.in_progress", {"response": pending}, seq),
            event("response.output_item.added", {"output_index": 0, "item": {
                **message, "status": "in_progress", "content": []}}, seq),
            event("response.content_part.added", {"output_index": 0, "item_id": message["id"], "content_index": 0,
                                                  "part": {"type": "output_text", "text": "", "annotations": []}}, seq),
        ]
        events += [event("response.output_text.delta", {"output_index": 0, "item_id": message["id"],
                                                         "content_index": 0, "delta": t}, seq) for t in tokens]
        events += [
            event("response.output_text.done", {"output_index": 0, "item_id": message["id"], "content_index": 0,
                                                "text": text}, seq),
            event("response.content_part.done", {"output_index": 0, "item_id": message["id"], "content_index": 0,
                                                 "part": message["content"][0]}, seq),
            event("response.output_item.done", {"output_index": 0, "item": message}, seq),
            event("response.completed", {"response": response}, seq),
        ]
        self._stream(events)

    def _embeddings(self, body: dict) -> None:
        inputs = body.get("input", "")
        items = inputs if isinstance(inputs, list) else [inputs]
        data = [{"object": "embedding", "index": i, "embedding": [0.1 * (i + 1), 0.2, 0.3]}
                for i in range(len(items))]
        tokens = count_tokens(items)
        self._json(200, {"id": f"embd-{self.owner.name}", "object": "list", "created": int(time.time()),
                         "model": body.get("model", self.owner.model), "data": data,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                                   "prompt_tokens_details": None}})


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def event(kind: str, payload: dict, seq) -> bytes:
    body = {"type": kind, "sequence_number": next(seq), **payload}
    return f"event: {kind}\n".encode() + b"data: " + json.dumps(body).encode() + b"\n\n"


def main() -> None:
    """The engine in a process of its own (e.g. so a benchmark reads its CPU apart from the
    client's): prints its URL, serves until stdin closes or SIGTERM."""
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--name", default="engine-0")
    parser.add_argument("--model", default="chat")
    parser.add_argument("--tokens", type=int, default=0,
                        help="answer 'Hello' + ' zq' * (tokens - 1), one SSE chunk per token (0: the default text)")
    parser.add_argument("--chunk-delay-s", type=float, default=0.0, help="pause after each streamed event")
    parser.add_argument("--nodelay", action="store_true", help="TCP_NODELAY on answers (vLLM's uvicorn sets it)")
    args = parser.parse_args()
    _Handler.disable_nagle_algorithm = args.nodelay
    engine = FakeEngine(args.name, args.model)
    engine.chunk_delay_s = args.chunk_delay_s
    if args.tokens:
        text = "Hello" + " zq" * (args.tokens - 1)
        engine.text = lambda: text
    engine.record = lambda item: None  # a long run would grow the record without bound
    engine.start()
    print(engine.url, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.stdin.read()  # the parent holds the pipe; EOF when it goes away
    finally:
        engine.stop()


if __name__ == "__main__":
    main()
