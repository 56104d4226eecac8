"""Arguments known only at deploy time (``pulumi.Input``: the namespace, images): the declared
objects take them where their placeholders are written, and the set is validated again once they
are known (llm_serving/section.py says how a placeholder stands in for one).

A value that changes what the set compiles to beyond its own text (an image whose tag names
another vLLM release line than the placeholder's, say) is refused when known: the objects were
declared from the placeholder's compilation, and the fix is to give that value as plain text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi

from components.compile.plan import compile_stack
from components.config import ConfigError, load_stack_config
from components.config.stack import StackConfig

from .section import Inputs


def replaced(value: Any, real: dict[str, str]) -> Any:
    """``value`` (a config or a manifest: dicts, lists, text) with each placeholder's real value."""
    if isinstance(value, str):
        for placeholder, text in real.items():
            value = value.replace(placeholder, text)
        return value
    if isinstance(value, dict):
        return {replaced(k, real): replaced(v, real) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(replaced(v, real) for v in value)
    return value


def known(inputs: Inputs, config: dict, stack: StackConfig,
          problems_of: Callable[[StackConfig], list[str]]) -> pulumi.Output[dict[str, str]]:
    """Placeholder -> its value, once every value is known and the set is valid with them (else the
    deployment fails with the arguments' paths, before any object that takes one is sent)."""

    def check(values: list[Any]) -> dict[str, str]:
        real: dict[str, str] = {}
        for (placeholder, where, _), value in zip(inputs.values, values, strict=True):
            if not isinstance(value, str):
                raise ValueError(f"invalid ModelServingArgs:\n  {where}: resolved to a {type(value).__name__}, not text")
            real[placeholder] = value
        try:
            resolved = load_stack_config(replaced(config, real))
        except ConfigError as error:
            raise ValueError("invalid ModelServingArgs (values known at deployment):\n"
                             + "\n".join(f"  {line}" for line in error.problems)) from None
        problems = problems_of(resolved)
        if problems:
            raise ValueError("invalid ModelServingArgs (values known at deployment):\n"
                             + "\n".join(f"  {p}" for p in problems))
        if compile_stack(resolved) != replaced(compile_stack(stack), real):
            paths = ", ".join(where for _, where, _ in inputs.values)
            raise ValueError(f"invalid ModelServingArgs:\n  {paths}: the value known at deployment changes more of the "
                             "objects than the text it is written in (an image's tag naming another vLLM release "
                             "line, say); give it as plain text, or set what it changes (vllmRelease) explicitly")
        return real

    return pulumi.Output.all(*(value for _, _, value in inputs.values)).apply(check)


def filler(inputs: Inputs, real: pulumi.Output[dict[str, str]]) -> Callable[[Any], Any]:
    """What the declare loop applies to each manifest and props: every text holding a placeholder
    becomes an Output of the real text (so its object depends on the value's resource, and on the
    check above); the rest is unchanged."""
    placeholders = [placeholder for placeholder, _, _ in inputs.values]

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            if any(p in value for p in placeholders):
                return real.apply(lambda values, text=value: replaced(text, values))
            return value
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [fill(v) for v in value]
        return value

    return fill
