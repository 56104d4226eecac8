"""What differs per engine when a model is rendered: one module per engine (``vllm.py``,
``nim.py``; the interface: ``base.py``), keyed by the model's `engine` like the config's variants
(``components/config/engines/``). Shared compilers call the functions here; nothing
engine-specific lives in ``server.py``."""

from __future__ import annotations

from types import MappingProxyType

from ...config.engines import engine_of
from ...config.model import ModelConfig
from ...config.platform import PlatformConfig
from ...config.stack import StackConfig
from .. import common, cpu
from .base import Server
from .nim import NIM_SERVER
from .vllm import VLLM_SERVER

SERVERS: MappingProxyType[str, Server] = MappingProxyType({server.engine.name: server
                                                            for server in (VLLM_SERVER, NIM_SERVER)})


def server_of(model: ModelConfig) -> Server:
    return SERVERS[model.engine]


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
    keys = engine_of(model).identity_keys
    platform = stack.platform.model_copy(update=dict(zip(keys, (ident.uid, ident.gid), strict=True)))
    return stack.model_copy(update={"platform": platform})


def server_image(model: ModelConfig, platform: PlatformConfig) -> str:
    return model.image or server_of(model).image(model, platform)


def server_command(model: ModelConfig) -> dict:
    return server_of(model).command(model)


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
    """The engine's environment, then the model's own `env` (names the program sets are refused
    there: config/managed.py)."""
    env = server_of(model).env(model, platform)
    return env + [{"name": k, "value": v} for k, v in sorted(model.env.items())]
