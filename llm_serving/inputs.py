"""Arguments known only at deployment (``pulumi.Input``: the namespace, images, Secrets' names).

The set is declared from its plans compiled with placeholders (llm_serving/section.py), which fix
its children, their logical names and their order. Once the values are known, the set is
validated again with them and planned again, and each child takes its manifest or props from the
child at its place in that plan (so a hash of a config that names the namespace, a puller Job
whose name hashes its source's Secret, or what an image's tag implies, is the real value's).
Every child then waits for the values: until they are known, a preview shows their content as
unknown. A plan with other children than the placeholders' (another kind at a place, one more or
less) is refused with the arguments' paths: give those values as text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
from pydantic import BaseModel

from components.compile.plan import Child, StackPlan, stack_plan
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


def with_real(value: Any, real: dict[str, str]) -> Any:
    """``replaced`` for the config's own objects too: a section (pydantic) with each placeholder in
    its fields replaced, copied as the preflight copies it (no validator runs again)."""
    if isinstance(value, BaseModel):
        update = {name: with_real(getattr(value, name), real) for name in type(value).model_fields}
        changed = {name: new for name, new in update.items() if new is not getattr(value, name)}
        return value.model_copy(update=changed) if changed else value
    if isinstance(value, (list, tuple)):
        items = [with_real(v, real) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
    if isinstance(value, dict):
        return {with_real(k, real): with_real(v, real) for k, v in value.items()}
    if isinstance(value, str):
        return replaced(value, real)
    return value


def carried(given: StackConfig, decided: StackConfig) -> Callable[[StackConfig, dict[str, str]], StackConfig]:
    """What a step between validating and declaring decided per model (the preflight: a revision
    pinned to a commit, an S3 listing, an adapter's commit), as a function that puts it onto the
    stack validated again with the real values. Validating the arguments again starts from what
    the program gave; without this, the set deployed would be the one before the preflight."""
    decisions = [{name: getattr(after, name) for name in type(after).model_fields
                  if getattr(after, name) != getattr(before, name)}
                 for before, after in zip(given.models, decided.models, strict=True)]

    def carry(resolved: StackConfig, real: dict[str, str]) -> StackConfig:
        models = tuple(model.model_copy(update={name: with_real(value, real) for name, value in fields.items()})
                       if fields else model for model, fields in zip(resolved.models, decisions, strict=True))
        return resolved.model_copy(update={"models": models})

    return carry


def plans(plan: StackPlan, platform_name: str) -> dict[tuple[str, int], Child]:
    """Every child the set declares, by (its component's name, its place in the plan), as
    components.resources.stack.declare and the components declare them."""
    owners = (platform_name, *(model.name for model in plan.models), *((plan.router.name,) if plan.router else ()))
    return {(owner, position): child for owner, component in zip(owners, plan.plans, strict=True)
            for position, (child, _) in enumerate(component.declared(plan.rendering))}


def _shape(child: Child) -> tuple:
    manifest = child.manifest or {}
    return child.role, manifest.get("apiVersion"), manifest.get("kind"), type(child.props).__name__


def known(inputs: Inputs, config: dict, plan: StackPlan, platform_name: str,
          problems_of: Callable[[StackConfig], list[str]],
          carry: Callable[[StackConfig, dict[str, str]], StackConfig] = lambda stack, real: stack,
          ) -> pulumi.Output[dict]:
    """``plan``: the set as declared, planned with the placeholders. Once every value is known and
    the set is valid with them: ``real`` (placeholder -> value)
    and ``children`` (the set planned with them, by owner and place; ``carry`` puts onto it what
    was decided after validation, as ``carried`` makes it). Else the deployment fails with the
    arguments' paths, before any child is sent."""
    paths = ", ".join(where for _, where, _ in inputs.values)
    declared = plans(plan, platform_name)

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
        children = plans(stack_plan(carry(resolved, real)), platform_name)
        differs = sorted(f"{owner}: {(children.get((owner, at)) or declared[(owner, at)]).role}"
                         for owner, at in set(children) | set(declared)
                         if (owner, at) not in children or (owner, at) not in declared
                         or _shape(children[(owner, at)]) != _shape(declared[(owner, at)]))
        if differs:
            raise ValueError(f"invalid ModelServingArgs:\n  {paths}: the values known at deployment make other objects "
                             f"than the ones declared before they were known ({', '.join(differs[:3])}); give them as "
                             "plain text")
        return {"real": real, "children": children}

    return pulumi.Output.all(*(value for _, _, value in inputs.values)).apply(check)


def _holds_output(value: Any) -> bool:
    if isinstance(value, pulumi.Output):
        return True
    if isinstance(value, dict):
        return any(_holds_output(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_output(v) for v in value)
    return False


def filler(inputs: Inputs, known_values: pulumi.Output[dict]) -> Callable[[Any, Any], Any]:
    """What the declare loop applies to each child's manifest or props, and the components to their
    outputs. A child takes each top-level field from the child at its place in the set planned
    with the real values (an Output: the object depends on the values' resources and on the
    check above), except a field already holding an Output (a stack secret's value, a cluster's
    kubeconfig, the router's fronted targets), which keeps it. An output's text that holds a
    placeholder becomes an Output of the real text."""
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

    def real_field(known: dict, at: tuple[str, int], name: str, original: Any) -> Any:
        child = known["children"][at]
        fields = child.manifest if child.manifest is not None else child.props.to_dict()
        return fields[name] if name in fields else replaced(original, known["real"])

    def fill(value: Any, at: Any = None) -> Any:
        if at is None or not isinstance(value, dict):
            return text(value)
        return {name: original if name in ("apiVersion", "kind") or _holds_output(original)
                else known_values.apply(lambda known, name=name, original=original: real_field(known, at, name, original))
                for name, original in value.items()}

    return fill
