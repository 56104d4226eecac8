"""Status of a multi-node model (a LeaderWorkerSet) as a pure function of what the cluster shows.

Inputs are plain dicts: the ``LeaderWorkerSet``, the model's pods (leaders and workers, labelled
by the LWS controller and its webhook with their group and worker index), the Service's
EndpointSlices (the Service selects leaders only), the puller Job, and the LWS's events. The
pod-level diagnostics (crash loop, image pull, pending too long — with the pod's name, worker or
leader) are ``projection.project_status``'s, shared with the one-pod path; this module adds what
only groups have:

- a leader is a routable target only while its whole group is there and ready (``size`` pods,
  all Ready, none terminating): a leader whose worker is gone serves nothing;
- READY when at least one group is complete with its leader routable; the rollout is whole when
  every group is (``group_rollout_complete``);
- a group the LWS controller recreated (a worker failed or was deleted: the event
  ``RecreateGroupOnPodRestart``) is reported as such, while it comes back and once it has;
- a group pod its node evicted (phase Failed, reason Evicted) is named with the kubelet's message;
- per-pod weights (``multiNode.weights: perPod``): pods pulling or verifying their own volume, and
  a pull or verify step that failed, with the pod and the step (``pod_weights.weights_status``),
  before the server-level diagnostics (which would call a failed init container a crash).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from contract.labels import LWS_GROUP_INDEX_LABEL, LWS_NAME_LABEL, LWS_RECREATE_EVENT, LWS_WORKER_INDEX_LABEL

from .pod_weights import weights_status
from .projection import ERROR, PENDING, READY, Observation, Status, cap, project_status

RECREATED_LIMIT = 3  # recreate events quoted in a status


@dataclass
class GroupObservation:
    """One read of a multi-node model. ``core`` holds the pods, EndpointSlices and puller Job,
    with the LeaderWorkerSet in place of a Deployment."""

    model: str
    name: str
    size: int
    leader_worker_set: Optional[dict] = None
    lws_events: list[dict] = field(default_factory=list)
    core: Observation = field(default_factory=lambda: Observation(model=""))


@dataclass(frozen=True)
class Group:
    index: str
    leader: Optional[str]
    pods: tuple[str, ...]
    ready: tuple[str, ...]
    size: int
    evicted: tuple[str, ...] = ()  # "<pod>: <kubelet's message>" of pods the node evicted


    @property
    def complete(self) -> bool:
        return self.leader is not None and len(self.ready) == self.size == len(self.pods)

    def describe(self) -> str:
        missing = self.size - len(self.pods)
        waiting = [p for p in self.pods if p not in self.ready]
        parts = [f"group {self.index}: {len(self.ready)}/{self.size} pods ready"]
        if self.leader is None:
            parts.append("no leader pod")
        if missing > 0:
            parts.append(f"{missing} pod(s) not created yet")
        if waiting:
            parts.append("not ready: " + ", ".join(sorted(waiting)))
        if self.evicted:
            parts.append("evicted: " + ", ".join(self.evicted))
        return "; ".join(parts)


def _evicted(pod: dict) -> Optional[str]:
    """``<pod>: <why>`` for a pod its node evicted (phase Failed, reason Evicted), else None."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed" or status.get("reason") != "Evicted":
        return None
    return f"{(pod.get('metadata') or {}).get('name', '')}: {cap(status.get('message') or 'no message', 200)}"


def _labels(pod: dict) -> dict:
    return (pod.get("metadata") or {}).get("labels") or {}


def _ready(pod: dict) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def groups_of(seen: GroupObservation) -> list[Group]:
    """The groups the pods show, by group index (pods of this LeaderWorkerSet only)."""
    by_index: dict[str, list[dict]] = {}
    for pod in seen.core.pods:
        labels = _labels(pod)
        if labels.get(LWS_NAME_LABEL) != seen.name or LWS_GROUP_INDEX_LABEL not in labels:
            continue
        by_index.setdefault(labels[LWS_GROUP_INDEX_LABEL], []).append(pod)
    groups = []
    for index, pods in sorted(by_index.items(), key=lambda item: int(item[0]) if item[0].isdigit() else 0):
        names = [(p.get("metadata") or {}).get("name", "") for p in pods]
        leaders = [n for n, p in zip(names, pods, strict=True) if _labels(p).get(LWS_WORKER_INDEX_LABEL) == "0"]
        groups.append(Group(index, leaders[0] if leaders else None, tuple(names),
                            tuple(n for n, p in zip(names, pods, strict=True) if _ready(p)), seen.size,
                            tuple(e for e in map(_evicted, pods) if e)))
    return groups


def _desired(lws: dict) -> int:
    replicas = (lws.get("spec") or {}).get("replicas")
    return int(replicas if replicas is not None else 1)


def group_rollout_complete(lws: Optional[dict], groups: list[Group]) -> bool:
    """Every desired group exists on the current template and is complete (the LWS controller
    counts a group ready only when all its pods are), and no update is in progress."""
    if not lws:
        return False
    status, desired = lws.get("status") or {}, _desired(lws)
    updating = any(c.get("type") == "UpdateInProgress" and c.get("status") == "True"
                   for c in status.get("conditions") or [])
    complete = sum(1 for g in groups if g.complete)
    return (not updating and int(status.get("readyReplicas") or 0) >= desired
            and int(status.get("updatedReplicas") or 0) >= desired and complete >= desired
            and len(groups) <= desired)


def recreations(seen: GroupObservation) -> list[str]:
    """What the LWS controller said when it recreated groups, newest last."""
    events = [e for e in seen.lws_events if e.get("reason") == LWS_RECREATE_EVENT]
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [cap(e.get("message") or "", 300) for e in events[-RECREATED_LIMIT:]]


def _routable_leaders_only(core: Observation, leaders: set[str]) -> Observation:
    """``core`` with the EndpointSlices keeping only endpoints of complete groups' leaders."""
    slices = []
    for piece in core.endpoint_slices:
        endpoints = [e for e in piece.get("endpoints") or []
                     if ((e.get("targetRef") or {}).get("name") in leaders)]
        slices.append({**piece, "endpoints": endpoints})
    return dataclasses.replace(core, endpoint_slices=slices)


def project_group_status(seen: GroupObservation) -> Status:
    lws = seen.leader_worker_set
    if lws is None:
        return project_status(seen.core)  # weights download, or the server not created yet
    groups = groups_of(seen)
    complete = [g for g in groups if g.complete]
    desired = _desired(lws)
    # The shared diagnostics read the LeaderWorkerSet as the server: replicas are groups.
    server = {"spec": {"replicas": desired}, "status": {"readyReplicas": len(complete)}}
    core = _routable_leaders_only(dataclasses.replace(seen.core, deployment=server),
                                  {g.leader for g in complete if g.leader})
    group_pods = [p for p in seen.core.pods if _labels(p).get(LWS_NAME_LABEL) == seen.name]
    weights = weights_status(group_pods, seen.core.restart_threshold)
    if weights is not None and weights.state == ERROR:
        return dataclasses.replace(weights, details={**weights.details, "groups": [g.describe() for g in groups]})
    status = project_status(core)
    recreated = recreations(seen)
    details = {**status.details, "groups": [g.describe() for g in groups]}
    if weights is not None:
        details["weights"] = weights.message
    if recreated:
        details["recreated"] = recreated
    note = f"; recreated by the LWS controller: {recreated[-1]}" if recreated else ""
    if status.state == READY:
        message = (f"serving: {len(status.targets)} routable leader(s), {len(complete)}/{desired} groups "
                   f"of {seen.size} pods ready{note}")
        return dataclasses.replace(status, message=cap(message), details=details)
    if status.state == PENDING and status.reason == "starting" and weights is not None:
        message = f"{len(complete)}/{desired} groups ready: {weights.message}{note}"
        return dataclasses.replace(weights, message=cap(message), details={**details, **weights.details})
    if status.state == PENDING and status.reason in ("starting", "scaled-to-zero"):
        incomplete = [g.describe() for g in groups if not g.complete] or ["no group pods yet"]
        reason = "group-recreating" if recreated and groups and not complete else status.reason
        if reason == status.reason and any(g.evicted for g in groups if not g.complete):
            reason = "pod-evicted"  # the LWS controller recreates its group; said until it has
        message = f"{len(complete)}/{desired} groups ready: " + " | ".join(incomplete) + note
        return dataclasses.replace(status, message=cap(message), reason=reason, details=details)
    return dataclasses.replace(status, details=details)
