"""What the rules see: Kubernetes objects as plain dicts (wire shape, camelCase) and a stack graph.

Pure: no Pulumi, no I/O. Values the engine cannot know during preview arrive as ``UNKNOWN``
(the adapter in ``pack.py`` converts the engine's sentinels), and every accessor here returns
``UNKNOWN`` instead of raising, so a rule decides what "unknown" means for its check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

DOMAIN = "llm-serving.dev"
COMPONENT_LABEL = "app.kubernetes.io/component"
ENGINE_LABEL = f"{DOMAIN}/engine"
MODEL_LABEL = f"{DOMAIN}/model"
REVISION_OF_LABEL = f"{DOMAIN}/revision-of"  # a next revision's objects: the model it revises
DEVICE_LABEL = f"{DOMAIN}/device"  # `cpu` on a CPU model's objects (gpus: 0); GPU models carry none
CPU_DEVICE = "cpu"

SERVER = "server"
PULLER = "weights-puller"
TEARDOWN = "teardown"
ROUTER = "router"
BACKEND_ROUTER = "backend-router"

GPU_RESOURCE = "nvidia.com/gpu"
NIM_GROUP = "apps.nvidia.com"

# The engine's markers for values not known until apply (pulumi_policy.proxy, pulumi.runtime).
UNKNOWN_SENTINELS = frozenset({
    "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",  # boolean
    "3eeb2bf0-c639-47a8-9e75-3b44932eb421",  # number
    "04da6b54-80e4-46f7-96ec-b56ff0331ba9",  # string (and the generic unknown)
    "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",  # array
    "030794c1-ac77-496b-92df-f27374a8bd58",  # asset
    "e48ece36-62e2-4504-bad9-02848725956a",  # archive
    "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",  # object
})


class _Unknown:
    _instance: Optional[_Unknown] = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown until apply>"

    def __bool__(self) -> bool:
        # Neither true nor false: a rule must decide what "unknown" means, never guess.
        raise TypeError("an unknown value has no truth value; compare with `is UNKNOWN` first")


UNKNOWN: Any = _Unknown()


def get(obj: Any, *path: Any, default: Any = None) -> Any:
    """Walk dict keys / list indexes; ``UNKNOWN`` as soon as a step is unknown, ``default`` when
    a step is missing or null."""
    current = obj
    for key in path:
        if current is UNKNOWN:
            return UNKNOWN
        if isinstance(key, int):
            if not isinstance(current, list) or not -len(current) <= key < len(current):
                return default
            current = current[key]
        else:
            if not isinstance(current, dict) or key not in current:
                return default
            current = current[key]
        if current is None:
            return default
    return current


def as_list(value: Any) -> Any:
    """A list, ``UNKNOWN``, or ``[]`` for anything else (missing, null, wrong shape)."""
    if value is UNKNOWN or isinstance(value, list):
        return value
    return []


def number(value: Any) -> Any:
    """A JSON number as int when integral (the engine sends every number as a float)."""
    if value is UNKNOWN or value is None or isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# ---- findings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One result of a rule: a violation, or a check that cannot run until apply."""

    message: str
    urn: Optional[str] = None
    unknown: bool = False


def violation(message: str, urn: Optional[str] = None) -> Finding:
    return Finding(message, urn)


def unchecked(what: str, urn: Optional[str] = None) -> Finding:
    return Finding(f"{what} cannot be checked until apply (unknown during preview)", urn, unknown=True)


# ---- objects ------------------------------------------------------------------------------

POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    # Two pod templates (leader, worker): rules see the object once per template (per_template).
    "LeaderWorkerSet": ("spec", "leaderWorkerTemplate", "workerTemplate", "spec"),
}
MULTI_TEMPLATE_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "LeaderWorkerSet": (("spec", "leaderWorkerTemplate", "leaderTemplate", "spec"),
                        ("spec", "leaderWorkerTemplate", "workerTemplate", "spec")),
}
POD_KINDS = frozenset(POD_TEMPLATE_PATHS)
NIM_KINDS = frozenset({"NIMService", "NIMCache"})
ROLE_KINDS = frozenset({"Role", "ClusterRole"})
BINDING_KINDS = frozenset({"RoleBinding", "ClusterRoleBinding"})


def parse_type_token(token: str) -> Optional[tuple[str, str]]:
    """``kubernetes:apps/v1:Deployment`` -> ``("apps/v1", "Deployment")``; ``None`` for
    non-Kubernetes types and for ``...Patch`` / ``...List`` kinds (partial or aggregate objects)."""
    parts = token.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes":
        return None
    module, kind = parts[1], parts[2]
    if "/" not in module or kind.endswith(("Patch", "List")):
        return None
    group, version = module.rsplit("/", 1)
    return (version if group == "core" else f"{group}/{version}"), kind


def type_token(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    return f"kubernetes:{group or 'core'}/{version}:{kind}"


@dataclass(frozen=True)
class K8sObject:
    """One Kubernetes object as pulumi-kubernetes sends it (or as a compiler emits it)."""

    api_version: str
    kind: str
    props: dict
    name: str = ""
    urn: str = ""
    template_path: Optional[tuple[str, ...]] = None  # which pod template, for a kind with several

    def per_template(self) -> list[K8sObject]:
        """This object once per pod template it holds (a LeaderWorkerSet's leader and worker), so a
        pod rule checks each; itself alone for every other kind."""
        paths = MULTI_TEMPLATE_PATHS.get(self.kind)
        if not paths or self.template_path is not None:
            return [self]
        return [dataclasses.replace(self, template_path=path) for path in paths]

    @classmethod
    def from_manifest(cls, manifest: dict, name: str = "", urn: str = "") -> K8sObject:
        meta_name = get(manifest, "metadata", "name", default="")
        return cls(manifest["apiVersion"], manifest["kind"], manifest,
                   name or (meta_name if isinstance(meta_name, str) else ""), urn)

    @classmethod
    def from_type(cls, token: str, props: Any, name: str = "", urn: str = "") -> Optional[K8sObject]:
        parsed = parse_type_token(token)
        if parsed is None:
            return None
        return cls(parsed[0], parsed[1], props if isinstance(props, dict) else {}, name, urn)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def display(self) -> str:
        meta_name = get(self.props, "metadata", "name")
        shown = meta_name if isinstance(meta_name, str) else self.name
        return f"{self.kind} '{shown}'"

    @property
    def namespace(self) -> Any:
        return get(self.props, "metadata", "namespace")

    def label(self, key: str) -> Any:
        """A label of the object, falling back to its pod template's labels (either may be
        unknown during preview; ``UNKNOWN`` only when neither tells)."""
        own = get(self.props, "metadata", "labels", key)
        if isinstance(own, str):
            return own
        template = self.pod_template_labels()
        found = get(template, key)
        if isinstance(found, str):
            return found
        return UNKNOWN if (own is UNKNOWN or found is UNKNOWN) else None

    def pod_template_labels(self) -> Any:
        path = self.template_path or POD_TEMPLATE_PATHS.get(self.kind)
        if path is None or self.kind == "Pod":
            return None
        return get(self.props, *path[:-1], "metadata", "labels")

    @property
    def component(self) -> Any:
        return self.label(COMPONENT_LABEL)

    def pod_spec(self) -> tuple[str, Any]:
        """(path, pod spec) of a pod-bearing object; spec may be ``None`` or ``UNKNOWN``."""
        path = self.template_path or POD_TEMPLATE_PATHS[self.kind]
        return ".".join(path), get(self.props, *path)


@dataclass(frozen=True)
class ContainerRef:
    path: str           # e.g. spec.template.spec.containers[0] (server)
    container: Any      # dict or UNKNOWN


def containers(spec: Any, spec_path: str) -> tuple[list[ContainerRef], list[str]]:
    """Every container of a pod spec (init and ephemeral too) and the paths that are unknown."""
    found: list[ContainerRef] = []
    unknown: list[str] = []
    if spec is UNKNOWN:
        return found, [spec_path]
    for key in ("initContainers", "containers", "ephemeralContainers"):
        items = as_list(get(spec, key))
        if items is UNKNOWN:
            unknown.append(f"{spec_path}.{key}")
            continue
        for index, item in enumerate(items):
            name = get(item, "name")
            shown = f" ({name})" if isinstance(name, str) else ""
            found.append(ContainerRef(f"{spec_path}.{key}[{index}]{shown}", item))
    return found, unknown


def effective(container: Any, pod_context: Any, key: str) -> Any:
    """A security setting as the kubelet applies it: the container's, else the pod's."""
    own = get(container, "securityContext", key)
    if own is not None:
        return own
    return get(pod_context, key)


def pod_containers(obj: K8sObject) -> tuple[list[ContainerRef], Any, list[str]]:
    """Containers of a pod-bearing object, its pod securityContext, and the paths unknown
    during preview."""
    spec_path, spec = obj.pod_spec()
    if spec is UNKNOWN:
        return [], UNKNOWN, [spec_path]
    if not isinstance(spec, dict):
        return [], None, []
    refs, unknown_paths = containers(spec, spec_path)
    return refs, get(spec, "securityContext"), unknown_paths


def unknowns(obj: K8sObject, paths: Iterable[str], urn: Optional[str] = None) -> list[Finding]:
    return [unchecked(f"{obj.display}: {path}", urn) for path in paths]


def labelled(obj: K8sObject, key: str, what: str) -> tuple[Any, list[Finding]]:
    """A label's value, or (None, [unchecked]) when it is unknown during preview."""
    value = obj.label(key)
    if value is UNKNOWN:
        return None, [unchecked(f"{obj.display}: {what} (label {key})")]
    return value, []


# ---- stack --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackResource:
    type: str
    name: str
    urn: str
    props: Any
    dependencies: tuple[str, ...] = ()          # URNs: dependencies and property dependencies
    provider_props: Any = None                  # the Kubernetes provider's inputs, when known

    @property
    def k8s(self) -> Optional[K8sObject]:
        return K8sObject.from_type(self.type, self.props, self.name, self.urn)


@dataclass(frozen=True)
class Stack:
    resources: tuple[StackResource, ...]
    _by_urn: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_urn.update({r.urn: r for r in self.resources})

    def k8s_objects(self) -> Iterator[tuple[StackResource, K8sObject]]:
        for resource in self.resources:
            obj = resource.k8s
            if obj is not None:
                yield resource, obj

    def of_type(self, token: str) -> list[StackResource]:
        return [r for r in self.resources if r.type == token]

    def depends_on(self, urn: str, target: str) -> bool:
        """Whether ``urn`` waits for ``target``, directly or through other resources."""
        seen: set[str] = set()
        pending = list(self._by_urn[urn].dependencies) if urn in self._by_urn else []
        while pending:
            current = pending.pop()
            if current == target:
                return True
            if current in seen:
                continue
            seen.add(current)
            resource = self._by_urn.get(current)
            if resource is not None:
                pending.extend(resource.dependencies)
        return False
