"""P0 storage and P1 pull: the weights volume and the puller Job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from ..config.model import ModelConfig
from ..config.platform import PlatformConfig
from ..config.vllm_release import DEFAULT_RELEASE, RELEASES
from . import common, hub_verify, object_store

PULLER_COMPONENT = "weights-puller"
WEIGHTS_COMPONENT = "weights"


def compile_weights_pvc(model: ModelConfig, platform: PlatformConfig) -> Optional[dict]:
    """The weights volume, or None for a `pvc` source (its claim exists and is never ours) and a
    streamed `s3` source (the server reads the store)."""
    if model.source.existing_claim is not None or model.streams:
        return None
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
    # One flag followed by every pattern: the `hf` of the pinned image (huggingface_hub 0.35.x,
    # docs/weight-sources.md) declares both options `nargs="*"`, so a repeated flag keeps only
    # its last pattern (the default skip-list then skipped only `original/*`, and the puller
    # fetched the `.bin` copies preflight had not sized the volume for).
    if model.source.allow_patterns:
        args += ["--include", *model.source.allow_patterns]
    if model.source.ignore_patterns:
        args += ["--exclude", *model.source.ignore_patterns]
    return args


def puller_hf_home() -> str:
    # The hub client caches under $HOME; the image's home may not be writable as this uid (and
    # the root filesystem is read-only): HF_HOME on the weights volume.
    return f"{common.WEIGHTS_MOUNT}/.hf-home"


def puller_env(model: ModelConfig, platform: PlatformConfig) -> list[dict]:
    return hub_env(model, platform, puller_hf_home())


def hub_env(model: ModelConfig, platform: PlatformConfig, hf_home: str) -> list[dict]:
    """Environment of an `hf download` container (the puller, the LoRA adapters' init container)."""
    env = [
        {"name": "HF_ENDPOINT", "value": hf_endpoint(model, platform)},
        {"name": "HF_HOME", "value": hf_home},
        # Anything else that writes under $HOME lands in the /tmp emptyDir, not the read-only root.
        {"name": "HOME", "value": common.TMP_MOUNT},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        # Off on purpose, though the image has hf_transfer (vLLM's docker/Dockerfile installs it in
        # the vllm-openai-base stage, so `1` would work). In its huggingface_hub 0.35.x, `1` hands
        # each non-Xet file over 50 MiB to hf_transfer: 10 MiB ranges on up to 100 connections,
        # each held in memory until whole, under the GIL (so files go one at a time), for 2-2.4x
        # the CPU per byte of the plain stream. On the loopback bench the plain stream is 0.46-0.62x
        # of a plain parallel copy, hf_transfer 0.25-0.49x; only with every connection capped (a
        # far mirror) did hf_transfer lead. Xet files (the Hub's own) never take it either way.
        # docs/weight-sources.md, "Bench".
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


def puller_scheduling(model: ModelConfig, platform: PlatformConfig) -> dict:
    """Where the puller runs: where the server will.

    Same node selector and tolerations as the server (``common.scheduling``). The server also
    asks for GPUs, which alone keeps it on GPU nodes; the puller asks for none. With a
    topology-bound ReadWriteOnce volume (a zonal disk, a local PV, WaitForFirstConsumer binding)
    the volume is provisioned or bound where the puller runs, and the server can only start
    there: a puller on a CPU node strands the weights where no GPU is, and the server waits
    ``pendingTimeoutSeconds`` for "unschedulable". So with no node selector configured, a
    ReadWriteOnce puller is held to GPU nodes by a required node affinity (any GPU node label,
    ``common.GPU_NODE_LABELS``). A configured selector is trusted as the GPU pool; a
    ReadWriteMany volume is reachable from every node.
    """
    spec = common.scheduling(model, platform)
    # A CPU model's server goes wherever the volume is: nothing to hold the puller to.
    if "nodeSelector" not in spec and model.weights.access_mode == "ReadWriteOnce" and not model.on_cpu:
        spec["affinity"] = common.gpu_node_affinity()
    return spec


@dataclass(frozen=True)
class Puller:
    """What fills one source type's weights volume: the Job's (init containers, containers) -- also
    each pod's own pull steps with multiNode.weights: perPod (compile/multinode.py) -- and the Job's
    pod failure policy."""

    containers: Callable[[ModelConfig, PlatformConfig, common.Identity, dict], tuple[list[dict], list[dict]]]
    failure_policy: Optional[dict] = None
    # Each pod's own steps (multiNode.weights: perPod), when not the Job's: the Hub's download
    # alone, since its verify would hash the whole volume again at every pod start
    # (docs/multi-node.md).
    per_pod: Optional[Callable[[ModelConfig, PlatformConfig, common.Identity, dict],
                               tuple[list[dict], list[dict]]]] = None

    def pod_steps(self, model: ModelConfig, platform: PlatformConfig, ident: common.Identity,
                  tmp_mount: dict) -> tuple[list[dict], list[dict]]:
        return (self.per_pod or self.containers)(model, platform, ident, tmp_mount)


def _hub_download_only(model: ModelConfig, platform: PlatformConfig, ident: common.Identity,
                       tmp_mount: dict) -> tuple[list[dict], list[dict]]:
    return [], [hub_container(model, platform, ident, tmp_mount)]


# By `source.type` (config/sources.py SOURCE_CLASSES): the Hub's CLI; rclone's copy and the verify
# step; the verify step alone (compile/object_store.py).
PULLERS: dict[str, Puller] = {
    "hf": Puller(lambda model, platform, ident, tmp_mount: hub_containers(model, platform, ident, tmp_mount),
                 per_pod=_hub_download_only),
    "s3": Puller(lambda model, platform, ident, tmp_mount: object_store.s3_containers(model, ident),
                 object_store.FAILURE_POLICY),
    "pvc": Puller(lambda model, platform, ident, tmp_mount: object_store.pvc_containers(model, ident)),
}


def compile_puller_job(model: ModelConfig, platform: PlatformConfig) -> Optional[dict]:
    """The Job that fills the weights volume and stands for its content: the hub CLI (`hf`) and a
    verify step (compile/hub_verify.py), or rclone and a verify step (s3), or the verify step alone
    (pvc: compile/object_store.py); None for a streamed `s3` source (nothing to pull)."""
    if model.streams:
        return None
    names = common.ModelNames.of(model)
    ident = common.identity(model, platform)
    tmp, tmp_mount = common.tmp_volume()
    puller = PULLERS[model.source.type]
    init_containers, containers = puller.containers(model, platform, ident, tmp_mount)
    pod_spec: dict = {
        **common.POD_DEFAULTS,
        "restartPolicy": "Never",
        "serviceAccountName": object_store.service_account(model, platform),
        "automountServiceAccountToken": False,
        # Same uid/gid as the server so the server can read what the puller wrote; fsGroup lets
        # it write a fresh volume (never set on an existing claim: it would chown the user's files).
        "securityContext": common.pod_security_context(ident, fs_group=object_store.writes_volume(model)),
        **({"initContainers": init_containers} if init_containers else {}),
        "containers": containers,
        "volumes": [object_store.claim_volume(model, names), tmp],
        **puller_scheduling(model, platform),
    }
    pull_secrets = common.image_pull_secrets(platform)
    if pull_secrets:
        pod_spec["imagePullSecrets"] = pull_secrets
    meta = common.metadata(
        "", platform.namespace, model, PULLER_COMPONENT,
        **{common.MODEL_SOURCE_ANNOTATION: model.source.ref},
    )
    meta["labels"][common.SOURCE_HASH_LABEL] = common.source_hash(model)
    template = {"metadata": {"labels": dict(meta["labels"]), "annotations": dict(meta["annotations"])},
                "spec": pod_spec}
    meta["name"] = common.puller_name(model, template)
    meta["annotations"].update(common.SKIP_AWAIT)
    meta["annotations"].update(common.BACKGROUND_DELETE)
    spec: dict = {
        "backoffLimit": 2,
        "activeDeadlineSeconds": platform.pull_timeout_seconds,
        "template": template,
    }
    if puller.failure_policy is not None:
        spec["podFailurePolicy"] = puller.failure_policy
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def puller_image(model: ModelConfig, platform: PlatformConfig) -> str:
    """``platform.pullerImage``; unset, a CPU model's pullers run a CPU image (the default puller
    image is the GPU server's, many GB of CUDA a CPU node would pull for the `hf` CLI alone; both
    ship huggingface_hub's `hf`): ``vllmCpuImage`` when set (a mirror's), else the default line's
    upstream CPU image, fixed like the default puller image, so moving the platform to another
    line changes no puller Job and re-pulls nothing."""
    if model.on_cpu and "puller_image" not in platform.model_fields_set:
        return platform.vllm_cpu_image or RELEASES[DEFAULT_RELEASE].cpu_image
    return platform.puller_image


def hub_container(model: ModelConfig, platform: PlatformConfig, ident: common.Identity, tmp_mount: dict) -> dict:
    return {
        "name": "puller",
        "image": puller_image(model, platform),
        # The image's entrypoint may be the server; run the hub CLI explicitly.
        "command": ["hf"],
        "args": puller_args(model),
        "env": puller_env(model, platform),
        "volumeMounts": [{"name": "weights", "mountPath": common.WEIGHTS_MOUNT}, tmp_mount],
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"memory": "4Gi"},
        },
        "securityContext": common.container_security_context(ident, read_only_root=True),
        # An init container's log is not the pod's default one: its last lines become its
        # termination message, which the gate and status read from the pod's status.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def hub_containers(model: ModelConfig, platform: PlatformConfig, ident: common.Identity,
                   tmp_mount: dict) -> tuple[list[dict], list[dict]]:
    """(init containers, containers) of a Hub source's puller Job: `hf download`, then the check
    of its bytes against the hub's records (compile/hub_verify.py). Two containers, so that the
    hub CLI's command and arguments stay the ones the image and the tests run as they are."""
    puller = hub_container(model, platform, ident, tmp_mount)
    env = hub_verify.verify_env(model, puller_hf_home(), hf_endpoint(model, platform))
    return [puller], [hub_verify.verify_container(puller["image"], env, ident)]
