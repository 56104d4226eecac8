"""RouterTargets: what the request router can reach, recorded in the stack and re-read on refresh.

Computed under the upstream rules (``contract.targets``): the router pods are the ready, not
terminating endpoints of the router's headless Service that carry the named grpc/TCP and quic/UDP
ports (as the backend router reads them, by ``targetRef.name``); a fronted model counts a pod when
the pod is a ready endpoint of the model's Service and its ``pylon`` sidecar is ready, the
observable proxy for "a pylon registered this model" (the router's registrations are in its
memory, not in the API). Two list calls, whatever the number of models: EndpointSlices (one
set-based selector on ``kubernetes.io/service-name`` for the headless and every model Service)
and the namespace's pods.

create / update do not wait: the router is declared after the models it fronts, and each of
those already waited for its rollout (``ModelStatus``), and their recorded targets are inputs here,
so a re-recorded model status re-reads the router's view in the same `up`. read (`pulumi
refresh`) re-reads into the stack state; a failed read records the error, never a guess.

Props: ``router`` (name), ``namespace``, ``services`` (model -> Service), optional
``router_service`` (the headless Service; default ``<router>-headless``), cluster access.

Pickled into the stack's state: no import-time side effects, clients built inside methods.
"""

from __future__ import annotations

from typing import Optional

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from contract.names import headless_service_name
from contract.props import kube_target
from contract.targets import SERVICE_NAME_LABEL, RouterTargets, router_targets

from . import kube
from .inputs import changed_inputs, inputs_only, now

OUTPUT_KEYS = ("targets", "observed_at", "error")


def service_selector(services: dict[str, str], router_service: Optional[str] = None) -> str:
    names = set(services.values()) | ({router_service} if router_service else set())
    return f"{SERVICE_NAME_LABEL} in ({','.join(sorted(names))})"


def read_router_targets(clients: kube.Clients, namespace: str, services: dict[str, str],
                        router_service: Optional[str] = None) -> RouterTargets:
    if not services and not router_service:
        return router_targets({}, [], [], router_service)
    listing = kube.call(clients, clients.discovery.list_namespaced_endpoint_slice, namespace,
                        label_selector=service_selector(services, router_service))
    pods = kube.call(clients, clients.core.list_namespaced_pod, namespace)
    return router_targets(services, [kube.to_dict(clients, s) for s in listing.items],
                          [kube.to_dict(clients, p) for p in pods.items], router_service)


def _router_service(props: dict) -> str:
    return props.get("router_service") or headless_service_name(props["router"])


def _observe(props: dict, connect=kube.connect) -> dict:
    clients = connect(kube_target(props))
    targets = read_router_targets(clients, props["namespace"], dict(props.get("services") or {}),
                                  _router_service(props))
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
