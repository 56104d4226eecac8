"""What every typed argument shares (``Section``, the base of llm_serving/sections.py's generated
classes): its stack-config shape, and the values a program gives before they are known.

A section becomes the stack config's dict (camelCase keys, the fields given; the config model fills
the rest with its defaults) and is validated with the whole set, once, by the config model
(``llm_serving.stack_config_of``). What is refused here is only what the config model cannot be
shown: an argument of the wrong Python type (a section where another is expected, a command line
as one string, an Output where no Output is taken), as a TypeError naming the argument and never
repeating its value.

``pulumi.Input`` values (the namespace, images, stack secrets) may come from another resource.
Until they are known, each stands in the config as a placeholder of the right shape (``Inputs``):
the set is validated and compiled with it, and the declared objects take the Output wherever the
placeholder is written, so they depend on the resource it comes from. When the values are known
the set is validated again with them (llm_serving/inputs.py).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Optional

import pulumi
from pydantic import BaseModel


def is_output(value: Any) -> bool:
    """A value known later: a Pulumi Output, or any awaitable a ``pulumi.Input`` may be."""
    return isinstance(value, pulumi.Output) or inspect.isawaitable(value)


class Inputs:
    """The not-yet-known values of one set, each behind a placeholder that passes the config's
    check for its kind of field; ``placeholder`` returns the text written in the config instead."""

    # Shapes each kind's check accepts (a DNS label: a namespace or a Secret's name; an image with a
    # pinned tag); the number keeps placeholders apart, and the `-v` after it keeps one from being
    # the start of another (`...-1-v` is not in `...-10-v`).
    SHAPES = {"name": "llm-serving-input-{n}-v",
              "image": "input.llm-serving.invalid/placeholder-{n}-v:input-{n}-v"}

    def __init__(self) -> None:
        self.values: list[tuple[str, str, Any]] = []  # (placeholder, argument path, Output)

    def placeholder(self, kind: str, where: str, value: Any) -> str:
        text = self.SHAPES[kind].format(n=len(self.values))
        self.values.append((text, where, value))
        return text

    def __bool__(self) -> bool:
        return bool(self.values)


@dataclass(frozen=True)
class Section:
    """A stack-config section as typed arguments (subclasses: llm_serving/sections.py)."""

    config_model: ClassVar[type[BaseModel]]
    source_type: ClassVar[Optional[str]] = None  # a weight source's `type` tag
    input_fields: ClassVar[dict[str, str]] = {}  # field -> its kind (Inputs.SHAPES), for those taking a pulumi.Input
    text_lists: ClassVar[frozenset[str]] = frozenset()  # lists of strings (a command line, patterns)
    # Fields of a subclass that are not the config's (the library's earlier arguments).
    extra_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def section_types(cls) -> dict[str, tuple[type[Section], ...]]:
        """Field -> the sections it takes (a section, or a list of them)."""
        return {}

    def to_config(self, where: Optional[str] = None, inputs: Optional[Inputs] = None) -> dict:
        """The stack config's shape of these arguments (``where``: how a refusal names them, e.g.
        ``models[0].source``; ``inputs``: collects the values not known yet)."""
        where = where or type(self).__name__
        inputs = inputs if inputs is not None else Inputs()
        config: dict = {"type": self.source_type} if self.source_type else {}
        nested = self.section_types()
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in self.extra_fields or value is None:
                continue
            path = f"{where}.{item.name}"
            key = self.config_model.model_fields[item.name].alias or item.name
            if item.name in nested:
                config[key] = _sections(value, nested[item.name], path, inputs)
            elif item.name in self.text_lists:
                config[key] = text_list(value, path)
            elif is_output(value) or _holds_output(value):
                if item.name not in self.input_fields:
                    raise TypeError(f"{path}: a plain value, not a {type(value).__name__}: this argument is compiled "
                                    "into the objects before any resource exists; the namespace, images, "
                                    "stack secrets and Secrets' names take an Output")
                config[key] = inputs.placeholder(self.input_fields[item.name], path, value)
            else:
                config[key] = plain(value)
        return config


def _sections(value: Any, kinds: tuple[type[Section], ...], where: str, inputs: Inputs) -> Any:
    names = " or ".join(k.__name__ for k in kinds)
    if isinstance(value, kinds):
        return value.to_config(where, inputs)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = []
        for index, item in enumerate(value):
            if not isinstance(item, kinds):
                raise TypeError(f"{where}[{index}]: a {names}, not {type(item).__name__}")
            items.append(item.to_config(f"{where}[{index}]", inputs))
        return items
    if isinstance(value, Mapping) and any(k.__name__ == "LbAlgorithm" for k in kinds):
        return {key: _sections(v, kinds, f"{where}[{key!r}]", inputs) if isinstance(v, Section) else plain(v)
                for key, v in value.items()}
    raise TypeError(f"{where}: a {names}, not {type(value).__name__}")


def text_list(values: Any, where: str) -> list:
    if isinstance(values, (str, bytes)):
        # Never repeated: a command line written as one string is where a pasted token sits.
        raise TypeError(f"{where}: a list of strings, one item per word (e.g. ['--max-model-len', '4096']), not one "
                        "string; split it")
    if not isinstance(values, Sequence):
        raise TypeError(f"{where}: a list of strings, not {type(values).__name__}")
    return list(values)


def plain(value: Any) -> Any:
    """A value as the stack config holds it: enums by value, lists and mappings as such."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {key: plain(v) for key, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value


def _holds_output(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(is_output(v) or _holds_output(v) for v in value.values())
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return any(is_output(v) or _holds_output(v) for v in value)
    return False
