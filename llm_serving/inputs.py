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

from components.compile.plan import Child, model_plan, platform_plan, router_plan
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


def plans(stack: StackConfig, platform_name: str) -> dict[tuple[str, int], Child]:
    """Every child the set declares, by (its component's name, its place in the plan), as
    llm_serving.serving.declare and the components declare them."""
    rendering = bool(stack.cluster.render_yaml_to_directory)
    owned = [(platform_name, platform_plan(stack)), *((m.name, model_plan(m, stack, stack.cluster)) for m in stack.models),
             *(((stack.router.name, router_plan(stack, stack.cluster)),) if stack.router is not None else ())]
    return {(owner, position): child for owner, plan in owned
            for position, (child, _) in enumerate(plan.declared(rendering))}


def _shape(child: Child) -> tuple:
    manifest = child.manifest or {}
    return child.role, manifest.get("apiVersion"), manifest.get("kind"), type(child.props).__name__


def known(inputs: Inputs, config: dict, stack: StackConfig, platform_name: str,
          problems_of: Callable[[StackConfig], list[str]]) -> pulumi.Output[dict]:
    """Once every value is known and the set is valid with them: ``real`` (placeholder -> value)
    and ``children`` (the set planned with them, by owner and place). Else the deployment fails
    with the arguments' paths, before any child is sent."""
    paths = ", ".join(where for _, where, _ in inputs.values)
    declared = plans(stack, platform_name)

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
        children = plans(resolved, platform_name)
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
