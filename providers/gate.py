"""WeightsGate: the serving Deployment depends on it, so serving starts only on complete weights.

create: wait until the puller Job of *this* model source succeeded (a failed one raises the
classified reason with its log tail; the Job is kept for its logs), then hand the volume off:
delete the finished Job's pods, so a ReadWriteOnce volume is free for the server (a server on
another node would otherwise wait on Multi-Attach). The Job itself is kept as the record of the
pull: deleting an object Pulumi manages is drift, and a refresh would recreate it and re-pull.

Concurrency: the Python provider host serves four calls at once, so a gate may queue behind
others. Downloads do not: the Jobs are created by the Kubernetes provider as soon as their
volume exists and run in parallel in the cluster; a queued gate finds its Job already done.
"""

from __future__ import annotations

import time
from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from . import kube
from .projection import diagnose_puller_failure, job_failed, job_succeeded

# A change of any of these means other weights: replace the gate (and wait again).
REPLACE_ON = ("namespace", "model", "weights_claim", "puller_job", "model_source")
HANDOFF_TIMEOUT_SECONDS = 120
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's marker for a preview-time unknown


class WeightsNotReady(Exception):
    """The weights of a model could not be made ready; the message says why and what to do."""


def _target(props: dict) -> kube.Target:
    return kube.Target(props.get("kubeconfig") or None, props.get("context") or None)


def _puller_pods(clients: kube.Clients, props: dict) -> list[Any]:
    listing = kube.call(clients, clients.core.list_namespaced_pod, props["namespace"],
                        label_selector=f"batch.kubernetes.io/job-name={props['puller_job']}")
    return listing.items


def wait_for_job(clients: kube.Clients, props: dict, sleep=time.sleep, clock=time.monotonic) -> dict:
    deadline = clock() + float(props.get("deadline_seconds") or 7200)
    poll = float(props.get("poll_seconds") or 0.5)
    while True:
        try:
            job = kube.to_dict(clients, kube.call(
                clients, clients.batch.read_namespaced_job, props["puller_job"], props["namespace"]))
        except kube.ClusterUnreachable:
            # An API outage longer than one call's retries is not a failed pull: keep waiting
            # until the pull's own deadline.
            if clock() > deadline:
                raise
            sleep(poll)
            continue
        except Exception as error:  # noqa: BLE001
            if not kube.is_not_found(error):
                raise
            raise WeightsNotReady(
                f"model {props['model']}: puller Job {props['puller_job']} does not exist; "
                "run `pulumi refresh` then `pulumi up` to recreate it"
            ) from None
        if job_succeeded(job):
            return job
        if job_failed(job):
            from .observe import read_events, read_logs

            # Newest last (the API lists by name): its log is the one the diagnosis quotes.
            pods = sorted((kube.to_dict(clients, p) for p in _puller_pods(clients, props)),
                          key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
            names = [(p.get("metadata") or {}).get("name", "") for p in pods]
            logs = {name: read_logs(clients, props["namespace"], name) for name in names[-1:]}
            status = diagnose_puller_failure(job, pods, logs, read_events(clients, props["namespace"], names[-1:]))
            raise WeightsNotReady(
                f"model {props['model']}: {status.message}\n"
                f"reason: {status.reason}\nlog tail of {status.details.get('pod') or 'the puller'}:\n"
                f"{status.details.get('logTail') or '(none)'}\n"
                f"The failed Job is kept for its logs; fix the config and run `pulumi up` again."
            )
        if clock() > deadline:
            raise WeightsNotReady(
                f"model {props['model']}: weights not ready after {props.get('deadline_seconds')}s "
                f"(Job {props['puller_job']} still running); raise platform.pullTimeoutSeconds"
            )
        sleep(poll)


def hand_off(clients: kube.Clients, props: dict, sleep=time.sleep, clock=time.monotonic) -> int:
    """Delete the finished puller's pods and wait until none remains. Returns how many went."""
    deadline = clock() + HANDOFF_TIMEOUT_SECONDS
    deleted = 0
    while True:
        pods = _puller_pods(clients, props)
        if not pods:
            return deleted
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                try:
                    kube.call(clients, clients.core.delete_namespaced_pod, pod.metadata.name,
                              props["namespace"], grace_period_seconds=0)
                    deleted += 1
                except Exception as error:  # noqa: BLE001
                    if not kube.is_not_found(error):
                        raise
        if clock() > deadline:
            raise WeightsNotReady(
                f"model {props['model']}: puller pods of {props['puller_job']} still hold the weights "
                f"volume after {HANDOFF_TIMEOUT_SECONDS}s; check for finalizers on them"
            )
        sleep(0.25)


def outputs(props: dict, job: dict) -> dict:
    status = job.get("status") or {}
    return {**props, "weights_ready": True, "completed_at": status.get("completionTime") or ""}


class WeightsGateProvider(ResourceProvider):
    """No state on the instance: it is pickled into the stack's state."""

    serialize_as_secret_always = False

    def create(self, props: dict) -> CreateResult:
        clients = kube.connect(_target(props))
        job = wait_for_job(clients, props)
        hand_off(clients, props)
        return CreateResult(f"{props['namespace']}/{props['weights_claim']}", outputs(props, job))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in REPLACE_ON if news.get(k) == UNKNOWN or olds.get(k) != news.get(k)]
        changed = replaces or [k for k in news if k != "__provider" and olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, olds: dict, news: dict) -> UpdateResult:
        # Only settings that do not name other weights changed (deadline, poll): keep the record.
        kept = {k: olds[k] for k in ("weights_ready", "completed_at") if k in olds}
        return UpdateResult({**news, **kept})

    def read(self, id_: str, props: dict) -> ReadResult:
        """Refresh: the gate stands while its weights volume and its Job's success stand."""
        clients = kube.connect(_target(props))
        from .observe import read_optional

        claim = read_optional(clients, clients.core.read_namespaced_persistent_volume_claim,
                              props["weights_claim"], props["namespace"])
        job = read_optional(clients, clients.batch.read_namespaced_job, props["puller_job"], props["namespace"])
        if claim is None or not job_succeeded(job):
            return ReadResult(None, {})  # gone: the next `up` pulls and gates again
        return ReadResult(id_, props)

    def delete(self, _id: str, _props: dict) -> None:
        # The gate is a record; the volume and the Job are deleted by their own resources.
        return None
