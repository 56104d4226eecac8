"""Benchmarks on the real engine and the simulated cluster: orchestration overhead against the
plain peer, 1 vs 8 models, reaction times, and the status projection's API cost."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from typing import Optional

from cluster import BenchError, UpRun, VolumePool, models_named, up_once

CREATED = re.compile(r"^\s*\+\s+(\S+)\s+(\S+)\s+created \(([\d.]+)s\)", re.MULTILINE)


def step_seconds(run: UpRun) -> dict[str, float]:
    """How long the engine reports each resource's create took (its await, for the provider)."""
    steps: dict[str, float] = {}
    for type_, name, seconds in CREATED.findall(run.output):
        kind = type_.rsplit(":", 1)[-1]
        steps[f"{kind} {name}"] = float(seconds)
    return steps


def _require_success(run: UpRun) -> UpRun:
    if run.returncode != 0:
        raise BenchError(f"`pulumi up` ({run.program}, {run.models} model(s)) failed:\n{run.output[-3000:]}")
    return run


class Session:
    """State shared by the cluster benchmarks of one suite run (the pool, the reaction samples)."""

    def __init__(self, pool: VolumePool, workdir: Path, deadline: float):
        self.pool, self.workdir, self.deadline = pool, workdir, deadline
        # "ours" / "plain" -> model count -> samples (seconds)
        self.job_to_deployment: dict[str, dict[int, list[float]]] = {"ours": {}, "plain": {}}
        self.job_lag: list[float] = []  # puller pod Succeeded -> Job Complete (the Job controller)
        self.hand_off: dict[int, list[tuple[float, float]]] = {}  # ours: model count -> split samples
        self.gate_queue: list[dict] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def up(self, program: str, models: list[dict], **kwargs) -> UpRun:
        run = up_once(program, models, self.pool, self.workdir, **kwargs)
        if program in self.job_to_deployment and run.returncode == 0:
            self.job_to_deployment[program].setdefault(len(models), []).extend(run.watcher.job_to_deployment())
            self.job_lag += run.watcher.pod_to_job()
            if program == "ours":
                self.hand_off.setdefault(len(models), []).extend(run.watcher.hand_off_split())
        return run


def overhead(session: Session, quick: bool) -> dict:
    """`pulumi up` of one model: ours vs the plain pulumi-kubernetes peer, alternating."""
    pairs = 1 if quick else 3
    runs: dict[str, list[UpRun]] = {"ours": [], "plain": []}
    for i in range(pairs):
        if i and session.left() < 60:
            break
        for program in (("ours", "plain") if i % 2 == 0 else ("plain", "ours")):
            runs[program].append(_require_success(session.up(program, models_named("tiny", 1))))
    return {
        "pairs": len(runs["ours"]),
        "ours_s": [r.seconds for r in runs["ours"]], "plain_s": [r.seconds for r in runs["plain"]],
        "ours": statistics.median(r.seconds for r in runs["ours"]),
        "plain": statistics.median(r.seconds for r in runs["plain"]),
        "steps": {"ours": step_seconds(runs["ours"][-1]), "plain": step_seconds(runs["plain"][-1])},
        # pulumi-kubernetes' Service await waits 10 s after the last Endpoints change ("settle").
        "plain_service_await": statistics.median(
            v for r in runs["plain"] for k, v in step_seconds(r).items() if k.startswith("Service ")),
        "machine_busy": {p: [round(r.machine_busy, 2) for r in rs] for p, rs in runs.items()},
        "phases": {p: [r.phases for r in rs] for p, rs in runs.items()},
    }


def parallel(session: Session, quick: bool, many: int = 8) -> dict:
    """`pulumi up` of `many` models (8; fewer in a smoke run) vs 1 model (ours), alternating."""
    pairs = 1 if quick else 2
    runs: dict[int, list[UpRun]] = {1: [], many: []}
    for i in range(pairs):
        if i and session.left() < 90:
            break
        for count in ((many, 1) if i % 2 == 0 else (1, many)):
            runs[count].append(_require_success(session.up("ours", models_named("m", count) if count > 1
                                                            else models_named("one", 1))))
    # The peer, full runs only: the same 8 models with native awaits (no gates, no status), to
    # see what 8 models cost this engine and cluster without the dynamic-provider host at all.
    plain: dict[int, UpRun] = {}
    if not quick and session.left() > 150:
        for count in (many, 1):
            plain[count] = _require_success(session.up("plain", models_named("m", count) if count > 1
                                                       else models_named("one", 1)))
    last = runs[many][-1]
    steps = step_seconds(last)
    gates = sorted(v for k, v in steps.items() if k.startswith("WeightsGate"))
    statuses = sorted(v for k, v in steps.items() if k.startswith("ModelStatus"))
    reactions = last.watcher.job_to_deployment()
    return {
        "pairs": len(runs[many]), "models": many,
        "one_s": [r.seconds for r in runs[1]], "many_s": [r.seconds for r in runs[many]],
        "one": statistics.median(r.seconds for r in runs[1]),
        "many": statistics.median(r.seconds for r in runs[many]),
        "many_models_gate_create_s": gates, "many_models_status_create_s": statuses,
        "many_models_job_to_deployment_s": sorted(round(x, 3) for x in reactions),
        "many_models_job_done_spread_s": (max(last.watcher.job_done.values()) - min(last.watcher.job_done.values())
                                           if last.watcher.job_done else None),
        "machine_busy": {count: [round(r.machine_busy, 2) for r in rs] for count, rs in runs.items()},
        "phases": {count: [r.phases for r in rs] for count, rs in runs.items()},
        "plain": {count: {"seconds": r.seconds, "service_await": max(
            (v for k, v in step_seconds(r).items() if k.startswith("Service ")), default=0.0), "phases": r.phases}
            for count, r in plain.items()},
    }


def crash_loop(session: Session, quick: bool) -> dict:
    """Server pods crash-loop (KWOK fault stage, injected by a transform): time from the first
    CrashLoopBackOff the API announces to `pulumi up` exiting with the classified error."""
    from status_cost import count_projection

    results, evidence_calls = [], None
    for i in range(1 if quick else 2):
        if i and session.left() < 45:
            break
        inspected: dict = {}

        def inspect(project, run, inspected=inspected):
            inspected["calls"] = count_projection(project.config_file, "crash")

        run = session.up("crash", models_named("crash", 1), inspect=inspect)
        classified = run.returncode != 0 and "reason: crash-loop" in run.output
        if not run.watcher.crash_seen:
            raise BenchError("the crash-loop fault never showed (is stage llm-serving-pod-fault-crashloop applied?)")
        results.append({"seconds": run.ended_at - min(run.watcher.crash_seen.values()), "classified": classified,
                        "up_s": run.seconds})
        evidence_calls = inspected.get("calls")
    return {"runs": results, "median": statistics.median(r["seconds"] for r in results),
            "classified": all(r["classified"] for r in results), "evidence_projection": evidence_calls}


def status_cost(session: Session, quick: bool) -> dict:
    """API calls of one status projection, for 1 replica and for 4 replicas (RWX weights)."""
    from status_cost import count_projection, count_ready_wait

    counted: dict = {}

    def inspect(project, run):
        for model in ("one", "four"):
            counted[model] = count_projection(project.config_file, model)
            counted[f"{model}-create-poll"] = count_ready_wait(project.config_file, model)

    four = {"replicas": 4, "weights": {"size": "1Gi", "accessMode": "ReadWriteMany"}}
    run = session.up("ours", models_named("one", 1) + models_named("four", 1, **four), inspect=inspect)
    _require_success(run)
    return counted


def job_to_deployment(session: Session) -> dict:
    result: dict = {"job_controller_lag": statistics.median(session.job_lag) if session.job_lag else None}
    for count, split in sorted(session.hand_off.items()):
        if split:
            result[f"ours_{count}_split"] = {
                "job_to_puller_pod_gone": statistics.median(a for a, _ in split),
                "puller_pod_gone_to_deployment": statistics.median(b for _, b in split)}
    for program, by_count in session.job_to_deployment.items():
        for count, samples in sorted(by_count.items()):
            result[f"{program}_{count}"] = {"median": statistics.median(samples) if samples else None,
                                            "samples": sorted(round(x, 3) for x in samples)}
    return result


def needs_samples(session: Session) -> Optional[str]:
    return None if session.job_to_deployment["ours"].get(1) else "no Job -> Deployment samples yet"


def many_samples(session: Session, quick: bool, count: int = 8) -> None:
    """Job complete -> Deployment created with `count` models finishing at once, ours and the
    plain program (native Job await) alternately: the plain program's figure at the same count is
    the peer, since both queue behind the same engine and cluster. Skipped when `parallel` already
    gathered both (full runs), or when time is short."""
    if all(session.job_to_deployment[p].get(count) for p in ("ours", "plain")):
        return
    pairs = 1 if quick else 2
    for i in range(pairs):
        if session.left() < 120:
            break
        for program in (("ours", "plain") if i % 2 == 0 else ("plain", "ours")):
            _require_success(session.up(program, models_named("m", count)))
