"""A stdlib stand-in for the router's HTTP port that enforces its gateway contract.

What it checks is what the real router and pylon refuse (api-gateway-contract.md; the router's
``http_proxy/request.rs`` and pylon's tunnel): no ``x-request-id``, ``x-model`` or an unsigned
``x-input-tokens`` -> 400 with an empty body; chat / Responses without ``"stream": true`` -> 400
``/v1/... requests must set stream=true``; a model it does not hold -> 404 with
``x-stargate-error-code: no_eligible_candidates``. It answers like vLLM behind pylon: SSE chunks
(chat: ``chat.completion.chunk`` with a usage chunk when ``stream_options.include_usage``;
Responses: ``response.*`` events ending in ``response.completed``), embeddings as JSON,
``/v1/models`` as ``{"model_ids": [...]}``, and adds the router's internal response headers.
Every request is recorded (path, headers, body) and so is a client that went away mid-stream.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STREAMED = ("/v1/chat/completions", "/v1/responses")
INTERNAL_HEADERS = {"x-inference-server-id": "engine-0", "x-inference-server-url": "http://10.0.0.9:8000",
                    "x-stargate-cluster-id": "cluster-a", "x-request-id": "router-side-id"}


class FakeRouter:
    def __init__(self, models=("qwen-small",), words=("Hello", " from", " the", " fake", " engine"),
                 delay=0.0, host="127.0.0.1", port=0):
        self.models = list(models)
        self.words = list(words)
        self.delay = delay
        self.requests: list[dict] = []
        self.disconnects: list[str] = []
        self.status_override: dict[str, int] = {}
        # Chat chunks to send instead of the words (then [DONE]).
        self.custom_chat: list[dict] | None = None
        # The custom chat stream ends without its [DONE] (a cut stream).
        self.no_done = False
        # A Responses stream whose second event is this error event.
        self.responses_error: dict | None = None
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeRouter:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, body=b"", ctype="application/json", extra=None):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                with fake.lock:
                    fake.requests.append({"method": "GET", "path": self.path, "headers": dict(self.headers)})
                if self.path.startswith("/v1/models"):
                    self._send(200, json.dumps({"model_ids": fake.models}).encode())
                else:
                    self._send(404)

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                record = {"method": "POST", "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                          "body": raw.decode("utf-8", "replace")}
                with fake.lock:
                    fake.requests.append(record)
                override = fake.status_override.get(self.path)
                if override:
                    engine_error = b'{"error":{"message":"engine says no","type":"BadRequestError","param":null,"code":%d}}'
                    self._send(override, b"" if override >= 500 else engine_error % override)
                    return
                h = record["headers"]
                tokens = h.get("x-input-tokens", "")
                if not h.get("x-request-id") or not h.get("x-model") or not tokens.isdigit():
                    self._send(400)
                    return
                if h["x-model"] not in fake.models:
                    self._send(404, b"", extra={"x-stargate-error-code": "no_eligible_candidates"})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, b"invalid json", "text/plain")
                    return
                if self.path in STREAMED and body.get("stream") is not True:
                    self._send(400, f"{self.path} requests must set stream=true".encode(), "text/plain")
                    return
                if self.path == "/v1/embeddings":
                    out = {"object": "list", "model": body.get("model"),
                           "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
                           "usage": {"prompt_tokens": 3, "total_tokens": 3}}
                    self._send(200, json.dumps(out).encode(), extra=INTERNAL_HEADERS)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                for k, v in INTERNAL_HEADERS.items():
                    self.send_header(k, v)
                self.end_headers()
                events = (self._chat_events(body) if self.path == "/v1/chat/completions"
                          else self._responses_events(body))
                try:
                    for event in events:
                        data = event.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        if fake.delay:
                            time.sleep(fake.delay)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    with fake.lock:
                        fake.disconnects.append(h["x-request-id"])
                    self.close_connection = True

            def _chat_events(self, body):
                if fake.custom_chat:
                    for chunk in fake.custom_chat:
                        yield f"data: {json.dumps(chunk)}\n\n"
                    if not fake.no_done:
                        yield "data: [DONE]\n\n"
                    return
                base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000,
                        "model": body["model"]}
                usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
                first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                              "logprobs": None, "finish_reason": None}]}
                yield f"data: {json.dumps(first)}\n\n"
                for word in fake.words:
                    chunk = {**base, "choices": [{"index": 0, "delta": {"content": word}, "logprobs": None,
                                                  "finish_reason": None}]}
                    yield f"data: {json.dumps(chunk)}\n\n"
                last = {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop",
                                             "stop_reason": None}]}
                yield f"data: {json.dumps(last)}\n\n"
                if usage_on:
                    usage = {**base, "choices": [], "usage": {"prompt_tokens": 7, "total_tokens": 7 + len(fake.words),
                                                             "completion_tokens": len(fake.words)}}
                    yield f"data: {json.dumps(usage)}\n\n"
                yield "data: [DONE]\n\n"

            def _responses_events(self, body):
                text = "".join(fake.words)
                response = {"id": "resp_fake", "object": "response", "created_at": 1700000000, "model": body["model"],
                            "status": "in_progress", "output": [], "usage": None}

                def ev(kind, **payload):
                    return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n"

                yield ev("response.created", response=response, sequence_number=0)
                if fake.responses_error:
                    yield ev("error", **{k: v for k, v in fake.responses_error.items() if k != "type"})
                    return
                for i, word in enumerate(fake.words):
                    yield ev("response.output_text.delta", item_id="msg_fake", output_index=0, content_index=0,
                             delta=word, sequence_number=i + 1)
                done = {**response, "status": "completed", "output": [{
                    "id": "msg_fake", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                    "usage": {"input_tokens": 7, "output_tokens": len(fake.words), "total_tokens": 7 + len(fake.words)}}
                yield ev("response.completed", response=done, sequence_number=len(fake.words) + 1)

        return Handler
