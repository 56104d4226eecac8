"""What a serving engine renders: the interface every server module (``vllm.py``, ``nim.py``)
implements. What the engine accepts is its config variant (``components/config/engines/``),
which each server names; the shared compilers (``server.py``, ``rbac.py``) ask the model's
server (``engines.server_of``) instead of comparing the engine's name."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ...config.engines.base import Engine
from ...config.model import ModelConfig
from ...config.platform import PlatformConfig


class Server(ABC):
    engine: Engine  # the config variant this server renders
    # Kinds the stack declares for this engine's models beyond the raw objects (API group, resources):
    # the teardown identity may delete them (rbac.py).
    metrics_path: str  # where the server answers Prometheus (the ServiceMonitor's path)
    owned: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @abstractmethod
    def image(self, model: ModelConfig, platform: PlatformConfig) -> str:
        """The server image of a model that names none of its own."""

    @abstractmethod
    def command(self, model: ModelConfig) -> dict:
        """The container's `command` and `args` (either left out: the image's own)."""

    @abstractmethod
    def env(self, model: ModelConfig, platform: PlatformConfig) -> list[dict]:
        """The environment the program sets (the model's own `env` follows it)."""

    def volumes(self, model: ModelConfig) -> tuple[list[dict], list[dict]]:
        """This engine's own volumes and their mounts in the server container."""
        return [], []
