"""RouterTargets: what the request router forwards to, recorded in the stack and re-read on refresh.

The targets are computed exactly as the backend router computes them (``components.targets``)
from the EndpointSlices of the fronted models' Services: one list call for all of them
(a set-based selector on ``kubernetes.io/service-name``), whatever the number of models.

create / update do not wait: the router is declared after the models it fronts, and each of
those already waited for its rollout (``ModelStatus``), and their recorded targets are inputs here,
so a re-recorded model status re-reads the router's view in the same `up`. read (`pulumi
refresh`) re-reads into the stack state; a failed read records the error, never a guess.

Pickled into the stack's state: no import-time side effects, clients built inside methods.
"""

from __future__ import annotations

from typing import Optional

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from . import kube
from .inputs import changed_inputs, inputs_only, now
from .props import kube_target

OUTPUT_KEYS = ("targets", "observed_at", "error")


def service_selector(services: dict[str, str]) -> str:
    from components.targets import SERVICE_NAME_LABEL

    return f"{SERVICE_NAME_LABEL} in ({','.join(sorted(set(services.values())))})"


def read_router_targets(clients: kube.Clients, namespace: str, services: dict[str, str]):
    from components.targets import router_targets

    if not services:
        return router_targets({}, [])
    listing = kube.call(clients, clients.discovery.list_namespaced_endpoint_slice, namespace,
                        label_selector=service_selector(services))
    return router_targets(services, [kube.to_dict(clients, s) for s in listing.items])


def _observe(props: dict, connect=kube.connect) -> dict:
    clients = connect(kube_target(props))
    targets = read_router_targets(clients, props["namespace"], dict(props.get("services") or {}))
    return {"targets": targets.as_outputs(), "error": ""}


def _outputs(inputs: dict, observed: dict) -> dict:
    return {**inputs, **observed, "observed_at": now()}


class RouterTargetsProvider(ResourceProvider):
    serialize_as_secret_always = False

    def __init__(self, connect: Optional[object] = None):
        # Tests hand in a fake; the deployed provider connects from its props.
        self._connect = connect

    def _read(self, props: dict) -> dict:
        return _observe(props, self._connect or kube.connect)

    def create(self, props: dict) -> CreateResult:
        return CreateResult(f"{props['namespace']}/{props['router']}", _outputs(props, self._read(props)))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        changed = changed_inputs(olds, news)
        return DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(_outputs(news, self._read(news)))

    def read(self, id_: str, props: dict) -> ReadResult:
        inputs = inputs_only(props, OUTPUT_KEYS)
        try:
            observed = self._read(inputs)
        except Exception as error:  # noqa: BLE001 - refresh reports, it does not guess
            observed = {"targets": None, "error": f"targets could not be read this time: {error}"}
        return ReadResult(id_, _outputs(inputs, observed), inputs)

    def delete(self, _id: str, _props: dict) -> None:
        return None
