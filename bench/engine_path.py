"""The real vLLM (CPU, the engine kit) behind the whole client path, from one run on loopback.

    .venv/bin/python bench/engine_path.py [--line 0.11] [--starts 2] [--rounds 3] [--tokens 64]
                                          [--json build/bench/<date>-engine-path.json]

What runs: the vLLM server `render` writes for the engine tests' stack (testkit/engine.py:
the real puller's output, the CPU substitutions only), and in front of it the rendered gateway
(nginx 1.26.3 + njs 0.8.9), the real router and pylon (testkit/whole_path.py; the release
Stargate build when ../shared/tools/build-stargate.sh has made one, else the debug build, which
the result names). Measured, each side alternating with its peer so the shared machine's load
hits both alike:

1. cold start from the pulled directory: process start -> the startup probe's path answers 200
   (polled every 0.5 s, as the tests do) and the model is listed; the rendered server vs a plain
   ``vllm serve <the same directory>`` with no rendered flag (the rendered flags' cost: LoRA);
2. streamed chat (``--tokens`` tokens, ``ignore_eos``) at 1, 8 and 32 concurrent streams: time to
   the first content token and each stream's tokens/s after it, and the tokens/s of all streams
   together, through the whole path (gateway -> router -> pylon -> vLLM) vs the same vLLM called
   directly. A stream the path refuses (not 200) is counted, not timed.

Ratios are of medians. Nothing asserts a time (benchmarks are not tests). On a GPU the engine is
far faster and the path's share of the time larger: these figures are this CPU's only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from output import emit

from testkit.engine import POLL_SECONDS, pull_for, serving
from testkit.engine_kit import cpu_env, kit_dir
from testkit.ports import free_port
from testkit.stargate import build_binaries
from testkit.whole_path import running_path

RELEASE_BIN = Path.home() / ".cache" / "llm-serving-stargate" / "fadc0f815832" / "release-bin"
PROMPT = [{"role": "user", "content": "Say hello."}]
CONCURRENCY = (1, 8, 32)


def stargate_bin() -> tuple[Path, str]:
    """The release build if another run made it (never built here: it takes the machine for long),
    else the debug build the tests use."""
    if all(os.access(RELEASE_BIN / name, os.X_OK) for name in ("stargate", "stargate-k8s-router", "pylon")):
        return RELEASE_BIN, "release"
    return build_binaries(), "debug"


# --- cold start -------------------------------------------------------------------------------------

def plain_start(line: str, weights: Path, home: Path) -> float:
    """``vllm serve <dir>`` with only what a CPU needs; seconds to /health 200 and the model listed."""
    kit = kit_dir(line)
    port = free_port()
    env = {**cpu_env(home), "PATH": f"{kit / 'bin'}:/usr/bin:/bin"}
    started = time.monotonic()
    process = subprocess.Popen([str(kit / "bin" / "vllm"), "serve", str(weights), "--host", "127.0.0.1",
                                "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        while process.poll() is None and time.monotonic() - started < 300:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/health")
                health = connection.getresponse()
                health.read()
                if health.status == 200:
                    ready = time.monotonic() - started
                    connection.request("GET", "/v1/models")
                    assert str(weights) in connection.getresponse().read().decode()
                    return ready
            except OSError:
                pass
            time.sleep(POLL_SECONDS)
        raise RuntimeError(f"plain vllm serve did not start (exit {process.poll()})")
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(10)


def cold_start(pulled, tmp: Path, starts: int) -> dict:
    samples: dict[str, list[float]] = {"rendered": [], "plain": []}
    for i in range(starts):
        for side in (("rendered", "plain") if i % 2 == 0 else ("plain", "rendered")):
            if side == "rendered":
                with serving(pulled, tmp) as engine:
                    samples["rendered"].append(engine.ready_at - engine.started)
            else:
                samples["plain"].append(plain_start(pulled.line, pulled.volumes["weights"], tmp / "home"))
    result = {side: {"p50_s": round(statistics.median(v), 2), "samples_s": [round(x, 2) for x in v]}
              for side, v in samples.items()}
    result["ratio_rendered_over_plain"] = round(result["rendered"]["p50_s"] / result["plain"]["p50_s"], 3)
    return result


# --- streams ----------------------------------------------------------------------------------------

def one_stream(base: str, body: bytes, gate: threading.Barrier, out: list) -> None:
    """POST a streamed chat; (start, first content token, last token, tokens) or the refusal."""
    try:
        _stream(base, body, gate, out)
    except (OSError, http.client.HTTPException, ValueError) as error:  # a cut stream is a refusal here
        out.append({"refused": type(error).__name__, "body": str(error)})


def _stream(base: str, body: bytes, gate: threading.Barrier, out: list) -> None:
    parsed = urlparse(base)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=300)
    gate.wait()
    start = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    if reply.status != 200:
        out.append({"refused": reply.status, "body": reply.read()[:300].decode(errors="replace")})
        return
    first = last = None
    tokens = 0
    for line in reply:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        event = json.loads(line[6:])
        if event.get("choices") and event["choices"][0].get("delta", {}).get("content"):
            now = time.perf_counter()
            first = first or now
            last = now
            tokens += 1
    out.append({"start": start, "first": first, "last": last, "tokens": tokens})
    connection.close()


def burst(base: str, model: str, streams: int, tokens: int) -> list[dict]:
    body = json.dumps({"model": model, "messages": PROMPT, "max_tokens": tokens, "temperature": 0,
                       "stream": True, "ignore_eos": True}).encode()
    gate = threading.Barrier(streams)
    out: list[dict] = []
    threads = [threading.Thread(target=one_stream, args=(base, body, gate, out)) for _ in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    return out


def summarize(bursts: list[list[dict]]) -> dict:
    served = [s for b in bursts for s in b if "refused" not in s and s["first"] is not None]
    refused = [s for b in bursts for s in b if "refused" in s]
    ttft = [s["first"] - s["start"] for s in served]
    rate = [(s["tokens"] - 1) / (s["last"] - s["first"]) for s in served if s["tokens"] > 1 and s["last"] > s["first"]]
    together = []
    for b in bursts:
        ok = [s for s in b if "refused" not in s and s["first"] is not None]
        if ok:
            together.append(sum(s["tokens"] for s in ok) / (max(s["last"] for s in ok) - min(s["start"] for s in ok)))
    return {"ttft_p50_ms": round(statistics.median(ttft) * 1000, 1) if ttft else None,
            "stream_tokens_per_s_p50": round(statistics.median(rate), 1) if rate else None,
            "all_streams_tokens_per_s_p50": round(statistics.median(together), 1) if together else None,
            "streams": len(served), "refused": len(refused),
            "refusals": sorted({f"{s['refused']}: {s['body'][:160]}" for s in refused})}


def streams(path, rounds: int, tokens: int, concurrency: tuple[int, ...] = CONCURRENCY) -> dict:
    sides = {"path": path.gateway.base, "direct": path.engine.base_url}
    model = path.engine.served_name
    for base in sides.values():  # warm-up: connections, the tunnel, nginx workers, the engine's first batch
        burst(base, model, 2, 8)
    result = {}
    for streams_at_once in concurrency:
        runs: dict[str, list[list[dict]]] = {side: [] for side in sides}
        for i in range(rounds):
            for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
                runs[side].append(burst(sides[side], model, streams_at_once, tokens))
        row = {side: summarize(b) for side, b in runs.items()}

        def ratio(key: str, row=row) -> float | None:
            ours, peer = row["path"][key], row["direct"][key]
            return round(ours / peer, 3) if ours and peer else None

        row["ratios_path_over_direct"] = {key: ratio(key) for key in
                                          ("ttft_p50_ms", "stream_tokens_per_s_p50", "all_streams_tokens_per_s_p50")}
        result[str(streams_at_once)] = row
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--line", default="0.11", choices=("0.11", "0.32"))
    parser.add_argument("--starts", type=int, default=2, help="cold starts per side (0: none, the streams only)")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per side and concurrency")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)), help="streams at once, comma-separated")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    concurrency = tuple(int(n) for n in args.concurrency.split(","))
    bin_dir, build = stargate_bin()
    tmp = Path(tempfile.mkdtemp(prefix="bench-engine-path-"))
    load_before = os.getloadavg()
    pulled = pull_for(args.line, tmp)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "line": args.line,
              "stargate_build": build, "tokens": args.tokens, "cpus": os.cpu_count(),
              "cold_start": cold_start(pulled, tmp, args.starts) if args.starts else None}
    with serving(pulled, tmp) as engine, running_path(engine, tmp / "path", bin_dir) as path:
        result["streams"] = streams(path, args.rounds, args.tokens, concurrency)
    result["loadavg_before_after"] = [load_before, os.getloadavg()]
    emit(result, args.json)


if __name__ == "__main__":
    main()
