"""Deployment status as a pure function of what the cluster shows.

``project_status`` takes the objects of one model (Deployment, pods, events, EndpointSlices, the
puller Job) as plain dicts and returns PENDING / READY / ERROR with a human message and the
evidence. UNKNOWN is returned by the caller when the objects could not be read: this module never
guesses. Wording is engine-neutral: the code is shared by vLLM and NIM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Optional

from contract.targets import routable_targets

from .transience import DEFAULT_RESTART_THRESHOLD, classify_crash, classify_waiting, crash_is_fatal

PENDING, READY, ERROR, UNKNOWN = "PENDING", "READY", "ERROR", "UNKNOWN"
# A model that may sleep (autoscaling.minReplicas: 0) with no replica now: not a failure, and not
# serving either; its next request (held at the gateway) wakes it.
SCALED_TO_ZERO = "SCALED_TO_ZERO"

MESSAGE_LIMIT = 600
LOG_TAIL_LINES = 20
LOG_TAIL_CHARS = 2000
EVENTS_LIMIT = 8
# PENDING reasons of a pod in trouble the kubelet may still get past (providers/transience.py):
# the caller reads their evidence (log tail, events) too, since it can make the cause definitive.
RETRYING_REASONS = ("restarting", "image-pull-retrying", "container-retrying")


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
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    pending_timeout_seconds: int = 900
    restart_threshold: int = DEFAULT_RESTART_THRESHOLD


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


# Object-store and existing-volume sources (components/compile/object_store.py): the `verify` and
# `pull` scripts end with one `llm-serving:` line naming the keys; rclone's own S3 errors name the
# store's error code. Checked before the hub's patterns (a 403 from a store is not a gated repo).
_SOURCE_DIAGNOSES = (
    (re.compile(r"llm-serving: source changed since preview:([^\n]*)"), "source-changed",
     "objects changed in the store since preview:{0}; run `pulumi up` again: preview lists the store "
     "again, and the new objects go into a new volume"),
    (re.compile(r"llm-serving: missing:([^\n]*)"), "weights-incomplete",
     "the weights are incomplete, missing:{0}; the copy was cut short or the store lost them: run "
     "`pulumi up` again to re-run the puller"),
    (re.compile(r"llm-serving: wrong size:([^\n]*)"), "weights-incomplete",
     "weights files of the wrong size:{0}; run `pulumi up` again to re-run the puller"),
    # rclone checks each object's MD5 (its ETag, or the uploader's x-amz-meta-md5chksum) against
    # the bytes it wrote, and names the file (its temporary `.partial` name) when they differ.
    (re.compile(r"ERROR : (?!Attempt \d+/\d+ failed)([^\n]+?)(?:\.[0-9a-f]{8}\.partial)?: corrupted on transfer"),
     "source-corrupted",
     "bytes arrived corrupted (their MD5 is not the store's, on every retry): {0}; check what sits between "
     "the cluster and the store (a proxy rewriting bodies), and that the store's ETags are MD5s (objects "
     "encrypted with SSE-KMS or SSE-C have other ETags)"),
    # Objects uploaded in parts by other tools: the pull step recomputes their multipart ETag
    # from the copy, removes a file that differs and fails the attempt (44), on every retry.
    (re.compile(r"llm-serving: corrupted \(not the multipart ETag preview listed\):([^\n]*)"), "source-corrupted",
     "bytes arrived corrupted (their multipart ETag, recomputed from the copy, is not the one preview listed, "
     "on every retry):{0}; check what sits between the cluster and the store (a proxy rewriting bodies); if "
     "the object was replaced since preview, run `pulumi up` again (preview lists it again)"),
    # Hub sources (components/compile/hub_verify.py): the bytes hashed against the hub's records
    # (the ETag `hf download` recorded); a file that differs was removed, so each Job attempt
    # fetched it again.
    (re.compile(r"llm-serving: not the hub's files: ([^;\n]*)"), "source-corrupted",
     "weights files are not what the hub named: {0}; a file that differed was removed and fetched again on "
     "each retry: run `pulumi up` again to re-run the puller, and if it fails the same way, check what serves "
     "the hub endpoint (hfEndpoint: a mirror or proxy altering files, or not passing the hub's ETag and "
     "X-Repo-Commit headers through)"),
    (re.compile(r"(SignatureDoesNotMatch|InvalidAccessKeyId|AccessDenied|ExpiredToken|InvalidToken"
                r"|operation error S3: \w+, https response error StatusCode: 40[13])"),
     "source-unauthorized", "the store refused the puller ({0}): fix the keys in the source.credentials "
     "Secret, or the cloud identity of the puller's ServiceAccount"),
    (re.compile(r"(NoSuchBucket|error reading source root directory: directory not found)"), "source-not-found",
     "nothing in the store at the source's bucket and prefix ({0}): check source.bucket, source.prefix and "
     "source.endpoint"),
)


def _terminated_messages(pods: list[dict]) -> str:
    """The termination messages of the containers that failed (init containers included): a
    failed `pull` init container has no log under the pod's default container, and
    FallbackToLogsOnError puts its last lines here."""
    lines = []
    for pod in pods:
        for container in _container_statuses(pod):
            for state in (container.get("state") or {}, container.get("lastState") or {}):
                terminated = state.get("terminated") or {}
                if terminated.get("exitCode") not in (None, 0) and terminated.get("message"):
                    lines.append(f"[{container.get('name')}] {terminated['message'].strip()}")
    return "\n".join(lines)


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
        reason, message = ("deadline-exceeded",
                           "weights download exceeded its deadline; raise platform.pullTimeoutSeconds or use a closer mirror")
    else:
        terminated = _terminated_messages(puller_pods[-1:])
        if terminated:
            tail = log_tail(f"{tail}\n{terminated}".strip())
        for pattern, kind, template in _SOURCE_DIAGNOSES:
            found = pattern.search(tail)
            if found:
                reason, message = kind, template.format(*found.groups())
                break
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

def _container_statuses(pod: dict) -> list[dict]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def _crash(pod: dict) -> Optional[tuple[str, dict, int]]:
    """The first container of the pod that has crashed at all: (name, its last termination,
    restarts). Whether that is the verdict is ``transience.crash_is_fatal``'s call."""
    for container in _container_statuses(pod):
        if container.get("ready"):
            continue  # serving now: restartCount and lastState are history, not a crash loop
        waiting = (container.get("state") or {}).get("waiting") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        current = (container.get("state") or {}).get("terminated") or {}
        restarts = int(container.get("restartCount") or 0)
        crashed = current.get("exitCode", 0) != 0 or current.get("reason") == "OOMKilled"
        if waiting.get("reason") == "CrashLoopBackOff" or restarts > 0 or crashed:
            return container.get("name", ""), current if crashed else (last or current), restarts
    return None


def _image_problem(pod: dict) -> Optional[dict]:
    """A container waiting on its image or its config (``transience.classify_waiting`` knows it)."""
    for container in _container_statuses(pod):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if classify_waiting(waiting.get("reason") or "", waiting.get("message") or "") is not None:
            return {"container": container.get("name"), "image": container.get("image"), **waiting}
    return None


def _waiting_verdict(pod: dict, image: dict, events: list[dict]):
    messages = [e.get("message") or "" for e in _events_for(events, _name(pod))]
    return classify_waiting(image.get("reason") or "", image.get("message") or "", messages)


def _waiting_status(pod: dict, image: dict, verdict, observation: Observation, ready: int, targets: list[str]) -> Status:
    """An image / container-config waiting state: ERROR when definitive or past the pending
    timeout, else PENDING (the kubelet retries) with the cause so far."""
    name = _name(pod)
    pulling = image.get("reason") not in ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
    what = f"cannot pull image {image.get('image')}" if pulling else f"cannot start container {image.get('container')}"
    started = _parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    waited = int((observation.now - started).total_seconds()) if started else 0
    details = {"pod": name, "cause": verdict.cause, **{k: v for k, v in image.items() if isinstance(v, str)},
               "events": _event_lines(_events_for(observation.events, name))}
    said = f"{image.get('reason')} {image.get('message', '')}".strip()
    if verdict.definitive:
        state, text = ERROR, f"pod {name} {what}: {said}; {verdict.hint}"
    elif waited >= observation.pending_timeout_seconds:
        state, text = ERROR, f"pod {name} still {what} after {waited}s: {said}; {verdict.hint}"
    else:
        state, text = PENDING, f"pod {name} {what} yet, the kubelet retries: {said}"
    reason = ("image-pull" if pulling else "container-config") if state == ERROR else (
        "image-pull-retrying" if pulling else "container-retrying")
    return Status(state, cap(text), reason, details, ready, targets, name)


def diagnose_crash(pod: dict, container: str, terminated: dict, logs: dict[str, str], events: list[dict]) -> Status:
    name = _name(pod)
    tail = log_tail(logs.get(name, ""))
    verdict = classify_crash(terminated, tail)
    reason, message = verdict.cause, f"pod {name}: {verdict.hint}"
    if verdict.cause == "crash-loop":
        message = f"the model server in pod {name} keeps crashing (exit code {terminated.get('exitCode', '?')})"
    elif verdict.cause == "oom-killed":
        message = f"pod {name} was OOMKilled; raise resources.memory"
    details = {"pod": name, "container": container, "terminated": {k: terminated.get(k) for k in ("reason", "exitCode") if k in terminated},
               "logTail": tail, "events": _event_lines(_events_for(events, name))}
    return Status(ERROR, cap(message), reason, details, pod=name)


def _pending_reason(pod: dict, events: list[dict]) -> tuple[str, str]:
    related = _events_for(events, _name(pod))
    image = _image_problem(pod)  # a transient pull that never recovered: its last words
    if image:
        return "image-pull", cap(f"its container {image.get('container')} waits: {image.get('reason')} {image.get('message', '')}", 300)
    for event in reversed(related):
        text = event.get("message", "")
        if "Multi-Attach" in text:
            return ("multi-attach",
                    "its ReadWriteOnce weights volume is attached to another node (Multi-Attach); use 1 replica or ReadWriteMany")
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            text = condition.get("message") or ""
            if "anti-affinity" in text:  # a multi-node group's pods take one node each
                return ("not-enough-nodes", "no free node for another pod of its group (one pod per node: "
                        f"the group needs multiNode.nodes GPU nodes) ({cap(text, 200)})")
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


def crash_log_source(pod: dict) -> Optional[tuple[str, bool]]:
    """Where the log of the pod's crash is: (container, previous), None without a crash. Once the
    kubelet has restarted the container, its current log is the next attempt's (empty, or the
    first lines of a start that will crash again: seen on the real node, a vLLM refusing its args
    at start), and the crash's own words are the previous attempt's log."""
    crash = _crash(pod)
    if crash is None:
        return None
    container = crash[0]
    status = next((c for c in _container_statuses(pod) if c.get("name") == container), {})
    restarted = "terminated" not in (status.get("state") or {})  # running or waiting again
    return container, restarted and bool((status.get("lastState") or {}).get("terminated"))


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
    retrying: Optional[Status] = None  # the first trouble the kubelet may still get past
    for pod in server_pods:
        crash = _crash(pod)
        if crash:
            verdict = classify_crash(crash[1], log_tail(obs.logs.get(_name(pod), "")))
            if not crash_is_fatal(verdict, crash[2], obs.restart_threshold):
                retrying = retrying or Status(
                    PENDING, cap(f"the model server in pod {_name(pod)} crashed (exit code "
                                 f"{crash[1].get('exitCode', '?')}, {crash[2]} restart(s) so far); waiting for it "
                                 f"to recover, failing at {obs.restart_threshold} restarts"),
                    "restarting", {"pod": _name(pod), "cause": verdict.cause, "restarts": crash[2]},
                    ready, snapshot.pods, _name(pod))
                continue
            status = diagnose_crash(pod, crash[0], crash[1], obs.logs, obs.events)
            status.ready_replicas, status.targets = ready, snapshot.pods
            return status
    for pod in server_pods:
        image = _image_problem(pod)
        if image:
            status = _waiting_status(pod, image, _waiting_verdict(pod, image, obs.events), obs, ready, snapshot.pods)
            if status.state == ERROR:
                return status
            retrying = retrying or status
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
    if retrying is not None:
        return retrying
    desired = int((obs.deployment.get("spec") or {}).get("replicas") or 0)
    if desired == 0:
        return Status(PENDING, "scaled to zero replicas: no routable target", "scaled-to-zero")
    return Status(PENDING, f"model server starting: {ready}/{desired} replicas ready, no routable target yet", "starting", {}, ready)


def asleep(status: Status, min_replicas: int | None) -> Status:
    """A model that may sleep (``min_replicas`` 0) and has no replica now is SCALED_TO_ZERO, not
    PENDING: as its autoscaler means it to be. Any other status is returned as it is."""
    if status.reason == "scaled-to-zero" and min_replicas == 0:
        return Status(SCALED_TO_ZERO, "scaled to zero while idle (autoscaling.minReplicas: 0); the gateway "
                      "holds its next request and the autoscaler wakes it", "scaled-to-zero")
    return status


def rollout_complete(deployment: dict | None, min_replicas: int | None = None) -> bool:
    """The Deployment controller has acted on the current spec, no old pod is left and every
    desired replica is ready: what `up` promises when it returns (as the Kubernetes provider's
    own Deployment await does), so a scale-up is not reported done at its first pod.

    Autoscaled (``min_replicas`` set): the live count is the autoscaler's, not the stack's. The
    rollout is whole when every pod runs the current spec and ``min_replicas`` of them are ready:
    `up` neither returns below the configured floor nor waits on replicas the autoscaler added
    for load (a scale-up waiting for GPUs is the autoscaler's business, not this deploy's)."""
    if not deployment:
        return False
    meta, spec, status = deployment.get("metadata") or {}, deployment.get("spec") or {}, deployment.get("status") or {}
    desired = int(spec.get("replicas") if spec.get("replicas") is not None else 1)
    observed = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    pods, updated = int(status.get("replicas") or 0), int(status.get("updatedReplicas") or 0)
    ready = int(status.get("readyReplicas") or 0)
    if min_replicas is not None:
        return observed and updated >= pods and ready >= min_replicas
    return observed and updated >= desired and pods <= desired and ready >= desired
