"""The stack's components, declared from its one plan (``components.compile.plan.StackPlan``):
the platform, one component per model (``VllmModel`` or ``NimModel``) and the router, in the
plan's order, each model and the router waiting on the platform, the router on the models it
fronts. The stack program (``__main__.py``) declares them at the top of its stack (the URNs
deployed stacks hold), ``llm_serving.ModelServing`` under itself, the component tests as either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import pulumi

from ..compile.plan import StackPlan
from .declare import Fill
from .model import Deploy, ModelServer, VllmModel
from .nim import NimModel
from .platform import Platform
from .router import RequestRouter

# A model's component by its engine: its type token is part of its children's URNs.
MODEL_COMPONENTS: dict[str, type[ModelServer]] = {"vllm": VllmModel, "nim": NimModel}


@dataclass(frozen=True)
class Declared:
    platform: Platform
    servers: dict[str, ModelServer]
    router: Optional[RequestRouter]


def declare(plan: StackPlan, *, platform_name: str = "platform",
            provider: Optional[pulumi.ProviderResource] = None,
            secret_values: Optional[Mapping[str, pulumi.Input[str]]] = None,
            parent: Optional[pulumi.Resource] = None, depends_on=None,
            kubeconfig_content: Optional[pulumi.Input[str]] = None, fill: Optional[Fill] = None) -> Declared:
    """``plan``'s components. ``provider``: the stack program's (``ModelServing`` passes none: its
    children inherit the caller's); ``secret_values``: the stack secrets' values (Platform);
    ``parent``, ``depends_on``: where the components go and what the platform's first objects wait
    on (a library user's Namespace); ``fill``: ``ModelServing``'s, what puts the values known at
    deployment into each manifest, props and output (llm_serving/inputs.py); None for the stack
    program, whose values are all known."""
    child = pulumi.ResourceOptions(parent=parent) if parent is not None else None
    platform_opts = (pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=depends_on))
                     if child is not None or depends_on else None)
    platform = Platform(platform_name, plan.platform, provider, platform_opts, rendering=plan.rendering,
                        secret_values=secret_values, kubeconfig_content=kubeconfig_content, fill=fill)
    deploy = Deploy(provider=provider, rendering=plan.rendering, depends_on=platform.ready,
                    kubeconfig_content=kubeconfig_content, fill=fill)
    # path raw: the vLLM objects with NIM's image and identity; path operator: NIMCache +
    # NIMService, after a check that the cluster has the operator's CRDs.
    servers = {model.name: MODEL_COMPONENTS[model.model.engine](model, deploy, child) for model in plan.models}
    router = None
    if plan.router is not None:
        # The router's pods start once the models it fronts are declared and ready to be routed to.
        router = RequestRouter(plan.router, deploy, fronts=[servers[n] for n in plan.router.fronts], opts=child)
    return Declared(platform, servers, router)
