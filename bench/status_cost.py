"""Kubernetes API calls of the status projection, counted with providers.kube.Clients.calls
against the live cluster (the same code the ModelStatus provider and `components status` run)."""

from __future__ import annotations

import os

from cluster import small_model, stack_config

from components.compile.common import ModelNames
from components.config import load_stack_config
from providers import kube
from providers.observe import ModelRef, current_status
from providers.status import wait_until_serving


def _names(model: str):
    return ModelNames.of(load_stack_config(stack_config("bench", [small_model(model)])).models[0])


def _clients():
    return kube.connect(kube.Target(os.environ.get("KUBECONFIG")))


def count_projection(namespace: str, model: str) -> dict:
    """One `current_status` of one model: API calls made, and what it said."""
    names = _names(model)
    clients = _clients()
    ref = ModelRef(namespace=namespace, model=model, deployment=names.server, service=names.service,
                   puller_job=names.puller, pending_timeout_seconds=60)
    clients.calls = 0
    status = current_status(clients, ref)
    return {"calls": clients.calls, "state": status.state, "reason": status.reason,
            "ready_replicas": status.ready_replicas, "targets": len(status.targets or [])}


def count_ready_wait(namespace: str, model: str) -> dict:
    """ModelStatus.create on a model that is already serving: the calls of its one poll."""
    names = _names(model)
    clients = _clients()
    props = {"namespace": namespace, "model": model, "deployment": names.server, "service": names.service,
             "puller_job": names.puller, "ready_timeout_seconds": 30, "pending_timeout_seconds": 60}
    clients.calls = 0
    status = wait_until_serving(props, connect=lambda _target: clients)
    return {"calls": clients.calls, "state": status.state}
