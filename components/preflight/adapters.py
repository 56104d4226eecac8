"""Preflight of a model's LoRA adapters (``lora.adapters``): each one is asked for like the base
model — its revision pinned to a commit, the token's access checked — plus what only an adapter
needs: an ``adapter_config.json`` (vLLM's filesystem resolver skips a directory without one), and
all adapters together fitting the adapter cache (``lora.cacheSizeLimit``).

Pure but for ``fetch``, which is ``hub.fetch`` (or a test's stand-in).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ..config import values
from ..config.model import ModelConfig
from .decide import Check, Problem, RepoState, decide, human

ADAPTER_CONFIG = "adapter_config.json"


@dataclass
class AdapterReport:
    model: ModelConfig                                      # with pinned adapter revisions
    problems: list[Problem] = field(default_factory=list)   # fields relative to the model
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    revisions: dict[str, dict] = field(default_factory=dict)


def _at_adapter(problem: Problem, index: int) -> Problem:
    """A base-model verdict's problem, moved to the adapter's own keys."""
    where = f"lora.adapters.{index}"
    moved = {"source.repo": f"{where}.repo", "source.revision": f"{where}.revision", "source": where,
             "source.ignorePatterns": where, "weights.size": "lora.cacheSizeLimit"}
    message = problem.message
    for old in ("source.revision", "source.repo", "weights.size"):
        message = message.replace(old, moved[old])
    return Problem(moved.get(problem.field, problem.field), message)


def preflight_adapters(model: ModelConfig, base: Check, fetch: Callable[..., tuple], token=None) -> AdapterReport:
    """Check and pin ``model.lora.adapters`` on the endpoint and with the token of ``base`` (the
    base model's check: the init container downloads with the model's endpoint and token)."""
    report = AdapterReport(model)
    adapters = list(model.lora.adapters)
    if not adapters:
        return report
    total, sized = 0, True
    for index, adapter in enumerate(adapters):
        check = dataclasses.replace(base, repo=adapter.repo, revision=adapter.revision, allow_patterns=None,
                                    ignore_patterns=(), volume_size=model.lora.cache_size_limit,
                                    volume_size_default=False)
        answer, access = fetch(check.endpoint, check.repo, check.revision, None, (), token=token)
        verdict = decide(check, answer, access)
        report.problems.extend(_at_adapter(p, index) for p in verdict.errors)
        report.warnings.extend(f"LoRA adapter '{adapter.name}': {w}" for w in verdict.warnings)
        report.notes.extend(f"LoRA adapter '{adapter.name}': {n}" for n in verdict.notes)
        if isinstance(answer, RepoState) and not any(f.path == ADAPTER_CONFIG for f in answer.files):
            report.problems.append(Problem(f"lora.adapters.{index}.repo", (
                f"{check.ref} has no {ADAPTER_CONFIG}: it is not a PEFT LoRA adapter vLLM can load; "
                "name the adapter's repo (the one holding adapter_config.json and adapter_model.*)")))
        report.revisions[adapter.name] = {"repo": adapter.repo, "requested": adapter.revision,
                                          "commit": verdict.commit if verdict.pinned else None}
        adapters[index] = adapter.model_copy(update={"revision": verdict.revision})
        if verdict.download_bytes is None:
            sized = False
        else:
            total += verdict.download_bytes
    capacity = values.parse_quantity(model.lora.cache_size_limit)
    too_big_alone = any(p.field == "lora.cacheSizeLimit" for p in report.problems)
    if sized and len(adapters) > 1 and total > capacity and not too_big_alone:
        report.problems.append(Problem("lora.cacheSizeLimit", (
            f"{model.lora.cache_size_limit} ({human(capacity)}) is too small for the {len(adapters)} "
            f"adapters together ({human(total)}); raise lora.cacheSizeLimit or serve fewer adapters")))
    lora = model.lora.model_copy(update={"adapters": tuple(adapters)})
    report.model = model.model_copy(update={"lora": lora})
    return report
