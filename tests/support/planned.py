"""The compiled objects in the order `up` declares them and `render` writes them: read from the
plans (components.compile.plan), the one order there is. The compilers' result types (the
router's, the gateway's, a model's manifests) hold objects by name and have no order of their own.
"""

from __future__ import annotations

from components.compile.gateway import compile_gateway
from components.compile.plan import gateway_plan, model_plan, router_plan
from components.config.model import ModelConfig
from components.config.stack import StackConfig


def gateway_objects(stack: StackConfig) -> list[dict]:
    """The gateway's objects (router.gateway), in the router plan's order."""
    return [c.manifest for c in gateway_plan(compile_gateway(stack)) if c.manifest is not None]


def router_objects(stack: StackConfig) -> list[dict]:
    """The router's own objects (not the gateway's), in its plan's order."""
    gateway = {c.role for c in gateway_plan(compile_gateway(stack))}
    return [c.manifest for c in router_plan(stack).children if c.manifest is not None and c.role not in gateway]


def model_objects(model: ModelConfig, stack: StackConfig) -> list[dict]:
    """One model's objects (and its next revision's), in its plan's order."""
    return [c.manifest for c in model_plan(model, stack).children if c.manifest is not None]
