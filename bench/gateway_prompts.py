"""Large prompts through the gateway: the time it adds to the first token and the CPU it spends.

    .venv/bin/python bench/gateway_prompts.py [--quick] [--sizes 1KB,32KB,220KB,1MB] [--streams 1,20,64]
        [--rounds 2] [--seconds 5] [--perf] [--json OUT]

RAG and long chats make prompts of hundreds of KB the common case, and the gateway reads, checks
and re-sends every body (njs) before the router sees it. This measures what that costs, on
loopback, every hop a process of its own:

- the gateway: the GPU stack's render (``stacks/Pulumi.gpu-cluster.yaml``'s ``router.gateway``:
  API keys, its two tenants with their limits, affinity, 2 workers) with one tenant added for the
  bench (``bench``: request and token limits far above what this machine can send, so every
  request takes the limiter's round trip and its usage is charged, as a limited tenant's does,
  and none is refused), its limiter, on the shipped nginx 1.26.3 + njs 0.8.9
  (tests/gateway/nginx_kit.py); TLS off (``--tls`` is not offered: TLS is nginx's own cost, the
  same with or without the script, and would hide the script's share);
- the real router and pylon (testkit/stargate.py, the release build of
  ../shared/tools/build-stargate.sh; ``--profile debug`` for the debug build), pylon's starting
  input rate raised so its admission never refuses a fast engine's large prompts;
- the engine: testkit/fake_engine.py in a process of its own, TCP_NODELAY, answering
  ``--tokens`` tokens ``--token-interval-ms`` apart (default 16 tokens 10 ms apart: a fixed
  answer in about 0.2 s, so that 20 streams of 220 KB prompts do not by themselves saturate two
  cores and the added time is the gateway's, not a queue's; it parses every prompt, as a real
  engine does).

Three targets per cell (prompt size x concurrent streams), in rotated order, ``--rounds`` times:

- ``router``: the router called directly with the contract headers (HTTP/1.0, as the gateway
  calls it) — the peer for the added time to first token;
- ``gateway``: the gateway with the bench tenant's key (HTTP/1.1 keep-alive, as SDKs call);
- ``plain``: the same nginx binary with a minimal config (``proxy_pass`` to the router,
  unbuffered answers, default body handling, the default access log), the client sending the
  contract headers itself (HTTP/1.1 keep-alive) — the peer for the gateway's CPU per request.

Each run: workers start staggered over ``--stagger-s``, a warm-up, then a ``--seconds`` window in
which time to first token (from the request's first byte written to the first token's bytes
read) is taken of requests started in it, and the CPU of every process from /proc (nginx master +
workers together; the limiter apart). CPU per request = a hop's CPU seconds in the window / the
window's tokens divided by ``--tokens`` (plus the refused requests that ended in it). Added time = the target's p50 (p99) minus the router's
in the same round; ratios of the same round; the figures reported are medians over rounds.

Goals (issue 39): at 20 concurrent 220 KB prompts the gateway adds <= 10 ms to the p99 time to
first token; the gateway's CPU per request (replica + limiter) <= 2x plain nginx's. ``--perf``
adds a profile of the gateway's workers at 20 x 220 KB (``perf record``, by shared object and by
symbol), a run of the same render without API keys (no key check, no limiter), and the njs
steps a streaming request's body goes through, each timed alone (``njs_steps``), to say where
the time goes. Client connections come from 127.0.0.2-9 (``limit_conn`` allows 64 per
address). Loops are bounded: every run by its window, every request by a timeout, the sweep by
``--budget-s`` (cells left when it runs out are reported as not measured). Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from concurrency import (  # noqa: E402
    SOURCES,
    Conn,
    EngineProcess,
    Window,
    _ms,
    _sub,
    children,
    machine_busy_s,
    med,
    percentile,
    proc_cpu_s,
)

from components.compile.gateway import settings as gateway_settings  # noqa: E402
from components.config import load_stack_config  # noqa: E402
from components.config.loader import read_stack_file  # noqa: E402
from testkit.nginx_kit import Gateway, nginx_build, start_nginx, stop_nginx  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.stargate import RouterStack, build_binaries, stack_config  # noqa: E402

GPU_STACK = ROOT / "stacks" / "Pulumi.gpu-cluster.yaml"
# Far above what this machine sends (a few thousand requests and < 10^9 prompt tokens a minute;
# the token limit is at the config's 32-bit ceiling):
# the limiter is asked and charged for every request, and refuses none.
BENCH_TENANT = {"name": "bench", "rateLimit": {"requestsPerMinute": 100_000_000, "burst": 1_000_000,
                                               "tokensPerMinute": 2_000_000_000}}
BENCH_KEY = "sk-bench-large-prompts"
SIZES = {"1KB": 1024, "32KB": 32 * 1024, "220KB": 220 * 1024, "1MB": 1024 * 1024}
TARGETS = ("router", "gateway", "plain")
HOPS = ("client", "gateway", "limiter", "plain", "router", "pylon", "engine")
GOAL_CELL = ("220KB", 20)
GOAL_ADDED_P99_MS = 10.0
GOAL_CPU_RATIO = 2.0
# pylon starts from this input rate (tokens/s) until it measures the engine's: at the stack's
# 100 000 one 1 MB prompt (~260 000 tokens) is more than a second's worth and pylon's admission
# would turn concurrent large prompts away, which the fake engine (milliseconds a prompt) never
# warrants.
PYLON_INPUT_TPS = 1e9


# --- the prompts ------------------------------------------------------------------------------
WORDS = ("the", "retrieval", "context", "passage", "of", "document", "section", "model", "answer", "query",
         "gateway", "token", "cluster", "and", "with", "for", "a", "in", "to", "report", "figure", "table")


def prompt(size: int, model: str) -> tuple[bytes, int]:
    """A streaming chat request of ``size`` bytes (as JSON) whose bulk is one user message of
    text (a RAG prompt: retrieved passages, line breaks, quotes); and the gateway's estimate of
    its input tokens (gateway.js: ceil(characters / 4) + 4 per message), which the direct and
    plain sides send as ``x-input-tokens`` so that the router admits the same load."""
    rng = random.Random(size)
    system = "You answer from the passages below; cite them."
    lines, length = [], 0
    while length < size:
        line = " ".join(rng.choice(WORDS) for _ in range(14)) + ' "quoted" line.'
        lines.append(line)
        length += len(line) + 2
    text = "\n".join(lines)

    def body(content: str) -> bytes:
        return json.dumps({"model": model, "stream": True, "stream_options": {"include_usage": True},
                           "messages": [{"role": "system", "content": system},
                                        {"role": "user", "content": content}]}).encode()

    for _ in range(4):  # trim to the size (escapes make a character worth 1-2 bytes)
        over = len(body(text)) - size
        if over <= 0:
            break
        text = text[:len(text) - over]
    data = body(text)
    estimate = math.ceil((len(system) + len(text)) / 4) + 2 * 4
    return data, estimate


# --- plain nginx: the same binary, a minimal proxy_pass ---------------------------------------
PLAIN_CONF = """\
worker_processes {workers};
daemon off;
pid {dir}/tmp/nginx.pid;
error_log stderr warn;

events {{
    worker_connections 4096;
}}

http {{
    client_body_temp_path {dir}/tmp/client_body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    client_max_body_size {max_body};
    access_log /dev/stdout;

    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.0;
            proxy_buffering off;
        }}
    }}
    server {{
        listen 127.0.0.1:{health};
        location = /healthz {{
            return 200 "ok\\n";
        }}
    }}
}}
"""


class PlainNginx:
    """nginx with PLAIN_CONF in front of ``upstream`` (host:port), started like the gateway."""

    def __init__(self, upstream: str, workers: int, max_body: int):
        self.dir = Path(tempfile.mkdtemp(prefix="bench-plain-nginx-"))
        self.port, self.health = free_port(), free_port()
        (self.dir / "tmp").mkdir()
        (self.dir / "nginx.conf").write_text(PLAIN_CONF.format(
            workers=workers, dir=self.dir, max_body=max_body, port=self.port, health=self.health, upstream=upstream))
        # nginx runs as nobody (start_nginx, as the gateway): it reads the config, writes tmp/.
        os.chmod(self.dir, 0o755)
        os.chmod(self.dir / "nginx.conf", 0o644)
        os.chmod(self.dir / "tmp", 0o777)
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> PlainNginx:
        self.proc, self.log = start_nginx(self.dir, "nginx.conf", f"http://127.0.0.1:{self.health}/healthz", "nginx.log")
        return self

    def stop(self) -> None:
        stop_nginx(self.proc)
        if self.proc is not None:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# --- the gateway as the GPU stack renders it ---------------------------------------------------
def gpu_gateway_settings(keys: bool = True):
    """The GPU stack's gateway settings, the bench tenant added to its tenants (``keys=False``:
    the same render without API keys: no key check, no limiter). TLS off (module docstring)."""
    raw = copy.deepcopy(read_stack_file(GPU_STACK))
    gateway = raw["router"]["gateway"]
    gateway.pop("tls", None)
    if keys:
        gateway["apiKeys"]["tenants"].append(BENCH_TENANT)
    else:
        gateway.pop("apiKeys")
    return gateway_settings(load_stack_config(raw))


def keys_file(settings) -> str:
    digest = hashlib.sha256(BENCH_KEY.encode()).hexdigest()
    # The stack's own tenants get keys too (nobody uses them): the file as a deployment has it.
    others = "".join(f"{hashlib.sha256(f'sk-{t.name}'.encode()).hexdigest()} {t.name}\n"
                     for t in settings.tenants if t.name != "bench")
    return others + f"{digest} bench\n"


# --- the client -------------------------------------------------------------------------------
@dataclass
class Target:
    name: str
    port: int
    keepalive: bool                 # HTTP/1.1 keep-alive, else HTTP/1.0, one connection per request
    contract: bool = False          # the router's contract headers (the direct and plain sides)
    authorization: Optional[str] = None

    def head(self, model: str, length: int, estimate: int) -> bytes:
        version = "1.1" if self.keepalive else "1.0"
        lines = [f"POST /v1/chat/completions HTTP/{version}", f"Host: 127.0.0.1:{self.port}",
                 "Content-Type: application/json", "Accept: text/event-stream", f"Content-Length: {length}"]
        if self.contract:
            lines += [f"x-request-id: p-{uuid.uuid4().hex[:16]}", f"x-model: {model}", f"x-input-tokens: {estimate}"]
        if self.authorization:
            lines.append(f"Authorization: {self.authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass
class Record:
    started: float
    ttft: Optional[float]
    status: int
    ended: float


@dataclass
class Prompt:
    name: str
    body: bytes
    estimate: int


@dataclass
class RunState:
    records: list[Record] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def worker(index: int, target: Target, model: str, prompt_: Prompt, window: Window, state: RunState,
                 start_at: float, stop_at: float, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    source = SOURCES[index % len(SOURCES)]
    conn: Optional[Conn] = None
    while time.perf_counter() < stop_at:
        try:
            if conn is None or conn.lost.done():
                _, conn = await loop.create_connection(lambda: Conn(window), "127.0.0.1", target.port,
                                                       local_addr=(source, 0))
            done = conn.send(target.head(model, len(prompt_.body), prompt_.estimate))
            conn.transport.write(prompt_.body)
            ended = await asyncio.wait_for(done, timeout_s)
            ttft = conn.first - conn.sent if conn.first is not None else None
            state.records.append(Record(conn.sent, ttft, conn.status, ended))
            if conn.status != 200:
                state.errors.append(f"{target.name}: HTTP {conn.status}: {bytes(conn.buf[:300])!r}")
            if not target.keepalive:
                await asyncio.wait_for(conn.lost, timeout_s)
                conn = None
            elif b"\r\nconnection: close" in bytes(conn.buf[:max(conn.header_end, 0)]).lower():
                # nginx's keepalive_requests reached: a new connection, not a write racing the close.
                conn.transport.close()
                conn = None
        except (TimeoutError, OSError) as error:
            state.errors.append(f"{target.name}: {type(error).__name__}: {error}")
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            conn = None
            await asyncio.sleep(0.1)
    if conn is not None and conn.transport is not None:
        conn.transport.close()


@dataclass
class Processes:
    pids: dict[str, list[int]]

    def cpu(self) -> dict[str, float]:
        return {hop: sum(proc_cpu_s(p) for p in pids) for hop, pids in self.pids.items()}


async def run(target: Target, model: str, prompt_: Prompt, streams: int, procs: Processes, args,
              during=None) -> dict:
    """One target, one prompt size, one concurrency: warm-up, the measured window, drain.
    ``during(seconds)``: started with the window (a profiler), awaited after it."""
    window, state = Window(), RunState()
    now = time.perf_counter()
    window.start = now + args.stagger_s + args.warmup_s
    window.end = window.start + args.seconds
    timeout_s = 30.0
    tasks = [asyncio.create_task(worker(i, target, model, prompt_, window, state, now + args.stagger_s * i / streams,
                                        window.end, timeout_s))
             for i in range(streams)]
    await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
    profiler = asyncio.get_running_loop().run_in_executor(None, during, args.seconds) if during else None
    cpu0, machine0, load0 = procs.cpu(), machine_busy_s(), os.getloadavg()
    await asyncio.sleep(max(0.0, window.end - time.perf_counter()))
    cpu1, machine1, load1 = procs.cpu(), machine_busy_s(), os.getloadavg()
    elapsed = window.end - window.start
    # Bounded: each worker's last request has its timeout (twice: the answer and, HTTP/1.0, the close).
    await asyncio.wait_for(asyncio.gather(*tasks), 2 * timeout_s + 10)
    profile = await profiler if profiler else None
    measured = [r for r in state.records if window.start <= r.started < window.end]
    ttfts = [r.ttft for r in measured if r.ttft is not None and r.status == 200]
    # Answered requests by their tokens (a stream in flight at an edge counts its part), and
    # refused ones (a 503 still cost the gateway the whole body) by their end in the window.
    refused = sum(1 for r in state.records if r.status != 200 and window.start <= r.ended < window.end)
    equivalents = window.tokens / args.tokens + refused
    cpu = {hop: cpu1[hop] - cpu0[hop] for hop in cpu0}
    result = {
        "target": target.name, "prompt": prompt_.name, "prompt_bytes": len(prompt_.body), "streams": streams,
        "window_s": round(elapsed, 3), "requests_started": len(measured),
        "requests_per_s": round(equivalents / elapsed, 2),
        "ttft_ms": {"p50": _ms(percentile(ttfts, 0.5)), "p99": _ms(percentile(ttfts, 0.99)), "n": len(ttfts)},
        "cpu_ms_per_request": {hop: round(v * 1000 / equivalents, 3) if equivalents else None for hop, v in cpu.items()},
        "cpu_cores": {hop: round(v / elapsed, 3) for hop, v in cpu.items()},
        "machine_busy_cores": round((machine1[0] - machine0[0]) / elapsed, 3),
        "loadavg_1m": [load0[0], load1[0]],
        "not_200": sum(1 for r in state.records if r.status != 200),
        "error_count": len(state.errors), "errors": state.errors[:3],
    }
    if profile is not None:
        result["profile"] = profile
    return result



# --- perf: where the gateway's workers spend their time ---------------------------------------
def perf_profiler(pids: list[int], workdir: Path):
    """A function of the window's length that samples ``pids`` with ``perf record`` and returns
    the shares by shared object and the top symbols; None when perf is missing or refused."""
    perf = shutil.which("perf")
    if perf is None:
        return None

    def profile(seconds: float) -> Optional[dict]:
        data = workdir / "perf.data"
        record = subprocess.run([perf, "record", "-F", "999", "-g", "-o", str(data), "-p", ",".join(map(str, pids)),
                                 "--", "sleep", str(seconds)], capture_output=True, text=True, timeout=seconds + 60)
        if record.returncode != 0 or not data.exists():
            return {"error": record.stderr[-500:]}

        def report(*sort: str) -> list[str]:
            out = subprocess.run([perf, "report", "-i", str(data), "--stdio", "--no-children", "-g", "none",
                                  "--percent-limit", "0", "--sort", ",".join(sort)],
                                 capture_output=True, text=True, timeout=120)
            return [line.strip() for line in out.stdout.splitlines() if line.strip() and not line.startswith("#")]

        symbols = report("dso", "sym")
        return {"by_object": report("dso")[:12], "by_symbol": symbols[:30], "groups": perf_groups(symbols)}

    return profile


# What a share of the gateway workers' samples is spent on, by shared object and symbol name
# (the module's exported symbols are named; its static functions show as addresses).
PERF_GROUPS = (
    ("njs: UTF-8 decode/encode of strings (the body as text)", lambda dso, sym: "js_module" in dso and "utf8" in sym),
    ("njs: JSON parse/stringify (named)", lambda dso, sym: "js_module" in dso and "json" in sym.lower()),
    ("njs: the rest of the module (interpreter, strings, objects, unnamed)", lambda dso, sym: "js_module" in dso),
    ("kernel: sockets, the body's temp file, scheduling", lambda dso, sym: "kernel" in dso),
    ("nginx, libc, pcre and the rest", lambda dso, sym: True),
)


def perf_groups(lines: list[str]) -> dict[str, float]:
    """``perf report --sort dso,sym`` lines ("9.60%  ngx_http_js_module.so  [.] njs_utf8_decode")
    summed into PERF_GROUPS, in percent of the samples."""
    shares = {name: 0.0 for name, _ in PERF_GROUPS}
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[0].endswith("%"):
            continue
        percent, dso, sym = float(parts[0][:-1]), parts[1], parts[2]
        name = next(name for name, match in PERF_GROUPS if match(dso, sym))
        shares[name] += percent
    return {name: round(value, 1) for name, value in shares.items()}


# --- njs steps: each thing the script does with a streaming request's body, timed alone ----
# On the shipped nginx + njs (one worker, one request at a time): the body file read as text
# (what gateway.js does: fs.readFileSync(file, 'utf8')) and as bytes (and those bytes made text
# by Buffer.toString and by TextDecoder), JSON.parse of it, the affinity key (JSON.stringify of
# the leading messages, which hold the whole prompt, then sha256; sha256 of the text and of its
# bytes), the input-token estimate (string lengths), a full JSON.stringify, and the text handed
# to nginx (a js_var, what proxy_set_body sends). Not gateway.js's functions (they move as the
# script is split into modules): the njs primitives they are made of.
STEPS_JS = """\
import crypto from 'crypto';
import fs from 'fs';

function timed(n, fn) {
    const start = Date.now();
    for (let i = 0; i < n; i++) {
        fn(i);
    }
    return (Date.now() - start) / n;
}

function steps(r) {
    const file = r.args.file;
    const n = Number(r.args.n);
    const text = fs.readFileSync(file, 'utf8');
    const body = JSON.parse(text);
    const out = {};
    out.read_as_text = timed(n, () => fs.readFileSync(file, 'utf8'));
    out.read_as_bytes = timed(n, () => fs.readFileSync(file));
    const bytes = fs.readFileSync(file);
    out.bytes_to_text = timed(n, () => bytes.toString('utf8'));
    out.text_decoder = timed(n, () => new TextDecoder().decode(bytes));
    out.json_parse = timed(n, () => JSON.parse(text));
    out.affinity_key = timed(n, () => crypto.createHash('sha256')
        .update(JSON.stringify(['prefix', 'bench', body.model, body.messages.slice(0, 2)])).digest('hex'));
    out.sha256_of_text = timed(n, () => crypto.createHash('sha256').update(text).digest('hex'));
    out.sha256_of_bytes = timed(n, () => crypto.createHash('sha256').update(bytes).digest('hex'));
    out.token_estimate = timed(n, () => body.messages.reduce((sum, m) => sum + m.content.length, 0));
    out.json_stringify = timed(n, () => JSON.stringify(body));
    out.set_variable = timed(n, () => { r.variables.steps_body = text; });
    out.set_variable_bytes = timed(n, () => { r.variables.steps_body = fs.readFileSync(file); });
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, JSON.stringify(out));
}

export default {steps};
"""

STEPS_CONF = """\
load_module {js_module};
worker_processes 1;
daemon off;
pid {dir}/tmp/nginx.pid;
error_log stderr warn;

events {{
}}

http {{
    client_body_temp_path {dir}/tmp/client_body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    access_log off;
    js_path {dir};
    js_import s from steps.js;
    js_var $steps_body;
    server {{
        listen 127.0.0.1:{port};
        location = /healthz {{
            return 200 "ok\\n";
        }}
        location = /steps {{
            js_content s.steps;
        }}
    }}
}}
"""


def njs_steps(prompts: list[Prompt], repeats: int = 3) -> dict:
    """ms per step (STEPS_JS) for each prompt, the median of ``repeats`` calls."""
    directory = Path(tempfile.mkdtemp(prefix="bench-njs-steps-"))
    port = free_port()
    (directory / "tmp").mkdir()
    (directory / "steps.js").write_text(STEPS_JS)
    (directory / "nginx.conf").write_text(STEPS_CONF.format(js_module=nginx_build().js_module, dir=directory, port=port))
    for p in prompts:
        (directory / f"{p.name}.json").write_bytes(p.body)
    os.chmod(directory, 0o755)
    for path in directory.iterdir():
        os.chmod(path, 0o777 if path.is_dir() else 0o644)
    proc, log = start_nginx(directory, "nginx.conf", f"http://127.0.0.1:{port}/healthz", "nginx.log")
    try:
        out = {}
        for p in prompts:
            # Enough iterations for Date.now()'s millisecond, few enough for what njs keeps
            # until the request ends (it frees nothing before): ~40 MB of bodies a call.
            n = max(3, min(500, 40 * 1024 * 1024 // len(p.body)))
            calls = []
            for _ in range(repeats):
                url = f"http://127.0.0.1:{port}/steps?file={directory / (p.name + '.json')}&n={n}"
                with urllib.request.urlopen(url, timeout=120) as reply:
                    calls.append(json.loads(reply.read()))
            out[p.name] = {step: round(statistics.median(c[step] for c in calls), 3) for step in calls[0]}
            out[p.name]["iterations"] = n
        return out
    finally:
        stop_nginx(proc)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def steps_table(steps: dict) -> str:
    names = [k for k in next(iter(steps.values())) if k != "iterations"]
    lines = ["| prompt | " + " | ".join(n.replace("_", " ") for n in names) + " |", "|" + "---|" * (len(names) + 1)]
    lines += [f"| {size} | " + " | ".join(f"{row[n]:.2f}" for n in names) + " |" for size, row in steps.items()]
    return "ms per step, njs on the shipped nginx, one request at a time:\n" + "\n".join(lines)


# --- the summary ------------------------------------------------------------------------------


def _div(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else a / b


def gateway_cpu(run_: dict) -> Optional[float]:
    """A request's CPU in the gateway as deployed: its replica and its limiter."""
    c = run_["cpu_ms_per_request"]
    return None if c["gateway"] is None else c["gateway"] + (c["limiter"] or 0)


def summarize(runs: list[dict]) -> dict:
    cells = {}
    for size in SIZES:
        for n in sorted({r["streams"] for r in runs}):
            by = {t: [r for r in runs if r["prompt"] == size and r["streams"] == n and r["target"] == t]
                  for t in ("router", "gateway", "plain", "gateway-open")}
            if not (by["router"] and by["gateway"] and by["plain"]):
                continue
            rounds = sorted({r["round"] for r in by["gateway"]} & {r["round"] for r in by["router"]}
                            & {r["round"] for r in by["plain"]})
            pick = {t: {r["round"]: r for r in rs} for t, rs in by.items()}
            cell: dict = {"prompt": size, "streams": n, "rounds": len(rounds)}
            for t, rs in by.items():
                if not rs:
                    continue
                cell[t] = {
                    "requests_per_s": med([r["requests_per_s"] for r in rs]),
                    "ttft_p50_ms": med([r["ttft_ms"]["p50"] for r in rs]),
                    "ttft_p99_ms": med([r["ttft_ms"]["p99"] for r in rs]),
                    "ttft_n": sum(r["ttft_ms"]["n"] for r in rs),
                    "cpu_ms_per_request": {h: med([r["cpu_ms_per_request"][h] for r in rs]) for h in HOPS},
                    "machine_busy_cores": med([r["machine_busy_cores"] for r in rs]),
                    "not_200": sum(r["not_200"] for r in rs), "errors": sum(r["error_count"] for r in rs),
                }
            for t in ("gateway", "plain", "gateway-open"):
                same = [(pick[t][k], pick["router"][k]) for k in rounds if k in pick[t]]
                if not same:
                    continue
                for q in ("p50", "p99"):
                    cell[t][f"added_ttft_{q}_ms"] = med([_sub(x["ttft_ms"][q], d["ttft_ms"][q]) for x, d in same])
            pairs = [(pick["gateway"][k], pick["plain"][k]) for k in rounds]
            cell["gateway_cpu_ms"] = med([gateway_cpu(g) for g, _ in pairs])
            cell["plain_cpu_ms"] = med([p["cpu_ms_per_request"]["plain"] for _, p in pairs])
            cell["cpu_ratio"] = med([_div(gateway_cpu(g), p["cpu_ms_per_request"]["plain"]) for g, p in pairs])
            cell["cpu_ratio_replica_only"] = med([_div(g["cpu_ms_per_request"]["gateway"], p["cpu_ms_per_request"]["plain"])
                                                  for g, p in pairs])
            cells[f"{size}x{n}"] = cell
    goal = cells.get(f"{GOAL_CELL[0]}x{GOAL_CELL[1]}")
    ratios = {k: c["cpu_ratio"] for k, c in cells.items() if c["cpu_ratio"] is not None}
    verdict = {
        "added_ttft_p99_ms_at_20x220KB": goal["gateway"].get("added_ttft_p99_ms") if goal else None,
        "added_ttft_goal_ms": GOAL_ADDED_P99_MS,
        "added_ttft_met": (goal["gateway"]["added_ttft_p99_ms"] <= GOAL_ADDED_P99_MS
                           if goal and goal["gateway"].get("added_ttft_p99_ms") is not None else None),
        "cpu_ratio_worst": max(ratios.values()) if ratios else None,
        "cpu_ratio_worst_cell": max(ratios, key=ratios.get) if ratios else None,
        "cpu_ratio_goal": GOAL_CPU_RATIO,
        "cpu_ratio_met_cells": sorted(k for k, v in ratios.items() if v <= GOAL_CPU_RATIO),
        "cpu_ratio_missed_cells": sorted(k for k, v in ratios.items() if v > GOAL_CPU_RATIO),
    }
    return {"cells": cells, "verdict": verdict}


def _f(value: Optional[float], spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(summary: dict) -> str:
    """The summary as a Markdown table (what docs/10-benchmarks.md quotes)."""
    lines = ["| prompt × streams | router direct: TTFT p50 / p99 | gateway adds, p50 / p99 | plain nginx adds, p50 / p99 | "
             "CPU ms per request: gateway (replica + limiter) / plain nginx | ratio (replica alone) | "
             "router / pylon / engine CPU ms | requests/s via gateway | machine busy cores (gateway run) | "
             "not 200 (gateway) |",
             "|" + "---|" * 10]
    for cell in summary["cells"].values():
        d, g, p = cell["router"], cell["gateway"], cell["plain"]
        gc = g["cpu_ms_per_request"]
        lines.append("| " + " | ".join([
            f"{cell['prompt']} × {cell['streams']}",
            f"{_f(d['ttft_p50_ms'], '.1f')} / {_f(d['ttft_p99_ms'], '.1f')} ms",
            f"{_f(g.get('added_ttft_p50_ms'), '.1f')} / {_f(g.get('added_ttft_p99_ms'), '.1f')} ms",
            f"{_f(p.get('added_ttft_p50_ms'), '.1f')} / {_f(p.get('added_ttft_p99_ms'), '.1f')} ms",
            f"{_f(cell['gateway_cpu_ms'], '.2f')} ({_f(gc['gateway'], '.2f')} + {_f(gc['limiter'], '.2f')}) / "
            f"{_f(cell['plain_cpu_ms'], '.2f')}",
            f"{_f(cell['cpu_ratio'], '.2f')}× ({_f(cell['cpu_ratio_replica_only'], '.2f')}×)",
            " / ".join(_f(gc[h], ".2f") for h in ("router", "pylon", "engine")),
            _f(g["requests_per_s"], ".0f"),
            _f(g["machine_busy_cores"], ".2f"),
            f"{g['not_200']} / {g['errors']}",
        ]) + " |")
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------------
async def sweep(targets: dict[str, Target], model: str, cells: list[tuple[Prompt, int]],
                procs: Processes, args, deadline: float) -> tuple[list[dict], list[str]]:
    runs, skipped = [], []
    names = list(TARGETS)
    for round_ in range(args.rounds):
        for k, (p, n) in enumerate(cells):
            # One cell is 3 runs; leave it whole or not at all.
            if time.monotonic() + 3 * (args.stagger_s + args.warmup_s + args.seconds + 2) > deadline:
                skipped.append(f"round {round_}: {p.name} × {n}")
                continue
            shift = (round_ + k) % len(names)
            for name in names[shift:] + names[:shift]:
                result = await run(targets[name], model, p, n, procs, args)
                result["round"] = round_
                runs.append(result)
                _log(result)
                await asyncio.sleep(0.3)
    return runs, skipped


def _log(r: dict) -> None:
    print(f"round {r.get('round')} {r['prompt']:>5} × {r['streams']:>2} {r['target']:>12}: "
          f"{r['requests_per_s']:>7} req/s, TTFT p50 {r['ttft_ms']['p50']} p99 {r['ttft_ms']['p99']} ms "
          f"(n {r['ttft_ms']['n']}), CPU ms/request {r['cpu_ms_per_request']}, machine {r['machine_busy_cores']}, "
          f"not 200: {r['not_200']}, errors: {r['error_count']} {r['errors'][:1]}", file=sys.stderr, flush=True)


async def decompose(targets: dict[str, Target], model: str, prompt_: Prompt, streams: int, procs: Processes,
                    args, profiler) -> list[dict]:
    """At the goal's cell: the gateway under perf, and the render without keys beside the
    gateway and the router (rotated, ``--rounds`` pairs), for where the time goes."""
    runs = []
    if profiler is not None:
        result = await run(targets["gateway"], model, prompt_, streams, procs, args, during=profiler)
        result["round"] = "perf"
        runs.append(result)
        _log(result)
    names = ["router", "gateway", "gateway-open"]
    for round_ in range(args.rounds):
        for name in names[round_ % 3:] + names[:round_ % 3]:
            result = await run(targets[name], model, prompt_, streams, procs, args)
            result["round"] = f"decompose-{round_}"
            runs.append(result)
            _log(result)
    return runs


def decomposition(runs: list[dict]) -> dict:
    by = {t: [r for r in runs if r["target"] == t and str(r["round"]).startswith("decompose")]
          for t in ("router", "gateway", "gateway-open")}
    out = {t: {"ttft_p50_ms": med([r["ttft_ms"]["p50"] for r in rs]), "ttft_p99_ms": med([r["ttft_ms"]["p99"] for r in rs]),
               "cpu_ms_per_request": {h: med([r["cpu_ms_per_request"][h] for r in rs]) for h in HOPS}}
           for t, rs in by.items() if rs}
    perf = [r for r in runs if r["round"] == "perf"]
    if perf:
        out["perf"] = perf[0].get("profile")
        out["perf_run"] = {k: perf[0][k] for k in ("ttft_ms", "cpu_ms_per_request", "requests_per_s")}
    return out


def release_cached() -> bool:
    """A release build of the router is already cached (build-stargate.sh's layout)."""
    cache = Path(os.environ.get("STARGATE_CACHE_DIR", Path.home() / ".cache" / "llm-serving-stargate"))
    return any((d / "stargate").exists() and (d / "pylon").exists() for d in cache.glob("*/release-bin"))


def bench(args) -> dict:
    started = time.monotonic()
    deadline = started + args.budget_s
    bin_dir = build_binaries(profile=args.profile)
    settings = gpu_gateway_settings()
    model = settings.models[0]
    wanted = cells_of(args)
    prompts = {name: Prompt(name, *prompt(SIZES[name], model)) for name in dict.fromkeys(size for size, _ in wanted)}
    cells = [(prompts[size], n) for size, n in wanted]
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-prompts-"))
    interval = args.token_interval_ms / 1000
    router = {"pylon": {"image": "nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0",
                        "initialInputTps": PYLON_INPUT_TPS}}
    stack = RouterStack(stack_config(router, models=(model,)), bin_dir, workdir,
                        engine=lambda name, m: EngineProcess(name, m, args.tokens, interval)).start()
    started_nginx: list = []
    try:
        upstream = stack.http_url.removeprefix("http://")
        gw = Gateway(replace(settings, upstream=upstream), keys=keys_file(settings)).start()
        started_nginx.append(gw)
        plain = PlainNginx(upstream, gw.settings.worker_processes, gw.settings.max_body_bytes).start()
        started_nginx.append(plain)
        open_gw = None
        if args.perf:
            open_gw = Gateway(replace(gpu_gateway_settings(keys=False), upstream=upstream)).start()
            started_nginx.append(open_gw)
        engine = stack.engines[0]
        nginx_pids = lambda proc: [proc.pid, *children(proc.pid)]  # noqa: E731
        procs = Processes({
            "client": [os.getpid()], "gateway": nginx_pids(gw.proc) + (nginx_pids(open_gw.proc) if open_gw else []),
            "limiter": nginx_pids(gw.own_limiter.proc) if gw.own_limiter else [],
            "plain": nginx_pids(plain.proc), "router": [stack.router.popen.pid],
            "pylon": [stack.pylons[0].popen.pid], "engine": [engine.pid]})
        port = int(stack.http_url.rsplit(":", 1)[1])
        targets = {
            "router": Target("router", port, keepalive=False, contract=True),
            "gateway": Target("gateway", gw.port, keepalive=True, authorization=f"Bearer {BENCH_KEY}"),
            "plain": Target("plain", plain.port, keepalive=True, contract=True),
        }
        if open_gw:
            targets["gateway-open"] = Target("gateway-open", open_gw.port, keepalive=True)
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        load_before = os.getloadavg()
        runs, skipped = asyncio.run(sweep(targets, model, cells, procs, args, deadline))
        extra: dict = {}
        if args.perf:
            goal_prompt = prompts.get(GOAL_CELL[0]) or Prompt(GOAL_CELL[0], *prompt(SIZES[GOAL_CELL[0]], model))
            profiler = perf_profiler(children(gw.proc.pid), workdir)
            decomposed = asyncio.run(decompose(targets, model, goal_prompt, GOAL_CELL[1], procs, args, profiler))
            runs += decomposed
            extra["decomposition_at_20x220KB"] = decomposition(decomposed)
            extra["njs_steps_ms"] = njs_steps([Prompt(n, *prompt(size, model)) for n, size in SIZES.items()])
        summary = summarize([r for r in runs if isinstance(r["round"], int)])
        return {
            "date": date, "seconds": round(time.monotonic() - started, 1),
            "machine": f"{os.cpu_count()} cores, {os.uname().release}; shared with other sessions",
            "loadavg_before_after": [load_before, os.getloadavg()],
            "router_profile": args.profile, "binaries": str(bin_dir),
            "nginx": f"{nginx_build().binary}, worker_processes {gw.settings.worker_processes} (gateway and plain)",
            "gateway": "stacks/Pulumi.gpu-cluster.yaml router.gateway, TLS off, + tenant "
                       f"{BENCH_TENANT['name']} ({BENCH_TENANT['rateLimit']}), its limiter",
            "engine": f"fake engine in its own process, {args.tokens} tokens per answer, {args.token_interval_ms} ms apart",
            "prompts": {p.name: {"bytes": len(p.body), "x_input_tokens": p.estimate} for p in prompts.values()},
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "skipped": skipped, "summary": summary, **extra, "runs": runs,
        }
    finally:
        for server in reversed(started_nginx):
            server.stop()
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def cells_of(args) -> list[tuple[str, int]]:
    """(prompt size, streams) to measure: ``--cells``, else every size at every concurrency."""
    if args.cells:
        cells = []
        for item in args.cells.split(","):
            size, _, n = item.partition(":")
            if size not in SIZES or not n.isdigit() or int(n) < 1:
                raise ValueError(f"--cells: {item!r} is not SIZE:STREAMS with SIZE one of {', '.join(SIZES)}, "
                                 "e.g. 220KB:20")
            cells.append((size, int(n)))
        return cells
    unknown = set(args.sizes.split(",")) - set(SIZES)
    if unknown:
        raise ValueError(f"--sizes: unknown {', '.join(sorted(unknown))}; choose from {', '.join(SIZES)}")
    return [(size, int(n)) for size in args.sizes.split(",") for n in args.streams.split(",")]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the smallest case: 1 KB × 1 stream, one round, 2 s windows")
    p.add_argument("--profile", choices=("release", "debug"), default="release", help="the router and pylon build")
    p.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, of {', '.join(SIZES)}")
    p.add_argument("--streams", default="1,20,64")
    p.add_argument("--cells", default=None, help="instead of --sizes x --streams: SIZE:STREAMS,... e.g. 220KB:20,32KB:64")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=5.0, help="each run's measured window")
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--stagger-s", type=float, default=0.5, help="workers start spread over this")
    p.add_argument("--tokens", type=int, default=16, help="tokens per answer")
    p.add_argument("--token-interval-ms", type=float, default=10.0, help="the engine's pause after each event")
    p.add_argument("--budget-s", type=float, default=900, help="the sweep stops starting cells after this")
    p.add_argument("--perf", action="store_true", help="at 20 × 220 KB: perf profile of the gateway, and its render "
                                                       "without keys")
    p.add_argument("--json", type=Path, default=None)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if args.quick:
        args.cells, args.rounds, args.seconds = "1KB:1", 1, 2.0
    try:
        cells_of(args)
    except ValueError as error:
        parser().error(str(error))
    return args


def for_suite(quick: bool, seconds_left: float) -> dict:
    """bench/run.py's entry: ``--quick``'s smallest case, or the goal's two cells (20 × 220 KB,
    64 × 32 KB) for one round; on the release router build when one is cached, else on the debug
    build (building a release takes many minutes; the result names the build it ran)."""
    argv = ["--quick"] if quick else ["--cells", "220KB:20,32KB:64", "--rounds", "1", "--seconds", "4"]
    argv += ["--profile", "release" if release_cached() else "debug", "--budget-s", str(max(30.0, seconds_left))]
    return bench(parse(argv))


def main(argv: Optional[list[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    result = bench(args)
    print(table(result["summary"]))
    print(json.dumps(result["summary"]["verdict"]))
    if "decomposition_at_20x220KB" in result:
        print(json.dumps(result["decomposition_at_20x220KB"], indent=2))
        print(steps_table(result["njs_steps_ms"]))
    if result["skipped"]:
        print("not measured (budget): " + "; ".join(result["skipped"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
