"""`python -m components status`: the same projection the providers use, live, for on-call."""

from __future__ import annotations

import json
import sys

from contract.props import ClusterTarget
from providers import kube
from providers.observe import current_status, observer_for
from providers.projection import READY, SCALED_TO_ZERO, UNKNOWN, Status, asleep

from .compile.plan import stack_plan
from .config.stack import StackConfig


def collect(stack: StackConfig) -> list[tuple[str, Status]]:
    """Each model's status (and its next revision's), read by the observer its plan names (raw
    objects or operator CRs)."""
    plans = [status for model in stack_plan(stack).models for status in model.statuses]
    observers = [(name, observer_for(props), props.min_replicas) for name, props in plans]
    try:
        clients = kube.connect(ClusterTarget.of(stack.cluster).kube())
    except Exception as error:  # noqa: BLE001 - no cluster config: every model is UNKNOWN
        unknown = Status(UNKNOWN, f"cluster not reachable: {error}", "no-cluster")
        return [(name, unknown) for name, _, _ in observers]
    return [(name, asleep(current_status(clients, observer), floor)) for name, observer, floor in observers]


def print_status(stack: StackConfig, as_json: bool = False, out=sys.stdout) -> int:
    rows = collect(stack)
    if as_json:
        json.dump({name: status.as_outputs() for name, status in rows}, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        width = max([len("MODEL")] + [len(name) for name, _ in rows])
        out.write(f"{'MODEL':<{width}}  {'STATE':<14}  {'READY':>5}  TARGETS  MESSAGE\n")
        for name, status in rows:
            out.write(f"{name:<{width}}  {status.state:<14}  {status.ready_replicas:>5}  "
                      f"{len(status.targets):>7}  {status.message}\n")
    # Exit 0 only when every model serves or sleeps as configured: scripts and probes can rely on it.
    return 0 if rows and all(status.state in (READY, SCALED_TO_ZERO) for _, status in rows) else 3
