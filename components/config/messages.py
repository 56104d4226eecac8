"""Validation errors as lines that say what to do: ``field.path: fix``.

Pydantic's own words ("Input should be a valid tuple", "instance of ModelSource") describe the
validator, not the stack file; each error type is rewritten to what to write instead, and an
unknown key names the closest valid key of the section it is in.

A value of the wrong type gets the hint of the shape its field expects (mapping, list, duration,
quantity, whole number, text, true/false), with an example and what was given instead: "quote
it" is advice for text only, and a duration quoted without its unit would fail a second time.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from typing import Any, Optional

from pydantic import BaseModel, ValidationError

from .sources import SOURCE_CLASSES, SOURCE_TYPES
from .stack import StackConfig
from .types import Shape, given
from .values import Problems

# What to write instead, keyed by pydantic's error type.
_TYPE_FIX = {
    "missing": "required; add it (see docs/config-reference.md)",
    "tuple_type": "must be a list (one `- item` per line)",
    "list_type": "must be a list (one `- item` per line)",
    "model_type": "must be a mapping of keys (`key: value` lines; see docs/config-reference.md)",
    "model_attributes_type": "must be a mapping of keys (`key: value` lines; see docs/config-reference.md)",
    "dict_type": "must be a mapping (`key: value` lines)",
    "string_type": "must be text; quote it (e.g. '1.0' or 'true')",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "int_type": "must be a whole number, e.g. 2",
    "int_parsing": "must be a whole number, e.g. 2",
    "int_from_float": "must be a whole number, e.g. 2",
    "float_type": "must be a number, e.g. 0.5",
    "float_parsing": "must be a number, e.g. 0.5",
}
_BOUNDS = {"greater_than_equal": ("ge", "greater than or equal to"), "greater_than": ("gt", "greater than"),
           "less_than_equal": ("le", "less than or equal to"), "less_than": ("lt", "less than")}



# The hint per shape a field expects: what to write, with an example.
SHAPE_HINT = {
    "mapping": "must be a mapping: `key: value` lines indented under it (or {key: value} on one line)",
    "list": "must be a list: one `- item` per line, or [a, b] on one line (a single entry too: [a])",
    "duration": "must be a duration with its unit, e.g. 30s, 1m or 1m30s (a bare number has no unit; "
                "quoting it does not add one)",
    "quantity": "must be a quantity: a number with an optional unit, e.g. '16Gi', '500m' or 4",
    "integer": "must be a whole number without quotes, e.g. 2",
    "number": "must be a number without quotes, e.g. 0.5",
    "text": "must be text on the same line as its key; quote it if it looks like a number or "
            "true/false (e.g. '1.0' or 'true')",
    "boolean": "must be true or false",
}


def _shape_of(annotation: Any, metadata: Iterable[Any] = ()) -> Optional[str]:
    for marker in metadata:
        if isinstance(marker, Shape):
            return marker.name
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _shape_of(inner, extra)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _shape_of(args[0])
        # A tagged union of sections (a model's `source`) is a mapping whichever member it is.
        shapes = {_shape_of(a) for a in args}
        return shapes.pop() if len(shapes) == 1 else None
    if origin is dict or _unwrap(annotation) is not None:
        return "mapping"
    if origin in (tuple, list):
        return "list"
    return {int: "integer", float: "number", str: "text", bool: "boolean"}.get(annotation)


def _expected_shape(loc: tuple) -> Optional[str]:
    """The shape the field at ``loc`` expects, read from the config model's annotations."""
    annotation: Any = StackConfig
    metadata: list[Any] = []
    for part in loc:
        model = _unwrap(annotation)
        if model is None:  # inside a list or a mapping: its item
            annotation, metadata = _item(annotation), []
            continue
        fields = {**{f.alias or n: f for n, f in model.model_fields.items()}, **model.model_fields}
        if part not in fields:
            return None
        annotation, metadata = fields[part].annotation, list(fields[part].metadata)
    return _shape_of(annotation, metadata)


def _type_message(item: dict) -> str:
    shape = _expected_shape(_untagged(tuple(item["loc"])))
    hint = SHAPE_HINT.get(shape or "") or _TYPE_FIX[item["type"]]
    if "input" not in item:
        return hint
    return f"{hint}; got {given(item['input'])}"


def _join(*parts: Any) -> str:
    return ".".join(str(p) for p in parts if p != "")


def _untagged(loc: tuple) -> tuple:
    """``loc`` without the tag pydantic inserts after a tagged union (``source.s3.bucket`` is the
    stack file's ``source.bucket``)."""
    return tuple(part for i, part in enumerate(loc)
                 if not (i and loc[i - 1] == "source" and part in SOURCE_TYPES))


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    """The config model that holds the key at ``loc`` (a pydantic error location, tags kept), if any."""
    annotation: Any = StackConfig
    for index, part in enumerate(loc):
        if index and loc[index - 1] == "source" and part in SOURCE_TYPES:
            annotation = SOURCE_CLASSES[part]
            continue
        model = _unwrap(annotation)
        if isinstance(part, int) or model is None:
            annotation = _item(annotation)
            continue
        fields = {**{f.alias or n: f for n, f in model.model_fields.items()}, **model.model_fields}
        if part not in fields:
            return None
        annotation = fields[part].annotation
    return _unwrap(annotation)


def _unwrap(annotation: Any) -> Optional[type[BaseModel]]:
    while typing.get_origin(annotation) in (typing.Annotated, typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1 and typing.get_origin(annotation) is not typing.Annotated:
            return None
        annotation = args[0]
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _item(annotation: Any) -> Any:
    """The element type of a list or mapping annotation (through Optional)."""
    while typing.get_origin(annotation) in (typing.Annotated, typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is dict:
        return args[1]
    return args[0] if args else None  # tuple[X, ...] and list[X]


def closest(key: str, choices: Iterable[str]) -> Optional[str]:
    """The choice ``key`` most likely misspells (case-insensitive), or None when none is close."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(key.lower(), sorted(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def _unknown_key(loc: tuple) -> str:
    model = _model_at(loc[:-1])
    if model is None:
        return "unknown field; remove it or fix its spelling (see docs/config-reference.md)"
    keys = [field.alias or name for name, field in model.model_fields.items()]
    if len(loc) >= 2 and loc[-2] in SOURCE_TYPES:  # a key of another source type: say which
        owners = [tag for tag in SOURCE_TYPES if tag != loc[-2] and any(
            (f.alias or n) == loc[-1] for n, f in SOURCE_CLASSES[tag].model_fields.items())]
        if owners:
            return f"a key of `type: {owners[0]}` sources; set `type: {owners[0]}` (this source is `{loc[-2]}`)"
    match = closest(str(loc[-1]), keys)
    if match:
        return f"unknown field; did you mean `{match}`?"
    return f"unknown field; remove it (valid keys here: {', '.join(keys)})"


def _message(item: dict) -> str:
    kind, ctx = item["type"], item.get("ctx") or {}
    if kind == "extra_forbidden":
        return _unknown_key(tuple(item["loc"]))
    if kind in _TYPE_FIX and kind != "missing":
        return _type_message(item)
    if kind in _TYPE_FIX:
        return _TYPE_FIX[kind]
    if kind == "union_tag_invalid":
        return f"'{ctx.get('tag', '')}' is not a source type; use one of {', '.join(SOURCE_TYPES)} (unset: hf)"
    if kind == "literal_error":
        return f"use one of {ctx.get('expected', '')}"
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        return f"must list at least {least} item{'s' if least != 1 else ''}; add {'one' if least == 1 else 'them'}"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"must be {words} {ctx.get(key)}"
    message = item["msg"]
    return message[len("Value error, "):] if message.startswith("Value error, ") else message


# Kubernetes' LabelSelector keys: our selectors are the label map itself (its matchLabels).
_SELECTOR_KEYS = ("matchLabels", "matchExpressions")


def _follows_from_another(item: dict, items: list[dict]) -> bool:
    """A list's "at least 1 item after validation" when its only items were refused: the items'
    own errors say what to fix; the list is not empty in the file."""
    if item["type"] != "too_short" or "after validation" not in item["msg"]:
        return False
    loc = tuple(item["loc"])
    return any(tuple(other["loc"])[:len(loc)] == loc and len(other["loc"]) > len(loc) for other in items)


def _selector_key(loc: tuple) -> Optional[str]:
    """The message for a Kubernetes selector's `matchLabels:`/`matchExpressions:` written under one
    of our selectors, which take the labels themselves."""
    if len(loc) < 2 or loc[-1] not in _SELECTOR_KEYS or loc[-2] not in ("namespaceSelector", "podSelector"):
        return None
    if loc[-1] == "matchExpressions":
        return (f"{loc[-2]} takes labels to match exactly (a Kubernetes selector's matchLabels), not "
                "expressions; write the labels directly under it, e.g. kubernetes.io/metadata.name: monitoring")
    return (f"{loc[-2]} is the label map itself (what a Kubernetes selector holds under matchLabels); "
            "remove the `matchLabels:` line and write its labels directly under " + str(loc[-2]))


def format_validation_error(error: ValidationError) -> list[str]:
    lines: list[str] = []
    items = error.errors()
    for item in items:
        if _follows_from_another(item, items):
            continue
        loc = _untagged(tuple(item["loc"]))
        selector = _selector_key(loc)
        if selector is not None:
            lines.append(f"{_join(*loc)}: {selector}")
            continue
        if item["type"] == "union_tag_invalid":
            loc += ("type",)
        where = _join(*loc)
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, Problems):
            lines.extend(f"{_join(where, problem.path)}: {problem.message}" for problem in cause.problems)
            continue
        lines.append(f"{where or '(stack)'}: {_message(item)}")
    return lines


