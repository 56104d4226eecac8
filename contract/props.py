"""Typed props between the components (which declare dynamic resources) and the providers.

Each class is the one definition of a resource's inputs: the component builds it and hands
``to_dict()`` to the engine; the provider reads the recorded dict back with ``from_dict``. The
wire keys are the field names, which deployed stacks already hold in their state (``namespace``,
``puller_job``, ``kubeconfig``, ...): renaming a field would show every deployed stack an update
of every model. A ``cluster`` field is written as ``kubeconfig`` and ``context``; a nested
dataclass (a status's objects) as its own keys, beside the others.

No import-time side effects, no Pulumi import: pickled providers import this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Union

from .labels import NIM_CRD_NAMES, NIM_VERSION

Props = Mapping[str, Any]


@dataclass(frozen=True)
class Target:
    """Which cluster to talk to: a kubeconfig path and context, or the ambient config; ``data``,
    a kubeconfig's content (a library user's, llm_serving), wins over both."""

    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    data: Optional[str] = None


class Wire:
    """``to_dict`` / ``from_dict`` by field name (tuples travel as lists)."""

    def to_dict(self) -> dict[str, Any]:
        wire: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Wire):
                wire.update(value.to_dict())
            elif value is not None:
                wire[f.name] = [v.to_dict() if isinstance(v, Wire) else v for v in value] if isinstance(value, tuple) else value
        return wire

    @classmethod
    def from_dict(cls, props: Props):
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            nested = _NESTED.get(str(f.type))
            if nested is not None:
                values[f.name] = nested(props)
            elif props.get(f.name) not in (None, ""):
                values[f.name] = tuple(props[f.name]) if isinstance(props[f.name], list) else props[f.name]
        return cls(**values)


@dataclass(frozen=True)
class ClusterTarget(Wire):
    """Which cluster a provider talks to: a kubeconfig path and context ("" = the ambient config)."""

    kubeconfig: str = ""
    context: str = ""
    # The kubeconfig's content, when the program hands it over instead of a path (llm_serving's
    # ModelServingArgs.kubeconfig_content, a secret input the components add beside the props:
    # never in a plan, never written by the stack program).
    kubeconfig_data: str = ""

    DATA_KEY: ClassVar[str] = "kubeconfig_data"

    @classmethod
    def of(cls, cluster: Any) -> ClusterTarget:
        """From the stack's cluster config (``kubeconfig`` / ``context``, either may be None)."""
        return cls(getattr(cluster, "kubeconfig", None) or "", getattr(cluster, "context", None) or "")

    def to_dict(self) -> dict[str, str]:
        # The content only when set: the stack program's records stay as they were.
        return {"kubeconfig": self.kubeconfig, "context": self.context,
                **({self.DATA_KEY: self.kubeconfig_data} if self.kubeconfig_data else {})}

    def kube(self) -> Target:
        return Target(self.kubeconfig or None, self.context or None, self.kubeconfig_data or None)


def kube_target(props: Props) -> Target:
    """The cluster a recorded props dict names."""
    return ClusterTarget.from_dict(props).kube()


@dataclass(frozen=True)
class GateProps(Wire):
    namespace: str
    model: str
    weights_claim: str
    puller_job: str
    model_source: str = ""
    deadline_seconds: float = 7200
    cluster: ClusterTarget = ClusterTarget()
    poll_seconds: Optional[float] = None  # tests only; never written by a component

    # A change of any of these means other weights: the gate is replaced (and waits again).
    WEIGHTS_KEYS: ClassVar[tuple[str, ...]] = ("namespace", "model", "weights_claim", "puller_job", "model_source")


@dataclass(frozen=True)
class RawObjects(Wire):
    """What the raw path's status reads (vLLM, NIM raw); the revision is the Deployment spec's digest."""

    deployment: str
    service: str
    puller_job: str = ""
    deployment_revision: str = ""


@dataclass(frozen=True)
class OperatorObjects(Wire):
    """What the NIM operator path's status reads; the revision is the NIMService spec's digest."""

    nim_service: str
    nim_cache: str
    service_revision: str = ""
    # multiNode: the LeaderWorkerSet the operator renders (groups of ``group_size`` pods). Written
    # only for multi-node models, so other operator-path stacks record the same inputs as before.
    leader_worker_set: Optional[str] = None
    group_size: Optional[int] = None


@dataclass(frozen=True)
class GroupObjects(Wire):
    """What a multi-node model's status reads: its LeaderWorkerSet (groups of ``group_size``
    pods), the Service selecting the leaders, the puller; the revision is the LWS spec's digest."""

    leader_worker_set: str
    service: str
    group_size: int
    puller_job: str = ""
    lws_revision: str = ""


Objects = Union[RawObjects, OperatorObjects, GroupObjects]


def _objects(props: Props) -> Objects:
    # The recorded keys tell the path: only the operator path's status names a NIMService, only
    # a multi-node model's a LeaderWorkerSet.
    if props.get("nim_service"):
        return OperatorObjects.from_dict(props)
    if props.get("leader_worker_set"):
        return GroupObjects.from_dict(props)
    return RawObjects.from_dict(props)


@dataclass(frozen=True)
class StatusProps(Wire):
    namespace: str
    model: str
    objects: Objects
    endpoint_url: str = ""
    pending_timeout_seconds: int = 900
    ready_timeout_seconds: int = 1800
    cluster: ClusterTarget = ClusterTarget()
    poll_seconds: Optional[float] = None  # tests only; never written by a component
    # platform.restartThreshold; written only when it is not the default, so a stack deployed
    # before the setting existed records the same inputs (no update of every status).
    restart_threshold: Optional[int] = None
    # autoscaling.minReplicas of an autoscaled model: the rollout is whole with that many ready
    # (the autoscaler owns the count beyond it). Written only for autoscaled models, so every
    # other model records the same inputs as before.
    min_replicas: Optional[int] = None

    @property
    def on_operator(self) -> bool:
        return isinstance(self.objects, OperatorObjects)


@dataclass(frozen=True)
class CrdRequirement(Wire):
    """A setting that needs another operator's CRDs, and how to get them or switch it off."""

    field: str
    crds: tuple[str, ...]
    version: str
    fix: str


def _requirements(props: Props) -> tuple[CrdRequirement, ...]:
    return tuple(CrdRequirement.from_dict(r) for r in props.get("requirements") or ())


# The owner of the platform's check of every CRD the stack needs (components/compile/crds.py):
# its message lists each missing one under a sentence (providers/crd_check.py missing_message).
STACK_CRDS_OWNER = "the stack"


@dataclass(frozen=True)
class RequiredCrdsProps(Wire):
    owner: str
    requirements: tuple[CrdRequirement, ...]
    cluster: ClusterTarget = ClusterTarget()

    @property
    def resource_id(self) -> str:
        return f"{self.owner}-crds"

    @classmethod
    def from_dict(cls, props: Props) -> RequiredCrdsProps:
        if "requirements" not in props and "crds" in props:
            return NimOperatorCheckProps.from_dict(props)
        return super().from_dict(props)


# The NIM operator's install instructions (k8s-nim-operator README, Helm chart nvidia/k8s-nim-operator).
NIM_OPERATOR_FIX = (
    "install the k8s-nim-operator (helm repo add nvidia https://helm.ngc.nvidia.com/nvidia && helm install "
    "nim-operator nvidia/k8s-nim-operator -n nim-operator --create-namespace), or set `path: raw` on the "
    "model to deploy it without the operator"
)


@dataclass(frozen=True)
class NimOperatorCheckProps(RequiredCrdsProps):
    """An operator-path NIM model's CRD requirement. Deployed stacks record it as ``model`` and
    ``crds`` (the check's first wire shape), so that is what it still writes."""

    model: str = ""
    # The NIMService's spec.multiNode as rendered (canonical JSON), "" for a one-node model: the
    # operator's webhook makes it immutable, so the check refuses a change of it at preview.
    # Written only when set, so one-node models record the same inputs as before.
    multi_node: str = ""
    MULTI_NODE_PROPERTY: ClassVar[str] = "multi_node"

    @classmethod
    def of(cls, model: str, crds: tuple[str, ...], version: str, cluster: ClusterTarget,
           multi_node: str = "") -> NimOperatorCheckProps:
        requirement = CrdRequirement("it", tuple(crds), version, NIM_OPERATOR_FIX)
        return cls(f"model {model} uses path: operator", (requirement,), cluster, model, multi_node)

    @property
    def resource_id(self) -> str:
        return f"{self.model}-nim-operator"

    def to_dict(self) -> dict[str, Any]:
        wire = {"model": self.model, "crds": list(self.requirements[0].crds), **self.cluster.to_dict()}
        if self.multi_node:
            wire[self.MULTI_NODE_PROPERTY] = self.multi_node
        return wire

    @classmethod
    def from_dict(cls, props: Props) -> NimOperatorCheckProps:
        return cls.of(props.get("model") or "?", tuple(props.get("crds") or NIM_CRD_NAMES), NIM_VERSION,
                      ClusterTarget.from_dict(props), props.get(cls.MULTI_NODE_PROPERTY) or "")


@dataclass(frozen=True)
class WorkloadKindProps(Wire):
    router: str
    kind: str
    migrate_from: str = ""
    kind_explicit: bool = True

    KEYS: ClassVar[tuple[str, ...]] = ("router", "kind", "migrate_from", "kind_explicit")


@dataclass(frozen=True)
class RouterTargetsProps(Wire):
    router: str
    namespace: str
    services: Mapping[str, str]
    # The fronted models' recorded targets (Outputs at declaration): re-read when one changes.
    fronted_targets: tuple[Any, ...] = ()
    cluster: ClusterTarget = ClusterTarget()


# Nested fields, by annotation: each reads its part of the same flat dict.
_NESTED = {"ClusterTarget": ClusterTarget.from_dict, "Objects": _objects,
           "tuple[CrdRequirement, ...]": _requirements}
