"""`platform.disruption` and a model's `disruption`: how a model server's pods leave.

Defaults every model gets (the platform section) and a per-model override of the same keys; a
key the model leaves unset inherits the platform's. ``resolve`` gives the effective policy.

Why a drain at all: vLLM 0.11 does not finish in-flight requests on SIGTERM. Its launcher
(vllm-project/vllm v0.11, ``vllm/entrypoints/launcher.py`` ``serve_http``) cancels the uvicorn
server task on SIGTERM and returns; ``api_server.run_server_worker`` then leaves the engine
client's context (the engine shuts down) before it awaits uvicorn's shutdown, so every running
generation ends with the engine. Finishing requests on SIGTERM (``--shutdown-timeout``) came with
vLLM 0.18 (vllm-project/vllm#34730). So the waiting must happen before SIGTERM: a ``preStop``
hook holds the container while the pod, already out of its Service's ready endpoints, finishes
the streams it has; ``terminationGracePeriodSeconds`` must cover the hook plus the shutdown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from pydantic import Field, field_validator

from .types import Strict

# A long answer: ~4,000 output tokens at ~30 ms per token (a loaded GPU's inter-token latency on
# an 8B-70B model) is 120 s. Streams longer than the drain are cut when it ends.
DEFAULT_DRAIN_SECONDS = 120
# One hour: beyond it a node drain (and every rollout) waits longer than operators tolerate; a
# generation that long belongs to a batch job, not to an interactive server.
MAX_DRAIN_SECONDS = 3600
# After the preStop wait the kubelet sends SIGTERM; vLLM then stops its engine processes and
# frees the GPUs (seconds), and pylon closes its registration streams. The margin keeps the
# SIGKILL at the end of the grace period from landing in that shutdown.
GRACE_MARGIN_SECONDS = 15

TopologySpread = Literal["node", "node-and-zone", "off"]

DRAIN_DESCRIPTION = (
    "Seconds a server pod keeps serving the streams it has after it is told to stop (rollout, "
    "scale-down, node drain, eviction): a `preStop` wait on every container of the pod, while the "
    "pod is already out of its Service's endpoints. vLLM 0.11 aborts running requests on SIGTERM, "
    "so this wait is what lets a long answer finish. The pod's terminationGracePeriodSeconds is "
    f"this plus {GRACE_MARGIN_SECONDS} s for the shutdown itself. Default {DEFAULT_DRAIN_SECONDS}: "
    "about 4,000 output tokens at 30 ms per token. Every stop waits this long (a fixed wait), so "
    "lower it for short answers; 0 stops at once."
)
SPREAD_DESCRIPTION = (
    "How the pods of a model with more than one replica spread: `node` (default) prefers one pod "
    "per node, `node-and-zone` prefers that and an even spread over zones "
    "(`topology.kubernetes.io/zone`), `off` renders no constraint. Always a preference "
    "(whenUnsatisfiable: ScheduleAnyway): GPU nodes are scarce, and a hard rule would leave a "
    "replica Pending rather than share a node."
)


def _drain_problem(seconds: Optional[int]) -> Optional[int]:
    if seconds is not None and not 0 <= seconds <= MAX_DRAIN_SECONDS:
        raise ValueError(
            f"{seconds} is outside 0..{MAX_DRAIN_SECONDS} seconds; set the longest answer's "
            f"generation time (output tokens × seconds per token), e.g. {DEFAULT_DRAIN_SECONDS}, "
            "or 0 to stop at once"
        )
    return seconds


class DisruptionConfig(Strict):
    """Platform defaults for how model server pods are drained and spread."""

    drain_seconds: int = Field(DEFAULT_DRAIN_SECONDS, description=DRAIN_DESCRIPTION)
    topology_spread: TopologySpread = Field("node", description=SPREAD_DESCRIPTION)

    @field_validator("drain_seconds")
    @classmethod
    def _drain(cls, seconds: int) -> int:
        return _drain_problem(seconds)


class DisruptionOverride(Strict):
    """A model's own drain and spread; an unset key inherits `platform.disruption`."""

    drain_seconds: Optional[int] = Field(None, description="Overrides `platform.disruption.drainSeconds`.")
    topology_spread: Optional[TopologySpread] = Field(
        None, description="Overrides `platform.disruption.topologySpread`."
    )

    @field_validator("drain_seconds")
    @classmethod
    def _drain(cls, seconds: Optional[int]) -> Optional[int]:
        return _drain_problem(seconds)


@dataclass(frozen=True)
class DisruptionPolicy:
    """The effective policy of one model."""

    drain_seconds: int
    topology_spread: str

    @property
    def grace_seconds(self) -> int:
        return self.drain_seconds + GRACE_MARGIN_SECONDS


def resolve(platform_default: DisruptionConfig, override: Optional[DisruptionOverride]) -> DisruptionPolicy:
    drain = platform_default.drain_seconds
    spread = platform_default.topology_spread
    if override is not None:
        drain = drain if override.drain_seconds is None else override.drain_seconds
        spread = spread if override.topology_spread is None else override.topology_spread
    return DisruptionPolicy(drain, spread)
