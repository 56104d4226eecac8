"""Logical names as the tests compare them: a weights child is named after its source
(`<model>-weights-<hash>`, compile/plan.py weights_names); ``stem`` leaves the hash out."""

from __future__ import annotations

import re

SOURCE_NAMED = re.compile(r"^(?P<stem>.+-(weights|puller|weights-gate))-[0-9a-f]{8}$")


def stem(name: str) -> str:
    """A weights child's logical name without its source hash (any other name as it is)."""
    match = SOURCE_NAMED.match(name)
    return match["stem"] if match else name
