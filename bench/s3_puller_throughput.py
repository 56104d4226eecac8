"""Throughput of the object-store puller (the compiled Job as `pulumi up` renders it after preview:
its `pull` init container, rclone with the flags we render, then its `verify` container) against a
plain parallel copy of the same objects from the same S3 server on loopback. Not a test: prints
medians, ratios and CPU per byte; ``--json`` writes them.

    .venv/bin/python bench/s3_puller_throughput.py [--shapes 4x512,16x128] [--runs 3] [--json out.json]

A shape ``NxM`` is N objects of M MiB. ``--multipart``: each object uploaded in 8 MiB parts
without rclone's MD5 metadata (as ``aws s3 cp`` does: ETag ``<md5>-<parts>``), so rclone has no MD5
to check during the copy and the pull step recomputes the multipart ETag from the copy instead
(``object_store.PULL_PARTS_SCRIPT``); the arm "multipart ETag check off" is that Job without the check
(what it rendered before: such objects were checked by size only). The puller's flags depend on preview's listing (ranged
streams only to fill the 16 transfer slots: ``object_store.copy_flags``), so the bench previews the
store first, as `pulumi up` does, and runs the Job that listing renders.

Arms, alternated within each run so machine load hits them alike:
- the puller Job (pull + verify), MD5-checked;
- the plain parallel copy: one `curl --aws-sigv4` per object, all at once (the tool a human would
  reach for; no client logic of ours in the way);
- the same followed by an `md5sum` of each object in parallel (the check the puller also makes);
- where the listing renders fewer than 8 ranged streams, the same Job with 8 (what it rendered
  before ``copy_flags``);
- a second peer, rclone with the very flags rendered plus `--ignore-checksum` (and no multipart
  ETag check): the same client without the check; if it beats curl, curl's figure is not the
  server's limit;
- a local file copy of the same bytes (the machine's ceiling).
CPU seconds of the client processes (wait4) and of the server (/proc) are recorded per arm: on a
2-core machine the server and the client share the CPUs, and the puller's MD5 is CPU.

The containers' scripts run with busybox's sh and applets (dd, md5sum...) when it is installed, as
in the image. Server: versitygw (posix backend; testkit/s3_server.py) built by scripts/testtools/build.sh,
serving files from the page cache.
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
from components.compile import common, object_store, weights
from components.config import load_stack_config
from components.preflight import preflight_stack
from components.preflight.s3 import ENDPOINT_ENV
from testkit.busybox import applets, shell
from testkit.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server, tools_bin

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")

BUCKET, PREFIX = "bench", "model/"
JOB = "puller Job as rendered (pull + verify, MD5-checked)"
PLAIN = "plain parallel copy (curl per object)"
PLAIN_MD5 = "plain parallel copy + md5sum per object"
NOCHECK = "rclone, rendered flags + --ignore-checksum"
BEFORE = "puller Job, 8 ranged streams per large file (before)"
LOCAL = "local file copy"
NOPARTS = "puller Job, multipart ETag check off (before)"


def previewed_job(endpoint: str, volume: Path) -> dict:
    """The puller Job of a stack previewed against the server (the listing pinned, as `pulumi up`)."""
    config = load_stack_config({"models": [{"name": "bench", "weights": {"size": "100Gi"}, "source": {
        "type": "s3", "bucket": BUCKET, "prefix": PREFIX, "endpoint": "http://minio.storage.svc:9000",
        "credentials": {"secret": "keys"}}}]})
    model = config.models[0]
    model = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": endpoint})})
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, ENDPOINT_ENV: endpoint}
    config = preflight_stack(config.model_copy(update={"models": (model,)}), env=env).stack
    common.WEIGHTS_MOUNT = str(volume)
    return weights.compile_puller_job(config.models[0], config.platform)


def server_cpu(server: S3Server) -> float:
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_all(procs: list[subprocess.Popen], what: str) -> float:
    """Wait for every process; their CPU seconds (user + system)."""
    cpu = 0.0
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        if proc.returncode != 0:
            err = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise SystemExit(f"{what} failed ({proc.returncode}):\n{err}")
    return cpu


def container_argv(container: dict, tmp: Path) -> tuple[list[str], dict[str, str]]:
    # The scripts' sh, dd, md5sum...: busybox's, as in the image (Alpine); the peers keep the host's.
    env = {"PATH": f"{applets(tmp)}{os.environ['PATH']}", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
           "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
    env["HOME"] = str(tmp)
    argv = [*shell(), "-c", container["command"][2].replace("/tmp/", f"{tmp}/"), *container["command"][3:],
            *container["args"]]
    return argv, env


def timed_job(server: S3Server, work: Path, extra_flags: tuple[str, ...] = (),
              verify: bool = True, parts_check: bool = True) -> tuple[float, float, float, float]:
    """(seconds, client cpu, server cpu, verify seconds) of the Job's containers in order."""
    volume = work / f"volume-{time.monotonic_ns()}"
    volume.mkdir()
    spec = previewed_job(server.url, volume)["spec"]["template"]["spec"]
    tmp = work / "pod-tmp"
    tmp.mkdir(exist_ok=True)
    containers = [*spec["initContainers"], *(spec["containers"] if verify else [])]
    cpu, verify_seconds, server0 = 0.0, 0.0, server_cpu(server)
    start = time.perf_counter()
    for container in containers:
        argv, env = container_argv(container, tmp)
        if not parts_check and "LLM_SERVING_PARTS" in env:  # the Job as rendered without part sizes
            env.pop("LLM_SERVING_PARTS")
            argv[argv.index("-c") + 1] = object_store.PULL_SCRIPT.replace("/tmp/", f"{tmp}/")
        if container["name"] == "pull":
            argv += list(extra_flags)
        began = time.perf_counter()
        cpu += wait_all([subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)],
                        container["name"])
        if container["name"] == "verify":
            verify_seconds = time.perf_counter() - began
    elapsed = time.perf_counter() - start
    server_seconds = server_cpu(server) - server0
    shutil.rmtree(volume)
    return elapsed, cpu, server_seconds, verify_seconds


def timed_plain(server: S3Server, names: list[str], work: Path, md5: bool = False) -> tuple[float, float, float, float]:
    target = work / f"plain-{time.monotonic_ns()}"
    target.mkdir()
    server0 = server_cpu(server)
    start = time.perf_counter()
    cpu = wait_all([subprocess.Popen(["curl", "-sf", "--aws-sigv4", f"aws:amz:{REGION}:s3", "--user",
                                      f"{ACCESS_KEY}:{SECRET_KEY}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                                      "-o", str(target / name), f"{server.url}/{BUCKET}/{PREFIX}{name}"])
                    for name in names], "plain copy")
    if md5:  # the same work as the puller's check of every object's MD5 (one md5sum per object, in parallel)
        cpu += wait_all([subprocess.Popen(["md5sum", str(target / name)], stdout=subprocess.DEVNULL)
                         for name in names], "md5sum")
    elapsed = time.perf_counter() - start
    server_seconds = server_cpu(server) - server0
    shutil.rmtree(target)
    return elapsed, cpu, server_seconds, 0.0


def timed_local(files: list[Path], work: Path) -> tuple[float, float, float, float]:
    return timed_copy(files, work), 0.0, 0.0, 0.0


def bench_shape(count: int, mib: int, runs: int, work: Path, bin_dir: Path, multipart: bool = False) -> dict:
    root = work / f"s3-{count}x{mib}"
    with S3Server(root, bin_dir) as server:
        server.bucket(BUCKET)
        # Uploaded through the S3 API in one part each (MD5 ETags: the puller checks the MD5 of
        # what it copies, as it will in a cluster); the server then reads the bucket folder's files.
        names = [f"model-{index + 1:05d}-of-{count:05d}.safetensors" for index in range(count)]
        parts = {"multipart_over": 8 << 20, "md5_metadata": False, "part_mib": 8} if multipart else {}
        for name in names:  # one at a time: the bytes of all at once need not sit in memory
            server.upload(BUCKET, PREFIX, {name: os.urandom(mib << 20)}, **parts)
        files = [root / "data" / BUCKET / PREFIX / n for n in names]
        total = sum(p.stat().st_size for p in files)
        streams = next(a for a in previewed_job(server.url, work)["spec"]["template"]["spec"]["initContainers"][0]["args"]
                       if a.startswith("--multi-thread-streams="))
        timed_plain(server, names, work)  # warm the page cache and the server
        arms: dict[str, list[tuple[float, float, float, float]]] = {JOB: [], PLAIN: [], PLAIN_MD5: [], NOCHECK: [], LOCAL: []}
        if streams != "--multi-thread-streams=8" and not multipart:
            arms[BEFORE] = []
        if multipart:
            arms[NOPARTS] = []
        for _ in range(runs):
            arms[JOB].append(timed_job(server, work))
            if NOPARTS in arms:
                arms[NOPARTS].append(timed_job(server, work, parts_check=False))
            if BEFORE in arms:
                arms[BEFORE].append(timed_job(server, work, ("--multi-thread-streams=8",)))
            arms[PLAIN].append(timed_plain(server, names, work))
            arms[PLAIN_MD5].append(timed_plain(server, names, work, md5=True))
            arms[NOCHECK].append(timed_job(server, work, ("--ignore-checksum",), verify=False, parts_check=False))
            arms[LOCAL].append(timed_local(files, work))
    shutil.rmtree(root)

    def med(name: str, index: int) -> float:
        return statistics.median(sample[index] for sample in arms[name])

    rates = {name: total / med(name, 0) / 1e6 for name in arms}
    return {
        "shape": f"{count} objects of {mib} MiB" + (" in 8 MiB parts (no MD5 metadata)" if multipart else ""),
        "bytes": total, "rendered": streams, "runs": runs,
        "MB_per_s": {k: round(v, 1) for k, v in rates.items()},
        "client_cpu_ns_per_byte": {k: round(med(k, 1) * 1e9 / total, 2) for k in arms if k != LOCAL},
        "server_cpu_ns_per_byte": {k: round(med(k, 2) * 1e9 / total, 2) for k in arms if k != LOCAL},
        "verify_seconds": round(med(JOB, 3), 3),
        "seconds": {k: [round(s[0], 3) for s in v] for k, v in arms.items()},
        "job_vs_plain": round(rates[JOB] / rates[PLAIN], 2),
        "job_vs_plain_md5": round(rates[JOB] / rates[PLAIN_MD5], 2),
        "before_vs_plain": round(rates[BEFORE] / rates[PLAIN], 2) if BEFORE in rates else None,
        "parts_check_off_vs_plain": round(rates[NOPARTS] / rates[PLAIN], 2) if NOPARTS in rates else None,
        "job_vs_parts_check_off": round(rates[JOB] / rates[NOPARTS], 2) if NOPARTS in rates else None,
        "nocheck_vs_plain": round(rates[NOCHECK] / rates[PLAIN], 2),
        "plain_vs_local": round(rates[PLAIN] / rates[LOCAL], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4x512,16x128", help="NxM: N objects of M MiB, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--multipart", action="store_true",
                        help="objects uploaded in 8 MiB parts without rclone's MD5 (as aws s3 cp)")
    args = parser.parse_args()
    bin_dir = tools_bin()
    os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"  # `rclone` in the containers' scripts
    load_before = os.getloadavg()[0]
    shapes = []
    with tempfile.TemporaryDirectory(prefix="s3-bench-") as tmp:
        for shape in args.shapes.split(","):
            count, mib = (int(x) for x in shape.split("x"))
            shapes.append(bench_shape(count, mib, args.runs, Path(tmp), bin_dir, args.multipart))
    report = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": f"{platform.node()} {os.cpu_count()} cpu",
        "load": [round(load_before, 1), round(os.getloadavg()[0], 1)], "shapes": shapes,
    }
    for result in shapes:
        print(f"{result['shape']} ({result['bytes'] / 1e6:.0f} MB; puller rendered {result['rendered']}), "
              f"medians of {result['runs']}:")
        for name, rate in result["MB_per_s"].items():
            cpu = (f"  client {result['client_cpu_ns_per_byte'][name]:.2f} ns/B, server "
                   f"{result['server_cpu_ns_per_byte'][name]:.2f} ns/B" if name != LOCAL else "")
            print(f"  {name:52s} {rate:8.1f} MB/s{cpu}")
        print(f"  Job / plain copy: {result['job_vs_plain']}x   Job / plain copy + md5: {result['job_vs_plain_md5']}x   "
              f"rclone without the check / plain copy: {result['nocheck_vs_plain']}x   plain / local: "
              f"{result['plain_vs_local']}x   verify step: {result['verify_seconds']} s"
              + (f"   before / plain copy: {result['before_vs_plain']}x" if result["before_vs_plain"] else "")
              + (f"   Job / check off: {result['job_vs_parts_check_off']}x" if result["job_vs_parts_check_off"] else ""))
    print(f"{report['when']}, {report['machine']}, load {report['load'][0]} before, {report['load'][1]} after")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
