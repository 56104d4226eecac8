"""No setting without effect: a key the chosen engine, path or switch does not use is refused with
what to use instead, and so is a name the server would resolve to something else.

Each setting of a model was walked per engine and path against what the compilers render
(``components/compile``); what they ignore is below (the ones refused elsewhere are noted where
they live). A silently ignored setting is worse than a refused one: the user believes it acts.

    setting                         vllm      nim raw                 nim operator
    lora.enabled (+ adapters)       used      refused here (1)        refused (rules.nim_problems)
    tensorParallelSize              used      refused here (2)        used for ngc without profiles
                                                                      and by multiNode; refused here
                                                                      otherwise (3)
    disruption.drainSeconds         used      used                    refused here (4)
    source.allowPatterns/ignore…    used      used                    refused here (5)
    hfEndpoint                      used      used                    hf cache only; refused on ngc (5)

Not refused: the keys of a switch the file turns off (`lora`, `autoscaling`, `metrics`,
`networkPolicy`, `tls`, `preflight`, `teardownIdentity` with `enabled: false`). The switch is in
plain sight, and keeping its settings is how a feature is paused
(tests/compile/test_autoscaling.py); the backend router's keys under `enabled: auto` that resolves to
"off" are refused (router.py ``topology_problems``), since nothing in the file says it is off.

(1) NIM serves adapters from the directory named by NIM_PEFT_SOURCE, and only with a LoRA-capable
    profile (NIM for LLMs docs, "Fine-Tuning with LoRA" / "Parameter-Efficient Fine-Tuning"); the
    compiler would download them where NIM never looks.
(2) The raw path passes no parallelism to NIM: NIM picks a profile for the GPUs it sees.
(3) An explicit `nim.profiles` list excludes every other selector (the operator's webhook); an hf
    cache downloads the repo as it is.
(4) NIMService has no lifecycle or terminationGracePeriodSeconds to carry the drain wait
    (components/compile/nim.py compile_pod_disruption_budget).
(5) The NIMCache's hf source has no file patterns; its ngc source downloads from NGC.

Paths are relative to the model, as in ``rules.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from pydantic import BaseModel

from .values import Problem

if TYPE_CHECKING:
    from .model import ModelConfig


def alias(model: type[BaseModel], name: str) -> str:
    return model.model_fields[name].alias or name


def unused_keys(section: BaseModel, names: Iterable[str], where: str, why: str) -> list[Problem]:
    """One problem per key of ``section`` the user wrote that has no effect, at ``<where>.<key>``."""
    return [Problem(f"{where}{alias(type(section), name)}", why)
            for name in names if name in section.model_fields_set]


def model_problems(model: ModelConfig) -> list[Problem]:
    problems: list[Problem] = []
    if model.engine != "nim":
        return problems
    if model.lora.enabled:
        problems.append(Problem("lora.enabled", (
            "NIM serves LoRA adapters from the directory named by NIM_PEFT_SOURCE and only with a "
            "LoRA-capable profile of its image, which this program does not configure: the adapters "
            "would be downloaded where NIM never looks. Use engine: vllm for adapters, or remove lora")))
    tensor_parallel_set = "tensor_parallel_size" in model.model_fields_set
    if tensor_parallel_set and not model.on_operator:
        problems.append(Problem("tensorParallelSize", (
            "the NIM raw path passes no parallelism to NIM, which picks a profile for the GPUs it "
            "sees; remove it and set gpus (to pin a profile, set env NIM_MODEL_PROFILE)")))
    if not model.on_operator:
        return problems
    nim = model.nim_settings
    source = nim.cache_source or "ngc"
    # multiNode: tensorParallelSize is the NIMService's parallelism.tensor, whatever the cache.
    if tensor_parallel_set and (source == "hf" or nim.profiles) and model.multi_node is None:
        reason = ("an hf cache downloads the repo as it is" if source == "hf"
                  else "nim.profiles names the profiles to cache, which excludes every other selector")
        problems.append(Problem("tensorParallelSize", f"has no effect on this NIMCache: {reason}; remove it"))
    if model.disruption is not None and model.disruption.drain_seconds is not None:
        problems.append(Problem("disruption.drainSeconds", (
            "the NIM operator path renders no drain wait: a NIMService has no lifecycle hook or "
            "terminationGracePeriodSeconds to carry it; remove it, or use path: raw")))
    problems += unused_keys(model.source, ("allow_patterns", "ignore_patterns"), "source.",
                            "the NIMCache downloads without file patterns; remove it, or use path: raw")
    if source == "ngc" and model.hf_endpoint is not None:
        problems.append(Problem("hfEndpoint", "an ngc cache downloads from NGC, never from a Hugging Face "
                         "endpoint; remove it, or set nim.cacheSource: hf"))
    return problems


def served_name_problems(models: Iterable[ModelConfig], revisions: Mapping[str, str] = MappingProxyType({})
                         ) -> list[Problem]:
    """A request's `model` names one thing: a model, or one adapter of one model. An adapter named
    like its own base model is shadowed by it (the server answers with the base model), and one
    named like another model, or like another model's adapter, sends clients (and the router,
    which routes by model name) to whichever answers first. ``revisions``: the name each next
    revision registers with the router under (``<model>-next``) -> its model; an adapter may not
    take one either."""
    models = tuple(models)
    owner = {model.name: f"model '{model.name}'" for model in models}
    owner.update({name: f"the next revision of model '{of}' (it registers with the router as '{name}')"
                  for name, of in revisions.items() if name not in owner})
    problems: list[Problem] = []
    for index, model in enumerate(models):
        for number, adapter in enumerate(model.lora.adapters):
            path = f"models.{index}.lora.adapters.{number}.name"
            if adapter.name == model.name:
                problems.append(Problem(path, f"'{adapter.name}' is the served name of its base model, which "
                                 "answers every request for it: the adapter would never be used; "
                                 "give the adapter its own name, e.g. "
                                 f"'{model.name}-{adapter.repo.rsplit('/', 1)[-1].lower()[:20]}'"))
                continue
            if adapter.name in owner:
                problems.append(Problem(path, f"'{adapter.name}' is already served by {owner[adapter.name]}; "
                                 "requests for it would reach either; give the adapter a name of its own"))
                continue
            owner[adapter.name] = f"adapter {number} of model '{model.name}'"
    return problems
