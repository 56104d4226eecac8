"""Typed props between the components (which declare dynamic resources) and the providers.

Each class is the one definition of a resource's inputs: the component builds it and hands
``to_dict()`` to the engine; the provider reads the recorded dict back with ``from_dict``. The
wire keys are those deployed stacks already hold in their state (plain string keys such as
``namespace``, ``puller_job``, ``kubeconfig``): renaming one would show every deployed stack an
update of every model, so they stay as they are.

No import-time side effects, no Pulumi import: pickled providers import this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional, Union

from .kube import Target

Props = Mapping[str, Any]


def _int(props: Props, key: str, default: int) -> int:
    value = props.get(key)
    return int(value) if value not in (None, "") else default


@dataclass(frozen=True)
class ClusterTarget:
    """Which cluster a provider talks to: a kubeconfig path and context ("" = the ambient config)."""

    kubeconfig: str = ""
    context: str = ""

    @classmethod
    def of(cls, cluster: Any) -> "ClusterTarget":
        """From the stack's cluster config (``kubeconfig`` / ``context``, either may be None)."""
        return cls(getattr(cluster, "kubeconfig", None) or "", getattr(cluster, "context", None) or "")

    @classmethod
    def from_dict(cls, props: Props) -> "ClusterTarget":
        return cls(props.get("kubeconfig") or "", props.get("context") or "")

    def to_dict(self) -> dict[str, str]:
        return {"kubeconfig": self.kubeconfig, "context": self.context}

    def kube(self) -> Target:
        return Target(self.kubeconfig or None, self.context or None)


def kube_target(props: Props) -> Target:
    """The cluster a recorded props dict names."""
    return ClusterTarget.from_dict(props).kube()


# --- the weights gate ---------------------------------------------------------------------------

@dataclass(frozen=True)
class GateProps:
    namespace: str
    model: str
    weights_claim: str
    puller_job: str
    model_source: str
    deadline_seconds: int
    cluster: ClusterTarget = ClusterTarget()

    # A change of any of these means other weights: the gate is replaced (and waits again).
    WEIGHTS_KEYS: ClassVar[tuple[str, ...]] = ("namespace", "model", "weights_claim", "puller_job", "model_source")

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace, "model": self.model, "weights_claim": self.weights_claim,
            "puller_job": self.puller_job, "model_source": self.model_source,
            "deadline_seconds": self.deadline_seconds, **self.cluster.to_dict(),
        }

    @classmethod
    def from_dict(cls, props: Props) -> "GateProps":
        return cls(props["namespace"], props["model"], props["weights_claim"], props["puller_job"],
                   props.get("model_source") or "", _int(props, "deadline_seconds", 7200),
                   ClusterTarget.from_dict(props))


# --- the model status ---------------------------------------------------------------------------

@dataclass(frozen=True)
class RawObjects:
    """The raw path's objects the status reads (vLLM, NIM raw)."""

    deployment: str
    service: str
    puller_job: str = ""
    revision: str = ""  # digest of the Deployment spec: a new one waits again

    def to_dict(self) -> dict[str, str]:
        return {"deployment": self.deployment, "service": self.service, "puller_job": self.puller_job,
                "deployment_revision": self.revision}

    @classmethod
    def from_dict(cls, props: Props) -> "RawObjects":
        return cls(props["deployment"], props["service"], props.get("puller_job") or "",
                   props.get("deployment_revision") or "")


@dataclass(frozen=True)
class OperatorObjects:
    """The NIM operator path's custom resources the status reads (the operator renders the rest)."""

    nim_service: str
    nim_cache: str
    revision: str = ""  # digest of the NIMService spec

    def to_dict(self) -> dict[str, str]:
        return {"nim_service": self.nim_service, "nim_cache": self.nim_cache, "service_revision": self.revision}

    @classmethod
    def from_dict(cls, props: Props) -> "OperatorObjects":
        return cls(props["nim_service"], props["nim_cache"], props.get("service_revision") or "")


@dataclass(frozen=True)
class StatusProps:
    namespace: str
    model: str
    objects: Union[RawObjects, OperatorObjects]
    endpoint_url: str = ""
    pending_timeout_seconds: int = 900
    ready_timeout_seconds: int = 1800
    cluster: ClusterTarget = ClusterTarget()
    poll_seconds: Optional[float] = None  # tests only; never written by a component

    @property
    def on_operator(self) -> bool:
        return isinstance(self.objects, OperatorObjects)

    def to_dict(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "namespace": self.namespace, "model": self.model, **self.objects.to_dict(),
            "endpoint_url": self.endpoint_url, "pending_timeout_seconds": self.pending_timeout_seconds,
            "ready_timeout_seconds": self.ready_timeout_seconds, **self.cluster.to_dict(),
        }
        if self.poll_seconds is not None:
            wire["poll_seconds"] = self.poll_seconds
        return wire

    @classmethod
    def from_dict(cls, props: Props) -> "StatusProps":
        # The recorded keys tell the path: only the operator path's status names a NIMService.
        objects = OperatorObjects.from_dict(props) if props.get("nim_service") else RawObjects.from_dict(props)
        poll = props.get("poll_seconds")
        return cls(props["namespace"], props["model"], objects, props.get("endpoint_url") or "",
                   _int(props, "pending_timeout_seconds", 900), _int(props, "ready_timeout_seconds", 1800),
                   ClusterTarget.from_dict(props), float(poll) if poll not in (None, "") else None)


# --- required custom resource definitions ------------------------------------------------------

@dataclass(frozen=True)
class CrdRequirement:
    """A setting that needs another operator's CRDs, and how to get them or switch it off."""

    field: str
    crds: tuple[str, ...]
    version: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "crds": list(self.crds), "version": self.version, "fix": self.fix}

    @classmethod
    def from_dict(cls, props: Props) -> "CrdRequirement":
        return cls(props["field"], tuple(props["crds"]), props["version"], props["fix"])


@dataclass(frozen=True)
class RequiredCrdsProps:
    owner: str
    requirements: tuple[CrdRequirement, ...]
    cluster: ClusterTarget = ClusterTarget()
    # The input a preview failure is reported against, and the recorded resource id.
    failure_property: ClassVar[str] = "requirements"

    @property
    def resource_id(self) -> str:
        return f"{self.owner}-crds"

    def to_dict(self) -> dict[str, Any]:
        return {"owner": self.owner, "requirements": [r.to_dict() for r in self.requirements],
                **self.cluster.to_dict()}

    @classmethod
    def from_dict(cls, props: Props) -> "RequiredCrdsProps":
        if "requirements" not in props and "crds" in props:
            return NimOperatorCheckProps.from_dict(props)
        return cls(props.get("owner") or "?", tuple(CrdRequirement.from_dict(r) for r in props.get("requirements") or []),
                   ClusterTarget.from_dict(props))


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
    failure_property: ClassVar[str] = "crds"

    @classmethod
    def of(cls, model: str, crds: tuple[str, ...], version: str, cluster: ClusterTarget) -> "NimOperatorCheckProps":
        requirement = CrdRequirement("it", tuple(crds), version, NIM_OPERATOR_FIX)
        return cls(f"model {model} uses path: operator", (requirement,), cluster, model)

    @property
    def resource_id(self) -> str:
        return f"{self.model}-nim-operator"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "crds": list(self.requirements[0].crds), **self.cluster.to_dict()}

    @classmethod
    def from_dict(cls, props: Props) -> "NimOperatorCheckProps":
        from components.labels import NIM_CRD_NAMES, NIM_VERSION

        return cls.of(props.get("model") or "?", tuple(props.get("crds") or NIM_CRD_NAMES), NIM_VERSION,
                      ClusterTarget.from_dict(props))


# --- the router's bookkeeping ------------------------------------------------------------------

@dataclass(frozen=True)
class WorkloadKindProps:
    router: str
    kind: str
    migrate_from: str = ""
    kind_explicit: bool = True

    KEYS: ClassVar[tuple[str, ...]] = ("router", "kind", "migrate_from", "kind_explicit")

    def to_dict(self) -> dict[str, Any]:
        return {"router": self.router, "kind": self.kind, "migrate_from": self.migrate_from,
                "kind_explicit": self.kind_explicit}

    @classmethod
    def from_dict(cls, props: Props) -> "WorkloadKindProps":
        return cls(props.get("router") or "", props.get("kind") or "", props.get("migrate_from") or "",
                   bool(props.get("kind_explicit", True)))


@dataclass(frozen=True)
class RouterTargetsProps:
    router: str
    namespace: str
    services: Mapping[str, str]
    # The fronted models' recorded targets (Outputs at declaration): re-read when one changes.
    fronted_targets: tuple[Any, ...] = ()
    cluster: ClusterTarget = field(default_factory=ClusterTarget)

    def to_dict(self) -> dict[str, Any]:
        return {"router": self.router, "namespace": self.namespace, "services": dict(self.services),
                "fronted_targets": list(self.fronted_targets), **self.cluster.to_dict()}

    @classmethod
    def from_dict(cls, props: Props) -> "RouterTargetsProps":
        return cls(props["router"], props["namespace"], dict(props.get("services") or {}),
                   tuple(props.get("fronted_targets") or ()), ClusterTarget.from_dict(props))
