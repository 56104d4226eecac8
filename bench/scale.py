"""Program scale: `pulumi preview` and `validate` + `render` of stacks with 10 / 100 / 300 models,
and profiles of what dominates (the engine with Go pprof, the program and the CLI with cProfile).

Preview runs in a harness Project; the render stack (renderYamlToDirectory) needs no cluster,
the cluster stack is only previewed (nothing is created). Each preview's CPU is split by process
(pulumi CLI = the engine, python = the program and the dynamic-provider host,
pulumi-resource-kubernetes = the provider) by sampling /proc.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

import yaml
from cluster import ROOT, BenchError, cpu_ticks, new_project, run_pulumi, small_model, stack_config

from components.cli import render
from components.config import load_stack_config, read_stack_file
from components.preview_report.runner import PREVIEW_ENV, PREVIEW_PARALLEL

PYTHON = ROOT / ".venv" / "bin" / "python"
_TICK = os.sysconf("SC_CLK_TCK")


class ProcessCpu:
    """CPU seconds of this process's descendants, by executable name (sampled every 0.2 s)."""

    def __init__(self):
        self.seen: dict[int, tuple[str, float]] = {}
        self._roles: dict[tuple[int, str], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcessCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            table = {}
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                close = stat.rindex(")")
                fields = stat[close + 2:].split()
                table[int(entry)] = (int(fields[1]), stat[stat.index("(") + 1:close],
                                     (int(fields[11]) + int(fields[12])) / _TICK)
            for pid, (parent, name, cpu) in table.items():
                hops, walk = 0, parent
                while walk in table and walk != me and hops < 20:
                    walk, hops = table[walk][0], hops + 1
                if walk == me:
                    if name.startswith("python"):
                        # Read once per process (a fork is "python" until it execs: key by name too).
                        if (pid, name) not in self._roles:
                            self._roles[(pid, name)] = self._python_role(pid)
                        name = self._roles[(pid, name)]
                    self.seen[pid] = (name, cpu)
            self._stop.wait(0.2)

    @staticmethod
    def _python_role(pid: int) -> str:
        """The program (run by the language host) or the dynamic-provider host (`-m pulumi.dynamic`)."""
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return "python"
        return "python-dynamic" if b"pulumi.dynamic" in command or any(
            part.endswith(b"pulumi/dynamic/__main__.py") for part in command) else "python"

    def by_name(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for name, cpu in self.seen.values():
            key = {"pulumi": "engine (pulumi CLI)", "python": "python (program)",
                   "python-dynamic": "python (dynamic providers)"}.get(
                name, "kubernetes provider" if name.startswith("pulumi-resource") else name)
            totals[key] = round(totals.get(key, 0.0) + cpu, 2)
        return totals


def machine_busy(before: tuple[int, int]) -> float:
    busy, total = cpu_ticks()
    return (busy - before[0]) / max(1, total - before[1])


def models(count: int) -> list[dict]:
    return [small_model(f"m{i:03d}") for i in range(count)]


def scale_config(count: int, render_dir: Optional[Path]) -> dict:
    config = stack_config("bench-scale", models(count))
    if render_dir is not None:
        config["cluster"] = {"renderYamlToDirectory": str(render_dir)}
    return config


def timed_preview(project, env: Optional[dict] = None, extra: tuple = ()) -> dict:
    saved = dict(project.env)
    project.env.update(env or {})
    try:
        with ProcessCpu() as cpu:
            busy = cpu_ticks()
            start = time.perf_counter()
            result = run_pulumi(project, "preview", *extra, timeout=400)
            seconds = time.perf_counter() - start
            busy = machine_busy(busy)
        if result.returncode != 0:
            raise BenchError(f"`pulumi preview` failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    finally:
        project.env = saved
    return {"seconds": seconds, "cpu": cpu.by_name(), "machine_busy": round(busy, 2)}


def timed_cli(config_file: Path, out: Path) -> dict:
    """Wall and CPU seconds of `validate` then `render`, each a fresh interpreter."""
    times = {}
    for command in (["validate", "--config", str(config_file)],
                    ["render", "--config", str(config_file), "--out", str(out)]):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([str(PYTHON), "-m", "components", *command], cwd=ROOT, check=True, capture_output=True,
                       timeout=300)
        times[command[0]] = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times[f"{command[0]}_cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        shutil.rmtree(out, ignore_errors=True)
    times["total"] = times["validate"] + times["render"]
    times["total_cpu"] = times["validate_cpu"] + times["render_cpu"]
    return times


def marginal(points: dict[int, float], a: int, b: int) -> Optional[float]:
    return (points[b] - points[a]) / (b - a) if a in points and b in points else None


# --- profiles ------------------------------------------------------------------------------

def _group(filename: str) -> str:
    if "site-packages/pulumi_kubernetes" in filename:
        return "pulumi_kubernetes SDK"
    if "site-packages/pulumi/" in filename:
        return "pulumi SDK"
    if "site-packages/grpc" in filename or "google/protobuf" in filename:
        return "grpc / protobuf"
    if "site-packages/pydantic" in filename:
        return "pydantic"
    if "/components/" in filename or "/providers/" in filename or "llm_serving_main" in filename:
        return "llm-serving code"
    if "asyncio" in filename or "selectors" in filename:
        return "asyncio"
    return "other"


def program_profile(path: Path) -> dict:
    """Where the program's own CPU goes (cProfile, main thread), grouped by package."""
    stats = pstats.Stats(str(path))
    groups: dict[str, float] = {}
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        if function in ("<method 'poll' of 'select.epoll' objects>",):
            continue  # idle: waiting for the engine
        group = _group(filename) if not filename.startswith("~") else "builtins"
        groups[group] = groups.get(group, 0.0) + tottime
    ours = sorted(((ct, f"{Path(f).parent.name}/{Path(f).name}:{fn}") for (f, _l, fn), (_c, _n, _t, ct, _cl)
                   in stats.stats.items() if _group(f) == "llm-serving code"), reverse=True)[:6]
    wall, cpu = (Path(str(path) + ".times").read_text().split() + ["0", "0"])[:2]
    return {"wall_s": round(float(wall), 2), "cpu_s": round(float(cpu), 2),
            "self_time_by_package_s": {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
            "our_functions_cumulative_s": [(name, round(ct, 3)) for ct, name in ours]}


def engine_profile(prefix: Path) -> Optional[dict]:
    """Top of the engine's Go CPU profile (`pulumi --profiling`), if `go` is here to read it."""
    profiles = sorted(prefix.parent.glob(prefix.name + ".*.cpu"))
    go, pulumi = shutil.which("go"), shutil.which("pulumi")
    if not profiles or not go or not pulumi:
        return None
    text = subprocess.run([go, "tool", "pprof", "-top", "-cum", "-nodecount=60", pulumi, str(profiles[0])],
                          capture_output=True, text=True, timeout=120).stdout
    total = re.search(r"Total samples = ([\d.]+)(m?s)", text)
    rows = []
    for line in text.splitlines():
        match = re.match(r"\s*[\d.]+m?s?\s+[\d.]+%\s+[\d.]+%\s+([\d.]+m?s)\s+([\d.]+)%\s+(\S+)", line)
        if match and any(key in match.group(3) for key in ("SnapshotManager", "SerializeDeployment",
                                                            "stepExecutor", "RegisterResource", "gcBgMarkWorker")):
            rows.append((match.group(3).rsplit("/", 1)[-1], float(match.group(2))))
    return {"total_samples": total.group(0) if total else None, "cumulative_percent": rows[:8]}


def cli_profile(config_file: Path) -> dict:
    """cProfile of validate + render in-process (the same code `python -m components` runs)."""
    profile = cProfile.Profile()
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        profile.enable()
        stack = load_stack_config(read_stack_file(config_file))
        render(stack, Path(out))
        profile.disable()
        seconds = time.perf_counter() - start
    buffer = io.StringIO()
    stats = pstats.Stats(profile, stream=buffer)
    top = sorted(((ct, f"{Path(f).name}:{fn}") for (f, _l, fn), (_c, _n, _t, ct, _cl) in stats.stats.items()
                  if "/components/" in f or "yaml" in f), reverse=True)[:8]
    return {"in_process_s": round(seconds, 3), "cumulative_s": [(name, round(ct, 3)) for ct, name in top]}


# --- the benchmark -------------------------------------------------------------------------

SKIP_CHECKPOINTS = {"PULUMI_SKIP_CHECKPOINTS": "true"}


def bench_scale(quick: bool, workdir: Path, profile: bool, deadline: float, smoke: bool = False) -> dict:
    """The previews and validate + render at growing sizes; ``smoke``: 10 models only, once."""
    models = 10 if smoke else 100
    result: dict = {"preview_default": {}, "preview_skip_checkpoints": {}, "preview_cluster_skip_checkpoints": {},
                    "cli": {}, "notes": []}
    # First, so that a tight budget never drops it: ours against the plain program declaring the
    # same objects, at 100 models, both stacks, with the CI preview's engine settings.
    from preview import compare  # bench/preview.py imports this module

    result["preview_vs_plain"] = compare(models, workdir, deadline - 120, PREVIEW_ENV, reps=1 if quick else 3,
                                           args=("--parallel", str(PREVIEW_PARALLEL)))
    render_dir = workdir / "render-out"
    render = new_project("ours", "bench-scale", scale_config(10, render_dir), workdir)

    def preview(counts, key, env=None, project=render, render_to=render_dir, estimate=None):
        for count in counts:
            guess = estimate(count) if estimate else 0
            if time.monotonic() + guess > deadline:
                result["notes"].append(f"{key} at {count} models skipped: over the time budget")
                continue
            project.write_config(scale_config(count, render_to))
            timed = timed_preview(project, env)
            entry = result[key].setdefault(count, {"runs": [], "machine_busy_runs": []})
            entry["runs"].append(round(timed["seconds"], 2))
            entry["machine_busy_runs"].append(timed["machine_busy"])
            entry["seconds"] = statistics.median(entry["runs"])
            entry["machine_busy"] = statistics.median(entry["machine_busy_runs"])
            entry.setdefault("cpu", timed["cpu"])

    # Default engine settings (what `pulumi preview` costs out of the box) alternating with the
    # engine without its per-step snapshot (PULUMI_SKIP_CHECKPOINTS: see the profile); sizes go
    # up and down again so that a drift in the machine's load shows instead of bending the curve.
    # The default at 100 models takes 25-90 s here, most of a --quick budget: full runs only.
    order = [("skip", 10)] if smoke else [("skip", 10), ("skip", 100)] if quick else [
        ("default", 10), ("skip", 10), ("skip", 100), ("default", 100), ("skip", 300), ("skip", 100), ("skip", 10)]
    for variant, count in order:
        if variant == "default":
            preview((count,), "preview_default", estimate=lambda n: 0.5 * n)
        else:
            preview((count,), "preview_skip_checkpoints", SKIP_CHECKPOINTS, estimate=lambda n: 0.15 * n)
    if not quick:
        cluster = new_project("ours", "bench-scale", scale_config(100, None), workdir)
        preview((100,), "preview_cluster_skip_checkpoints", SKIP_CHECKPOINTS, project=cluster, render_to=None,
                estimate=lambda n: 0.3 * n)
        shutil.rmtree(cluster.root, ignore_errors=True)

    # validate + render, as a person runs them (a fresh interpreter each), alternating sizes.
    counts = (10,) if smoke else (10, 100) if quick else (10, 100, 300)
    files = {}
    for count in counts:
        render.write_config(scale_config(count, None))
        files[count] = render.root / f"scale-{count}.yaml"
        shutil.copy(render.config_file, files[count])
    samples: dict[int, list] = {count: [] for count in counts}
    for rep in range(1 if quick else 3):
        for count in (counts if rep % 2 == 0 else tuple(reversed(counts))):
            samples[count].append(timed_cli(files[count], workdir / "cli-out"))
    for count, runs in samples.items():
        result["cli"][count] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        result["cli"][count]["runs"] = len(runs)

    if profile and time.monotonic() + 90 < deadline:
        profiled = new_project("profile", "bench-scale", scale_config(100, render_dir), workdir)
        profiled.env["LLM_SERVING_BENCH_PROFILE"] = str(workdir / "program.prof")
        prefix = workdir / "engine"
        timed = timed_preview(profiled, extra=("--profiling", str(prefix)))
        result["profile"] = {
            "preview_100_profiled_s": round(timed["seconds"], 2),
            "engine": engine_profile(prefix),
            "program": program_profile(workdir / "program.prof"),
            "cli_300": cli_profile(files[counts[-1]]),
        }
        shutil.rmtree(profiled.root, ignore_errors=True)
    elif profile:
        result["notes"].append("profiles skipped: over the time budget")
    shutil.rmtree(render.root, ignore_errors=True)
    return result


def stack_file_models(path: Path) -> int:
    document = yaml.safe_load(path.read_text())
    return len(document["config"]["llm-serving:models"])
