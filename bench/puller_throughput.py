"""Throughput of the weight puller against a loopback Hub, next to a plain parallel copy of the
same bytes from the same server and a plain file copy (the ceilings on this machine). Not a test:
prints medians and the ratios, all from one run.

    nice .venv/bin/python bench/puller_throughput.py [--mb 1000] [--shards 4] [--runs 3] [--sweep-workers]

The puller is the compiled Job's exact command line and env, run with the `hf` of the pinned vLLM
image's huggingface_hub line with hf_transfer (``hf_server.hub_cli``: 0.35.3 + hf_transfer 0.1.9),
into a fresh directory per run: once as rendered (HF_HUB_ENABLE_HF_TRANSFER=0) and once with
hf_transfer on (=1; weights.hub_env says why it stays off). hf_transfer only takes files over
50 MiB (5 x the client's 10 MiB read), so the shards are larger than that. The server is
scripts/localmodel/hub_server.py (plain HTTP, no Xet) sending the files with sendfile; the arms
alternate within each run. Both sides read the generated shards from the page cache, so the
ratios measure the clients, not the disk. Each pull's CPU time (user + system: the figure the
shared machine's load does not bend) and peak RSS are reported too (the puller's memory limit is
4 GiB; hf_transfer holds each 10 MiB range in memory until it is whole).
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
from scripts.localmodel.hub_server import HubServer
from testkit.hf_server import hub_cli, write_model_shards

RUN_TIMEOUT = 300
HF_TRANSFER_ON = {"HF_HUB_ENABLE_HF_TRANSFER": "1"}


def puller_command(endpoint: str, volume: Path, extra: list[str], env_override: dict | None = None) -> tuple[list[str], dict]:
    config = load_stack_config({"models": [{"name": "bench", "source": {"repo": "bench/model"}}]})
    platform_config = config.platform.model_copy(update={"hf_endpoint": endpoint})  # loopback: see tests/puller
    common.WEIGHTS_MOUNT = str(volume)
    job = weights.compile_puller_job(config.models[0], platform_config)
    # The Job's `hf download` (its init container; the verify step after it is not timed here:
    # docs/weight-sources.md has its cost).
    (container,) = job["spec"]["template"]["spec"]["initContainers"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(volume.parent / "home"),
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.update({item["name"]: item["value"] for item in container["env"] if "value" in item})
    env.update(env_override or {})
    return [str(hub_cli()), *container["args"], *extra], env


def run_pull(endpoint: str, work: Path, extra: list[str], rerun: bool = False,
             env_override: dict | None = None) -> tuple[float, int, float, float]:
    """Seconds, peak RSS (bytes), CPU seconds of the puller and CPU seconds of this process (the
    hub's threads: nothing else runs here meanwhile) for one pull into a fresh volume (``rerun``: the second pull, a
    no-op, which is the CLI's fixed cost: interpreter start, imports, resolving the revision)."""
    volume = work / f"volume-{time.monotonic_ns()}"
    volume.mkdir()
    argv, env = puller_command(endpoint, volume, extra, env_override)
    for _attempt in range(2 if rerun else 1):
        start, own = time.perf_counter(), os.times()
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _pid, status, usage = os.wait4(process.pid, 0)
        elapsed, own_after = time.perf_counter() - start, os.times()
        stderr = process.stderr.read().decode(errors="replace")
        process.stderr.close()
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"puller failed:\n{stderr[-2000:]}")
    shutil.rmtree(volume)
    server = (own_after.user - own.user) + (own_after.system - own.system)
    return elapsed, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime, server


def timed_pull(endpoint: str, work: Path, extra: list[str], rerun: bool = False,
               env_override: dict | None = None) -> float:
    return run_pull(endpoint, work, extra, rerun, env_override)[0]


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
    parser.add_argument("--mb", type=int, default=1000, help="total size of the generated safetensors")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sweep-workers", action="store_true", help="also time --max-workers 2 and 16, as rendered")
    parser.add_argument("--connection-mb-s", type=float, default=None,
                        help="cap each server connection at this many MB/s (a link one stream cannot fill)")
    args = parser.parse_args()

    arms: dict[str, tuple[list[str], dict]] = {
        "puller as rendered (hf_transfer off)": ([], {}),
        "puller, hf_transfer on": ([], HF_TRANSFER_ON),
    }
    if args.sweep_workers:
        arms.update({"puller as rendered, --max-workers 2": (["--max-workers", "2"], {}),
                     "puller as rendered, --max-workers 16": (["--max-workers", "16"], {})})
    with tempfile.TemporaryDirectory(prefix="puller-bench-") as tmp:
        work = Path(tmp)
        files = write_model_shards(work / "source", args.mb * 10**6, args.shards)
        total = sum(p.stat().st_size for p in files.values())
        rate = int(args.connection_mb_s * 10**6) if args.connection_mb_s else None
        with HubServer(work / "hub", connection_rate=rate) as hub:
            hub.commit("bench/model", dict(files))
            for extra, env in arms.values():  # warm-up: page cache, imports
                run_pull(hub.url, work, extra, env_override=env)
            plain, copy = [], []
            seconds, rss, cpu, server = ({name: [] for name in arms} for _ in range(4))
            for index in range(args.runs):
                # Alternate the order so no arm always runs right after the same one.
                order = list(arms) if index % 2 == 0 else list(reversed(arms))
                plain.append(timed_plain(hub.url, list(files), work))
                for name in order:
                    extra, env = arms[name]
                    elapsed, peak, used, served = run_pull(hub.url, work, extra, env_override=env)
                    server[name].append(served)
                    seconds[name].append(elapsed)
                    rss[name].append(peak)
                    cpu[name].append(used)
                copy.append(timed_copy(list(files.values()), work))
            noop = statistics.median(timed_pull(hub.url, work, [], rerun=True) for _ in range(args.runs))

    mb = total / 10**6
    plain_s, copy_s = statistics.median(plain), statistics.median(copy)
    load = os.getloadavg()[0]
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC {platform.node()} {os.cpu_count()} cores (load {load:.1f}), "
          f"Python {platform.python_version()}; {mb:.0f} MB in {args.shards} safetensors shards + config, "
          f"median of {args.runs} runs"
          + (f"; every server connection capped at {args.connection_mb_s:g} MB/s" if args.connection_mb_s else ""))
    print(f"  {'plain file copy':40s} {copy_s:7.3f} s  {mb / copy_s:8.1f} MB/s")
    print(f"  {'plain parallel copy from the server':40s} {plain_s:7.3f} s  {mb / plain_s:8.1f} MB/s  (curl per file)")
    for name in arms:
        pull = statistics.median(seconds[name])
        print(f"  {name:40s} {pull:7.3f} s  {mb / pull:8.1f} MB/s  to the plain parallel copy "
              f"{plain_s / pull:.2f}x, to the file copy {copy_s / pull:.2f}x; "
              f"CPU {statistics.median(cpu[name]):.2f} s (hub {statistics.median(server[name]):.2f} s), "
              f"peak RSS {max(rss[name]) / 2**20:.0f} MiB")
    print(f"  {'puller re-run (no-op: fixed cost)':40s} {noop:7.3f} s")
    print("  runs (s): plain " + " ".join(f"{v:.3f}" for v in plain) + "; "
          + "; ".join(f"{name}: " + " ".join(f"{v:.3f}" for v in values) for name, values in seconds.items()))


if __name__ == "__main__":
    main()
