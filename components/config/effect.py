"""No setting without effect: a key the chosen engine, path or switch does not use is refused with
what to use instead, and so is a name the server would resolve to something else.

Each setting of a model was walked per engine and path against what the compilers render
(``components/compile``); what an engine ignores is refused by its variant
(``config/engines/<engine>.py`` ``no_effect_problems``; the table of what NIM ignores is in
``engines/nim.py``), names across models by ``stack.served_name_problems``. This module holds the
rule and ``unused_keys``; it sees no model. A silently ignored setting is worse than a refused one:
the user believes it acts.

Not refused: the keys of a switch the file turns off (`lora`, `autoscaling`, `metrics`,
`networkPolicy`, `tls`, `preflight`, `teardownIdentity` with `enabled: false`). The switch is in
plain sight, and keeping its settings is how a feature is paused
(tests/compile/test_autoscaling.py); the backend router's keys under `enabled: auto` that resolves to
"off" are refused (router.py ``topology_problems``), since nothing in the file says it is off.

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
