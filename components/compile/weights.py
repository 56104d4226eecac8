"""P0 storage and P1 pull: the weights volume and the puller Job."""

from __future__ import annotations

from ..config.model import ModelConfig, PlatformConfig
from . import common

PULLER_COMPONENT = "weights-puller"
WEIGHTS_COMPONENT = "weights"


def compile_weights_pvc(model: ModelConfig, platform: PlatformConfig) -> dict:
    names = common.ModelNames.of(model)
    spec: dict = {
        "accessModes": [model.weights.access_mode],
        "resources": {"requests": {"storage": model.weights.size}},
    }
    storage_class = model.weights.storage_class_name or platform.storage_class_name
    if storage_class:
        spec["storageClassName"] = storage_class
    meta = common.metadata(
        names.weights, platform.namespace, model, WEIGHTS_COMPONENT,
        **{common.MODEL_SOURCE_ANNOTATION: model.source.ref},
    )
    meta["labels"][common.SOURCE_HASH_LABEL] = common.source_hash(model)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def hf_endpoint(model: ModelConfig, platform: PlatformConfig) -> str:
    return model.hf_endpoint or platform.hf_endpoint


def puller_args(model: ModelConfig) -> list[str]:
    args = [
        "download", model.source.repo,
        "--revision", model.source.revision,
        "--local-dir", common.WEIGHTS_MOUNT,
    ]
    # One flag per pattern: what the `hf` of huggingface_hub >= 1.0 accepts (a list option).
    for pattern in model.source.allow_patterns or ():
        args += ["--include", pattern]
    for pattern in model.source.ignore_patterns:
        args += ["--exclude", pattern]
    return args


def puller_env(model: ModelConfig, platform: PlatformConfig) -> list[dict]:
    env = [
        {"name": "HF_ENDPOINT", "value": hf_endpoint(model, platform)},
        # The hub client caches under $HOME; the image's home may not be writable as this uid.
        {"name": "HF_HOME", "value": f"{common.WEIGHTS_MOUNT}/.hf-home"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        {"name": "HF_HUB_ENABLE_HF_TRANSFER", "value": "0"},
        # `hf` asks pypi.org for a newer release at start-up otherwise: a stall (and egress) in
        # an air-gapped cluster.
        {"name": "HF_HUB_DISABLE_UPDATE_CHECK", "value": "1"},
        # hf_xet releases before late 2025 (e.g. the one in vLLM v0.11.0's image) keep a 10 GB
        # chunk cache under HF_HOME, i.e. on the weights volume, eating the headroom preflight
        # sized; 0 turns it off (later releases keep none and ignore it).
        {"name": "HF_XET_CHUNK_CACHE_SIZE_BYTES", "value": "0"},
    ]
    if model.hf_token_secret:
        env.append({
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {
                "name": model.hf_token_secret.name, "key": model.hf_token_secret.key,
            }},
        })
    return env


def compile_puller_job(model: ModelConfig, platform: PlatformConfig) -> dict:
    names = common.ModelNames.of(model)
    ident = common.identity(model, platform)
    container = {
        "name": "puller",
        "image": platform.puller_image,
        # The image's entrypoint may be the server; run the hub CLI explicitly.
        "command": ["hf"],
        "args": puller_args(model),
        "env": puller_env(model, platform),
        "volumeMounts": [{"name": "weights", "mountPath": common.WEIGHTS_MOUNT}],
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"memory": "4Gi"},
        },
        "securityContext": common.container_security_context(ident),
    }
    pod_spec: dict = {
        "restartPolicy": "Never",
        "serviceAccountName": platform.service_account_name,
        "automountServiceAccountToken": False,
        # Same uid/gid as the server so the server can read what the puller wrote.
        "securityContext": common.pod_security_context(ident, fs_group=True),
        "containers": [container],
        "volumes": [{"name": "weights", "persistentVolumeClaim": {"claimName": names.weights}}],
        # Same node pool as the server: with topology-bound volumes (WaitForFirstConsumer) the
        # volume is provisioned where its first pod runs, and the server must reach it there.
        **common.scheduling(model, platform),
    }
    pull_secrets = common.image_pull_secrets(platform)
    if pull_secrets:
        pod_spec["imagePullSecrets"] = pull_secrets
    meta = common.metadata(
        names.puller, platform.namespace, model, PULLER_COMPONENT,
        **{common.MODEL_SOURCE_ANNOTATION: model.source.ref},
    )
    meta["labels"][common.SOURCE_HASH_LABEL] = common.source_hash(model)
    template_meta = {"labels": dict(meta["labels"]), "annotations": dict(meta["annotations"])}
    meta["annotations"].update(common.SKIP_AWAIT)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": platform.pull_timeout_seconds,
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }
