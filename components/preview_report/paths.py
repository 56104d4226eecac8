"""Property paths as the engine prints them in a diff: segments, and the value at a path."""

from __future__ import annotations

import re
from typing import Any

_SEGMENT = re.compile(r'\.?([A-Za-z0-9_\-$]+)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]')


def path_segments(path: str) -> list[Any]:
    """`spec.template.spec.containers[0].env[4].value` / `metadata.annotations["a/b"]` -> segments."""
    segments: list[Any] = []
    position = 0
    while position < len(path):
        match = _SEGMENT.match(path, position)
        if not match or match.end() == position:
            segments.append(path[position:])
            break
        name, index, quoted = match.groups()
        segments.append(int(index) if index is not None else (quoted if quoted is not None else name))
        position = match.end()
    return segments


def get_path(value: Any, path: str | list[Any]) -> Any:
    for segment in (path_segments(path) if isinstance(path, str) else path):
        if isinstance(segment, int) and isinstance(value, list) and 0 <= segment < len(value):
            value = value[segment]
        elif isinstance(segment, str) and isinstance(value, dict):
            value = value.get(segment)
        else:
            return None
    return value

