"""`python -m components targets`: what the request router can reach, live, for on-call.

The same reading the deployed ``RouterTargets`` provider records (``providers.router_targets``).
"""

from __future__ import annotations

import json
import sys

from providers import kube
from providers.router_targets import read_router_targets

from .compile.router import compile_router, fronted_services


def print_router_targets(stack, as_json: bool = False, out=None) -> int:
    """`python -m components targets`: the topology, the router pods, and per fronted model the
    pods whose pylon is ready. Exit 0 when there is a router pod and every fronted model has a
    pod, else 3."""
    out = out or sys.stdout
    if stack.router is None:
        raise SystemExit("the stack declares no router (llm-serving:router): nothing to report")
    manifests = compile_router(stack)
    topology, headless = manifests.topology, manifests.names.headless
    services = fronted_services(stack)
    clients = kube.connect(kube.Target(stack.cluster.kubeconfig, stack.cluster.context))
    targets = read_router_targets(clients, stack.platform.namespace, services, headless)
    report = {"router": stack.router.name, "topology": topology.reason, **targets.as_outputs()}
    if as_json:
        json.dump(report, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        out.write(f"router {stack.router.name}: {topology.reason}\n")
        routers = targets.routers.pods
        out.write(f"router pods ({headless}): {', '.join(routers) if routers else '(none)'}\n")
        out.write(f"{targets.count} model target(s), revision {targets.revision}\n")
        width = max([len("MODEL")] + [len(name) for name in services])
        out.write(f"{'MODEL':<{width}}  PODS WITH A READY PYLON\n")
        for model in services:
            pods = targets.by_model[model].pods
            out.write(f"{model:<{width}}  {', '.join(pods) if pods else '(none)'}\n")
    return 0 if targets.reachable else 3
