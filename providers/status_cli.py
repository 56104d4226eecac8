"""`python -m components status`: the same projection the providers use, live, for on-call."""

from __future__ import annotations

import json
import sys

from components.config.model import StackConfig

from . import kube
from .observe import current_status, observer_for
from .projection import READY, Status, UNKNOWN
from .props import ClusterTarget


def collect(stack: StackConfig) -> list[tuple[str, Status]]:
    """Each model's status, read by the observer its plan names (raw objects or operator CRs)."""
    from components.compile.plan import model_plan

    observers = [(model.name, observer_for(model_plan(model, stack).status)) for model in stack.models]
    try:
        clients = kube.connect(ClusterTarget.of(stack.cluster).kube())
    except Exception as error:  # noqa: BLE001 - no cluster config: every model is UNKNOWN
        unknown = Status(UNKNOWN, f"cluster not reachable: {error}", "no-cluster")
        return [(name, unknown) for name, _ in observers]
    return [(name, current_status(clients, observer)) for name, observer in observers]


def print_status(stack: StackConfig, as_json: bool = False, out=sys.stdout) -> int:
    rows = collect(stack)
    if as_json:
        json.dump({name: status.as_outputs() for name, status in rows}, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        width = max([len("MODEL")] + [len(name) for name, _ in rows])
        out.write(f"{'MODEL':<{width}}  {'STATE':<8}  {'READY':>5}  TARGETS  MESSAGE\n")
        for name, status in rows:
            out.write(f"{name:<{width}}  {status.state:<8}  {status.ready_replicas:>5}  "
                      f"{len(status.targets):>7}  {status.message}\n")
    # Exit 0 only when every model serves: scripts and probes can rely on it.
    return 0 if rows and all(status.state == READY for _, status in rows) else 3


def print_router_targets(stack: StackConfig, as_json: bool = False, out=sys.stdout) -> int:
    """What the router forwards to now, per fronted model: the backend router's computation
    over the models' EndpointSlices. Exit 0 when every fronted model has a target, else 3."""
    from components.compile.router import fronted_services

    from .router_targets import read_router_targets

    if stack.router is None:
        raise SystemExit("the stack declares no router (llm-serving:router): nothing to report")
    services = fronted_services(stack)
    clients = kube.connect(ClusterTarget.of(stack.cluster).kube())
    targets = read_router_targets(clients, stack.platform.namespace, services)
    if as_json:
        json.dump({"router": stack.router.name, **targets.as_outputs()}, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        out.write(f"router {stack.router.name}: {targets.count} target(s), revision {targets.revision}\n")
        width = max([len("MODEL")] + [len(name) for name in services])
        out.write(f"{'MODEL':<{width}}  TARGETS\n")
        for model in services:
            pods = targets.by_model[model].pods
            out.write(f"{model:<{width}}  {', '.join(pods) if pods else '(none)'}\n")
    return 0 if services and all(targets.by_model[m].targets for m in services) else 3
