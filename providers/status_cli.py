"""`python -m components status`: the same projection the providers use, live, for on-call."""

from __future__ import annotations

import json
import sys

from components.compile.common import ModelNames
from components.config.model import StackConfig

from . import kube
from .observe import ModelRef, current_status
from .projection import READY, Status, UNKNOWN


def model_refs(stack: StackConfig) -> list[ModelRef]:
    refs = []
    for model in stack.models:
        names = ModelNames.of(model)
        refs.append(ModelRef(
            namespace=stack.platform.namespace, model=model.name, deployment=names.server,
            service=names.service, puller_job=names.puller,
            pending_timeout_seconds=stack.platform.pending_timeout_seconds,
        ))
    return refs


def operator_props(stack: StackConfig) -> dict[str, dict]:
    """What the NIM operator-path status reads, per model (the objects are the operator's)."""
    from components.compile import nim

    props = {}
    for model in stack.models:
        if model.engine == "nim" and model.on_operator:
            names = nim.names(model, stack)
            props[model.name] = {
                "namespace": stack.platform.namespace, "model": model.name,
                "nim_service": names.service, "nim_cache": names.cache,
                "pending_timeout_seconds": stack.platform.pending_timeout_seconds,
            }
    return props


def collect(stack: StackConfig) -> list[tuple[str, Status]]:
    try:
        clients = kube.connect(kube.Target(stack.cluster.kubeconfig, stack.cluster.context))
    except Exception as error:  # noqa: BLE001 - no cluster config: every model is UNKNOWN
        unknown = Status(UNKNOWN, f"cluster not reachable: {error}", "no-cluster")
        return [(ref.model, unknown) for ref in model_refs(stack)]
    from .nim_status import current_nim_status

    on_operator = operator_props(stack)
    return [
        (ref.model, current_nim_status(clients, on_operator[ref.model]) if ref.model in on_operator
         else current_status(clients, ref))
        for ref in model_refs(stack)
    ]


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
