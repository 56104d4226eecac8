"""Throughput of the weight puller against a loopback Hub, next to a plain file copy of the same
bytes (the ceiling on this machine). Not a test: prints medians and the ratio.

    .venv/bin/python bench/puller_throughput.py [--mb 200] [--shards 4] [--runs 3] [--sweep-workers]

The puller is the compiled Job's exact command line (the `hf` CLI of the pinned huggingface_hub,
with the Job's env), into a fresh directory per run; the server is tests/support/hf_server.py
(plain HTTP, no Xet) sending the files with sendfile. Both sides read the generated shards from
the page cache, so the ratio measures the client's overhead, not the disk.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root

from components.compile import common, weights
from components.config import load_stack_config
from tests.support.hf_server import HubServer, write_model_shards

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / ".venv" / "bin" / "hf"
RUN_TIMEOUT = 300


def puller_command(endpoint: str, volume: Path, extra: list[str]) -> tuple[list[str], dict]:
    config = load_stack_config({"models": [{"name": "bench", "source": {"repo": "bench/model"}}]})
    platform_config = config.platform.model_copy(update={"hf_endpoint": endpoint})  # loopback: see tests/puller
    common.WEIGHTS_MOUNT = str(volume)
    job = weights.compile_puller_job(config.models[0], platform_config)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(volume.parent / "home"),
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.update({item["name"]: item["value"] for item in container["env"] if "value" in item})
    return [str(HF), *container["args"], *extra], env


def timed_pull(endpoint: str, work: Path, extra: list[str], rerun: bool = False) -> float:
    """Seconds for one pull into a fresh volume (``rerun``: the second pull, a no-op, which is
    the CLI's fixed cost: interpreter start, imports, resolving the revision)."""
    volume = work / f"volume-{time.monotonic_ns()}"
    volume.mkdir()
    argv, env = puller_command(endpoint, volume, extra)
    for _attempt in range(2 if rerun else 1):
        start = time.perf_counter()
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        elapsed = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit(f"puller failed:\n{result.stderr[-2000:]}")
    shutil.rmtree(volume)
    return elapsed


def timed_copy(files: list[Path], work: Path) -> float:
    target = work / f"copy-{time.monotonic_ns()}"
    target.mkdir()
    start = time.perf_counter()
    for path in files:
        shutil.copyfile(path, target / path.name)
    elapsed = time.perf_counter() - start
    shutil.rmtree(target)
    return elapsed


def timed_plain(url: str, names: list[str], work: Path) -> float:
    """A plain parallel copy from the same server: one curl per file, all at once."""
    target = work / f"plain-{time.monotonic_ns()}"
    target.mkdir()
    start = time.perf_counter()
    procs = [subprocess.Popen(["curl", "-sfL", "-o", str(target / name.replace("/", "_")),
                               f"{url}/bench/model/resolve/main/{name}"]) for name in names]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("plain copy failed")
    elapsed = time.perf_counter() - start
    shutil.rmtree(target)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="total size of the generated safetensors")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sweep-workers", action="store_true", help="also time --max-workers 1 and 16")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="puller-bench-") as tmp:
        work = Path(tmp)
        files = write_model_shards(work / "source", args.mb * 10**6, args.shards)
        total = sum(p.stat().st_size for p in files.values())
        with HubServer(work / "hub") as hub:
            hub.commit("bench/model", dict(files))
            timed_pull(hub.url, work, [])  # warm-up: page cache, imports
            arms = {"puller (max-workers 8, the default)": []}
            if args.sweep_workers:
                arms.update({"puller --max-workers 1": ["--max-workers", "1"],
                             "puller --max-workers 16": ["--max-workers", "16"]})
            results = {}
            plain = statistics.median(timed_plain(hub.url, list(files), work) for _ in range(args.runs))
            noop = statistics.median(timed_pull(hub.url, work, [], rerun=True) for _ in range(args.runs))
            for name, extra in arms.items():
                results[name] = statistics.median(timed_pull(hub.url, work, extra) for _ in range(args.runs))
        copy = statistics.median(timed_copy(list(files.values()), work) for _ in range(args.runs))

    mb = total / 10**6
    print(f"{datetime.now(UTC):%Y-%m-%d} {platform.node()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; {mb:.0f} MB in {args.shards} safetensors shards + config, "
          f"median of {args.runs} runs")
    print(f"  {'plain file copy':40s} {copy:7.3f} s  {mb / copy:8.1f} MB/s")
    print(f"  {'plain parallel copy from the server':40s} {plain:7.3f} s  {mb / plain:8.1f} MB/s  (curl per file)")
    for name, seconds in results.items():
        print(f"  {name:40s} {seconds:7.3f} s  {mb / seconds:8.1f} MB/s  ratio to copy {copy / seconds:.2f}, "
              f"to the plain parallel copy {plain / seconds:.2f}")
    print(f"  {'puller re-run (no-op: fixed cost)':40s} {noop:7.3f} s")
    default = next(iter(results.values()))
    print(f"  transfer alone (default minus fixed cost): {mb / (default - noop):.1f} MB/s, "
          f"ratio to copy {copy / (default - noop):.2f}")


if __name__ == "__main__":
    main()
