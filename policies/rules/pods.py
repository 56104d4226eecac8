"""Pod identity and isolation: who the server and puller run as, and what they may not do.

Applies to every pod-bearing kind (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job,
CronJob, PodTemplate) and, where the NIM operator takes the same settings, NIMService/NIMCache.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import resource_rule, stack_rule
from .kube import (
    COMPONENT_LABEL,
    ENGINE_LABEL,
    MODEL_LABEL,
    NIM_KINDS,
    POD_KINDS,
    PULLER,
    SERVER,
    UNKNOWN,
    Finding,
    K8sObject,
    Stack,
    as_list,
    effective,
    get,
    labelled,
    number,
    pod_containers,
    unchecked,
    unknowns,
    violation,
)

ENGINES = ("vllm", "nim")
# NIM operator runtime defaults when userID/groupID are unset (k8s-nim-operator).
NIM_OPERATOR_DEFAULT = (1000, 2000)

IDENTITY_CONFIG = {
    "vllmUid": {"type": "integer", "minimum": 1, "default": 2000,
                "description": "uid of vLLM server and puller pods (the vllm/vllm-openai image's `vllm` user)."},
    "vllmGid": {"type": "integer", "minimum": 0, "default": 0,
                "description": "gid of vLLM server and puller pods."},
    "nimUid": {"type": "integer", "minimum": 1, "default": 1000,
               "description": "uid of NIM server and puller pods (what NIM images expect)."},
    "nimGid": {"type": "integer", "minimum": 0, "default": 2000,
               "description": "gid of NIM server and puller pods."},
}


# The request router's worker sidecar in a fronted model's pod (components/compile/pylon.py): its
# own image and non-root user; it reads no weights and runs no torch, so the engine's identity
# does not bind it (the non-root, escalation and privilege rules still do).
WORKER_SIDECARS = frozenset({"pylon"})


def engine_containers(refs: list) -> list:
    """The containers the engine identity binds: all but the router's worker sidecar."""
    return [ref for ref in refs
            if not (isinstance(ref.container, dict) and ref.container.get("name") in WORKER_SIDECARS)]


def expected_identity(engine: str, config: dict) -> tuple[int, int]:
    return number(config[f"{engine}Uid"]), number(config[f"{engine}Gid"])


@resource_rule(
    "llm-serving-pod-engine-identity",
    "Server and weight-puller pods run as their engine's uid/gid (vLLM 2000/0, NIM 1000/2000 by "
    "default): an image without a passwd entry for the uid crashes (torch: `getpwuid(): uid not "
    "found`), and weights written by another uid are unreadable.",
    POD_KINDS | NIM_KINDS,
    fix="Set runAsUser/runAsGroup (and fsGroup, if set) to the engine's pair from stack config "
    "platform.vllmUid/vllmGid or nimUid/nimGid, and label the workload `llm-serving.dev/engine: "
    "vllm|nim`.",
    severity="high", url="https://kubernetes.io/docs/tasks/configure-pod-container/security-context/",
    config=IDENTITY_CONFIG,
)
def engine_identity(obj: K8sObject, config: dict) -> Iterator[Finding]:
    if obj.kind in NIM_KINDS:
        yield from _nim_operator_identity(obj, config)
        return
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    yield from findings
    if component not in (SERVER, PULLER):
        return
    engine, findings = labelled(obj, ENGINE_LABEL, "engine")
    yield from findings
    if findings:
        return
    if engine is None:
        yield violation(f"{obj.display} is a {component} without the label {ENGINE_LABEL}; "
                        "label it `vllm` or `nim` so its identity can be checked")
        return
    if engine not in ENGINES:
        yield violation(f"{obj.display}: engine '{engine}' is not supported on Kubernetes; "
                        f"set {ENGINE_LABEL} to one of {', '.join(ENGINES)}")
        return
    uid, gid = expected_identity(engine, config)
    refs, pod_context, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    for ref in engine_containers(refs):
        for key, want in (("runAsUser", uid), ("runAsGroup", gid)):
            have = number(effective(ref.container, pod_context, key))
            if have is UNKNOWN:
                yield unchecked(f"{obj.display}: {ref.path} {key}")
            elif have is None:
                yield violation(f"{obj.display}: {ref.path} sets no {key} (the image's default "
                                f"applies); set securityContext.{key}: {want} for {engine}")
            elif have != want:
                yield violation(f"{obj.display}: {ref.path} has {key} {have}; {engine} "
                                f"{component} pods must use {want}")
    fs_group = number(get(pod_context, "fsGroup"))
    if fs_group is UNKNOWN:
        yield unchecked(f"{obj.display}: pod securityContext.fsGroup")
    elif fs_group is not None and fs_group != gid:
        yield violation(f"{obj.display}: fsGroup {fs_group} differs from the {engine} gid {gid}; "
                        f"set securityContext.fsGroup: {gid} (or leave it unset)")


def _nim_operator_identity(obj: K8sObject, config: dict) -> Iterator[Finding]:
    uid, gid = expected_identity("nim", config)
    for key, want, default in (("userID", uid, NIM_OPERATOR_DEFAULT[0]), ("groupID", gid, NIM_OPERATOR_DEFAULT[1])):
        have = number(get(obj.props, "spec", key))
        if have is UNKNOWN:
            yield unchecked(f"{obj.display}: spec.{key}")
        elif (default if have is None else have) != want:
            shown = f"unset (the operator runs it as {default})" if have is None else str(have)
            yield violation(f"{obj.display}: spec.{key} is {shown}; NIM pods must use {want}: "
                            f"set spec.{key}: {want}")


@stack_rule(
    "llm-serving-pod-puller-server-identity-match",
    "The weight puller and the server of one model run as the same uid/gid, so the server can "
    "read what the puller wrote.",
    fix="Derive both from the one engine identity (stack config platform.vllmUid/vllmGid or "
    "nimUid/nimGid) instead of setting either by hand, and label both with "
    "`llm-serving.dev/model`.",
    severity="high", url="https://kubernetes.io/docs/tasks/configure-pod-container/security-context/",
)
def puller_server_identity_match(stack: Stack, config: dict) -> Iterator[Finding]:
    seen: dict[str, dict[tuple[Any, Any], list[str]]] = {}
    first_urn: dict[str, str] = {}
    for resource, obj in stack.k8s_objects():
        if obj.kind not in POD_KINDS:
            continue
        component, findings = labelled(obj, COMPONENT_LABEL, "component")
        yield from findings
        if component not in (SERVER, PULLER):
            continue
        model, findings = labelled(obj, MODEL_LABEL, "model")
        yield from findings
        if findings:
            continue
        if model is None:
            yield violation(f"{obj.display} is a {component} without the label {MODEL_LABEL}, so "
                            "its identity cannot be compared with its model's other pods; add the label",
                            resource.urn)
            continue
        refs, pod_context, unknown_paths = pod_containers(obj)
        yield from unknowns(obj, unknown_paths, resource.urn)
        for ref in engine_containers(refs):
            uid = number(effective(ref.container, pod_context, "runAsUser"))
            gid = number(effective(ref.container, pod_context, "runAsGroup"))
            if uid is UNKNOWN or gid is UNKNOWN:
                yield unchecked(f"{obj.display}: {ref.path} runAsUser/runAsGroup", resource.urn)
                continue
            seen.setdefault(model, {}).setdefault((uid, gid), []).append(f"{obj.display} {ref.path}")
            if component == SERVER:
                first_urn[model] = resource.urn  # report on the server, the object people look at
            else:
                first_urn.setdefault(model, resource.urn)
    for model, identities in sorted(seen.items()):
        if len(identities) > 1:
            listed = "; ".join(
                f"uid/gid {_show(uid)}/{_show(gid)}: {', '.join(where)}"
                for (uid, gid), where in sorted(identities.items(), key=lambda item: str(item[0]))
            )
            yield violation(f"model '{model}': its puller and server pods run as different "
                            f"identities ({listed}); make them identical", first_urn.get(model))


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


@resource_rule(
    "llm-serving-pod-run-as-non-root",
    "No container runs as root.",
    POD_KINDS,
    fix="Set securityContext.runAsNonRoot: true (pod or container) and a non-zero runAsUser.",
    severity="high", url="https://kubernetes.io/docs/concepts/security/pod-security-standards/",
)
def run_as_non_root(obj: K8sObject, config: dict) -> Iterator[Finding]:
    refs, pod_context, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    for ref in refs:
        non_root = effective(ref.container, pod_context, "runAsNonRoot")
        if non_root is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path} runAsNonRoot")
        elif non_root is not True:
            yield violation(f"{obj.display}: {ref.path} does not set runAsNonRoot: true; set it "
                            "in the pod or container securityContext")
        uid = number(effective(ref.container, pod_context, "runAsUser"))
        if uid is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path} runAsUser")
        elif uid == 0:
            yield violation(f"{obj.display}: {ref.path} runs as uid 0 (root); use the engine's "
                            "non-root uid")


@resource_rule(
    "llm-serving-pod-no-privilege-escalation",
    "Every container forbids privilege escalation (unset means allowed).",
    POD_KINDS,
    fix="Set securityContext.allowPrivilegeEscalation: false on every container, init containers "
    "included.",
    severity="high", url="https://kubernetes.io/docs/concepts/security/pod-security-standards/",
)
def no_privilege_escalation(obj: K8sObject, config: dict) -> Iterator[Finding]:
    refs, _, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    for ref in refs:
        allowed = get(ref.container, "securityContext", "allowPrivilegeEscalation")
        if allowed is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path} allowPrivilegeEscalation")
        elif allowed is not False:
            state = "unset, which allows it" if allowed is None else f"{allowed}"
            yield violation(f"{obj.display}: {ref.path} allowPrivilegeEscalation is {state}; "
                            "set securityContext.allowPrivilegeEscalation: false")


@resource_rule(
    "llm-serving-pod-no-privileged",
    "No container is privileged (a privileged container owns the node, GPUs included).",
    POD_KINDS,
    fix="Remove securityContext.privileged or set it to false; GPUs come through the nvidia.com/gpu "
    "resource.",
    severity="critical", url="https://kubernetes.io/docs/concepts/security/pod-security-standards/",
)
def no_privileged(obj: K8sObject, config: dict) -> Iterator[Finding]:
    refs, _, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    for ref in refs:
        privileged = get(ref.container, "securityContext", "privileged")
        if privileged is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path} privileged")
        elif privileged is True:
            yield violation(f"{obj.display}: {ref.path} is privileged; set "
                            "securityContext.privileged: false")


@resource_rule(
    "llm-serving-pod-no-host-path",
    "No pod mounts a hostPath volume (it escapes the pod and pins it to one node).",
    POD_KINDS | NIM_KINDS,
    fix="Keep weights on a PersistentVolumeClaim and scratch space on an emptyDir; for "
    "NIMService/NIMCache use spec.storage.pvc (or nimCache) instead of spec.storage.hostPath.",
    severity="high", url="https://kubernetes.io/docs/concepts/security/pod-security-standards/",
)
def no_host_path(obj: K8sObject, config: dict) -> Iterator[Finding]:
    if obj.kind in NIM_KINDS:
        storage = get(obj.props, "spec", "storage")
        if storage is UNKNOWN:
            yield unchecked(f"{obj.display}: spec.storage")
        elif isinstance(storage, dict) and storage.get("hostPath") not in (None, ""):
            # Present, even if its value is unknown: a hostPath is set.
            yield violation(f"{obj.display}: spec.storage.hostPath is set; use spec.storage.pvc")
        return
    spec_path, spec = obj.pod_spec()
    volumes = as_list(get(spec, "volumes"))
    if volumes is UNKNOWN:
        yield unchecked(f"{obj.display}: {spec_path}.volumes")
        return
    for index, volume in enumerate(volumes):
        if volume is UNKNOWN:
            yield unchecked(f"{obj.display}: {spec_path}.volumes[{index}]")
        elif get(volume, "hostPath") is not None:
            name = get(volume, "name")
            yield violation(f"{obj.display}: volume {name if isinstance(name, str) else index} "
                            "is a hostPath; use a PersistentVolumeClaim or an emptyDir")


# The components whose pods must not get service links. Only the model pods for now: the router's
# pod templates (compile/router.py) are to gain `enableServiceLinks: false` too; when they have,
# this becomes every pod (drop the component filter).
SERVICE_LINK_COMPONENTS = (SERVER, PULLER)


@resource_rule(
    "llm-serving-pod-service-links-disabled",
    "Model server and weight-puller pods set enableServiceLinks: false. With service links on, "
    "the kubelet injects `<SERVICE>_PORT=tcp://ip:port` for every Service of the namespace: a "
    "Service named `vllm` (a model called vllm) gives every pod VLLM_PORT=tcp://..., which vLLM "
    "reads as its own port setting and refuses to start.",
    POD_KINDS,
    fix="Set spec.enableServiceLinks: false in the pod template (the pods find Services through DNS).",
    severity="medium", url="https://kubernetes.io/docs/concepts/services-networking/service/#environment-variables",
)
def service_links_disabled(obj: K8sObject, config: dict) -> Iterator[Finding]:
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    yield from findings
    if component not in SERVICE_LINK_COMPONENTS:
        return
    spec_path, spec = obj.pod_spec()
    links = get(spec, "enableServiceLinks")
    if links is UNKNOWN:
        yield unchecked(f"{obj.display}: {spec_path}.enableServiceLinks")
    elif links is not False:
        state = "unset (Kubernetes defaults it to true)" if links is None else str(links)
        yield violation(f"{obj.display}: {spec_path}.enableServiceLinks is {state}; set it to false "
                        "so Service variables (e.g. VLLM_PORT=tcp://...) never reach the engine")
