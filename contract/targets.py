"""Routable targets from EndpointSlices, as the request router sees them.

Pure: EndpointSlice and Pod dicts (wire shape) in, targets out. Used by the model status (a model
is READY only when its Service has at least one target) and by the router component.

What the router can reach follows the upstream model (NVIDIA llm-request-router, chart 0.16.2,
devilkun/nvcf@e07119fa): the router never reads model Services. Two things must hold:
- router pods: the backend router (``stargate-k8s-router``, ``src/endpoints.rs``) reads the
  router's *headless* Service's EndpointSlices, keeps only slices with a port named ``grpc``
  (TCP) and one named ``quic`` (UDP), and takes each endpoint that is ready (absent = ready) and
  not terminating, named by its pod (``targetRef.name``). ``serving`` is not consulted: the
  headless Service publishes warming pods and upstream includes a ready-but-not-serving one.
- models: a model is reachable when a pylon beside it has registered it with those router pods.
  Registrations live in each router pod's memory and the router exposes no API we could ask from
  a deploy tool, so the observable proxy is: a ready pod of the model's Service whose ``pylon``
  container is ready (pylon's only probe is its metrics server, so "ready" says the sidecar runs,
  not that every registration stream is up; ``pylon_registration_stream_connected`` on its
  ``/metrics`` says that).

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Optional

from .names import PYLON_CONTAINER


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


ROUTER_PORTS = (("grpc", "TCP"), ("quic", "UDP"))  # stargate-k8s-router --grpc/--quic-port-name


@dataclass(frozen=True)
class RouterTargets:
    """What the router can reach: its pods, and per fronted model the pods a pylon serves."""

    by_model: Mapping[str, TargetSnapshot]
    routers: TargetSnapshot = field(default_factory=TargetSnapshot)

    @property
    def revision(self) -> str:
        digest = hashlib.sha256()
        digest.update(f"routers={self.routers.revision}\n".encode())
        for model in sorted(self.by_model):
            digest.update(f"{model}={self.by_model[model].revision}\n".encode())
        return digest.hexdigest()[:16]

    @property
    def count(self) -> int:
        return sum(len(snapshot.targets) for snapshot in self.by_model.values())

    @property
    def reachable(self) -> bool:
        """At least one router pod, and every fronted model with at least one pylon-served pod."""
        return bool(self.routers.targets) and bool(self.by_model) and all(
            snapshot.targets for snapshot in self.by_model.values())

    def as_outputs(self) -> dict:
        return {
            "routers": self.routers.pods,
            "models": {model: self.by_model[model].pods for model in sorted(self.by_model)},
            "count": self.count,
            "reachable": self.reachable,
            "revision": self.revision,
        }


def _slices_of(service: str, endpoint_slices: Iterable[dict]) -> list[dict]:
    return [s for s in endpoint_slices
            if ((s.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL) == service]


def has_router_ports(endpoint_slice: dict) -> bool:
    """The slice names a ``grpc`` TCP port and a ``quic`` UDP port (protocol absent = TCP), each
    with a port number: the backend router ignores a slice without both."""
    ports = endpoint_slice.get("ports") or []
    return all(
        any(p.get("name") == name and (p.get("protocol") or "TCP").upper() == protocol and (p.get("port") or 0) > 0
            for p in ports)
        for name, protocol in ROUTER_PORTS
    )


def router_pods(router_service: str, endpoint_slices: Iterable[dict]) -> TargetSnapshot:
    """The router pods the backend router would hand pylons, from the headless Service's slices."""
    return routable_targets(s for s in _slices_of(router_service, endpoint_slices) if has_router_ports(s))


def pods_with_ready_pylon(pods: Iterable[dict]) -> set[str]:
    """Names of pods not being deleted whose ``pylon`` container reports ready."""
    names = set()
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("deletionTimestamp") or not metadata.get("name"):
            continue
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if any(c.get("name") == PYLON_CONTAINER and c.get("ready") is True for c in statuses):
            names.add(metadata["name"])
    return names


def router_targets(services: Mapping[str, str], endpoint_slices: Iterable[dict],
                   pods: Optional[Iterable[dict]] = None, router_service: Optional[str] = None) -> RouterTargets:
    """Group slices by the Service they belong to (their ``kubernetes.io/service-name`` label).

    Per fronted model: the ready endpoints of its Service's slices, kept only where the pod has a
    ready pylon (``pods``); ``pods=None`` skips that filter (the model Service's own view, which
    the model status uses). ``router_service``: the router's headless Service, for the router
    pods. Slices of other Services are ignored.
    """
    endpoint_slices = list(endpoint_slices)
    with_pylon = None if pods is None else pods_with_ready_pylon(pods)
    by_model = {}
    for model, service in services.items():
        snapshot = routable_targets(_slices_of(service, endpoint_slices))
        if with_pylon is not None:
            snapshot = TargetSnapshot(tuple(t for t in snapshot.targets if t.pod in with_pylon))
        by_model[model] = snapshot
    routers = router_pods(router_service, endpoint_slices) if router_service else TargetSnapshot()
    return RouterTargets(by_model, routers)


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
