"""Preview of N models: our program against a plain pulumi-kubernetes program declaring the same
Kubernetes objects (bench/peer_preview), alternated in one run, on the render stack and the
cluster stack, with the engine settings our CI preview uses (components.preview_report.runner's
PREVIEW_ENV) and, for reference, the engine's defaults.

The peer gets the manifests `compile_stack` makes for the same stack config (what `render`
writes), so the objects' count and kinds match by construction; it has no component and no
dynamic resource. The cluster stack's previews talk to the simulated cluster (the dynamic
providers' checks, the kubernetes provider's dry-run reads) but create nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Optional

from cluster import new_project
from scale import scale_config, timed_preview

from components.compile.plan import compile_stack
from components.config import load_stack_config

PEER_DIR = Path(__file__).resolve().parent / "peer_preview"


def compiled(config: dict) -> list[dict]:
    return compile_stack(load_stack_config(config))


def peer_project(config: dict, render_dir: Optional[Path], workdir: Path):
    """A throwaway project running bench/peer_preview with the stack's compiled manifests."""
    project = new_project("plain-preview", "bench-scale", config, workdir)
    shutil.copy(PEER_DIR / "__main__.py", project.root / "__main__.py")
    (project.root / "peer.json").write_text(json.dumps({
        "manifests": compiled(config), "render_dir": str(render_dir) if render_dir else None,
        "kubeconfig": None if render_dir else os.environ.get("KUBECONFIG")}))
    return project


def kinds(config: dict) -> dict[str, int]:
    return dict(Counter(m["kind"] for m in compiled(config)))


def compare(count: int, workdir: Path, deadline: float, env: dict, reps: int = 3,
            stacks: tuple[str, ...] = ("render", "cluster"), args: tuple[str, ...] = ()) -> dict:
    """Alternated previews (ours, plain, plain, ours, ...) of `count` models per stack kind;
    medians, ratio ours/plain, CPU by process and the machine's load of each run."""
    out: dict = {}
    for kind in stacks:
        render_dir = workdir / f"render-{kind}" if kind == "render" else None
        config = scale_config(count, render_dir)
        ours = new_project("ours-preview", "bench-scale", config, workdir)
        plain = peer_project(config, render_dir, workdir)
        runs: dict[str, list[dict]] = {"ours": [], "plain": []}
        load_before = os.getloadavg()
        for rep in range(reps):
            for which in (("ours", "plain") if rep % 2 == 0 else ("plain", "ours")):
                if time.monotonic() + 40 > deadline:
                    break
                runs[which].append(timed_preview(ours if which == "ours" else plain, env, args))
        entry: dict = {"models": count, "kinds": kinds(config), "env": env, "args": list(args),
                       "load_average": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]}
        for which, samples in runs.items():
            if samples:
                entry[which] = {
                    "seconds": statistics.median(s["seconds"] for s in samples),
                    "runs": [round(s["seconds"], 2) for s in samples],
                    "machine_busy": statistics.median(s["machine_busy"] for s in samples),
                    "cpu": {k: statistics.median(s["cpu"].get(k, 0.0) for s in samples)
                            for k in {k for s in samples for k in s["cpu"]}},
                }
        if entry.get("ours") and entry.get("plain"):
            entry["ratio"] = entry["ours"]["seconds"] / entry["plain"]["seconds"]
        out[kind] = entry
        for project in (ours, plain):
            shutil.rmtree(project.root, ignore_errors=True)
    return out
