"""The request path at concurrency: 1, 16, 64 and 256 streams, the whole path vs the engine alone.

    .venv/bin/python bench/concurrency.py [--profile release] [--streams 1,16,64,256] [--seconds 8]
        [--rounds 2] [--json build/bench/<date>-concurrency.json]

What runs, all on loopback, each in a process of its own (so each hop's CPU is its own):
the fake engine (testkit/fake_engine.py, ``--nodelay``), the real router and pylon
(testkit/stargate.py: the rendered arguments, built by ../shared/tools/build-stargate.sh with
``--profile``), the rendered gateway on the shipped nginx 1.26.3 + njs 0.8.9
(testkit/nginx_kit.py), and this process as the client (asyncio protocols, no HTTP
library: the cheapest reader Python has, so the client is not the knee; its CPU is measured too).

Three targets at each concurrency, in rotated order, ``--rounds`` times:

- ``engine``: the client straight to the engine (HTTP/1.1 keep-alive), the peer;
- ``router``: the router with the contract headers, HTTP/1.0 as the gateway talks to it
  (router -> pylon -> engine; the gateway's share is ``path`` minus this);
- ``path``: the gateway, HTTP/1.1 keep-alive like an SDK (gateway -> router -> pylon -> engine).

The engine is paced like a real one, so it is not itself the bottleneck: every streamed event is
followed by ``--token-interval-ms`` (default 20 ms, 50 tokens/s per stream, a GPU's decode rate)
and an answer is ``--tokens`` tokens; its first token thus comes one interval after the
request (a stand-in for prefill). Its delivered rate is reported against the nominal
``streams x tokens / ((tokens + 3) x interval)``: near 1 means the engine kept its pace.

Per run: a warm-up (the workers start staggered over one answer's time, so requests do not
arrive in waves), then a ``--seconds`` window in which are counted the tokens that arrive
(aggregate tokens/s), the time to first token of requests started in it (p50/p99; TTFT = from
the request's first byte written to the first token's bytes read) and the CPU of every process
(/proc/<pid>/stat, nginx's master and workers together) and of the whole machine (/proc/stat).
CPU per request = a hop's CPU seconds / the window's tokens divided by ``--tokens``. Ratios are
of the same concurrency in the same round; the figures reported are medians over rounds.

All client connections come from 127.0.0.2-127.0.0.9 (eight addresses): the gateway allows 64
open connections per client address (limit_conn, the edge bound of nginx.py), which one address
opening 256 streams would hit; eight addresses are eight clients. Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.compile.gateway import settings as gateway_settings  # noqa: E402
from testkit.nginx_kit import Gateway, nginx_build  # noqa: E402
from testkit.stargate import MODEL, RouterStack, build_binaries, stack_config  # noqa: E402

FAKE_ENGINE = ROOT / "testkit" / "fake_engine.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SOURCES = [f"127.0.0.{i}" for i in range(2, 10)]
TOKEN_PATTERNS = (b"Hello", b" zq")  # the engine's answer: "Hello" + " zq" * (tokens - 1)
HOPS = ("client", "gateway", "router", "pylon", "engine")


# --- the engine in its own process ------------------------------------------------------------
class EngineProcess:
    """testkit/fake_engine.py's main: the same engine, its CPU apart from ours."""

    def __init__(self, name: str, model: str, tokens: int, interval_s: float):
        self.argv = [sys.executable, str(FAKE_ENGINE), "--name", name, "--model", model, "--tokens", str(tokens),
                     "--chunk-delay-s", str(interval_s), "--nodelay"]
        self.popen: Optional[subprocess.Popen] = None
        self.url = ""

    def start(self) -> EngineProcess:
        self.popen = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.popen.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError(f"fake engine did not start (exit {self.popen.poll()})")
        return self

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.stdin.close()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


# --- CPU from /proc ---------------------------------------------------------------------------
def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return out


def machine_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / CLK_TCK, sum(values) / CLK_TCK


@dataclass
class Hops:
    pids: dict[str, list[int]]

    def sample(self) -> dict[str, float]:
        return {hop: sum(proc_cpu_s(p) for p in pids) for hop, pids in self.pids.items()}


# --- the client -------------------------------------------------------------------------------
@dataclass
class Window:
    start: float = float("inf")
    end: float = float("inf")
    tokens: int = 0


class Conn(asyncio.Protocol):
    """One connection, one request at a time: counts tokens as they arrive, notes the first."""

    def __init__(self, window: Window):
        self.window = window
        self.transport: Optional[asyncio.Transport] = None
        self.lost = asyncio.get_running_loop().create_future()
        self.done: Optional[asyncio.Future] = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, request: bytes) -> asyncio.Future:
        self.buf = bytearray()
        self.header_end = -1
        self.status = 0
        self.chunked, self.length = False, None
        self.scan = [0, 0]
        self.tokens = 0
        self.first: Optional[float] = None
        self.done = asyncio.get_running_loop().create_future()
        self.sent = time.perf_counter()
        self.transport.write(request)
        return self.done

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        buf = self.buf
        buf += data
        if self.header_end < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.header_end = end + 4
            head = bytes(buf[:end]).lower()
            self.status = int(head[9:12])
            self.chunked = b"transfer-encoding: chunked" in head
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    self.length = int(line.split(b":", 1)[1])
            self.scan = [self.header_end, self.header_end]
        new = 0
        for i, pattern in enumerate(TOKEN_PATTERNS):
            new += buf.count(pattern, self.scan[i])
            self.scan[i] = max(self.scan[i], len(buf) - len(pattern) + 1)
        if new:
            if self.first is None:
                self.first = now
            self.tokens += new
            if self.window.start <= now < self.window.end:
                self.window.tokens += new
        if self.chunked and buf.endswith(b"\r\n0\r\n\r\n"):
            self._finish()
        elif self.length is not None and len(buf) - self.header_end >= self.length:
            self._finish()

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(time.perf_counter())

    def connection_lost(self, exc) -> None:
        self._finish()  # HTTP/1.0: the answer ends with the connection
        if not self.lost.done():
            self.lost.set_result(None)


@dataclass
class Target:
    name: str
    host: str
    port: int
    keepalive: bool          # HTTP/1.1 keep-alive, else HTTP/1.0, one connection per request
    contract: bool = False   # the router's contract headers (a direct call to the router)

    def request(self, body: bytes) -> bytes:
        version = "1.1" if self.keepalive else "1.0"
        lines = [f"POST /v1/chat/completions HTTP/{version}", f"Host: {self.host}:{self.port}",
                 "Content-Type: application/json", "Accept: text/event-stream", f"Content-Length: {len(body)}"]
        if self.contract:
            lines += [f"x-request-id: b-{uuid.uuid4().hex[:16]}", f"x-model: {MODEL}", "x-input-tokens: 12"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@dataclass
class Record:
    started: float
    ttft: Optional[float]
    ended: float
    status: int
    tokens: int


@dataclass
class RunResult:
    records: list[Record] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


BODY = json.dumps({"model": MODEL, "stream": True, "messages": [
    {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count for me"}]}).encode()


async def worker(index: int, target: Target, window: Window, result: RunResult, start_at: float,
                 stop_at: float, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    source = SOURCES[index % len(SOURCES)]
    conn: Optional[Conn] = None
    while time.perf_counter() < stop_at:
        try:
            if conn is None or conn.lost.done():
                _, conn = await loop.create_connection(lambda: Conn(window), target.host, target.port,
                                                       local_addr=(source, 0))
            done = conn.send(target.request(BODY))
            ended = await asyncio.wait_for(done, timeout_s)
            ttft = conn.first - conn.sent if conn.first is not None else None
            result.records.append(Record(conn.sent, ttft, ended, conn.status, conn.tokens))
            if conn.status != 200:
                result.errors.append(f"{target.name}: HTTP {conn.status}: {bytes(conn.buf[:300])!r}")
            if not target.keepalive:
                await conn.lost
                conn = None
        except (TimeoutError, OSError) as error:
            result.errors.append(f"{target.name}: {type(error).__name__}: {error}")
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            conn = None
            await asyncio.sleep(0.1)
    if conn is not None and conn.transport is not None:
        conn.transport.close()


def percentile(values: list[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def run(target: Target, streams: int, hops: Hops, args) -> dict:
    """One target at one concurrency: warm-up, the measured window, drain."""
    interval = args.token_interval_ms / 1000
    answer_s = (args.tokens + 3) * interval
    window, result = Window(), RunResult()
    now = time.perf_counter()
    warmup = answer_s + 1.0
    window.start, window.end = now + warmup, now + warmup + args.seconds
    tasks = [asyncio.create_task(worker(i, target, window, result, now + answer_s * i / streams, window.end,
                                        timeout_s=answer_s * 10 + 30))
             for i in range(streams)]
    await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
    cpu0, machine0, load0 = hops.sample(), machine_busy_s(), os.getloadavg()
    await asyncio.sleep(max(0.0, window.end - time.perf_counter()))
    cpu1, machine1, load1 = hops.sample(), machine_busy_s(), os.getloadavg()
    elapsed = window.end - window.start
    await asyncio.wait_for(asyncio.gather(*tasks), answer_s * 10 + 60)
    measured = [r for r in result.records if window.start <= r.started < window.end]
    ttfts = [r.ttft for r in measured if r.ttft is not None and r.status == 200]
    request_equivalents = window.tokens / args.tokens
    cpu = {hop: cpu1[hop] - cpu0[hop] for hop in cpu0}
    return {
        "target": target.name, "streams": streams, "window_s": round(elapsed, 3),
        "tokens_per_s": round(window.tokens / elapsed, 1),
        "requests_started": len(measured),
        "not_200": sum(1 for r in result.records if r.status != 200), "errors": result.errors[:5],
        "error_count": len(result.errors),
        "ttft_ms": {"p50": _ms(percentile(ttfts, 0.5)), "p99": _ms(percentile(ttfts, 0.99)), "n": len(ttfts)},
        "cpu_cores": {hop: round(v / elapsed, 3) for hop, v in cpu.items()},
        "cpu_ms_per_request": {hop: round(v * 1000 / request_equivalents, 3) if request_equivalents else None
                               for hop, v in cpu.items()},
        "machine_busy_cores": round((machine1[0] - machine0[0]) / elapsed, 3),
        "loadavg_1m": [load0[0], load1[0]],
    }


def _ms(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value * 1000, 2)


# --- the summary ------------------------------------------------------------------------------
def med(values: list[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def summarize(runs: list[dict], streams: list[int], args) -> dict:
    nominal_per_stream = args.tokens / ((args.tokens + 3) * args.token_interval_ms / 1000)
    rows = {}
    for n in streams:
        by = {t: [r for r in runs if r["streams"] == n and r["target"] == t] for t in ("engine", "router", "path")}
        rounds = min(len(v) for v in by.values())
        row: dict = {"streams": n, "rounds": rounds}
        for t, rs in by.items():
            row[t] = {
                "tokens_per_s": med([r["tokens_per_s"] for r in rs]),
                "ttft_p50_ms": med([r["ttft_ms"]["p50"] for r in rs]),
                "ttft_p99_ms": med([r["ttft_ms"]["p99"] for r in rs]),
                "cpu_ms_per_request": {h: med([r["cpu_ms_per_request"][h] for r in rs]) for h in HOPS},
                "cpu_cores": {h: med([r["cpu_cores"][h] for r in rs]) for h in HOPS},
                "machine_busy_cores": med([r["machine_busy_cores"] for r in rs]),
                "not_200": sum(r["not_200"] for r in rs), "errors": sum(r["error_count"] for r in rs),
            }
        # Ratios and added latency pairwise within a round, then the median over rounds.
        pairs = list(zip(by["engine"], by["router"], by["path"], strict=True))
        row["engine_vs_nominal"] = med([e["tokens_per_s"] / (n * nominal_per_stream) for e, _, _ in pairs])
        row["path_over_engine"] = med([p["tokens_per_s"] / e["tokens_per_s"] for e, _, p in pairs if e["tokens_per_s"]])
        row["router_over_engine"] = med([r["tokens_per_s"] / e["tokens_per_s"] for e, r, _ in pairs if e["tokens_per_s"]])
        for q in ("p50", "p99"):
            row[f"path_added_ttft_{q}_ms"] = med([_sub(p["ttft_ms"][q], e["ttft_ms"][q]) for e, _, p in pairs])
            row[f"router_added_ttft_{q}_ms"] = med([_sub(r["ttft_ms"][q], e["ttft_ms"][q]) for e, r, _ in pairs])
        rows[n] = row
    goal = rows.get(64)
    verdict = None
    if goal is not None:
        ratio_ok = goal["path_over_engine"] is not None and goal["path_over_engine"] >= 0.8
        ttft_ok = goal["path_added_ttft_p99_ms"] is not None and goal["path_added_ttft_p99_ms"] <= 5
        verdict = {"tokens_ratio": goal["path_over_engine"], "tokens_ratio_goal": ">= 0.8", "tokens_ratio_met": ratio_ok,
                   "added_ttft_p99_ms": goal["path_added_ttft_p99_ms"], "added_ttft_goal": "<= 5 ms",
                   "added_ttft_met": ttft_ok, "met": ratio_ok and ttft_ok}
    return {"rows": rows, "goal_at_64": verdict, "nominal_tokens_per_s_per_stream": round(nominal_per_stream, 2)}


def _sub(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a - b


def _f(value: Optional[float], spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def table(summary: dict) -> str:
    """The summary as a Markdown table (what docs/gateway.md quotes)."""
    lines = ["| streams | engine tok/s (x nominal) | path tok/s (x engine) | router tok/s (x engine) | "
             "TTFT p50 / p99, engine | added by the path, p50 / p99 | added by router + pylon, p50 / p99 | "
             "path: CPU ms per request, client / gateway / router / pylon / engine | path: cores busy, same order | "
             "machine busy cores, engine run / path run | not 200 / errors (path) |",
             "|" + "---|" * 10]
    for n, row in summary["rows"].items():
        e, p, r = row["engine"], row["path"], row["router"]
        lines.append("| " + " | ".join([
            str(n), f"{_f(e['tokens_per_s'], ',.0f')} ({_f(row['engine_vs_nominal'], '.2f')})",
            f"{_f(p['tokens_per_s'], ',.0f')} ({_f(row['path_over_engine'], '.2f')})",
            f"{_f(r['tokens_per_s'], ',.0f')} ({_f(row['router_over_engine'], '.2f')})",
            f"{_f(e['ttft_p50_ms'], '.1f')} / {_f(e['ttft_p99_ms'], '.1f')} ms",
            f"{_f(row['path_added_ttft_p50_ms'], '.1f')} / {_f(row['path_added_ttft_p99_ms'], '.1f')} ms",
            f"{_f(row['router_added_ttft_p50_ms'], '.1f')} / {_f(row['router_added_ttft_p99_ms'], '.1f')} ms",
            " / ".join(f"{_f(p['cpu_ms_per_request'][h], '.2f')}" for h in HOPS),
            " / ".join(f"{_f(p['cpu_cores'][h], '.2f')}" for h in HOPS),
            f"{_f(e['machine_busy_cores'], '.2f')} / {_f(p['machine_busy_cores'], '.2f')}",
            f"{p['not_200']} / {p['errors']}",
        ]) + " |")
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------------
async def sweep(targets: dict[str, Target], hops: Hops, args) -> list[dict]:
    runs = []
    names = list(targets)
    streams = [int(s) for s in args.streams.split(",")]
    for round_ in range(args.rounds):
        for k, n in enumerate(streams):
            shift = (round_ + k) % len(names)
            for name in names[shift:] + names[:shift]:
                result = await run(targets[name], n, hops, args)
                result["round"] = round_
                runs.append(result)
                print(f"round {round_} streams {n:>3} {name:>6}: {result['tokens_per_s']:>8} tok/s, "
                      f"TTFT p50 {result['ttft_ms']['p50']} p99 {result['ttft_ms']['p99']} ms "
                      f"(n {result['ttft_ms']['n']}), cores {result['cpu_cores']}, machine "
                      f"{result['machine_busy_cores']}, not 200: {result['not_200']}, errors: {result['error_count']}",
                      file=sys.stderr, flush=True)
                await asyncio.sleep(0.5)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=("release", "debug"), default="release")
    parser.add_argument("--streams", default="1,16,64,256")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--token-interval-ms", type=float, default=20.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    bin_dir = build_binaries(profile=args.profile)
    workdir = Path(tempfile.mkdtemp(prefix="bench-concurrency-"))
    interval = args.token_interval_ms / 1000
    stack = RouterStack(stack_config({}), bin_dir, workdir,
                        engine=lambda name, model: EngineProcess(name, model, args.tokens, interval)).start()
    try:
        gw = Gateway(replace(gateway_settings(stack.stack), upstream=stack.http_url.removeprefix("http://"))).start()
        try:
            engine = stack.engines[0]
            hops = Hops({"client": [os.getpid()], "gateway": [gw.proc.pid, *children(gw.proc.pid)],
                         "router": [stack.router.popen.pid], "pylon": [stack.pylons[0].popen.pid],
                         "engine": [engine.pid]})
            port = lambda url: int(url.rsplit(":", 1)[1])  # noqa: E731
            targets = {
                "engine": Target("engine", "127.0.0.1", port(engine.url), keepalive=True),
                "router": Target("router", "127.0.0.1", port(stack.http_url), keepalive=False, contract=True),
                "path": Target("path", "127.0.0.1", gw.port, keepalive=True),
            }
            started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            load_before = os.getloadavg()
            runs = asyncio.run(sweep(targets, hops, args))
            summary = summarize(runs, [int(s) for s in args.streams.split(",")], args)
            result = {
                "date": started,
                "machine": f"{os.cpu_count()} cores, {_mem_gb()} GB, {os.uname().release}; shared with other agents",
                "loadavg_before_after": [load_before, os.getloadavg()],
                "profile": args.profile, "binaries": str(bin_dir),
                "nginx": f"{nginx_build().binary} (1.26.3 + njs 0.8.9 unless LLM_GATEWAY_NGINX=debian12), "
                         f"worker_processes {gw.settings.worker_processes}",
                "engine": f"fake engine in its own process, {args.tokens} tokens per answer, "
                          f"{args.token_interval_ms} ms after each event, TCP_NODELAY",
                "settings": vars(args) | {"json": str(args.json)},
                "summary": summary, "runs": runs,
            }
        finally:
            gw.stop()
    finally:
        stack.stop()
    text = json.dumps(result, indent=2)
    print(table(summary))
    print(json.dumps(summary["goal_at_64"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
        args.json.with_suffix(".txt").write_text(table(summary) + "\n" + json.dumps(summary["goal_at_64"]) + "\n")


def _mem_gb() -> int:
    with open("/proc/meminfo") as f:
        return round(int(f.readline().split()[1]) / 1024 / 1024)


if __name__ == "__main__":
    main()
