"""Declare one stack of every kind of child under Pulumi mocks and print what the engine would
record: each resource's name, type token and parent, and each dynamic resource's inputs (with
its pickled provider). Run from a checkout's root (``python <this file>``): it imports the
``components`` and ``providers`` found there, so the same script records an older checkout.

``state_compat_baseline.json`` is this script's output for commit 8485478 (the code deployed
stacks were created with); ``test_state_compat_unit.py`` compares the current code with it.
"""

from __future__ import annotations

import json
import os
import sys

# Run by path from a checkout's root: that checkout's packages, whichever commit it is.
sys.path.insert(0, os.getcwd())

import pulumi

from components.config import load_stack_config
from components.config.router import RouterConfig
from components.resources import Deploy, NimModel, Platform, RequestRouter, VllmModel

try:  # since the stack's one plan (issue 40); older checkouts declare each component by hand (below)
    from components.compile.plan import stack_plan
    from components.resources.stack import declare as declare_stack
except ImportError:
    stack_plan = None

STACK = {
    "cluster": {"kubeconfig": "/etc/llm/kubeconfig", "context": "gpu-cluster"},
    "platform": {"sharedMemorySizeLimit": "1Gi", "networkPolicy": {"enabled": True}},
    "models": [
        {"name": "alpha", "source": {"repo": "org/alpha"}, "resources": {"memory": "8Gi"}},
        {"name": "nimraw", "engine": "nim", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4",
         "source": {"repo": "org/raw"}, "resources": {"memory": "48Gi"}, "nim": {"authSecret": "ngc-api"}},
        {"name": "nimop", "engine": "nim", "path": "operator", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4",
         "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "resources": {"memory": "48Gi"},
         "nim": {"authSecret": "ngc-api"}},
    ],
    "router": {"image": "nvcr.io/nvidia/llm-request-router:0.6.0", "replicas": 3,
               "backendRouter": {"image": "nvcr.io/nvidia/llm-backend-router:0.6.0", "serviceMonitor": True},
               "tls": {"enabled": True}},
}


def stack_for_this_checkout() -> dict:
    """STACK as this checkout's config spells it. Since the router follows the request router's
    chart (issue 17), the ServiceMonitor setting covers router and backend router and lives under
    `router.metrics`; the baseline checkout reads the old spelling."""
    if "metrics" not in RouterConfig.model_fields:
        return STACK
    router = dict(STACK["router"])
    backend = dict(router["backendRouter"])
    router["metrics"] = {"serviceMonitor": backend.pop("serviceMonitor")}
    return {**STACK, "router": {**router, "backendRouter": backend}}


def record() -> dict:
    recorded: dict = {}

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args):
            outputs = dict(args.inputs)
            if args.typ.endswith("ModelStatus"):
                outputs.update(state="READY", message="serving", targets=[f"{args.name}-0"], ready_replicas=1)
            entry = {"type": args.typ}
            if args.typ.startswith("pulumi-python:dynamic"):
                entry["inputs"] = args.inputs
            recorded[args.name] = entry
            return [f"{args.name}-id", outputs]

        def call(self, args):
            return {}

    pulumi.runtime.set_mocks(Mocks(), preview=False)
    parents: dict = {}

    @pulumi.runtime.test
    def declare():
        stack = load_stack_config(stack_for_this_checkout())
        if stack_plan is not None:
            # This checkout declares one plan of the whole stack, as its program does.
            declared = declare_stack(stack_plan(stack))
            components = [*declared.servers.values(), declared.router]
            parents.update((c._name, c._type) for c in components)
            return pulumi.Output.all(*(c.urn for c in components))
        platform = Platform("platform", stack, None)
        deploy = Deploy(provider=None, cluster=stack.cluster, depends_on=platform.ready)
        models = {m.name: (NimModel if m.engine == "nim" else VllmModel)(m, stack, deploy) for m in stack.models}
        for name, component in models.items():
            parents[name] = component._type  # the component's type token is part of its children's URNs
        # The router's models in stack order (router.models narrows them), spelled out here
        # rather than imported: the function moved between checkouts this script records.
        fronted = [m.name for m in stack.models if stack.router.models is None or m.name in stack.router.models]
        router = RequestRouter(stack, deploy, fronts=[models[n] for n in fronted])
        parents[router._name] = router._type
        return pulumi.Output.all(*(c.urn for c in [*models.values(), router]))

    declare()
    return {"components": parents, "resources": recorded}


if __name__ == "__main__":
    json.dump(record(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
