"""The gateway's cost on the request path, from one run on loopback (bounded loops).

    .venv/bin/python bench/gateway.py [--pairs 200] [--tokens 2000] [--json build/bench/<date>-gateway.json]

What runs: the real router and pylon (the public Stargate build, testkit/stargate.py; built
and cached by ../shared/tools/build-stargate.sh) with one fake engine, and the rendered gateway
(nginx + njs, testkit/nginx_kit.py) in front of the router. Measured, alternating the two
sides of each comparison so load on this shared machine hits both alike:

1. time to first byte, streaming chat: through the gateway vs the router called directly with the
   contract headers (the added latency of the front door);
2. non-streaming chat: through the gateway (which asks the router for a stream and folds it;
   its first byte is the whole answer) vs the router called directly with a stream read to its
   last byte (the same work, the only way the router answers);
3. streamed tokens/s of a long answer (``--tokens`` chunks): the whole path (gateway -> router
   -> pylon -> engine) vs the fake engine directly, and vs the router called directly (which
   separates the gateway's share from the router + pylon tunnel's).

Ratios are of medians (and of p99). Nothing asserts a time (benchmarks are not tests).

Found while measuring (2026-12-01): the public router build's HTTP listener does not set
TCP_NODELAY (no ``nodelay`` in its sources), so over HTTP/1.1 the end of a streamed answer (the
chunked terminator, written after the last event) often waits for the receiver's delayed ACK,
~40 ms. The gateway therefore talks HTTP/1.0 to the router (the answer ends with the connection);
a client calling the router directly over HTTP/1.1, as the "direct" side here does, still sees
the delay at the end of part of its streams. Time to the first streamed byte is not affected.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from output import emit

from components.compile.gateway import settings as gateway_settings
from testkit import fake_engine
from testkit.nginx_kit import Gateway
from testkit.stargate import MODEL, RouterStack, build_binaries, stack_config

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello"}]

# The fake engine answers on a plain stdlib socket, with Nagle's algorithm on: its header write and
# first chunk then wait out pylon's delayed ACK (~40 ms) per answer, which real engines do not
# (vLLM's uvicorn sets TCP_NODELAY). Measured here: router TTFB 50.5 ms with Nagle, 7.7 ms without.
fake_engine._Handler.disable_nagle_algorithm = True


class Client:
    """One keep-alive connection; times a POST to its first body byte and to its last."""

    def __init__(self, url: str):
        parsed = urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def post(self, path: str, body: dict, headers: dict) -> tuple[float, float, int, bytes]:
        data = json.dumps(body).encode()
        start = time.perf_counter()
        self.connection.request("POST", path, data, {"Content-Type": "application/json", **headers})
        reply = self.connection.getresponse()
        first = reply.read1(65536)
        first_at = time.perf_counter() - start
        rest = reply.read()
        return first_at, time.perf_counter() - start, reply.status, first + rest


def contract(request_id: str) -> dict:
    return {"x-request-id": request_id, "x-model": MODEL, "x-input-tokens": "12"}


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def p99_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)


def latency(stack: RouterStack, gw: Gateway, pairs: int) -> dict:
    direct, through = Client(stack.http_url), Client(gw.base)
    # The same engine work on both sides: the gateway folds a stream with a usage chunk.
    stream = {"model": MODEL, "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    plain = {"model": MODEL, "messages": MESSAGES}
    samples: dict[str, list[float]] = {k: [] for k in ("stream_direct", "stream_gateway", "full_direct", "full_gateway")}
    for i in range(10):  # warm-up: connections, tunnel, nginx workers
        direct.post("/v1/chat/completions", stream, contract(f"warm-{i}"))
        through.post("/v1/chat/completions", plain, {})
    for i in range(pairs):
        order = ("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")
        for side in order:
            if side == "direct":
                first, last, status, _ = direct.post("/v1/chat/completions", stream, contract(f"d-{i}"))
                assert status == 200, status
                samples["stream_direct"].append(first)
                samples["full_direct"].append(last)
            else:
                first, _, status, _ = through.post("/v1/chat/completions", stream, {})
                assert status == 200, status
                samples["stream_gateway"].append(first)
                first, _, status, body = through.post("/v1/chat/completions", plain, {})
                assert status == 200 and json.loads(body)["object"] == "chat.completion", body[:200]
                samples["full_gateway"].append(first)
    result = {key: {"p50_ms": median_ms(v), "p99_ms": p99_ms(v), "n": len(v)} for key, v in samples.items()}
    result["ratios"] = {
        "stream_ttfb_p50": round(result["stream_gateway"]["p50_ms"] / result["stream_direct"]["p50_ms"], 3),
        "stream_ttfb_p99": round(result["stream_gateway"]["p99_ms"] / result["stream_direct"]["p99_ms"], 3),
        "nonstream_p50": round(result["full_gateway"]["p50_ms"] / result["full_direct"]["p50_ms"], 3),
        "nonstream_p99": round(result["full_gateway"]["p99_ms"] / result["full_direct"]["p99_ms"], 3),
    }
    result["added_ms"] = {
        "stream_ttfb_p50": round(result["stream_gateway"]["p50_ms"] - result["stream_direct"]["p50_ms"], 3),
        "nonstream_p50": round(result["full_gateway"]["p50_ms"] - result["full_direct"]["p50_ms"], 3),
    }
    return result


def throughput(stack: RouterStack, gw: Gateway, tokens: int, runs: int) -> dict:
    engine = stack.engines[0]
    engine.text = lambda: "Hello" + " tok" * (tokens - 1)  # one SSE chunk per token
    clients = {"engine": Client(engine.url), "router": Client(stack.http_url), "path": Client(gw.base)}
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    rates: dict[str, list[float]] = {side: [] for side in clients}
    sides = list(clients)
    for i in range(runs + 1):
        for side in sides[i % 3:] + sides[:i % 3]:  # rotate the order
            headers = contract(f"t-{i}") if side == "router" else {}
            _, last, status, data = clients[side].post("/v1/chat/completions", body, headers)
            assert status == 200 and data.count(b"data: ") >= tokens, (side, status, data[:200])
            if i:  # the first round warms up
                rates[side].append(tokens / last)
    result = {side: {"tokens_per_s_p50": round(statistics.median(v)), "n": len(v)} for side, v in rates.items()}
    result["ratio_path_over_engine"] = round(result["path"]["tokens_per_s_p50"] / result["engine"]["tokens_per_s_p50"], 3)
    result["ratio_path_over_router"] = round(result["path"]["tokens_per_s_p50"] / result["router"]["tokens_per_s_p50"], 3)
    result["tokens"] = tokens
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    bin_dir = build_binaries()
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    stack = RouterStack(stack_config({}), bin_dir, workdir).start()
    try:
        gw = Gateway(replace(gateway_settings(stack.stack), upstream=stack.http_url.removeprefix("http://"))).start()
        try:
            load_before = os.getloadavg()
            result = {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "nginx": "Debian nginx 1.22.1 + njs 0.7.9, worker_processes 2",
                "router": "public Stargate build (NVIDIA/nvcf@fadc0f8), 1 router, 1 pylon, 1 fake engine",
                "latency": latency(stack, gw, args.pairs),
                "throughput": throughput(stack, gw, args.tokens, args.runs),
                "loadavg_before_after": [load_before, os.getloadavg()],
            }
        finally:
            gw.stop()
    finally:
        stack.stop()
    emit(result, args.json)


if __name__ == "__main__":
    main()
