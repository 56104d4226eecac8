"""Names, labels and security settings shared by every compiled object.

Pure: no Pulumi, no I/O. Objects are plain dicts in Kubernetes wire shape (camelCase).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..children import WEIGHTS_GATE, child
from ..config.model import ModelConfig, PlatformConfig
from ..labels import COMPONENT_LABEL, DOMAIN, ENGINE_LABEL, MODEL_LABEL

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

WEIGHTS_MOUNT = "/model-store"
SERVER_PORT = 8000


def source_hash(model: ModelConfig) -> str:
    """Eight hex characters naming one model source (repo + revision).

    Weights objects carry it in their names, so a new source gets a new volume and puller
    (re-pull) while any other change leaves them alone.
    """
    return hashlib.sha256(model.source.ref.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class ModelNames:
    server: str
    service: str
    weights: str
    puller: str
    gate: str
    lora_cache: str = "lora-cache"

    @classmethod
    def of(cls, model: ModelConfig) -> "ModelNames":
        digest = source_hash(model)
        return cls(
            server=model.name,
            service=model.name,
            weights=f"{model.name}-weights-{digest}",
            puller=f"{model.name}-pull-{digest}",
            gate=child(model.name, WEIGHTS_GATE),
        )


@dataclass(frozen=True)
class Identity:
    """uid/gid of one engine's pods. Per engine on purpose: vLLM's image has a passwd entry
    for 2000/0 only, NIM's for 1000/2000; sharing one pair crashes the other engine."""

    uid: int
    gid: int


def identity(model: ModelConfig, platform: PlatformConfig) -> Identity:
    if model.engine == "nim":
        return Identity(platform.nim_uid, platform.nim_gid)
    return Identity(platform.vllm_uid, platform.vllm_gid)


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


def container_security_context(ident: Identity) -> dict:
    return {
        "runAsNonRoot": True,
        "runAsUser": ident.uid,
        "runAsGroup": ident.gid,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def image_pull_secrets(platform: PlatformConfig) -> list[dict]:
    return [{"name": name} for name in platform.image_pull_secrets]


def scheduling(model: ModelConfig, platform: PlatformConfig) -> dict:
    """Node selector and tolerations that place a pod on GPU nodes."""
    selector = platform.gpu_node_selector if model.node_selector is None else model.node_selector
    tolerations = platform.gpu_tolerations if model.tolerations is None else model.tolerations
    spec: dict = {}
    if selector:
        spec["nodeSelector"] = dict(selector)
    if tolerations:
        spec["tolerations"] = [t.to_k8s() for t in tolerations]
    return spec
