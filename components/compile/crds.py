"""Every other operator's custom resource a stack's objects need, in one list, for the platform's
check (``Platform``): the first check of a stack, on which every model and the router wait. Each
setting's own check stays beside its objects, but each is a resource of its own and the engine
stops the preview at the first that fails, so a cluster missing several operators was told one
per run. The platform's names every one at once, each with the setting that needs it and the fix
(providers/crd_check.py ``missing_message``)."""

from __future__ import annotations

from contract.props import NIM_OPERATOR_FIX

from ..config.stack import StackConfig
from . import autoscaling, metrics, nim
from .gateway import compile_gateway
from .gateway import required_crds as gateway_required_crds
from .router import compile_router, required_crds


def stack_required_crds(stack: StackConfig) -> list[dict]:
    """``providers.crd_check`` requirements, each ``field`` saying whose setting it is in the words
    of that setting's own check (``model tiny: autoscaling.enabled``)."""
    requirements = list(metrics.required_crds(stack))
    for model in stack.models:
        requirements += [{**r, "field": f"model {model.name}: {r['field']}"} for r in autoscaling.required_crds(model)]
        if model.on_operator:
            requirements.append({"field": f"model {model.name} uses path: operator", "crds": list(nim.CRD_NAMES),
                                 "version": nim.VERSION, "fix": NIM_OPERATOR_FIX})
    if stack.router is not None:
        owner = f"router {stack.router.name}"
        listed = {(r["field"], tuple(r["crds"])) for r in requirements}
        # The gateway's monitor follows platform.metrics: that line already says it.
        requirements += [{**r, "field": f"{owner}: {r['field']}"}
                         for r in required_crds(compile_router(stack)) + gateway_required_crds(compile_gateway(stack))
                         if (r["field"], tuple(r["crds"])) not in listed]
    return requirements
