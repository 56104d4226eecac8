"""Arguments known only at deployment (``pulumi.Input``: the namespace, images, Secrets' names).

The set is declared from its compilation with placeholders (llm_serving/section.py), which fixes
its objects, their names and their order. Once the values are known, the set is validated again
with them and compiled again, and each object takes its content from that compilation (so a
hash of a config that names the namespace, or what an image's tag implies, is the real value's).
Every object then waits for the values: until they are known, a preview shows the objects'
content as unknown. An object the placeholders would not have declared, or one they declared
that the real values do not, is refused with the arguments' paths: give those values as text.
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


def _key(manifest: dict) -> tuple:
    metadata = manifest.get("metadata") or {}
    return manifest.get("apiVersion"), manifest.get("kind"), metadata.get("namespace"), metadata.get("name")


def known(inputs: Inputs, config: dict, stack: StackConfig,
          problems_of: Callable[[StackConfig], list[str]]) -> pulumi.Output[dict]:
    """Once every value is known and the set is valid with them: ``real`` (placeholder -> value)
    and ``objects`` (the set compiled with them, by kind and name). Else the deployment fails with
    the arguments' paths, before any object that holds a placeholder is sent."""
    paths = ", ".join(where for _, where, _ in inputs.values)

    def check(values: list[Any]) -> dict:
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
        compiled = compile_stack(resolved)
        declared = [replaced(m, real) for m in compile_stack(stack)]
        shapes = [(_key(m), sorted(m)) for m in compiled]
        if shapes != [(_key(m), sorted(m)) for m in declared]:
            differs = next((f"{a[0][1]} {a[0][3]}" for a, b in zip(shapes, [(_key(m), sorted(m)) for m in declared],
                                                                    strict=False) if a != b), "the last object")
            raise ValueError(f"invalid ModelServingArgs:\n  {paths}: the values known at deployment make another set of "
                             f"objects than the one declared before they were known ({differs}); give them as "
                             "plain text")
        return {"real": real, "objects": {_key(m): m for m in compiled}}

    return pulumi.Output.all(*(value for _, _, value in inputs.values)).apply(check)


def filler(inputs: Inputs, known_values: pulumi.Output[dict]) -> Callable[[Any], Any]:
    """What the declare loop applies to each manifest, props and output: a manifest takes each
    top-level field from the set compiled with the real values (an Output, so the object depends
    on the values' resources and on the check above); any other text that holds a placeholder
    becomes an Output of the real text; the rest is unchanged."""
    placeholders = [placeholder for placeholder, _, _ in inputs.values]

    def text(value: Any) -> Any:
        if isinstance(value, str):
            if any(p in value for p in placeholders):
                return known_values.apply(lambda known, text=value: replaced(text, known["real"]))
            return value
        if isinstance(value, dict):
            return {k: text(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [text(v) for v in value]
        return value

    def manifest(value: dict) -> dict:
        def field(known: dict, name: str, original: Any) -> Any:
            key = _key(replaced({k: value[k] for k in ("apiVersion", "kind", "metadata")}, known["real"]))
            compiled = known["objects"].get(key, {})
            # A field (or object) the compilation does not write: a stack secret's value, added at
            # declaration, with the real values in its text.
            return compiled[name] if name in compiled else replaced(original, known["real"])

        return {name: original if name in ("apiVersion", "kind")
                else known_values.apply(lambda known, name=name, original=original: field(known, name, original))
                for name, original in value.items()}

    def fill(value: Any) -> Any:
        # Every object, not only those that write a placeholder: a value may change an object that
        # does not hold it (a platform image's line picks a CPU model's image).
        if isinstance(value, dict) and {"apiVersion", "kind", "metadata"} <= set(value):
            return manifest(value)
        return text(value)

    return fill
