"""What differs per engine: image, command line, environment and health path.

Shared compilers call these; nothing engine-specific lives in ``server.py``.
"""

from __future__ import annotations

from ..config.model import ModelConfig
from ..config.platform import PlatformConfig, cpu_image
from ..config.stack import StackConfig
from . import common, cpu, streaming

LORA_CACHE_MOUNT = "/lora-cache"
# vLLM's filesystem resolver (vLLM v0.11.0, vllm/plugins/lora_resolvers/filesystem_resolver.py)
# serves a request for `model: <name>` from `<VLLM_LORA_RESOLVER_CACHE_DIR>/<name>` when that
# directory holds an adapter_config.json with peft_type LORA. The directory must exist when the
# server starts (the plugin raises otherwise): the init container creates it.
LORA_ADAPTERS_DIR = f"{LORA_CACHE_MOUNT}/adapters"
NGC_API_KEY_SECRET_KEY = "NGC_API_KEY"
# Where NIM writes its cache (NIM_CACHE_PATH; the NIM images' default location). The NIM operator
# points NIM_CACHE_PATH at its read-write model PVC (k8s-nim-operator NIMService standard env:
# NIM_CACHE_PATH=/model-store) and, for a Hugging Face cache, NIM_MODEL_NAME at the same local
# path. Our weights volume is mounted read-only, so NIM gets the local model path from
# NIM_MODEL_NAME and a writable emptyDir for its cache: no copy of the weights.
NIM_CACHE_MOUNT = "/opt/nim/.cache"
NIM_CACHE_SIZE_LIMIT = "10Gi"


def model_identity(model: ModelConfig, platform: PlatformConfig) -> common.Identity:
    """The engine's uid/gid, or the model's explicit ``securityContext`` override (the config
    model only accepts another engine's identity with ``allowNonDefaultIdentity``)."""
    engine = common.identity(model, platform)
    context = model.security_context
    if context is None:
        return engine
    return common.Identity(
        context.run_as_user if context.run_as_user is not None else engine.uid,
        context.run_as_group if context.run_as_group is not None else engine.gid,
    )


def stack_for(model: ModelConfig, stack: StackConfig) -> StackConfig:
    """The stack as this model's compilers must see it: with the model's identity override as
    its engine's platform uid/gid, so every pod of the model (puller, server, init) gets it."""
    ident = model_identity(model, stack.platform)
    if ident == common.identity(model, stack.platform):
        return stack
    keys = ("nim_uid", "nim_gid") if model.engine == "nim" else ("vllm_uid", "vllm_gid")
    platform = stack.platform.model_copy(update=dict(zip(keys, (ident.uid, ident.gid), strict=True)))
    return stack.model_copy(update={"platform": platform})


def server_image(model: ModelConfig, platform: PlatformConfig) -> str:
    if model.image:
        return model.image
    if model.engine == "vllm":
        return cpu_image(platform) if model.on_cpu else platform.vllm_image
    # The config model requires an image on NIM models (NIM images are per model).
    raise ValueError(f"model '{model.name}': NIM models need an explicit image")


def server_command(model: ModelConfig) -> dict:
    if model.engine == "nim":
        # NIM images start their own server from the image entrypoint.
        return {"args": list(model.args)} if model.args else {}
    # The weights volume, or (source.load: stream) the store itself.
    model_path = streaming.server_args(model) if model.streams else [common.WEIGHTS_MOUNT]
    args = [
        *model_path,
        # A next revision (config/revisions.py) answers to the model's name, which clients send,
        # and to its own, which its pylon registers and sends in its canaries; the first name is
        # the one vLLM reports (answers' `model`, metrics' model_name).
        "--served-model-name", model.served_name, *([model.name] if model.is_next_revision else []),
        "--host", "0.0.0.0",
        "--port", str(common.SERVER_PORT),
        "--tensor-parallel-size", str(model.tensor_parallel_size),
    ]
    if model.lora.enabled:
        args += [
            "--enable-lora",
            "--max-loras", str(model.lora.max_loras),
            "--max-lora-rank", str(model.lora.max_lora_rank),
        ]
    return {"command": ["vllm", "serve"], "args": args + list(model.args)}


def server_resources(model: ModelConfig) -> dict:
    """The server container's requests and limits: the model's CPU, memory and GPUs (a CPU model:
    no GPU, and a CPU limit: compile/cpu.py)."""
    if model.on_cpu:
        return cpu.server_resources(model)
    gpus = str(model.gpus)
    return {
        "requests": {"cpu": model.resources.cpu, "memory": model.resources.memory, "nvidia.com/gpu": gpus},
        "limits": {"memory": model.resources.memory, "nvidia.com/gpu": gpus},
    }


def server_env(model: ModelConfig, platform: PlatformConfig) -> list[dict]:
    if model.engine == "nim":
        env = [
            {"name": "NIM_CACHE_PATH", "value": NIM_CACHE_MOUNT},
            {"name": "NIM_SERVER_PORT", "value": str(common.SERVER_PORT)},
            {"name": "NIM_HTTP_API_PORT", "value": str(common.SERVER_PORT)},
            {"name": "NIM_MODEL_NAME", "value": common.WEIGHTS_MOUNT},
            {"name": "NIM_SERVED_MODEL_NAME", "value": model.name},
        ]
        if model.nim_settings.auth_secret:
            # Same Secret and key the NIM operator reads, so one Secret serves both paths.
            env.append({"name": "NGC_API_KEY", "valueFrom": {"secretKeyRef": {
                "name": model.nim_settings.auth_secret, "key": NGC_API_KEY_SECRET_KEY,
            }}})
    else:
        # The weights are on the volume already: never reach for the hub while serving. Not on a
        # streamed server: with HF_HUB_OFFLINE set, vLLM 0.11's EngineArgs.__post_init__
        # (vllm/engine/arg_utils.py l.501-503) replaces the model by get_model_path(model), which
        # hands the s3:// URI, not a local path, to snapshot_download as a hub repo id
        # (HFValidationError, the server exits). 0.32 skips cloud URIs there. The streamed server
        # reads its config files from the store, so it has no hub to stay away from. (0.11.0 then
        # stops at a second, unrelated check: see tests/engine/test_streamed_weights.py.)
        env = [] if model.streams else [{"name": "HF_HUB_OFFLINE", "value": "1"}]
        env.append({"name": "HOME", "value": "/tmp"})
        if model.on_cpu:
            env += cpu.server_env(model, platform)
        if model.lora.enabled:
            env += [
                # The resolver is consulted only with runtime LoRA updating on (vLLM v0.11.0,
                # vllm/entrypoints/openai/serving_engine.py _check_model), and is loaded as the
                # general plugin of this name (vLLM's setup.py entry points; vllm/envs.py reads
                # VLLM_PLUGINS as a comma-separated allow-list).
                {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"},
                {"name": "VLLM_PLUGINS", "value": "lora_filesystem_resolver"},
                {"name": "VLLM_LORA_RESOLVER_CACHE_DIR", "value": LORA_ADAPTERS_DIR},
            ]
        if model.streams:
            env += streaming.server_env(model)
    return env + [{"name": k, "value": v} for k, v in sorted(model.env.items())]
