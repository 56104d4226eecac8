"""Throughput of the object-store puller (the compiled Job's `pull` container: rclone with the
flags we render) against a plain parallel copy of the same objects from the same S3 server on
loopback, and a local file copy of the same bytes (the machine's ceiling). Not a test: prints
medians and ratios; ``--json`` writes them.

    .venv/bin/python bench/s3_puller_throughput.py [--mb 1024] [--shards 4] [--runs 3] [--json out.json]

Server: versitygw (posix backend; tests/support/s3_server.py) built by scripts/testtools/build.sh, serving files from the page
cache. Plain parallel copy: one `curl --aws-sigv4` per object, all at once (the tool a human
would reach for; no client logic of ours in the way); and the same followed by an `md5sum` of
each object in parallel, which is the work the puller also does (rclone checks the MD5 of every
object whose ETag is one). The arms alternate within each run, so
machine load hits them alike. The server is not the bottleneck when the plain copy over HTTP comes
close to the local copy: the script prints both.
"""

from __future__ import annotations

import argparse
import json
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

from bench.puller_throughput import timed_copy
from components.compile import common, weights
from components.config import load_stack_config
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server, tools_bin

ROOT = Path(__file__).resolve().parents[1]

BUCKET, PREFIX = "bench", "model/"
PULLER = "puller (rclone, rendered flags, MD5-checked)"
PLAIN = "plain parallel copy (curl per object)"
PLAIN_MD5 = "plain parallel copy + md5sum per object"
LOCAL = "local file copy"


def pull_container(endpoint: str, volume: Path) -> dict:
    config = load_stack_config({"models": [{"name": "bench", "source": {
        "type": "s3", "bucket": BUCKET, "prefix": PREFIX, "endpoint": "http://minio.storage.svc:9000",
        "credentials": {"secret": "keys"}}}]})
    model = config.models[0]
    model = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": endpoint})})
    common.WEIGHTS_MOUNT = str(volume)
    job = weights.compile_puller_job(model, config.platform)
    return job["spec"]["template"]["spec"]["initContainers"][0]


def timed_puller(endpoint: str, work: Path, bin_dir: Path) -> float:
    volume = work / f"volume-{time.monotonic_ns()}"
    volume.mkdir()
    container = pull_container(endpoint, volume)
    tmp = work / "pod-tmp"
    tmp.mkdir(exist_ok=True)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
           "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
    env["HOME"] = str(tmp)
    argv = ["sh", "-c", container["command"][2].replace("/tmp/", f"{tmp}/"), *container["command"][3:],
            *container["args"]]
    start = time.perf_counter()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"puller failed:\n{result.stderr[-2000:]}")
    shutil.rmtree(volume)
    return elapsed


def timed_plain(endpoint: str, names: list[str], work: Path, md5: bool = False) -> float:
    target = work / f"plain-{time.monotonic_ns()}"
    target.mkdir()
    start = time.perf_counter()
    procs = [subprocess.Popen(["curl", "-sf", "--aws-sigv4", f"aws:amz:{REGION}:s3", "--user",
                               f"{ACCESS_KEY}:{SECRET_KEY}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                               "-o", str(target / name),
                               f"{endpoint}/{BUCKET}/{PREFIX}{name}"]) for name in names]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("plain copy failed")
    if md5:  # the same work as the puller's check of every object's MD5 (one md5sum per object, in parallel)
        sums = [subprocess.Popen(["md5sum", str(target / name)], stdout=subprocess.DEVNULL) for name in names]
        if any(p.wait() != 0 for p in sums):
            raise SystemExit("md5sum failed")
    elapsed = time.perf_counter() - start
    shutil.rmtree(target)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="total size of the shards")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bin_dir = tools_bin()
    with tempfile.TemporaryDirectory(prefix="s3-bench-") as tmp:
        work = Path(tmp)
        with S3Server(work / "s3", bin_dir) as server:
            server.bucket(BUCKET)
            # Uploaded through the S3 API (real ETags: the puller verifies the MD5 of what it
            # copies, as it will in a cluster); the server then reads the bucket folder's files.
            size = args.mb * (1 << 20) // args.shards
            names = [f"model-{index + 1:05d}-of-{args.shards:05d}.safetensors" for index in range(args.shards)]
            server.upload(BUCKET, PREFIX, {name: os.urandom(size) for name in names})
            files = [work / "s3" / "data" / BUCKET / PREFIX / n for n in names]
            total = sum(p.stat().st_size for p in files)
            timed_plain(server.url, names, work)  # warm the page cache and the server
            arms: dict[str, list[float]] = {PULLER: [], PLAIN: [], PLAIN_MD5: [], LOCAL: []}
            for _ in range(args.runs):
                arms[PULLER].append(timed_puller(server.url, work, bin_dir))
                arms[PLAIN].append(timed_plain(server.url, names, work))
                arms[PLAIN_MD5].append(timed_plain(server.url, names, work, md5=True))
                arms[LOCAL].append(timed_copy(files, work))
    rates = {name: total / statistics.median(times) / 1e6 for name, times in arms.items()}
    plain = rates[PLAIN]
    report = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": f"{platform.node()} {os.cpu_count()} cpu",
        "load": os.getloadavg()[0], "bytes": total, "shards": args.shards, "runs": args.runs,
        "MB_per_s": {k: round(v, 1) for k, v in rates.items()},
        "seconds": {k: [round(t, 3) for t in v] for k, v in arms.items()},
        "puller_vs_plain": round(rates[PULLER] / plain, 2),
        "puller_vs_plain_md5": round(rates[PULLER] / rates[PLAIN_MD5], 2),
        "plain_vs_local": round(plain / rates[LOCAL], 2),
    }
    for name, rate in rates.items():
        print(f"{name:42s} {rate:8.1f} MB/s  (median of {args.runs}: {statistics.median(arms[name]):.2f} s)")
    print(f"puller / plain copy: {report['puller_vs_plain']}x   puller / plain copy + md5: "
          f"{report['puller_vs_plain_md5']}x   plain copy / local copy: {report['plain_vs_local']}x   "
          f"load {report['load']:.1f} on {os.cpu_count()} cpus")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
