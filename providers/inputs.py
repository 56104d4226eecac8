"""A dynamic resource's inputs: what changed since the record, and what the record holds beside them.

No import-time side effects: imported by pickled providers.
"""

from __future__ import annotations

from datetime import UTC, datetime

# What the engine hands a dynamic provider for an input not known yet (during preview).
UNKNOWN_INPUT = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def changed_inputs(olds: dict, news: dict) -> list[str]:
    """Inputs that differ from the record, or are not known yet; the provider reference is not one."""
    return [k for k in news if k != "__provider" and (news[k] == UNKNOWN_INPUT or olds.get(k) != news[k])]


def now() -> str:
    """When a provider observed or checked something, as it records it."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def inputs_only(props: dict, outputs: tuple[str, ...]) -> dict:
    """A recorded resource's inputs: its props without what the provider recorded beside them."""
    return {k: v for k, v in props.items() if k not in outputs}
