"""Read one model from the cluster and project its status: the two observers.

A model's status is read by one of two observers, picked by ``observer_for`` from its status
props: ``ModelRef`` reads the raw objects (vLLM, NIM raw: Deployment, pods, the Service's
EndpointSlices, the puller Job), ``OperatorRef`` reads an operator-path NIM model (its NIMCache
and NIMService, then the objects the operator renders). Both hand the shared diagnostics an
``Observation`` (``core``), so ``current_status`` and the wait loop (``status``) are one code
path for both.

The healthy raw path costs three API calls (Deployment, pods, EndpointSlices) whatever the replica
count; events and log tails are read only for the pod a diagnosis names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Optional, Union

from contract.labels import (
    COMPONENT_LABEL,
    LWS_GROUP,
    LWS_NAME_LABEL,
    LWS_PLURAL,
    LWS_VERSION,
    MODEL_LABEL,
    NIM_CACHE_PLURAL,
    NIM_GROUP,
    NIM_POD_SELECTOR_LABEL,
    NIM_SERVICE_PLURAL,
    NIM_VERSION,
    SERVER_COMPONENT,
)
from contract.props import GroupObjects, StatusProps
from contract.targets import SERVICE_NAME_LABEL

from . import kube
from .group_projection import GroupObservation, group_rollout_complete, groups_of, project_group_status
from .nim_projection import NimObservation, project_nim_status
from .projection import (
    ERROR,
    RETRYING_REASONS,
    UNKNOWN,
    Observation,
    Status,
    crash_log_source,
    job_failed,
    log_tail,
    pods_needing_logs,
    project_status,
    rollout_complete,
)
from .transience import DEFAULT_RESTART_THRESHOLD


@dataclass(frozen=True)
class ModelRef:
    """The raw path's observer (vLLM, NIM raw)."""

    namespace: str
    model: str
    deployment: str
    service: str
    puller_job: str = ""
    pending_timeout_seconds: int = 900
    restart_threshold: int = DEFAULT_RESTART_THRESHOLD

    def observe(self, clients: kube.Clients, now: Optional[datetime] = None) -> Observation:
        seen = Observation(model=self.model, pending_timeout_seconds=self.pending_timeout_seconds,
                           restart_threshold=self.restart_threshold, now=now or datetime.now(UTC))
        seen.deployment = read_optional(clients, clients.apps.read_namespaced_deployment, self.deployment, self.namespace)
        pods = kube.call(clients, clients.core.list_namespaced_pod, self.namespace,
                         label_selector=f"{MODEL_LABEL}={self.model}")
        seen.pods = [kube.to_dict(clients, p) for p in pods.items]
        seen.endpoint_slices = _slices(clients, self.namespace, self.service)
        if seen.deployment is None and self.puller_job:
            seen.puller_job = read_optional(clients, clients.batch.read_namespaced_job, self.puller_job, self.namespace)
        return seen

    def core(self, seen: Observation) -> Observation:
        return seen

    def project(self, seen: Observation) -> Status:
        return project_status(seen)

    def complete(self, seen: Observation, min_replicas: Optional[int] = None) -> bool:
        return rollout_complete(seen.deployment, min_replicas)


@dataclass(frozen=True)
class OperatorRef:
    """The NIM operator path's observer: the custom resources, then what the operator rendered."""

    namespace: str
    model: str
    nim_service: str
    nim_cache: str
    pending_timeout_seconds: int = 900
    restart_threshold: int = DEFAULT_RESTART_THRESHOLD
    # multiNode: the operator's LeaderWorkerSet (``<nim_service>-lws``) and its group size.
    leader_worker_set: str = ""
    group_size: int = 0

    def observe(self, clients: kube.Clients, now: Optional[datetime] = None) -> NimObservation:
        namespace, service = self.namespace, self.nim_service
        core = Observation(model=self.model, now=now or datetime.now(UTC),
                           pending_timeout_seconds=self.pending_timeout_seconds,
                           restart_threshold=self.restart_threshold)
        seen = NimObservation(model=self.model, service_name=service, cache_name=self.nim_cache, core=core)
        read_custom = clients.custom.get_namespaced_custom_object
        seen.cache = read_optional(clients, read_custom, NIM_GROUP, NIM_VERSION, namespace, NIM_CACHE_PLURAL, self.nim_cache)
        seen.service = read_optional(clients, read_custom, NIM_GROUP, NIM_VERSION, namespace, NIM_SERVICE_PLURAL, service)
        if seen.service is None:
            return seen
        if self.leader_worker_set:
            seen.group = self._observe_group(clients, core)
            return seen
        # The operator names its Deployment and Service after the NIMService and selects pods by `app`.
        core.deployment = read_optional(clients, clients.apps.read_namespaced_deployment, service, namespace)
        pods = kube.call(clients, clients.core.list_namespaced_pod, namespace,
                         label_selector=f"{NIM_POD_SELECTOR_LABEL}={service}")
        core.pods = [_as_server_pod(kube.to_dict(clients, p)) for p in pods.items]
        core.endpoint_slices = _slices(clients, namespace, service)
        return seen

    def _observe_group(self, clients: kube.Clients, core: Observation) -> GroupObservation:
        """A multi-node NIMService's LeaderWorkerSet, every pod of it and its events. The operator
        labels only leader pods with the NIMService's labels (v3.1.2 manifests/lws.yaml), so the
        pods are listed by the label the LWS controller puts on every pod of the set; the
        operator's Service (named after the NIMService) selects the leaders."""
        namespace, name = self.namespace, self.leader_worker_set
        group = GroupObservation(self.model, name, self.group_size, core=core)
        group.leader_worker_set = read_optional(clients, clients.custom.get_namespaced_custom_object, LWS_GROUP,
                                                LWS_VERSION, namespace, LWS_PLURAL, name)
        pods = kube.call(clients, clients.core.list_namespaced_pod, namespace,
                         label_selector=f"{LWS_NAME_LABEL}={name}")
        core.pods = [_as_server_pod(kube.to_dict(clients, p)) for p in pods.items]
        core.endpoint_slices = _slices(clients, namespace, self.nim_service)
        if group.leader_worker_set is not None:
            group.lws_events = read_events(clients, namespace, [name])
        return group

    def core(self, seen: NimObservation) -> Observation:
        return seen.core

    def project(self, seen: NimObservation) -> Status:
        return project_nim_status(seen)

    def complete(self, seen: NimObservation, min_replicas: Optional[int] = None) -> bool:
        if seen.group is not None:
            return group_rollout_complete(seen.group.leader_worker_set, groups_of(seen.group))
        return rollout_complete(seen.core.deployment, min_replicas)


@dataclass(frozen=True)
class GroupRef:
    """A multi-node model's observer: its LeaderWorkerSet, every pod of its groups, the leaders'
    EndpointSlices, and the LWS's events (a group the controller recreated)."""

    namespace: str
    model: str
    leader_worker_set: str
    service: str
    group_size: int
    puller_job: str = ""
    pending_timeout_seconds: int = 900
    restart_threshold: int = DEFAULT_RESTART_THRESHOLD

    def observe(self, clients: kube.Clients, now: Optional[datetime] = None) -> GroupObservation:
        core = Observation(model=self.model, pending_timeout_seconds=self.pending_timeout_seconds,
                           restart_threshold=self.restart_threshold, now=now or datetime.now(UTC))
        seen = GroupObservation(self.model, self.leader_worker_set, self.group_size, core=core)
        seen.leader_worker_set = read_optional(clients, clients.custom.get_namespaced_custom_object, LWS_GROUP,
                                               LWS_VERSION, self.namespace, LWS_PLURAL, self.leader_worker_set)
        pods = kube.call(clients, clients.core.list_namespaced_pod, self.namespace,
                         label_selector=f"{MODEL_LABEL}={self.model}")
        core.pods = [kube.to_dict(clients, p) for p in pods.items]
        core.endpoint_slices = _slices(clients, self.namespace, self.service)
        if seen.leader_worker_set is None:
            if self.puller_job:
                core.puller_job = read_optional(clients, clients.batch.read_namespaced_job, self.puller_job, self.namespace)
        else:
            seen.lws_events = read_events(clients, self.namespace, [self.leader_worker_set])
        return seen

    def core(self, seen: GroupObservation) -> Observation:
        return seen.core

    def project(self, seen: GroupObservation) -> Status:
        return project_group_status(seen)

    def complete(self, seen: GroupObservation, min_replicas: Optional[int] = None) -> bool:
        return group_rollout_complete(seen.leader_worker_set, groups_of(seen))


Observer = Union[ModelRef, OperatorRef, GroupRef]


def observer_for(props: StatusProps) -> Observer:
    objects = props.objects
    threshold = props.restart_threshold or DEFAULT_RESTART_THRESHOLD
    if isinstance(objects, GroupObjects):
        # int(): the engine hands numbers back as floats.
        return GroupRef(props.namespace, props.model, objects.leader_worker_set, objects.service,
                        int(objects.group_size), objects.puller_job, props.pending_timeout_seconds, threshold)
    if props.on_operator:
        return OperatorRef(props.namespace, props.model, objects.nim_service, objects.nim_cache,
                           props.pending_timeout_seconds, threshold, objects.leader_worker_set or "",
                           int(objects.group_size or 0))
    return ModelRef(props.namespace, props.model, objects.deployment, objects.service, objects.puller_job,
                    props.pending_timeout_seconds, threshold)


def read_optional(clients: kube.Clients, fn, *args, **kwargs) -> Optional[dict]:
    try:
        return kube.to_dict(clients, kube.call(clients, fn, *args, **kwargs))
    except Exception as error:
        if kube.is_not_found(error):
            return None
        raise


def read_logs(clients: kube.Clients, namespace: str, pod: str, container: str = "", previous: bool = False) -> str:
    """The tail of a pod's log: of ``container`` (else the pod's only or default one), of its
    previous attempt when ``previous`` (the one that crashed, once the kubelet restarted it)."""
    where = {**({"container": container} if container else {}), **({"previous": True} if previous else {})}
    try:
        text = kube.call(clients, clients.core.read_namespaced_pod_log, pod, namespace, tail_lines=40, **where)
        return log_tail(text if isinstance(text, str) else str(text))
    except Exception as error:  # noqa: BLE001 - a log is evidence, not a requirement
        return f"(log unavailable: {getattr(error, 'reason', None) or error})"


def read_events(clients: kube.Clients, namespace: str, names: list[str]) -> list[dict]:
    events: list[dict] = []
    for name in dict.fromkeys(names):
        if not name:
            continue
        try:
            listing = kube.call(clients, clients.core.list_namespaced_event, namespace,
                                field_selector=f"involvedObject.name={name}")
        except Exception:  # noqa: BLE001 - events are evidence, not the state: a diagnosis stands without them
            continue
        events += [kube.to_dict(clients, e) for e in listing.items]
    return events


def _slices(clients: kube.Clients, namespace: str, service: str) -> list[dict]:
    slices = kube.call(clients, clients.discovery.list_namespaced_endpoint_slice, namespace,
                       label_selector=f"{SERVICE_NAME_LABEL}={service}")
    return [kube.to_dict(clients, s) for s in slices.items]


def _as_server_pod(pod: dict) -> dict:
    """The operator's pods, labelled as server pods for the shared diagnostics (copy, not edit)."""
    meta = dict(pod.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), COMPONENT_LABEL: SERVER_COMPONENT}
    return {**pod, "metadata": meta}


def add_evidence(clients: kube.Clients, namespace: str, observation: Observation, pod: str) -> None:
    names = pods_needing_logs(observation)
    pods = {(p.get("metadata") or {}).get("name"): p for p in observation.pods}
    observation.logs = {name: read_logs(clients, namespace, name, *(crash_log_source(pods.get(name) or {}) or ()))
                        for name in names}
    observation.events = read_events(clients, namespace, [pod, *names])


def current_status(clients: kube.Clients, ref: Observer, now: Optional[datetime] = None) -> Status:
    """The model's status now; UNKNOWN (never a guess) when the cluster cannot be read."""
    try:
        seen: Any = ref.observe(clients, now)
        status = ref.project(seen)
        core = ref.core(seen)
        # A pod still retrying is read with its evidence too: its log tail or its `Failed to pull`
        # event can make the cause definitive (providers/transience.py).
        if status.state == ERROR or status.reason in RETRYING_REASONS or job_failed(core.puller_job):
            # The evidence the diagnosis quotes (log tail, events), then the diagnosis again with it.
            add_evidence(clients, ref.namespace, core, status.pod)
            status = ref.project(seen)
        return status
    except Exception as error:  # noqa: BLE001 - any failure to read is UNKNOWN
        return Status(UNKNOWN, f"status could not be read this time: {type(error).__name__}: {str(error)[:300]}", "read-failed")
