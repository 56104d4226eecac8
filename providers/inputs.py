"""What changed between a dynamic resource's recorded inputs and the program's new ones.

No import-time side effects: imported by pickled providers.
"""

from __future__ import annotations

# What the engine hands a dynamic provider for an input not known yet (during preview).
UNKNOWN_INPUT = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def changed_inputs(olds: dict, news: dict) -> list[str]:
    """Inputs that differ from the record, or are not known yet; the provider reference is not one."""
    return [k for k in news if k != "__provider" and (news[k] == UNKNOWN_INPUT or olds.get(k) != news[k])]
