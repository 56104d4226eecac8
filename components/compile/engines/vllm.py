"""vLLM's server (`engine: vllm`): `vllm serve` on the weights volume (or the store, for
`source.load: stream`), on GPUs or on vLLM's CPU image; LoRA adapters through its filesystem
resolver. What vLLM accepts: ``components/config/engines/vllm.py``."""

from __future__ import annotations

from ...config.engines.vllm import VLLM
from ...config.model import ModelConfig
from ...config.platform import PlatformConfig, cpu_image
from .. import common, cpu, streaming
from .base import Server

LORA_CACHE_MOUNT = "/lora-cache"
# vLLM's filesystem resolver (vLLM v0.11.0, vllm/plugins/lora_resolvers/filesystem_resolver.py)
# serves a request for `model: <name>` from `<VLLM_LORA_RESOLVER_CACHE_DIR>/<name>` when that
# directory holds an adapter_config.json with peft_type LORA. The directory must exist when the
# server starts (the plugin raises otherwise): the init container creates it.
LORA_ADAPTERS_DIR = f"{LORA_CACHE_MOUNT}/adapters"


class VllmServer(Server):
    engine = VLLM
    metrics_path = "/metrics"

    def image(self, model: ModelConfig, platform: PlatformConfig) -> str:
        return cpu_image(platform) if model.on_cpu else platform.vllm_image

    def command(self, model: ModelConfig) -> dict:
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

    def env(self, model: ModelConfig, platform: PlatformConfig) -> list[dict]:
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
        return env


VLLM_SERVER = VllmServer()
