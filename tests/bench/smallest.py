"""Every benchmark's smallest case, one line each: the script, its arguments, the tier that has
what it starts (tests/tiers.py). tests/bench runs each line, so a benchmark broken by a refactor
fails the test command instead of the next person who measures (bench/run.py --quick failed for
days that way, 2026-12). A new script in bench/ is one line here (test_bench_smoke.py fails on a
script with a `__main__` and no line). ``--json`` is appended where ``json`` is True.

The figures of these runs mean nothing (one sample, the fewest models); the figures to quote are
in docs/10-benchmarks.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    script: str  # under bench/
    args: tuple[str, ...]
    tier: str  # unit, servers, cluster, engine; "crds": the cluster tier's crds group (KEDA's CRDs)
    json: bool = True  # the script takes --json PATH and writes its results there
    timeout: float = 240  # seconds; each run is bounded by its own budget well below this


SMALLEST = (
    # In-process: the router's target computation (1k endpoints, once).
    Case("run.py", ("--smoke", "--only", "targets"), "unit", timeout=60),
    # The puller through the image's hf client from a loopback hub (8 MB, once), and large prompts
    # through the gateway (1 KB x 1 stream).
    Case("run.py", ("--smoke", "--only", "puller,gateway-prompts"), "servers", timeout=240),
    Case("puller_throughput.py", ("--mb", "8", "--shards", "1", "--runs", "1"), "servers", json=False, timeout=120),
    Case("s3_puller_throughput.py", ("--shapes", "1x4", "--runs", "1"), "servers", timeout=120),
    # The gateway, router and pylon on loopback.
    Case("gateway.py", ("--pairs", "2", "--tokens", "20", "--runs", "1"), "servers", timeout=120),
    Case("gateway_resolver.py", ("--pairs", "5",), "servers", json=False, timeout=120),
    # Large prompts through the gateway: 1 KB x 1 stream, one round, the debug router build.
    Case("gateway_prompts.py", ("--quick", "--profile", "debug"), "servers", timeout=180),
    Case("concurrency.py", ("--profile", "debug", "--streams", "1", "--seconds", "1", "--rounds", "1", "--tokens", "8"),
         "servers", timeout=180),
    # `pulumi up` and preview on the simulated cluster: one pair each, 2 models for "8", 10 for "100".
    Case("run.py", ("--smoke", "--only", "overhead,parallel,reaction,status,scale"), "cluster", timeout=420),
    # KEDA's operator on the simulated cluster (installs KEDA's CRDs: the crds group's cluster).
    Case("wake.py", ("--cycles", "1"), "crds", timeout=240),
    # The real vLLM (0.11 line) behind the whole path, one stream, one burst. No cold-start pair: each
    # vLLM start is ~60 CPU-s and the pair is two more (plain_start is the one part not run here).
    Case("engine_path.py", ("--line", "0.11", "--starts", "0", "--rounds", "1", "--tokens", "8", "--concurrency", "1"),
         "engine", timeout=600),
)
