"""Names, labels and security settings shared by every compiled object.

Pure: no Pulumi, no I/O. Objects are plain dicts in Kubernetes wire shape (camelCase).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contract.labels import COMPONENT_LABEL, CPU_DEVICE, DEVICE_LABEL, DOMAIN, ENGINE_LABEL, MODEL_LABEL, REVISION_OF_LABEL

from ..children import WEIGHTS_GATE, child
from ..config.engines import engine_of
from ..config.model import ModelConfig
from ..config.platform import PlatformConfig
from ..config.types import Toleration

PART_OF = "llm-serving"
# Values contain '/', which label values may not: model source and health path are annotations.
MODEL_SOURCE_ANNOTATION = f"{DOMAIN}/model-source"
HEALTH_PATH_ANNOTATION = f"{DOMAIN}/health-path"
SOURCE_HASH_LABEL = f"{DOMAIN}/source-hash"

# The weights gate and the status provider do the waiting for Jobs, Deployments and Services:
# they end a failed pull or a crash loop with its classified reason, where the Kubernetes
# provider's own await would time out after minutes with a generic message. Without this
# annotation the provider would also await the puller Job itself, and the gate would no longer
# be what orders serving after the weights.
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}

# The puller Job is replaced delete-first under the same name (plan.py). With skipAwait the
# provider does not wait for the delete either, and its default propagation, foreground, keeps the
# old Job (a finalizer) until its pods are gone: the new Job's server-side-apply create then met
# the old one ("Server-Side Apply field conflict ... containers[name=puller].args", seen on the
# simulated cluster). Background propagation removes the Job object at once and lets the garbage
# collector take its pods after.
BACKGROUND_DELETE = {"pulumi.com/deletionPropagationPolicy": "background"}

WEIGHTS_MOUNT = "/model-store"
SERVER_PORT = 8000
TMP_MOUNT = "/tmp"
# Scratch space of containers with a read-only root filesystem (the hub CLI's temp files).
TMP_SIZE_LIMIT = "1Gi"

# Every pod template we render sets this. With service links on, the kubelet injects
# `<SERVICE>_PORT=tcp://<ip>:<port>` for every Service of the namespace, so a model named `vllm`
# gives every pod `VLLM_PORT=tcp://...`; vLLM v0.11.0 reads VLLM_PORT as an integer
# (vllm/envs.py) and refuses to start. Nothing of ours reads service-link variables.
POD_DEFAULTS = {"enableServiceLinks": False}

# Labels GPU nodes carry, any of which marks one: GPU feature discovery / the GPU operator's
# `nvidia.com/gpu.present=true`, Node Feature Discovery's NVIDIA PCI vendor label (the NIM
# operator's default NIMCache nodeSelector: k8s-nim-operator, api/apps/v1alpha1 NIMCache), and
# GKE's accelerator label. The nodeSelectorTerms below are ORed.
GPU_NODE_LABELS = (
    ("nvidia.com/gpu.present", "In", ("true",)),
    ("feature.node.kubernetes.io/pci-10de.present", "In", ("true",)),
    ("cloud.google.com/gke-accelerator", "Exists", ()),
)


def source_hash(model: ModelConfig) -> str:
    """Eight hex characters naming one model source (repo + revision).

    The weights volume carries it in its name, so a new source gets a new volume (and a new puller
    Job: puller_name) while any other change leaves the volume alone.
    """
    return hashlib.sha256(model.source.ref.encode()).hexdigest()[:8]


def puller_name(model: ModelConfig, pod_template: dict) -> str:
    """The puller Job's name: the model's, and eight hex characters of its source and its pod
    template (what a Job cannot change in place).

    A changed template replaces the Job. Under the old name the new Job's create could meet the old
    Job still being deleted: the provider does not await deletes of objects marked skipAwait, and a
    foreground delete (the default of stacks deployed before the background annotation) or any
    finalizer keeps the old Job standing; the server-side-apply create then lands on it ("field
    conflict ... containers[name=puller].args", seen in CI). A name of its own never meets it, and
    the gate, which keys on the Job's name, waits for the new Job before serving goes on. Changing
    only the deadline or the retry count (mutable) keeps the name and updates the Job in place.
    """
    identity = json.dumps({"source": model.source.ref, "template": pod_template},
                          sort_keys=True, separators=(",", ":"))
    return f"{model.name}-pull-{hashlib.sha256(identity.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class ModelNames:
    server: str
    service: str
    weights: str
    gate: str
    lora_cache: str = "lora-cache"

    @classmethod
    def of(cls, model: ModelConfig) -> ModelNames:
        digest = source_hash(model)
        claim = model.source.existing_claim  # a pvc source: the existing claim
        return cls(
            # A multi-node model's LeaderWorkerSet may not take the model's name: the LWS controller
            # creates a headless Service named after it (the leader's address), which would take
            # over the model's Service.
            server=model.name if model.multi_node is None else f"{model.name}-lws",
            service=model.name,
            # A next revision (models[].next) mounts the volume its model will have with its
            # source: the model's name (served_name), not its own.
            weights=claim or f"{model.served_name}-weights-{digest}",
            gate=child(model.name, WEIGHTS_GATE),
        )


@dataclass(frozen=True)
class Identity:
    """uid/gid of one engine's pods. Per engine on purpose: vLLM's image has a passwd entry
    for 2000/0 only, NIM's for 1000/2000; sharing one pair crashes the other engine."""

    uid: int
    gid: int


def identity(model: ModelConfig, platform: PlatformConfig) -> Identity:
    uid, gid = engine_of(model).identity_keys
    return Identity(getattr(platform, uid), getattr(platform, gid))


def selector_labels(model: ModelConfig, component: str) -> dict[str, str]:
    """The small, never-changing subset used as selectors (a selector change would force a
    Deployment replacement)."""
    return {
        "app.kubernetes.io/name": model.name,
        COMPONENT_LABEL: component,
    }


def labels(model: ModelConfig, component: str) -> dict[str, str]:
    return {
        **selector_labels(model, component),
        "app.kubernetes.io/instance": model.name,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
        MODEL_LABEL: model.name,
        ENGINE_LABEL: model.engine,
        **({DEVICE_LABEL: CPU_DEVICE} if model.on_cpu else {}),
        # A next revision (models[].next): which model's weights and gate it waits on.
        **({REVISION_OF_LABEL: model.served_name} if model.is_next_revision else {}),
    }


def metadata(name: str, namespace: str, model: ModelConfig, component: str, **annotations: str) -> dict:
    meta = {"name": name, "namespace": namespace, "labels": labels(model, component)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def pod_security_context(ident: Identity, fs_group: bool) -> dict:
    context = {
        "runAsNonRoot": True,
        "runAsUser": ident.uid,
        "runAsGroup": ident.gid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if fs_group:
        # A freshly provisioned volume is root-owned; fsGroup lets the puller write it.
        context["fsGroup"] = ident.gid
        context["fsGroupChangePolicy"] = "OnRootMismatch"
    return context


def container_security_context(ident: Identity, read_only_root: bool = False) -> dict:
    context = {
        "runAsNonRoot": True,
        "runAsUser": ident.uid,
        "runAsGroup": ident.gid,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if read_only_root:
        # The puller and init containers write only to their volumes (and a /tmp emptyDir).
        context["readOnlyRootFilesystem"] = True
    return context


def tmp_volume() -> tuple[dict, dict]:
    """A small writable /tmp for a container with a read-only root: (volume, mount)."""
    return ({"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}},
            {"name": "tmp", "mountPath": TMP_MOUNT})


def image_pull_secrets(platform: PlatformConfig) -> list[dict]:
    return [{"name": name} for name in platform.image_pull_secrets]


def scheduling(model: ModelConfig, platform: PlatformConfig) -> dict:
    """Node selector and tolerations that place a pod on GPU nodes; a CPU model's are its own only
    (the platform's GPU placement would take a GPU node's place for a pod that uses none)."""
    gpu_selector, gpu_tolerations = ({}, ()) if model.on_cpu else (platform.gpu_node_selector, platform.gpu_tolerations)
    selector = gpu_selector if model.node_selector is None else model.node_selector
    tolerations = gpu_tolerations if model.tolerations is None else model.tolerations
    return placement(selector, tolerations)


def placement(selector: Mapping[str, str], tolerations: Sequence[Toleration]) -> dict:
    """A pod spec's ``nodeSelector`` and ``tolerations``, each only when set (an empty one would
    change the rendered object, and with it every stack's diff, for nothing)."""
    spec: dict = {}
    if selector:
        spec["nodeSelector"] = dict(selector)
    if tolerations:
        spec["tolerations"] = [t.to_k8s() for t in tolerations]
    return spec


def gpu_node_affinity() -> dict:
    """Required node affinity to a node carrying any of ``GPU_NODE_LABELS``."""
    terms = []
    for key, operator, values in GPU_NODE_LABELS:
        expression: dict = {"key": key, "operator": operator}
        if values:
            expression["values"] = list(values)
        terms.append({"matchExpressions": [expression]})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
