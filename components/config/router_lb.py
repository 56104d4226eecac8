"""`router.loadBalancer`: the router's load-balancing algorithm per model (`--lb-config-path`).

Stargate picks one algorithm per model from a JSON file read once at startup (NVIDIA/nvcf@fadc0f8
``src/libraries/rust/stargate/docs/load-balancer-configuration.md``; unknown fields, or a field
of another algorithm, stop it from starting). These settings are that file, typed: the render
(``components.compile.router.lb``) writes it to a ConfigMap the router mounts. Unset, no file
and no flag: every model gets ``power-of-n`` (the binary's default).

Prefix-cache-aware routing is ``pulsar`` (or ``wait-and-widen`` with
``cacheAffinityBackendSelectionCount``, or ``pulsar-wait-and-widen``): requests with the same
``x-cache-affinity-key`` rank the engine pods in the same stable order, so a conversation keeps
landing on the pod that holds its prefix in cache; ``requireCacheAffinityKey`` makes a request
without the header a 400. The key comes from the gateway in front of the router, never from
callers.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, model_validator

from . import values
from .types import Strict
from .values import Problem

Algorithm = Literal["power-of-n", "wait-and-widen", "round-robin", "random", "pulsar", "pulsar-wait-and-widen"]
Comparator = Literal["ttft", "queue-time", "input-work-seconds", "utilization", "num-requests-queued"]

# Which algorithm-specific field each algorithm takes (the doc's "Algorithm fields" tables).
_WAIT_AND_WIDEN = ("seed", "max_queue_time_floor_ms", "max_queue_time_ceil_ms", "ttft_bucket_size_ms",
                   "next_bucket_unlock_factor", "n", "max_queued", "ignore_queue_time",
                   "ignore_input_processing_time")
FIELDS_BY_ALGORITHM: dict[str, tuple[str, ...]] = {
    "power-of-n": ("comparator", "sample_count"),
    "wait-and-widen": ("comparator", "cache_affinity_virtual_nodes", "cache_affinity_backend_selection_count",
                       *_WAIT_AND_WIDEN),
    "round-robin": (),
    "random": (),
    "pulsar": ("seed", "consider_kv_free_tokens"),
    # The cache-affinity subset fields are accepted by the binary here but have no effect (Pulsar
    # ranking supplies the affinity), so they are refused rather than silently ignored.
    "pulsar-wait-and-widen": (*_WAIT_AND_WIDEN, "consider_kv_free_tokens"),
}
SPECIFIC = tuple(dict.fromkeys(f for fields in FIELDS_BY_ALGORITHM.values() for f in fields))


class LbAlgorithm(Strict):
    """One algorithm with its settings (the file's detailed object)."""

    algorithm: Algorithm = Field(
        description="`power-of-n`, `wait-and-widen`, `round-robin`, `random`, `pulsar` (stable "
        "weighted ranking per `x-cache-affinity-key`: prefix-cache affinity) or "
        "`pulsar-wait-and-widen` (Pulsar affinity with a latency escape).")
    require_cache_affinity_key: bool = Field(
        False, description="Refuse (HTTP 400) a request without `x-cache-affinity-key`.")
    max_input_work_seconds: Optional[float] = Field(
        None, gt=0, description="Refuse (HTTP 503) when the queued plus requested input work of the "
        "eligible engines exceeds this many seconds at their measured input rate.")
    comparator: Optional[Comparator] = Field(
        None, description="`power-of-n`, `wait-and-widen`: the signal sampled candidates are compared "
        "by (binary default `ttft`).")
    sample_count: Optional[int] = Field(
        None, ge=1, le=64, description="`power-of-n`: candidates sampled (binary default 2).")
    seed: Optional[str] = Field(
        None, min_length=1, description="`pulsar`, `wait-and-widen`, `pulsar-wait-and-widen`: the "
        "hash seed of the affinity ranking; every router replica uses the same file, so the same "
        "choice.")
    cache_affinity_virtual_nodes: Optional[int] = Field(
        None, ge=1, description="`wait-and-widen`: virtual nodes per engine on the affinity ring (binary default 150).")
    cache_affinity_backend_selection_count: Optional[int] = Field(
        None, ge=1, description="`wait-and-widen`: limit selection to this many engines chosen by "
        "`x-cache-affinity-key` (prefix affinity); unset: no affinity subset.")
    max_queue_time_floor_ms: Optional[int] = Field(None, ge=0, description="Wait-and-widen queue-SLO lower bound (with the ceiling).")
    max_queue_time_ceil_ms: Optional[int] = Field(None, ge=0, description="Wait-and-widen queue-SLO upper bound (with the floor).")
    ttft_bucket_size_ms: Optional[int] = Field(None, ge=1, description="Wait-and-widen TTFT bucket width (binary default 20).")
    next_bucket_unlock_factor: Optional[float] = Field(
        None, ge=0, le=1, description="Wait-and-widen: fraction of the TTFT gap waited before the next bucket (binary default 0.25).")
    n: Optional[int] = Field(None, ge=1, description="Wait-and-widen: unlocked candidates sampled (binary default 2).")
    max_queued: Optional[int] = Field(None, ge=0, description="Wait-and-widen: queued requests allowed above the engine's concurrency.")
    ignore_queue_time: Optional[bool] = Field(None, description="Wait-and-widen: leave queue delay out of TTFT buckets.")
    ignore_input_processing_time: Optional[bool] = Field(None, description="Wait-and-widen: leave prefill time out of TTFT buckets.")
    consider_kv_free_tokens: Optional[bool] = Field(
        None, description="`pulsar`, `pulsar-wait-and-widen`: skip engines reporting fewer free KV "
        "tokens than the request's input (needs engines that report KV-cache metrics).")

    @model_validator(mode="after")
    def _fields_of_the_algorithm(self) -> LbAlgorithm:
        allowed = FIELDS_BY_ALGORITHM[self.algorithm]
        problems = [
            Problem(type(self).model_fields[name].alias or name,
             f"is not a setting of {self.algorithm} (Stargate refuses to start on it); remove it, or "
             f"use an algorithm that has it ({', '.join(a for a, f in FIELDS_BY_ALGORITHM.items() if name in f)})")
            for name in SPECIFIC if name in self.model_fields_set and name not in allowed
        ]
        floor, ceil = self.max_queue_time_floor_ms, self.max_queue_time_ceil_ms
        if (floor is None) != (ceil is None):
            problems.append(Problem("maxQueueTimeFloorMs", "takes effect only with maxQueueTimeCeilMs (and the "
                             "reverse); set both, or neither"))
        elif floor is not None and ceil is not None and floor > ceil:
            problems.append(Problem("maxQueueTimeFloorMs", f"{floor} is above maxQueueTimeCeilMs ({ceil}); "
                             "Stargate does not reorder them; lower the floor"))
        if problems:
            raise values.Problems(problems)
        return self

    def to_file(self) -> dict:
        """The file's detailed object (snake_case keys, only what is set)."""
        out: dict = {"algorithm": self.algorithm}
        for name in type(self).model_fields:
            if name == "algorithm":
                continue
            value = getattr(self, name)
            if name in self.model_fields_set and value is not None:
                out[name] = value
        return out


AlgorithmChoice = Union[Algorithm, LbAlgorithm]


def _entry(choice: AlgorithmChoice) -> Union[str, dict]:
    return choice if isinstance(choice, str) else choice.to_file()


def _algorithm(choice: AlgorithmChoice) -> str:
    return choice if isinstance(choice, str) else choice.algorithm


class LoadBalancer(Strict):
    """The router's load-balancer file (``lb-config.json``)."""

    default: Algorithm = Field("power-of-n", description="Algorithm of models not listed in `models`.")
    models: dict[str, AlgorithmChoice] = Field(
        default_factory=dict,
        description="Model name -> algorithm name, or an object with `algorithm` and its settings. "
        "Names must be models the router fronts.")
    request_algorithms: dict[Algorithm, AlgorithmChoice] = Field(
        default_factory=dict,
        description="Algorithms a trusted `x-routing-method` header may select for any model, each "
        "under its own name (the model's own algorithm is always selectable).")

    @model_validator(mode="after")
    def _keys_match(self) -> LoadBalancer:
        problems = [
            Problem(f"requestAlgorithms.{key}", f"names {key} but configures {_algorithm(choice)}; the key must "
             "be the algorithm it configures")
            for key, choice in self.request_algorithms.items() if _algorithm(choice) != key
        ]
        if problems:
            raise values.Problems(problems)
        return self

    def to_file(self) -> dict:
        out: dict = {"default": self.default}
        if self.request_algorithms:
            out["request_algorithms"] = {k: _entry(v) for k, v in sorted(self.request_algorithms.items())}
        if self.models:
            out["models"] = {k: _entry(v) for k, v in sorted(self.models.items())}
        return out


def lb_model_problems(lb: Optional[LoadBalancer], fronted: tuple[str, ...]) -> list[Problem]:
    """Paths relative to the router section: a listed model the router does not front."""
    if lb is None:
        return []
    return [Problem(f"loadBalancer.models.{name}", f"'{name}' is not a model the router fronts ({', '.join(fronted) or 'none'}); "
             "Stargate matches the exact model id, so the entry would never apply; fix the name or remove it")
            for name in lb.models if name not in fronted]
