"""WeightsGate: the serving Deployment depends on it, so serving starts only on complete weights.

create: wait until the puller Job of *this* model source succeeded (a failed one raises the
classified reason with its log tail; the Job is kept for its logs), then hand the volume off:
delete the finished Job's pods, so a ReadWriteOnce volume is free for the server (a server on
another node would otherwise wait on Multi-Attach). The Job itself is kept as the record of the
pull: deleting an object Pulumi manages is drift, and a refresh would recreate it and re-pull.

Re-pull: a Job's outcome stands for the weights only if it ran on *this* volume and its failure
was not already reported. On create the gate re-runs the puller (deletes the Job and re-applies
it exactly as Pulumi applied it, under Pulumi's field manager) when the Job was created before
the weights volume (the volume was deleted and re-created: refresh + up after it went missing), or
when the Job failed in an earlier `pulumi up` that reported it (marked with FAILURE_REPORTED):
re-running `pulumi up` after fixing what was outside the Job spec (a token, the hub, a quota) is
the retry, with no manual cleanup. A failure seen for the first time is reported, never retried.

Waiting: on a watch of the Job from the version last read, so the gate returns as soon as the Job
controller marks the Job done; a read and the puller pod check every POD_CHECK_SECONDS; polling
every poll interval when the watch is refused or cut (watch_for_outcome).

Concurrency: the Python provider host serves four calls at once, so a gate may queue behind
others. Downloads do not: the Jobs are created by the Kubernetes provider as soon as their
volume exists and run in parallel in the cluster; a queued gate finds its Job already done.
So a gate's work after the Job is done is kept short (no poll interval, no sleep after deleting
the pods): the queued gates behind it start that much sooner.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from contract.props import GateProps

from . import kube, observe
from .failures import Reported, reported
from .inputs import UNKNOWN_INPUT as UNKNOWN
from .projection import diagnose_puller_failure, job_failed, job_succeeded
from .transience import definitive_waiting

# A change of any of these means other weights: replace the gate (and wait again).
REPLACE_ON = GateProps.WEIGHTS_KEYS
HANDOFF_TIMEOUT_SECONDS = 120
# How often a running pull's pods are checked for a cause the Job would only report at its
# deadline (an image that does not exist, a missing token Secret: the pod waits, never fails).
POD_CHECK_SECONDS = 5.0
RERUN_TIMEOUT_SECONDS = 120
# Set on a failed Job once a gate has reported its failure: the next `pulumi up` re-runs it.
FAILURE_REPORTED = "llm-serving.dev/pull-failure-reported"
GATE_FIELD_MANAGER = "llm-serving-weights-gate"


class WeightsNotReady(Reported):
    """The weights of a model could not be made ready; the message says why and what to do."""


def _puller_pods(clients: kube.Clients, props: GateProps) -> list[Any]:
    listing = kube.call(clients, clients.core.list_namespaced_pod, props.namespace,
                        label_selector=f"batch.kubernetes.io/job-name={props.puller_job}")
    return listing.items


def wait_for_job(clients: kube.Clients, props: GateProps, sleep=time.sleep, clock=time.monotonic,
                 rerun: bool = True) -> dict:
    deadline = clock() + float(props.deadline_seconds or 7200)
    poll = float(props.poll_seconds or 0.5)
    checked = not rerun
    next_pod_check = clock() + POD_CHECK_SECONDS
    job: Optional[dict] = None  # the Job's latest version: from a read, or from the watch
    while True:
        if job is None:
            try:
                job = kube.to_dict(clients, kube.call(
                    clients, clients.batch.read_namespaced_job, props.puller_job, props.namespace))
                if not checked:
                    # Once, on the first read: an outcome that cannot stand for these weights is re-run.
                    why = rerun_reason(clients, props, job)
                    checked = True
                    if why:
                        rerun_job(clients, props, job, why, sleep=sleep, clock=clock)
                        job = None
                        continue
            except kube.ClusterUnreachable:
                # An API outage longer than one call's retries is not a failed pull: keep waiting
                # until the pull's own deadline.
                if clock() > deadline:
                    raise
                sleep(poll)
                continue
            except Exception as error:
                if not kube.is_not_found(error):
                    raise
                raise WeightsNotReady(
                    f"model {props.model}: puller Job {props.puller_job} does not exist; "
                    "run `pulumi refresh` then `pulumi up` to recreate it"
                ) from None
        if job_succeeded(job):
            return job
        if job_failed(job):
            # Newest last (the API lists by name): its log is the one the diagnosis quotes.
            pods = sorted((kube.to_dict(clients, p) for p in _puller_pods(clients, props)),
                          key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
            names = [(p.get("metadata") or {}).get("name", "") for p in pods]
            logs = {name: observe.read_logs(clients, props.namespace, name) for name in names[-1:]}
            status = diagnose_puller_failure(job, pods, logs, observe.read_events(clients, props.namespace, names[-1:]))
            mark_reported(clients, props, status.reason)
            raise WeightsNotReady(
                f"model {props.model}: {status.message}\n"
                f"reason: {status.reason}\nlog tail of {status.details.get('pod') or 'the puller'}:\n"
                f"{status.details.get('logTail') or '(none)'}\n"
                f"The failed Job is kept for its logs; fix the cause and run `pulumi up` again: an unchanged "
                f"puller is re-run, a changed source starts a new one."
            )
        if clock() >= next_pod_check:
            next_pod_check = clock() + POD_CHECK_SECONDS
            stuck = puller_cannot_start(clients, props)
            if stuck:
                raise WeightsNotReady(stuck)
        if clock() > deadline:
            raise WeightsNotReady(
                f"model {props.model}: weights not ready after {props.deadline_seconds}s "
                f"(Job {props.puller_job} still running); raise platform.pullTimeoutSeconds"
            )
        job = watch_for_outcome(clients, props, job, min(next_pod_check, deadline) - clock(),
                                sleep=sleep, clock=clock, poll=poll)


def watch_for_outcome(clients: kube.Clients, props: GateProps, job: dict, seconds: float,
                      sleep=time.sleep, clock=time.monotonic, poll: float = 0.5) -> Optional[dict]:
    """Wait on a watch of the running Job, from the version just seen, for up to ``seconds``:
    the Job as the event that finished it showed it (no read after it), else None and the caller
    reads the Job again: the watch timed out (time for the pod check), its stream ended, its
    version expired (410: a fresh read gives a current one) or the Job was deleted (the read says
    so). The read stays the source of truth; the watch only ends the wait as soon as the Job
    controller marks the Job done, instead of up to a poll interval later (plus the reads of 8
    gates polling at once, which the one provider host serves four at a time). A watch that fails
    or ends early (an identity without the ``watch`` verb, a proxy cutting streams, an API outage,
    a 410 on a version just read) waits a poll interval first: polling, as before, never a tight
    loop of reads and watches.
    """
    version = str((job.get("metadata") or {}).get("resourceVersion") or "")
    started = clock()
    if version:
        events = kube.watch_named(clients, clients.batch.list_namespaced_job, props.puller_job,
                                  props.namespace, version, seconds)
        try:
            for kind, obj in events:
                if kind in ("ERROR", "DELETED"):
                    break
                if kind in ("ADDED", "MODIFIED") and (obj.get("metadata") or {}).get("name") == props.puller_job \
                        and (job_succeeded(obj) or job_failed(obj)):
                    return obj
        except Exception:  # noqa: BLE001 - a failed watch is a slower wait, never a verdict
            pass
        finally:
            events.close()  # the connection goes back to the pool now, not when collected
    if clock() - started < 0.5:  # a normal end comes after the watch's timeout, at least 1 s
        sleep(poll)
    return None


def puller_cannot_start(clients: kube.Clients, props: GateProps) -> str:
    """Why a pod of the running puller can never start ('' when it may): a DEFINITIVE waiting
    state (providers/transience.py). Transient ones (a registry timeout) are left to the kubelet's
    retries and the Job's own deadline. Best effort: a failed read is not a verdict."""
    try:
        pods = [kube.to_dict(clients, p) for p in _puller_pods(clients, props)]
        for pod in pods:
            name = (pod.get("metadata") or {}).get("name", "")
            status = pod.get("status") or {}
            containers = list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])
            found = definitive_waiting(pod)
            if found is None and any(((c.get("state") or {}).get("waiting") or {}).get("reason") == "ImagePullBackOff"
                                     for c in containers):
                # The back-off hides the runtime's answer; the kubelet's Failed event has it (newest last).
                events = sorted(observe.read_events(clients, props.namespace, [name]),
                                key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
                found = definitive_waiting(pod, [e.get("message") or "" for e in events])
            if found:
                waiting, verdict = found
                return (f"model {props.model}: the puller pod {name} cannot start its container "
                        f"{waiting.get('container')} ({waiting.get('image')}): {waiting.get('reason')} "
                        f"{waiting.get('message') or ''}; {verdict.hint}\nreason: {verdict.cause}\n"
                        f"The Job is kept; fix the cause and run `pulumi up` again.")
    except Exception:  # noqa: BLE001
        return ""
    return ""


def mark_reported(clients: kube.Clients, props: GateProps, reason: str) -> None:
    """Remember on the failed Job that its failure was reported (best effort: unmarked, the next
    `up` reports it again and marks it then)."""
    body = {"metadata": {"annotations": {FAILURE_REPORTED: reason or "failed"}}}
    try:
        kube.call(clients, clients.batch.patch_namespaced_job, props.puller_job, props.namespace, body,
                  field_manager=GATE_FIELD_MANAGER, _content_type="application/merge-patch+json")
    except Exception:  # noqa: BLE001
        pass


def _time(value: Any):
    from datetime import datetime

    if not value:
        return None
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def rerun_reason(clients: kube.Clients, props: GateProps, job: dict) -> str:
    """Why the Job's outcome cannot stand for the weights on the volume now ('' when it can)."""
    meta = job.get("metadata") or {}
    if job_failed(job) and FAILURE_REPORTED in (meta.get("annotations") or {}):
        return "its failure was reported by an earlier `pulumi up`"
    claim = observe.read_optional(clients, clients.core.read_namespaced_persistent_volume_claim,
                                  props.weights_claim, props.namespace)
    job_created = _time(meta.get("creationTimestamp"))
    claim_created = _time(((claim or {}).get("metadata") or {}).get("creationTimestamp"))
    if job_created and claim_created and job_created < claim_created:
        return f"it ran before the weights volume {props.weights_claim} was re-created"
    return ""


def _owned(value: Any, fields: dict) -> Any:
    """The part of ``value`` a managedFields ``fieldsV1`` tree names (list order kept)."""
    if not fields or set(fields) == {"."}:
        return value
    if isinstance(value, dict):
        return {key[2:]: _owned(value[key[2:]], sub) for key, sub in fields.items()
                if key.startswith("f:") and key[2:] in value}
    if isinstance(value, list):
        import json

        keyed = [(json.loads(key[2:]), sub) for key, sub in fields.items() if key.startswith("k:")]
        values = [json.loads(key[2:]) for key in fields if key.startswith("v:")]
        indexed = {int(key[2:]): sub for key, sub in fields.items() if key.startswith("i:")}
        kept = []
        for index, item in enumerate(value):
            if item in values:
                kept.append(item)
            elif index in indexed:
                kept.append(_owned(item, indexed[index]))
            else:
                for key, sub in keyed:
                    if isinstance(item, dict) and all(item.get(k) == v for k, v in key.items()):
                        kept.append({**_owned(item, sub), **key})
                        break
        return kept
    return value


def applied_manifest(job: dict) -> tuple[str, dict]:
    """The Job as its owner applied it: (field manager, apply body). Pulumi's server-side apply
    fields when it has them, else the live spec without what the API server generated."""
    meta = job.get("metadata") or {}
    applies = [m for m in meta.get("managedFields") or [] if m.get("operation") == "Apply" and not m.get("subresource")]
    applies.sort(key=lambda m: not str(m.get("manager", "")).startswith("pulumi-kubernetes"))
    head = {"apiVersion": "batch/v1", "kind": "Job"}
    if applies and applies[0].get("fieldsV1"):
        body = _owned({k: v for k, v in job.items() if k != "status"}, applies[0]["fieldsV1"])
        body.setdefault("metadata", {}).update(name=meta["name"], namespace=meta["namespace"])
        annotations = (body["metadata"].get("annotations") or {})
        annotations.pop(FAILURE_REPORTED, None)
        return applies[0]["manager"], {**head, **body}
    generated = ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name")
    spec = {k: v for k, v in (job.get("spec") or {}).items() if k not in ("selector", "manualSelector")}
    template = dict(spec.get("template") or {})
    template_meta = dict(template.get("metadata") or {})
    template_meta["labels"] = {k: v for k, v in (template_meta.get("labels") or {}).items() if k not in generated}
    spec["template"] = {**template, "metadata": template_meta}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != FAILURE_REPORTED}
    return GATE_FIELD_MANAGER, {**head, "metadata": {
        "name": meta["name"], "namespace": meta["namespace"], "labels": meta.get("labels") or {},
        "annotations": annotations}, "spec": spec}


def rerun_job(clients: kube.Clients, props: GateProps, job: dict, why: str,
              sleep=time.sleep, clock=time.monotonic) -> None:
    """Delete the Job (its pods first) and apply it again as its owner did: a fresh pull."""
    manager, body = applied_manifest(job)
    name, namespace = props.puller_job, props.namespace
    deadline = clock() + RERUN_TIMEOUT_SECONDS
    deleted = False
    while True:
        try:  # an API outage here is waited out like one during the pull: never half a re-run
            if not deleted:
                try:
                    kube.call(clients, clients.batch.delete_namespaced_job, name, namespace,
                              propagation_policy="Foreground")
                except Exception as error:
                    if not kube.is_not_found(error):
                        raise
                deleted = True
            if observe.read_optional(clients, clients.batch.read_namespaced_job, name, namespace) is None:
                kube.call(clients, clients.batch.patch_namespaced_job, name, namespace, body, field_manager=manager,
                          force=True, _content_type="application/apply-patch+yaml")
                return
        except kube.ClusterUnreachable:
            pass
        if clock() > deadline:
            raise WeightsNotReady(
                f"model {props.model}: re-running the puller ({why}): Job {name} still exists "
                f"{RERUN_TIMEOUT_SECONDS}s after its deletion; check for finalizers on it and its pods"
            )
        sleep(0.5)


def hand_off(clients: kube.Clients, props: GateProps, sleep=time.sleep, clock=time.monotonic) -> int:
    """Delete the finished puller's pods and wait until none remains. Returns how many went."""
    deadline = clock() + HANDOFF_TIMEOUT_SECONDS
    deleted = 0
    while True:
        pods = _puller_pods(clients, props)
        if not pods:
            return deleted
        asked = 0
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                try:
                    kube.call(clients, clients.core.delete_namespaced_pod, pod.metadata.name,
                              props.namespace, grace_period_seconds=0)
                    deleted += 1
                    asked += 1
                except Exception as error:
                    if not kube.is_not_found(error):
                        raise
        if clock() > deadline:
            raise WeightsNotReady(
                f"model {props.model}: puller pods of {props.puller_job} still hold the weights "
                f"volume after {HANDOFF_TIMEOUT_SECONDS}s; check for finalizers on them"
            )
        if not asked:
            # A finished pod deleted with no grace period and no finalizer is gone at once: list
            # again now; only pods already terminating are waited for (a quarter second each round).
            sleep(0.25)


def outputs(props: dict, job: dict) -> dict:
    status = job.get("status") or {}
    return {**props, "weights_ready": True, "completed_at": status.get("completionTime") or ""}


class WeightsGateProvider(ResourceProvider):
    """No state on the instance: it is pickled into the stack's state."""

    serialize_as_secret_always = False

    @reported
    def create(self, props: dict) -> CreateResult:
        wanted = GateProps.from_dict(props)
        clients = kube.connect(wanted.cluster.kube())
        job = wait_for_job(clients, wanted)
        hand_off(clients, wanted)
        return CreateResult(f"{wanted.namespace}/{wanted.weights_claim}", outputs(props, job))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in REPLACE_ON if news.get(k) == UNKNOWN or olds.get(k) != news.get(k)]
        changed = replaces or [k for k in news if k != "__provider" and olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=False)

    @reported
    def update(self, _id: str, olds: dict, news: dict) -> UpdateResult:
        # Only settings that do not name other weights changed (deadline, poll): keep the record.
        kept = {k: olds[k] for k in ("weights_ready", "completed_at") if k in olds}
        return UpdateResult({**news, **kept})

    def read(self, id_: str, props: dict) -> ReadResult:
        """Refresh: the gate stands while its weights volume and its Job's success stand."""
        wanted = GateProps.from_dict(props)
        clients = kube.connect(wanted.cluster.kube())
        claim = observe.read_optional(clients, clients.core.read_namespaced_persistent_volume_claim,
                                      wanted.weights_claim, wanted.namespace)
        job = observe.read_optional(clients, clients.batch.read_namespaced_job, wanted.puller_job, wanted.namespace)
        if claim is None or not job_succeeded(job):
            return ReadResult(None, {})  # gone: the next `up` pulls and gates again
        return ReadResult(id_, props)

    def delete(self, _id: str, _props: dict) -> None:
        # The gate is a record; the volume and the Job are deleted by their own resources.
        return None
