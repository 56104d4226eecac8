"""Read one model's objects from the cluster and project its status.

The healthy path costs three API calls (Deployment, pods, EndpointSlices) whatever the replica
count; events and log tails are read only for the pod a diagnosis names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

from components.compile.common import MODEL_LABEL

from . import kube
from .projection import (
    ERROR, RETRYING_REASONS, UNKNOWN, Observation, Status, job_failed, log_tail, pods_needing_logs, project_status,
)
from .transience import DEFAULT_RESTART_THRESHOLD


@dataclass(frozen=True)
class ModelRef:
    namespace: str
    model: str
    deployment: str
    service: str
    puller_job: str = ""
    pending_timeout_seconds: int = 900
    restart_threshold: int = DEFAULT_RESTART_THRESHOLD


def read_optional(clients: kube.Clients, fn, *args, **kwargs) -> Optional[dict]:
    try:
        return kube.to_dict(clients, kube.call(clients, fn, *args, **kwargs))
    except Exception as error:  # noqa: BLE001
        if kube.is_not_found(error):
            return None
        raise


def read_logs(clients: kube.Clients, namespace: str, pod: str) -> str:
    try:
        text = kube.call(clients, clients.core.read_namespaced_pod_log, pod, namespace, tail_lines=40)
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


def observe(clients: kube.Clients, ref: ModelRef, now: Optional[datetime] = None) -> Observation:
    observation = Observation(model=ref.model, pending_timeout_seconds=ref.pending_timeout_seconds,
                              restart_threshold=ref.restart_threshold, now=now or datetime.now(timezone.utc))
    observation.deployment = read_optional(clients, clients.apps.read_namespaced_deployment, ref.deployment, ref.namespace)
    pods = kube.call(clients, clients.core.list_namespaced_pod, ref.namespace, label_selector=f"{MODEL_LABEL}={ref.model}")
    observation.pods = [kube.to_dict(clients, p) for p in pods.items]
    slices = kube.call(clients, clients.discovery.list_namespaced_endpoint_slice, ref.namespace,
                       label_selector=f"kubernetes.io/service-name={ref.service}")
    observation.endpoint_slices = [kube.to_dict(clients, s) for s in slices.items]
    if observation.deployment is None and ref.puller_job:
        observation.puller_job = read_optional(clients, clients.batch.read_namespaced_job, ref.puller_job, ref.namespace)
    return observation


def add_evidence(clients: kube.Clients, namespace: str, observation: Observation, pod: str) -> None:
    names = pods_needing_logs(observation)
    observation.logs = {name: read_logs(clients, namespace, name) for name in names}
    observation.events = read_events(clients, namespace, [pod, *names])


def current_status(clients: kube.Clients, ref: ModelRef, now: Optional[datetime] = None) -> Status:
    """The model's status now; UNKNOWN (never a guess) when the cluster cannot be read."""
    try:
        observation = observe(clients, ref, now)
        status = project_status(observation)
        # A pod still retrying is read with its evidence too: its log tail or its `Failed to pull`
        # event can make the cause definitive (providers/transience.py).
        if status.state == ERROR or status.reason in RETRYING_REASONS or job_failed(observation.puller_job):
            add_evidence(clients, ref.namespace, observation, status.pod)
            status = project_status(observation)
        return status
    except Exception as error:  # noqa: BLE001 - any failure to read is UNKNOWN
        return Status(UNKNOWN, f"status could not be read this time: {type(error).__name__}: {str(error)[:300]}", "read-failed")
