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
- snapshots are revisioned: the revision changes exactly when the target set changes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable


@dataclass(frozen=True, order=True)
class Target:
    pod: str
    addresses: tuple[str, ...] = ()
    node: str = ""

    def as_dict(self) -> dict:
        return {"pod": self.pod, "addresses": list(self.addresses), "node": self.node}


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


def _is_ready(endpoint: dict) -> bool:
    conditions = endpoint.get("conditions") or {}
    if conditions.get("terminating") is True:
        return False
    return conditions.get("ready") is not False


def routable_targets(endpoint_slices: Iterable[dict]) -> TargetSnapshot:
    by_pod: dict[str, tuple[set[str], str]] = {}
    for endpoint_slice in endpoint_slices:
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
