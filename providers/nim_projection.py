"""Status of an operator-path NIM model as a pure function of what the cluster shows.

Inputs are plain dicts: the ``NIMService`` and ``NIMCache`` custom resources and the core objects
the operator renders for the service (its Deployment, pods and EndpointSlices, in an
``Observation``). The pod-level diagnostics (crash loop, image pull, pending too long, routable
targets) are ``projection.project_status``'s, shared with the raw path; this module adds what
only the operator knows: the cache's progress and failure, and the service's state.

Rules, in order:
- a failed cache is ERROR (state ``Failed`` or condition ``NIM_CACHE_JOB_COMPLETED`` False);
- no NIMService object yet: PENDING;
- NIMService ``Failed``: ERROR with the operator's reason and message;
- a pod-level ERROR (crash loop, image pull, pending too long): that ERROR, with its evidence;
- ``Ready`` with a routable target: READY; ``Ready`` without one: PENDING;
- empty / null / missing state (not reconciled yet), ``NotReady`` or ``Pending``: PENDING,
  saying whether the weights are still being cached or the server is starting;
- any other state: UNKNOWN (never guessed).

A multi-node NIMService (``multiNode``) is served by the LeaderWorkerSet the operator renders in
place of the Deployment; its pods are read per group by ``group_projection`` (the vLLM multi-node
path's projection, shared): READY needs a whole group (leader and every worker ready) with its
leader routable, and a recreated group or a group pod in trouble is reported as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from .group_projection import GroupObservation, project_group_status
from .projection import ERROR, PENDING, READY, UNKNOWN, Observation, Status, cap, project_status

# Upper-case since 2024-08; older operators wrote lower-case ("ready", "in-progress"): compare
# case-insensitively and without separators.
SERVICE_PENDING_STATES = {"notready", "pending"}

CACHE_JOB_COMPLETED = "NIM_CACHE_JOB_COMPLETED"
CACHE_RECONCILE_FAILED = "NIM_CACHE_RECONCILE_FAILED"


@dataclass
class NimObservation:
    """One read of an operator-path model. ``core`` holds the operator-rendered objects, with
    the service's pods labelled as server pods so the shared diagnostics apply to them."""

    model: str
    service_name: str
    cache_name: str
    service: Optional[dict] = None
    cache: Optional[dict] = None
    core: Observation = field(default_factory=lambda: Observation(model=""))
    # multiNode: the operator's LeaderWorkerSet and its group pods (``core`` is the group's).
    group: Optional[GroupObservation] = None


def _norm(state: object) -> str:
    return re.sub(r"[^a-z]", "", str(state).lower()) if isinstance(state, str) else ""


def _status(obj: Optional[dict]) -> dict:
    status = (obj or {}).get("status")
    return status if isinstance(status, dict) else {}


def _conditions(obj: Optional[dict]) -> list[dict]:
    conditions = _status(obj).get("conditions")
    return [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []


def _condition(obj: Optional[dict], kind: str) -> Optional[dict]:
    for condition in _conditions(obj):
        if condition.get("type") == kind:
            return condition
    return None


def condition_lines(obj: Optional[dict]) -> list[str]:
    return [cap(f"{c.get('type')}={c.get('status')} {c.get('reason') or ''}: {c.get('message') or ''}".strip(), 300)
            for c in _conditions(obj)]


def _kebab(reason: str) -> str:
    """``NIMCacheNotFound`` -> ``nim-cache-not-found`` (acronym runs stay one word)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", reason).lower() if reason else ""


def cache_state(cache: Optional[dict]) -> str:
    return str(_status(cache).get("state") or "")


def cache_failure(obs: NimObservation) -> Optional[Status]:
    cache = obs.cache
    if cache is None:
        return None
    job = _condition(cache, CACHE_JOB_COMPLETED)
    failed_job = job is not None and job.get("status") == "False" and job.get("reason") == "JobFailed"
    if _norm(cache_state(cache)) != "failed" and not failed_job:
        return None
    why = (job or {}).get("message") if failed_job else None
    why = why or next((c.get("message") for c in _conditions(cache) if c.get("message")), "") or "no message"
    message = (
        f"weights cache NIMCache {obs.cache_name} failed: {why}. The operator keeps the caching "
        "Job's logs for 10 minutes only; check the source, auth secret and puller image, then run "
        "`pulumi up` (a changed cache is a new NIMCache)"
    )
    return Status(ERROR, cap(message), "cache-failed",
                  {"nimCache": obs.cache_name, "state": cache_state(cache), "conditions": condition_lines(cache)})


def _caching(obs: NimObservation) -> Optional[str]:
    """Why the service waits for the cache, or None when the cache is Ready."""
    if obs.cache is None:
        return f"waiting for NIMCache {obs.cache_name} to be created"
    state = cache_state(obs.cache)
    if _norm(state) == "ready":
        return None
    retrying = _condition(obs.cache, CACHE_RECONCILE_FAILED)
    if retrying is not None and retrying.get("status") == "True":
        return f"caching weights: NIMCache {obs.cache_name} reconcile failed, the operator retries: {retrying.get('message') or ''}"
    return f"caching weights: NIMCache {obs.cache_name} is {state or 'not reconciled yet'}"


def server_status(obs: NimObservation) -> Optional[Status]:
    """What the pods of the operator's server say, once it exists: its Deployment's, or for a
    multi-node NIMService its LeaderWorkerSet's groups (None until the operator created it)."""
    if obs.group is not None:
        return project_group_status(obs.group) if obs.group.leader_worker_set is not None else None
    return project_status(obs.core) if obs.core.deployment is not None else None


def project_nim_status(obs: NimObservation) -> Status:
    failed = cache_failure(obs)
    if failed:
        return failed
    if obs.service is None:
        return Status(PENDING, f"waiting for NIMService {obs.service_name} to be created", "not-created")

    raw_state = _status(obs.service).get("state")
    state = _norm(raw_state)
    details = {"nimService": obs.service_name, "nimCache": obs.cache_name,
               "state": raw_state if isinstance(raw_state, str) else "",
               "conditions": condition_lines(obs.service)}
    if state == "failed":
        condition = _condition(obs.service, "Failed")
        if condition is None or condition.get("status") != "True":
            condition = _condition(obs.service, "Ready") or {}
        reason = condition.get("reason") or ""
        message = f"NIMService {obs.service_name} failed: {reason or 'Failed'}: {condition.get('message') or 'no message'}"
        return Status(ERROR, cap(message), _kebab(reason) or "service-failed", details)

    pods = server_status(obs)
    if pods is not None and pods.state == ERROR:
        return pods
    if state == "ready":
        if pods is not None and pods.state == READY:
            return pods
        return Status(PENDING, f"operator reports NIMService {obs.service_name} Ready, no routable target yet",
                      "no-targets", details)
    if state == "" or state in SERVICE_PENDING_STATES:
        waiting = _caching(obs)
        if waiting:
            return Status(PENDING, cap(waiting), "caching", details)
        if state == "":
            return Status(PENDING, f"the NIM operator has not reconciled NIMService {obs.service_name} yet",
                          "not-reconciled", details)
        if pods is not None:
            return Status(PENDING, pods.message, pods.reason, {**details, **pods.details},
                          pods.ready_replicas, pods.targets, pods.pod)
        server = "LeaderWorkerSet" if obs.group is not None else "Deployment"
        return Status(PENDING, f"model server starting: the operator has not created its {server} yet",
                      "starting", details)
    return Status(UNKNOWN, cap(f"NIMService {obs.service_name} reports state {raw_state!r}, which this "
                               "version does not know; check `kubectl describe nimservice`"),
                  "unknown-state", details)
