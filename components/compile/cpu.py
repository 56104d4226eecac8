"""A CPU model's server (``gpus: 0``): vLLM's CPU server settings, no GPU. Why each setting is
what it is: ``components/config/cpu.py``."""

from __future__ import annotations

from ..config import cpu
from ..config.model import ModelConfig
from ..config.platform import PlatformConfig
from ..config.vllm_checks import line_of


def server_env(model: ModelConfig, platform: PlatformConfig) -> list[dict]:
    return [
        {"name": "VLLM_CPU_KVCACHE_SPACE", "value": str(cpu.kv_cache_gib(model.resources.memory, model.resources.kv_cache))},
        {"name": "OMP_NUM_THREADS", "value": str(cpu.threads(model.resources.cpu))},
        # No binding, in the words of the model's line.
        {"name": "VLLM_CPU_OMP_THREADS_BIND", "value": line_of(model, platform).cpu_unbound},
        # vLLM's CPU image has no user but root, so the pod's uid has no passwd entry; torch asks
        # getpass.getuser() for its compile cache's directory while vLLM imports its layers
        # (torch.compile decorators), which reads USER before the passwd file: without it, KeyError
        # "getpwuid(): uid not found" before the server starts (seen: tests/engine/test_cpu_model.py).
        {"name": "USER", "value": cpu.USER},
    ]


def server_resources(model: ModelConfig) -> dict:
    """Requests = limits, CPU included: the engine's threads are the CPU limit (and a pod with no
    other container is Guaranteed: cores of its own from a kubelet with the static CPU manager
    policy)."""
    amounts = {"cpu": model.resources.cpu, "memory": model.resources.memory}
    return {"requests": dict(amounts), "limits": dict(amounts)}
