"""Kubernetes API calls of the status projection, counted with providers.kube.Clients.calls
against the live cluster (the same code the ModelStatus provider and `components status` run)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from components.compile.plan import stack_plan
from components.config import load_stack_config, read_stack_file
from contract.props import StatusProps
from providers import kube
from providers.observe import current_status, observer_for
from providers.status import wait_until_serving


def status_props(stack_file: Path, model: str) -> StatusProps:
    """What the model's ModelStatus reads, from the plan of the stack `up` deployed (the objects'
    names as `up` declared them: a renamed child, such as the puller Job named after its source
    and pod template, follows on its own)."""
    stack = load_stack_config(read_stack_file(stack_file))
    return stack_plan(stack).model(model).status


def _clients():
    return kube.connect(kube.Target(os.environ.get("KUBECONFIG")))


def count_projection(stack_file: Path, model: str) -> dict:
    """One `current_status` of one model: API calls made, and what it said."""
    props = replace(status_props(stack_file, model), pending_timeout_seconds=60)
    clients = _clients()
    clients.calls = 0
    status = current_status(clients, observer_for(props))
    return {"calls": clients.calls, "state": status.state, "reason": status.reason,
            "ready_replicas": status.ready_replicas, "targets": len(status.targets or [])}


def count_ready_wait(stack_file: Path, model: str) -> dict:
    """ModelStatus.create on a model that is already serving: the calls of its one poll."""
    props = replace(status_props(stack_file, model), ready_timeout_seconds=30, pending_timeout_seconds=60)
    clients = _clients()
    clients.calls = 0
    status = wait_until_serving(props, connect=lambda _target: clients)
    return {"calls": clients.calls, "state": status.state}
