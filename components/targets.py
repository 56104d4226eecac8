"""Routable targets from EndpointSlices, as the request router sees them.

Pure: EndpointSlice dicts (wire shape) in, targets out. Used by the model status (a model is
READY only when the router would see at least one target for it) and by the router component.

Rules (the upstream router's):
- the canonical identity of a target is the pod named by ``targetRef.name``;
- only ready endpoints are targets (an absent ``ready`` means "unknown", which the
  EndpointSlice API asks consumers to treat as ready; an explicit ``false`` is not ready,
  and a terminating endpoint is not routable);
- the same pod in several slices (dual-stack, slice churn) collapses to one target;
- targets disappear when their endpoints do: a snapshot is computed from the slices alone;
- snapshots are revisioned: the revision changes exactly when the target set changes;
- an older copy of a slice never overwrites a newer one: copies of one slice (same namespace
  and name) are ordered by ``metadata.resourceVersion``. Kubernetes calls resource versions
  opaque, but every etcd-backed object's is a decimal integer that grows with each write, and
  watch caches and informers order by it; copies whose versions cannot be compared (absent or
  not decimal) are taken in arrival order, the order a watch delivers them.

``routable_targets`` computes a snapshot from one listing (which may still hold several copies
of a slice, e.g. merged from two sources).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional


@dataclass(frozen=True, order=True)
class Target:
    pod: str
    addresses: tuple[str, ...] = ()
    node: str = ""


@dataclass(frozen=True)
class TargetSnapshot:
    targets: tuple[Target, ...] = field(default_factory=tuple)

    @property
    def revision(self) -> str:
        digest = hashlib.sha256()
        for target in self.targets:
            digest.update(f"{target.pod}|{','.join(target.addresses)}|{target.node}\n".encode())
        return digest.hexdigest()[:16]

    @property
    def pods(self) -> list[str]:
        return [t.pod for t in self.targets]


SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class RouterTargets:
    """What the router forwards to: per fronted model, the targets of its Service's slices."""

    by_model: Mapping[str, TargetSnapshot]

    @property
    def revision(self) -> str:
        digest = hashlib.sha256()
        for model in sorted(self.by_model):
            digest.update(f"{model}={self.by_model[model].revision}\n".encode())
        return digest.hexdigest()[:16]

    @property
    def count(self) -> int:
        return sum(len(snapshot.targets) for snapshot in self.by_model.values())

    def as_outputs(self) -> dict:
        return {
            "models": {model: self.by_model[model].pods for model in sorted(self.by_model)},
            "count": self.count,
            "revision": self.revision,
        }


def router_targets(services: Mapping[str, str], endpoint_slices: Iterable[dict]) -> RouterTargets:
    """Group slices by the Service they belong to (their ``kubernetes.io/service-name`` label)
    and compute each fronted model's targets; slices of other Services are ignored."""
    by_service: dict[str, list[dict]] = {service: [] for service in services.values()}
    for endpoint_slice in endpoint_slices:
        service = ((endpoint_slice.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL)
        if service in by_service:
            by_service[service].append(endpoint_slice)
    return RouterTargets({model: routable_targets(by_service[service]) for model, service in services.items()})


def _is_ready(endpoint: dict) -> bool:
    conditions = endpoint.get("conditions") or {}
    if conditions.get("terminating") is True:
        return False
    return conditions.get("ready") is not False


SliceKey = tuple[str, str]


def slice_key(endpoint_slice: dict) -> Optional[SliceKey]:
    """(namespace, name) of a slice; None for a slice without a name (it cannot be a copy)."""
    metadata = endpoint_slice.get("metadata") or {}
    name = metadata.get("name")
    return (metadata.get("namespace") or "", name) if name else None


def resource_version(endpoint_slice: dict) -> Optional[int]:
    version = str((endpoint_slice.get("metadata") or {}).get("resourceVersion") or "")
    return int(version) if version.isdecimal() else None


def is_newer(candidate: Optional[int], current: Optional[int]) -> bool:
    """Whether a copy at version ``candidate`` replaces one at ``current``: a strictly higher
    version does, a lower one never; an equal one (the same write seen twice) changes nothing;
    unorderable versions go by arrival."""
    if candidate is None or current is None:
        return True
    return candidate > current


def newest_copies(endpoint_slices: Iterable[dict]) -> list[dict]:
    """One copy per slice: the newest by resource version (arrival order when unorderable)."""
    newest: dict[SliceKey, dict] = {}
    anonymous: list[dict] = []
    for endpoint_slice in endpoint_slices:
        key = slice_key(endpoint_slice)
        if key is None:
            anonymous.append(endpoint_slice)
        elif key not in newest or is_newer(resource_version(endpoint_slice), resource_version(newest[key])):
            newest[key] = endpoint_slice
    return [*newest.values(), *anonymous]


def routable_targets(endpoint_slices: Iterable[dict]) -> TargetSnapshot:
    by_pod: dict[str, tuple[set[str], str]] = {}
    for endpoint_slice in newest_copies(endpoint_slices):
        for endpoint in endpoint_slice.get("endpoints") or []:
            ref = endpoint.get("targetRef") or {}
            if ref.get("kind", "Pod") != "Pod" or not ref.get("name") or not _is_ready(endpoint):
                continue
            addresses, node = by_pod.setdefault(ref["name"], (set(), endpoint.get("nodeName") or ""))
            addresses.update(endpoint.get("addresses") or [])
            if not node and endpoint.get("nodeName"):
                by_pod[ref["name"]] = (addresses, endpoint["nodeName"])
    return TargetSnapshot(tuple(sorted(
        Target(pod, tuple(sorted(addresses)), node) for pod, (addresses, node) in by_pod.items()
    )))
