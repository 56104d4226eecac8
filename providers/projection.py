"""Deployment status as a pure function of what the cluster shows.

``project_status`` takes the objects of one model (Deployment, pods, events, EndpointSlices, the
puller Job) as plain dicts and returns PENDING / READY / ERROR with a human message and the
evidence. UNKNOWN is returned by the caller when the objects could not be read: this module never
guesses. Wording is engine-neutral: the code is shared by vLLM and NIM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

from components.targets import routable_targets

PENDING, READY, ERROR, UNKNOWN = "PENDING", "READY", "ERROR", "UNKNOWN"

MESSAGE_LIMIT = 600
LOG_TAIL_LINES = 20
LOG_TAIL_CHARS = 2000
EVENTS_LIMIT = 8
CRASH_RESTARTS = 3


@dataclass
class Observation:
    """What one status read saw. Logs are fetched only for pods the diagnosis names."""

    model: str
    deployment: Optional[dict] = None
    pods: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    endpoint_slices: list[dict] = field(default_factory=list)
    puller_job: Optional[dict] = None
    logs: dict[str, str] = field(default_factory=dict)
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    pending_timeout_seconds: int = 900


@dataclass
class Status:
    state: str
    message: str
    reason: str = ""
    details: dict = field(default_factory=dict)
    ready_replicas: int = 0
    targets: list[str] = field(default_factory=list)
    pod: str = ""

    def as_outputs(self) -> dict:
        return {
            "state": self.state,
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "ready_replicas": self.ready_replicas,
            "targets": self.targets,
        }


def cap(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = " ".join(str(text).split()) if "\n" not in str(text) else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def log_tail(text: str) -> str:
    lines = (text or "").rstrip("\n").splitlines()[-LOG_TAIL_LINES:]
    tail = "\n".join(lines)
    return tail[-LOG_TAIL_CHARS:]


def _parse_time(value: Optional[str]) -> Optional[datetime]:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def _component(obj: dict) -> str:
    return ((obj.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component", "")


def _events_for(events: list[dict], name: str) -> list[dict]:
    related = [e for e in events if (e.get("involvedObject") or {}).get("name") == name]
    related.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return related[-EVENTS_LIMIT:]


def _event_lines(events: list[dict]) -> list[str]:
    return [cap(f"{e.get('reason', '')}: {e.get('message', '')}", 300) for e in events]


# --- puller ---------------------------------------------------------------------------------

_ACCESS_DENIED = "the token lacks access to {repo}; request access on the hub or fix the token secret"
_REPO_NOT_FOUND = "repo {repo} not found; check source.repo (or the token, for private repos)"
# Named errors first, bare status codes last: the hub answers a missing repo with
# "RepositoryNotFoundError: 401 Client Error" (it does not reveal whether a repo exists).
_PULL_DIAGNOSES = (
    (re.compile(r"GatedRepoError|Cannot access gated repo|Access to model .* is restricted", re.I),
     "access-denied", _ACCESS_DENIED),
    (re.compile(r"RevisionNotFoundError|Invalid rev id|revision .* not found", re.I),
     "revision-not-found", "revision not found in {repo}; check source.revision"),
    (re.compile(r"RepositoryNotFoundError|Repository Not Found", re.I), "repo-not-found", _REPO_NOT_FOUND),
    (re.compile(r"No space left on device|Disk quota exceeded", re.I),
     "disk-full", "the weights volume is full; raise weights.size"),
    (re.compile(r"\b(401|403)\b|Unauthorized", re.I), "access-denied", _ACCESS_DENIED),
    (re.compile(r"\b404\b", re.I), "repo-not-found", _REPO_NOT_FOUND),
)


def _job_condition(job: dict, kind: str) -> Optional[dict]:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def job_succeeded(job: Optional[dict]) -> bool:
    return bool(job) and (_job_condition(job, "Complete") is not None or _job_condition(job, "SuccessCriteriaMet") is not None)


def job_failed(job: Optional[dict]) -> Optional[dict]:
    if not job:
        return None
    return _job_condition(job, "Failed") or _job_condition(job, "FailureTarget")


def diagnose_puller_failure(job: dict, pods: list[dict], logs: dict[str, str], events: list[dict]) -> Status:
    condition = job_failed(job) or {}
    source = ((job.get("metadata") or {}).get("annotations") or {}).get("llm-serving.dev/model-source", "")
    repo = source.split("@")[0] or "the repo"
    puller_pods = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
    pod = _name(puller_pods[-1]) if puller_pods else ""
    tail = log_tail(logs.get(pod, ""))
    reason, message = "puller-failed", f"weights download failed ({condition.get('reason') or 'Failed'})"
    if condition.get("reason") == "DeadlineExceeded":
        reason, message = "deadline-exceeded", "weights download exceeded its deadline; raise platform.pullTimeoutSeconds or use a closer mirror"
    else:
        for pattern, kind, template in _PULL_DIAGNOSES:
            if pattern.search(tail):
                reason, message = kind, template.format(repo=repo)
                break
    details = {
        "job": _name(job), "pod": pod, "condition": cap(condition.get("message") or "", 300),
        "logTail": tail, "events": _event_lines(_events_for(events, pod)),
    }
    return Status(ERROR, cap(f"{message}. Job {_name(job)}: {condition.get('message') or ''}".strip()), reason, details, pod=pod)


# --- server ---------------------------------------------------------------------------------

_CRASH_DIAGNOSES = (
    (re.compile(r"getpwuid|uid not found", re.I), "uid-unknown",
     "the server crashes because its uid has no passwd entry in the image; use the engine's uid "
     "(vLLM 2000/0, NIM 1000/2000)"),
    (re.compile(r"NCCL|/dev/shm|shared memory|Bus error", re.I), "shared-memory",
     "the server crashes on shared memory / NCCL; raise sharedMemorySizeLimit"),
    (re.compile(r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError", re.I), "gpu-out-of-memory",
     "the model does not fit the GPUs; add gpus / tensorParallelSize or lower --max-model-len"),
)


def _container_statuses(pod: dict) -> list[dict]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def _crash(pod: dict) -> Optional[tuple[str, dict]]:
    for container in _container_statuses(pod):
        if container.get("ready"):
            continue  # serving now: restartCount and lastState are history, not a crash loop
        waiting = (container.get("state") or {}).get("waiting") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        current = (container.get("state") or {}).get("terminated") or {}
        if waiting.get("reason") == "CrashLoopBackOff" or container.get("restartCount", 0) >= CRASH_RESTARTS:
            return container.get("name", ""), last or current
        if (last or current).get("reason") == "OOMKilled":
            return container.get("name", ""), last or current
    return None


_IMAGE_REASONS = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}


def _image_problem(pod: dict) -> Optional[dict]:
    for container in _container_statuses(pod):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _IMAGE_REASONS:
            return {"container": container.get("name"), "image": container.get("image"), **waiting}
    return None


def diagnose_crash(pod: dict, container: str, terminated: dict, logs: dict[str, str], events: list[dict]) -> Status:
    name = _name(pod)
    tail = log_tail(logs.get(name, ""))
    reason, message = "crash-loop", f"the model server in pod {name} keeps crashing (exit code {terminated.get('exitCode', '?')})"
    if terminated.get("reason") == "OOMKilled":
        reason, message = "oom-killed", f"pod {name} was OOMKilled; raise resources.memory"
    else:
        for pattern, kind, text in _CRASH_DIAGNOSES:
            if pattern.search(tail):
                reason, message = kind, f"pod {name}: {text}"
                break
    details = {"pod": name, "container": container, "terminated": {k: terminated.get(k) for k in ("reason", "exitCode") if k in terminated},
               "logTail": tail, "events": _event_lines(_events_for(events, name))}
    return Status(ERROR, cap(message), reason, details, pod=name)


def _pending_reason(pod: dict, events: list[dict]) -> tuple[str, str]:
    related = _events_for(events, _name(pod))
    for event in reversed(related):
        text = event.get("message", "")
        if "Multi-Attach" in text:
            return "multi-attach", "its ReadWriteOnce weights volume is attached to another node (Multi-Attach); use 1 replica or ReadWriteMany"
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            text = condition.get("message") or ""
            if "nvidia.com/gpu" in text:
                return "insufficient-gpus", f"no node has enough free GPUs ({cap(text, 200)})"
            return "unschedulable", f"it cannot be scheduled ({cap(text, 200)})"
    for event in reversed(related):
        if event.get("reason") in ("FailedScheduling", "FailedAttachVolume", "FailedMount"):
            return event["reason"].lower(), cap(event.get("message", ""), 200)
    return "pending", "it is still Pending"


def diagnose_pending(pod: dict, observation: Observation) -> Optional[Status]:
    started = _parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    if (pod.get("status") or {}).get("phase") != "Pending" or started is None:
        return None
    waited = (observation.now - started).total_seconds()
    if waited < observation.pending_timeout_seconds:
        return None
    reason, why = _pending_reason(pod, observation.events)
    name = _name(pod)
    return Status(
        ERROR, cap(f"pod {name} has been Pending for {int(waited)}s: {why}"), reason,
        {"pod": name, "pendingSeconds": int(waited), "events": _event_lines(_events_for(observation.events, name))},
        pod=name,
    )


def lagging_replica(observation: Observation) -> Optional[Status]:
    """A server pod Pending past the timeout, whether or not other replicas serve: the reason a
    rollout cannot finish (with the scheduler's events when the observation holds them)."""
    for pod in observation.pods:
        if _component(pod) == "server":
            pending = diagnose_pending(pod, observation)
            if pending is not None:
                return pending
    return None


def pods_needing_logs(observation: Observation) -> list[str]:
    """Pods whose log tail the diagnosis will quote (fetch only these)."""
    names = []
    failed = job_failed(observation.puller_job)
    pullers = [p for p in observation.pods if _component(p) == "weights-puller"]
    if failed and pullers:
        latest = sorted(pullers, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")[-1]
        names.append(_name(latest))
    names += [_name(p) for p in observation.pods if _component(p) == "server" and _crash(p)]
    return names


def project_status(observation: Observation) -> Status:
    obs = observation
    server_pods = [p for p in obs.pods if _component(p) == "server"]
    puller_pods = [p for p in obs.pods if _component(p) == "weights-puller"]
    if obs.deployment is None:
        if job_failed(obs.puller_job):
            return diagnose_puller_failure(obs.puller_job, puller_pods, obs.logs, obs.events)
        if obs.puller_job is not None and not job_succeeded(obs.puller_job):
            return Status(PENDING, "downloading weights", "pulling", {"job": _name(obs.puller_job)})
        return Status(PENDING, "waiting for the model server to be created", "not-created")

    snapshot = routable_targets(obs.endpoint_slices)
    ready = int((obs.deployment.get("status") or {}).get("readyReplicas") or 0)
    for pod in server_pods:
        crash = _crash(pod)
        if crash:
            status = diagnose_crash(pod, crash[0], crash[1], obs.logs, obs.events)
            status.ready_replicas, status.targets = ready, snapshot.pods
            return status
    for pod in server_pods:
        image = _image_problem(pod)
        if image:
            return Status(
                ERROR, cap(f"pod {_name(pod)} cannot pull image {image.get('image')}: {image.get('reason')} {image.get('message', '')}"),
                "image-pull", {"pod": _name(pod), **{k: v for k, v in image.items() if isinstance(v, str)}},
                ready, snapshot.pods, _name(pod),
            )
    if snapshot.targets:
        desired = int((obs.deployment.get("spec") or {}).get("replicas") or 0)
        return Status(
            READY, f"serving: {len(snapshot.targets)} routable target(s), {ready}/{desired} replicas ready",
            "ready", {"revision": snapshot.revision}, ready, snapshot.pods,
        )
    for pod in server_pods:
        pending = diagnose_pending(pod, obs)
        if pending:
            pending.ready_replicas = ready
            return pending
    desired = int((obs.deployment.get("spec") or {}).get("replicas") or 0)
    if desired == 0:
        return Status(PENDING, "scaled to zero replicas: no routable target", "scaled-to-zero")
    return Status(PENDING, f"model server starting: {ready}/{desired} replicas ready, no routable target yet", "starting", {}, ready)
