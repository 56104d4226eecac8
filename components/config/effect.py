"""No setting without effect: a key the chosen engine, path or switch does not use is refused with
what to use instead, and so is a name the server would resolve to something else.

Each setting of a model was walked per engine and path against what the compilers render
(``components/compile``); what they ignore is below (the ones refused elsewhere are noted where
they live; "here" is ``model.no_effect_problems``, which reads the engine, the path and the
sections together, and ``stack.served_name_problems`` for names across models). This module holds
the walk and ``unused_keys``; it sees no model. A silently ignored setting is worse than a refused one: the user believes it acts.

    setting                         vllm      nim raw                 nim operator
    lora.enabled (+ adapters)       used      refused here (1)        refused (model.nim_problems)
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

Paths are relative to the model.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from .values import Problem


def alias(model: type[BaseModel], name: str) -> str:
    return model.model_fields[name].alias or name


def unused_keys(section: BaseModel, names: Iterable[str], where: str, why: str) -> list[Problem]:
    """One problem per key of ``section`` the user wrote that has no effect, at ``<where>.<key>``."""
    return [Problem(f"{where}{alias(type(section), name)}", why)
            for name in names if name in section.model_fields_set]
