"""Per-pod weights of a multi-node model (``multiNode.weights: perPod``) as a pure function of its pods.

There is no puller Job and no weights gate: every group pod pulls into its own volume and verifies
it in init containers (``contract.labels.WEIGHTS_*_INIT``) before its server starts, so what a
Job's status says for shared weights, the pods' init container states say here:

- a pod whose pull or verify step runs: the group is pulling / verifying (with the pods);
- a step that ended non-zero: its termination message (the last lines of its log; the verify and
  pull scripts end with one ``llm-serving:`` line naming the keys) is diagnosed as the gate does
  for the Job (``projection._SOURCE_DIAGNOSES`` / ``_PULL_DIAGNOSES``), with the pod and the step.
  The kubelet retries a failed init container; the failure is the verdict at once when the store
  changed since preview (exit 42: every retry refuses the same), else once it has failed
  ``restart_threshold`` times (as a crash loop is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from contract.labels import WEIGHTS_PRUNE_INIT, WEIGHTS_PULL_INIT, WEIGHTS_VERIFY_INIT

from .projection import _PULL_DIAGNOSES, _SOURCE_DIAGNOSES, ERROR, PENDING, Status, cap, log_tail
from .transience import DEFAULT_RESTART_THRESHOLD

STEPS = {WEIGHTS_PULL_INIT: "pulling", WEIGHTS_VERIFY_INIT: "verifying", WEIGHTS_PRUNE_INIT: "pruning old revisions"}
SOURCE_CHANGED_EXIT = 42  # components/compile/object_store.py: no retry can succeed


@dataclass(frozen=True)
class StepState:
    pod: str
    step: str  # the init container's name
    running: bool
    exit_code: Optional[int]  # of its last failed run, if any
    message: str  # that run's termination message
    restarts: int


def _name(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def step_states(pods: list[dict]) -> list[StepState]:
    """The weights init containers that run or have failed, pod by pod (terminating pods left out)."""
    found = []
    for pod in sorted(pods, key=_name):
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
            if status.get("name") not in STEPS:
                continue
            state = status.get("state") or {}
            current = state.get("terminated") or {}
            last = (status.get("lastState") or {}).get("terminated") or {}
            failed = current if current.get("exitCode") not in (None, 0) else (
                last if last.get("exitCode") not in (None, 0) and "terminated" not in state else {})
            if "running" in state or failed:
                found.append(StepState(_name(pod), status["name"], "running" in state,
                                       failed.get("exitCode") if failed else None,
                                       (failed.get("message") or "").strip(), int(status.get("restartCount") or 0)))
    return found


def _diagnose(message: str) -> tuple[str, str]:
    tail = log_tail(message)
    for pattern, kind, template in _SOURCE_DIAGNOSES:
        found = pattern.search(tail)
        if found:
            return kind, template.format(*found.groups())
    for pattern, kind, template in _PULL_DIAGNOSES:
        if pattern.search(tail):
            return kind, template.format(repo="the source's repo")
    return "weights-step-failed", "read the step's log: kubectl logs <pod> -c <step>"


def weights_status(pods: list[dict], restart_threshold: int = DEFAULT_RESTART_THRESHOLD) -> Optional[Status]:
    """ERROR for a step that failed for good; PENDING while pods pull, verify or retry; None when
    no weights step runs or failed (the weights are verified, or no pod got that far)."""
    states = step_states(pods)
    failures = [s for s in states if s.exit_code is not None]
    for failed in failures:
        kind, hint = _diagnose(failed.message)
        fatal = failed.exit_code == SOURCE_CHANGED_EXIT or failed.restarts + 1 >= restart_threshold
        details = {"pod": failed.pod, "container": failed.step, "exitCode": failed.exit_code,
                   "restarts": failed.restarts, "logTail": log_tail(failed.message)}
        if fatal:
            return Status(ERROR, cap(f"pod {failed.pod}: weights {failed.step} failed (exit code {failed.exit_code}): "
                                     f"{hint}"), kind, details, pod=failed.pod)
    if failures:
        first = failures[0]
        return Status(PENDING, cap(f"pod {first.pod}: weights {first.step} failed (exit code {first.exit_code}, "
                                   f"{first.restarts} restart(s)); the kubelet retries it, failing at "
                                   f"{restart_threshold} attempts: {_diagnose(first.message)[1]}"),
                      "weights-retrying", {"pod": first.pod, "container": first.step}, pod=first.pod)
    running = [s for s in states if s.running]
    if not running:
        return None
    by_step: dict[str, list[str]] = {}
    for state in running:
        by_step.setdefault(state.step, []).append(state.pod)
    reason = "verifying" if WEIGHTS_VERIFY_INIT in by_step and WEIGHTS_PULL_INIT not in by_step else "pulling"
    text = "; ".join(f"{STEPS[step]} weights into each pod's own volume: {', '.join(names)}"
                     for step, names in by_step.items())
    return Status(PENDING, cap(text), reason, {"weights": {step: names for step, names in by_step.items()}})
