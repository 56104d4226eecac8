"""Operator-path NIM models: the CRD preflight and the status wait.

NimOperatorCheck (declared before the NIMCache, so before anything NIM-specific reaches the
cluster): reads the operator's CRDs by name through the apiextensions API. Missing ones fail the
preview (``check``) and the update (``create``) with a message that names them and says how to
install the operator or switch to ``path: raw``. Only operator-path models declare it: a vLLM or
raw-path stack never needs the CRDs.

NimStatusProvider (behind ``ModelStatus``, as for the raw path): waits until the NIMService is
READY or stops at the first ERROR, with the cache's or the pods' evidence; ``read`` re-projects.

Pickled into the stack's state: no import-time side effects, clients built inside methods, every
API call through ``kube.call`` (bounded retries).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from . import kube
from .crd_check import CrdsMissing, RequiredCrdsProvider, apiextensions
from .failures import Reported, reported
from .nim_projection import NimObservation, crd_missing_message, project_nim_status
from .projection import ERROR, READY, RETRYING_REASONS, UNKNOWN, Observation, Status

GROUP, VERSION = "apps.nvidia.com", "v1alpha1"
CRD_NAMES = ("nimcaches.apps.nvidia.com", "nimservices.apps.nvidia.com")
STATUS_KEYS = ("state", "message", "reason", "details", "ready_replicas", "targets", "observed_at")
SERVER_COMPONENT = "server"


class NimOperatorMissing(CrdsMissing):
    """The cluster cannot serve operator-path NIM models; the message says what to do."""


class NimModelNotServing(Reported):
    """An operator-path NIM model did not reach READY; the message says why."""


def _target(props: dict) -> kube.Target:
    return kube.Target(props.get("kubeconfig") or None, props.get("context") or None)


# --- preflight ------------------------------------------------------------------------------

def missing_crds(clients: kube.Clients, api: Any, names: tuple[str, ...] = CRD_NAMES) -> list[str]:
    """CRDs of ``names`` that the cluster does not have (or that do not serve v1alpha1).

    404 means missing; any other failure to read (403, unreachable) is raised: it proves nothing.
    """
    from .crd_check import missing_crds as missing_of

    return missing_of(clients, api, [(name, VERSION) for name in names])


def check_operator(props: dict, connect: Optional[Callable[[kube.Target], kube.Clients]] = None,
                   api_for: Optional[Callable[[kube.Clients], Any]] = None) -> None:
    clients = (connect or kube.connect)(_target(props))
    api = (api_for or apiextensions)(clients)
    missing = missing_crds(clients, api, tuple(props.get("crds") or CRD_NAMES))
    if missing:
        raise NimOperatorMissing(crd_missing_message(props.get("model", "?"), missing))


class NimOperatorCheckProvider(RequiredCrdsProvider):
    """``RequiredCrdsProvider`` for the NIM operator's CRDs, with the NIM install instructions.
    Runs during preview too, so a missing operator stops `pulumi preview` before the Kubernetes
    provider reports an unknown kind. No state on the instance: it is pickled into the state."""

    failure_property = "crds"

    def _check(self, props: dict) -> None:
        check_operator(props, self._connect)

    def _resource_id(self, props: dict) -> str:
        return f"{props['model']}-nim-operator"


class NimOperatorCheck(Resource, module="llm-serving", name="NimOperatorCheck"):
    """Stands once the cluster serves the NIM operator's CRDs."""

    checked_at: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], provider: ResourceProvider,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(provider, name, {**props, "checked_at": None}, opts)


# --- status ---------------------------------------------------------------------------------

def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _as_server_pod(pod: dict) -> dict:
    """The operator's pods, labelled as server pods for the shared diagnostics (copy, not edit)."""
    meta = dict(pod.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), "app.kubernetes.io/component": SERVER_COMPONENT}
    return {**pod, "metadata": meta}


def _read_custom(clients: kube.Clients, plural: str, namespace: str, name: str) -> Optional[dict]:
    from .observe import read_optional

    return read_optional(clients, clients.custom.get_namespaced_custom_object, GROUP, VERSION,
                         namespace, plural, name)


def observe_nim(clients: kube.Clients, props: dict, now: Optional[datetime] = None) -> NimObservation:
    from .observe import read_optional
    from .status import restart_threshold

    namespace, service = props["namespace"], props["nim_service"]
    core = Observation(model=props["model"], now=now or datetime.now(timezone.utc),
                       pending_timeout_seconds=int(props.get("pending_timeout_seconds") or 900),
                       restart_threshold=restart_threshold(props))
    obs = NimObservation(model=props["model"], service_name=service, cache_name=props["nim_cache"], core=core)
    obs.cache = _read_custom(clients, "nimcaches", namespace, props["nim_cache"])
    obs.service = _read_custom(clients, "nimservices", namespace, service)
    if obs.service is None:
        return obs
    # The operator names its Deployment and Service after the NIMService and selects pods by `app`.
    core.deployment = read_optional(clients, clients.apps.read_namespaced_deployment, service, namespace)
    pods = kube.call(clients, clients.core.list_namespaced_pod, namespace, label_selector=f"app={service}")
    core.pods = [_as_server_pod(kube.to_dict(clients, p)) for p in pods.items]
    slices = kube.call(clients, clients.discovery.list_namespaced_endpoint_slice, namespace,
                       label_selector=f"kubernetes.io/service-name={service}")
    core.endpoint_slices = [kube.to_dict(clients, s) for s in slices.items]
    return obs


def current_nim_status(clients: kube.Clients, props: dict, now: Optional[datetime] = None) -> Status:
    """The model's status now; UNKNOWN (never a guess) when the cluster cannot be read."""
    from .observe import add_evidence

    try:
        obs = observe_nim(clients, props, now)
        status = project_nim_status(obs)
        if (status.state == ERROR or status.reason in RETRYING_REASONS) and status.pod:
            add_evidence(clients, props["namespace"], obs.core, status.pod)
            status = project_nim_status(obs)
        return status
    except Exception as error:  # noqa: BLE001 - any failure to read is UNKNOWN
        return Status(UNKNOWN, f"status could not be read this time: {type(error).__name__}: {str(error)[:300]}",
                      "read-failed")


def wait_until_serving(props: dict, sleep=time.sleep, clock=time.monotonic, connect=None) -> Status:
    from .status import describe, rollout_complete

    clients = (connect or kube.connect)(_target(props))
    deadline = clock() + float(props.get("ready_timeout_seconds") or 1800)
    poll = float(props.get("poll_seconds") or 2.0)
    status = Status(UNKNOWN, "not read yet", "not-read")
    while clock() <= deadline:
        status = current_nim_status(clients, props)
        if status.state == ERROR:
            raise NimModelNotServing(describe(props["model"], status))
        if status.state == READY:
            # Old pods stay routable while the operator rolls a changed spec out: wait for it.
            try:
                deployment = observe_nim(clients, props).core.deployment
            except Exception:  # noqa: BLE001 - a failed read is retried until the deadline
                deployment = None
            if rollout_complete(deployment):
                return status
            status = Status(status.state, status.message + " (rollout in progress)", "rolling-out",
                            status.details, status.ready_replicas, status.targets)
        sleep(poll)
    raise NimModelNotServing(
        f"model {props['model']} not serving after {props.get('ready_timeout_seconds')}s: "
        f"{status.state}: {status.message}"
    )


def status_outputs(props: dict, status: Status) -> dict:
    return {**props, **status.as_outputs(), "observed_at": _now()}


class NimStatusProvider(ResourceProvider):
    serialize_as_secret_always = False

    @reported
    def create(self, props: dict) -> CreateResult:
        status = wait_until_serving(props)
        return CreateResult(f"{props['namespace']}/{props['model']}", status_outputs(props, status))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        from .status import status_diff

        return status_diff(olds, news)

    @reported
    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(status_outputs(news, wait_until_serving(news)))

    def read(self, id_: str, props: dict) -> ReadResult:
        inputs = {k: v for k, v in props.items() if k not in STATUS_KEYS}
        try:
            status = current_nim_status(kube.connect(_target(props)), props)
        except Exception as error:  # noqa: BLE001 - refresh reports, it does not guess
            status = Status(UNKNOWN, f"status could not be read this time: {error}", "read-failed")
        return ReadResult(id_, status_outputs(inputs, status), inputs)

    def delete(self, _id: str, _props: dict) -> None:
        return None
