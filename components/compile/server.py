"""P3 serve: the engine server Deployment and its Service."""

from __future__ import annotations

from typing import Optional

from ..config.model import ModelConfig
from ..config.platform import PlatformConfig
from ..config.stack import StackConfig
from . import autoscaling, common, disruption, engines, pylon, streaming, weights
from .engines.vllm import LORA_ADAPTERS_DIR, LORA_CACHE_MOUNT

SERVER_COMPONENT = "server"
PROBE_PERIOD_SECONDS = 10


def probes(model: ModelConfig, platform: PlatformConfig) -> dict:
    """Startup, readiness and liveness on the model's health path.

    Big models take many minutes to load; the startup probe carries that budget, so liveness
    can stay strict without killing a server that is still loading.
    """
    http = {"path": model.health_path, "port": "http"}
    return {
        "startupProbe": {
            "httpGet": dict(http),
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5,
            "failureThreshold": -(-platform.startup_timeout_seconds // PROBE_PERIOD_SECONDS),  # ceil
        },
        "readinessProbe": {
            "httpGet": dict(http), "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5, "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": dict(http), "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 3,
        },
    }


def rollout_strategy(model: ModelConfig) -> dict:
    if model.weights.access_mode == "ReadWriteOnce" and not model.streams:
        # A ReadWriteOnce volume attaches to one node: a surge pod on another node would wait
        # forever on Multi-Attach while the old pod holds the volume. Stop first, then start.
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def volumes(model: ModelConfig, stack: StackConfig) -> tuple[list[dict], list[dict]]:
    names = common.ModelNames.of(model)
    # Tensor parallel workers exchange tensors through /dev/shm; the container runtime's
    # default 64Mi makes NCCL fail. Memory-backed, with a limit so it cannot eat the node.
    vols = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": stack.shm_limit(model)}}]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if model.streams:
        # No weights volume: only a folder for the config files vLLM copies from the store.
        config_vol, config_mount = streaming.config_volume()
        vols.append(config_vol)
        mounts.append(config_mount)
    else:
        vols.insert(0, {"name": "weights", "persistentVolumeClaim": {"claimName": names.weights, "readOnly": True}})
        mounts.insert(0, {"name": "weights", "mountPath": common.WEIGHTS_MOUNT, "readOnly": True,
                          **({"subPath": model.source.volume_sub_path} if model.source.volume_sub_path else {})})
    own_vols, own_mounts = engines.server_of(model).volumes(model)
    vols += own_vols
    mounts += own_mounts
    if model.lora.enabled:
        vols.append({"name": names.lora_cache, "emptyDir": {"sizeLimit": model.lora.cache_size_limit}})
        mounts.append({"name": names.lora_cache, "mountPath": LORA_CACHE_MOUNT})
        vols.append(common.tmp_volume()[0])  # the init container's /tmp (read-only root)
    return vols, mounts


# Run once per adapter by the init container: vLLM's filesystem resolver loads an adapter only if
# its adapter_config.json names, as base_model_name_or_path, the base model exactly as the server
# was started with it (vLLM v0.11.0: serving_models.resolve_lora passes model_config.model, i.e.
# our weights path, and filesystem_resolver.py compares it). Adapters on the hub name their hub
# base repo there, so the downloaded copy is re-based onto the weights path.
REBASE_ADAPTER_PY = """import json, sys
path, base = sys.argv[1], sys.argv[2]
with open(path) as f:
    config = json.load(f)
config["base_model_name_or_path"] = base
with open(path, "w") as f:
    json.dump(config, f, indent=2)
"""
# sh -c script; "$@" is (name, repo, revision) per adapter.
FETCH_ADAPTERS_SH = """set -eu
mkdir -p "$ADAPTERS_DIR"
while [ "$#" -ge 3 ]; do
  name=$1; repo=$2; revision=$3; shift 3
  hf download "$repo" --revision "$revision" --local-dir "$ADAPTERS_DIR/$name"
  if [ ! -f "$ADAPTERS_DIR/$name/adapter_config.json" ]; then
    echo "LoRA adapter $name ($repo@$revision) has no adapter_config.json: not a PEFT adapter" >&2
    exit 1
  fi
  python3 -c "$REBASE_ADAPTER_PY" "$ADAPTERS_DIR/$name/adapter_config.json" "$BASE_MODEL"
done
"""


def lora_init_container(model: ModelConfig, stack: StackConfig) -> dict:
    """Prepares the adapter cache before the server starts.

    Without adapters: creates the resolver directory (busybox). With ``lora.adapters``: downloads
    each pinned adapter into ``<LORA_ADAPTERS_DIR>/<name>`` with the puller image's `hf` CLI.

    Why here and not in the puller Job: the Job and the weights volume are named after the base
    model's repo@revision only, and the gate waits on that Job. An adapter change changes this pod
    template alone: a rollout re-downloads the adapters (small) into a fresh emptyDir; the base
    weights volume and its Job are untouched. The cost: each new server pod fetches its adapters
    from the hub (or mirror) again.
    """
    ident = common.identity(model, stack.platform)
    names = common.ModelNames.of(model)
    cache_mount = {"name": names.lora_cache, "mountPath": LORA_CACHE_MOUNT}
    _, tmp_mount = common.tmp_volume()
    security = common.container_security_context(ident, read_only_root=True)
    adapters = model.lora.adapters
    if not adapters:
        return {
            "name": "lora-cache-init",
            "image": stack.platform.busybox_image,
            "command": ["sh", "-c", f"mkdir -p {LORA_ADAPTERS_DIR}"],
            "volumeMounts": [cache_mount, tmp_mount],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
            "securityContext": security,
        }
    args = [value for adapter in adapters for value in (adapter.name, adapter.repo, adapter.revision)]
    env = weights.hub_env(model, stack.platform, f"{common.TMP_MOUNT}/hf-home") + [
        {"name": "ADAPTERS_DIR", "value": LORA_ADAPTERS_DIR},
        {"name": "BASE_MODEL", "value": common.WEIGHTS_MOUNT},
        {"name": "REBASE_ADAPTER_PY", "value": REBASE_ADAPTER_PY},
    ]
    return {
        "name": "lora-cache-init",
        "image": weights.puller_image(model, stack.platform),
        "command": ["sh", "-c", FETCH_ADAPTERS_SH, "fetch-adapters", *args],
        "env": env,
        "volumeMounts": [cache_mount, tmp_mount],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": security,
    }


def server_service_account(model: ModelConfig, platform: PlatformConfig) -> str:
    """The platform's account; a streamed s3 source's own when it names one (the cloud identity
    that reads the bucket: the server is the reader then)."""
    if model.streams and model.source.service_account_name:
        return model.source.service_account_name
    return platform.service_account_name


def compile_server_deployment(model: ModelConfig, stack: StackConfig) -> dict:
    platform = stack.platform
    names = common.ModelNames.of(model)
    ident = common.identity(model, platform)
    vols, mounts = volumes(model, stack)
    container = {
        "name": "server",
        "image": engines.server_image(model, platform),
        **engines.server_command(model),
        "env": engines.server_env(model, platform),
        "ports": [{"name": "http", "containerPort": common.SERVER_PORT, "protocol": "TCP"}],
        "resources": engines.server_resources(model),
        "volumeMounts": mounts,
        "securityContext": common.container_security_context(ident),
        **probes(model, platform),
    }
    annotations = {
        common.MODEL_SOURCE_ANNOTATION: model.source.ref,
        common.HEALTH_PATH_ANNOTATION: model.health_path,
    }
    pod_spec: dict = {
        **common.POD_DEFAULTS,
        "serviceAccountName": server_service_account(model, platform),
        # Serving pods need no Kubernetes API access at all.
        "automountServiceAccountToken": False,
        # No fsGroup: the weights are already owned by this uid/gid, and a recursive chown of
        # a large volume on every start would delay serving.
        "securityContext": common.pod_security_context(ident, fs_group=False),
        "containers": [container],
        "volumes": vols,
        **common.scheduling(model, platform),
    }
    if model.lora.enabled:
        pod_spec["initContainers"] = [lora_init_container(model, stack)]
    if pylon.is_fronted(model, stack):  # the router reaches the model only through its pylon
        sidecar = pylon.pylon_sidecar(model, stack)
        pod_spec["containers"].append(sidecar.container)
        pod_spec["volumes"].extend(sidecar.volumes)
    # Drain: every container waits before SIGTERM, so neither the engine nor pylon cuts a stream
    # the other still carries (compile/disruption.py has the order and the sources).
    drain = disruption.policy_of(model, platform)
    pod_spec["containers"] = disruption.with_drain(pod_spec["containers"], drain)
    pod_spec.update(disruption.drain_pod_fields(drain))
    pod_spec.update(disruption.topology_spread(
        model, drain, common.selector_labels(model, SERVER_COMPONENT)))
    pull_secrets = common.image_pull_secrets(platform)
    if pull_secrets:
        pod_spec["imagePullSecrets"] = pull_secrets
    meta = common.metadata(names.server, platform.namespace, model, SERVER_COMPONENT, **annotations, **common.SKIP_AWAIT)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            **autoscaling.replicas_field(model),  # none when autoscaled: the HPA owns the count
            "selector": {"matchLabels": common.selector_labels(model, SERVER_COMPONENT)},
            "strategy": rollout_strategy(model),
            "template": {
                "metadata": {"labels": common.labels(model, SERVER_COMPONENT), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def compile_pod_disruption_budget(model: ModelConfig, platform: PlatformConfig) -> Optional[dict]:
    """The server's PodDisruptionBudget (models that may run several pods only); named like the
    Deployment, selecting exactly its pods."""
    names = common.ModelNames.of(model)
    return disruption.pod_disruption_budget(
        model, common.metadata(names.server, platform.namespace, model, SERVER_COMPONENT),
        common.selector_labels(model, SERVER_COMPONENT))


def compile_service(model: ModelConfig, platform: PlatformConfig) -> dict:
    names = common.ModelNames.of(model)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.metadata(names.service, platform.namespace, model, SERVER_COMPONENT, **common.SKIP_AWAIT),
        "spec": {
            "type": "ClusterIP",
            "selector": common.selector_labels(model, SERVER_COMPONENT),
            "ports": [{"name": "http", "port": common.SERVER_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def endpoint_url(model: ModelConfig, platform: PlatformConfig) -> str:
    names = common.ModelNames.of(model)
    return f"http://{names.service}.{platform.namespace}.svc.cluster.local:{common.SERVER_PORT}"
